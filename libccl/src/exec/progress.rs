//! Running a plan: one call moves it as far as its links and gates allow, without waiting.

use ccl_cuda::host::reduce;
use ccl_monitor::ExecStats;
use ccl_transports::Link;

use super::gates::overlap;
use super::op::{XKind, XOp};
use super::plan::Plan;
use super::recv::{recv_op, Arith};
use super::send::send_op;
use crate::error::{Error, Result};

impl Plan {
    /// Moves the plan as far as the links allow without waiting. Returns whether anything
    /// moved.
    pub fn progress(
        &mut self,
        links: &mut [Option<Box<dyn Link>>],
        staging: &mut Vec<u8>,
        stats: &mut ExecStats,
    ) -> Result<bool> {
        let mut progressed = false;
        if !self.started {
            self.started = true;
            if let Some(g) = &self.gates {
                // Pieces with nothing to receive have landed already.
                for (f, _) in g.landed.iter().zip(&self.landing).filter(|(_, &n)| n == 0) {
                    f.set();
                }
            }
            if let Some(c) = &self.coll_gates {
                for (&(_, _, f), _) in c.gates.output.iter().zip(&c.left).filter(|(_, &n)| n == 0) {
                    f.set();
                }
            }
            if let Some(p) = &mut self.prescale {
                // SAFETY: `src` is the user's send buffer, valid for `elems` elements
                // (validated at enqueue); `buf` is our own allocation of the same size.
                unsafe {
                    reduce::premul(
                        self.dtype,
                        p.buf.as_mut_ptr(),
                        p.src,
                        p.elems,
                        p.scalar.as_ptr(),
                    )
                };
            }
        }
        while self.cur < self.steps.len() {
            let mut all_done = true;
            let size = self.dtype.size();
            let (dtype, arith) = (self.dtype, self.arith);
            let gates = &self.gates;
            let coll_gates = &mut self.coll_gates;
            let mut landed = Vec::new();
            let ops = &mut self.steps[self.cur];
            // Transfers first, then local copies: the copy (an all-to-all's or a gather's
            // own block, as large as what crosses the links) then runs while the engines move
            // the frames already queued and lent, instead of before any of them left.
            let order = (0..ops.len())
                .map(|i| (false, i))
                .chain((0..ops.len()).map(|i| (true, i)));
            for (copies, i) in order {
                let (before, rest) = ops.split_at_mut(i);
                let Some(op) = rest.first_mut() else { break };
                if op.finished || op.kind.is_local() != copies {
                    continue;
                }
                // A gated piece's sends and local copies wait until its bytes are in host
                // memory.
                if let (Some(g), Some(k), XKind::Send { .. } | XKind::Copy { .. }) =
                    (gates, op.piece, op.kind)
                {
                    if g.start.get(k).is_some_and(|f| !f.is_set()) {
                        all_done = false;
                        continue;
                    }
                }
                if let (Some(c), Some(addrs)) = (coll_gates.as_ref(), op.kind.local_addrs()) {
                    if !addrs.iter().all(|&p| c.ready(p, op.bytes)) {
                        all_done = false;
                        continue;
                    }
                }
                if let XKind::Copy { src, dst } = op.kind {
                    let (s0, d0, n) = (src as usize, dst as usize, op.bytes);
                    if s0 + n <= d0 || d0 + n <= s0 {
                        // Disjoint: in parts on the copy threads, if any (an all-to-all's
                        // own block, a gather's: as large as what goes over the links).
                        // SAFETY: both ranges lie inside buffers validated at enqueue (or
                        // plan-owned) and do not overlap.
                        unsafe { ccl_transports::par::copy(src, dst, n) };
                    } else if src != dst.cast_const() && n > 0 {
                        // SAFETY: both ranges are inside buffers validated at enqueue (or
                        // plan-owned); `copy` tolerates overlap.
                        unsafe { std::ptr::copy(src, dst, n) };
                    }
                    op.finished = true;
                    progressed = true;
                    landed.extend(op.lands_in);
                    if let Some(c) = coll_gates.as_mut() {
                        c.wrote(d0, n);
                    }
                    continue;
                }
                if let XKind::Reduce { src, local, dst } = op.kind {
                    // SAFETY: the three ranges lie inside buffers validated at enqueue (or
                    // plan-owned), `op.bytes` long each; the schedule lets `dst` be exactly
                    // `src` or `local` and overlap them nowhere else (elementwise in place).
                    unsafe { reduce::reduce(dtype, arith, dst, src, local, op.bytes / size) };
                    op.finished = true;
                    progressed = true;
                    if let Some(c) = coll_gates.as_mut() {
                        c.wrote(dst as usize, op.bytes);
                    }
                    continue;
                }
                // Messages between one pair of ranks are FIFO: an operation waits for the
                // earlier ones of its step with the same peer and direction -- a send only
                // until they have queued all their bytes (their wait for the link to empty
                // overlaps this one's frames; waiting for it drained the link between every
                // two pieces of a staged GPU group over the network).
                let sending = matches!(op.kind, XKind::Send { .. });
                if before.iter().any(|o| {
                    o.peer == op.peer
                        && !o.kind.is_local()
                        && matches!(o.kind, XKind::Send { .. }) == sending
                        && if sending { !o.queued() } else { !o.finished }
                }) {
                    all_done = false;
                    continue;
                }
                let link = links
                    .get_mut(op.peer)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| Error::internal(format!("no link to rank {}", op.peer)))?;
                // What earlier sends of the step have yet to queue, which this receive must
                // not overwrite.
                let before: &[XOp] = before;
                let unsent = |lo: usize, len: usize| {
                    before.iter().any(|o| {
                        o.copy_frames
                            && o.unqueued_source().is_some_and(|r| overlap(r, lo, len) > 0)
                    })
                };
                // What earlier receives of the step have yet to write, which this send must
                // not read.
                let unlanded = |lo: usize, len: usize| {
                    before
                        .iter()
                        .any(|o| o.unwritten().is_some_and(|r| overlap(r, lo, len) > 0))
                };
                progressed |= match op.kind {
                    XKind::Send { src } => send_op(
                        op,
                        src,
                        link.as_mut(),
                        staging,
                        stats,
                        coll_gates.as_ref(),
                        &unlanded,
                    )?,
                    _ => recv_op(
                        op,
                        link.as_mut(),
                        Arith {
                            dtype,
                            arith,
                            scalar: &self.scalar,
                        },
                        stats,
                        coll_gates.as_mut(),
                        &unsent,
                    )?,
                };
                if !op.finished {
                    all_done = false;
                } else {
                    landed.extend(op.lands_in);
                }
            }
            for k in landed {
                self.landed(k);
            }
            if !all_done {
                // Read the clock once per such wait, not on the busy path.
                if self.settling_since.is_none()
                    && self.steps[self.cur]
                        .iter()
                        .all(|o| o.finished || (o.queued() && matches!(o.kind, XKind::Send { .. })))
                {
                    self.settling_since = Some(std::time::Instant::now());
                }
                break;
            }
            if let Some(t) = self.settling_since.take() {
                stats.settle += t.elapsed();
                stats.settle_steps += 1;
            }
            self.cur += 1;
            progressed = true;
        }
        if self.cur >= self.steps.len() {
            if let Some((dst, elems, n)) = self.postdiv.take() {
                // SAFETY: `dst` is the user's receive buffer of `elems` elements (validated).
                unsafe { reduce::div_int(self.dtype, dst, elems, n) };
            }
        }
        Ok(progressed)
    }
}
