//! Running a plan: one call moves it as far as its links and gates allow, without waiting.

use ccl_cuda::host::reduce;
use ccl_cuda::{DataType, ReduceKind};
use ccl_monitor::ExecStats;
use ccl_transports::Link;

use super::gates::{overlap, CollGateState, PieceGates};
use super::op::{XKind, XOp};
use super::plan::{Plan, PlanWhat};
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
            self.start();
            self.announce(links);
        }
        while self.cur < self.steps.len() {
            let (moved, all_done) = self.run_step(links, staging, stats)?;
            progressed |= moved;
            if !all_done {
                self.note_settling();
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

    /// Tells the links which operation their next frames belong to, for the monitor's
    /// records: a collective to every link, a group of sends to the links it sends on (each
    /// with its own sequence number).
    fn announce(&self, links: &mut [Option<Box<dyn Link>>]) {
        match self.what {
            PlanWhat::Coll { name, seq, .. } => {
                let op = ccl_monitor::Op::from_name(name);
                for link in links.iter_mut().flatten() {
                    link.begin_op(op, seq);
                }
            }
            PlanWhat::P2p { .. } => {
                let sends = self.steps.iter().flatten();
                for o in sends.filter(|o| matches!(o.kind, XKind::Send { .. })) {
                    if let Some(Some(link)) = links.get_mut(o.peer) {
                        link.begin_op(ccl_monitor::Op::Send, o.hdr.seq);
                    }
                }
            }
        }
    }

    /// What the first call does before any step: gated pieces the plan writes nothing into are
    /// released, and the input is pre-scaled.
    fn start(&mut self) {
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

    /// Moves the operations of the current step as far as they go. Returns whether anything
    /// moved, and whether every one of them has finished.
    fn run_step(
        &mut self,
        links: &mut [Option<Box<dyn Link>>],
        staging: &mut Vec<u8>,
        stats: &mut ExecStats,
    ) -> Result<(bool, bool)> {
        let mut progressed = false;
        let mut all_done = true;
        let mut landed = Vec::new();
        let mut step = Step {
            dtype: self.dtype,
            arith: self.arith,
            scalar: &self.scalar,
            gates: self.gates.as_ref(),
            coll_gates: self.coll_gates.as_mut(),
        };
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
            progressed |= step.advance(op, before, links, staging, stats)?;
            if op.finished {
                landed.extend(op.lands_in);
            } else {
                all_done = false;
            }
        }
        for k in landed {
            self.landed(k);
        }
        Ok((progressed, all_done))
    }

    /// The current step waits: if for nothing but its sends' acknowledgements, notes since
    /// when (the clock read once per such wait, not on the busy path).
    fn note_settling(&mut self) {
        if self.settling_since.is_none()
            && self.steps[self.cur]
                .iter()
                .all(|o| o.finished || (o.queued() && matches!(o.kind, XKind::Send { .. })))
        {
            self.settling_since = Some(std::time::Instant::now());
        }
    }
}

/// What the operations of a plan's current step share while they run: the plan's arithmetic
/// and its gates.
struct Step<'a> {
    dtype: DataType,
    arith: ReduceKind,
    scalar: &'a [u8; 8],
    gates: Option<&'a PieceGates>,
    coll_gates: Option<&'a mut CollGateState>,
}

impl Step<'_> {
    /// Moves `op`, not finished, as far as it goes; `before`: the operations ahead of it in
    /// its step. Returns whether anything moved.
    fn advance(
        &mut self,
        op: &mut XOp,
        before: &[XOp],
        links: &mut [Option<Box<dyn Link>>],
        staging: &mut Vec<u8>,
        stats: &mut ExecStats,
    ) -> Result<bool> {
        if self.held(op) {
            return Ok(false);
        }
        if op.kind.is_local() {
            self.run_local(op);
            return Ok(true);
        }
        if op.waits_behind(before) {
            return Ok(false);
        }
        self.transfer(op, before, links, staging, stats)
    }

    /// Whether a gate holds `op` back: a gated piece's sends and local copies wait until its
    /// bytes are in host memory, and so do a staged collective's local operations until every
    /// range they touch is.
    fn held(&self, op: &XOp) -> bool {
        if let (Some(g), Some(k), XKind::Send { .. } | XKind::Copy { .. }) =
            (self.gates, op.piece, op.kind)
        {
            if g.start.get(k).is_some_and(|f| !f.is_set()) {
                return true;
            }
        }
        if let (Some(c), Some(addrs)) = (self.coll_gates.as_deref(), op.kind.local_addrs()) {
            if !addrs.iter().all(|&p| c.ready(p, op.bytes)) {
                return true;
            }
        }
        false
    }

    /// Runs a local copy or reduction whole.
    fn run_local(&mut self, op: &mut XOp) {
        match op.kind {
            XKind::Copy { src, dst } => {
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
                if let Some(c) = self.coll_gates.as_deref_mut() {
                    c.wrote(d0, n);
                }
            }
            XKind::Reduce { src, local, dst } => {
                let elems = op.bytes / self.dtype.size();
                // SAFETY: the three ranges lie inside buffers validated at enqueue (or
                // plan-owned), `op.bytes` long each; the schedule lets `dst` be exactly
                // `src` or `local` and overlap them nowhere else (elementwise in place).
                unsafe { reduce::reduce(self.dtype, self.arith, dst, src, local, elems) };
                if let Some(c) = self.coll_gates.as_deref_mut() {
                    c.wrote(dst as usize, op.bytes);
                }
            }
            _ => return,
        }
        op.finished = true;
    }

    /// Moves a send or receive as far as its link takes it.
    fn transfer(
        &mut self,
        op: &mut XOp,
        before: &[XOp],
        links: &mut [Option<Box<dyn Link>>],
        staging: &mut Vec<u8>,
        stats: &mut ExecStats,
    ) -> Result<bool> {
        let link = links
            .get_mut(op.peer)
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::internal(format!("no link to rank {}", op.peer)))?;
        // What earlier sends of the step have yet to queue, which this receive must
        // not overwrite.
        let unsent = |lo: usize, len: usize| {
            before.iter().any(|o| {
                o.copy_frames && o.unqueued_source().is_some_and(|r| overlap(r, lo, len) > 0)
            })
        };
        // What earlier receives of the step have yet to write, which this send must
        // not read.
        let unlanded = |lo: usize, len: usize| {
            before
                .iter()
                .any(|o| o.unwritten().is_some_and(|r| overlap(r, lo, len) > 0))
        };
        match op.kind {
            XKind::Send { src } => send_op(
                op,
                src,
                link.as_mut(),
                staging,
                stats,
                self.coll_gates.as_deref(),
                &unlanded,
            ),
            _ => recv_op(
                op,
                link.as_mut(),
                Arith {
                    dtype: self.dtype,
                    arith: self.arith,
                    scalar: self.scalar,
                },
                stats,
                self.coll_gates.as_deref_mut(),
                &unsent,
            ),
        }
    }
}
