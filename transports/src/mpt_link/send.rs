//! Sending on a link of several engines: which engines take a frame (least loaded, or one
//! part each), small frames inline on the lead engine, copied, borrowed (`zero_copy`) or
//! in flight on the copy threads (`async_copy`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::{Error, Result};

use super::config::MAX_ENGINES;
use super::link::{InFlight, MptLink, PartPlacement};
use super::parts::{
    copy_into_slots, copy_range_into_slots, part_header, part_range, splits, PART_HEADER,
};

impl MptLink {
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
    pub(super) fn send_inline(&mut self, frame: &[u8]) -> Result<Option<bool>> {
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
    pub(super) fn hand_back_lead(&mut self) {
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
    pub(super) fn send_queued(&mut self, frame: &[u8], deferred: bool) -> Result<bool> {
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
    pub(super) fn commit_ready(&mut self) -> Result<()> {
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
    pub(super) fn wait_copies_in_flight(&self) {
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
    pub(super) unsafe fn send_borrowed(&mut self, frame: &[u8]) -> Result<bool> {
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

    pub(super) fn try_send_multi(&mut self, frame: &[u8]) -> Result<bool> {
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
}
