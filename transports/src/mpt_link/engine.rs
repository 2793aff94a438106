//! An engine: one sub-link's connection and paths, started with its thread, and the
//! thread's loop (progress when the user is not driving, parked in `poll` when idle).

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::mpt::udp::{self, RxBatch, TxBatch, UdpPaths, MAX_DATAGRAM};
use crate::mpt::{frame::DATA_HEADER_LEN, Connection, Instant, MptConfig};
use crate::{Error, Result};

use crate::socket_failover::PrimaryNic;

use super::config::MptLinkConfig;
use super::follow::Follow;
use super::monitor::EngineMon;
use super::progress::Inner;
use super::shared::{nanos_since, Shared, Wake};
use super::slab::{Loan, Slab};

/// Longest the engine sleeps without traffic (bounds timer latency if a deadline is lost).
const IDLE_WAIT: Duration = Duration::from_millis(1);
/// The engine leaves progress to the link's user while the user ran it this recently.
const USER_ACTIVE: Duration = Duration::from_micros(200);

/// One engine's side of the endpoint: its paths and flow id.
pub(super) struct SubEndpoint {
    pub(super) udp: UdpPaths,
    pub(super) fid: u16,
    pub(super) seed: u64,
    /// Its local NICs, in path order, and where to look their addresses up.
    pub(super) nics: Vec<(std::net::IpAddr, Option<PrimaryNic>)>,
}

/// Connects one engine's paths and connection and starts its thread.
pub(super) fn start_engine(
    cfg: &MptLinkConfig,
    mut sub: SubEndpoint,
    (peer_fid, to): (u16, &[std::net::SocketAddr]),
    peer: String,
    max_msg: usize,
    wake: bool,
) -> Result<Engine> {
    sub.udp
        .connect_each(to)
        .map_err(|e| Error::io(format!("connect mpt paths to {peer}"), e))?;
    let mcfg = MptConfig {
        chunk_size: cfg
            .chunk_size
            .clamp(1, (MAX_DATAGRAM - DATA_HEADER_LEN) as u32),
        num_paths: cfg.paths,
        max_messages: cfg.slots,
        cc: cfg.cc,
        ack_delay: cfg.ack_delay,
        fail_after: cfg.fail_after,
        seed: sub.seed,
        // Path `i` binds the `i % len`-th local address; its NIC by the host's numbering.
        path_nics: (0..cfg.local_ips.len())
            .map(|k| cfg.nic_ids.get(k).copied().unwrap_or(k as u16))
            .collect(),
        ..MptConfig::default()
    };
    let mut conn = Connection::new(mcfg, sub.fid, peer_fid)
        .map_err(|e| Error::Protocol(format!("mpt connection: {e}")))?;
    let slots = u64::from(cfg.slots);
    let base = std::time::Instant::now();
    for _ in 0..slots {
        conn.post_recv(Instant::ZERO, max_msg as u64, 0)
            .map_err(|e| Error::Protocol(format!("mpt post_recv: {e}")))?;
    }
    let wake = if wake { Some(Wake::new()?) } else { None };
    let mut fds = sub.udp.fds();
    if let Some(w) = &wake {
        fds.push(w.rx.as_raw_fd());
    }
    let n = cfg.slots as usize;
    let inner = Inner {
        conn,
        udp: sub.udp,
        base,
        max_frame: max_msg,
        slots,
        send_done: vec![false; n],
        send_len: vec![0; n],
        send_ext: vec![(0, 0); n],
        unacked_bytes: 0,
        next_send: 0,
        oldest_unacked: 0,
        recv_done: vec![None; n],
        recv_lent: vec![Loan::NONE; n],
        recv_touched: vec![false; n],
        placed_bytes: 0,
        next_pop: 0,
        rx: RxBatch::new(),
        tx: TxBatch::new(),
        ready: vec![0; usize::from(cfg.paths)],
        error: None,
        unreachable: false,
        bad_datagrams: 0,
        peer,
        sleeping: false,
        copy_job: None,
        mon: EngineMon::off(cfg.local_ips.len(), &cfg.nic_ids),
        follow_steps: Vec::with_capacity(usize::from(cfg.paths) + sub.nics.len()),
        follow: Follow::new(cfg.paths, sub.nics),
    };
    let shared = Arc::new(Shared {
        inner: Mutex::new(inner),
        slab: Slab::new(max_msg * n),
        send_slab: Slab::new(max_msg * n),
        stop: AtomicBool::new(false),
        fds,
        user_progress: AtomicU64::new(0),
        epoch: base,
        wake,
        unacked_msgs: AtomicU64::new(0),
        unacked_bytes: AtomicU64::new(0),
        holding: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        head_ready: AtomicBool::new(false),
        slots,
        copies_done: AtomicU64::new(0),
    });
    let sh = shared.clone();
    let spin = cfg.spin;
    let thread = std::thread::Builder::new()
        .name("ccl-mpt".into())
        .spawn(move || engine(&sh, spin))
        .map_err(|e| Error::io("spawn mpt engine", e))?;
    Ok(Engine {
        shared,
        thread: Some(thread),
        stride: max_msg,
    })
}

fn engine(sh: &Shared, spin: Duration) {
    // When the engine last found work (or started spinning without any).
    let mut busy_at = std::time::Instant::now();
    // Parked on every path: the datagram that woke it may be on any.
    let mut woke = false;
    while !sh.stop.load(Ordering::Acquire) {
        let since_user =
            nanos_since(sh.epoch).saturating_sub(sh.user_progress.load(Ordering::Relaxed));
        if since_user < USER_ACTIVE.as_nanos() as u64 {
            match &sh.wake {
                // Several engines: the user drives only the lead engine, for small frames, and
                // hands it back (`Shared::hand_back`) before larger ones, which must not wait
                // out the rest of this pause. The paths are not polled meanwhile: the user
                // reads them.
                Some(w) => {
                    let left = USER_ACTIVE.as_nanos() as u64 - since_user;
                    udp::wait_readable(&[w.rx.as_raw_fd()], Duration::from_nanos(left));
                    w.drain();
                }
                None => std::thread::sleep(USER_ACTIVE),
            }
            continue;
        }
        let (park, wait) = {
            let mut g = sh.lock();
            if std::mem::take(&mut woke) {
                g.udp.poll_all_next();
            }
            g.sleeping = false;
            let copied = sh.run_copy_job(&mut g);
            let moved = sh.run(&mut g) || copied;
            if moved {
                busy_at = std::time::Instant::now();
            }
            let park = !moved && busy_at.elapsed() >= spin;
            let now = g.now();
            let wait = g
                .conn
                .poll_timeout()
                .map(|t| t.saturating_duration_since(now))
                .unwrap_or(IDLE_WAIT)
                .min(IDLE_WAIT);
            // Decided under the lock, so a user queueing work after this sees the flag and
            // wakes us (see `Shared::kick`). Parking at once rather than spinning a while
            // measured better on a small, shared machine, where a spinning engine takes the
            // core its peer engines and the user need.
            g.sleeping = park;
            (park, wait)
        };
        if park {
            udp::wait_readable(&sh.fds, wait);
            woke = true;
            if let Some(w) = &sh.wake {
                w.drain();
            }
        }
    }
}

/// One sub-link: its state, shared with its thread.
pub(super) struct Engine {
    pub(super) shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Bytes per slab slot (the largest message).
    pub(super) stride: usize,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = &self.shared.wake {
            w.notify();
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        let g = self.shared.lock();
        tracing::info!(
            "mpt link to {} closed: {:?}, {:?}, {} bad datagrams",
            g.peer,
            g.conn.stats(),
            g.udp.stats(),
            g.bad_datagrams
        );
    }
}
