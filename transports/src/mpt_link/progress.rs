//! One engine's state ([`Inner`], under its lock) and a round of its progress: receive
//! datagrams and place their chunks, fire timers, transmit, and take the connection's events.

use std::net::IpAddr;

use crate::mpt::udp::{self, RxBatch, TxBatch, UdpPaths};
use crate::mpt::{Connection, Event, Frame, Instant, PathId, ProbeFrame};
use crate::{Error, Result};

use super::follow::{Follow, Step};
use super::monitor::EngineMon;
use super::parts::PART_HEADER;
use super::slab::{Loan, Slab};

pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) udp: UdpPaths,
    pub(super) base: std::time::Instant,
    /// Largest message, which is also the stride of both slabs.
    pub(super) max_frame: usize,
    pub(super) slots: u64,
    pub(super) send_done: Vec<bool>,
    /// Length of the message in each send slot, to keep `unacked_bytes`.
    pub(super) send_len: Vec<u64>,
    /// Per send slot, a borrowed message (`MptLinkConfig::zero_copy`): `(addr, head)` -- its
    /// first `head` bytes lie in the slot, the rest at `addr`, in the sender's memory, which
    /// the sender keeps unchanged until the message is acknowledged (or `unborrow` copied it
    /// into the slot). `(0, 0)`: the whole message is in the slot.
    pub(super) send_ext: Vec<(usize, usize)>,
    pub(super) unacked_bytes: u64,
    pub(super) next_send: u64,
    pub(super) oldest_unacked: u64,
    /// Per receive slot: `Some(len)` once complete.
    pub(super) recv_done: Vec<Option<usize>>,
    /// Per receive slot, a destination lent for its message ([`Link::lend`]).
    pub(super) recv_lent: Vec<Loan>,
    /// Per receive slot, some of its message's bytes arrived (into the slot, or to its lent
    /// destination): it can no longer be lent one, nor its loan be withdrawn unnoticed.
    pub(super) recv_touched: Vec<bool>,
    /// How many received bytes went straight to lent destinations.
    pub(super) placed_bytes: u64,
    pub(super) next_pop: u64,
    pub(super) rx: RxBatch,
    pub(super) tx: TxBatch,
    /// Paths found readable by the last poll.
    pub(super) ready: Vec<u16>,
    pub(super) error: Option<String>,
    /// `error` is the connection giving up on a silent network (not a protocol fault).
    pub(super) unreachable: bool,
    pub(super) bad_datagrams: u64,
    pub(super) peer: String,
    /// The engine thread found nothing to do and is (about to be) parked in `poll`: a user
    /// who queues work must wake it.
    pub(super) sleeping: bool,
    /// A part of a split frame for the engine thread to copy and queue (`engine_copy`).
    pub(super) copy_job: Option<CopyJob>,
    /// What the throughput monitor is told (off unless [`crate::Link::attach_monitor`]).
    pub(super) mon: EngineMon,
    /// Following renumbered NICs, this side's and the peer's.
    pub(super) follow: Follow,
    /// What the last look of `follow` said, kept so looks do not allocate.
    pub(super) follow_steps: Vec<Step>,
}

/// One part of a split frame, handed to the engine thread that carries it
/// (`MptLinkConfig::engine_copy`).
pub(super) struct CopyJob {
    pub(super) src: *const u8,
    pub(super) len: usize,
    pub(super) hdr: [u8; PART_HEADER],
}

// SAFETY: `src` points into the frame passed to `MptLink::try_send`, which does not return
// (so the frame stays borrowed and unchanged) until every job it handed out is done
// (`Shared::copies_done`); the engine thread only reads through it, under the engine's lock.
unsafe impl Send for CopyJob {}

impl Inner {
    pub(super) fn now(&self) -> Instant {
        Instant::from_std(self.base, std::time::Instant::now())
    }

    pub(super) fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) if self.unreachable => Err(Error::Unreachable(format!(
                "mpt link to {}: {e}",
                self.peer
            ))),
            Some(e) => Err(Error::Protocol(format!("mpt link to {}: {e}", self.peer))),
            None => Ok(()),
        }
    }

    pub(super) fn fail(&mut self, what: String) {
        if self.error.is_none() {
            tracing::warn!("mpt link to {}: {what}", self.peer);
            self.error = Some(what);
        }
    }

    pub(super) fn full(&self) -> bool {
        self.next_send - self.oldest_unacked >= self.slots
    }

    /// Hands the `len`-byte message written into the next send slot to the connection;
    /// `Ok(false)` when the connection has no room for it yet.
    pub(super) fn register(&mut self, len: usize) -> Result<bool> {
        self.register_borrowed(len, (0, 0))
    }

    /// [`Inner::register`] of a message whose bytes past `ext.1` lie at `ext.0` (see
    /// `send_ext`).
    pub(super) fn register_borrowed(&mut self, len: usize, ext: (usize, usize)) -> Result<bool> {
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
    pub(super) fn holds_sender(&self) -> bool {
        !self.conn.all_sent()
            || (self.oldest_unacked..self.next_send)
                .any(|m| self.send_ext[(m % self.slots) as usize].0 != 0)
    }

    /// One round of receive, timers and transmit; returns whether anything moved.
    pub(super) fn progress(&mut self, slab: &Slab, send_slab: &Slab) -> bool {
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
            // A loose path (failed; its peer may come back from a new address) first sees
            // who sends; healthy paths go straight on.
            if self.udp.is_loose(p) {
                match self.udp.admit(p, self.conn.local_flow_id()) {
                    Ok(true) => self.follow.reconnected(p),
                    Ok(false) => continue,
                    Err(e) => {
                        tracing::debug!("mpt link to {}: path {p}: {e}", self.peer);
                        continue;
                    }
                }
            }
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
                    self.follow.heard(p, self.rx.len());
                }
                if n < udp::BATCH {
                    break;
                }
            }
        }
        let timed_out = self.conn.poll_timeout().is_some_and(|t| t <= now);
        if timed_out {
            self.conn.handle_timeout(now);
        }
        self.follow_nics(now);
        moved |= self.transmit(now, send_slab);
        self.drain_events();
        // Chunks leave a path's flight only on what arrived or a timeout, and are posted only
        // by a transmission: a round that did none has nothing to tell the monitor (most
        // rounds of a polling engine).
        if moved || timed_out {
            self.mon.settle(&self.conn);
        }
        moved
    }

    fn transmit(&mut self, now: Instant, send_slab: &Slab) -> bool {
        let mut moved = false;
        // One clock reading per round stamps its chunks, taken at the first chunk: most rounds
        // of a polling engine send nothing and read no clock (none at all with the monitor off).
        let mut mon_ns: Option<u64> = None;
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
                if self.mon.is_on() {
                    if let Some(p) = t.payload {
                        let ts = *mon_ns.get_or_insert_with(|| self.mon.now_ns());
                        self.mon.posted(ts, t.path.0, p.len);
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
                    self.unreachable |= matches!(
                        e,
                        crate::mpt::MptError::RetriesExhausted(_)
                            | crate::mpt::MptError::PeerSilent(_)
                    );
                    self.fail(e.to_string());
                }
            }
        }
    }
}

impl Inner {
    /// Every 100 ms: loosens, tightens and rebinds paths as [`Follow::look`] says.
    pub(super) fn follow_nics(&mut self, now: Instant) {
        if !self.follow.due(now) {
            return;
        }
        let mut steps = std::mem::take(&mut self.follow_steps);
        steps.clear();
        let (conn, udp) = (&self.conn, &self.udp);
        self.follow.look(
            now,
            |i| conn.path(PathId(i as u16)),
            |i| udp.is_loose(i),
            &mut steps,
        );
        for &step in &steps {
            match step {
                Step::Loosen(p) => match self.udp.loosen(usize::from(p)) {
                    Ok(()) => tracing::debug!(
                        "mpt link to {}: path {p} failed; it takes its peer from any address",
                        self.peer
                    ),
                    Err(e) => tracing::debug!("mpt link to {}: loosen path {p}: {e}", self.peer),
                },
                Step::Tighten(p) => {
                    let p = usize::from(p);
                    if let Some(to) = self.udp.peer(p) {
                        if let Err(e) = self.udp.connect_path(p, to) {
                            tracing::debug!("mpt link to {}: reconnect path {p}: {e}", self.peer);
                        }
                    }
                }
                Step::Rebind { nic, ip } => self.rebind_nic(nic, ip),
                Step::Announce(p) => self.announce(p),
            }
        }
        self.follow_steps = steps;
    }

    /// Binds every path of NIC `nic` on its new address `ip`; confirmed to [`Follow`] only
    /// when all were (otherwise the next look tries again).
    fn rebind_nic(&mut self, nic: usize, ip: IpAddr) {
        let mut done = true;
        for p in (0..self.udp.len()).filter(|&p| self.follow.nic_of(p) == nic) {
            match self.udp.rebind(p, ip) {
                Ok(at) => tracing::debug!("mpt link to {}: path {p} now at {at}", self.peer),
                Err(e) => {
                    tracing::debug!("mpt link to {}: rebind path {p} on {ip}: {e}", self.peer);
                    done = false;
                }
            }
        }
        if done {
            tracing::info!(
                "mpt link to {}: NIC {nic} renumbered, its paths rebound on {ip}",
                self.peer
            );
            self.follow.rebound(nic, ip);
            for p in 0..self.udp.len() {
                if self.follow.nic_of(p) == nic {
                    self.announce(p as u16);
                }
            }
        }
    }

    /// Queues a probe on path `p` (sent with this round's transmissions): the peer answers
    /// it on the same path, and a loose peer path takes its source as the new address.
    fn announce(&mut self, p: u16) {
        let probe = Frame::Probe(ProbeFrame {
            flow: self.conn.remote_flow_id(),
        });
        if let Some(out) = self.tx.slot() {
            if let Ok(len) = probe.encode(out) {
                self.tx.commit(p, len);
            }
        }
    }
}
