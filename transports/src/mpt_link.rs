//! [`MptLink`]: a [`Link`] over one multipath [`Connection`] on the UDP datapath.
//!
//! One link frame is one mpt message. The link owns two preallocated slabs of `slots`
//! frames of `max_frame` bytes each:
//! * `try_send` copies the frame into the next send slot and queues a message; at most
//!   `slots` messages are unacknowledged, beyond that the link is full (`Ok(false)`);
//! * every receive slot is posted to the connection up front; arriving chunks are copied to
//!   their offset in the slot; `peek` shows the oldest completed message in place and `pop`
//!   posts its slot again.
//!
//! Progress (receive datagrams, fire timers, transmit) runs under a mutex both from the link
//! methods and from a small engine thread. The thread is what makes the transport reliable
//! when the executor stops polling: acknowledgements and retransmissions for the last
//! message of an operation must still flow while the executor waits elsewhere.
//!
//! Setup: [`MptLink::over_tcp`] exchanges a hello (magic, flow id, path count, ports) over
//! an already connected TCP stream and keeps the stream open with the link.

use std::cell::UnsafeCell;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::mpt::udp::{self, RxBatch, TxBatch, UdpPaths, MAX_DATAGRAM};
use crate::mpt::{frame::DATA_HEADER_LEN, CcKind, Connection, Event, Instant, MptConfig, PathId};
use crate::{Error, Link, Result};

const HELLO_MAGIC: &[u8; 4] = b"MPT1";
/// Longest the engine sleeps without traffic (bounds timer latency if a deadline is lost).
const IDLE_WAIT: Duration = Duration::from_millis(1);
/// The engine leaves progress to the link's user while the user ran it this recently.
const USER_ACTIVE: Duration = Duration::from_micros(200);

/// Settings of one link.
#[derive(Clone, Debug)]
pub struct MptLinkConfig {
    /// Paths (UDP sockets) per link, 1..=256; both sides must agree.
    pub paths: u16,
    /// Largest frame.
    pub max_frame: usize,
    /// Messages in flight per direction, 1..=16 (the header's request-id space).
    pub slots: u32,
    /// Injected loss of outgoing datagrams, `[0, 1]`.
    pub drop_rate: f64,
    /// Congestion control.
    pub cc: CcKind,
    /// Chunk size (capped so a chunk fits one UDP datagram).
    pub chunk_size: u32,
    /// Seed of loss injection and path sampling.
    pub seed: u64,
}

impl Default for MptLinkConfig {
    fn default() -> Self {
        MptLinkConfig {
            paths: udp::DEFAULT_UDP_PATHS,
            max_frame: 512 * 1024,
            slots: 16,
            drop_rate: 0.0,
            cc: CcKind::Cubic,
            chunk_size: 32 * 1024,
            seed: 0x5EED,
        }
    }
}

/// Receive slab, written by whichever thread runs progress and read by the consumer.
///
/// Ownership of slot `s` is handed over by the state in `Inner::recv_done` (guarded by the
/// mutex): while the slot's receive is posted and incomplete only progress writes it; once
/// complete only the consumer reads it, until `pop` posts it again.
struct RecvSlab {
    buf: Box<[UnsafeCell<u8>]>,
}

// SAFETY: access to each slot is partitioned in time by the protocol above, with the
// mutex providing the happens-before edges at every handover.
unsafe impl Sync for RecvSlab {}
// SAFETY: as above; the slab is plain bytes.
unsafe impl Send for RecvSlab {}

impl RecvSlab {
    fn new(len: usize) -> Self {
        RecvSlab {
            buf: (0..len).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    fn ptr(&self) -> *mut u8 {
        // UnsafeCell<u8> has the layout of u8, so the slice is a contiguous byte array.
        UnsafeCell::raw_get(self.buf.as_ptr())
    }
}

struct Inner {
    conn: Connection,
    udp: UdpPaths,
    base: std::time::Instant,
    max_frame: usize,
    slots: u64,
    send_slab: Vec<u8>,
    send_done: Vec<bool>,
    next_send: u64,
    oldest_unacked: u64,
    /// Per receive slot: `Some(len)` once complete.
    recv_done: Vec<Option<usize>>,
    next_pop: u64,
    rx: RxBatch,
    tx: TxBatch,
    /// Paths found readable by the last poll.
    ready: Vec<u16>,
    error: Option<String>,
    bad_datagrams: u64,
    peer: String,
}

impl Inner {
    fn now(&self) -> Instant {
        Instant::from_std(self.base, std::time::Instant::now())
    }

    fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(Error::Protocol(format!("mpt link to {}: {e}", self.peer))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, what: String) {
        if self.error.is_none() {
            tracing::warn!("mpt link to {}: {what}", self.peer);
            self.error = Some(what);
        }
    }

    /// One round of receive, timers and transmit; returns whether anything moved.
    fn progress(&mut self, slab: &RecvSlab) -> bool {
        if self.error.is_some() {
            return false;
        }
        let mut moved = false;
        let now = self.now();
        // One poll over every path finds the readable ones, so an idle spin costs one
        // syscall instead of one `recvmmsg` per path.
        let ready = self.udp.readable(&mut self.ready);
        for &p in &self.ready[..ready] {
            let p = usize::from(p);
            loop {
                let n = match self.udp.recv_batch(p, &mut self.rx) {
                    Ok(n) => n,
                    Err(e) => {
                        self.fail(format!("receive on path {p}: {e}"));
                        return false;
                    }
                };
                for i in 0..n {
                    let dg = self.rx.get(i);
                    match self.conn.handle_datagram(now, PathId(p as u16), dg) {
                        Ok(Some(pl)) => {
                            let slot = (pl.recv.0 % self.slots) as usize;
                            let off = usize::try_from(pl.offset).unwrap_or(usize::MAX);
                            let len = pl.payload.len();
                            if off.checked_add(len).is_some_and(|e| e <= self.max_frame) {
                                // SAFETY: the range lies inside slot `slot` of the slab
                                // (checked above), whose receive is posted and incomplete,
                                // so no consumer reads it (see `RecvSlab`); the source is
                                // our own receive buffer, disjoint from the slab.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        pl.payload.as_ptr(),
                                        slab.ptr().add(slot * self.max_frame + off),
                                        len,
                                    );
                                }
                            } else {
                                self.bad_datagrams += 1;
                            }
                        }
                        Ok(None) => {}
                        Err(_) => self.bad_datagrams += 1,
                    }
                }
                if n > 0 {
                    moved = true;
                }
                if n < udp::BATCH {
                    break;
                }
            }
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        moved |= self.transmit(now);
        self.drain_events();
        moved
    }

    fn transmit(&mut self, now: Instant) -> bool {
        let mut moved = false;
        loop {
            while !self.tx.is_full() {
                let Some(t) = self.conn.poll_transmit(now) else {
                    break;
                };
                let Some(out) = self.tx.slot() else { break };
                let Ok(mut len) = t.frame.encode(out) else {
                    self.fail("encode frame".into());
                    return moved;
                };
                if let Some(p) = t.payload {
                    let slot = (p.send.0 % self.slots) as usize;
                    let off = usize::try_from(p.offset).unwrap_or(usize::MAX);
                    let plen = p.len as usize;
                    let src = off
                        .checked_add(plen)
                        .filter(|&e| e <= self.max_frame)
                        .and_then(|e| {
                            self.send_slab
                                .get(slot * self.max_frame + off..slot * self.max_frame + e)
                        });
                    let dst = out.get_mut(len..len + plen);
                    match (src, dst) {
                        (Some(s), Some(d)) => d.copy_from_slice(s),
                        _ => {
                            self.fail("payload outside the send slab".into());
                            return moved;
                        }
                    }
                    len += plen;
                }
                if self.udp.inject_drop() {
                    continue;
                }
                self.tx.commit(t.path.0, len);
            }
            if self.tx.is_empty() {
                return moved;
            }
            moved = true;
            let full = self.tx.is_full();
            if let Err(e) = self.udp.send_batch(&mut self.tx) {
                self.fail(format!("send: {e}"));
                return moved;
            }
            if !full {
                return moved;
            }
        }
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::SendComplete { id, .. } => {
                    if let Some(d) = self.send_done.get_mut((id.0 % self.slots) as usize) {
                        *d = true;
                    }
                    while self.oldest_unacked < self.next_send {
                        let s = (self.oldest_unacked % self.slots) as usize;
                        if !self.send_done[s] {
                            break;
                        }
                        self.send_done[s] = false;
                        self.oldest_unacked += 1;
                    }
                }
                Event::RecvComplete {
                    id, len, truncated, ..
                } => {
                    if truncated {
                        self.fail(format!("peer sent a {len}-byte frame, over max_frame"));
                        return;
                    }
                    let s = (id.0 % self.slots) as usize;
                    self.recv_done[s] = Some(len as usize);
                }
                Event::Failed(e) => self.fail(e.to_string()),
            }
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    slab: RecvSlab,
    stop: AtomicBool,
    fds: Vec<RawFd>,
    /// When the link's user last ran progress (ns since `epoch`): while the user polls, the
    /// engine stays out of its way (on few cores a second poller only steals time slices and
    /// fights for the lock); it takes over when the user stops polling.
    user_progress: AtomicU64,
    epoch: std::time::Instant,
}

impl Shared {
    fn touch(&self) {
        self.user_progress
            .store(nanos_since(self.epoch), Ordering::Relaxed);
    }
}

fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another holder cannot leave the state half-updated in a way that
        // matters more than stopping; keep going with what is there.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One end of a link before the peer is known: bound sockets and a flow id.
pub struct MptEndpoint {
    udp: UdpPaths,
    fid: u16,
    cfg: MptLinkConfig,
}

impl MptEndpoint {
    /// Binds the path sockets on `ip`.
    pub fn bind(ip: IpAddr, cfg: MptLinkConfig) -> Result<Self> {
        if cfg.slots == 0 || cfg.slots > 16 {
            return Err(Error::Protocol("mpt slots must be in 1..=16".into()));
        }
        let udp = UdpPaths::bind(ip, cfg.paths, cfg.drop_rate, cfg.seed)
            .map_err(|e| Error::io("bind mpt udp paths", e))?;
        // The flow id doubles as a connection id: datagrams of an older connection that
        // reach a reused port are rejected by the core.
        let fid = (mix(cfg.seed ^ u64::from(std::process::id()) ^ nanos_now()) & 0x7FF) as u16;
        Ok(MptEndpoint { udp, fid, cfg })
    }

    /// The hello to send to the peer: magic, flow id, path count, ports.
    pub fn hello(&self) -> Result<Vec<u8>> {
        let ports = self
            .udp
            .local_ports()
            .map_err(|e| Error::io("udp local ports", e))?;
        let mut h = Vec::with_capacity(8 + 2 * ports.len());
        h.extend_from_slice(HELLO_MAGIC);
        h.extend_from_slice(&self.fid.to_be_bytes());
        h.extend_from_slice(&(ports.len() as u16).to_be_bytes());
        for p in ports {
            h.extend_from_slice(&p.to_be_bytes());
        }
        Ok(h)
    }

    /// Connects to the peer at `peer_ip` that sent `hello`.
    pub fn connect(
        mut self,
        peer_ip: IpAddr,
        hello: &[u8],
        tcp: Option<TcpStream>,
    ) -> Result<MptLink> {
        let bad = |m: &str| Error::Protocol(format!("mpt hello from {peer_ip}: {m}"));
        if hello.len() < 8 || &hello[..4] != HELLO_MAGIC {
            return Err(bad("bad magic"));
        }
        let fid = u16::from_be_bytes([hello[4], hello[5]]);
        let n = usize::from(u16::from_be_bytes([hello[6], hello[7]]));
        if hello.len() != 8 + 2 * n {
            return Err(bad("bad length"));
        }
        let ports: Vec<u16> = hello[8..]
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        self.udp
            .connect(peer_ip, &ports)
            .map_err(|e| Error::io(format!("connect mpt paths to {peer_ip}"), e))?;
        let cfg = self.cfg;
        let mcfg = MptConfig {
            chunk_size: cfg
                .chunk_size
                .clamp(1, (MAX_DATAGRAM - DATA_HEADER_LEN) as u32),
            num_paths: cfg.paths,
            max_messages: cfg.slots,
            cc: cfg.cc,
            seed: cfg.seed,
            ..MptConfig::default()
        };
        let mut conn = Connection::new(mcfg, self.fid, fid)
            .map_err(|e| Error::Protocol(format!("mpt connection: {e}")))?;
        let slots = u64::from(cfg.slots);
        let base = std::time::Instant::now();
        for _ in 0..slots {
            conn.post_recv(Instant::ZERO, cfg.max_frame as u64, 0)
                .map_err(|e| Error::Protocol(format!("mpt post_recv: {e}")))?;
        }
        let fds = self.udp.fds();
        let inner = Inner {
            conn,
            udp: self.udp,
            base,
            max_frame: cfg.max_frame,
            slots,
            send_slab: vec![0; cfg.max_frame * cfg.slots as usize],
            send_done: vec![false; cfg.slots as usize],
            next_send: 0,
            oldest_unacked: 0,
            recv_done: vec![None; cfg.slots as usize],
            next_pop: 0,
            rx: RxBatch::new(),
            tx: TxBatch::new(),
            ready: vec![0; usize::from(cfg.paths)],
            error: None,
            bad_datagrams: 0,
            peer: peer_ip.to_string(),
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            slab: RecvSlab::new(cfg.max_frame * cfg.slots as usize),
            stop: AtomicBool::new(false),
            fds,
            user_progress: AtomicU64::new(0),
            epoch: base,
        });
        let sh = shared.clone();
        let engine = std::thread::Builder::new()
            .name("ccl-mpt".into())
            .spawn(move || engine(&sh))
            .map_err(|e| Error::io("spawn mpt engine", e))?;
        Ok(MptLink {
            shared,
            engine: Some(engine),
            max_frame: cfg.max_frame,
            peeked: false,
            _tcp: tcp,
        })
    }
}

fn nanos_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// splitmix64 finaliser: spreads seed bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn engine(sh: &Shared) {
    while !sh.stop.load(Ordering::Acquire) {
        let since_user =
            nanos_since(sh.epoch).saturating_sub(sh.user_progress.load(Ordering::Relaxed));
        if since_user < USER_ACTIVE.as_nanos() as u64 {
            std::thread::sleep(USER_ACTIVE);
            continue;
        }
        let (moved, wait) = {
            let mut g = sh.lock();
            let moved = g.progress(&sh.slab);
            let now = g.now();
            let wait = g
                .conn
                .poll_timeout()
                .map(|t| t.saturating_duration_since(now))
                .unwrap_or(IDLE_WAIT)
                .min(IDLE_WAIT);
            (moved, wait)
        };
        if !moved {
            udp::wait_readable(&sh.fds, wait);
        }
    }
}

/// A framed link over one multipath connection (see the module docs).
pub struct MptLink {
    shared: Arc<Shared>,
    engine: Option<JoinHandle<()>>,
    max_frame: usize,
    peeked: bool,
    _tcp: Option<TcpStream>,
}

impl MptLink {
    /// Sets up a link over a connected TCP stream: both sides bind their paths on the
    /// stream's local address, exchange hellos over it, and connect to each other. The
    /// stream stays open with the link.
    pub fn over_tcp(mut tcp: TcpStream, cfg: MptLinkConfig) -> Result<Self> {
        let local = tcp
            .local_addr()
            .map_err(|e| Error::io("mpt: tcp local address", e))?;
        let peer = tcp
            .peer_addr()
            .map_err(|e| Error::io("mpt: tcp peer address", e))?;
        let ep = MptEndpoint::bind(local.ip(), cfg)?;
        let hello = ep.hello()?;
        let io = |e| Error::io(format!("mpt hello with {peer}"), e);
        tcp.set_nonblocking(false).map_err(io)?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io)?;
        tcp.write_all(&(hello.len() as u32).to_be_bytes())
            .map_err(io)?;
        tcp.write_all(&hello).map_err(io)?;
        let mut len = [0u8; 4];
        tcp.read_exact(&mut len).map_err(io)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > 8 + 2 * 256 {
            return Err(Error::Protocol(format!("mpt hello from {peer} too long")));
        }
        let mut theirs = vec![0u8; len];
        tcp.read_exact(&mut theirs).map_err(io)?;
        ep.connect(peer.ip(), &theirs, Some(tcp))
    }

    /// Datagrams dropped by loss injection so far.
    pub fn injected_drops(&self) -> u64 {
        self.shared.lock().udp.stats().injected_drops
    }

    /// Chunks retransmitted so far.
    pub fn retransmits(&self) -> u64 {
        self.shared.lock().conn.stats().chunks_retransmitted
    }
}

impl Drop for MptLink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.engine.take() {
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

impl Link for MptLink {
    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn try_send(&mut self, frame: &[u8]) -> Result<bool> {
        if frame.len() > self.max_frame {
            return Err(Error::Protocol(format!(
                "frame of {} bytes over the mpt link's {}",
                frame.len(),
                self.max_frame
            )));
        }
        let sh = &*self.shared;
        let mut g = sh.lock();
        g.check()?;
        if g.next_send - g.oldest_unacked >= g.slots {
            sh.touch();
            g.progress(&sh.slab);
            g.check()?;
            if g.next_send - g.oldest_unacked >= g.slots {
                return Ok(false);
            }
        }
        let slot = (g.next_send % g.slots) as usize;
        let start = slot * g.max_frame;
        g.send_slab[start..start + frame.len()].copy_from_slice(frame);
        let now = g.now();
        match g.conn.send(now, frame.len() as u64, 0) {
            Ok(id) if id.0 == g.next_send => {}
            Ok(_) => return Err(Error::Protocol("mpt send ids out of step".into())),
            // The core still holds an acknowledged-but-unretired message: full for now.
            Err(crate::mpt::MptError::SendQueueFull(_)) => return Ok(false),
            Err(e) => return Err(Error::Protocol(format!("mpt send: {e}"))),
        }
        g.next_send += 1;
        sh.touch();
        g.progress(&sh.slab);
        Ok(true)
    }

    fn peek(&mut self) -> Result<Option<&[u8]>> {
        let sh = &*self.shared;
        let (slot, len, max) = {
            let mut g = sh.lock();
            g.check()?;
            let mut s = (g.next_pop % g.slots) as usize;
            if g.recv_done[s].is_none() {
                sh.touch();
                g.progress(&sh.slab);
                g.check()?;
                s = (g.next_pop % g.slots) as usize;
            }
            match g.recv_done[s] {
                Some(len) => (s, len, g.max_frame),
                None => return Ok(None),
            }
        };
        self.peeked = true;
        // SAFETY: slot `slot` holds a completed receive: until `pop` reposts it (which needs
        // `&mut self`, so not while this borrow lives) nothing writes it (see `RecvSlab`).
        // `len <= max_frame` (truncated messages fail the link), so the range is in bounds.
        let s = unsafe { std::slice::from_raw_parts(sh.slab.ptr().add(slot * max), len) };
        Ok(Some(s))
    }

    fn pop(&mut self) {
        if !std::mem::take(&mut self.peeked) {
            return;
        }
        let mut g = self.shared.lock();
        let s = (g.next_pop % g.slots) as usize;
        g.recv_done[s] = None;
        g.next_pop += 1;
        let now = g.now();
        let cap = g.max_frame as u64;
        if let Err(e) = g.conn.post_recv(now, cap, 0) {
            g.fail(format!("repost receive: {e}"));
        }
    }

    fn flush(&mut self) -> Result<bool> {
        let sh = &*self.shared;
        let mut g = sh.lock();
        g.check()?;
        sh.touch();
        let moved = g.progress(&sh.slab);
        g.check()?;
        Ok(moved)
    }

    fn has_pending(&self) -> bool {
        let g = self.shared.lock();
        g.error.is_none() && g.next_send != g.oldest_unacked
    }

    fn kind(&self) -> &'static str {
        "mpt"
    }
}
