//! Building plans: a collective's from its schedule, a group's sends and receives as one plan,
//! and the byte-range gates of a plan staged in pieces.

use ccl_collectives::{BufId, Op, Schedule, Slice};
use ccl_cuda::{DataType, ReduceKind};

use super::buffers::take_buffer;
use super::gates::{overlap, CollGateState, CollGates, PieceGates};
use super::header::OpHeader;
use super::op::{order_overwrites, XKind, XOp};
use super::plan::{Plan, PlanWhat, Prescale};
use crate::error::{Error, Result};
use crate::task::{Reduction, Scalar, Task, TaskKind};

fn elem_ptr(base: usize, off_elems: usize, size: usize) -> usize {
    base.wrapping_add(off_elems.wrapping_mul(size))
}

/// The PreMulSum scalar of `task` (float Avg's 1/n too), one element of its type, if its
/// reduction has one.
fn premul_scalar(task: &Task, nranks: usize) -> Option<[u8; 8]> {
    match task.red {
        Reduction::PreMulSum(Scalar::Device(p)) => {
            let mut b = [0u8; 8];
            // SAFETY: the caller gave a pointer to one element of `dtype` that stays valid
            // while operations using the op run (NCCL's contract); it was checked non-NULL.
            unsafe {
                std::ptr::copy_nonoverlapping(p as *const u8, b.as_mut_ptr(), task.dtype.size())
            };
            Some(b)
        }
        _ => ccl_cuda::host::reduce::premul_scalar(task, nranks),
    }
}

/// The header of every operation of collective `task`, the `seq`-th (each operation sets its
/// own byte count).
fn coll_header(task: &Task, seq: u64) -> OpHeader {
    OpHeader {
        kind: task.kind.code(),
        dtype: task.dtype as u8,
        red: task.red.code(),
        root: task.kind.root().map(|r| r as i32).unwrap_or(-1),
        seq,
        count: task.count as u64,
        bytes: 0,
    }
}

/// Where a collective's buffers lie in memory, to turn its schedule's operations into raw
/// ones on this rank.
struct Lowering {
    /// The send buffer the steps read: the pre-scaled copy where there is one.
    send: usize,
    /// The caller's own send buffer.
    raw_send: usize,
    recv: usize,
    scratch: usize,
    /// Element size.
    size: usize,
    rank: usize,
    /// Whether receive-reductions of the raw input fuse its pre-scaling into the fold.
    fuse: bool,
}

impl Lowering {
    fn base(&self, b: BufId) -> usize {
        match b {
            BufId::Send => self.send,
            BufId::Recv => self.recv,
            BufId::Scratch => self.scratch,
        }
    }

    fn at(&self, s: Slice) -> usize {
        elem_ptr(self.base(s.buf), s.offset, self.size)
    }

    /// One operation of the schedule as a raw one: what it does, its peer (this rank for a
    /// local one) and its element count.
    fn op(&self, op: &Op) -> (XKind, usize, usize) {
        match *op {
            Op::Send { peer, src } => (
                XKind::Send {
                    src: self.at(src) as *const u8,
                },
                peer,
                src.count,
            ),
            Op::Recv { peer, dst } => (
                XKind::Recv {
                    dst: self.at(dst) as *mut u8,
                },
                peer,
                dst.count,
            ),
            Op::RecvReduce { peer, local, dst } | Op::RecvFold { peer, local, dst } => {
                // A raw input folded into a scaled partial sum: NCCL computes
                // fma(x, s, partial), so read the unscaled input and fuse.
                let fused = self.fuse && local.buf == BufId::Send;
                let local_base = if fused {
                    self.raw_send
                } else {
                    self.base(local.buf)
                };
                (
                    XKind::RecvReduce {
                        local: elem_ptr(local_base, local.offset, self.size) as *const u8,
                        dst: self.at(dst) as *mut u8,
                        fused,
                        local_first: matches!(op, Op::RecvFold { .. }),
                    },
                    peer,
                    dst.count,
                )
            }
            Op::Copy { src, dst } => (
                XKind::Copy {
                    src: self.at(src) as *const u8,
                    dst: self.at(dst) as *mut u8,
                },
                self.rank,
                src.count,
            ),
            Op::Reduce { src, local, dst } => (
                XKind::Reduce {
                    src: self.at(src) as *const u8,
                    local: self.at(local) as *const u8,
                    dst: self.at(dst) as *mut u8,
                },
                self.rank,
                dst.count,
            ),
        }
    }

    /// A step of the schedule as raw operations, each with `hdr` and its byte count, in the
    /// order rules of [`order_overwrites`].
    fn step(&self, ops: &[Op], nranks: usize, hdr: OpHeader) -> Result<Vec<XOp>> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let (kind, peer, count) = self.op(op);
            if peer >= nranks {
                return Err(Error::internal(format!(
                    "schedule names peer {peer} of {nranks}"
                )));
            }
            let bytes = count * self.size;
            out.push(XOp::new(
                kind,
                peer,
                OpHeader {
                    bytes: bytes as u64,
                    ..hdr
                },
            ));
        }
        order_overwrites(&mut out);
        Ok(out)
    }
}

impl Plan {
    /// Builds the plan of one collective from its schedule; `gates` when it is staged in
    /// pieces that reach host memory and go back while it runs.
    pub fn collective(
        task: &Task,
        schedule: &Schedule,
        rank: usize,
        nranks: usize,
        seq: u64,
        gates: Option<&CollGates>,
    ) -> Result<Plan> {
        let size = task.dtype.size();
        let scratch_bytes = schedule
            .scratch
            .checked_mul(size)
            .ok_or_else(|| Error::invalid_argument("scratch size overflows"))?;
        let mut scratch = take_buffer(scratch_bytes);
        let (send_elems, recv_elems) =
            crate::task::buffer_counts(task.kind, rank, nranks, task.count)
                .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let scalar = premul_scalar(task, nranks);
        let mut prescale = None;
        let mut send_base = task.send;
        if let (Some(scalar), true) = (scalar, send_elems > 0) {
            let mut buf = take_buffer(send_elems * size);
            send_base = buf.as_mut_ptr() as usize;
            prescale = Some(Prescale {
                src: task.send as *const u8,
                buf,
                scalar,
                elems: send_elems,
            });
        }
        // Folds in rank order must compute the same operations on every rank, so no rank may
        // fuse its pre-scaling into them: with a scalar, every operand is pre-scaled by its
        // owner (the plan's `prescale`) and the folds are plain.
        let ordered_folds = schedule
            .steps
            .iter()
            .flat_map(|s| &s.ops)
            .any(|o| matches!(o, Op::RecvFold { .. }));
        let lowering = Lowering {
            send: send_base,
            raw_send: task.send,
            recv: task.recv,
            scratch: scratch.as_mut_ptr() as usize,
            size,
            rank,
            fuse: scalar.is_some() && !ordered_folds,
        };
        let hdr = coll_header(task, seq);
        let steps = schedule
            .steps
            .iter()
            .map(|step| lowering.step(&step.ops, nranks, hdr))
            .collect::<Result<Vec<_>>>()?;
        let what = PlanWhat::Coll {
            name: task.kind.name(),
            seq,
            count: task.count,
            dtype: task.dtype,
        };
        let mut plan = Plan::new(steps, task.dtype, task.red.arithmetic(), what);
        plan.prescale = prescale;
        plan.scalar = scalar.unwrap_or([0; 8]);
        plan.postdiv = match task.red {
            Reduction::Avg if !task.dtype.is_float() && recv_elems > 0 => {
                Some((task.recv as *mut u8, recv_elems, nranks as u64))
            }
            _ => None,
        };
        plan._scratch = scratch;
        if let Some(g) = gates {
            if plan.prescale.is_some() || plan.postdiv.is_some() {
                // Both touch the whole buffer outside the steps, where no gate is looked at.
                return Err(Error::internal(
                    "a pre-scaled or averaged collective cannot run on piece gates",
                ));
            }
            plan.gate_bytes(g);
        }
        Ok(plan)
    }

    /// Puts the plan on byte-range gates: its operations read an input piece only once its
    /// flag is set and set an output piece's flag once they wrote every byte they write there
    /// (a streamed collective, or a streamed group of sends and receives).
    pub(crate) fn gate_bytes(&mut self, g: &CollGates) {
        // Every byte the plan writes into each output piece, over all its steps.
        let mut left = vec![0usize; g.output.len()];
        for op in self.steps.iter().flatten() {
            let written = op.receives_into().map(|(lo, _)| lo);
            let Some(dst) = written.or(op.kind.local_addrs().map(|[_, _, dst]| dst)) else {
                continue;
            };
            for (&(a, b, _), l) in g.output.iter().zip(left.iter_mut()) {
                *l += overlap((a, b), dst, op.bytes);
            }
        }
        self.coll_gates = Some(CollGateState {
            gates: g.clone(),
            left,
        });
    }

    /// Builds one plan from a group's sends and receives on one communicator: all of them
    /// progress at once (any order across peers is fine), FIFO per peer. `seqs[peer]` counts
    /// the sends (`.0`) and receives (`.1`) already matched with that peer.
    pub fn p2p(
        tasks: &[Task],
        rank: usize,
        nranks: usize,
        seqs: &mut [(u64, u64)],
        gates: Option<&PieceGates>,
    ) -> Result<Plan> {
        let mut ops = Vec::new();
        let mut self_sends = std::collections::VecDeque::new();
        let mut self_recvs = std::collections::VecDeque::new();
        let dtype = tasks.first().map(|t| t.dtype).unwrap_or(DataType::Uint8);
        if let Some(g) = gates {
            if g.of_task.len() != tasks.len()
                || g.of_task.iter().any(|&k| k >= g.start.len())
                || g.landed.len() + 1 != g.start.len()
            {
                return Err(Error::internal("piece gates do not fit the group"));
            }
        }
        let piece_of = |i: usize| gates.map(|g| g.of_task[i]);
        for (i, t) in tasks.iter().enumerate() {
            let bytes = t.count * t.dtype.size();
            if let TaskKind::Send { peer } | TaskKind::Recv { peer } = t.kind {
                if peer >= nranks || peer >= seqs.len() {
                    return Err(Error::internal(format!("peer {peer} of {nranks} ranks")));
                }
            }
            let (kind, peer, seq) = match t.kind {
                TaskKind::Send { peer } if peer == rank => {
                    self_sends.push_back((t.send, bytes, piece_of(i)));
                    continue;
                }
                TaskKind::Recv { peer } if peer == rank => {
                    self_recvs.push_back((t.recv, bytes, piece_of(i)));
                    continue;
                }
                TaskKind::Send { peer } => {
                    let s = &mut seqs[peer].0;
                    *s += 1;
                    (
                        XKind::Send {
                            src: t.send as *const u8,
                        },
                        peer,
                        *s,
                    )
                }
                TaskKind::Recv { peer } => {
                    let s = &mut seqs[peer].1;
                    *s += 1;
                    (
                        XKind::Recv {
                            dst: t.recv as *mut u8,
                        },
                        peer,
                        *s,
                    )
                }
                TaskKind::Coll(_) => return Err(Error::internal("collective in a p2p plan")),
            };
            let mut op = XOp::new(kind, peer, OpHeader::p2p(seq, bytes, t.fold));
            op.piece = piece_of(i);
            op.lands_in = op.piece.filter(|_| matches!(kind, XKind::Recv { .. }));
            ops.push(op);
        }
        if self_sends.len() != self_recvs.len() {
            return Err(Error::invalid_usage(format!(
                "rank {rank} posted {} sends to itself but {} receives from itself in one group",
                self_sends.len(),
                self_recvs.len()
            )));
        }
        for ((src, sb, sp), (dst, rb, rp)) in self_sends.into_iter().zip(self_recvs) {
            if sb != rb {
                return Err(Error::invalid_usage(format!(
                    "rank {rank} sends {sb} bytes to itself but receives {rb}"
                )));
            }
            // A local copy carries no header; its byte count is what it copies.
            let copy = XKind::Copy {
                src: src as *const u8,
                dst: dst as *mut u8,
            };
            let mut op = XOp::new(copy, rank, OpHeader::p2p(0, sb, false));
            // Reads the send's piece, lands in the receive's.
            op.piece = sp;
            op.lands_in = rp;
            ops.push(op);
        }
        let what = PlanWhat::P2p { ops: tasks.len() };
        let mut plan = Plan::new(vec![ops], dtype, ReduceKind::Sum, what);
        if let Some(g) = gates {
            let mut landing = vec![0usize; g.start.len()];
            for op in plan.steps.iter().flatten() {
                if let Some(k) = op.lands_in {
                    landing[k] += 1;
                }
            }
            plan.landing = landing;
            plan.gates = Some(g.clone());
        }
        Ok(plan)
    }
}
