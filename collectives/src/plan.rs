//! Building blocks: slice and op constructors, and a table of global steps that is projected
//! into a rank's [`Schedule`].

use crate::{BufId, Op, Schedule, Slice, Step};

pub(crate) fn slice(buf: BufId, offset: usize, count: usize) -> Slice {
    Slice { buf, offset, count }
}
pub(crate) fn send(offset: usize, count: usize) -> Slice {
    slice(BufId::Send, offset, count)
}
pub(crate) fn recv(offset: usize, count: usize) -> Slice {
    slice(BufId::Recv, offset, count)
}
pub(crate) fn scratch(offset: usize, count: usize) -> Slice {
    slice(BufId::Scratch, offset, count)
}

pub(crate) fn op_send(peer: usize, src: Slice) -> Op {
    Op::Send { peer, src }
}
pub(crate) fn op_recv(peer: usize, dst: Slice) -> Op {
    Op::Recv { peer, dst }
}
pub(crate) fn op_reduce(peer: usize, local: Slice, dst: Slice) -> Op {
    Op::RecvReduce { peer, local, dst }
}
pub(crate) fn op_fold(peer: usize, local: Slice, dst: Slice) -> Op {
    Op::RecvFold { peer, local, dst }
}
pub(crate) fn copy(src: Slice, dst: Slice) -> Op {
    Op::Copy { src, dst }
}
pub(crate) fn op_local_reduce(src: Slice, local: Slice, dst: Slice) -> Op {
    Op::Reduce { src, local, dst }
}

/// Elements an operation moves; zero-count operations are never emitted.
pub(crate) fn op_count(op: &Op) -> usize {
    match op {
        Op::Send { src, .. } => src.count,
        Op::Recv { dst, .. }
        | Op::RecvReduce { dst, .. }
        | Op::RecvFold { dst, .. }
        | Op::Copy { dst, .. }
        | Op::Reduce { dst, .. } => dst.count,
    }
}

/// Operations of one rank indexed by *global* step. Both ends of a message are pushed at the
/// same global step by construction, which is what makes the projection deadlock-free.
#[derive(Debug, Default)]
pub(crate) struct Table {
    steps: Vec<Vec<Op>>,
}

impl Table {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `op` at global step `step`, dropping it when it moves nothing. Both ends compute the
    /// same count, so a dropped send always has a dropped receive.
    pub fn push(&mut self, step: usize, op: Op) {
        if op_count(&op) == 0 {
            return;
        }
        if self.steps.len() <= step {
            self.steps.resize_with(step + 1, Vec::new);
        }
        if let Some(ops) = self.steps.get_mut(step) {
            ops.push(op);
        }
    }

    /// The rank's schedule: global steps in order with empty ones removed (an empty step would
    /// end at once, so removing it changes nothing under rendezvous).
    pub fn finish(self, scratch: usize) -> Schedule {
        Schedule {
            steps: self
                .steps
                .into_iter()
                .filter(|ops| !ops.is_empty())
                .map(|ops| Step { ops })
                .collect(),
            scratch,
        }
    }
}
