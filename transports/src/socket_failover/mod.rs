//! TCP links with a backup: a primary connection on the first NIC and a backup on the
//! second, both connected at setup, driven by the fault-tolerance machines of
//! [`ccl_faulttol::failover`] ([`SenderConn`] for the stream this side sends,
//! [`ReceiverConn`] for the one it receives).
//!
//! Each direction is one byte stream: every frame the user sends is a u64 length and its
//! bytes. The sender keeps the stream from the last acknowledged byte in a window and cuts
//! it into chunks (`Data` with the ledger's epoch and offset, then `Commit`); the receiver
//! lands chunks at their offsets, acks committed bytes, and shows the user only committed
//! bytes, so a rollback (to the last committed byte, in a new epoch) never takes back
//! anything the user saw. On an error on a connection, or a chunk timeout that a probe
//! confirms, both ends roll back and resume on the other connection; the failed one is
//! probed, and once it has answered for the hold-down, traffic returns to it. Every
//! transition is logged (`tracing::info!`) by the machines themselves.
//!
//! A primary connection that failed is replaced by a fresh one ([`redial`]): the old
//! one, even once its path is back, would wait out TCP's retransmission backoff.
//!
//! A background thread drives the link when its user has not for a while, so a peer's
//! probes are answered while this rank is busy elsewhere: without it an idle rank would
//! look dead and be failed over (and then failed) by its peer. It also resends what a
//! failover rolls back after the user's send completed: a send completes once its bytes
//! are with the kernel (as on a plain TCP link), not once the peer acknowledged them;
//! [`Link::unconfirmed`] reports those until the acks come.
//!
//! The data path copies each byte once more than a plain TCP link, on the sending side
//! (into the send ring, which holds what is not acknowledged): connections write chunks
//! straight from the ring, and read them straight into the receive window, where the user
//! reads frames in place.

mod bufs;
mod monitor;
mod readdress;
mod redial;
mod ring;
mod wire;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccl_faulttol::{Action, ConnState, HealthConfig, LinkRole, Message, ReceiverConn, SenderConn};

use crate::{Error, Link, Result};
use bufs::RecvWindow;
pub use monitor::{reason_name, state_name, FAILOVER_PATHS};
pub use readdress::PrimaryNic;
use readdress::Readdress;
pub(crate) use readdress::LOOK_EVERY;
pub use redial::Redial;
use redial::Redialer;
use ring::SendRing;
use wire::{To, Wire};

/// Bytes of a chunk: the unit the sender commits, the receiver acks and a rollback resends.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// The background thread drives a link its user left alone this long.
const IDLE_DRIVE: Duration = Duration::from_millis(5);
/// How often a connection that carries neither direction's stream is read, and how long
/// sends and flushes go without reading: often enough for probes and their answers (tens of
/// milliseconds apart), while every receive (`peek`) reads the active connection. Reading
/// both connections in every call made the armed 64 MiB all-reduce of `failover_measure.sh`
/// (two namespace hosts of two ranks, 20 iterations) issue 5.1 million receive calls where
/// the plain link issued 0.5 million; reading thus, 1.7 million (2026-11-29, the 2-core CPU
/// machine, `perf stat -e syscalls:sys_enter_recvfrom`).
const IDLE_WIRE_READ: Duration = Duration::from_millis(1);
/// Bytes a wire may hold queued before the sender stops cutting chunks for it: enough to
/// keep the kernel fed, little to resend after a failure.
const WIRE_HIGH: usize = 2 * CHUNK_BYTES;
const FRAME_HDR: usize = 8;
/// Least bytes of each stream window. A small window stays in the cache between the
/// kernel's copy and the user's: 2 MiB rather than 8 took the armed/plain busbw of
/// `failover_measure.sh`'s alltoall from 0.83 to 0.94 (2026-11-29, the 2-core CPU machine).
const WINDOW_MIN: usize = 2 << 20;

/// Settings of a failover link.
#[derive(Clone, Copy, Debug)]
pub struct FailoverConfig {
    /// Largest frame `try_send` accepts.
    pub max_frame: usize,
    /// Timeouts and hold-down of link health.
    pub health: HealthConfig,
    /// Names this link's machines in the transition records (the peer's rank, say).
    pub id: u64,
}

impl FailoverConfig {
    /// Frames of up to `max_frame` bytes, the default health timing (a silent connection
    /// is failed 150 ms after its last sign of life, the last one after 2 s; 400 ms hold-down
    /// before switching back).
    pub fn new(max_frame: usize, id: u64) -> Self {
        FailoverConfig {
            max_frame,
            health: HealthConfig::default(),
            id,
        }
    }
}

const ROLES: [LinkRole; 2] = [LinkRole::Primary, LinkRole::Backup];

fn idx(role: LinkRole) -> usize {
    match role {
        LinkRole::Primary => 0,
        LinkRole::Backup => 1,
    }
}

fn proto(e: ccl_faulttol::Error) -> Error {
    Error::Protocol(format!("failover link: {e}"))
}

/// The state both the user and the background thread drive.
struct Inner {
    wires: [Wire; 2],
    tx: SenderConn<Instant>,
    rx: ReceiverConn<Instant>,
    /// Stream bytes sent and not yet both acknowledged and written by every connection.
    send: SendRing,
    /// Stream bytes received, sized to the window.
    recv: RecvWindow,
    /// Received bytes the user has popped.
    consumed: u64,
    window: usize,
    /// When traffic moved and to which link, until the first ack there says it flows.
    switched: Option<(LinkRole, Instant)>,
    /// When each connection, while neither stream is on it, is read next.
    idle_read_at: [Instant; 2],
    /// When a send or flush reads even if its bytes went ([`Inner::push`]).
    read_due: Instant,
    failed: Option<String>,
    id: u64,
    redial: Redialer,
    /// This side's primary NIC, followed while the primary is failed (None: not followed).
    readdress: Option<Readdress>,
    mon: monitor::FoMon,
}

impl Inner {
    fn new(
        streams: [TcpStream; 2],
        cfg: &FailoverConfig,
        redial: Redial,
        nic: Option<PrimaryNic>,
    ) -> Result<Self> {
        let [p, b] = streams;
        let readdress = match (nic, p.local_addr()) {
            (Some(nic), Ok(a)) => Some(Readdress::new(nic, a.ip())),
            _ => None,
        };
        let wires = [Wire::new(p, CHUNK_BYTES)?, Wire::new(b, CHUNK_BYTES)?];
        let links = ((2 * cfg.id) as u32, (2 * cfg.id + 1) as u32);
        let chunk = CHUNK_BYTES as u64;
        let tx = SenderConn::new(2 * cfg.id, links, cfg.health, chunk).map_err(proto)?;
        let mut rx = ReceiverConn::new(2 * cfg.id + 1, links, cfg.health).map_err(proto)?;
        // Half the window holds the frame being read while the other half fills, so a
        // largest frame always fits past the consumed point.
        let recv = RecvWindow::new(WINDOW_MIN.max(4 * (cfg.max_frame + FRAME_HDR)))
            .map_err(|e| Error::io("failover link: receive window", e))?;
        let window = recv.len();
        rx.post(Instant::now(), window as u64);
        Ok(Inner {
            wires,
            tx,
            rx,
            send: SendRing::new(window),
            recv,
            consumed: 0,
            window,
            switched: None,
            idle_read_at: [Instant::now(); 2],
            read_due: Instant::now(),
            failed: None,
            id: cfg.id,
            redial: Redialer::new(redial, cfg.id)?,
            readdress,
            mon: monitor::FoMon::off(cfg.id),
        })
    }

    /// Reads, applies timeouts, transmits; returns whether anything moved.
    fn drive(&mut self, now: Instant) -> Result<bool> {
        self.drive_with(now, true)
    }

    /// Transmits what may go now, reading only when this side's stream waits for the peer
    /// (for credit or acks: bytes posted and not handed to the kernel) or nothing was read
    /// for [`IDLE_WIRE_READ`] (probes to answer, timeouts to run). A send or flush whose
    /// bytes all went needs nothing the peer said, and reading then cost a receive call per
    /// send (the receives, `peek`, read anyway).
    fn push(&mut self, now: Instant) -> Result<bool> {
        if now >= self.read_due {
            return self.drive(now);
        }
        let moved = self.drive_with(now, false)?;
        match self.unsent() {
            true => Ok(self.drive(now)? || moved),
            false => Ok(moved),
        }
    }

    /// [`drive`](Self::drive), without reading and so without the timeouts (acks unread
    /// are not acks missing) unless `reads`.
    fn drive_with(&mut self, now: Instant, reads: bool) -> Result<bool> {
        self.check()?;
        let failed = |f: &ccl_faulttol::Failover<Instant>| f.is_down(LinkRole::Primary);
        let want =
            self.wires[0].is_dead() || failed(self.tx.failover()) || failed(self.rx.failover());
        if want {
            let id = self.id;
            if let Some(to) = self
                .readdress
                .as_mut()
                .and_then(|r| r.poll(now, &mut self.redial, id))
            {
                self.wires[1].push_moved(to);
            }
        }
        if let Some(s) = self.redial.poll(now, want) {
            self.replace_primary(now, s);
        }
        let mut moved = false;
        if reads {
            self.read_due = now + IDLE_WIRE_READ;
            for role in ROLES {
                if self.reads_now(now, role) {
                    moved |= self.read_wire(now, role);
                }
            }
            if self.tx.poll_timeout().is_some_and(|t| t <= now) {
                self.tx.handle_timeout(now);
            }
            if self.rx.poll_timeout().is_some_and(|t| t <= now) {
                self.rx.handle_timeout(now);
            }
        }
        self.transmit(now);
        for role in ROLES {
            match self.wires[idx(role)].flush(&self.send) {
                Ok(n) => moved |= n > 0,
                Err(e) => self.wire_failed(now, role, &e),
            }
        }
        self.actions(now);
        self.check()?;
        Ok(moved)
    }

    /// Whether to read `role`'s connection in this drive: always while a stream is on it,
    /// else every [`IDLE_WIRE_READ`].
    fn reads_now(&mut self, now: Instant, role: LinkRole) -> bool {
        if self.tx.failover().active() == role || self.rx.failover().active() == role {
            return true;
        }
        let at = &mut self.idle_read_at[idx(role)];
        if now < *at {
            return false;
        }
        *at = now + IDLE_WIRE_READ;
        true
    }

    /// Swaps a fresh connection in for the primary's; the machines probe it at once.
    fn replace_primary(&mut self, now: Instant, s: TcpStream) {
        let w = match Wire::new(s, CHUNK_BYTES) {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!("failover link {}: new primary connection: {e}", self.id);
                return;
            }
        };
        self.wires[0].kill();
        self.wires[0] = w;
        tracing::info!("failover link {}: primary connection replaced", self.id);
        self.tx.handle_reconnected(now, LinkRole::Primary);
        self.rx.handle_reconnected(now, LinkRole::Primary);
    }

    fn check(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(Error::Unreachable(why.clone())),
            None => Ok(()),
        }
    }

    fn wire_failed(&mut self, now: Instant, role: LinkRole, e: &Error) {
        if self.wires[idx(role)].is_dead() {
            return;
        }
        tracing::info!("failover link {}: {role:?} connection lost: {e}", self.id);
        self.wires[idx(role)].kill();
        self.tx.handle_error(now, role);
        self.rx.handle_error(now, role);
    }

    /// Handles what arrived on `role`, up to a budget so one busy wire does not starve the
    /// other.
    fn read_wire(&mut self, now: Instant, role: LinkRole) -> bool {
        let mut budget = 4 * self.window;
        let mut moved = false;
        while budget > 0 {
            let epoch = self.rx.ledger().epoch();
            let m = match self.wires[idx(role)].next(&mut self.recv, epoch) {
                Ok(Some(wire::Arrived::Message(m))) => m,
                Ok(Some(wire::Arrived::Moved(to))) => {
                    self.redial.peer_moved(to, self.id);
                    continue;
                }
                Ok(None) => break,
                Err(e) => {
                    self.wire_failed(now, role, &e);
                    break;
                }
            };
            let len = match m.msg {
                Message::Data { len, .. } => len as usize,
                _ => 0,
            };
            budget = budget.saturating_sub(wire::MSG_HDR + len);
            moved = true;
            if let Err(e) = self.dispatch(now, role, m) {
                // A message the machines reject is dropped: the protocol recovers from loss.
                tracing::debug!("failover link {}: {e}", self.id);
            }
        }
        moved
    }

    fn dispatch(&mut self, now: Instant, role: LinkRole, m: wire::Incoming) -> Result<()> {
        // One connection carries both directions: what arrives for one end proves the
        // connection alive to the other, whose own answers may queue behind this data.
        match m.to {
            To::Sender => self.rx.handle_alive(now, role),
            To::Receiver => self.tx.handle_alive(now, role),
        }
        match m.to {
            To::Sender => {
                let acked = self.tx.ledger().acked();
                self.tx.handle_message(now, role, m.msg).map_err(proto)?;
                let new = self.tx.ledger().acked();
                if new > acked {
                    self.note_flowing(now, role);
                    if self.mon.is_on() {
                        self.mon.acked(new);
                    }
                }
            }
            To::Receiver => {
                if self.rx.handle_message(now, role, m.msg).map_err(proto)? {
                    if let Message::Data { offset, len, .. } = m.msg {
                        // The payload follows on the wire: read in place from there.
                        self.recv.reserve(offset, len as usize);
                        let epoch = self.rx.ledger().epoch();
                        self.wires[idx(role)].land(offset, epoch);
                    }
                }
            }
        }
        Ok(())
    }

    /// The first ack on the link traffic moved to: it carries data now.
    fn note_flowing(&mut self, now: Instant, role: LinkRole) {
        if let Some((to, at)) = self.switched.filter(|&(to, _)| to == role) {
            tracing::info!(
                "failover link {}: traffic flowing on {to:?}, first ack {:.1} ms after the switch",
                self.id,
                (now - at).as_secs_f64() * 1e3
            );
            self.switched = None;
        }
    }

    fn transmit(&mut self, now: Instant) {
        while let Some((role, msg)) = self.rx.poll_transmit(now) {
            self.wires[idx(role)].push(To::Sender, msg);
        }
        loop {
            let active = self.tx.failover().active();
            if self.wires[idx(active)].backlog() > WIRE_HIGH {
                break;
            }
            let Some((role, msg)) = self.tx.poll_transmit(now) else {
                break;
            };
            self.wires[idx(role)].push(To::Receiver, msg);
        }
    }

    fn actions(&mut self, now: Instant) {
        while let Some(a) = self.tx.poll_action() {
            self.action(now, "send", a);
        }
        while let Some(a) = self.rx.poll_action() {
            self.action(now, "receive", a);
        }
        // The machines logged and counted their transitions; the monitor, if on, gets them.
        while let Some(t) = self.tx.poll_transition() {
            if self.mon.is_on() {
                self.mon.transition(&t);
            }
        }
        while let Some(t) = self.rx.poll_transition() {
            if self.mon.is_on() {
                self.mon.transition(&t);
            }
        }
    }

    fn action(&mut self, now: Instant, side: &str, a: Action) {
        match a {
            Action::Switch { to, resume_from } => {
                tracing::info!(
                    "failover link {}: {side} stream on {to:?} from byte {resume_from}",
                    self.id
                );
                if side == "send" {
                    self.switched = Some((to, now));
                }
            }
            Action::Failed => {
                let l = self.tx.ledger();
                let why = format!(
                    "failover link {}: both connections down ({side} stream; sent {} of {} \
                     bytes acknowledged, credit to {}, {} and {} bytes queued)",
                    self.id,
                    l.acked(),
                    l.posted(),
                    l.credit(),
                    self.wires[0].backlog(),
                    self.wires[1].backlog()
                );
                tracing::warn!("{why}");
                self.failed = Some(why);
            }
        }
    }

    /// Appends a frame to the send stream if the window has room.
    ///
    /// # Safety
    /// With `lent`, the frame's bytes are read where they are: they must stay valid and
    /// unchanged until [`SendRing::materialize`] has run.
    unsafe fn queue_frame(&mut self, now: Instant, frame: &[u8], lent: bool) -> bool {
        let need = FRAME_HDR + frame.len();
        if self.send.room() < need {
            self.release_acked();
            if self.send.room() < need {
                return false;
            }
        }
        let hdr = (frame.len() as u64).to_le_bytes();
        self.send.append(&[&hdr]);
        match lent {
            // SAFETY: the caller's promise.
            true => unsafe { self.send.append_lent(frame) },
            false => self.send.append(&[frame]),
        }
        self.tx.post(now, need as u64);
        if self.mon.is_on() {
            let end = self.send.end();
            self.mon
                .queued(self.tx.failover().active(), frame.len(), end);
        }
        true
    }

    /// Lets the ring forget the acknowledged bytes; connections that still queue some of
    /// them (a silent one) take copies first.
    fn release_acked(&mut self) {
        let acked = self.tx.ledger().acked();
        for w in &mut self.wires {
            w.detach_before(acked, &self.send);
        }
        self.send.release(acked);
    }

    /// Copies the lent bytes still unacknowledged into the ring: the lender gets its
    /// memory back.
    fn end_loans(&mut self) {
        if self.send.has_holes() {
            self.release_acked();
            self.send.materialize();
        }
    }

    /// The next whole frame committed and not yet popped: its stream offset and length.
    fn ready_frame(&self) -> Result<Option<(u64, usize)>> {
        let done = self.rx.ledger().done();
        if done < self.consumed + FRAME_HDR as u64 {
            return Ok(None);
        }
        let mut len = [0u8; FRAME_HDR];
        // SAFETY: committed bytes (below `done`), dropped at once.
        len.copy_from_slice(unsafe { self.recv.frame(self.consumed, FRAME_HDR) });
        let len = u64::from_le_bytes(len);
        if len > (self.window / 4) as u64 {
            return Err(Error::Protocol(format!(
                "failover link {}: frame of {len} bytes",
                self.id
            )));
        }
        if done < self.consumed + FRAME_HDR as u64 + len {
            return Ok(None);
        }
        Ok(Some((self.consumed + FRAME_HDR as u64, len as usize)))
    }

    /// The user took `n` stream bytes; past half the window, the space they held is
    /// granted to the sender (in halves: each grant is a message).
    fn consume(&mut self, now: Instant, n: u64) {
        self.consumed += n;
        let used = (self.consumed - self.recv.base()) as usize;
        if used < self.window / 2 {
            return;
        }
        let posted = self.rx.ledger().posted();
        self.recv.release(self.consumed);
        let grant = self.recv.base() + self.window as u64 - posted;
        self.rx.post(now, grant);
    }

    /// Whether `role`'s connection is open and neither end has failed it.
    fn usable(&self, role: LinkRole) -> bool {
        !self.wires[idx(role)].is_dead()
            && self.tx.failover().link(role).is_usable()
            && self.rx.failover().link(role).is_usable()
    }

    /// Bytes sent and not yet acknowledged, or bytes (acks the peer waits for, say) not
    /// yet handed to the kernel on a connection that may still carry them. A connection
    /// either end has failed does not count: one gone silent never drains, and counting it
    /// would hold every send on this link forever.
    fn pending(&self) -> bool {
        self.failed.is_none() && (!self.tx.is_complete() || self.queued())
    }

    /// Bytes queued on a connection that may still carry them.
    fn queued(&self) -> bool {
        ROLES
            .iter()
            .any(|&r| self.usable(r) && self.wires[idx(r)].backlog() > 0)
    }

    /// Bytes posted and not yet handed to the kernel: cut into no chunk yet (waiting for
    /// credit, say), or queued on a connection that may still carry them. Bytes handed
    /// over and not yet acknowledged are the link's own business: the send ring keeps them
    /// and whoever drives the link next (its user, or the background thread) resends them
    /// if a connection fails, so a send need not wait for the peer's ack -- which, on a
    /// loaded host, waits for the peer to be scheduled.
    fn unsent(&self) -> bool {
        let l = self.tx.ledger();
        self.failed.is_none() && (l.transmitted() < l.posted() || self.queued())
    }
}

impl Inner {
    /// Whether a connection that may still carry them has bytes in the kernel that the
    /// peer has not received (see [`Wire::kernel_unacked`]).
    fn kernel_unacked(&self) -> bool {
        ROLES
            .iter()
            .any(|&r| self.usable(r) && self.wires[idx(r)].kernel_unacked())
    }
}

struct Shared {
    inner: Mutex<Inner>,
    stop: AtomicBool,
    /// Microseconds since `epoch` at which the user last drove the link.
    last_user: AtomicU64,
    epoch: Instant,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock left the state as it was mid-call; the link
        // fails on its own if that state is broken, so keep going rather than panic too.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        let us = self.epoch.elapsed().as_micros() as u64;
        self.last_user.store(us, Ordering::Relaxed);
    }

    fn user_idle(&self) -> bool {
        let now = self.epoch.elapsed().as_micros() as u64;
        now.saturating_sub(self.last_user.load(Ordering::Relaxed)) >= IDLE_DRIVE.as_micros() as u64
    }
}

/// The user drives the link: the background thread stays out while it does.
fn drive(sh: &Shared) -> Result<(bool, MutexGuard<'_, Inner>)> {
    sh.touch();
    let mut g = sh.lock();
    let moved = g.drive(Instant::now())?;
    Ok((moved, g))
}

fn background(sh: &Shared) {
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(IDLE_DRIVE);
        if !sh.user_idle() {
            continue;
        }
        if let Ok(mut g) = sh.inner.try_lock() {
            let _ = g.drive(Instant::now());
        }
    }
}

/// A framed link over a primary and a backup TCP connection that fails over between them
/// with no byte lost or repeated.
pub struct FailoverSocketLink {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    max_frame: usize,
    /// The frame `peek` showed, in place in the receive window (its first byte and
    /// length), and its stream length.
    peeked: Option<(*const u8, usize, u64)>,
}

// SAFETY: the only field that is not `Send` on its own is `peeked`, a pointer into the
// receive window that the shared state owns (kept alive by `shared`); it is read only
// through `&mut self` (`peek`), so moving the link to another thread changes nothing.
unsafe impl Send for FailoverSocketLink {}

impl FailoverSocketLink {
    /// A link over connected `primary` and `backup` streams to one peer (which builds its
    /// end from the same two connections, in the same roles), whose primary is never
    /// replaced.
    pub fn new(primary: TcpStream, backup: TcpStream, cfg: FailoverConfig) -> Result<Self> {
        Self::with_redial(primary, backup, cfg, Redial::Never)
    }

    /// As [`new`](Self::new), with a failed primary replaced by a fresh connection as
    /// `redial` says (what [`connect_pair`] returns).
    pub fn with_redial(
        primary: TcpStream,
        backup: TcpStream,
        cfg: FailoverConfig,
        redial: Redial,
    ) -> Result<Self> {
        Self::with_readdress(primary, backup, cfg, redial, None)
    }

    /// As [`with_redial`](Self::with_redial), following this side's primary NIC (`nic`)
    /// while the primary is failed: if it comes back with another address, the redial
    /// goes there (see [`PrimaryNic`]).
    pub fn with_readdress(
        primary: TcpStream,
        backup: TcpStream,
        cfg: FailoverConfig,
        redial: Redial,
        nic: Option<PrimaryNic>,
    ) -> Result<Self> {
        let inner = Inner::new([primary, backup], &cfg, redial, nic)?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            stop: AtomicBool::new(false),
            last_user: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        let sh = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ccl-sockfo".into())
            .spawn(move || background(&sh))
            .map_err(|e| Error::io("spawn failover link thread", e))?;
        Ok(FailoverSocketLink {
            shared,
            thread: Some(thread),
            max_frame: cfg.max_frame,
            peeked: None,
        })
    }

    fn drive(&self) -> Result<(bool, MutexGuard<'_, Inner>)> {
        drive(&self.shared)
    }

    /// Which connection each stream is on (send, receive) and whether each connection is
    /// still open: for tests and diagnostics.
    pub fn status(&self) -> FailoverStatus {
        let g = self.shared.lock();
        FailoverStatus {
            send_on: g.tx.failover().active(),
            receive_on: g.rx.failover().active(),
            send_state: g.tx.failover().state(),
            open: [!g.wires[0].is_dead(), !g.wires[1].is_dead()],
        }
    }
}

impl FailoverSocketLink {
    /// Queues `frame` (copied, or with `lent` read in place) and drives the link.
    ///
    /// # Safety
    /// With `lent`, as [`Link::try_send_deferred`].
    unsafe fn send_frame(&mut self, frame: &[u8], lent: bool) -> Result<bool> {
        if frame.len() > self.max_frame {
            return Err(Error::Protocol(format!(
                "frame of {} bytes exceeds the failover link's limit {}",
                frame.len(),
                self.max_frame
            )));
        }
        self.shared.touch();
        let mut g = self.shared.lock();
        g.check()?;
        let now = Instant::now();
        // Only a full ring needs the acks that arrived meanwhile before it takes the frame;
        // otherwise one drive after queueing does everything.
        // SAFETY: the caller's promise for `lent`; `has_pending` and `quiesce` end the
        // loan (`end_loans`) before the lender may reuse the memory.
        let queued = unsafe { g.queue_frame(now, frame, lent) };
        if !queued {
            g.drive(now)?;
            // SAFETY: as above.
            if !unsafe { g.queue_frame(now, frame, lent) } {
                return Ok(false);
            }
        }
        // Out at once rather than at the next call.
        g.push(now)?;
        Ok(true)
    }
}

/// Where a failover link stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverStatus {
    /// The connection this side's stream goes on.
    pub send_on: LinkRole,
    /// The connection the peer's stream comes on.
    pub receive_on: LinkRole,
    /// The sending machine's state.
    pub send_state: ConnState,
    /// Whether the primary and the backup connection are still open.
    pub open: [bool; 2],
}

impl Drop for FailoverSocketLink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Link for FailoverSocketLink {
    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn try_send(&mut self, frame: &[u8]) -> Result<bool> {
        // SAFETY: not lent: the ring copies the frame.
        unsafe { self.send_frame(frame, false) }
    }

    fn peek(&mut self) -> Result<Option<&[u8]>> {
        if let Some((p, len, _)) = self.peeked {
            // SAFETY: the frame an earlier `peek` found, still in place (see below); the
            // slice borrows `self`, so it is gone before `pop` can move it.
            return Ok(Some(unsafe { std::slice::from_raw_parts(p, len) }));
        }
        self.shared.touch();
        let mut g = self.shared.lock();
        // Frames committed before the link failed are still handed out: a peer that got
        // its last acks and closed its connections leaves its last frames here.
        let driven = g.drive(Instant::now());
        let Some((off, len)) = g.ready_frame()? else {
            driven?;
            return Ok(None);
        };
        // SAFETY: committed bytes (`ready_frame` checked them against `done`), which no
        // chunk overwrites; the window lets chunks reuse them only after `consume`, which
        // `pop` calls after this frame is given up; the slice borrows `self`, so it is gone
        // by then.
        let f = unsafe { g.recv.frame(off, len) };
        self.peeked = Some((f.as_ptr(), len, (FRAME_HDR + len) as u64));
        Ok(Some(f))
    }

    fn pop(&mut self) {
        if let Some((_, _, n)) = self.peeked.take() {
            self.shared.lock().consume(Instant::now(), n);
        }
    }

    fn flush(&mut self) -> Result<bool> {
        self.shared.touch();
        let mut g = self.shared.lock();
        match g.push(Instant::now()) {
            Ok(moved) => Ok(moved),
            // Every byte sent was acknowledged: a peer that got them all and left (closing
            // both connections) fails the link, but no send of this side is lost by it.
            Err(_) if g.tx.is_complete() => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn has_pending(&self) -> bool {
        let mut g = self.shared.lock();
        if g.unsent() {
            return true;
        }
        // The send completes: what it lent and is not acknowledged yet (a tail the acks
        // have not caught up with) is copied now, and only that.
        g.end_loans();
        false
    }

    unsafe fn try_send_deferred(&mut self, frame: &[u8]) -> Result<bool> {
        // SAFETY: the caller keeps `frame` valid and unchanged until `has_pending` is
        // false or `quiesce` returned, and both end the loan first.
        unsafe { self.send_frame(frame, true) }
    }

    fn quiesce(&mut self) {
        self.shared.lock().end_loans();
    }

    fn unconfirmed(&mut self) -> bool {
        match self.drive() {
            Ok((_, g)) => g.pending() || g.kernel_unacked(),
            Err(_) => false,
        }
    }

    fn kind(&self) -> &'static str {
        "socket"
    }

    fn attach_monitor(&mut self, m: &crate::LinkMonitor) {
        let mut g = self.shared.lock();
        let nics = [0, 1].map(|i| {
            g.wires[i]
                .local_ip()
                .and_then(crate::socket::interface_index)
                .unwrap_or(crate::NIC_NONE)
        });
        g.mon.attach(m, nics);
    }

    fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        self.shared.lock().mon.begin_op(op, seq);
    }
}

/// Connects the primary and backup streams to one peer over `ctrl`, a connected stream to
/// it: each side listens on its two NICs (`nics`, primary first) and tells the other where;
/// the side with `dial` set connects to the peer's, the other accepts. Blocking; both
/// sides write before they read, so peers handled in the same order on every rank cannot
/// deadlock. Also returns how the primary is replaced later: the dialing side dials the
/// same listener again, which the other side keeps.
pub fn connect_pair(
    ctrl: &mut TcpStream,
    nics: [std::net::IpAddr; 2],
    dial: bool,
    timeout: Duration,
) -> Result<(TcpStream, TcpStream, Redial)> {
    use std::io::{Read, Write};
    let listeners = [bind(nics[0])?, bind(nics[1])?];
    let mut hello = String::new();
    for l in &listeners {
        let a = l
            .local_addr()
            .map_err(|e| Error::io("failover link: listener address", e))?;
        hello.push_str(&format!("{a}\n"));
    }
    let mut msg = (hello.len() as u32).to_le_bytes().to_vec();
    msg.extend_from_slice(hello.as_bytes());
    ctrl.set_nonblocking(false)
        .map_err(|e| Error::io("failover link: hello", e))?;
    ctrl.set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("failover link: hello", e))?;
    ctrl.write_all(&msg)
        .map_err(|e| Error::io("failover link: send hello", e))?;
    let mut len = [0u8; 4];
    ctrl.read_exact(&mut len)
        .map_err(|e| Error::io("failover link: read hello", e))?;
    let mut theirs = vec![0u8; u32::from_le_bytes(len).min(4096) as usize];
    ctrl.read_exact(&mut theirs)
        .map_err(|e| Error::io("failover link: read hello", e))?;
    let peer = parse_hello(&theirs)?;
    let deadline = Instant::now() + timeout;
    let get = |k: usize| match dial {
        true => TcpStream::connect_timeout(&peer[k], timeout)
            .map_err(|e| Error::io(format!("failover link: connect to {}", peer[k]), e)),
        false => accept(&listeners[k], deadline),
    };
    let (primary, backup) = (get(0)?, get(1)?);
    let redial = match dial {
        true => Redial::Dial(peer[0]),
        false => {
            let ip = primary
                .peer_addr()
                .map_err(|e| Error::io("failover link: peer address", e))?
                .ip();
            let [listener, _] = listeners;
            Redial::Accept { listener, peer: ip }
        }
    };
    Ok((primary, backup, redial))
}

fn bind(ip: std::net::IpAddr) -> Result<TcpListener> {
    TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| Error::io(format!("failover link: listen on {ip}"), e))
}

fn parse_hello(b: &[u8]) -> Result<[SocketAddr; 2]> {
    let bad = || Error::Protocol("failover link: malformed hello".into());
    let text = std::str::from_utf8(b).map_err(|_| bad())?;
    let mut it = text
        .lines()
        .map(|l| l.parse::<SocketAddr>().map_err(|_| bad()));
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Ok([a?, b?]),
        _ => Err(bad()),
    }
}

fn accept(l: &TcpListener, deadline: Instant) -> Result<TcpStream> {
    l.set_nonblocking(true)
        .map_err(|e| Error::io("failover link: accept", e))?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| Error::io("failover link: accept", e))?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(Error::Unreachable(
                        "failover link: peer did not connect".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(Error::io("failover link: accept", e)),
        }
    }
}

#[cfg(test)]
mod tests;
