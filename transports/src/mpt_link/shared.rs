//! What an engine's thread and the link's user share ([`Shared`]): the engine's state behind
//! its lock, its slabs, the load mirrors the user reads without the lock, and the wake-up
//! of a parked engine thread.

use std::os::fd::RawFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::{Error, Result};

use super::parts::{copy_into_slots, PART_HEADER};
use super::progress::{CopyJob, Inner};
use super::slab::{Loan, Slab};

/// Wakes an engine thread parked in `poll`: a datagram on a socket pair whose receiving end
/// is polled with the paths. A socket pair rather than an eventfd keeps this free of
/// `unsafe`.
pub(super) struct Wake {
    pub(super) rx: UnixDatagram,
    tx: UnixDatagram,
}

impl Wake {
    pub(super) fn new() -> Result<Self> {
        let io = |e| Error::io("mpt engine wake-up socket pair", e);
        let (rx, tx) = UnixDatagram::pair().map_err(io)?;
        rx.set_nonblocking(true).map_err(io)?;
        tx.set_nonblocking(true).map_err(io)?;
        Ok(Wake { rx, tx })
    }

    pub(super) fn notify(&self) {
        // A full pair already holds a pending wake-up, which is all that is needed.
        let _ = self.tx.send(&[1]);
    }

    pub(super) fn drain(&self) {
        let mut b = [0u8; 16];
        while self.rx.recv(&mut b).is_ok() {}
    }
}

pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    pub(super) slab: Slab,
    pub(super) send_slab: Slab,
    pub(super) stop: AtomicBool,
    pub(super) fds: Vec<RawFd>,
    /// When the link's user last ran progress (ns since `epoch`): while the user polls, the
    /// engine stays out of its way (on few cores a second poller only steals time slices and
    /// fights for the lock); it takes over when the user stops polling. Only a one-engine
    /// link's user runs progress.
    pub(super) user_progress: AtomicU64,
    pub(super) epoch: std::time::Instant,
    /// Present with several engines, where the user never runs progress itself.
    pub(super) wake: Option<Wake>,
    /// Mirrors of `Inner`'s send load, so the user can pick the least-loaded engine and
    /// answer `has_pending` without taking every engine's lock.
    pub(super) unacked_msgs: AtomicU64,
    pub(super) unacked_bytes: AtomicU64,
    /// Mirror of [`Inner::holds_sender`]: a send on this engine is not complete yet.
    pub(super) holding: AtomicBool,
    pub(super) failed: AtomicBool,
    /// The oldest receive is complete (a hint: the lock confirms it).
    pub(super) head_ready: AtomicBool,
    pub(super) slots: u64,
    /// Copy jobs this engine has finished (`engine_copy`).
    pub(super) copies_done: AtomicU64,
}

impl Shared {
    fn touch(&self) {
        self.user_progress
            .store(nanos_since(self.epoch), Ordering::Relaxed);
    }

    /// The user stops driving this engine: its thread takes over at once (it waits on its
    /// wake-up socket while the user drives, so it sees this now rather than after
    /// `USER_ACTIVE`).
    pub(super) fn hand_back(&self) {
        self.user_progress.store(0, Ordering::Relaxed);
        if let Some(w) = &self.wake {
            w.notify();
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
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

    pub(super) fn run(&self, g: &mut Inner) -> bool {
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
    pub(super) fn reserve(&self, len: usize, drive: bool) -> Result<Option<*mut u8>> {
        self.reserve_ahead(len, drive, 0)
    }

    /// [`Shared::reserve`] of the slot `ahead` messages past the next one: the user has
    /// reserved `ahead` slots it has not committed yet (their copies still running), which
    /// it commits in order before this one.
    pub(super) fn reserve_ahead(
        &self,
        len: usize,
        drive: bool,
        ahead: u64,
    ) -> Result<Option<*mut u8>> {
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
    pub(super) fn commit(&self, len: usize, drive: bool) -> Result<bool> {
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
    pub(super) unsafe fn commit_borrowed(
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
    pub(super) fn unborrow(&self) {
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
    pub(super) fn send(&self, hdr: &[u8], payload: &[u8], drive: bool) -> Result<bool> {
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
    pub(super) fn hand_over(&self, hdr: [u8; PART_HEADER], part: &[u8]) -> Result<()> {
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
    pub(super) fn run_copy_job(&self, g: &mut Inner) -> bool {
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
    pub(super) fn head(&self, drive: bool) -> Result<Option<(usize, usize, usize)>> {
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
    pub(super) unsafe fn recv_bytes(
        &self,
        stride: usize,
        slot: usize,
        off: usize,
        len: usize,
    ) -> &[u8] {
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
    pub(super) unsafe fn lend(&self, loans: &[Loan]) {
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
    pub(super) fn unlend(&self) {
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
    pub(super) fn release(&self, driven: bool) {
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

    pub(super) fn flush(&self) -> Result<bool> {
        let mut g = self.lock();
        g.check()?;
        self.touch();
        let moved = self.run(&mut g);
        g.check()?;
        Ok(moved)
    }

    pub(super) fn pending(&self) -> bool {
        let g = self.lock();
        g.error.is_none() && g.holds_sender()
    }
}

pub(super) fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
