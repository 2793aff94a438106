//! What the API records for one operation before a group turns it into a plan.

use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use crate::error::{Error, Result};

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
    /// What every input is multiplied by before the sum, as element bytes: an immediate
    /// PreMulSum scalar, `1/nranks` for a float Avg (so every path rounds a float Avg alike).
    /// `None` for the others (a device-resident scalar is read where the operation runs).
    pub(crate) fn premul_scalar(&self, nranks: usize) -> Option<[u8; 8]> {
        match self.red {
            Reduction::PreMulSum(Scalar::Immediate(s)) => Some(s),
            Reduction::Avg if self.dtype.is_float() => Some(ccl_cuda::host::reduce::from_f64(
                self.dtype,
                1.0 / nranks as f64,
            )),
            _ => None,
        }
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

/// Checks an operation's arguments against the communicator's size.
pub fn validate(task: &Task, rank: usize, nranks: usize) -> Result<()> {
    let name = task.kind.name();
    if let Some(root) = task.kind.root() {
        if root >= nranks {
            return Err(Error::invalid_argument(format!(
                "{name}: root {root} is not a rank of this {nranks}-rank communicator"
            )));
        }
    }
    if let TaskKind::Send { peer } | TaskKind::Recv { peer } = task.kind {
        if peer >= nranks {
            return Err(Error::invalid_argument(format!(
                "{name}: peer {peer} is not a rank of this {nranks}-rank communicator"
            )));
        }
    }
    let (send_elems, recv_elems) =
        buffer_counts(task.kind, rank, nranks, task.count).ok_or_else(|| {
            Error::invalid_argument(format!("{name}: count {} overflows", task.count))
        })?;
    let size = task.dtype.size();
    for (what, elems, ptr) in [
        ("sendbuff", send_elems, task.send),
        ("recvbuff", recv_elems, task.recv),
    ] {
        let bytes = elems
            .checked_mul(size)
            .filter(|b| isize::try_from(*b).is_ok())
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{name}: count {} of {} is too large ({what} size overflows)",
                    task.count,
                    task.dtype.name()
                ))
            })?;
        if bytes > 0 && ptr == 0 {
            return Err(Error::invalid_argument(format!("{name}: {what} is NULL")));
        }
        if bytes > 0 && ptr.checked_add(bytes).is_none() {
            return Err(Error::invalid_argument(format!(
                "{name}: {what} + size wraps the address space"
            )));
        }
    }
    Ok(())
}

/// A float sum operation on fake addresses, for tests.
#[cfg(test)]
pub(crate) fn float_sum(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
    Task {
        kind,
        send,
        recv,
        count,
        dtype: ccl_cuda::DataType::Float32,
        red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
        stream: 0,
        fold: false,
    }
}
