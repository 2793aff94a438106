//! Collective algorithms as pure schedules: for every rank, a list of steps made of
//! copy / send / receive / receive-and-reduce operations on element ranges of the
//! caller's buffers. No IO happens here; the communicator executes the schedules.
//!
//! # Execution semantics (the contract between this crate and every executor)
//!
//! * A [`Schedule`] is a list of [`Step`]s executed in order. The operations inside one step
//!   progress *concurrently*; a step ends when all its operations have ended.
//! * Operations in one step never have a data hazard between them.
//! * Between one ordered pair of ranks, messages are FIFO: the k-th `Send` from rank a to rank
//!   b (counting through the whole schedule, in step order and, inside a step, in operation
//!   order) is matched by the k-th `Recv`/`RecvReduce` on b from a, with the same `count`.
//! * Transports have bounded buffers, so a schedule must finish even when a `Send` can only
//!   complete while the matching receive is part of the receiver's current step (rendezvous).
//! * `Slice` offsets and counts are in elements of the operation's data type.
//! * Buffer sizes (elements), with `n` ranks and the API `count`: AllReduce send/recv `count`;
//!   Broadcast send `count` (root only), recv `count`; Reduce send `count`, recv `count` (root
//!   only); AllGather send `count`, recv `n*count`; ReduceScatter send `n*count`, recv
//!   `count`; AlltoAll send/recv `n*count`; Gather send `count`, recv `n*count` (root only);
//!   Scatter send `n*count` (root only), recv `count`. `Scratch` has `Schedule::scratch`
//!   elements.
//! * In-place calls pass aliasing buffers exactly as NCCL defines them (AllReduce, Broadcast,
//!   Reduce, AlltoAll: send == recv; AllGather: send == recv + rank*count; ReduceScatter: recv
//!   == send + rank*count; Gather: send == recv + root*count at the root; Scatter: recv == send
//!   + root*count at the root). Every schedule is correct for both in-place and out-of-place.

/// Which buffer a [`Slice`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufId {
    Send,
    Recv,
    Scratch,
}

/// A range of elements in one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slice {
    pub buf: BufId,
    pub offset: usize,
    pub count: usize,
}

/// One operation of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Send `src` to `peer`.
    Send { peer: usize, src: Slice },
    /// Receive from `peer` into `dst` (overwrite).
    Recv { peer: usize, dst: Slice },
    /// Receive from `peer` and store `incoming (op) local` into `dst` (`local` may equal `dst`).
    RecvReduce { peer: usize, local: Slice, dst: Slice },
    /// Local copy (skipped by executors when `src` and `dst` are the same memory).
    Copy { src: Slice, dst: Slice },
}

/// Operations that progress concurrently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    pub ops: Vec<Op>,
}

/// A rank's whole part of one collective.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    /// Elements of scratch space the schedule needs.
    pub scratch: usize,
}

/// A collective and its root where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    AllReduce,
    Broadcast { root: usize },
    Reduce { root: usize },
    AllGather,
    ReduceScatter,
    AlltoAll,
    Gather { root: usize },
    Scatter { root: usize },
}

/// Algorithm family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Ring,
    Tree,
    Direct,
}

/// Errors building a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("rank {rank} out of range for {nranks} ranks")]
    BadRank { rank: usize, nranks: usize },
    #[error("root {root} out of range for {nranks} ranks")]
    BadRoot { root: usize, nranks: usize },
    #[error("algorithm {algo:?} does not implement {coll:?}")]
    Unsupported { coll: Collective, algo: Algorithm },
    #[error("element count overflows")]
    Overflow,
}

/// Builds `rank`'s schedule for `coll` over `nranks` ranks with `count` as the API's count.
pub fn schedule(
    coll: Collective,
    algo: Algorithm,
    rank: usize,
    nranks: usize,
    count: usize,
) -> Result<Schedule, Error> {
    let _ = (rank, nranks, count);
    Err(Error::Unsupported { coll, algo })
}

/// The algorithm a communicator uses by default for `coll` with `bytes` per rank.
pub fn default_algorithm(coll: Collective, nranks: usize, bytes: usize) -> Algorithm {
    let _ = (nranks, bytes);
    match coll {
        Collective::AllReduce
        | Collective::Broadcast { .. }
        | Collective::Reduce { .. }
        | Collective::AllGather
        | Collective::ReduceScatter => Algorithm::Ring,
        Collective::AlltoAll | Collective::Gather { .. } | Collective::Scatter { .. } => {
            Algorithm::Direct
        }
    }
}
