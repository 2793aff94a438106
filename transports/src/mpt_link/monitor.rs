//! What an engine tells the throughput monitor: a post per chunk it transmits, a completion
//! per chunk the peer acknowledges (or the core declares lost), and a transition when a path
//! starts or stops losing chunks.
//!
//! Acknowledgements are per chunk inside the connection core; rather than hook the core, the
//! engine compares each path's acknowledged and lost counts ([`crate::mpt::PathView`]) after
//! every round of progress, so the core is untouched and a monitor that is off costs one
//! branch per round and per chunk. Everything here is sized when the monitor is attached;
//! nothing on the data path allocates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ccl_monitor::{CollId, Engine, Op, Publisher, Scope, Transition, Unit, Work};

use crate::mpt::Connection;
use crate::LinkMonitor;

/// Chunk sizes remembered per path, oldest first; beyond this many chunks in flight on one
/// path the others count for their mean size.
const REMEMBERED: usize = 256;

/// Per path: what the monitor has been told so far.
#[derive(Clone, Debug)]
struct PathMark {
    /// The path's chunks in flight and lost, as of the last round.
    inflight: u32,
    lost: u64,
    acked: u64,
    /// Sizes of the chunks completed as lost (with no bytes), oldest first, at most
    /// `REMEMBERED`, for a late acknowledgement of one (its first copy arrived after all) to
    /// report with its own size: taken oldest first, as acknowledgements come in order
    /// (a mean misstated them by a frame's short last chunk).
    lost_sizes: std::collections::VecDeque<u64>,
    /// Chunks posted since the last round.
    posted: u32,
    /// Sizes and operations ([`CollId::pack`]ed) of the chunks posted and not completed
    /// yet, a ring of `REMEMBERED`: the core says how many chunks of a path were
    /// acknowledged, not which, and a path delivers (nearly) in order, so they are taken
    /// oldest first. A mean would misstate frames' short last chunks (by 10% on 200 kB
    /// frames of 32 KiB chunks).
    sizes: Box<[(u32, u64)]>,
    head: usize,
    len: usize,
    /// Chunks posted while the ring was full, and their bytes; they count for the
    /// operation of the latest.
    spill_chunks: u64,
    spill_bytes: u64,
    spill_op: u64,
    /// The operation of the chunk completed last.
    last_op: u64,
    /// Posts of this round not yet published (one record per path and round), their bytes
    /// and operation.
    round_posts: u32,
    round_bytes: u64,
    round_op: u64,
    lossy: bool,
}

impl PathMark {
    fn new(inflight: u32, (lost, acked): (u64, u64), lossy: bool) -> Self {
        PathMark {
            inflight,
            lost,
            acked,
            lost_sizes: std::collections::VecDeque::new(),
            posted: 0,
            sizes: vec![(0, 0); REMEMBERED].into_boxed_slice(),
            head: 0,
            len: 0,
            spill_chunks: 0,
            spill_bytes: 0,
            spill_op: 0,
            last_op: 0,
            round_posts: 0,
            round_bytes: 0,
            round_op: 0,
            lossy,
        }
    }

    fn push(&mut self, bytes: u32, op: u64) {
        self.posted = self.posted.saturating_add(1);
        if self.len < self.sizes.len() {
            let i = (self.head + self.len) % self.sizes.len();
            self.sizes[i] = (bytes, op);
            self.len += 1;
        } else {
            self.spill_chunks += 1;
            self.spill_bytes += u64::from(bytes);
            self.spill_op = op;
        }
    }

    /// The oldest open chunk's size (and records its operation as the last); `None` when
    /// nothing is open.
    fn pop(&mut self) -> Option<u64> {
        if self.len > 0 {
            let (b, op) = self.sizes[self.head];
            self.head = (self.head + 1) % self.sizes.len();
            self.len -= 1;
            self.last_op = op;
            return Some(u64::from(b));
        }
        let mean = self.spill_bytes.checked_div(self.spill_chunks)?;
        self.spill_chunks -= 1;
        self.spill_bytes -= mean;
        self.last_op = self.spill_op;
        Some(mean)
    }
}

/// One engine's monitor state (under the engine's lock).
#[derive(Debug)]
pub(super) struct EngineMon {
    publisher: Publisher,
    peer: u32,
    /// The communicator's hash.
    comm: u64,
    /// The operation being sent, set by the link ([`crate::Link::begin_op`]).
    op: Option<Arc<AtomicU64>>,
    /// This engine's first path number in the monitor's keys (engines' paths do not share
    /// numbers).
    path_base: u16,
    nics: u16,
    /// Host-wide NIC number of each of the link's NICs (`MptLinkConfig::nic_ids`).
    nic_ids: Vec<u16>,
    paths: Vec<PathMark>,
    /// When this round's first chunk was posted.
    round_ts: u64,
    /// Whether a chunk was posted this round (`round_ts` is set).
    round_open: bool,
}

impl EngineMon {
    /// Off: records nothing (and allocates nothing beyond the NIC numbers, once per engine).
    pub(super) fn off(nics: usize, nic_ids: &[u16]) -> Self {
        EngineMon {
            publisher: Publisher::off(),
            peer: 0,
            comm: 0,
            op: None,
            path_base: 0,
            nics: nics.max(1) as u16,
            nic_ids: (0..nics.max(1))
                .map(|k| nic_ids.get(k).copied().unwrap_or(k as u16))
                .collect(),
            paths: Vec::new(),
            round_ts: 0,
            round_open: false,
        }
    }

    /// Starts recording for `m` on engine `engine`'s connection; counts so far are the
    /// baseline (nothing before this is reported).
    pub(super) fn attach(
        &mut self,
        m: &LinkMonitor,
        conn: &Connection,
        engine: usize,
        op: Arc<AtomicU64>,
    ) {
        self.publisher = m.publisher.clone();
        self.peer = m.peer;
        self.comm = m.comm;
        self.op = Some(op);
        self.paths = conn
            .paths()
            .map(|v| {
                PathMark::new(
                    v.inflight_chunks,
                    (v.chunks_lost, v.chunks_acked),
                    v.consecutive_losses > 0,
                )
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

    /// The operation being sent now, packed.
    fn current_op(&self) -> u64 {
        match &self.op {
            Some(cell) => cell.load(Ordering::Relaxed),
            None => CollId::pack(Op::Other, 0),
        }
    }

    fn work(&self, ts_ns: u64, path: u16, bytes: u64, op: u64) -> Work {
        Work {
            ts_ns,
            bytes,
            peer: self.peer,
            path: self.path_base.saturating_add(path),
            // Path `i` binds the `i % nics`-th local address (`MptLinkConfig::local_ips`),
            // reported by its host-wide number.
            nic: self
                .nic_ids
                .get(usize::from(path % self.nics))
                .copied()
                .unwrap_or(path % self.nics),
            engine: Engine::Mpt,
            unit: Unit::Chunk,
            coll: CollId::unpack(self.comm, op),
        }
    }

    /// A chunk of `bytes` left on `path`; published with the round's others of the path
    /// ([`EngineMon::settle`]).
    #[inline]
    pub(super) fn posted(&mut self, ts_ns: u64, path: u16, bytes: u32) {
        let op = self.current_op();
        let Some(m) = self.paths.get(usize::from(path)) else {
            return;
        };
        if m.round_posts > 0 && m.round_op != op {
            self.publish_posts(path);
        }
        if !self.round_open {
            self.round_ts = ts_ns;
            self.round_open = true;
        }
        let Some(m) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        m.push(bytes, op);
        m.round_posts += 1;
        m.round_bytes += u64::from(bytes);
        m.round_op = op;
    }

    /// Publishes `path`'s posts of this round as one record.
    fn publish_posts(&mut self, path: u16) {
        let Some(m) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        let (n, bytes, op) = (m.round_posts, m.round_bytes, m.round_op);
        m.round_posts = 0;
        m.round_bytes = 0;
        if n > 0 {
            let w = self.work(self.round_ts, path, bytes, op);
            self.publisher.post_many(&w, n);
        }
    }

    /// Reports the chunks acknowledged or lost since the last call, and paths that started
    /// or stopped losing chunks. A chunk is done when it leaves the path's flight, which
    /// happens once per copy sent (acknowledged or declared lost); the path's acknowledged
    /// count would also take a copy acknowledged after it was declared lost, twice.
    pub(super) fn settle(&mut self, conn: &Connection) {
        if !self.is_on() {
            return;
        }
        if self.round_open {
            for path in 0..self.paths.len() {
                if self.paths[path].round_posts > 0 {
                    self.publish_posts(path as u16);
                }
            }
            self.round_open = false;
        }
        // Read once, at the first path with something to report (a round that moved chunks
        // out but got nothing back reads no clock).
        let mut now: Option<u64> = None;
        for (i, v) in conn.paths().enumerate() {
            let Some(m) = self.paths.get_mut(i) else {
                break;
            };
            let done = (u64::from(m.posted) + u64::from(m.inflight))
                .saturating_sub(u64::from(v.inflight_chunks));
            let lost = v.chunks_lost.saturating_sub(m.lost).min(done);
            // Acknowledged without leaving the flight: declared lost earlier.
            let late = v
                .chunks_acked
                .saturating_sub(m.acked)
                .saturating_sub(done - lost);
            let was_lossy = m.lossy;
            let lossy = v.consecutive_losses > 0;
            m.inflight = v.inflight_chunks;
            m.lost = v.chunks_lost;
            m.acked = v.chunks_acked;
            m.posted = 0;
            m.lossy = lossy;
            let path = i as u16;
            if done == 0 && late == 0 && lossy == was_lossy {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.publisher.now_ns());
            if done > 0 {
                self.complete(now, path, done - lost, lost);
            }
            if late > 0 {
                self.late_acks(now, path, late);
            }
            if lossy != was_lossy {
                self.transition(now, path, lossy);
            }
        }
    }

    /// One completion per chunk, so the monitor's count of outstanding work stays true,
    /// published as one record per run of chunks of one operation (acknowledged ones, then
    /// lost ones); a lost chunk completes with no bytes (its resend is posted again, on some
    /// path).
    fn complete(&mut self, now: u64, path: u16, acked: u64, lost: u64) {
        // (operation, chunks, bytes) of the run being gathered.
        let mut run: Option<(u64, u32, u64)> = None;
        for k in 0..acked + lost {
            let Some(m) = self.paths.get_mut(usize::from(path)) else {
                return;
            };
            let Some(size) = m.pop() else {
                break;
            };
            let op = m.last_op;
            let bytes = if k < acked {
                size
            } else {
                if m.lost_sizes.len() == REMEMBERED {
                    m.lost_sizes.pop_front();
                }
                m.lost_sizes.push_back(size);
                0
            };
            run = match run {
                // A run does not mix acknowledged and lost chunks (the latter carry no bytes).
                Some((o, n, b)) if o == op && k != acked => Some((o, n + 1, b + bytes)),
                Some((o, n, b)) => {
                    self.publisher.complete_many(&self.work(now, path, b, o), n);
                    Some((op, 1, bytes))
                }
                None => Some((op, 1, bytes)),
            };
        }
        if let Some((o, n, b)) = run {
            self.publisher.complete_many(&self.work(now, path, b, o), n);
        }
    }

    /// Chunks completed as lost whose first copy was acknowledged after all: their bytes
    /// did cross the path, reported as a post and completion at once (no time of their own
    /// in the window). Whether a resend went too the core does not say; if it did, its
    /// bytes count on its own path as well.
    fn late_acks(&mut self, now: u64, path: u16, late: u64) {
        for _ in 0..late {
            let Some(m) = self.paths.get_mut(usize::from(path)) else {
                return;
            };
            let Some(size) = m.lost_sizes.pop_front() else {
                return;
            };
            let op = m.last_op;
            let w = self.work(now, path, size, op);
            self.publisher.post(&w);
            self.publisher.complete(&w);
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
