//! What an engine tells the throughput monitor: a post per chunk it transmits, a completion
//! per chunk the peer acknowledges (or the core declares lost), and a transition when a path
//! starts or stops losing chunks.
//!
//! Acknowledgements are per chunk inside the connection core; rather than hook the core, the
//! engine compares each path's acknowledged and lost counts ([`crate::mpt::PathView`]) after
//! every round of progress, so the core is untouched and a monitor that is off costs one
//! branch per round and per chunk. Everything here is sized when the monitor is attached;
//! nothing on the data path allocates.

use ccl_monitor::{CollId, Engine, Op, Publisher, Scope, Transition, Unit, Work};

use crate::mpt::Connection;
use crate::LinkMonitor;

/// Per path: what the monitor has been told so far.
#[derive(Clone, Copy, Debug, Default)]
struct PathMark {
    acked: u64,
    lost: u64,
    /// Chunks posted and not yet completed, and their bytes: an acknowledgement counts for
    /// their mean size (the core does not say which chunk it was).
    open_chunks: u64,
    open_bytes: u64,
    lossy: bool,
}

/// One engine's monitor state (under the engine's lock).
#[derive(Debug)]
pub(super) struct EngineMon {
    publisher: Publisher,
    peer: u32,
    coll: CollId,
    /// This engine's first path number in the monitor's keys (engines' paths do not share
    /// numbers).
    path_base: u16,
    nics: u16,
    paths: Vec<PathMark>,
}

impl EngineMon {
    /// Off: records nothing (and allocates nothing).
    pub(super) fn off(nics: usize) -> Self {
        EngineMon {
            publisher: Publisher::off(),
            peer: 0,
            coll: CollId {
                comm: 0,
                op: Op::Other,
                seq: 0,
            },
            path_base: 0,
            nics: nics.max(1) as u16,
            paths: Vec::new(),
        }
    }

    /// Starts recording for `m` on engine `engine`'s connection; counts so far are the
    /// baseline (nothing before this is reported).
    pub(super) fn attach(&mut self, m: &LinkMonitor, conn: &Connection, engine: usize) {
        self.publisher = m.publisher.clone();
        self.peer = m.peer;
        self.coll = CollId {
            comm: m.comm,
            op: Op::Other,
            seq: 0,
        };
        self.paths = conn
            .paths()
            .map(|v| PathMark {
                acked: v.chunks_acked,
                lost: v.chunks_lost,
                lossy: v.consecutive_losses > 0,
                ..PathMark::default()
            })
            .collect::<Vec<_>>();
        let per_engine = u16::try_from(self.paths.len()).unwrap_or(u16::MAX);
        self.path_base = u16::try_from(engine)
            .unwrap_or(u16::MAX)
            .saturating_mul(per_engine);
    }

    #[inline]
    pub(super) fn is_on(&self) -> bool {
        self.publisher.is_on()
    }

    /// The monitor clock (0 when off).
    #[inline]
    pub(super) fn now_ns(&self) -> u64 {
        self.publisher.now_ns()
    }

    fn work(&self, ts_ns: u64, path: u16, bytes: u64) -> Work {
        Work {
            ts_ns,
            bytes,
            peer: self.peer,
            path: self.path_base.saturating_add(path),
            // Path `i` binds the `i % nics`-th local address (`MptLinkConfig::local_ips`).
            nic: path % self.nics,
            engine: Engine::Mpt,
            unit: Unit::Chunk,
            coll: self.coll,
        }
    }

    /// A chunk of `bytes` left on `path`.
    #[inline]
    pub(super) fn posted(&mut self, ts_ns: u64, path: u16, bytes: u64) {
        let Some(m) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        m.open_chunks += 1;
        m.open_bytes += bytes;
        self.publisher.post(&self.work(ts_ns, path, bytes));
    }

    /// Reports the chunks acknowledged or lost since the last call, and paths that started
    /// or stopped losing chunks.
    pub(super) fn settle(&mut self, conn: &Connection) {
        if !self.is_on() {
            return;
        }
        let now = self.publisher.now_ns();
        for (i, v) in conn.paths().enumerate() {
            let Some(&m) = self.paths.get(i) else { break };
            let path = i as u16;
            let acked = v.chunks_acked.saturating_sub(m.acked);
            let lost = v.chunks_lost.saturating_sub(m.lost);
            if acked + lost > 0 {
                self.complete(now, path, acked, lost);
            }
            let lossy = v.consecutive_losses > 0;
            if lossy != m.lossy {
                self.transition(now, path, lossy);
            }
            if let Some(m) = self.paths.get_mut(i) {
                m.acked = v.chunks_acked;
                m.lost = v.chunks_lost;
                m.lossy = lossy;
            }
        }
    }

    /// One completion per chunk, so the monitor's count of outstanding work stays true;
    /// a lost chunk completes with no bytes (its resend is posted again, on some path).
    fn complete(&mut self, now: u64, path: u16, acked: u64, lost: u64) {
        let Some(m) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        let mean = m.open_bytes.checked_div(m.open_chunks).unwrap_or(0);
        let done = (acked + lost).min(m.open_chunks);
        m.open_chunks -= done;
        m.open_bytes = m.open_bytes.saturating_sub(mean * done);
        if m.open_chunks == 0 {
            m.open_bytes = 0;
        }
        for k in 0..done {
            let bytes = if k < acked { mean } else { 0 };
            self.publisher.complete(&self.work(now, path, bytes));
        }
    }

    fn transition(&self, now: u64, path: u16, lossy: bool) {
        let (from, to, reason) = if lossy {
            ("healthy", "lossy", "chunk declared lost")
        } else {
            ("lossy", "healthy", "chunk acknowledged")
        };
        self.publisher.transition(&Transition {
            ts_ns: now,
            scope: Scope::Path(self.path_base.saturating_add(path)),
            from,
            to,
            reason,
        });
    }
}
