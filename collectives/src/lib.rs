//! Collective algorithms as pure schedules: for every rank, a list of steps made of
//! copy / send / receive / receive-and-reduce operations on element ranges of the
//! caller's buffers. No IO happens here; the communicator executes the schedules.
//!
//! # Execution semantics (the contract between this crate and every executor)
//!
//! * A [`Schedule`] is a list of [`Step`]s executed in order. The operations inside one step
//!   progress *concurrently*; a step ends when all its operations have ended.
//! * Operations in one step have no data hazard between them, except three overlaps that
//!   executors order by operation order inside the step: a receive that overwrites what an
//!   earlier send reads (the send's data is taken first: it copies its frames as it queues
//!   them, and the receive takes a frame only once those bytes are queued), a send of what an
//!   earlier receive writes (it forwards each frame once landed), and a receive after another
//!   one from the same peer (frames from one peer land in order). [`mod@reference`] models these
//!   and rejects every other overlap.
//! * Between one ordered pair of ranks, messages are FIFO: the k-th `Send` from rank a to rank
//!   b (counting through the whole schedule, in step order and, inside a step, in operation
//!   order) is matched by the k-th `Recv`/`RecvReduce`/`RecvFold` on b from a, with the same
//!   `count`.
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
//!
//! # Guarantees of the schedules built here (beyond the contract)
//!
//! * No operation has a zero `count`, and no step is empty.
//! * Nothing writes to [`BufId::Send`]: the caller's input is never modified (in-place calls
//!   only see writes through the aliasing `Recv` slices).
//! * Every rank's schedule is a pure function of `(coll, algo, rank, nranks, count, pipeline)`
//!   (and of the ring `order` with [`schedule_ordered`]), so all ranks agree on message sizes
//!   and order without talking.
//! * With a ring order (see [`schedule_ordered`]), ring schedules only talk to the two ring
//!   neighbours; the order never changes where data lands, only who talks to whom.
//! * Deadlock freedom under rendezvous: each schedule is the projection of one global timetable
//!   in which both ends of every message sit in the same global step (empty steps dropped), and
//!   operations on one ordered pair appear in the same relative order at both ends.
//!
//! [`reference`](mod@reference) holds a reference reducer and an all-ranks simulator that checks all of the
//! above; the property tests run every schedule through it.

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
    RecvReduce {
        peer: usize,
        local: Slice,
        dst: Slice,
    },
    /// Receive from `peer` and store `local (op) incoming` into `dst`: [`Op::RecvReduce`] with
    /// this rank's operand first, for folds in rank order that every rank computes alike
    /// ([`allreduce_exchange`]).
    RecvFold {
        peer: usize,
        local: Slice,
        dst: Slice,
    },
    /// Local copy (skipped by executors when `src` and `dst` are the same memory).
    Copy { src: Slice, dst: Slice },
    /// Local reduction: `dst = src (op) local`, with `src` in the place a `RecvReduce` gives the
    /// incoming data. `dst` may be exactly `src` or `local` (elementwise), nothing else of them.
    Reduce {
        src: Slice,
        local: Slice,
        dst: Slice,
    },
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
    /// The ring order is not a permutation of `0..nranks`: `order[index] == value` is out of
    /// range or repeats an earlier entry.
    #[error(
        "ring order is not a permutation of 0..{nranks}: entry {index} is {value}, which is \
         out of range or repeated"
    )]
    BadOrder {
        nranks: usize,
        index: usize,
        value: usize,
    },
}

mod cost;
mod direct;
pub mod dtype;
pub mod fold;
pub mod hierarchy;
pub mod minifloat;
pub mod pieces;
mod plan;
pub mod reference;
pub mod relay;
mod ring;
pub mod task;
mod tree;

pub use cost::{estimate_us, CostModel};
pub use dtype::{DataType, ReduceKind};
pub use task::{Reduction, Scalar, Task, TaskKind};
pub use tree::{btree_children, btree_parent};

/// How Broadcast / Reduce / tree AllReduce split their data into pieces that travel through a
/// chain or tree one behind the other. Every rank of one collective must use the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pipeline {
    /// No piece is smaller than this many elements (unless the whole range is smaller).
    pub min_piece: usize,
    /// At most this many pieces per pipelined range.
    pub max_pieces: usize,
}

impl Pipeline {
    /// Default: pieces of at least 4096 elements, at most 16 of them. Small pieces only add
    /// per-step latency; more than 16 pieces gains little once the pipeline is full.
    pub const DEFAULT: Pipeline = Pipeline {
        min_piece: 4096,
        max_pieces: 16,
    };

    /// Number of pieces a range of `count` elements is cut into (0 for an empty range).
    pub fn pieces(&self, count: usize) -> usize {
        if count == 0 {
            return 0;
        }
        (count / self.min_piece.max(1)).clamp(1, self.max_pieces.max(1))
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Element range `(offset, len)` of part `i` when `count` elements are split into `parts`
/// nearly equal parts: the first `count % parts` parts get one element more, so nothing is lost
/// when `count` does not divide (parts may be empty when `count < parts`).
pub fn split(count: usize, parts: usize, i: usize) -> (usize, usize) {
    if parts == 0 {
        return (0, 0);
    }
    let base = count / parts;
    let extra = count % parts;
    let len = base + usize::from(i < extra);
    let offset = base * i + i.min(extra);
    (offset, len)
}

/// Sizes in elements of a rank's send and receive buffers as the execution contract defines
/// them (0 where a buffer is only meaningful at the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSizes {
    pub send: usize,
    pub recv: usize,
}

/// Buffer sizes of `rank` for `coll`; validates rank and root and checks for overflow.
pub fn buffer_sizes(
    coll: Collective,
    rank: usize,
    nranks: usize,
    count: usize,
) -> Result<BufferSizes, Error> {
    if rank >= nranks {
        return Err(Error::BadRank { rank, nranks });
    }
    if let Collective::Broadcast { root }
    | Collective::Reduce { root }
    | Collective::Gather { root }
    | Collective::Scatter { root } = coll
    {
        if root >= nranks {
            return Err(Error::BadRoot { root, nranks });
        }
    }
    let all = nranks.checked_mul(count).ok_or(Error::Overflow)?;
    let at_root = |root: usize, v: usize| if rank == root { v } else { 0 };
    let (send, recv) = match coll {
        Collective::AllReduce => (count, count),
        Collective::Broadcast { root } => (at_root(root, count), count),
        Collective::Reduce { root } => (count, at_root(root, count)),
        Collective::AllGather => (count, all),
        Collective::ReduceScatter => (all, count),
        Collective::AlltoAll => (all, all),
        Collective::Gather { root } => (count, at_root(root, all)),
        Collective::Scatter { root } => (at_root(root, all), count),
    };
    Ok(BufferSizes { send, recv })
}

/// Whether `algo` implements `coll`.
pub fn supports(coll: Collective, algo: Algorithm) -> bool {
    use Collective as C;
    match algo {
        Algorithm::Ring => matches!(
            coll,
            C::AllReduce | C::Broadcast { .. } | C::Reduce { .. } | C::AllGather | C::ReduceScatter
        ),
        Algorithm::Tree => matches!(coll, C::AllReduce | C::Broadcast { .. } | C::Reduce { .. }),
        Algorithm::Direct => true,
    }
}

/// Builds `rank`'s schedule for `coll` over `nranks` ranks with `count` as the API's count,
/// pipelining with [`Pipeline::DEFAULT`].
pub fn schedule(
    coll: Collective,
    algo: Algorithm,
    rank: usize,
    nranks: usize,
    count: usize,
) -> Result<Schedule, Error> {
    schedule_with(coll, algo, rank, nranks, count, Pipeline::DEFAULT)
}

/// [`schedule`] with an explicit pipelining choice (identical on every rank). Ring and tree
/// schedules follow the identity ring order `0, 1, ..., nranks-1`; this equals
/// [`schedule_ordered`] with that order.
pub fn schedule_with(
    coll: Collective,
    algo: Algorithm,
    rank: usize,
    nranks: usize,
    count: usize,
    pipeline: Pipeline,
) -> Result<Schedule, Error> {
    build(coll, algo, rank, nranks, None, count, pipeline, false)
}

/// [`schedule_with`] over a given ring order: `order[p]` is the rank at ring position `p`, and
/// `order.len()` is the number of ranks. Every rank must pass the same order.
///
/// * Ring AllReduce / AllGather / ReduceScatter: a rank sends only to the rank after it in
///   `order` (cyclically) and receives only from the one before it.
/// * Ring Broadcast / Reduce: a pipelined chain that starts (Broadcast) or ends (Reduce) at
///   `root` and walks the ring order from there, so its links are ring links too.
/// * Tree: the double binary tree (and the single tree of Broadcast / Reduce, rooted at `root`)
///   is built over ring positions instead of ranks, so tree neighbours are close in the ring.
/// * Direct algorithms do not depend on the order.
///
/// Data placement never depends on the order (AllGather still puts rank r's block at
/// `r * count`, ReduceScatter still leaves block r on rank r, and so on).
///
/// Errors: [`Error::BadOrder`] when `order` is not a permutation of `0..order.len()`, and the
/// errors of [`schedule_with`] (rank or root out of range, unsupported pair, overflow).
pub fn schedule_ordered(
    coll: Collective,
    algo: Algorithm,
    rank: usize,
    order: &[usize],
    count: usize,
    pipeline: Pipeline,
) -> Result<Schedule, Error> {
    let nranks = order.len();
    let mut seen = vec![false; nranks];
    for (index, &value) in order.iter().enumerate() {
        match seen.get_mut(value) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(Error::BadOrder {
                    nranks,
                    index,
                    value,
                })
            }
        }
    }
    build(
        coll,
        algo,
        rank,
        nranks,
        Some(order),
        count,
        pipeline,
        false,
    )
}

/// Shared body of [`schedule_with`], [`schedule_ordered`] and [`alltoall_out_of_place`];
/// `order` (when given) is a validated permutation of `0..nranks`, `None` meaning the
/// identity; `disjoint`: the caller's send and receive buffers do not overlap.
#[allow(clippy::too_many_arguments)]
fn build(
    coll: Collective,
    algo: Algorithm,
    rank: usize,
    nranks: usize,
    order: Option<&[usize]>,
    count: usize,
    pipeline: Pipeline,
    disjoint: bool,
) -> Result<Schedule, Error> {
    let sizes = buffer_sizes(coll, rank, nranks, count)?;
    if !supports(coll, algo) {
        return Err(Error::Unsupported { coll, algo });
    }
    if count == 0 {
        return Ok(Schedule::default());
    }
    if nranks == 1 {
        // Every collective degenerates to "my input is my output".
        let len = sizes.send.min(sizes.recv);
        let mut t = plan::Table::new();
        t.push(0, plan::copy(plan::send(0, len), plan::recv(0, len)));
        return Ok(t.finish(0));
    }
    let ctx = Ctx {
        rank,
        n: nranks,
        count,
        pipeline,
        order,
        pos: position(order, rank),
        disjoint,
    };
    Ok(match (algo, coll) {
        (Algorithm::Ring, Collective::AllReduce) => ring::all_reduce(&ctx),
        (Algorithm::Ring, Collective::AllGather) => ring::all_gather(&ctx),
        (Algorithm::Ring, Collective::ReduceScatter) => ring::reduce_scatter(&ctx),
        (Algorithm::Ring, Collective::Broadcast { root }) => ring::broadcast(&ctx, root),
        (Algorithm::Ring, Collective::Reduce { root }) => ring::reduce(&ctx, root),
        (Algorithm::Tree, Collective::AllReduce) => tree::all_reduce(&ctx),
        (Algorithm::Tree, Collective::Broadcast { root }) => tree::broadcast(&ctx, root),
        (Algorithm::Tree, Collective::Reduce { root }) => tree::reduce(&ctx, root),
        (Algorithm::Direct, Collective::AllReduce) => direct::all_reduce(&ctx),
        (Algorithm::Direct, Collective::AllGather) => direct::all_gather(&ctx),
        (Algorithm::Direct, Collective::ReduceScatter) => direct::reduce_scatter(&ctx),
        (Algorithm::Direct, Collective::Broadcast { root }) => direct::broadcast(&ctx, root),
        (Algorithm::Direct, Collective::Reduce { root }) => direct::reduce(&ctx, root),
        (Algorithm::Direct, Collective::AlltoAll) => direct::all_to_all(&ctx),
        (Algorithm::Direct, Collective::Gather { root }) => direct::gather(&ctx, root),
        (Algorithm::Direct, Collective::Scatter { root }) => direct::scatter(&ctx, root),
        (algo, coll) => return Err(Error::Unsupported { coll, algo }),
    })
}

/// [`Collective::AlltoAll`] for send and receive buffers that do not overlap: every block
/// goes straight to its place. The general schedule (any [`Algorithm`] that implements
/// all-to-all) receives into scratch and copies into place after all transfers, because in
/// place a receive's target may still hold a block to send.
pub fn alltoall_out_of_place(rank: usize, nranks: usize, count: usize) -> Result<Schedule, Error> {
    let (coll, algo) = (Collective::AlltoAll, Algorithm::Direct);
    build(
        coll,
        algo,
        rank,
        nranks,
        None,
        count,
        Pipeline::default(),
        true,
    )
}

/// [`Collective::AllReduce`] in one exchange: every rank sends its whole input to every other
/// and receives theirs into scratch, then folds the `nranks` inputs locally **in rank order**
/// (`((x0 op x1) op x2) ...`, the partial result always the first operand), so every rank
/// computes the same operations on the same operands and ends with the same bits, for every
/// reduction (float sums and max/min included; pre-scaled operands are scaled by their owner
/// before they travel). A ring takes `2(n-1)` exchanges and a tree `2 log n`; for small
/// messages each exchange's round trip is what costs, while this one moves `n-1` times the
/// input each way. The result is written only by the last fold, so in place is safe. Scratch:
/// `nranks * count` (slot `p` holds rank p's input; this rank's own slot the partial result).
pub fn allreduce_one_shot(rank: usize, nranks: usize, count: usize) -> Result<Schedule, Error> {
    one_shot_fold(rank, nranks, count, |_| 0)
}

/// [`Collective::AllReduce`] of two ranks in one exchange, for messages of any size: each rank
/// sends its whole input to the other and folds what arrives into its output frame by frame,
/// `x0 (op) x1` on both ranks (rank 0's operand first: [`Op::RecvFold`] there,
/// [`Op::RecvReduce`] on rank 1), so both hold the same bits. Each rank sends and receives
/// `count` elements, as the ring does, but in one step instead of two, so nothing waits for
/// the first half to drain before the second begins; it reduces `count` elements where the
/// ring reduces half. In place the send reads what the fold overwrites: executors send every
/// frame before the fold writes its range (a receive waits for an earlier send of its step
/// that reads what it would write), which the reference simulator models by taking a send's
/// data when its step begins. Pre-scaled reductions (a scalar applied by the receiving rank)
/// would round differently on the two ranks: callers keep those on the ring.
pub fn allreduce_exchange(rank: usize, nranks: usize, count: usize) -> Result<Schedule, Error> {
    if nranks != 2 {
        return Err(Error::Unsupported {
            algo: Algorithm::Direct,
            coll: Collective::AllReduce,
        });
    }
    if rank >= nranks {
        return Err(Error::BadRank { rank, nranks });
    }
    let peer = 1 - rank;
    let mut t = plan::Table::new();
    t.push(0, plan::op_send(peer, plan::send(0, count)));
    let (local, dst) = (plan::send(0, count), plan::recv(0, count));
    t.push(
        0,
        if rank == 0 {
            plan::op_fold(peer, local, dst)
        } else {
            plan::op_reduce(peer, local, dst)
        },
    );
    Ok(t.finish(0))
}

/// A ring schedule's steps as one step: every send to the next rank and every receive from
/// the previous one, in their order, so no step waits for the one before it to drain. Each
/// step of a ring sends what the previous step received (or reduced), and later receives
/// overwrite chunks earlier sends read; in one step those become orderings inside it that
/// executors keep (a send forwards each frame once the receive that writes it has landed; a
/// receive overwrites only what the earlier sends have taken; receives from one peer land in
/// order), which the reference simulator models. Local copies must touch nothing else of the
/// step (an all-gather's own block: the simulator's hazard check says so for each schedule
/// this is used on). Returned unchanged unless every transfer is a send to one peer or a
/// receive from one peer.
pub fn one_step(s: Schedule) -> Schedule {
    let mut to = None;
    let mut from = None;
    let ring = s.steps.len() > 1
        && s.steps.iter().flat_map(|st| &st.ops).all(|op| {
            let (slot, peer) = match *op {
                Op::Send { peer, .. } => (&mut to, peer),
                Op::Recv { peer, .. } | Op::RecvReduce { peer, .. } | Op::RecvFold { peer, .. } => {
                    (&mut from, peer)
                }
                Op::Copy { .. } | Op::Reduce { .. } => return true,
            };
            *slot.get_or_insert(peer) == peer
        });
    if !ring {
        return s;
    }
    Schedule {
        steps: vec![Step {
            ops: s.steps.into_iter().flat_map(|st| st.ops).collect(),
        }],
        scratch: s.scratch,
    }
}

/// [`Collective::ReduceScatter`] in one exchange: every rank sends block `p` of its input to
/// rank `p` and folds the blocks it gets for its own in rank order, as
/// [`allreduce_one_shot`] does (same bits as an all-reduce of the same inputs would give).
pub fn reduce_scatter_one_shot(
    rank: usize,
    nranks: usize,
    count: usize,
) -> Result<Schedule, Error> {
    nranks.checked_mul(count).ok_or(Error::Overflow)?;
    one_shot_fold(rank, nranks, count, |p| p * count)
}

/// The one-exchange reductions: rank `p`'s contribution to rank `q` is the block at element
/// `block(q)` of `p`'s input.
fn one_shot_fold(
    rank: usize,
    nranks: usize,
    count: usize,
    block: impl Fn(usize) -> usize,
) -> Result<Schedule, Error> {
    if rank >= nranks {
        return Err(Error::BadRank { rank, nranks });
    }
    let scratch_len = nranks.checked_mul(count).ok_or(Error::Overflow)?;
    let mut t = plan::Table::new();
    // Each rank starts with the rank after it, so no rank is everyone's first peer.
    for peer in (1..nranks).map(|i| (rank + i) % nranks) {
        t.push(0, plan::op_send(peer, plan::send(block(peer), count)));
        t.push(0, plan::op_recv(peer, plan::scratch(peer * count, count)));
    }
    let own = plan::send(block(rank), count);
    let input = |k: usize| {
        if k == rank {
            own
        } else {
            plan::scratch(k * count, count)
        }
    };
    let partial = plan::scratch(rank * count, count);
    for k in 1..nranks {
        let src = if k == 1 { input(0) } else { partial };
        let dst = if k == nranks - 1 {
            plan::recv(0, count)
        } else {
            partial
        };
        t.push(k, plan::op_local_reduce(src, input(k), dst));
    }
    if nranks == 1 {
        t.push(0, plan::copy(own, plan::recv(0, count)));
    }
    Ok(t.finish(scratch_len))
}

/// Ring position of `rank` (`order` is a permutation containing it, or `None` for identity).
fn position(order: Option<&[usize]>, rank: usize) -> usize {
    order
        .and_then(|o| o.iter().position(|&r| r == rank))
        .unwrap_or(rank)
}

/// The algorithm a communicator uses by default for `coll` with `bytes` per rank: the cheapest
/// supported algorithm under [`CostModel::DEFAULT`] (see [`estimate_us`]).
pub fn default_algorithm(coll: Collective, nranks: usize, bytes: usize) -> Algorithm {
    CostModel::DEFAULT.choose(coll, nranks, bytes)
}

/// What every algorithm builder gets: who am I, how many, how much, how to pipeline, and the
/// ring order. `n >= 2` and `count >= 1` always hold here; products like `n * count` were
/// checked; `order` (when `Some`) is a permutation of `0..n` and `order[pos] == rank`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub rank: usize,
    pub n: usize,
    pub count: usize,
    pub pipeline: Pipeline,
    /// `order[p]` is the rank at ring position `p`; `None` is the identity.
    pub order: Option<&'a [usize]>,
    /// This rank's ring position.
    pub pos: usize,
    /// The send and receive buffers are known not to overlap (schedules may then land
    /// received blocks straight into place).
    pub disjoint: bool,
}

impl Ctx<'_> {
    /// Rank `k` hops after `rank` in rank numbering (negative hops via `back`); for the
    /// order-independent direct algorithms.
    pub fn fwd(&self, k: usize) -> usize {
        (self.rank + k % self.n) % self.n
    }
    pub fn back(&self, k: usize) -> usize {
        (self.rank + self.n - k % self.n) % self.n
    }

    /// Rank at ring position `p` (taken mod n).
    pub fn at(&self, p: usize) -> usize {
        let p = p % self.n;
        self.order.and_then(|o| o.get(p).copied()).unwrap_or(p)
    }
    /// Ring position of `rank`.
    pub fn pos_of(&self, rank: usize) -> usize {
        position(self.order, rank)
    }
    /// Ring position `k` hops before this rank's.
    pub fn pback(&self, k: usize) -> usize {
        (self.pos + self.n - k % self.n) % self.n
    }
    /// Rank `k` hops after this rank around the ring order.
    pub fn ring_fwd(&self, k: usize) -> usize {
        self.at(self.pos + k % self.n)
    }
    /// Rank `k` hops before this rank around the ring order.
    pub fn ring_back(&self, k: usize) -> usize {
        self.at(self.pback(k))
    }
}
