//! [`MptLink`]: its state, what it tells about itself, and the [`Link`] it is (sending hands
//! frames to `send`, receiving finds them with `recv`).

use std::net::TcpStream;
use std::sync::atomic::Ordering;

use crate::{Error, Link, Result};

use super::config::{MAX_ENGINES, MAX_SLOTS};
use super::engine::Engine;
use super::parts::{part_range, splits, PART_HEADER};
use super::slab::Loan;

/// A completed message at the head of an engine, with its part header decoded.
#[derive(Clone, Copy, Debug)]
pub(super) struct Head {
    pub(super) slot: usize,
    /// Where the message's bytes after its part header are: a destination lent for it,
    /// or 0 for its slot.
    pub(super) lent: usize,
    /// Message length, part header included.
    pub(super) len: usize,
    pub(super) seq: u64,
    pub(super) total: usize,
    pub(super) part: usize,
    pub(super) parts: usize,
}

/// The frame or piece `peek` shows until `pop`: in place in `engine`'s receive slot, after
/// the part header.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ready {
    pub(super) engine: usize,
    pub(super) slot: usize,
    pub(super) len: usize,
    /// As `Head::lent`.
    pub(super) lent: usize,
}

/// A framed link over one or more multipath connections (see the module docs).
pub struct MptLink {
    pub(super) engines: Vec<Engine>,
    pub(super) max_frame: usize,
    pub(super) split_bytes: usize,
    /// One engine: `peek` returned the head frame (of this length), which `pop` releases.
    pub(super) peeked: Option<usize>,
    /// Several engines: sequence number of the next frame to send.
    pub(super) next_seq: u64,
    /// Several engines: their threads copy the parts of split frames.
    pub(super) engine_copy: bool,
    /// Several engines: sequence number of the next frame to deliver, and while a split
    /// frame is being delivered, its next part and its (parts, length).
    pub(super) next_frame: u64,
    pub(super) next_part: usize,
    pub(super) shape: (usize, usize),
    /// Engine of the last whole frame sent: equal loads go round-robin from there.
    pub(super) last_engine: usize,
    /// Per engine: its completed head message (stays until this side releases it).
    pub(super) heads: Vec<Option<Head>>,
    pub(super) ready: Option<Ready>,
    /// The stream the hello came over, open for the link's life; the probe's outcome
    /// crosses it, and a failed probe hands it back.
    pub(super) tcp: Option<TcpStream>,
    /// Several engines, `async_copy`: frames whose parts' slots are reserved and whose copies
    /// may still run, oldest first; each is queued on its engines once copied.
    pub(super) in_flight: std::collections::VecDeque<InFlight>,
    /// Per engine: slots reserved by `in_flight` frames, not queued yet.
    pub(super) reserved: [u64; MAX_ENGINES],
    pub(super) async_copy: bool,
    pub(super) zero_copy: bool,
    /// Frames up to this long are copied even when they could be borrowed (`zero_copy`): a
    /// frame of one chunk may have its acknowledgement held back (`MptConfig::ack_delay`),
    /// which a borrowed one would wait for, and copying it costs little.
    pub(super) copy_up_to: usize,
    /// `MptLinkConfig::place_receives`.
    pub(super) place_receives: bool,
    /// One engine: the frame popped last was `max_frame` long.
    pub(super) last_full: bool,
    /// Several engines: `MptLinkConfig::inline_bytes`.
    pub(super) inline_bytes: usize,
    /// The operation whose frames are being sent ([`CollId::pack`]ed), which the engines
    /// stamp on their monitor records; `None` until a monitor is attached.
    ///
    /// [`CollId::pack`]: ccl_monitor::CollId::pack
    pub(super) mon_op: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Several engines: the last frame sent went inline on the lead engine (`flush` drives
    /// the lead while it holds unacknowledged messages).
    pub(super) send_inline: bool,
    /// Several engines: the last frame taken was a small one, whole on the lead engine, so
    /// the next probably is too (`peek` drives the lead while nothing is ready).
    pub(super) recv_inline: bool,
    /// Several engines: this side ran the lead engine's progress since it last handed the
    /// lead back to its thread.
    pub(super) lead_driven: bool,
}

/// Where a frame's parts go: (engine, frame range) per part, and how many parts.
pub(super) type PartPlacement = ([(usize, usize, usize); MAX_ENGINES], usize);

/// A frame of an async-copy link whose parts' slots are reserved (see `MptLink::in_flight`).
pub(super) struct InFlight {
    /// The copy on the copy threads; `None`: done on the user's thread already.
    pub(super) copy: Option<crate::par::Pending>,
    /// Message length per engine (part header included); 0 where the frame has no part.
    pub(super) lens: [usize; MAX_ENGINES],
}

impl MptLink {
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

    /// Received bytes written straight to destinations lent with [`Link::lend`].
    pub fn placed_bytes(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| e.shared.lock().placed_bytes)
            .sum()
    }

    /// Chunks retransmitted so far, over all engines.
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
    pub(super) fn check_failed(&self) -> Result<()> {
        for e in &self.engines {
            if e.shared.failed.load(Ordering::Relaxed) {
                e.shared.lock().check()?;
            }
        }
        Ok(())
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

    fn attach_monitor(&mut self, m: &crate::LinkMonitor) {
        let op = self
            .mon_op
            .get_or_insert_with(|| {
                let other = ccl_monitor::CollId::pack(ccl_monitor::Op::Other, 0);
                std::sync::Arc::new(std::sync::atomic::AtomicU64::new(other))
            })
            .clone();
        for (e, engine) in self.engines.iter().enumerate() {
            let mut inner = engine.shared.lock();
            let inner = &mut *inner;
            inner.mon.attach(m, &inner.conn, e, op.clone());
        }
    }

    fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        if let Some(cell) = &self.mon_op {
            // Relaxed: the engines' threads read it when they next post a chunk; a chunk
            // posted around the change may carry either operation.
            cell.store(
                ccl_monitor::CollId::pack(op, seq),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }
}
