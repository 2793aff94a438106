//! What the API records for one operation before a group turns it into a plan.

use crate::dtype::{DataType, ReduceKind};
use crate::Collective;

/// The reduction an operation asked for, resolved from `ncclRedOp_t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reduction {
    Plain(ReduceKind),
    Avg,
    /// Multiply each input by the scalar, then sum. The scalar is read when the plan runs
    /// (a device-resident scalar may be written by earlier stream work).
    PreMulSum(Scalar),
}

/// Where a PreMulSum scalar lives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// Copied at `ncclRedOpCreatePreMulSum` (little-endian element bytes).
    Immediate([u8; 8]),
    /// A pointer to one element in (device) memory, read at execution.
    Device(usize),
}

impl Reduction {
    /// Wire code for mismatch checks.
    pub fn code(&self) -> u8 {
        match self {
            Reduction::Plain(ReduceKind::Sum) => 0,
            Reduction::Plain(ReduceKind::Prod) => 1,
            Reduction::Plain(ReduceKind::Max) => 2,
            Reduction::Plain(ReduceKind::Min) => 3,
            Reduction::Avg => 4,
            Reduction::PreMulSum(_) => 5,
        }
    }

    pub fn arithmetic(&self) -> ReduceKind {
        match self {
            Reduction::Plain(k) => *k,
            Reduction::Avg | Reduction::PreMulSum(_) => ReduceKind::Sum,
        }
    }
}

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TaskKind {
    Coll(Collective),
    Send { peer: usize },
    Recv { peer: usize },
}

impl TaskKind {
    /// Wire code for mismatch checks.
    pub fn code(&self) -> u8 {
        match self {
            TaskKind::Coll(Collective::AllReduce) => 1,
            TaskKind::Coll(Collective::Broadcast { .. }) => 2,
            TaskKind::Coll(Collective::Reduce { .. }) => 3,
            TaskKind::Coll(Collective::AllGather) => 4,
            TaskKind::Coll(Collective::ReduceScatter) => 5,
            TaskKind::Coll(Collective::AlltoAll) => 6,
            TaskKind::Coll(Collective::Gather { .. }) => 7,
            TaskKind::Coll(Collective::Scatter { .. }) => 8,
            TaskKind::Send { .. } | TaskKind::Recv { .. } => 9,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            TaskKind::Coll(Collective::AllReduce) => "AllReduce",
            TaskKind::Coll(Collective::Broadcast { .. }) => "Broadcast",
            TaskKind::Coll(Collective::Reduce { .. }) => "Reduce",
            TaskKind::Coll(Collective::AllGather) => "AllGather",
            TaskKind::Coll(Collective::ReduceScatter) => "ReduceScatter",
            TaskKind::Coll(Collective::AlltoAll) => "AlltoAll",
            TaskKind::Coll(Collective::Gather { .. }) => "Gather",
            TaskKind::Coll(Collective::Scatter { .. }) => "Scatter",
            TaskKind::Send { .. } => "Send",
            TaskKind::Recv { .. } => "Recv",
        }
    }

    pub fn root(&self) -> Option<usize> {
        match self {
            TaskKind::Coll(
                Collective::Broadcast { root }
                | Collective::Reduce { root }
                | Collective::Gather { root }
                | Collective::Scatter { root },
            ) => Some(*root),
            _ => None,
        }
    }
}

/// One enqueued operation. Buffers are addresses (host memory on the host backend).
#[derive(Debug, Clone, Copy)]
pub struct Task {
    pub kind: TaskKind,
    pub send: usize,
    pub recv: usize,
    pub count: usize,
    pub dtype: DataType,
    pub red: Reduction,
    pub stream: usize,
    /// A send or receive the GPU path made of a two-rank reduction it folds on the GPU
    /// (`CCL_GPU_FOLD_BYTES`): its messages say so, so a rank whose calls cross the peer's
    /// differently (a reduction and a send of the same size, grouped on one rank, called apart
    /// in the other order on the other) gets a mismatch error instead of the wrong bytes.
    pub fold: bool,
}

impl Task {
    /// Whether any element range of this operation is an operation of the same kind on that
    /// range (an all-reduce, broadcast or reduce), so it can run in pieces.
    pub fn elementwise(&self) -> bool {
        matches!(
            self.kind,
            TaskKind::Coll(
                Collective::AllReduce | Collective::Broadcast { .. } | Collective::Reduce { .. }
            )
        )
    }
}

/// Element counts of the send and receive buffers this rank needs, per the NCCL API.
pub fn buffer_counts(
    kind: TaskKind,
    rank: usize,
    nranks: usize,
    count: usize,
) -> Option<(usize, usize)> {
    let n_count = count.checked_mul(nranks)?;
    Some(match kind {
        TaskKind::Coll(Collective::AllReduce) => (count, count),
        TaskKind::Coll(Collective::Broadcast { root }) => {
            (if rank == root { count } else { 0 }, count)
        }
        TaskKind::Coll(Collective::Reduce { root }) => {
            (count, if rank == root { count } else { 0 })
        }
        TaskKind::Coll(Collective::AllGather) => (count, n_count),
        TaskKind::Coll(Collective::ReduceScatter) => (n_count, count),
        TaskKind::Coll(Collective::AlltoAll) => (n_count, n_count),
        TaskKind::Coll(Collective::Gather { root }) => {
            (count, if rank == root { n_count } else { 0 })
        }
        TaskKind::Coll(Collective::Scatter { root }) => {
            (if rank == root { n_count } else { 0 }, count)
        }
        TaskKind::Send { .. } => (count, 0),
        TaskKind::Recv { .. } => (0, count),
    })
}

/// A float sum operation on fake addresses, for tests of the crates above.
pub fn float_sum(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
    Task {
        kind,
        send,
        recv,
        count,
        dtype: DataType::Float32,
        red: Reduction::Plain(ReduceKind::Sum),
        stream: 0,
        fold: false,
    }
}

/// What every input of `t` is multiplied by before the sum, as element bytes: an immediate
/// PreMulSum scalar, `1/nranks` for a float Avg (so every path rounds a float Avg alike).
/// `None` for the others (a device-resident scalar is read where the operation runs).
pub fn premul_scalar(t: &Task, nranks: usize) -> Option<[u8; 8]> {
    match t.red {
        Reduction::PreMulSum(Scalar::Immediate(s)) => Some(s),
        Reduction::Avg if t.dtype.is_float() => {
            Some(crate::dtype::from_f64(t.dtype, 1.0 / nranks as f64))
        }
        _ => None,
    }
}
