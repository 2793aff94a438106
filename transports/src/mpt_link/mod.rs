//! [`MptLink`]: a [`Link`] over multipath [`Connection`]s on the UDP datapath.
//!
//! A link runs `engines` (1..=16) independent sub-links, each with its own connection, set
//! of UDP paths and engine thread ("a progress thread per NIC/engine").
//!
//! Each engine owns two preallocated slabs of `slots` messages of its largest message each
//! (with several engines the largest message is a whole frame up to `split_bytes` or one
//! engine's part of a longer frame, so N engines do not take N times the memory):
//! * sending copies a message into the next send slot and queues it; at most `slots`
//!   messages are unacknowledged per engine, beyond that the engine is full;
//! * every receive slot is posted to the connection up front; arriving chunks are copied to
//!   their offset in the slot; a completed slot is read in place and then posted again.
//!
//! With one engine (the default) one link frame is one mpt message, exactly as before
//! engines existed: no extra header, the same hello, the same wire bytes.
//!
//! With several engines every message starts with a 16-byte part header (frame sequence
//! number, frame length, part index and count). A frame longer than `split_bytes` is cut
//! into one near-equal part per engine (part `i` on engine `i`, cut at multiples of
//! [`PIECE_ALIGN`]); a shorter frame goes whole to the least-loaded engine (fewest
//! unacknowledged bytes, then messages). Each engine is FIFO and the sender numbers frames
//! in order, so the next frame is always at the head of the engine(s) carrying it: the
//! receiver finds it there and shows it in place, a split frame part by part as pieces
//! (see [`Link::peek`]): joining the parts cost the receiving thread one more copy of every
//! byte, and that thread's copies are what limits a link of several engines.
//!
//! Progress (receive datagrams, fire timers, transmit) runs under a per-engine mutex. With
//! one engine the link's user runs it inline and the engine thread covers for it when the
//! user stops polling (acknowledgements and retransmissions for the last message of an
//! operation must still flow while the executor waits elsewhere). With several engines the
//! engine threads do it, in parallel, and the user queues and takes messages, waking a
//! sleeping engine through a socket pair -- except for small frames (`inline_bytes`): those go
//! whole on the lead engine (engine 0), which the user then drives itself while it waits for
//! them, as on a one-engine link. A small operation would otherwise wait for an engine thread
//! to wake on each side for the data and again for its acknowledgement; the user hands the
//! lead engine back to its thread (waking it) before any larger frame goes or comes.
//!
//! Setup: [`MptLink::over_tcp`] exchanges a hello (magic; with several engines the engine
//! count, largest frame and split size; per engine a flow id, path count and ports) over an
//! already connected TCP stream and keeps the stream open with the link. Both sides run the
//! smaller engine count; with several engines the largest frame and split size must agree:
//! a difference fails setup on both sides with an error naming it. [`MptLink::probe`] then
//! checks that datagrams get through both ways before the link carries data.

use std::cell::UnsafeCell;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::mpt::udp::{self, RxBatch, TxBatch, UdpPaths, MAX_DATAGRAM};
use crate::mpt::{frame::DATA_HEADER_LEN, CcKind, Connection, Event, Instant, MptConfig, PathId};
use crate::{Error, Link, Result, PIECE_ALIGN};

/// Hello of a one-engine link (unchanged since before engines, so old peers still match).
const HELLO_MAGIC: &[u8; 4] = b"MPT1";
/// Hello of a link of several engines: magic, engine count, largest frame, split size,
/// then one `MPT1` body (flow id, path count, ports) per engine.
const HELLO_MAGIC_ENGINES: &[u8; 4] = b"MPTE";
/// Most engines per link.
pub const MAX_ENGINES: usize = 16;
/// Most messages in flight per direction and engine (the header's request-id space).
const MAX_SLOTS: usize = 16;
/// Trailer of a hello whose paths sit on several local addresses: magic, count, then each
/// address (family 4 or 6, its bytes); path `i` of every engine is on address `i % count`.
const HELLO_MAGIC_ADDRS: &[u8; 4] = b"MPTA";
/// Most local addresses (NICs) a link spreads its paths over.
pub const MAX_NICS: usize = 8;
/// Longest hello: magic, engine count, frame layout, per engine flow id, path count and 256
/// ports, and the address trailer.
const MAX_HELLO: usize = 22 + MAX_ENGINES * (4 + 2 * 256) + 5 + MAX_NICS * 17;
/// Part header in front of every message of a link of several engines.
const PART_HEADER: usize = 16;
/// Last two bytes of a part header: catches a peer that speaks another framing.
const PART_MAGIC: u16 = 0x4D45;
/// Longest the engine sleeps without traffic (bounds timer latency if a deadline is lost).
const IDLE_WAIT: Duration = Duration::from_millis(1);
/// The engine leaves progress to the link's user while the user ran it this recently.
const USER_ACTIVE: Duration = Duration::from_micros(200);

/// Settings of one link.
#[derive(Clone, Debug)]
pub struct MptLinkConfig {
    /// Paths (UDP sockets) per engine, 1..=256; both sides must agree.
    pub paths: u16,
    /// Largest frame of a link that runs one engine.
    pub max_frame: usize,
    /// Messages in flight per direction and engine, 1..=16 (the header's request-id space),
    /// on a link that runs one engine.
    pub slots: u32,
    /// Largest frame and messages in flight per engine of a link that runs several engines,
    /// if not `max_frame` and `slots`: the engine count is settled with the peer (the smaller
    /// of the two), so a link knows which pair applies only then, and both sides pick alike.
    /// Several engines split large frames, so they want larger ones than one engine (which
    /// copies and sends alone).
    pub engines_max_frame: Option<usize>,
    /// See `engines_max_frame`.
    pub engines_slots: Option<u32>,
    /// Injected loss of outgoing datagrams, `[0, 1]`, on every engine.
    pub drop_rate: f64,
    /// Congestion control.
    pub cc: CcKind,
    /// Chunk size (capped so a chunk fits one UDP datagram).
    pub chunk_size: u32,
    /// See `MptConfig::ack_delay`.
    pub ack_delay: Duration,
    /// Seed of loss injection and path sampling.
    pub seed: u64,
    /// Engines (sub-links, each with its own connection, paths and thread), 1..=16; a link
    /// runs the smaller of its two sides' counts.
    pub engines: usize,
    /// With several engines, frames longer than this are split into one part per engine.
    pub split_bytes: usize,
    /// With several engines, each engine's thread copies its own part of a split frame into
    /// its send slot while `try_send` waits, instead of the sender copying every part: pays
    /// where parts are large (MiB frames) and cores many; a local choice.
    pub engine_copy: bool,
    /// With several engines, frames handed over with [`Link::try_send_deferred`] are copied
    /// into their send slots by the copy threads (crate::par) while the user goes on (to
    /// receive, say), and queued once copied, in order: the user's thread no longer waits for
    /// its sends' copies. Off by default (not yet measured on a many-core host).
    pub async_copy: bool,
    /// Frames handed over with [`Link::try_send_deferred`] are not copied at all: the engines
    /// send (and resend) them from the caller's memory, which the caller keeps unchanged until
    /// the link has nothing pending (every message acknowledged); [`Link::quiesce`] copies what
    /// is still unacknowledged into the send slots. Takes precedence over `async_copy`.
    pub zero_copy: bool,
    /// Local addresses (one per NIC, in the same NIC order on both sides) to spread every
    /// engine's paths over: path `i` binds `local_ips[i % len]` and talks to the peer's path
    /// `i` on the peer's address of the same index. A NIC port that dies takes its paths
    /// with it; the connection's loss recovery moves their chunks to the others and keeps
    /// probing the dead ones, which come back when the port does. Empty: every path on the
    /// address the link was bound to. At most [`MAX_NICS`].
    pub local_ips: Vec<IpAddr>,
    /// How long an engine thread that found nothing to do keeps polling before it parks in
    /// `poll` (zero: it parks at once). Spinning saves the wake-up of a parked thread on
    /// every burst, at the price of a core per engine while traffic flows.
    pub spin: Duration,
    /// The link takes the destinations its user lends ([`Link::lend`]) and its engines write
    /// arriving frames (or, on several engines, their parts of split frames) straight there,
    /// instead of into their receive slots for the user to copy out. Either side may choose
    /// alone (nothing changes on the wire).
    pub place_receives: bool,
    /// With several engines, frames of at most this many bytes go whole on the lead engine
    /// and the user's thread runs that engine's progress while it sends and waits for them
    /// (0: never; every frame to the least-loaded engine, moved by the engine threads alone).
    /// At most `split_bytes` apply (longer frames are split). A local choice (the receiver
    /// finds a frame on whichever engine carries it).
    pub inline_bytes: usize,
}

impl Default for MptLinkConfig {
    fn default() -> Self {
        MptLinkConfig {
            paths: udp::DEFAULT_UDP_PATHS,
            max_frame: 512 * 1024,
            slots: 16,
            engines_max_frame: None,
            engines_slots: None,
            drop_rate: 0.0,
            cc: CcKind::Cubic,
            chunk_size: 32 * 1024,
            ack_delay: MptConfig::default().ack_delay,
            seed: 0x5EED,
            engines: 1,
            split_bytes: 256 * 1024,
            engine_copy: false,
            async_copy: false,
            zero_copy: false,
            local_ips: Vec::new(),
            spin: Duration::ZERO,
            place_receives: false,
            inline_bytes: 0,
        }
    }
}

/// A slab of message slots shared between the link's user and whoever runs progress.
///
/// Receive slab: ownership of slot `s` is handed over by the state in `Inner::recv_done`
/// (guarded by the mutex): while the slot's receive is posted and incomplete only progress
/// writes it; once complete only the consumer reads it, until it is posted again.
///
/// Send slab: the user writes slot `next_send % slots` while it holds no message (the
/// engine is not full, so the slot's previous message is acknowledged and retired) and
/// without the lock, then hands the message to the connection under the lock; from then on
/// only progress reads it (under the lock) until it is retired.
struct Slab {
    buf: Box<[UnsafeCell<u8>]>,
}

// SAFETY: access to each slot is partitioned in time by the protocols above, with the
// mutex providing the happens-before edges at every handover.
unsafe impl Sync for Slab {}
// SAFETY: as above; the slab is plain bytes.
unsafe impl Send for Slab {}

impl Slab {
    fn new(len: usize) -> Self {
        Slab {
            buf: (0..len).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    fn ptr(&self) -> *mut u8 {
        // UnsafeCell<u8> has the layout of u8, so the slice is a contiguous byte array.
        UnsafeCell::raw_get(self.buf.as_ptr())
    }
}

/// A destination lent for one message (see [`Link::lend`]): its first `skip` bytes (a part
/// header) go to the message's slot, the next `cap` to `addr` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loan {
    addr: usize,
    cap: usize,
    skip: usize,
}

impl Loan {
    const NONE: Loan = Loan {
        addr: 0,
        cap: 0,
        skip: 0,
    };
}

struct Inner {
    conn: Connection,
    udp: UdpPaths,
    base: std::time::Instant,
    /// Largest message, which is also the stride of both slabs.
    max_frame: usize,
    slots: u64,
    send_done: Vec<bool>,
    /// Length of the message in each send slot, to keep `unacked_bytes`.
    send_len: Vec<u64>,
    /// Per send slot, a borrowed message (`MptLinkConfig::zero_copy`): `(addr, head)` -- its
    /// first `head` bytes lie in the slot, the rest at `addr`, in the sender's memory, which
    /// the sender keeps unchanged until the message is acknowledged (or `unborrow` copied it
    /// into the slot). `(0, 0)`: the whole message is in the slot.
    send_ext: Vec<(usize, usize)>,
    unacked_bytes: u64,
    next_send: u64,
    oldest_unacked: u64,
    /// Per receive slot: `Some(len)` once complete.
    recv_done: Vec<Option<usize>>,
    /// Per receive slot, a destination lent for its message ([`Link::lend`]).
    recv_lent: Vec<Loan>,
    /// Per receive slot, some of its message's bytes arrived (into the slot, or to its lent
    /// destination): it can no longer be lent one, nor its loan be withdrawn unnoticed.
    recv_touched: Vec<bool>,
    /// How many received bytes went straight to lent destinations.
    placed_bytes: u64,
    next_pop: u64,
    rx: RxBatch,
    tx: TxBatch,
    /// Paths found readable by the last poll.
    ready: Vec<u16>,
    error: Option<String>,
    /// `error` is the connection giving up on a silent network (not a protocol fault).
    unreachable: bool,
    bad_datagrams: u64,
    peer: String,
    /// The engine thread found nothing to do and is (about to be) parked in `poll`: a user
    /// who queues work must wake it.
    sleeping: bool,
    /// A part of a split frame for the engine thread to copy and queue (`engine_copy`).
    copy_job: Option<CopyJob>,
}

/// One part of a split frame, handed to the engine thread that carries it
/// (`MptLinkConfig::engine_copy`).
struct CopyJob {
    src: *const u8,
    len: usize,
    hdr: [u8; PART_HEADER],
}

// SAFETY: `src` points into the frame passed to `MptLink::try_send`, which does not return
// (so the frame stays borrowed and unchanged) until every job it handed out is done
// (`Shared::copies_done`); the engine thread only reads through it, under the engine's lock.
unsafe impl Send for CopyJob {}

impl Inner {
    fn now(&self) -> Instant {
        Instant::from_std(self.base, std::time::Instant::now())
    }

    fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) if self.unreachable => Err(Error::Unreachable(format!(
                "mpt link to {}: {e}",
                self.peer
            ))),
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

    fn full(&self) -> bool {
        self.next_send - self.oldest_unacked >= self.slots
    }

    /// Hands the `len`-byte message written into the next send slot to the connection;
    /// `Ok(false)` when the connection has no room for it yet.
    fn register(&mut self, len: usize) -> Result<bool> {
        self.register_borrowed(len, (0, 0))
    }

    /// [`Inner::register`] of a message whose bytes past `ext.1` lie at `ext.0` (see
    /// `send_ext`).
    fn register_borrowed(&mut self, len: usize, ext: (usize, usize)) -> Result<bool> {
        let slot = (self.next_send % self.slots) as usize;
        let now = self.now();
        match self.conn.send(now, len as u64, 0) {
            Ok(id) if id.0 == self.next_send => {}
            Ok(_) => return Err(Error::Protocol("mpt send ids out of step".into())),
            // The core still holds an acknowledged-but-unretired message: full for now.
            Err(crate::mpt::MptError::SendQueueFull(_)) => return Ok(false),
            Err(e) => return Err(Error::Protocol(format!("mpt send: {e}"))),
        }
        self.send_len[slot] = len as u64;
        self.send_ext[slot] = ext;
        self.unacked_bytes += len as u64;
        self.next_send += 1;
        Ok(true)
    }

    /// Whether a send queued here is not complete yet: a chunk has not left once, or a
    /// message sent from its sender's memory (not copied into a send slot) waits for its
    /// acknowledgement -- until then the sender must keep those bytes. A copied message
    /// that has left completes without waiting for the peer: its slot keeps the bytes for
    /// resending, and whoever drives the engine (its thread, once the user stops) takes
    /// the acknowledgement. Waiting for it cost every step a round trip (two ranks over
    /// loopback, 8 B broadcast 7.8 -> 4.5 us).
    fn holds_sender(&self) -> bool {
        !self.conn.all_sent()
            || (self.oldest_unacked..self.next_send)
                .any(|m| self.send_ext[(m % self.slots) as usize].0 != 0)
    }

    /// One round of receive, timers and transmit; returns whether anything moved.
    fn progress(&mut self, slab: &Slab, send_slab: &Slab) -> bool {
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
                for i in 0..self.rx.len() {
                    let dg = self.rx.get(i);
                    match self.conn.handle_datagram(now, PathId(p as u16), dg) {
                        Ok(Some(pl)) => {
                            let slot = (pl.recv.0 % self.slots) as usize;
                            let off = usize::try_from(pl.offset).unwrap_or(usize::MAX);
                            let len = pl.payload.len();
                            let end = off.checked_add(len);
                            let loan = self.recv_lent[slot];
                            self.recv_touched[slot] = true;
                            if loan.addr != 0 {
                                if !end.is_some_and(|e| e <= loan.skip + loan.cap) {
                                    self.fail(format!(
                                        "peer sent a frame longer than the {} bytes lent for it",
                                        loan.cap
                                    ));
                                    return false;
                                }
                                // The message's first `skip` bytes (a part header) go to its
                                // slot, the rest to the loan.
                                let head = loan.skip.saturating_sub(off).min(len);
                                // SAFETY: the head lies inside slot `slot` (skip <= the
                                // slot's size), whose receive is posted and incomplete, so
                                // no consumer reads it; the rest lies inside the loan
                                // (checked above), which the user lent for this receive
                                // (`Link::lend`'s contract: valid for writes, touched by
                                // nobody else until the frame is popped or the loan is
                                // withdrawn by `quiesce`, both under this lock); the source
                                // is our own receive buffer, disjoint from both.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        pl.payload.as_ptr(),
                                        slab.ptr().add(slot * self.max_frame + off),
                                        head,
                                    );
                                    std::ptr::copy_nonoverlapping(
                                        pl.payload.as_ptr().add(head),
                                        (loan.addr + (off + head).saturating_sub(loan.skip))
                                            as *mut u8,
                                        len - head,
                                    );
                                }
                                self.placed_bytes += (len - head) as u64;
                            } else if end.is_some_and(|e| e <= self.max_frame) {
                                // SAFETY: the range lies inside slot `slot` of the slab
                                // (checked above), whose receive is posted and incomplete,
                                // so no consumer reads it (see `Slab`); the source is
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
        moved |= self.transmit(now, send_slab);
        self.drain_events();
        moved
    }

    fn transmit(&mut self, now: Instant, send_slab: &Slab) -> bool {
        let mut moved = false;
        loop {
            while !self.tx.is_full() {
                let Some(t) = self.conn.poll_transmit(now) else {
                    break;
                };
                let Some(out) = self.tx.slot() else { break };
                let Ok(mut len) = t.frame.encode(out) else {
                    // Nothing committed may outlive this call (payloads are borrowed).
                    self.tx.clear();
                    self.fail("encode frame".into());
                    return moved;
                };
                let mut payload: &[u8] = &[];
                if let Some(p) = t.payload {
                    let slot = (p.send.0 % self.slots) as usize;
                    let off = usize::try_from(p.offset).unwrap_or(usize::MAX);
                    let plen = p.len as usize;
                    let inside = off.checked_add(plen).is_some_and(|e| {
                        e <= self.max_frame && slot < self.slots as usize && len + plen <= out.len()
                    });
                    if !inside {
                        self.tx.clear();
                        self.fail("payload outside the send slab".into());
                        return moved;
                    }
                    let (ext, head) = self.send_ext[slot];
                    // Of a borrowed message, the bytes under `head` (the part header) lie in
                    // the slot: those of this chunk go into the batch behind its header.
                    let in_slot = if ext == 0 {
                        plen
                    } else {
                        head.saturating_sub(off).min(plen)
                    };
                    // SAFETY: the range lies inside slot `slot` (checked above), which holds a
                    // message handed to the connection and not yet retired: nothing writes it
                    // now (see `Slab`), and it is retired only by events drained after this
                    // batch has been sent. A borrowed message's other bytes are the sender's,
                    // unchanged until the message is retired or `unborrow`ed (under this lock).
                    unsafe {
                        let in_slab = send_slab.ptr().add(slot * self.max_frame + off);
                        if ext == 0 {
                            payload = std::slice::from_raw_parts(in_slab, plen);
                        } else {
                            // `len + plen <= out.len()` (checked above).
                            out[len..len + in_slot]
                                .copy_from_slice(std::slice::from_raw_parts(in_slab, in_slot));
                            let from = off + in_slot - head;
                            payload = std::slice::from_raw_parts(
                                (ext + from) as *const u8,
                                plen - in_slot,
                            );
                        }
                    }
                    if ext != 0 {
                        len += in_slot;
                    }
                }
                if self.udp.inject_drop() {
                    continue;
                }
                // SAFETY: `payload` stays put until `send_batch` below (see above); the batch
                // is sent or cleared within this call.
                unsafe { self.tx.commit_with(t.path.0, len, payload) };
            }
            if self.tx.is_empty() {
                return moved;
            }
            moved = true;
            let full = self.tx.is_full();
            if let Err(e) = self.udp.send_batch(&mut self.tx) {
                self.tx.clear();
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
                        self.send_ext[s] = (0, 0);
                        self.unacked_bytes = self.unacked_bytes.saturating_sub(self.send_len[s]);
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
                Event::Failed(e) => {
                    self.unreachable |= matches!(e, crate::mpt::MptError::RetriesExhausted(_));
                    self.fail(e.to_string());
                }
            }
        }
    }
}

/// Wakes an engine thread parked in `poll`: a datagram on a socket pair whose receiving end
/// is polled with the paths. A socket pair rather than an eventfd keeps this free of
/// `unsafe`.
struct Wake {
    rx: UnixDatagram,
    tx: UnixDatagram,
}

impl Wake {
    fn new() -> Result<Self> {
        let io = |e| Error::io("mpt engine wake-up socket pair", e);
        let (rx, tx) = UnixDatagram::pair().map_err(io)?;
        rx.set_nonblocking(true).map_err(io)?;
        tx.set_nonblocking(true).map_err(io)?;
        Ok(Wake { rx, tx })
    }

    fn notify(&self) {
        // A full pair already holds a pending wake-up, which is all that is needed.
        let _ = self.tx.send(&[1]);
    }

    fn drain(&self) {
        let mut b = [0u8; 16];
        while self.rx.recv(&mut b).is_ok() {}
    }
}

struct Shared {
    inner: Mutex<Inner>,
    slab: Slab,
    send_slab: Slab,
    stop: AtomicBool,
    fds: Vec<RawFd>,
    /// When the link's user last ran progress (ns since `epoch`): while the user polls, the
    /// engine stays out of its way (on few cores a second poller only steals time slices and
    /// fights for the lock); it takes over when the user stops polling. Only a one-engine
    /// link's user runs progress.
    user_progress: AtomicU64,
    epoch: std::time::Instant,
    /// Present with several engines, where the user never runs progress itself.
    wake: Option<Wake>,
    /// Mirrors of `Inner`'s send load, so the user can pick the least-loaded engine and
    /// answer `has_pending` without taking every engine's lock.
    unacked_msgs: AtomicU64,
    unacked_bytes: AtomicU64,
    /// Mirror of [`Inner::holds_sender`]: a send on this engine is not complete yet.
    holding: AtomicBool,
    failed: AtomicBool,
    /// The oldest receive is complete (a hint: the lock confirms it).
    head_ready: AtomicBool,
    slots: u64,
    /// Copy jobs this engine has finished (`engine_copy`).
    copies_done: AtomicU64,
}

impl Shared {
    fn touch(&self) {
        self.user_progress
            .store(nanos_since(self.epoch), Ordering::Relaxed);
    }

    /// The user stops driving this engine: its thread takes over at once (it waits on its
    /// wake-up socket while the user drives, so it sees this now rather than after
    /// `USER_ACTIVE`).
    fn hand_back(&self) {
        self.user_progress.store(0, Ordering::Relaxed);
        if let Some(w) = &self.wake {
            w.notify();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another holder cannot leave the state half-updated in a way that
        // matters more than stopping; keep going with what is there.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, g: &Inner) {
        self.unacked_msgs
            .store(g.next_send - g.oldest_unacked, Ordering::Relaxed);
        self.unacked_bytes.store(g.unacked_bytes, Ordering::Relaxed);
        self.holding.store(g.holds_sender(), Ordering::Relaxed);
        let s = (g.next_pop % g.slots) as usize;
        self.head_ready
            .store(g.recv_done[s].is_some(), Ordering::Relaxed);
        if g.error.is_some() {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    fn run(&self, g: &mut Inner) -> bool {
        let moved = g.progress(&self.slab, &self.send_slab);
        self.publish(g);
        moved
    }

    /// Wakes the engine thread if it is parked; called with the lock held after queueing
    /// work, which closes the race with the thread deciding to park (it decides under the
    /// same lock).
    fn kick(&self, g: &mut Inner) {
        if let Some(w) = &self.wake {
            if std::mem::take(&mut g.sleeping) {
                w.notify();
            }
        }
    }

    /// The address of the next send slot, for a message of `len` bytes, if the engine has
    /// room for one (`drive`: first run progress inline, as the one-engine link does). The
    /// slot stays free until [`Shared::commit`]: only the link's user adds messages, and the
    /// engine thread only retires them.
    fn reserve(&self, len: usize, drive: bool) -> Result<Option<*mut u8>> {
        self.reserve_ahead(len, drive, 0)
    }

    /// [`Shared::reserve`] of the slot `ahead` messages past the next one: the user has
    /// reserved `ahead` slots it has not committed yet (their copies still running), which
    /// it commits in order before this one.
    fn reserve_ahead(&self, len: usize, drive: bool, ahead: u64) -> Result<Option<*mut u8>> {
        let mut g = self.lock();
        g.check()?;
        if g.next_send - g.oldest_unacked + ahead >= g.slots {
            if ahead > 0 || !drive {
                return Ok(None);
            }
            self.touch();
            self.run(&mut g);
            g.check()?;
            if g.full() {
                return Ok(None);
            }
        }
        if len > g.max_frame {
            return Err(Error::Protocol(format!(
                "mpt message of {len} bytes over the engine's {}",
                g.max_frame
            )));
        }
        let (slot, stride) = (((g.next_send + ahead) % g.slots) as usize, g.max_frame);
        // SAFETY: slot < slots, and the slab holds `slots` strides.
        Ok(Some(unsafe { self.send_slab.ptr().add(slot * stride) }))
    }

    /// Queues the `len`-byte message written into the slot [`Shared::reserve`] returned;
    /// `Ok(false)` when the connection has no room for it yet.
    fn commit(&self, len: usize, drive: bool) -> Result<bool> {
        self.queue(len, (0, 0), drive)
    }

    /// Registers the message in the next send slot (`ext`: see `Inner::send_ext`), then runs
    /// progress (`drive`) or tells the engine thread.
    fn queue(&self, len: usize, ext: (usize, usize), drive: bool) -> Result<bool> {
        let mut g = self.lock();
        g.check()?;
        if len > g.max_frame || ext.1 > len {
            return Err(Error::Protocol(format!(
                "mpt message of {len} bytes (head {}) over the engine's {}",
                ext.1, g.max_frame
            )));
        }
        if !g.register_borrowed(len, ext)? {
            return Ok(false);
        }
        if drive {
            self.touch();
            self.run(&mut g);
        } else {
            self.publish(&g);
            self.kick(&mut g);
        }
        Ok(true)
    }

    /// [`Shared::commit`] of a borrowed message: its first `head` bytes were written into the
    /// reserved slot, the other `len - head` lie at `ext` and are read from there until the
    /// message is acknowledged.
    ///
    /// # Safety
    /// `ext` must stay valid for `len - head` reads, unchanged, until the engine has no
    /// unacknowledged message (`pending` is false) or [`Shared::unborrow`] has returned.
    unsafe fn commit_borrowed(
        &self,
        len: usize,
        ext: *const u8,
        head: usize,
        drive: bool,
    ) -> Result<bool> {
        self.queue(len, (ext as usize, head), drive)
    }

    /// Copies every unacknowledged borrowed message into its slot, so nothing reads the
    /// sender's memory any more (a failed operation is about to give its buffers back); the
    /// messages go on from the slots.
    fn unborrow(&self) {
        let mut g = self.lock();
        for seq in g.oldest_unacked..g.next_send {
            let slot = (seq % g.slots) as usize;
            let (ext, head) = g.send_ext[slot];
            if ext == 0 {
                continue;
            }
            let len = g.send_len[slot] as usize;
            // SAFETY: the slot holds this unretired message of `len <= max_frame` bytes
            // (register checked the length against the slot); its bytes past `head` are
            // still the sender's (see `commit_borrowed`), disjoint from the slab; progress,
            // the only reader, is excluded by the lock.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ext as *const u8,
                    self.send_slab.ptr().add(slot * g.max_frame + head),
                    len - head,
                );
            }
            g.send_ext[slot] = (0, 0);
        }
    }

    /// Queues one message made of `hdr` then `payload`. `drive`: run progress inline (the
    /// one-engine link) rather than leave it to the engine thread.
    fn send(&self, hdr: &[u8], payload: &[u8], drive: bool) -> Result<bool> {
        let len = hdr.len() + payload.len();
        let Some(dst) = self.reserve(len, drive)? else {
            return Ok(false);
        };
        // The copy runs without the lock, so the engine thread keeps receiving and
        // acknowledging meanwhile (a 1 MiB copy under the lock stalled it ~100 us).
        // SAFETY: `dst` is a free slot of at least `len` bytes (`reserve`); `hdr` and
        // `payload` are the caller's, disjoint from the slab.
        unsafe { std::ptr::copy_nonoverlapping(hdr.as_ptr(), dst, hdr.len()) };
        let to = [(dst as usize + hdr.len(), 0, payload.len())];
        copy_into_slots(payload, &to);
        self.commit(len, drive)
    }

    /// Hands one part of a split frame to the engine thread, which copies and queues it; the
    /// caller waits for `copies_done` to count it before the frame may change.
    fn hand_over(&self, hdr: [u8; PART_HEADER], part: &[u8]) -> Result<()> {
        let mut g = self.lock();
        g.check()?;
        if g.full() || g.copy_job.is_some() || hdr.len() + part.len() > g.max_frame {
            return Err(Error::Protocol(
                "mpt engine refused a part after showing room".into(),
            ));
        }
        g.copy_job = Some(CopyJob {
            src: part.as_ptr(),
            len: part.len(),
            hdr,
        });
        // Woken whether or not it parked: it may be about to.
        if let Some(w) = &self.wake {
            g.sleeping = false;
            w.notify();
        }
        Ok(())
    }

    /// Runs the pending copy job, if any (engine thread, lock held); a job that cannot be
    /// queued fails the link (the user saw room for it, and only the user adds messages).
    fn run_copy_job(&self, g: &mut Inner) -> bool {
        let Some(job) = g.copy_job.take() else {
            return false;
        };
        if g.error.is_none() {
            let slot = (g.next_send % g.slots) as usize;
            let len = PART_HEADER + job.len;
            // SAFETY: slot `slot` holds no message (the user checked room and adds nothing
            // while the job is pending); `hand_over` checked `len <= max_frame`; `job.src`
            // is valid for `job.len` reads (see `CopyJob`) and disjoint from the slab.
            unsafe {
                let dst = self.send_slab.ptr().add(slot * g.max_frame);
                std::ptr::copy_nonoverlapping(job.hdr.as_ptr(), dst, PART_HEADER);
                std::ptr::copy_nonoverlapping(job.src, dst.add(PART_HEADER), job.len);
            }
            match g.register(len) {
                Ok(true) => {}
                Ok(false) => g.fail("no room for a part the link showed room for".into()),
                Err(e) => g.fail(e.to_string()),
            }
        }
        // The new load is published before the job counts as done: the user reads `room`
        // (the published load) right after, and must not see room this message took.
        self.publish(g);
        self.copies_done.fetch_add(1, Ordering::Release);
        true
    }

    /// The slot and length of the oldest completed receive, if any, and where its bytes
    /// are: a destination lent for it, or 0 for its slot.
    fn head(&self, drive: bool) -> Result<Option<(usize, usize, usize)>> {
        // Without driving, a poll of an engine with nothing complete takes no lock, so a
        // spinning consumer does not contend with the engine thread.
        if !drive
            && !self.head_ready.load(Ordering::Relaxed)
            && !self.failed.load(Ordering::Relaxed)
        {
            return Ok(None);
        }
        let mut g = self.lock();
        g.check()?;
        let mut s = (g.next_pop % g.slots) as usize;
        if g.recv_done[s].is_none() && drive {
            self.touch();
            self.run(&mut g);
            g.check()?;
            s = (g.next_pop % g.slots) as usize;
        }
        Ok(g.recv_done[s].map(|len| (s, len, g.recv_lent[s].addr)))
    }

    /// # Safety
    ///
    /// Receive slot `slot` must be complete and not yet released (it then belongs to the
    /// consumer, see `Slab`), `off + len` must not exceed its message length, and the
    /// slice must be dropped before the slot is released.
    unsafe fn recv_bytes(&self, stride: usize, slot: usize, off: usize, len: usize) -> &[u8] {
        // SAFETY: per the caller's contract the range lies inside a completed slot that
        // nothing writes until it is released.
        unsafe { std::slice::from_raw_parts(self.slab.ptr().add(slot * stride + off), len) }
    }

    /// Lends `loans[k]` to the `k`-th message from the oldest not yet released on (those
    /// beyond the posted receives wait for a later call). A message already lent keeps its
    /// loan (a later call lends the same places again as the window moves on); one that
    /// has bytes in its slot, or is complete, stops the lending (its bytes are in the slot,
    /// to be copied, and the places after it would not line up with a prefix the user has
    /// consumed).
    ///
    /// # Safety
    /// As [`Link::lend`], for every loan.
    unsafe fn lend(&self, loans: &[Loan]) {
        let mut g = self.lock();
        for (seq, &loan) in (g.next_pop..g.next_pop + g.slots).zip(loans) {
            let s = (seq % g.slots) as usize;
            if g.recv_lent[s].addr != 0 {
                if g.recv_lent[s] != loan {
                    // Lent before at other places: the user's view moved in a way this
                    // link cannot follow; stop here rather than guess.
                    break;
                }
            } else if g.recv_touched[s]
                || g.recv_done[s].is_some()
                || loan.skip + loan.cap > g.max_frame
            {
                break;
            } else {
                g.recv_lent[s] = loan;
            }
        }
    }

    /// Withdraws every loan whose message is not complete (nothing is written to a lent
    /// destination after this returns); a message's bytes that already went to its lent
    /// destination are lost to it, so such a message fails the link.
    fn unlend(&self) {
        let mut g = self.lock();
        let mut lost = false;
        for seq in g.next_pop..g.next_pop + g.slots {
            let s = (seq % g.slots) as usize;
            if g.recv_lent[s].addr != 0 && g.recv_done[s].is_none() {
                g.recv_lent[s] = Loan::NONE;
                lost |= g.recv_touched[s];
            }
        }
        if lost {
            g.fail("a receive's destination was withdrawn while it arrived".into());
        }
    }

    /// Posts the oldest completed receive slot again; `driven`: the user drives this engine
    /// and announces the receive with its next round of progress (as a one-engine link's
    /// user does), so the engine thread is not woken for it.
    fn release(&self, driven: bool) {
        let mut g = self.lock();
        let s = (g.next_pop % g.slots) as usize;
        g.recv_done[s] = None;
        g.recv_lent[s] = Loan::NONE;
        g.recv_touched[s] = false;
        g.next_pop += 1;
        let now = g.now();
        let cap = g.max_frame as u64;
        if let Err(e) = g.conn.post_recv(now, cap, 0) {
            g.fail(format!("repost receive: {e}"));
        }
        self.publish(&g);
        // The new receive is announced to the peer (its sender may be waiting for room):
        // with several engines nobody else would run progress before the next timer.
        if !driven {
            self.kick(&mut g);
        }
    }

    fn flush(&self) -> Result<bool> {
        let mut g = self.lock();
        g.check()?;
        self.touch();
        let moved = self.run(&mut g);
        g.check()?;
        Ok(moved)
    }

    fn pending(&self) -> bool {
        let g = self.lock();
        g.error.is_none() && g.holds_sender()
    }
}

fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One engine's side of the endpoint: its paths and flow id.
struct SubEndpoint {
    udp: UdpPaths,
    fid: u16,
    seed: u64,
}

/// One end of a link before the peer is known: bound sockets and flow ids.
pub struct MptEndpoint {
    subs: Vec<SubEndpoint>,
    cfg: MptLinkConfig,
}

/// Seed of engine `e`: engine 0 keeps the link's own, so a one-engine link draws the same
/// losses and path samples as before engines existed.
fn engine_seed(seed: u64, e: usize) -> u64 {
    if e == 0 {
        seed
    } else {
        mix(seed ^ (e as u64).wrapping_mul(0xA24B_AED4_963E_E407))
    }
}

impl MptEndpoint {
    /// Binds the path sockets of every engine on `ip`.
    pub fn bind(ip: IpAddr, cfg: MptLinkConfig) -> Result<Self> {
        let several = for_engines(&cfg, 2);
        let slots = 1..=MAX_SLOTS as u32;
        if !slots.contains(&cfg.slots) || !slots.contains(&several.slots) {
            return Err(Error::Protocol("mpt slots must be in 1..=16".into()));
        }
        if cfg.engines == 0 || cfg.engines > MAX_ENGINES {
            return Err(Error::Protocol(format!(
                "mpt engines must be in 1..={MAX_ENGINES}, not {}",
                cfg.engines
            )));
        }
        if cfg.local_ips.len() > MAX_NICS {
            return Err(Error::Protocol(format!(
                "mpt paths spread over at most {MAX_NICS} local addresses, not {}",
                cfg.local_ips.len()
            )));
        }
        if cfg.engines > 1 && u32::try_from(several.max_frame).is_err() {
            return Err(Error::Protocol(
                "mpt frames over 4 GiB cannot be split across engines".into(),
            ));
        }
        let mut subs = Vec::with_capacity(cfg.engines);
        for e in 0..cfg.engines {
            let seed = engine_seed(cfg.seed, e);
            let ips = if cfg.local_ips.is_empty() {
                std::slice::from_ref(&ip)
            } else {
                &cfg.local_ips[..]
            };
            let udp = UdpPaths::bind_on(ips, cfg.paths, cfg.drop_rate, seed)
                .map_err(|e| Error::io(format!("bind mpt udp paths on {ips:?}"), e))?;
            // The flow id doubles as a connection id: datagrams of an older connection that
            // reach a reused port are rejected by the core.
            let fid = (mix(seed ^ u64::from(std::process::id()) ^ nanos_now()) & 0x7FF) as u16;
            subs.push(SubEndpoint { udp, fid, seed });
        }
        Ok(MptEndpoint { subs, cfg })
    }

    /// The hello to send to the peer. One engine: magic `MPT1`, flow id, path count,
    /// ports. Several: magic `MPTE`, engine count, largest frame, split size, then flow id,
    /// path count and ports of each engine.
    pub fn hello(&self) -> Result<Vec<u8>> {
        let mut h = Vec::with_capacity(MAX_HELLO);
        if self.subs.len() == 1 {
            h.extend_from_slice(HELLO_MAGIC);
        } else {
            let (max_frame, split) = layout(&for_engines(&self.cfg, self.subs.len()));
            h.extend_from_slice(HELLO_MAGIC_ENGINES);
            h.extend_from_slice(&(self.subs.len() as u16).to_be_bytes());
            h.extend_from_slice(&(max_frame as u64).to_be_bytes());
            h.extend_from_slice(&(split as u64).to_be_bytes());
        }
        for s in &self.subs {
            let ports = s
                .udp
                .local_ports()
                .map_err(|e| Error::io("udp local ports", e))?;
            h.extend_from_slice(&s.fid.to_be_bytes());
            h.extend_from_slice(&(ports.len() as u16).to_be_bytes());
            for p in ports {
                h.extend_from_slice(&p.to_be_bytes());
            }
        }
        if !self.cfg.local_ips.is_empty() {
            h.extend_from_slice(HELLO_MAGIC_ADDRS);
            h.push(self.cfg.local_ips.len() as u8);
            for ip in &self.cfg.local_ips {
                match ip {
                    IpAddr::V4(a) => {
                        h.push(4);
                        h.extend_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        h.push(6);
                        h.extend_from_slice(&a.octets());
                    }
                }
            }
        }
        Ok(h)
    }

    /// Connects to the peer at `peer_ip` that sent `hello`.
    pub fn connect(self, peer_ip: IpAddr, hello: &[u8], tcp: Option<TcpStream>) -> Result<MptLink> {
        let bad = |m: &str| Error::Protocol(format!("mpt hello from {peer_ip}: {m}"));
        let mut theirs = parse_hello(hello).map_err(bad)?;
        // Both sides run the smaller engine count (each side's default follows its own core
        // count): the extra engines' paths close unused. Framing and the layout check below
        // follow the count both use.
        let mut subs = self.subs;
        let n = subs.len().min(theirs.engines.len());
        subs.truncate(n);
        theirs.engines.truncate(n);
        if n == 1 {
            theirs.layout = None;
        }
        let cfg = for_engines(&self.cfg, n);
        let (max_frame, split) = layout(&cfg);
        if let Some((their_max, their_split)) = theirs.layout {
            // Receive slots are sized for this side's messages: the peer's must fit them.
            if (their_max, their_split) != (max_frame as u64, split as u64) {
                return Err(bad(&format!(
                    "the peer frames up to {their_max} bytes and splits above {their_split}, \
                     this side {max_frame} and {split}; both must be equal"
                )));
            }
        }
        // Several engines put a part header in front of every message; a message holds a
        // whole frame up to `split` bytes (or too short to cut at PIECE_ALIGN: under
        // `n * PIECE_ALIGN`), or one engine's part of a longer one (cuts rounded down to
        // PIECE_ALIGN make a part up to that much longer than an n-th).
        let max_msg = if n == 1 {
            max_frame
        } else {
            PART_HEADER
                + split
                    .max(max_frame.div_ceil(n) + PIECE_ALIGN)
                    .max(n * PIECE_ALIGN)
                    .min(max_frame)
        };
        let mut engines = Vec::with_capacity(n);
        let their_ips = if theirs.addrs.is_empty() {
            vec![peer_ip]
        } else {
            theirs.addrs
        };
        for (e, (sub, (fid, ports))) in subs.into_iter().zip(theirs.engines).enumerate() {
            let peer = if n == 1 {
                peer_ip.to_string()
            } else {
                format!("{peer_ip} (engine {e})")
            };
            let to: Vec<std::net::SocketAddr> = ports
                .iter()
                .enumerate()
                .map(|(i, &p)| std::net::SocketAddr::new(their_ips[i % their_ips.len()], p))
                .collect();
            engines.push(start_engine(&cfg, sub, (fid, &to), peer, max_msg, n > 1)?);
        }
        Ok(MptLink {
            engines,
            max_frame,
            split_bytes: split,
            peeked: None,
            next_seq: 0,
            engine_copy: cfg.engine_copy,
            next_frame: 0,
            last_engine: n - 1,
            heads: vec![None; n],
            ready: None,
            next_part: 0,
            shape: (1, 0),
            tcp,
            in_flight: std::collections::VecDeque::new(),
            reserved: [0; MAX_ENGINES],
            async_copy: cfg.async_copy && n > 1,
            zero_copy: cfg.zero_copy,
            copy_up_to: cfg.chunk_size as usize,
            place_receives: cfg.place_receives,
            last_full: false,
            // Only frames that go whole anyway: a longer one would not fit the peer's slots.
            inline_bytes: if n > 1 {
                cfg.inline_bytes.min(split)
            } else {
                0
            },
            send_inline: false,
            recv_inline: n > 1 && cfg.inline_bytes > 0,
            lead_driven: false,
        })
    }
}

/// Copies `src[lo..hi]` to address `dst` for every `(dst, lo, hi)` of `to` (disjoint
/// ranges of `src`, each destination a reserved send slot with room for its range), the
/// whole of `src` cut over the copy threads at once if large enough (crate::par).
fn copy_into_slots(src: &[u8], to: &[(usize, usize, usize)]) {
    crate::par::for_parts(src.len(), 1, &|r: std::ops::Range<usize>| {
        copy_range_into_slots(&src[..r.end], r.start, to)
    });
}

/// `cfg` as a link of `engines` engines runs it: the frame size and slots for several
/// engines in place of one engine's.
fn for_engines(cfg: &MptLinkConfig, engines: usize) -> MptLinkConfig {
    let mut c = cfg.clone();
    if engines > 1 {
        c.max_frame = cfg.engines_max_frame.unwrap_or(cfg.max_frame);
        c.slots = cfg.engines_slots.unwrap_or(cfg.slots);
    }
    c
}

/// [`copy_into_slots`] of the bytes `[start, src.len())` of a frame only: one part of it
/// (`src` is the frame up to the part's end).
fn copy_range_into_slots(src: &[u8], start: usize, to: &[(usize, usize, usize)]) {
    let from = src.as_ptr() as usize;
    for &(dst, lo, hi) in to {
        let (a, b) = (start.max(lo), src.len().min(hi));
        if a < b {
            // SAFETY: [a, b) lies inside [lo, hi) and inside `src`; `dst + (a - lo)` and its
            // b - a bytes lie inside the reserved slot, which nothing else writes until the
            // message is committed after the copy; parts of one frame write disjoint bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (from + a) as *const u8,
                    (dst + a - lo) as *mut u8,
                    b - a,
                )
            }
        }
    }
}

/// The largest frame and the size above which several engines split a frame (never above
/// the largest frame, so `split == max_frame` means "never split").
fn layout(cfg: &MptLinkConfig) -> (usize, usize) {
    (
        cfg.max_frame,
        cfg.split_bytes.clamp(1, cfg.max_frame.max(1)),
    )
}

/// What a hello says.
struct PeerHello {
    /// Per engine: the peer's flow id and path ports.
    engines: Vec<(u16, Vec<u16>)>,
    /// With several engines: the peer's largest frame and split size.
    layout: Option<(u64, u64)>,
    /// The local addresses the peer spread its paths over (empty: all on its link address).
    addrs: Vec<IpAddr>,
}

fn parse_hello(h: &[u8]) -> std::result::Result<PeerHello, &'static str> {
    let be64 = |b: &[u8]| {
        let mut x = [0u8; 8];
        x.copy_from_slice(b);
        u64::from_be_bytes(x)
    };
    if h.len() < 4 {
        return Err("bad magic");
    }
    let (engines, layout, mut rest) = if &h[..4] == HELLO_MAGIC {
        (1, None, &h[4..])
    } else if &h[..4] == HELLO_MAGIC_ENGINES {
        if h.len() < 22 {
            return Err("bad length");
        }
        let n = usize::from(u16::from_be_bytes([h[4], h[5]]));
        (n, Some((be64(&h[6..14]), be64(&h[14..22]))), &h[22..])
    } else {
        return Err("bad magic");
    };
    if engines == 0 || engines > MAX_ENGINES {
        return Err("engine count outside 1..=16");
    }
    let mut out = Vec::with_capacity(engines);
    for _ in 0..engines {
        if rest.len() < 4 {
            return Err("bad length");
        }
        let fid = u16::from_be_bytes([rest[0], rest[1]]);
        let n = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let body = rest.get(4..4 + 2 * n).ok_or("bad length")?;
        let ports = body
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        out.push((fid, ports));
        rest = &rest[4 + 2 * n..];
    }
    let mut addrs = Vec::new();
    if !rest.is_empty() {
        if rest.len() < 5 || &rest[..4] != HELLO_MAGIC_ADDRS {
            return Err("bad length");
        }
        let k = usize::from(rest[4]);
        if k == 0 || k > MAX_NICS {
            return Err("address count outside 1..=8");
        }
        rest = &rest[5..];
        for _ in 0..k {
            // The address's bytes after its family byte.
            fn octets<const N: usize>(rest: &[u8]) -> std::result::Result<[u8; N], &'static str> {
                rest.get(1..=N)
                    .and_then(|b| b.try_into().ok())
                    .ok_or("bad length")
            }
            let (ip, len) = match rest.first() {
                Some(4) => (IpAddr::from(octets::<4>(rest)?), 5),
                Some(6) => (IpAddr::from(octets::<16>(rest)?), 17),
                _ => return Err("bad address family"),
            };
            addrs.push(ip);
            rest = &rest[len..];
        }
        if !rest.is_empty() {
            return Err("bad length");
        }
    }
    Ok(PeerHello {
        engines: out,
        layout,
        addrs,
    })
}

/// Connects one engine's paths and connection and starts its thread.
fn start_engine(
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
        seed: sub.seed,
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
struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Bytes per slab slot (the largest message).
    stride: usize,
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

/// A completed message at the head of an engine, with its part header decoded.
#[derive(Clone, Copy, Debug)]
struct Head {
    slot: usize,
    /// Where the message's bytes after its part header are: a destination lent for it,
    /// or 0 for its slot.
    lent: usize,
    /// Message length, part header included.
    len: usize,
    seq: u64,
    total: usize,
    part: usize,
    parts: usize,
}

/// The frame or piece `peek` shows until `pop`: in place in `engine`'s receive slot, after
/// the part header.
#[derive(Clone, Copy, Debug)]
struct Ready {
    engine: usize,
    slot: usize,
    len: usize,
    /// As `Head::lent`.
    lent: usize,
}

fn part_header(seq: u64, total: usize, part: usize, parts: usize) -> [u8; PART_HEADER] {
    let mut h = [0u8; PART_HEADER];
    h[..8].copy_from_slice(&seq.to_le_bytes());
    // `bind` refuses frames over 4 GiB with several engines.
    h[8..12].copy_from_slice(&(total as u32).to_le_bytes());
    h[12] = part as u8;
    h[13] = parts as u8;
    h[14..].copy_from_slice(&PART_MAGIC.to_le_bytes());
    h
}

/// Whether a `total`-byte frame is cut into one part per engine: over the split size, and
/// long enough that every cut at a multiple of [`PIECE_ALIGN`] leaves no part empty.
fn splits(total: usize, split_bytes: usize, engines: usize) -> bool {
    engines > 1 && total > split_bytes && total >= engines * PIECE_ALIGN
}

/// Byte range of part `i` of a `total`-byte frame cut into `parts` near-equal parts, every
/// cut at a multiple of [`PIECE_ALIGN`] (the receiver shows parts as pieces of the frame).
fn part_range(total: usize, i: usize, parts: usize) -> (usize, usize) {
    let parts = parts.max(1);
    // total < 2^32 and i <= 8: the product cannot overflow.
    let at = |k: usize| {
        if k >= parts {
            total
        } else {
            (total as u64 * k as u64 / parts as u64) as usize / PIECE_ALIGN * PIECE_ALIGN
        }
    };
    (at(i), at(i + 1))
}

/// A framed link over one or more multipath connections (see the module docs).
pub struct MptLink {
    engines: Vec<Engine>,
    max_frame: usize,
    split_bytes: usize,
    /// One engine: `peek` returned the head frame (of this length), which `pop` releases.
    peeked: Option<usize>,
    /// Several engines: sequence number of the next frame to send.
    next_seq: u64,
    /// Several engines: their threads copy the parts of split frames.
    engine_copy: bool,
    /// Several engines: sequence number of the next frame to deliver, and while a split
    /// frame is being delivered, its next part and its (parts, length).
    next_frame: u64,
    next_part: usize,
    shape: (usize, usize),
    /// Engine of the last whole frame sent: equal loads go round-robin from there.
    last_engine: usize,
    /// Per engine: its completed head message (stays until this side releases it).
    heads: Vec<Option<Head>>,
    ready: Option<Ready>,
    /// The stream the hello came over, open for the link's life; the probe's outcome
    /// crosses it, and a failed probe hands it back.
    tcp: Option<TcpStream>,
    /// Several engines, `async_copy`: frames whose parts' slots are reserved and whose copies
    /// may still run, oldest first; each is queued on its engines once copied.
    in_flight: std::collections::VecDeque<InFlight>,
    /// Per engine: slots reserved by `in_flight` frames, not queued yet.
    reserved: [u64; MAX_ENGINES],
    async_copy: bool,
    zero_copy: bool,
    /// Frames up to this long are copied even when they could be borrowed (`zero_copy`): a
    /// frame of one chunk may have its acknowledgement held back (`MptConfig::ack_delay`),
    /// which a borrowed one would wait for, and copying it costs little.
    copy_up_to: usize,
    /// `MptLinkConfig::place_receives`.
    place_receives: bool,
    /// One engine: the frame popped last was `max_frame` long.
    last_full: bool,
    /// Several engines: `MptLinkConfig::inline_bytes`.
    inline_bytes: usize,
    /// Several engines: the last frame sent went inline on the lead engine (`flush` drives
    /// the lead while it holds unacknowledged messages).
    send_inline: bool,
    /// Several engines: the last frame taken was a small one, whole on the lead engine, so
    /// the next probably is too (`peek` drives the lead while nothing is ready).
    recv_inline: bool,
    /// Several engines: this side ran the lead engine's progress since it last handed the
    /// lead back to its thread.
    lead_driven: bool,
}

/// Where a frame's parts go: (engine, frame range) per part, and how many parts.
type PartPlacement = ([(usize, usize, usize); MAX_ENGINES], usize);

/// A frame of an async-copy link whose parts' slots are reserved (see `MptLink::in_flight`).
struct InFlight {
    /// The copy on the copy threads; `None`: done on the user's thread already.
    copy: Option<crate::par::Pending>,
    /// Message length per engine (part header included); 0 where the frame has no part.
    lens: [usize; MAX_ENGINES],
}

impl MptLink {
    /// Sets up a link over a connected TCP stream: both sides bind their paths on the
    /// stream's local address, exchange hellos over it, and connect to each other. The
    /// stream stays open with the link. Both sides run the smaller engine count; a different
    /// frame layout fails both with an error naming the difference.
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
        if len > MAX_HELLO {
            return Err(Error::Protocol(format!("mpt hello from {peer} too long")));
        }
        let mut theirs = vec![0u8; len];
        tcp.read_exact(&mut theirs).map_err(io)?;
        ep.connect(peer.ip(), &theirs, Some(tcp))
    }

    /// Checks that datagrams reach the peer and come back, before any data is trusted to
    /// the link (a firewall that drops UDP would otherwise show only as a hang): each side
    /// sends one probe frame and waits up to `within` for the peer's, then both tell each other
    /// over the TCP stream whether the peer's probe came. `Ok(Ok(link))`: both came (and are
    /// consumed). `Ok(Err((tcp, why)))`: at least one side saw none; the link is torn down and
    /// its TCP stream, clean, handed back for a TCP link instead.
    #[allow(clippy::type_complexity)]
    pub fn probe(
        mut self,
        within: Duration,
    ) -> Result<std::result::Result<MptLink, (TcpStream, String)>> {
        const PROBE: &[u8; 16] = b"libccl-mpt-probe";
        let deadline = std::time::Instant::now() + within;
        let (mut sent, mut got) = (false, false);
        while !(sent && got) && std::time::Instant::now() < deadline {
            if !sent {
                sent = self.try_send(PROBE)?;
            }
            self.flush()?;
            if !got {
                if let Some(f) = self.peek()? {
                    if f != PROBE {
                        return Err(Error::Protocol(
                            "mpt probe: the peer sent data before its probe".into(),
                        ));
                    }
                    self.pop();
                    got = true;
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let Some(tcp) = self.tcp.as_mut() else {
            return Err(Error::Protocol(
                "mpt probe: the link has no TCP stream".into(),
            ));
        };
        let io = |e| Error::io("mpt probe outcome", e);
        tcp.write_all(&[got as u8]).map_err(io)?;
        let mut theirs = [0u8; 1];
        tcp.read_exact(&mut theirs).map_err(io)?;
        if got && theirs[0] == 1 {
            return Ok(Ok(self));
        }
        let why = match (got, theirs[0] == 1) {
            (false, false) => "no probe datagram got through in either direction",
            (false, true) => "the peer's probe datagrams did not reach this side",
            _ => "this side's probe datagrams did not reach the peer",
        };
        let why = format!("{why} within {} ms (UDP blocked?)", within.as_millis());
        match self.tcp.take() {
            Some(tcp) => Ok(Err((tcp, why))),
            None => Err(Error::Protocol(why)),
        }
    }

    /// Number of engines.
    pub fn engines(&self) -> usize {
        self.engines.len()
    }

    /// Datagrams dropped by loss injection so far, over all engines.
    pub fn injected_drops(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| e.shared.lock().udp.stats().injected_drops)
            .sum()
    }

    /// Datagrams dropped by loss injection so far, per engine (each draws its own).
    pub fn injected_drops_per_engine(&self) -> Vec<u64> {
        self.engines
            .iter()
            .map(|e| e.shared.lock().udp.stats().injected_drops)
            .collect()
    }

    /// Chunks retransmitted so far, over all engines.
    /// Received bytes written straight to destinations lent with [`Link::lend`].
    pub fn placed_bytes(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| e.shared.lock().placed_bytes)
            .sum()
    }

    pub fn retransmits(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| e.shared.lock().conn.stats().chunks_retransmitted)
            .sum()
    }

    /// Messages sent so far on each engine (how the load was spread).
    pub fn messages_per_engine(&self) -> Vec<u64> {
        self.engines
            .iter()
            .map(|e| e.shared.lock().next_send)
            .collect()
    }

    /// The error of a failed engine, if any; the flag is read first so that a healthy link
    /// takes no lock.
    fn check_failed(&self) -> Result<()> {
        for e in &self.engines {
            if e.shared.failed.load(Ordering::Relaxed) {
                e.shared.lock().check()?;
            }
        }
        Ok(())
    }

    /// Whether engine `e` can take one more message behind the ones this side has reserved
    /// but not queued yet (`reserved`, 0 without `async_copy`). Reads the published load, not
    /// the state: it can only lag towards "full" (only this side adds messages and publishes
    /// right away), so no lock is needed.
    fn has_room(&self, e: usize) -> bool {
        let sh = &self.engines[e].shared;
        sh.unacked_msgs.load(Ordering::Relaxed) + self.reserved[e] < sh.slots
    }

    /// The least-loaded engine with room for a whole frame: fewest unacknowledged bytes, then
    /// messages, ties round-robin after the last choice so idle engines all get used.
    fn least_loaded(&self) -> Option<usize> {
        let n = self.engines.len();
        let mut best: Option<(usize, u64, u64)> = None;
        for k in 1..=n {
            let e = (self.last_engine + k) % n;
            if !self.has_room(e) {
                continue;
            }
            let sh = &self.engines[e].shared;
            let msgs = sh.unacked_msgs.load(Ordering::Relaxed);
            let bytes = sh.unacked_bytes.load(Ordering::Relaxed);
            if best.map_or(true, |(_, b, m)| (bytes, msgs) < (b, m)) {
                best = Some((e, bytes, msgs));
            }
        }
        best.map(|(e, _, _)| e)
    }

    /// Sends a frame of at most `inline_bytes` whole on the lead engine and runs its progress
    /// here, so it leaves now: `Some(true)`. Only with nothing in flight: every engine is
    /// FIFO, and an earlier frame still being copied must reach the lead first. `None`: not a
    /// frame for the lead (the caller places it as any other); `Some(false)`: the lead is full
    /// (see [`MptLink::lead_full`]).
    fn send_inline(&mut self, frame: &[u8]) -> Result<Option<bool>> {
        if !self.goes_inline(frame.len()) {
            return Ok(None);
        }
        let hdr = part_header(self.next_seq, frame.len(), 0, 1);
        if !self.engines[0].shared.send(&hdr, frame, true)? {
            return Ok(self.lead_full());
        }
        self.sent_inline();
        Ok(Some(true))
    }

    /// What a small frame does when the lead engine has no room: while the lead holds
    /// frames this side sent inline, it waits for their acknowledgements (`Some(false)`: the
    /// link is full for now; `flush` drives the lead), as small sends complete before they
    /// are acknowledged and fill the lead's few slots. Sent to an engine thread instead, every
    /// such frame cost a wake-up on each side (8 engines, 128 KiB all_reduce 109-111 ->
    /// 118-193 us). Otherwise (`None`) it goes the other way.
    fn lead_full(&self) -> Option<bool> {
        let lead = &self.engines[0].shared;
        (self.send_inline && lead.unacked_msgs.load(Ordering::Relaxed) > 0).then_some(false)
    }

    fn goes_inline(&self, len: usize) -> bool {
        len <= self.inline_bytes && self.in_flight.is_empty()
    }

    /// Books a frame queued (and driven) on the lead engine.
    fn sent_inline(&mut self) {
        self.lead_driven = true;
        self.send_inline = true;
        self.next_seq += 1;
    }

    /// [`MptLink::send_inline`] of a frame sent from where it lies (`zero_copy`): only its
    /// part header goes into the lead's slot.
    ///
    /// # Safety
    /// As [`MptLink::send_borrowed`].
    unsafe fn send_inline_borrowed(&mut self, frame: &[u8]) -> Result<Option<bool>> {
        if !self.goes_inline(frame.len()) {
            return Ok(None);
        }
        let lead = &self.engines[0].shared;
        let len = PART_HEADER + frame.len();
        let Some(dst) = lead.reserve(len, true)? else {
            return Ok(self.lead_full());
        };
        let hdr = part_header(self.next_seq, frame.len(), 0, 1);
        // SAFETY: `dst` is the reserved slot, of at least `len` bytes (`reserve`).
        unsafe { std::ptr::copy_nonoverlapping(hdr.as_ptr(), dst, PART_HEADER) };
        // SAFETY: the caller keeps `frame` unchanged until the link has nothing pending or
        // `quiesce` returned (this function's contract), which is what `commit_borrowed` needs.
        // Refused (the core still retires an acknowledged message): the unused slot stays
        // free and the frame goes the other way, as a one-engine link's caller would retry.
        if !unsafe { lead.commit_borrowed(len, frame.as_ptr(), PART_HEADER, true) }? {
            return Ok(None);
        }
        self.sent_inline();
        Ok(Some(true))
    }

    /// A frame is about to go the engine threads' way: they get the lead engine back.
    fn placed_send(&mut self) {
        self.send_inline = false;
        self.hand_back_lead();
    }

    /// Gives the lead engine back to its thread if this side drove it.
    fn hand_back_lead(&mut self) {
        if std::mem::take(&mut self.lead_driven) {
            self.engines[0].shared.hand_back();
        }
    }

    /// Where the parts of the next `len`-byte frame go, as (engine, frame range) per part and
    /// the part count, on a link of several engines: a frame longer than `split_bytes` one part
    /// per engine (all must have room), a shorter one whole on the least-loaded engine (which
    /// becomes `last_engine`). `None`: no room now.
    fn place_parts(&mut self, len: usize) -> Option<PartPlacement> {
        let n = self.engines.len();
        let mut parts = [(0usize, 0usize, 0usize); MAX_ENGINES];
        if splits(len, self.split_bytes, n) {
            if !(0..n).all(|e| self.has_room(e)) {
                return None;
            }
            for (i, p) in parts.iter_mut().enumerate().take(n) {
                let (lo, hi) = part_range(len, i, n);
                *p = (i, lo, hi);
            }
            return Some((parts, n));
        }
        let e = self.least_loaded()?;
        self.last_engine = e;
        parts[0] = (e, 0, len);
        Some((parts, 1))
    }

    /// Reserves the send slot of every part of frame `seq` (`parts` as [`MptLink::place_parts`]
    /// gives them, of a `total`-byte frame), each behind the slots this side reserved and has
    /// not queued yet (`reserved`), and writes its part header; returns where each part's
    /// bytes go: (slot address past the header, frame range). An engine that showed room and
    /// has none is an error.
    fn reserve_parts(
        &self,
        seq: u64,
        total: usize,
        parts: &[(usize, usize, usize)],
    ) -> Result<[(usize, usize, usize); MAX_ENGINES]> {
        let mut to = [(0usize, 0usize, 0usize); MAX_ENGINES];
        for (k, &(e, lo, hi)) in parts.iter().enumerate() {
            let dst = self.engines[e]
                .shared
                .reserve_ahead(PART_HEADER + hi - lo, false, self.reserved[e])?
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "mpt engine {e} refused part {k} of frame {seq} after showing room"
                    ))
                })?;
            let hdr = part_header(seq, total, k, parts.len());
            // SAFETY: `dst` is a reserved slot of at least PART_HEADER + (hi - lo) bytes,
            // written by no one else until its message is committed.
            unsafe { std::ptr::copy_nonoverlapping(hdr.as_ptr(), dst, PART_HEADER) };
            to[k] = (dst as usize + PART_HEADER, lo, hi);
        }
        Ok(to)
    }

    /// Sends `frame` through the in-flight queue (`async_copy`): reserves its parts' slots
    /// behind the frames still in flight, writes the part headers, copies the payload -- on
    /// the copy threads when `deferred` (the caller keeps `frame` unchanged until the link
    /// has nothing pending) and the pool takes it, else here -- and queues every frame whose
    /// copy is done, in order.
    fn send_queued(&mut self, frame: &[u8], deferred: bool) -> Result<bool> {
        self.check_failed()?;
        self.commit_ready()?;
        self.placed_send();
        let seq = self.next_seq;
        let Some((parts, count)) = self.place_parts(frame.len()) else {
            return Ok(false);
        };
        let to = self.reserve_parts(seq, frame.len(), &parts[..count])?;
        let mut lens = [0usize; MAX_ENGINES];
        for &(e, lo, hi) in &parts[..count] {
            lens[e] = PART_HEADER + hi - lo;
        }
        let copy = if deferred {
            let (from, to) = (frame.as_ptr() as usize, to);
            crate::par::spawn_parts(
                frame.len(),
                1,
                std::sync::Arc::new(move |r: std::ops::Range<usize>| {
                    // SAFETY: the caller of `try_send_deferred` keeps the frame's bytes valid
                    // and unchanged until the link has nothing pending, which it has until
                    // this copy is done and its frame committed; the destinations are this
                    // frame's reserved slots (see `copy_into_slots`).
                    let src = unsafe { std::slice::from_raw_parts(from as *const u8, r.end) };
                    copy_range_into_slots(src, r.start, &to[..count]);
                }),
            )
        } else {
            None
        };
        if copy.is_none() {
            copy_into_slots(frame, &to[..count]);
        }
        for &(e, ..) in parts.iter().take(count) {
            self.reserved[e] += 1;
        }
        self.in_flight.push_back(InFlight { copy, lens });
        self.next_seq += 1;
        self.commit_ready()?;
        Ok(true)
    }

    /// Queues, oldest first, every in-flight frame whose copy is done.
    fn commit_ready(&mut self) -> Result<()> {
        while let Some(f) = self.in_flight.front_mut() {
            if f.copy.as_ref().is_some_and(|c| !c.is_done()) {
                break;
            }
            for (e, len) in f.lens.iter_mut().enumerate() {
                if *len == 0 {
                    continue;
                }
                if !self.engines[e].shared.commit(*len, false)? {
                    // The core is briefly full; the parts queued so far stay queued.
                    return Ok(());
                }
                *len = 0;
                self.reserved[e] -= 1;
            }
            self.in_flight.pop_front();
        }
        Ok(())
    }

    /// Waits until no copy of an in-flight frame runs any more.
    fn wait_copies_in_flight(&self) {
        for f in &self.in_flight {
            if let Some(c) = &f.copy {
                c.wait();
            }
        }
    }

    /// Queues `frame` without copying it (`zero_copy`): each message's part header goes into
    /// its slot, the bytes stay where they are.
    ///
    /// # Safety
    /// As [`Link::try_send_deferred`]: `frame` stays valid and unchanged until `has_pending`
    /// is false or `quiesce` has returned.
    unsafe fn send_borrowed(&mut self, frame: &[u8]) -> Result<bool> {
        self.check_failed()?;
        let n = self.engines.len();
        if n == 1 {
            let one = &self.engines[0].shared;
            if one.reserve(frame.len(), true)?.is_none() {
                return Ok(false);
            }
            // SAFETY: per this function's contract.
            return unsafe { one.commit_borrowed(frame.len(), frame.as_ptr(), 0, true) };
        }
        // SAFETY: per this function's contract.
        if let Some(sent) = unsafe { self.send_inline_borrowed(frame) }? {
            return Ok(sent);
        }
        self.placed_send();
        let seq = self.next_seq;
        let Some((parts, count)) = self.place_parts(frame.len()) else {
            return Ok(false);
        };
        self.reserve_parts(seq, frame.len(), &parts[..count])?;
        for (k, &(e, lo, hi)) in parts[..count].iter().enumerate() {
            let refused = || {
                Error::Protocol(format!(
                    "mpt engine {e} refused part {k} of frame {seq} after showing room"
                ))
            };
            let part = frame.get(lo..hi).ok_or_else(refused)?;
            // SAFETY: per this function's contract; `part` lies inside `frame`.
            if !unsafe {
                self.engines[e].shared.commit_borrowed(
                    PART_HEADER + part.len(),
                    part.as_ptr(),
                    PART_HEADER,
                    false,
                )
            }? {
                return Err(refused());
            }
        }
        self.next_seq += 1;
        Ok(true)
    }

    fn try_send_multi(&mut self, frame: &[u8]) -> Result<bool> {
        self.check_failed()?;
        self.placed_send();
        let n = self.engines.len();
        let seq = self.next_seq;
        if splits(frame.len(), self.split_bytes, n) {
            // Only this thread queues messages, so room seen now is still there below: a
            // frame is queued on every engine or on none.
            if !(0..n).all(|e| self.has_room(e)) {
                return Ok(false);
            }
            // Every part is cut before any is handed over, so no error below leaves an
            // engine holding a part of a frame this call gives up on.
            let mut parts: [&[u8]; MAX_ENGINES] = [&[]; MAX_ENGINES];
            for (i, part) in parts.iter_mut().enumerate().take(n) {
                let (lo, hi) = part_range(frame.len(), i, n);
                *part = frame.get(lo..hi).ok_or_else(|| {
                    Error::Protocol(format!("mpt part {lo}..{hi} outside the frame"))
                })?;
            }
            let refused = |i: usize| {
                Error::Protocol(format!(
                    "mpt engine {i} refused part {i} of frame {seq} after showing room"
                ))
            };
            if self.engine_copy {
                // Each engine copies its own part; the frame must not change until all have.
                let mut want = [0u64; MAX_ENGINES];
                for (i, (e, &part)) in self.engines.iter().zip(&parts).enumerate() {
                    want[i] = e.shared.copies_done.load(Ordering::Acquire) + 1;
                    if let Err(err) = e
                        .shared
                        .hand_over(part_header(seq, frame.len(), i, n), part)
                    {
                        // The engines already holding parts still read `frame`: it must
                        // outlive their copies even though this send fails.
                        let _ = self.wait_copies(&want[..i]);
                        return Err(err);
                    }
                }
                self.wait_copies(&want[..n])?;
            } else {
                // Every part's slot first, then the whole frame in one copy split over the
                // copy threads (one hand-over per frame: per part, the helpers' wake-ups
                // held a sender to ~4.6 GB/s against the receiver's ~10), then queue them.
                let mut ranges = [(0usize, 0usize, 0usize); MAX_ENGINES];
                for (i, r) in ranges.iter_mut().enumerate().take(n) {
                    let (lo, hi) = part_range(frame.len(), i, n);
                    *r = (i, lo, hi);
                }
                let to = self.reserve_parts(seq, frame.len(), &ranges[..n])?;
                copy_into_slots(frame, &to[..n]);
                for (i, (e, &part)) in self.engines.iter().zip(&parts).enumerate() {
                    if !e.shared.commit(PART_HEADER + part.len(), false)? {
                        return Err(refused(i));
                    }
                }
            }
        } else {
            let Some(e) = self.least_loaded() else {
                return Ok(false);
            };
            let hdr = part_header(seq, frame.len(), 0, 1);
            if !self.engines[e].shared.send(&hdr, frame, false)? {
                return Ok(false);
            }
            self.last_engine = e;
        }
        self.next_seq += 1;
        Ok(true)
    }

    /// Waits until every engine `i` has finished `want[i]` copy jobs (they copy while this
    /// thread yields); a failed or stuck engine ends the wait with an error.
    fn wait_copies(&self, want: &[u64]) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut spins = 0u32;
        for (e, &w) in self.engines.iter().zip(want) {
            while e.shared.copies_done.load(Ordering::Acquire) < w {
                spins = spins.wrapping_add(1);
                if spins % 64 == 0 && std::time::Instant::now() > deadline {
                    return Err(Error::Protocol(
                        "mpt engine did not copy its part within 30 s".into(),
                    ));
                }
                std::thread::yield_now();
            }
        }
        self.check_failed()
    }

    /// The completed head message of engine `e`, decoded and checked.
    fn head(&mut self, e: usize) -> Result<Option<Head>> {
        if let Some(h) = self.heads[e] {
            return Ok(Some(h));
        }
        let eng = &self.engines[e];
        let Some((slot, len, lent)) = eng.shared.head(false)? else {
            return Ok(None);
        };
        let bad = |m: String| Error::Protocol(format!("mpt link engine {e}: {m}"));
        if len < PART_HEADER {
            return Err(bad(format!(
                "{len}-byte message, shorter than a part header"
            )));
        }
        let mut b = [0u8; PART_HEADER];
        // SAFETY: `slot` is engine `e`'s oldest completed receive and is released only by
        // `pop` or `join_parts`, which clear `heads[e]` first; `len >= PART_HEADER`.
        b.copy_from_slice(unsafe { eng.shared.recv_bytes(eng.stride, slot, 0, PART_HEADER) });
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        let seq = u64::from_le_bytes(s);
        let total = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
        let (part, parts) = (usize::from(b[12]), usize::from(b[13]));
        if u16::from_le_bytes([b[14], b[15]]) != PART_MAGIC {
            return Err(bad(
                "bad part header magic (does the peer run one engine?)".into()
            ));
        }
        if parts == 0 || parts > self.engines.len() || part >= parts || total > self.max_frame {
            return Err(bad(format!(
                "bad part header: part {part} of {parts}, frame of {total} bytes"
            )));
        }
        let (lo, hi) = part_range(total, part, parts);
        if hi - lo != len - PART_HEADER {
            return Err(bad(format!(
                "part {part} of {parts} of a {total}-byte frame carries {} bytes, not {}",
                len - PART_HEADER,
                hi - lo
            )));
        }
        let h = Head {
            slot,
            lent,
            len,
            seq,
            total,
            part,
            parts,
        };
        self.heads[e] = Some(h);
        Ok(Some(h))
    }

    /// Finds the next piece to deliver: frame `next_frame` at an engine's head, or while a
    /// split frame is being delivered, its part `next_part` at the head of engine `next_part`.
    fn find_next(&mut self) -> Result<Option<Ready>> {
        if self.next_part > 0 {
            let i = self.next_part;
            let Some(p) = self.head(i)? else {
                return Ok(None);
            };
            if p.seq != self.next_frame || p.part != i || (p.parts, p.total) != self.shape {
                return Err(Error::Protocol(format!(
                    "mpt link engine {i}: expected part {i}/{} of {}-byte frame {}, found part \
                     {}/{} of {}-byte frame {}",
                    self.shape.0, self.shape.1, self.next_frame, p.part, p.parts, p.total, p.seq
                )));
            }
            return Ok(Some(Ready {
                engine: i,
                slot: p.slot,
                len: p.len - PART_HEADER,
                lent: p.lent,
            }));
        }
        let mut found = None;
        for e in 0..self.engines.len() {
            let Some(h) = self.head(e)? else { continue };
            if h.seq < self.next_frame {
                return Err(Error::Protocol(format!(
                    "mpt link engine {e}: frame {} again (expected {})",
                    h.seq, self.next_frame
                )));
            }
            if h.seq == self.next_frame {
                found = Some((e, h));
                break;
            }
        }
        let Some((e, h)) = found else {
            return Ok(None);
        };
        // Part `i` travels on engine `i`; the frame starts once part 0 is in.
        if h.part != e && h.parts > 1 {
            return Err(Error::Protocol(format!(
                "mpt link engine {e}: part {}/{} of frame {} on the wrong engine",
                h.part, h.parts, h.seq
            )));
        }
        if h.part != 0 {
            return Ok(None);
        }
        self.shape = (h.parts, h.total);
        Ok(Some(Ready {
            engine: e,
            slot: h.slot,
            len: h.len - PART_HEADER,
            lent: h.lent,
        }))
    }
}

impl Drop for MptLink {
    fn drop(&mut self) {
        // Copies into the engines' slots must end before the slabs go.
        self.wait_copies_in_flight();
        // Stop every engine before joining any, so they wind down together.
        for e in &self.engines {
            e.shared.stop.store(true, Ordering::Release);
            if let Some(w) = &e.shared.wake {
                w.notify();
            }
        }
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
        if self.engines.len() > 1 {
            self.check_failed()?;
            if let Some(sent) = self.send_inline(frame)? {
                return Ok(sent);
            }
        }
        match &self.engines[..] {
            [one] => one.shared.send(&[], frame, true),
            _ if self.async_copy => self.send_queued(frame, false),
            _ => self.try_send_multi(frame),
        }
    }

    unsafe fn try_send_deferred(&mut self, frame: &[u8]) -> Result<bool> {
        // (`try_send` refuses frames over the largest with its error.)
        if frame.is_empty() || frame.len() > self.max_frame {
            return self.try_send(frame);
        }
        if self.zero_copy && self.in_flight.is_empty() && frame.len() > self.copy_up_to {
            // SAFETY: the caller keeps `frame` unchanged until `has_pending` is false or
            // `quiesce` returned (this method's contract), which is what borrowing needs.
            return unsafe { self.send_borrowed(frame) };
        }
        if !self.async_copy {
            return self.try_send(frame);
        }
        self.send_queued(frame, true)
    }

    fn quiesce(&mut self) {
        self.wait_copies_in_flight();
        for e in &self.engines {
            e.shared.unborrow();
            e.shared.unlend();
        }
    }

    unsafe fn lend(&mut self, dst: *mut u8, len: usize) {
        if !self.place_receives {
            return;
        }
        let (dst, n, max) = (dst as usize, self.engines.len(), self.max_frame);
        if n == 1 && !self.last_full {
            // One engine: frames go whole, one per message, and only after a full-sized
            // frame, which shows the sender's largest frame is this side's (its frames could
            // be shorter otherwise: the hello does not compare them).
            return;
        }
        // Several engines: only at a frame boundary, and only frames split over every
        // engine (part `i` on engine `i`, behind its part header; both sides' frame and
        // split sizes are equal, the hello checks): each engine's next messages are then
        // its parts of the frames ahead, in order.
        if n > 1 && (self.next_part != 0 || self.ready.is_some()) {
            return;
        }
        // The frames ahead, as the sender cuts them: `max_frame` bytes each, the last what is
        // left; at most one per posted receive (built on the stack: this runs per frame).
        let slots = (self.engines[0].shared.slots as usize).min(MAX_SLOTS);
        let frames = (0..slots)
            .map(|k| k * max)
            .take_while(|&at| at < len)
            .map(|at| (at, (len - at).min(max)))
            .take_while(|&(_, cap)| n == 1 || splits(cap, self.split_bytes, n));
        let mut loans = [[Loan::NONE; MAX_SLOTS]; MAX_ENGINES];
        let mut count = 0;
        for (k, (at, cap)) in frames.enumerate() {
            for (i, loan) in loans.iter_mut().take(n).enumerate() {
                let (lo, hi) = if n == 1 {
                    (0, cap)
                } else {
                    part_range(cap, i, n)
                };
                loan[k] = Loan {
                    addr: dst + at + lo,
                    cap: hi - lo,
                    skip: if n == 1 { 0 } else { PART_HEADER },
                };
            }
            count = k + 1;
        }
        for (e, loans) in self.engines.iter().zip(&loans) {
            // SAFETY: the caller's contract (`Link::lend`) is the one `Shared::lend` needs;
            // the loans lie inside its range, and the parts of a frame are disjoint.
            unsafe { e.shared.lend(&loans[..count]) };
        }
    }

    fn peek(&mut self) -> Result<Option<&[u8]>> {
        if self.engines.len() == 1 {
            let one = &self.engines[0];
            let Some((slot, len, lent)) = one.shared.head(true)? else {
                return Ok(None);
            };
            self.peeked = Some(len);
            if lent != 0 {
                // SAFETY: the message went to the destination lent for it, which the user
                // keeps valid (`Link::lend`); it is complete, so nothing writes it any more,
                // and `len` is within the loan (longer frames fail the link).
                return Ok(Some(unsafe {
                    std::slice::from_raw_parts(lent as *const u8, len)
                }));
            }
            // SAFETY: slot `slot` holds a completed receive: until `pop` reposts it (which
            // needs `&mut self`, so not while this borrow lives) nothing writes it (see
            // `Slab`). `len <= max_frame` (truncated messages fail the link), so the
            // range is in bounds.
            return Ok(Some(unsafe {
                one.shared.recv_bytes(one.stride, slot, 0, len)
            }));
        }
        if self.ready.is_none() {
            self.ready = self.find_next()?;
            if self.ready.is_none() && self.recv_inline && self.next_part == 0 {
                // Small frames come whole on the lead engine: take them off its paths here
                // (and acknowledge them) rather than wait for its thread to wake.
                self.engines[0].shared.flush()?;
                self.lead_driven = true;
                self.ready = self.find_next()?;
            }
        }
        match self.ready {
            None => Ok(None),
            Some(Ready { lent, len, .. }) if lent != 0 => {
                // SAFETY: the part went to the destination lent for it, which the user keeps
                // valid (`Link::lend`); it is complete, so nothing writes it any more, and
                // its `len` bytes lie within the loan (a longer message fails the link).
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(lent as *const u8, len)
                }))
            }
            Some(Ready {
                engine, slot, len, ..
            }) => {
                let eng = &self.engines[engine];
                // SAFETY: the slot is the engine's completed head receive, released only by
                // `pop` (which needs `&mut self`, so not while this borrow lives); `head`
                // checked that it holds the part header plus `len` bytes.
                Ok(Some(unsafe {
                    eng.shared.recv_bytes(eng.stride, slot, PART_HEADER, len)
                }))
            }
        }
    }

    fn pop(&mut self) {
        if self.engines.len() == 1 {
            if let Some(len) = self.peeked.take() {
                self.last_full = len == self.max_frame;
                self.engines[0].shared.release(false);
            }
            return;
        }
        if let Some(Ready { engine, .. }) = self.ready.take() {
            self.heads[engine] = None;
            if self.inline_bytes > 0 && self.next_part == 0 {
                let was = self.recv_inline;
                self.recv_inline =
                    engine == 0 && self.shape.0 == 1 && self.shape.1 <= self.inline_bytes;
                if was && !self.recv_inline {
                    // A larger frame is coming in: the lead's thread takes its part.
                    self.hand_back_lead();
                }
            }
            let driven = engine == 0 && self.recv_inline && self.lead_driven;
            self.engines[engine].shared.release(driven);
            self.next_part += 1;
            if self.next_part >= self.shape.0 {
                self.next_part = 0;
                self.next_frame += 1;
            }
        }
    }

    fn flush(&mut self) -> Result<bool> {
        match &self.engines[..] {
            [one] => one.shared.flush(),
            // The engine threads move the bytes; here only queue frames whose copies are
            // done, and report failures.
            _ => {
                let before = self.in_flight.len();
                self.commit_ready()?;
                self.check_failed()?;
                let mut moved = self.in_flight.len() < before;
                // Small frames sent inline: their acknowledgements are read here, not by a
                // thread that would have to wake for them.
                let lead = &self.engines[0].shared;
                if self.send_inline && lead.unacked_msgs.load(Ordering::Relaxed) > 0 {
                    moved |= lead.flush()?;
                    self.lead_driven = true;
                }
                Ok(moved)
            }
        }
    }

    fn has_pending(&self) -> bool {
        match &self.engines[..] {
            [one] => one.shared.pending(),
            _ if !self.in_flight.is_empty() => true,
            engines => engines.iter().any(|e| {
                !e.shared.failed.load(Ordering::Relaxed) && e.shared.holding.load(Ordering::Relaxed)
            }),
        }
    }

    fn unconfirmed(&mut self) -> bool {
        // Drive the engines the user drives (their threads stay out while it does).
        let _ = self.flush();
        !self.in_flight.is_empty()
            || self.engines.iter().any(|e| {
                !e.shared.failed.load(Ordering::Relaxed)
                    && e.shared.unacked_msgs.load(Ordering::Relaxed) > 0
            })
    }

    fn kind(&self) -> &'static str {
        "mpt"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts cover the frame exactly, in order, every cut at a multiple of PIECE_ALIGN, no
    /// part empty and none longer than an n-th plus PIECE_ALIGN (the slot size allows that);
    /// frames too short for such cuts go whole.
    #[test]
    fn parts_cut_at_piece_alignment() {
        for n in 2..=MAX_ENGINES {
            for total in [
                n * PIECE_ALIGN,
                n * PIECE_ALIGN + 1,
                1000,
                65_537,
                (4 << 20) - 3,
            ] {
                if total < n * PIECE_ALIGN {
                    continue;
                }
                assert!(splits(total, 0, n));
                let mut at = 0;
                for i in 0..n {
                    let (lo, hi) = part_range(total, i, n);
                    assert_eq!(lo, at, "n {n} total {total} part {i}");
                    assert!(hi > lo, "n {n} total {total} part {i} empty");
                    assert!(hi - lo <= total.div_ceil(n) + PIECE_ALIGN);
                    if i + 1 < n {
                        assert_eq!(hi % PIECE_ALIGN, 0);
                    }
                    at = hi;
                }
                assert_eq!(at, total);
            }
        }
        assert!(!splits(4 * PIECE_ALIGN - 1, 0, 4));
        assert!(!splits(1 << 20, 1 << 20, 4));
        assert!(splits((1 << 20) + 1, 1 << 20, 4));
        assert!(!splits(1 << 20, 0, 1));
    }
}
