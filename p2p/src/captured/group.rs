//! A captured group on the direct paths as each rank queues it: the handshakes, the first
//! phase reading partners' buffers in place, the second phase, and the one-kernel forms of
//! small groups.

use ccl_collectives::task::{Reduction, Task, TaskKind};
use ccl_collectives::Collective;
use ccl_cuda::cuda::source::{GRAPH_COPIES_MAX, REDUCE_N_MAX};

use super::agree::Ends;
use super::steps::{handshake, one_shot, parked, reduce_into, reduces, word_pairs};
use crate::device::{Batched, Device, FusedAllReduce, FusedCopies, Kernel};
use crate::error::Result;
use crate::layout::{Lane, Layout, DONE, HALFWAY, INPUTS};

/// A captured group as this rank queues it.
pub(crate) struct Group<'a> {
    /// Its index among the communicator's captured groups.
    pub index: usize,
    pub tasks: &'a [Task],
    /// Per task, every rank's buffers as this rank reaches them: for a collective the same
    /// collective's on each rank; for a receive from `j`, at `j` the matching send's.
    pub ends: Vec<Vec<Ends>>,
    /// One kernel reads every source of a reduction of more than two ranks.
    pub reduce_n: bool,
    /// Device memory of this rank for its [`parked`] receives (0: none).
    pub scratch: u64,
    /// All-reduces of at most this many bytes go [`one_shot`] (agreed: the smallest offered).
    pub one_shot: usize,
    /// A small group may be one kernel ([`fused`], [`fused_copies`]; its kernel is loaded).
    pub fused: bool,
    /// Every rank writes what its partners receive of it ([`push_copies`]; agreed, see
    /// [`super::agree::agreed_push`]) instead of reading what it receives.
    pub push: bool,
    /// Most bytes a group that only copies moves as [`fused_copies`] with no halfway
    /// handshake, spread over blocks above [`FUSED_MAX_BYTES`] (`CCL_GRAPH_FUSED_COPY_BYTES`).
    pub fused_copy_max: usize,
}

/// Queues group `g` of `l.rank` on [`Lane::User`] (see the module's steps).
pub(crate) fn emit(dev: &mut dyn Device, l: &Layout, g: &Group) -> Result<()> {
    if let Some(f) = fused(l, g) {
        if dev.fused_all_reduce(Lane::User, &f)? {
            return Ok(());
        }
    }
    if let Some(f) = fused_copies(l, g)? {
        if dev.fused_copies(Lane::User, &f)? {
            return Ok(());
        }
    }
    let (rank, n) = (l.rank, l.nranks);
    let partners = partners(rank, n, g.tasks);
    let mut b = Batched::new(dev);
    handshake(&mut b, l, g.index, &partners, INPUTS)?;
    let (parked, _) = parked(g.tasks, rank, n, g.one_shot);
    // A group that only copies may copy in one kernel (one graph node instead of one
    // copy-engine node per copy, which follow one another), or on copy lanes side by side;
    // the same words either way.
    let halfway = match copies_of_first_phase(l, g, &parked)? {
        Some((copies, halfway)) if g.fused && b.copies_kernel(Lane::User, &copies)? => halfway,
        Some((copies, halfway)) if copies.len() > 1 && l.direct_tx > 0 => {
            copies_side_by_side(&mut b, &copies, l.direct_tx)?;
            halfway
        }
        Some((copies, halfway)) if g.push => {
            for &(dst, src, bytes) in &copies {
                b.copy(Lane::User, dst, src, bytes)?;
            }
            halfway
        }
        _ => first_phase(&mut b, l, g, &parked)?,
    };
    second_and_last(&mut b, l, g, &partners, &parked, halfway)?;
    b.flush()
}

/// `copies` on [`Lane::User`] and up to `tx` copy lanes side by side, each copy on the lane
/// with fewest bytes so far, largest first: a captured all-gather's or all-to-all's own block
/// is a copy within the GPU (a driver kernel on SMs) that on one lane waited for the partners'
/// blocks (copy engines over NVLink) before it started, and with more than two ranks each
/// partner's block goes on a copy engine of its own.
pub(super) fn copies_side_by_side(b: &mut dyn Device, copies: &[CopyOp], tx: usize) -> Result<()> {
    let mut order: Vec<&CopyOp> = copies.iter().collect();
    order.sort_by_key(|c| std::cmp::Reverse(c.2));
    let lanes: Vec<Lane> = std::iter::once(Lane::User)
        .chain((0..tx).map(Lane::Tx))
        .take(copies.len())
        .collect();
    let mut load = vec![0usize; lanes.len()];
    b.fork(&lanes[1..])?;
    for &&(dst, src, bytes) in &order {
        // The first of the least loaded lanes.
        let k = (0..load.len()).min_by_key(|&k| load[k]).unwrap_or(0);
        load[k] += bytes;
        b.copy(lanes[k], dst, src, bytes)?;
    }
    b.join(&lanes[1..])
}

/// The first phase of group `g` (see the module's steps); whether it needs `HALFWAY`.
fn first_phase(
    b: &mut dyn Device,
    l: &Layout,
    g: &Group,
    parked: &[Option<usize>],
) -> Result<bool> {
    let (rank, n) = (l.rank, l.nranks);
    let mut halfway = false;
    for ((t, e), park) in g.tasks.iter().zip(&g.ends).zip(parked) {
        if t.count == 0 {
            continue;
        }
        let size = t.dtype.size();
        let bytes = t.count * size;
        let at = |p: u64, elems: usize| p + (elems * size) as u64;
        match t.kind {
            TaskKind::Coll(Collective::AllReduce) if one_shot(t, g.one_shot) => {
                // In place, partners read this buffer until `DONE`: the sum waits in scratch.
                let dst = park.map_or(t.recv as u64, |off| g.scratch + off as u64);
                let srcs: Vec<u64> = e.iter().map(|x| x.send).collect();
                reduce_into(b, t, dst, &srcs, rank, t.count, g.reduce_n)?;
            }
            TaskKind::Coll(Collective::AllReduce) => {
                halfway = true;
                let (lo, hi) = share(t.count, size, n, rank);
                let srcs: Vec<u64> = e.iter().map(|x| at(x.send, lo)).collect();
                reduce_into(
                    b,
                    t,
                    at(t.recv as u64, lo),
                    &srcs,
                    rank,
                    hi - lo,
                    g.reduce_n,
                )?;
            }
            TaskKind::Coll(Collective::ReduceScatter) => {
                let srcs: Vec<u64> = e.iter().map(|x| at(x.send, rank * t.count)).collect();
                reduce_into(b, t, t.recv as u64, &srcs, rank, t.count, g.reduce_n)?;
            }
            TaskKind::Coll(Collective::Reduce { root }) => {
                if rank == root {
                    let srcs: Vec<u64> = e.iter().map(|x| x.send).collect();
                    reduce_into(b, t, t.recv as u64, &srcs, rank, t.count, g.reduce_n)?;
                }
            }
            TaskKind::Coll(Collective::AllGather) => {
                for (k, x) in e.iter().enumerate() {
                    let dst = at(t.recv as u64, k * t.count);
                    if dst != x.send {
                        b.copy(Lane::User, dst, x.send, bytes)?;
                    }
                }
            }
            TaskKind::Coll(Collective::Broadcast { root }) => {
                if t.recv as u64 != e[root].send {
                    b.copy(Lane::User, t.recv as u64, e[root].send, bytes)?;
                }
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                let dst = match park {
                    Some(off) => {
                        halfway = true;
                        g.scratch + *off as u64
                    }
                    None => t.recv as u64,
                };
                for (k, x) in e.iter().enumerate() {
                    let (to, from) = (at(dst, k * t.count), at(x.send, rank * t.count));
                    if to != from {
                        b.copy(Lane::User, to, from, bytes)?;
                    }
                }
            }
            TaskKind::Coll(Collective::Gather { root }) => {
                if rank == root {
                    for (k, x) in e.iter().enumerate() {
                        let to = at(t.recv as u64, k * t.count);
                        if to != x.send {
                            b.copy(Lane::User, to, x.send, bytes)?;
                        }
                    }
                }
            }
            TaskKind::Coll(Collective::Scatter { root }) => {
                let from = at(e[root].send, rank * t.count);
                if t.recv as u64 != from {
                    b.copy(Lane::User, t.recv as u64, from, bytes)?;
                }
            }
            TaskKind::Recv { peer } => match park {
                Some(off) => {
                    halfway = true;
                    b.copy(Lane::User, g.scratch + *off as u64, e[peer].send, bytes)?;
                }
                None if t.recv as u64 != e[peer].send => {
                    b.copy(Lane::User, t.recv as u64, e[peer].send, bytes)?;
                }
                None => {}
            },
            TaskKind::Send { .. } => {}
        }
    }
    Ok(halfway)
}

/// The rest of group `g` after its first phase: `HALFWAY` and the second phase when
/// `halfway`, then `DONE` and the parked one-shot sums.
fn second_and_last(
    b: &mut dyn Device,
    l: &Layout,
    g: &Group,
    partners: &[usize],
    parked: &[Option<usize>],
    halfway: bool,
) -> Result<()> {
    let (rank, n) = (l.rank, l.nranks);
    if halfway {
        handshake(b, l, g.index, partners, HALFWAY)?;
        for ((t, e), park) in g.tasks.iter().zip(&g.ends).zip(parked) {
            if one_shot(t, g.one_shot) {
                continue;
            }
            if let Some(off) = park {
                let (dst, src, bytes) = unpark(t, *off, (rank, n), g.scratch);
                b.copy(Lane::User, dst, src, bytes)?;
                continue;
            }
            if t.count == 0 || t.kind != TaskKind::Coll(Collective::AllReduce) {
                continue;
            }
            let size = t.dtype.size();
            for (k, x) in e.iter().enumerate().filter(|&(k, _)| k != rank) {
                let (lo, hi) = share(t.count, size, n, k);
                if hi > lo {
                    let off = (lo * size) as u64;
                    b.copy(
                        Lane::User,
                        t.recv as u64 + off,
                        x.recv + off,
                        (hi - lo) * size,
                    )?;
                }
            }
        }
    }
    handshake(b, l, g.index, partners, DONE)?;
    for (t, park) in g.tasks.iter().zip(parked) {
        if let (true, Some(off)) = (one_shot(t, g.one_shot), park) {
            let (dst, src, bytes) = unpark(t, *off, (rank, n), g.scratch);
            b.copy(Lane::User, dst, src, bytes)?;
        }
    }
    Ok(())
}

/// Elements `[lo, hi)` of `count` that rank `k` of `n` reduces in an all-reduce: even shares
/// in units of 256 bytes, so that the kernels and copies start aligned.
pub(crate) fn share(count: usize, size: usize, n: usize, k: usize) -> (usize, usize) {
    let unit = (256 / size.max(1)).max(1);
    let units = count.div_ceil(unit) as u128;
    let at = |k: usize| ((units * k as u128 / n as u128) as usize * unit).min(count);
    (at(k), at(k + 1))
}

/// The ranks a group of `rank`'s exchanges words with: every other rank if it holds a
/// collective, else its sends' and receives' peers (symmetric, as the sends and receives
/// pair up).
fn partners(rank: usize, n: usize, tasks: &[Task]) -> Vec<usize> {
    let mut p = vec![false; n];
    for t in tasks.iter().filter(|t| t.count > 0) {
        match t.kind {
            TaskKind::Coll(_) => p.iter_mut().for_each(|x| *x = true),
            TaskKind::Send { peer } | TaskKind::Recv { peer } => p[peer] = true,
        }
    }
    (0..n).filter(|&j| p[j] && j != rank).collect()
}

/// The copy that moves `t`'s receive, [`parked`] at `off` in `scratch`, into place: its whole
/// receive buffer.
fn unpark(t: &Task, off: usize, (rank, n): (usize, usize), scratch: u64) -> (u64, u64, usize) {
    let elems = ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count).map_or(0, |c| c.1);
    (t.recv as u64, scratch + off as u64, elems * t.dtype.size())
}

/// Most bytes a one-kernel group ([`fused`], [`fused_copies`]) reduces or copies: one block
/// does all of it.
const FUSED_MAX_BYTES: usize = 64 << 10;

/// Group `g` of `l.rank` as one kernel that does its handshakes itself, if it is a single
/// one-shot all-reduce of a plain reduction that one block takes (and at most
/// [`REDUCE_N_MAX`] ranks); the same words and the same order of waits and writes as the
/// parts [`emit`] queues otherwise, so a rank queuing parts meets a rank running the kernel.
fn fused(l: &Layout, g: &Group) -> Option<FusedAllReduce> {
    let ([t], [e]) = (g.tasks, &g.ends[..]) else {
        return None;
    };
    let (rank, n) = (l.rank, l.nranks);
    let bytes = t.count.checked_mul(t.dtype.size())?;
    let (true, Reduction::Plain(op)) = (fusable_reduction(t, g.one_shot), t.red) else {
        return None;
    };
    if !g.fused || bytes > FUSED_MAX_BYTES || !(2..=REDUCE_N_MAX).contains(&n) {
        return None;
    }
    // What this rank reduces: an all-reduce all of it (in place, partners read the input
    // until the end: the sum waits in registers); a reduce-scatter its own block, which no
    // partner reads; a reduce all of it at the root, nothing elsewhere (only the handshakes).
    let sends = |off: usize| -> Vec<u64> { e.iter().map(|x| x.send + off as u64).collect() };
    let (srcs, elems, inplace) = match t.kind {
        TaskKind::Coll(Collective::AllReduce) => {
            let inplace =
                t.recv < t.send.saturating_add(bytes) && t.send < t.recv.saturating_add(bytes);
            (sends(0), t.count, inplace)
        }
        TaskKind::Coll(Collective::ReduceScatter) => (sends(rank * bytes), t.count, false),
        TaskKind::Coll(Collective::Reduce { root }) if root == rank => (sends(0), t.count, false),
        _ => (sends(0), 0, false),
    };
    if inplace && elems > ccl_cuda::cuda::source::GRAPH_AR_MAX_ELEMS {
        return None;
    }
    let partners = partners(rank, n, g.tasks);
    Some(FusedAllReduce {
        dtype: t.dtype,
        op,
        dst: t.recv as u64,
        srcs,
        n: elems,
        inputs: word_pairs(l, g.index, &partners, INPUTS),
        done: word_pairs(l, g.index, &partners, DONE),
        inplace,
    })
}

/// Whether `t` may run as [`fused`]: a plain reduction that queues, as parts, one reduction
/// between the two handshakes -- a one-shot all-reduce, a reduce-scatter, a reduce.
pub(crate) fn fusable_reduction(t: &Task, one_shot_max: usize) -> bool {
    let kind = match t.kind {
        TaskKind::Coll(Collective::AllReduce) => one_shot(t, one_shot_max),
        TaskKind::Coll(Collective::ReduceScatter | Collective::Reduce { .. }) => t.count > 0,
        _ => false,
    };
    kind && matches!(t.red, Reduction::Plain(_))
}

/// Group `g` as one kernel that does its handshakes and copies itself, if it only copies (no
/// reduction; receives [`parked`] in scratch memory move into place after a `HALFWAY`
/// handshake, as in the parts), at most [`FUSED_MAX_BYTES`] (one block), or without a halfway
/// handshake at most `g.fused_copy_max` (spread over blocks), in at most [`GRAPH_COPIES_MAX`]
/// copies, with at most [`REDUCE_N_MAX`] partners; the same words in the same order as the
/// parts, as [`fused`].
fn fused_copies(l: &Layout, g: &Group) -> Result<Option<FusedCopies>> {
    let (rank, n) = (l.rank, l.nranks);
    let partners = partners(rank, n, g.tasks);
    let (parked, _) = parked(g.tasks, rank, n, g.one_shot);
    if !g.fused
        || partners.is_empty()
        || partners.len() > REDUCE_N_MAX
        || g.tasks.iter().any(|t| reduces(t.kind) && t.count > 0)
    {
        return Ok(None);
    }
    let Some((copies, halfway)) = copies_of_first_phase(l, g, &parked)? else {
        return Ok(None);
    };
    // The second phase of a group without reductions: its parked receives, into place.
    let second: Vec<(u64, u64, usize)> = g
        .tasks
        .iter()
        .zip(&parked)
        .filter_map(|(t, park)| park.map(|off| unpark(t, off, (rank, n), g.scratch)))
        .collect();
    let total: usize = copies.iter().chain(&second).map(|c| c.2).sum();
    let spread = !halfway && total > FUSED_MAX_BYTES;
    let most = if spread {
        g.fused_copy_max
    } else {
        FUSED_MAX_BYTES
    };
    if total > most || copies.len() + second.len() > GRAPH_COPIES_MAX {
        return Ok(None);
    }
    // This rank's own words of the group (no partner writes them: a rank is not its own
    // partner) are where its blocks meet.
    let own = |kind| l.captured_word(rank, g.index, kind, rank);
    Ok(Some(FusedCopies {
        copies,
        second,
        inputs: word_pairs(l, g.index, &partners, INPUTS),
        halfway: if halfway {
            word_pairs(l, g.index, &partners, HALFWAY)
        } else {
            Vec::new()
        },
        done: word_pairs(l, g.index, &partners, DONE),
        spread: spread.then(|| (own(INPUTS), own(DONE))),
    }))
}

/// A copy as the one-kernel forms take it: (dst, src, bytes).
type CopyOp = (u64, u64, usize);

/// The first phase of group `g` recorded, if it only copies: its copies, and whether it
/// needs `HALFWAY`.
fn copies_of_first_phase(
    l: &Layout,
    g: &Group,
    parked: &[Option<usize>],
) -> Result<Option<(Vec<CopyOp>, bool)>> {
    if g.tasks.iter().any(|t| reduces(t.kind) && t.count > 0) {
        return Ok(None);
    }
    if g.push {
        return Ok(Some((push_copies(l, g), false)));
    }
    let mut rec = CopyRecorder::default();
    let halfway = first_phase(&mut rec, l, g, parked)?;
    Ok((!rec.other).then_some((rec.copies, halfway)))
}

/// The copies of a group that pushes: each of this rank's inputs into the receive buffer of
/// every rank it lands at (its own included, where that is not the input itself). The same
/// handshakes as pulling: `INPUTS` says a rank's inputs are ready and its receive buffers free
/// (its stream reached the group), `DONE` that a rank's writes into its partners are done.
fn push_copies(l: &Layout, g: &Group) -> Vec<CopyOp> {
    let rank = l.rank;
    let mut out = Vec::new();
    for (t, e) in g.tasks.iter().zip(&g.ends).filter(|(t, _)| t.count > 0) {
        let bytes = t.count * t.dtype.size();
        let at = |p: u64, blocks: usize| p + (blocks * bytes) as u64;
        let send = e[rank].send;
        let mut put = |dst: u64, src: u64| {
            if dst != src {
                out.push((dst, src, bytes));
            }
        };
        match t.kind {
            TaskKind::Coll(Collective::AllGather) => {
                e.iter().for_each(|x| put(at(x.recv, rank), send));
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                for (k, x) in e.iter().enumerate() {
                    put(at(x.recv, rank), at(send, k));
                }
            }
            TaskKind::Coll(Collective::Broadcast { root }) if rank == root => {
                e.iter().for_each(|x| put(x.recv, send));
            }
            TaskKind::Coll(Collective::Scatter { root }) if rank == root => {
                for (k, x) in e.iter().enumerate() {
                    put(x.recv, at(send, k));
                }
            }
            TaskKind::Coll(Collective::Gather { root }) => put(at(e[root].recv, rank), send),
            TaskKind::Send { peer } if peer != rank => put(e[peer].recv, send),
            // A receive from this rank itself reads the matching send, within the GPU.
            TaskKind::Recv { peer } if peer == rank => put(t.recv as u64, send),
            _ => {}
        }
    }
    out
}

/// Records a first phase's copies; anything else it would queue marks it `other`.
#[derive(Default)]
struct CopyRecorder {
    copies: Vec<(u64, u64, usize)>,
    other: bool,
}

impl Device for CopyRecorder {
    fn wait(&mut self, _: Lane, _: u64, _: u32) -> Result<()> {
        self.other = true;
        Ok(())
    }
    fn write(&mut self, _: Lane, _: u64, _: u32) -> Result<()> {
        self.other = true;
        Ok(())
    }
    fn copy(&mut self, _: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.copies.push((dst, src, bytes));
        Ok(())
    }
    fn kernel(&mut self, _: Lane, _: Kernel) -> Result<()> {
        self.other = true;
        Ok(())
    }
    fn fork(&mut self, _: &[Lane]) -> Result<()> {
        self.other = true;
        Ok(())
    }
    fn join(&mut self, _: &[Lane]) -> Result<()> {
        self.other = true;
        Ok(())
    }
}
