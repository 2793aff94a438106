//! Groups captured into CUDA graphs between the GPUs of one host, on the direct paths: no
//! host node and no proxy at replay, copy engines and (for the arithmetic) one reduction
//! kernel, as the eager direct paths.
//!
//! The eager paths number their flag values per operation, which a graph cannot replay. A
//! captured group has words of its own instead ([`groups`] per communicator, in every rank's
//! flag area, so peers reach them through the mappings made at setup) whose values are the
//! same at every replay: 0 at rest, 1 when set. Every rank captures the same groups in the
//! same order (NCCL's rule for captured collectives), so they meet at capture: there they agree
//! on the group's index and exchange how each reaches the others' buffers (fixed across
//! replays), and each records on its capturing stream, with `P` its partners (every other rank
//! for a collective, the peers of its sends and receives):
//!
//! 1. `INPUTS`: set own word at every partner, wait for every partner's, reset them. From here
//!    every partner's inputs are ready to read.
//! 2. The first phase, reading partners' buffers in place: a reduction kernel over every rank's
//!    slice (all-reduce: this rank's share of the elements; reduce-scatter: its block; reduce:
//!    the root, all of it), copies of partners' inputs into own outputs (all-gather,
//!    all-to-all, gather, scatter, broadcast, receives).
//! 3. `HALFWAY` (groups with an all-reduce or a [`parked`] receive): as 1; then the
//!    all-reduce's second phase copies every partner's reduced share out of the partner's
//!    output, and parked receives move from scratch memory into place.
//! 4. `DONE`: as 1. Every partner has read all it needs from this rank's buffers, so the work
//!    after the graph may change them.
//!
//! Why a reset cannot swallow the next replay's write: a word is reset right after its wait,
//! before this rank sets any later word; a partner sets it again only in its next replay,
//! after it saw this rank's `DONE`, which comes later still.
//!
//! Small groups take shorter forms: an all-reduce of at most `CCL_GRAPH_ONE_SHOT_BYTES` is
//! reduced whole by every rank ([`one_shot`]: no `HALFWAY`); and a group that is one small
//! reduction ([`fused`]) or only copies ([`fused_copies`]) runs as one kernel that does the
//! handshakes itself on the same words in the same order (`CCL_GRAPH_FUSED`, a local choice:
//! one rank's kernel meets another's parts).
//!
//! Capture costs two rounds over the bootstrap network (the agreement, then whether every rank
//! could map every buffer): each rank falls back to the staged captured path exactly when
//! every other does. PreMulSum with its scalar in device memory takes the staged captured path
//! (the communicator's graph capture).

use std::sync::atomic::Ordering;

use ccl_collectives::Collective;
use ccl_cuda::cuda::source::{GRAPH_COPIES_MAX, REDUCE_N_MAX};
use ccl_cuda::cuda::{DeviceBuffer, KernelOp, Stream};
use ccl_cuda::DataType;

use crate::control::CommCtx;
use crate::cuda_device::CudaDevice;
use crate::device::{Batched, Device, FusedAllReduce, FusedCopies, Kernel};
use crate::engine::{streams_of, IpcEngine};
use crate::error::{Error, Result};
use crate::layout::{groups, Lane, Layout, DONE, HALFWAY, INPUTS, POST_WORDS};
use crate::rendezvous::{Post, Reach};
use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};

fn reduces(kind: TaskKind) -> bool {
    matches!(
        kind,
        TaskKind::Coll(
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
        )
    )
}

/// Whether this rank can capture `t` on the direct path: every operation can, but a
/// reduction whose PreMulSum scalar is in device memory, which must be read in stream order at
/// every replay (the staged path does).
pub(crate) fn supported(t: &Task) -> bool {
    !(reduces(t.kind) && matches!(t.red, Reduction::PreMulSum(Scalar::Device(_))))
}

/// One rank's buffers of one operation as this rank reaches them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ends {
    pub send: u64,
    pub recv: u64,
}

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
fn fusable_reduction(t: &Task, one_shot_max: usize) -> bool {
    let kind = match t.kind {
        TaskKind::Coll(Collective::AllReduce) => one_shot(t, one_shot_max),
        TaskKind::Coll(Collective::ReduceScatter | Collective::Reduce { .. }) => t.count > 0,
        _ => false,
    };
    kind && matches!(t.red, Reduction::Plain(_))
}

/// Whether `t` is an all-reduce small enough (at most `limit` bytes) that every rank reduces
/// all of it, reading every input whole: one kernel between two handshakes, where the two
/// phases (each rank's share, then the others' shares copied) cost a handshake and a copy more.
fn one_shot(t: &Task, limit: usize) -> bool {
    t.kind == TaskKind::Coll(Collective::AllReduce)
        && t.count > 0
        && t.count.saturating_mul(t.dtype.size()) <= limit
}

/// Elements `[lo, hi)` of `count` that rank `k` of `n` reduces in an all-reduce: even shares
/// in units of 256 bytes, so that the kernels and copies start aligned.
fn share(count: usize, size: usize, n: usize, k: usize) -> (usize, usize) {
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

/// Set own word of `kind` at every partner, wait for every partner's, reset them.
fn handshake(
    dev: &mut dyn Device,
    l: &Layout,
    index: usize,
    partners: &[usize],
    kind: usize,
) -> Result<()> {
    for &j in partners {
        dev.write(Lane::User, l.captured_word(j, index, kind, l.rank), 1)?;
    }
    for &j in partners {
        dev.wait(Lane::User, l.captured_word(l.rank, index, kind, j), 1)?;
    }
    for &j in partners {
        dev.write(Lane::User, l.captured_word(l.rank, index, kind, j), 0)?;
    }
    Ok(())
}

/// `dst = srcs[0] (op) srcs[1] ...` over `elems` elements (each input scaled first for
/// PreMulSum and float Avg; integer Avg divided once after); `dst` may be `srcs[own]`.
fn reduce_into(
    dev: &mut dyn Device,
    t: &Task,
    dst: u64,
    srcs: &[u64],
    own: usize,
    elems: usize,
    reduce_n: bool,
) -> Result<()> {
    let (dtype, op) = (t.dtype, t.red.arithmetic());
    if let Some(scalar) = ccl_cuda::host::reduce::premul_scalar(t, srcs.len()) {
        // Own input first: in place, `dst` is that input, read before anything writes it.
        dev.kernel(
            Lane::User,
            Kernel::PreMul {
                dtype,
                dst,
                src: srcs[own],
                n: elems,
                scalar,
            },
        )?;
        for (_, &src) in srcs.iter().enumerate().filter(|&(j, _)| j != own) {
            dev.kernel(
                Lane::User,
                Kernel::PreMulAdd {
                    dtype,
                    dst,
                    src,
                    acc: dst,
                    n: elems,
                    scalar,
                },
            )?;
        }
        return Ok(());
    }
    match srcs.len() {
        0 => {}
        1 => {
            if dst != srcs[0] {
                dev.copy(Lane::User, dst, srcs[0], elems * dtype.size())?;
            }
        }
        2 => dev.kernel(
            Lane::User,
            Kernel::Reduce {
                dtype,
                op,
                dst,
                a: srcs[0],
                b: srcs[1],
                n: elems,
            },
        )?,
        k if reduce_n && k <= REDUCE_N_MAX => {
            let mut s = [0u64; REDUCE_N_MAX];
            s[..k].copy_from_slice(srcs);
            dev.kernel(
                Lane::User,
                Kernel::ReduceN {
                    dtype,
                    op,
                    dst,
                    srcs: s,
                    k,
                    n: elems,
                },
            )?
        }
        _ => {
            // A chain of two-input kernels, own input first: in place, `dst` is that input,
            // read by the first kernel before anything writes it.
            let mut acc = srcs[own];
            for (_, &s) in srcs.iter().enumerate().filter(|&(j, _)| j != own) {
                dev.kernel(
                    Lane::User,
                    Kernel::Reduce {
                        dtype,
                        op,
                        dst,
                        a: acc,
                        b: s,
                        n: elems,
                    },
                )?;
                acc = dst;
            }
        }
    }
    if matches!(t.red, Reduction::Avg) && !dtype.is_float() && elems > 0 {
        dev.kernel(
            Lane::User,
            Kernel::DivInt {
                dtype,
                dst,
                n: elems,
                divisor: srcs.len() as u64,
            },
        )?;
    }
    Ok(())
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
    let halfway = first_phase(&mut b, l, g, &parked)?;
    second_and_last(&mut b, l, g, &partners, &parked, halfway)?;
    b.flush()
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

/// The copy that moves `t`'s receive, [`parked`] at `off` in `scratch`, into place: its whole
/// receive buffer.
fn unpark(t: &Task, off: usize, (rank, n): (usize, usize), scratch: u64) -> (u64, u64, usize) {
    let elems = ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count).map_or(0, |c| c.1);
    (t.recv as u64, scratch + off as u64, elems * t.dtype.size())
}

/// Group `g` as one kernel that does its handshakes and copies itself, if it only copies (no
/// reduction; receives [`parked`] in scratch memory move into place after a `HALFWAY`
/// handshake, as in the parts), at most [`FUSED_MAX_BYTES`] in at most [`GRAPH_COPIES_MAX`]
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
    let mut rec = CopyRecorder::default();
    let halfway = first_phase(&mut rec, l, g, &parked)?;
    if rec.other {
        return Ok(None);
    }
    // The second phase of a group without reductions: its parked receives, into place.
    let second: Vec<(u64, u64, usize)> = g
        .tasks
        .iter()
        .zip(&parked)
        .filter_map(|(t, park)| park.map(|off| unpark(t, off, (rank, n), g.scratch)))
        .collect();
    let total: usize = rec.copies.iter().chain(&second).map(|c| c.2).sum();
    if total > FUSED_MAX_BYTES || rec.copies.len() + second.len() > GRAPH_COPIES_MAX {
        return Ok(None);
    }
    Ok(Some(FusedCopies {
        copies: rec.copies,
        second,
        inputs: word_pairs(l, g.index, &partners, INPUTS),
        halfway: if halfway {
            word_pairs(l, g.index, &partners, HALFWAY)
        } else {
            Vec::new()
        },
        done: word_pairs(l, g.index, &partners, DONE),
    }))
}

/// Per partner: (this rank's word of `kind` there, the partner's word here).
fn word_pairs(l: &Layout, index: usize, partners: &[usize], kind: usize) -> Vec<(u64, u64)> {
    partners
        .iter()
        .map(|&j| {
            (
                l.captured_word(j, index, kind, l.rank),
                l.captured_word(l.rank, index, kind, j),
            )
        })
        .collect()
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

/// The kernels [`emit`] may launch for `tasks`, to load before capturing.
fn kernels_needed(tasks: &[Task], n: usize, reduce_n: bool) -> Vec<(DataType, KernelOp)> {
    let mut v = Vec::new();
    for t in tasks.iter().filter(|t| reduces(t.kind) && t.count > 0) {
        if ccl_cuda::host::reduce::premul_scalar(t, n).is_some() {
            for k in [KernelOp::PreMul, KernelOp::PreMulAdd] {
                if !v.contains(&(t.dtype, k)) {
                    v.push((t.dtype, k));
                }
            }
            continue;
        }
        let op = t.red.arithmetic();
        let k = if n > 2 && reduce_n && n <= REDUCE_N_MAX {
            KernelOp::ReduceN(op.into(), n as u8)
        } else {
            KernelOp::reduce(op)
        };
        if !v.contains(&(t.dtype, k)) {
            v.push((t.dtype, k));
        }
        if matches!(t.red, Reduction::Avg) && !v.contains(&(t.dtype, KernelOp::DivInt)) {
            v.push((t.dtype, KernelOp::DivInt));
        }
    }
    v
}

/// What one rank says at capture: the group index it would take, whether it can capture the
/// group directly, and per task its signature and how peers reach its buffers.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Offer {
    index: u64,
    pub able: bool,
    /// This rank's [`one_shot`] limit (`CCL_GRAPH_ONE_SHOT_BYTES`).
    pub one_shot: u64,
    /// This rank's process and GPU (a hash of its PCI bus id): ranks of other processes on
    /// the same GPU time-slice it, and a kernel spinning for one of them holds its slice.
    pub pid: u64,
    pub gpu: u64,
    tasks: Vec<OfferedTask>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct OfferedTask {
    kind: u64,
    /// Root or peer (0 otherwise).
    other: u64,
    count: u64,
    dtype: u64,
    red: u64,
    send: Option<Post>,
    recv: Option<Post>,
}

const MAGIC: u64 = 0x6363_6c67_7261_7068; // "cclgraph"
const TASK_WORDS: usize = 7 + 2 * POST_WORDS;

impl Offer {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = vec![
            MAGIC,
            self.index,
            self.able as u64,
            self.one_shot,
            self.pid,
            self.gpu,
            self.tasks.len() as u64,
        ];
        for t in &self.tasks {
            w.extend([t.kind, t.other, t.count, t.dtype, t.red]);
            for p in [t.send, t.recv] {
                w.push(p.is_some() as u64);
                w.extend(p.map_or([0; POST_WORDS], Post::to_words));
            }
        }
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    pub fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() % 8 != 0 {
            return None;
        }
        let w: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let (&[magic, index, able, one_shot, pid, gpu, ntasks], rest) =
            w.split_first_chunk::<7>()?;
        if magic != MAGIC || rest.len() != (ntasks as usize).checked_mul(TASK_WORDS)? {
            return None;
        }
        let post = |w: &[u64]| -> Option<Option<Post>> {
            let words: &[u64; POST_WORDS] = w.get(1..1 + POST_WORDS)?.try_into().ok()?;
            Some((w[0] != 0).then(|| Post::from_words(words)))
        };
        let tasks = rest
            .chunks_exact(TASK_WORDS)
            .map(|c| {
                Some(OfferedTask {
                    kind: c[0],
                    other: c[1],
                    count: c[2],
                    dtype: c[3],
                    red: c[4],
                    send: post(&c[5..])?,
                    recv: post(&c[6 + POST_WORDS..])?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Offer {
            index,
            able: able != 0,
            one_shot,
            pid,
            gpu,
            tasks,
        })
    }
}

/// Kinds of [`OfferedTask::kind`] beyond the collectives' codes (which sends and receives
/// share).
const SEND: u64 = 100;
const RECV: u64 = 101;

/// `t` as [`OfferedTask`]'s first five words: a send and a receive pair up by their bytes.
fn signature(t: &Task) -> [u64; 5] {
    match t.kind {
        TaskKind::Send { peer } => [SEND, peer as u64, (t.count * t.dtype.size()) as u64, 0, 0],
        TaskKind::Recv { peer } => [RECV, peer as u64, (t.count * t.dtype.size()) as u64, 0, 0],
        k => [
            u64::from(k.code()),
            k.root().unwrap_or(0) as u64,
            t.count as u64,
            t.dtype as u64,
            if reduces(k) {
                u64::from(t.red.code())
            } else {
                0
            },
        ],
    }
}

/// Which of `rank`'s buffers of `t` its partners read: the input of everything but a
/// receive (a broadcast's at its root only), an all-reduce's output too (its second phase).
fn read_by_partners(t: &Task, rank: usize) -> (bool, bool) {
    if t.count == 0 {
        return (false, false);
    }
    match t.kind {
        TaskKind::Recv { .. } => (false, false),
        TaskKind::Coll(Collective::AllReduce) => (true, true),
        TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
            (rank == root, false)
        }
        _ => (true, false),
    }
}

/// Which of rank `k`'s buffers this rank's `t` reads (`rank` != `k`).
fn reads_of(t: &Task, rank: usize, k: usize) -> (bool, bool) {
    if t.count == 0 {
        return (false, false);
    }
    match t.kind {
        TaskKind::Coll(Collective::AllReduce) => (true, true),
        TaskKind::Coll(Collective::Reduce { root } | Collective::Gather { root }) => {
            (rank == root, false)
        }
        TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
            (k == root, false)
        }
        TaskKind::Send { .. } => (false, false),
        _ => (true, false),
    }
}

/// Checks that the ranks captured matching groups; for each of `rank`'s tasks, the index of
/// its counterpart at every rank: the same collective, for a receive from `j` the matching
/// send at `j` (`usize::MAX` elsewhere and for sends).
pub(super) fn matching(
    offers: &[Offer],
    rank: usize,
) -> std::result::Result<Vec<Vec<usize>>, String> {
    let n = offers.len();
    let colls = |o: &Offer| -> Vec<usize> {
        (0..o.tasks.len())
            .filter(|&i| o.tasks[i].kind < SEND)
            .collect()
    };
    let sig = |t: &OfferedTask| (t.kind, t.other, t.count, t.dtype, t.red);
    let all: Vec<Vec<usize>> = offers.iter().map(colls).collect();
    for (r, (o, c)) in offers.iter().zip(&all).enumerate() {
        let differs = c.len() != all[0].len()
            || c.iter()
                .zip(&all[0])
                .any(|(&a, &b)| sig(&o.tasks[a]) != sig(&offers[0].tasks[b]));
        if differs {
            return Err(format!(
                "rank {r} captured other collectives than rank 0 in the same group"
            ));
        }
    }
    let p2p = |o: &Offer, kind: u64, other: usize| -> Vec<usize> {
        (0..o.tasks.len())
            .filter(|&i| o.tasks[i].kind == kind && o.tasks[i].other == other as u64)
            .collect()
    };
    for (i, oi) in offers.iter().enumerate() {
        for (j, oj) in offers.iter().enumerate() {
            let (sends, recvs) = (p2p(oi, SEND, j), p2p(oj, RECV, i));
            if sends.len() != recvs.len() {
                return Err(format!(
                    "rank {i} captured {} sends to rank {j}, which captured {} receives from it",
                    sends.len(),
                    recvs.len()
                ));
            }
            for (&s, &r) in sends.iter().zip(&recvs) {
                if oi.tasks[s].count != oj.tasks[r].count {
                    return Err(format!(
                        "rank {i} captured a send of {} bytes to rank {j}, which captured a \
                         receive of {} bytes from it",
                        oi.tasks[s].count, oj.tasks[r].count
                    ));
                }
            }
        }
    }
    let mine = &offers[rank];
    let mut recvs_seen = vec![0usize; n];
    let mut coll_k = 0;
    let mut out = Vec::with_capacity(mine.tasks.len());
    for t in &mine.tasks {
        let mut row = vec![usize::MAX; n];
        if t.kind < SEND {
            for (k, c) in all.iter().enumerate() {
                row[k] = c[coll_k];
            }
            coll_k += 1;
        } else if t.kind == RECV {
            let j = t.other as usize;
            let k = recvs_seen[j];
            recvs_seen[j] += 1;
            row[j] = p2p(&offers[j], SEND, rank)[k];
        }
        out.push(row);
    }
    Ok(out)
}

/// Receives that land on a buffer partners read in the first phase -- one of the group's send
/// buffers (an in-place ring exchange), an in-place all-to-all's own send buffer -- land in
/// scratch memory of this rank instead and are copied into place after `HALFWAY`; an in-place
/// [`one_shot`] all-reduce's sum, read by partners until the end, after `DONE`. Per task its
/// offset in the scratch memory, and the bytes that needs.
pub(super) fn parked(
    tasks: &[Task],
    rank: usize,
    n: usize,
    one_shot_max: usize,
) -> (Vec<Option<usize>>, usize) {
    let bytes_of = |t: &Task, elems: usize| elems.saturating_mul(t.dtype.size());
    let span = |p: usize, len: usize| (p, p.saturating_add(len));
    let sends: Vec<(usize, usize)> = tasks
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Send { .. }) && t.count > 0)
        .map(|t| span(t.send, bytes_of(t, t.count)))
        .collect();
    let overlap = |(a, b): (usize, usize), (c, d): (usize, usize)| a < d && c < b;
    let mut bytes = 0usize;
    let offsets = tasks
        .iter()
        .map(|t| {
            let (send_elems, recv_elems) =
                ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count)?;
            let recv = span(t.recv, bytes_of(t, recv_elems));
            let lands_on_a_read = match t.kind {
                TaskKind::Recv { .. } => sends.iter().any(|&s| overlap(recv, s)),
                TaskKind::Coll(Collective::AlltoAll) => {
                    overlap(recv, span(t.send, bytes_of(t, send_elems)))
                }
                TaskKind::Coll(Collective::AllReduce) if one_shot(t, one_shot_max) => {
                    overlap(recv, span(t.send, bytes_of(t, send_elems)))
                }
                _ => false,
            };
            if t.count == 0 || !lands_on_a_read {
                return None;
            }
            let off = bytes;
            bytes = bytes.saturating_add((recv.1 - recv.0).next_multiple_of(256));
            Some(off)
        })
        .collect();
    (offsets, bytes)
}

/// This rank's offer for `tasks` as group `index`; `able` false if it cannot take the direct
/// path (then the posts are left out).
pub(super) fn offer(
    index: usize,
    tasks: &[Task],
    (rank, n): (usize, usize),
    (able, one_shot): (bool, usize),
    reach: &mut dyn Reach,
) -> Offer {
    let mut able = able && index < groups(n) && tasks.iter().all(supported);
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let [kind, other, count, dtype, red] = signature(t);
        let mut post = |wanted: bool, ptr: usize, elems: Option<usize>| -> Option<Post> {
            let bytes = elems?.checked_mul(t.dtype.size())?;
            if !wanted || !able || bytes == 0 {
                return None;
            }
            match reach.export(ptr as u64) {
                Ok(Some(ex)) => Some(ex.post(reach.pid(), ptr as u64, bytes)),
                _ => {
                    able = false;
                    None
                }
            }
        };
        let counts = ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count);
        let (send_read, recv_read) = read_by_partners(t, rank);
        let send = post(send_read, t.send, counts.map(|c| c.0));
        let recv = post(recv_read, t.recv, counts.map(|c| c.1));
        out.push(OfferedTask {
            kind,
            other,
            count,
            dtype,
            red,
            send,
            recv,
        });
    }
    Offer {
        index: index as u64,
        able,
        one_shot: one_shot as u64,
        pid: reach.pid(),
        gpu: 0,
        tasks: out,
    }
}

/// Every rank's buffers of each of `rank`'s tasks as this rank reaches them.
pub(super) fn ends_of(
    offers: &[Offer],
    rank: usize,
    tasks: &[Task],
    rows: &[Vec<usize>],
    reach: &mut dyn Reach,
) -> Result<Vec<Vec<Ends>>> {
    let n = offers.len();
    let mut out = Vec::with_capacity(tasks.len());
    for (t, row) in tasks.iter().zip(rows) {
        let mut e = vec![Ends::default(); n];
        for (k, &at) in row.iter().enumerate() {
            if k == rank {
                // A receive from this rank itself reads the matching send's buffer.
                let send = match (t.kind, tasks.get(at)) {
                    (TaskKind::Recv { .. }, Some(s)) => s.send,
                    _ => t.send,
                };
                e[k] = Ends {
                    send: send as u64,
                    recv: t.recv as u64,
                };
                continue;
            }
            let (send, recv) = reads_of(t, rank, k);
            let Some(theirs) = offers[k].tasks.get(at) else {
                continue;
            };
            let mut resolve = |wanted: bool, post: Option<Post>| -> Result<u64> {
                if !wanted {
                    return Ok(0);
                }
                let p = post.ok_or_else(|| {
                    Error::internal(format!("cuda-ipc: rank {k} posted no buffer for a graph"))
                })?;
                reach.resolve(&p)
            };
            e[k] = Ends {
                send: resolve(send, theirs.send)?,
                recv: resolve(recv, theirs.recv)?,
            };
        }
        out.push(e);
    }
    Ok(out)
}

/// A hash of the PCI bus id of `ctx`'s GPU (0 if unknown), the same in every process.
fn gpu_id(ctx: &ccl_cuda::cuda::Context) -> u64 {
    use std::hash::{Hash, Hasher};
    let Ok(bus) = ctx.driver().pci_bus_id(ctx.device()) else {
        return 0;
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bus.to_ascii_lowercase().hash(&mut h);
    h.finish() | 1
}

/// Every rank's `mine`, over the bootstrap network.
fn exchange(comm: &CommCtx, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    // Operations queued on the other engines first: their progress threads need the control
    // plane this exchange holds, and a peer's may be waiting for ours (as for a split).
    comm.control.settle_others()?;
    comm.control.allgather(mine)
}

/// Captures `tasks` on the direct paths into the graph their stream is capturing, if every
/// rank can; `false`: no rank did, and every rank takes the staged captured path.
pub(crate) fn capture(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    let l = &eng.layout;
    let (rank, n) = (l.rank, l.nranks);
    let streams = streams_of(&eng.ctx, tasks);
    let index = eng.captured.fetch_add(1, Ordering::Relaxed);
    let able = eng.direct && eng.cfg.graph_direct;
    let one_shot_bytes = eng.cfg.graph_one_shot_bytes.max(0) as usize;
    let mut mine = {
        let mut q = eng.queued.lock();
        offer(index, tasks, (rank, n), (able, one_shot_bytes), &mut q.bufs)
    };
    mine.gpu = gpu_id(&eng.ctx);
    let offers = exchange(comm, &mine.encode())?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Offer::decode(b)
                .ok_or_else(|| Error::remote(format!("rank {r} sent a malformed graph offer")))
        })
        .collect::<Result<Vec<Offer>>>()?;
    if index == groups(n) {
        tracing::warn!(
            "rank {rank}: this communicator captured {index} groups into CUDA graphs; later \
             ones go through host memory (slow)"
        );
    }
    if offers.iter().any(|o| !o.able || o.index != mine.index) {
        tracing::debug!("rank {rank}: group {index} captured on the staged path");
        return Ok(false);
    }
    let one_shot_max = offers.iter().map(|o| o.one_shot).min().unwrap_or(0) as usize;
    let rows = matching(&offers, rank).map_err(|e| {
        Error::invalid_usage(format!("operations captured into a CUDA graph differ: {e}"))
    })?;
    let reduce_n = eng.reduce_n.load(Ordering::Relaxed);
    // Loading a module or mapping a buffer may fail here and not on a peer: a second round
    // says whether every rank is ready, so that they still fall back together.
    let ready = (|| -> Result<(Vec<Vec<Ends>>, Option<DeviceBuffer>)> {
        for (dtype, op) in kernels_needed(tasks, n, reduce_n) {
            eng.kernels
                .prepare(dtype, op)
                .map_err(crate::error::cuda_err)?;
        }
        let scratch = match parked(tasks, rank, n, one_shot_max).1 {
            0 => None,
            bytes => Some(DeviceBuffer::new(&eng.ctx, bytes).map_err(crate::error::cuda_err)?),
        };
        let mut q = eng.queued.lock();
        Ok((ends_of(&offers, rank, tasks, &rows, &mut q.bufs)?, scratch))
    })();
    if let Err(e) = &ready {
        tracing::warn!("rank {rank}: a captured group goes staged: {e}");
    }
    let verdicts = exchange(comm, &[ready.is_ok() as u8])?;
    if verdicts.iter().any(|v| v.as_slice() != [1]) {
        return Ok(false);
    }
    let (ends, scratch) = ready?;
    // A local choice: the kernel and the parts wait and write the same words in the same order.
    // Not while a rank of another process shares this GPU: time-sliced, the kernel would spin
    // through its whole slice (two processes on one H100, measured 2026-11-23: 4.5 ms per
    // operation).
    let shared = offers
        .iter()
        .any(|o| o.gpu == mine.gpu && o.pid != mine.pid);
    let kernel = match tasks {
        [t] if fusable_reduction(t, one_shot_max) => Some((
            t.dtype,
            KernelOp::GraphAllReduce(t.red.arithmetic().into(), n as u8),
        )),
        _ if !tasks.iter().any(|t| reduces(t.kind) && t.count > 0) => {
            Some((DataType::Uint8, KernelOp::GraphCopies))
        }
        _ => None,
    };
    let fused = eng.cfg.graph_fused
        && !shared
        && n <= REDUCE_N_MAX
        && kernel.is_some_and(|(dtype, op)| match eng.kernels.prepare(dtype, op) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("rank {rank}: the captured group's kernel {op:?}: {e}");
                false
            }
        });
    let group = Group {
        index,
        tasks,
        ends,
        reduce_n,
        scratch: scratch.as_ref().map_or(0, DeviceBuffer::ptr),
        one_shot: one_shot_max,
        fused,
    };
    ccl_cuda::cuda::helpers::on_first_stream::<Error>(&eng.ctx, &streams, |stream: &Stream| {
        emit(&mut CudaDevice::new(eng, stream), l, &group)
    })?;
    // The graph keeps using it at every replay, for as long as the process lives.
    std::mem::forget(scratch);
    if index == 0 {
        tracing::info!("rank {rank}: groups captured into CUDA graphs take the direct paths");
    }
    tracing::debug!(
        "rank {rank}: captured group {index} ({} operations) on the direct paths",
        tasks.len()
    );
    Ok(true)
}

/// Host-only mode ([`super::PeerReach::HostOnly`]): no rank reaches another's GPU memory, so a
/// captured group cannot read its partners' buffers in place. Captured collectives go through
/// each rank's receive slots in shared
/// host memory instead, used as its outbox: every rank copies its inputs there (a broadcast's
/// or scatter's root only, a reduce's or gather's other ranks only), `INPUTS`, copies what it
/// needs of every partner's outbox into its outputs (an all-gather's, gather's or all-to-all's
/// blocks, a broadcast's or scatter's data) or into its own GPU receive area (what it reduces,
/// one region per partner, as the slots), reduces in rank order, `DONE`. Sends go through the
/// outbox too, each receive taking the matching send's bytes; only sends to itself go staged.
/// Each rank lays out its own outbox; the capture exchanges every rank's signatures and
/// offsets, from which each finds what it takes where ([`host_only_sources`]). All on copy engines
/// but the reduction kernels; the same words as the direct captured groups.
///
/// Why the outbox and the GPU regions are free at a replay: the rank's earlier work has ended
/// on its stream (so every chunk a peer sent into its slots for it was consumed), and any rank
/// writes into them again (an outbox copy, an eager chunk) only after its `DONE` wait, which
/// passes once every rank has read every outbox: every rank handshakes with every other, in a
/// group of sends and receives too.
pub(crate) struct HostOnlyGroup<'a> {
    pub index: usize,
    pub tasks: &'a [Task],
    /// This rank's GPU receive area: the partners' inputs, a region of slots x chunk bytes
    /// each, partners in rank order.
    pub inputs: u64,
    pub reduce_n: bool,
    /// Where each task's input sits in this rank's outbox ([`host_only_offsets`]).
    pub offsets: Vec<usize>,
    /// `sources[j][i]`: where in rank `j`'s outbox task `i` finds what it takes from `j` (the
    /// partner's matching collective, or the send a receive from `j` meets), if anything.
    pub sources: Vec<Vec<Option<usize>>>,
}

/// One rank's part of a host-only capture as its peers see it: its ability, the group's index,
/// and per task its signature and outbox offset.
pub(crate) fn host_only_offer(index: usize, tasks: &[Task], offsets: Option<&[usize]>) -> Vec<u8> {
    let mut b = vec![offsets.is_some() as u8];
    b.extend_from_slice(&(index as u64).to_le_bytes());
    for (i, t) in tasks.iter().enumerate() {
        b.extend(signature(t).iter().flat_map(|w| w.to_le_bytes()));
        let at = offsets.and_then(|o| o.get(i)).copied().unwrap_or(0) as u64;
        b.extend_from_slice(&at.to_le_bytes());
    }
    b
}

/// An offer's tasks as (signature, outbox offset).
fn host_only_tasks(b: &[u8]) -> Option<Vec<([u64; 5], usize)>> {
    let body = b.get(9..)?;
    if body.len() % 48 != 0 {
        return None;
    }
    let word = |c: &[u8], k: usize| {
        c.get(k * 8..k * 8 + 8)
            .and_then(|w| w.try_into().ok())
            .map(u64::from_le_bytes)
    };
    body.chunks(48)
        .map(|c| {
            let mut sig = [0u64; 5];
            for (k, w) in sig.iter_mut().enumerate() {
                *w = word(c, k)?;
            }
            Some((sig, word(c, 5)? as usize))
        })
        .collect()
}

/// `sources` of [`HostOnlyGroup`] for `rank` from every rank's offer (all able, same index):
/// the m-th collective of a group meets every partner's m-th collective, which must be the
/// same operation; the k-th receive from `j` meets `j`'s k-th send to this rank, of as many
/// bytes.
pub(crate) fn host_only_sources(
    rank: usize,
    offers: &[Vec<u8>],
) -> std::result::Result<Vec<Vec<Option<usize>>>, String> {
    let all: Vec<Vec<([u64; 5], usize)>> = offers
        .iter()
        .enumerate()
        .map(|(r, b)| host_only_tasks(b).ok_or(format!("rank {r}'s offer is malformed")))
        .collect::<std::result::Result<_, _>>()?;
    let is_p2p = |sig: &[u64; 5]| sig[0] == SEND || sig[0] == RECV;
    let colls = |r: usize| -> Vec<([u64; 5], usize)> {
        all[r].iter().copied().filter(|(s, _)| !is_p2p(s)).collect()
    };
    let mine = &all[rank];
    let my_colls = colls(rank);
    let mut sources = vec![vec![None; mine.len()]; all.len()];
    for (j, row) in sources.iter_mut().enumerate().filter(|&(j, _)| j != rank) {
        let theirs = colls(j);
        if theirs.len() != my_colls.len() || theirs.iter().zip(&my_colls).any(|(a, b)| a.0 != b.0) {
            return Err(format!("rank {j}'s collectives are not rank {rank}'s"));
        }
        let mut their_colls = theirs.iter();
        let mut sends = all[j]
            .iter()
            .filter(|(s, _)| s[0] == SEND && s[1] == rank as u64);
        for (i, (sig, _)) in mine.iter().enumerate() {
            row[i] = match sig[0] {
                SEND => None,
                RECV if sig[1] == j as u64 => {
                    let (send, at) = sends.next().ok_or(format!(
                        "rank {rank} receives from rank {j}, which sends no more"
                    ))?;
                    if send[2] != sig[2] {
                        return Err(format!(
                            "rank {j} sends {} bytes to rank {rank}, which receives {}",
                            send[2], sig[2]
                        ));
                    }
                    Some(*at)
                }
                RECV => None,
                _ => their_colls.next().map(|&(_, at)| at),
            };
        }
        if sends.next().is_some() {
            return Err(format!("rank {j} sends rank {rank} more than it receives"));
        }
    }
    Ok(sources)
}

/// Bytes of `t` a rank's outbox holds (its whole input; a broadcast's or scatter's root's),
/// if host-only capture takes `t`.
fn outbox_bytes(t: &Task, rank: usize, n: usize) -> Option<usize> {
    let elems = match t.kind {
        TaskKind::Coll(
            Collective::AllReduce
            | Collective::AllGather
            | Collective::Broadcast { .. }
            | Collective::Reduce { .. }
            | Collective::Gather { .. },
        ) => t.count,
        TaskKind::Coll(
            Collective::ReduceScatter | Collective::AlltoAll | Collective::Scatter { .. },
        ) => t.count.checked_mul(n)?,
        // To itself: staged (its own outbox is not what it reads).
        TaskKind::Send { peer } | TaskKind::Recv { peer } if peer == rank => return None,
        TaskKind::Send { .. } => t.count,
        TaskKind::Recv { .. } => 0,
    };
    supported(t).then_some(())?;
    elems.checked_mul(t.dtype.size())
}

/// Where each of `tasks`' inputs sits in this rank's outbox, if host-only capture takes every
/// task and all fit in `region` bytes.
pub(crate) fn host_only_offsets(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
) -> Option<Vec<usize>> {
    let mut at = 0usize;
    let mut offsets = Vec::with_capacity(tasks.len());
    for t in tasks {
        offsets.push(at);
        at = at
            .checked_add(outbox_bytes(t, rank, n)?)?
            .next_multiple_of(256);
    }
    (at <= region).then_some(offsets)
}

/// One round of a host-only capture: its operations, their outbox offsets and where each
/// finds what it takes from each rank (see [`HostOnlyGroup`]).
pub(crate) type HostOnlyRound = (Vec<Task>, Vec<usize>, Vec<Vec<Option<usize>>>);

/// The rounds a host-only capture takes `tasks` in, if it takes them: the group as it is when
/// it fits one slot region of `region` bytes; else, a group of all-reduces, broadcasts and
/// reduces cut into pieces of at most a region each, packed in order into rounds of at most a
/// region (each round a handshake cycle of its own on the group's words). Each round with its
/// operations' outbox offsets ([`host_only_offsets`]).
pub(crate) fn host_only_rounds(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
) -> Option<Vec<(Vec<Task>, Vec<usize>)>> {
    if let Some(offsets) = host_only_offsets(tasks, rank, n, region) {
        return Some(vec![(tasks.to_vec(), offsets)]);
    }
    if !tasks.iter().all(|t| t.elementwise() && supported(t)) {
        return None;
    }
    let mut rounds: Vec<(Vec<Task>, Vec<usize>)> = vec![(Vec::new(), Vec::new())];
    let mut used = 0usize;
    for t in tasks {
        let size = t.dtype.size();
        let most = (region / size).max(1);
        let mut done = 0usize;
        while done < t.count {
            let count = (t.count - done).min(most);
            let bytes = (count * size).next_multiple_of(256);
            if used + bytes > region {
                rounds.push((Vec::new(), Vec::new()));
                used = 0;
            }
            let at = done * size;
            let (round, offsets) = rounds.last_mut()?;
            round.push(Task {
                send: t.send.wrapping_add(at),
                recv: t.recv.wrapping_add(at),
                count,
                ..*t
            });
            offsets.push(used);
            used += bytes;
            done += count;
        }
    }
    Some(rounds)
}

/// This rank's offer for a host-only capture of `tasks` as group `index` (ability, index, and
/// per operation its signature and, when the group is one round, its outbox offset).
pub(crate) fn host_only_offer_of(
    index: usize,
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
    able: bool,
) -> Vec<u8> {
    let rounds = host_only_rounds(tasks, rank, n, region).filter(|_| able);
    match rounds.as_deref() {
        Some([(_, offsets)]) => host_only_offer(index, tasks, Some(offsets)),
        // Several rounds: collectives only, laid out alike on every rank.
        Some(_) => host_only_offer(index, tasks, Some(&vec![0; tasks.len()])),
        None => host_only_offer(index, tasks, None),
    }
}

/// The rounds `rank` captures from every rank's offer ([`host_only_offer_of`], all able, same
/// group): one round takes its sources from the offers ([`host_only_sources`]); several, all
/// collectives of the same operations on every rank, find every partner's inputs where their
/// own are.
pub(crate) fn host_only_plan(
    tasks: &[Task],
    rank: usize,
    n: usize,
    region: usize,
    offers: &[Vec<u8>],
) -> std::result::Result<Vec<HostOnlyRound>, String> {
    let mine = offers.get(rank).ok_or("no offer of this rank")?;
    if offers.iter().any(|o| o.get(1..9) != mine.get(1..9)) {
        return Err("another group index".into());
    }
    let mut rounds = host_only_rounds(tasks, rank, n, region).ok_or("the group is not taken")?;
    if rounds.len() == 1 {
        let (one, offsets) = rounds.remove(0);
        return Ok(vec![(one, offsets, host_only_sources(rank, offers)?)]);
    }
    if let Some(r) = offers.iter().position(|o| o != mine) {
        return Err(format!("rank {r}'s collectives are not rank {rank}'s"));
    }
    Ok(rounds
        .into_iter()
        .map(|(round, offsets)| {
            let sources = (0..n)
                .map(|j| offsets.iter().map(|&o| (j != rank).then_some(o)).collect())
                .collect();
            (round, offsets, sources)
        })
        .collect())
}

/// Queues host-only group `g` of `l.rank` on [`Lane::User`].
pub(crate) fn emit_host_only(dev: &mut dyn Device, l: &Layout, g: &HostOnlyGroup) -> Result<()> {
    let (me, n) = (l.rank, l.nranks);
    let region = l.slots as usize * l.chunk;
    // Every other rank, even in a group of sends and receives: an outbox is this rank's slots,
    // which any rank's later eager chunks may fill, so it is free only once every rank has read
    // every outbox (a peer's `DONE` alone would not say that a third rank is done with it).
    let partners: Vec<usize> = (0..n).filter(|&j| j != me).collect();
    // Partner j's inputs in this rank's GPU area (own skipped, as the slots), each task's at
    // its offset in this rank's outbox (room for at least what it takes from j).
    let input_of = |j: usize| g.inputs + (if j < me { j } else { j - 1 } * region) as u64;
    let live = || {
        g.tasks
            .iter()
            .zip(&g.offsets)
            .enumerate()
            .filter(|(_, (t, _))| t.count > 0)
    };
    let block = |t: &Task| (t.count * t.dtype.size()) as u64;
    let mut dev = Batched::new(dev);
    for (_, (t, &o)) in live() {
        let writes = match t.kind {
            TaskKind::Coll(Collective::Broadcast { root } | Collective::Scatter { root }) => {
                root == me
            }
            TaskKind::Coll(Collective::Reduce { root } | Collective::Gather { root }) => root != me,
            TaskKind::Recv { .. } => false,
            _ => true,
        };
        if writes {
            let bytes = outbox_bytes(t, me, n).unwrap_or(0);
            dev.copy(Lane::User, l.scratch[me] + o as u64, t.send as u64, bytes)?;
        }
    }
    handshake(&mut dev, l, g.index, &partners, INPUTS)?;
    for &j in &partners {
        for (i, (t, &o)) in live() {
            let Some(src) = g.sources.get(j).and_then(|r| r.get(i)).copied().flatten() else {
                continue;
            };
            let (src, b) = (l.scratch[j] + src as u64, block(t));
            let (dst, from, bytes) = match t.kind {
                TaskKind::Coll(Collective::AllReduce) => (input_of(j) + o as u64, src, b),
                TaskKind::Coll(Collective::ReduceScatter) => {
                    (input_of(j) + o as u64, src + me as u64 * b, b)
                }
                TaskKind::Coll(Collective::AllGather) => (t.recv as u64 + j as u64 * b, src, b),
                TaskKind::Coll(Collective::Broadcast { root }) if root == j => {
                    (t.recv as u64, src, b)
                }
                TaskKind::Coll(Collective::Reduce { root }) if root == me => {
                    (input_of(j) + o as u64, src, b)
                }
                TaskKind::Coll(Collective::Gather { root }) if root == me => {
                    (t.recv as u64 + j as u64 * b, src, b)
                }
                TaskKind::Coll(Collective::Scatter { root }) if root == j => {
                    (t.recv as u64, src + me as u64 * b, b)
                }
                TaskKind::Coll(Collective::AlltoAll) => {
                    (t.recv as u64 + j as u64 * b, src + me as u64 * b, b)
                }
                TaskKind::Recv { peer } if peer == j => (t.recv as u64, src, b),
                _ => continue,
            };
            dev.copy(Lane::User, dst, from, bytes as usize)?;
        }
    }
    for (_, (t, &o)) in live() {
        let b = block(t);
        // Every rank's operand in rank order: this rank's from its own buffer.
        let srcs = |own: u64| -> Vec<u64> {
            (0..n)
                .map(|r| if r == me { own } else { input_of(r) + o as u64 })
                .collect()
        };
        let (send, recv) = (t.send as u64, t.recv as u64);
        let reduce = |dev: &mut Batched, own: u64| {
            reduce_into(dev, t, recv, &srcs(own), me, t.count, g.reduce_n)
        };
        match t.kind {
            TaskKind::Coll(Collective::AllReduce) => reduce(&mut dev, send)?,
            TaskKind::Coll(Collective::ReduceScatter) => reduce(&mut dev, send + me as u64 * b)?,
            TaskKind::Coll(Collective::Reduce { root }) if root == me => reduce(&mut dev, send)?,
            // This rank's own block or data, input to output (nothing to copy in place).
            TaskKind::Coll(Collective::AllGather) => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send, b)?
            }
            TaskKind::Coll(Collective::Broadcast { root }) if root == me => {
                copy_unless_same(&mut dev, recv, send, b)?
            }
            TaskKind::Coll(Collective::Gather { root }) if root == me => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send, b)?
            }
            TaskKind::Coll(Collective::Scatter { root }) if root == me => {
                copy_unless_same(&mut dev, recv, send + me as u64 * b, b)?
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                copy_unless_same(&mut dev, recv + me as u64 * b, send + me as u64 * b, b)?
            }
            _ => {}
        }
    }
    handshake(&mut dev, l, g.index, &partners, DONE)?;
    dev.flush()
}

/// A copy within this rank on [`Lane::User`], skipped where source and destination coincide.
fn copy_unless_same(dev: &mut dyn Device, dst: u64, src: u64, bytes: u64) -> Result<()> {
    if dst == src {
        return Ok(());
    }
    dev.copy(Lane::User, dst, src, bytes as usize)
}

/// Captures `tasks` host-only ([`HostOnlyGroup`]) into the graph their stream is capturing, if
/// every rank can; `false`: no rank did, and every rank takes the staged captured path.
pub(crate) fn capture_host_only(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    let l = &eng.layout;
    let (rank, n) = (l.rank, l.nranks);
    let streams = streams_of(&eng.ctx, tasks);
    let index = eng.captured.fetch_add(1, Ordering::Relaxed);
    let region = l.slots as usize * l.chunk;
    let able = eng.cfg.graph_direct && index < groups(n);
    // Ability, group index, and per operation its signature and outbox offset: every rank able
    // and the groups matching, or none captures it here.
    let all = exchange(
        comm,
        &host_only_offer_of(index, tasks, rank, n, region, able),
    )?;
    if !all.iter().all(|o| o.first() == Some(&1)) {
        tracing::debug!("rank {rank}: group {index} captured on the staged path (host-only)");
        return Ok(false);
    }
    let rounds = host_only_plan(tasks, rank, n, region, &all).map_err(|e| {
        Error::invalid_usage(format!(
            "operations captured into a CUDA graph differ (group {index}): {e}"
        ))
    })?;
    let reduce_n = eng.reduce_n.load(Ordering::Relaxed);
    let ready = kernels_needed(tasks, n, reduce_n)
        .into_iter()
        .try_for_each(|(dtype, op)| eng.kernels.prepare(dtype, op))
        .map_err(crate::error::cuda_err);
    if let Err(e) = &ready {
        tracing::warn!("rank {rank}: a captured group goes staged: {e}");
    }
    let verdicts = exchange(comm, &[ready.is_ok() as u8])?;
    if verdicts.iter().any(|v| v.as_slice() != [1]) {
        return Ok(false);
    }
    ccl_cuda::cuda::helpers::on_first_stream::<Error>(&eng.ctx, &streams, |stream: &Stream| {
        let mut dev = CudaDevice::new(eng, stream);
        for (round, offsets, sources) in rounds {
            let group = HostOnlyGroup {
                index,
                tasks: &round,
                inputs: eng.device_slots.ptr(),
                reduce_n,
                offsets,
                sources,
            };
            emit_host_only(&mut dev, l, &group)?;
        }
        Ok(())
    })?;
    if index == 0 {
        tracing::info!(
            "rank {rank}: collectives, sends and receives captured into CUDA graphs go \
             host-only (copy engines through shared host memory)"
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::task::float_sum;

    fn reach() -> impl Reach {
        struct Flat;
        impl Reach for Flat {
            fn pid(&self) -> u64 {
                7
            }
            fn export(&mut self, ptr: u64) -> Result<crate::rendezvous::Export> {
                Ok((ptr >= 0x1000).then_some(crate::rendezvous::Exported {
                    base: ptr & !0xfff,
                    buffer_id: ptr >> 12,
                    handle: [3; 64],
                }))
            }
            fn bounce(&mut self, _: usize) -> Result<(u64, crate::rendezvous::Exported)> {
                Err(Error::internal("no bounce buffer here"))
            }
            fn resolve(&mut self, p: &Post) -> Result<u64> {
                Ok(p.addr)
            }
        }
        Flat
    }

    /// The shares of an all-reduce cover its elements once, in order, each starting on a
    /// 256-byte boundary.
    #[test]
    fn shares_cover_every_element_once() {
        for (count, size, n) in [
            (1usize, 4usize, 2usize),
            (5, 2, 3),
            (1000, 4, 8),
            (65, 1, 9),
        ] {
            let mut next = 0;
            for k in 0..n {
                let (lo, hi) = share(count, size, n, k);
                assert_eq!(lo, next);
                assert!(hi >= lo && (lo * size) % 256 == 0 || lo == count);
                next = hi;
            }
            assert_eq!(next, count);
        }
    }

    /// Offers round-trip; one that is cut short or carries another magic number is refused.
    #[test]
    fn offers_round_trip() {
        let tasks = [
            float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, 6),
            float_sum(TaskKind::Send { peer: 1 }, 0x3000, 0, 4),
            float_sum(TaskKind::Recv { peer: 1 }, 0, 0x4000, 4),
        ];
        let o = offer(5, &tasks, (0, 2), (true, 0), &mut reach());
        assert!(o.able);
        assert!(o.tasks[0].send.is_some() && o.tasks[0].recv.is_some());
        assert!(o.tasks[1].send.is_some() && o.tasks[2].send.is_none());
        let b = o.encode();
        assert_eq!(Offer::decode(&b), Some(o.clone()));
        assert_eq!(Offer::decode(&b[..b.len() - 8]), None);
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert_eq!(Offer::decode(&bad), None);
        // A buffer no peer can map, an index past the area, a PreMulSum scalar in device
        // memory: the staged captured path.
        let host = [float_sum(
            TaskKind::Coll(Collective::AllReduce),
            0x10,
            0x2000,
            6,
        )];
        assert!(!offer(0, &host, (0, 2), (true, 0), &mut reach()).able);
        assert!(!offer(groups(2), &tasks, (0, 2), (true, 0), &mut reach()).able);
        assert!(offer(groups(2) - 1, &tasks, (0, 2), (true, 0), &mut reach()).able);
        assert_eq!(
            (groups(2), groups(8), groups(72), groups(4096)),
            (65536, 65536, 19418, 1024)
        );
        let mut avg = tasks[0];
        avg.red = Reduction::Avg;
        assert!(offer(0, &[avg], (0, 2), (true, 0), &mut reach()).able);
        avg.red = Reduction::PreMulSum(Scalar::Device(0x9000));
        assert!(!offer(0, &[avg], (0, 2), (true, 0), &mut reach()).able);
        let ring = [
            float_sum(TaskKind::Send { peer: 1 }, 0x3000, 0, 4),
            float_sum(TaskKind::Recv { peer: 1 }, 0, 0x3008, 4),
            float_sum(TaskKind::Recv { peer: 1 }, 0, 0x3010, 4),
            float_sum(TaskKind::Recv { peer: 1 }, 0, 0x5000, 4),
        ];
        assert!(offer(0, &ring, (0, 2), (true, 0), &mut reach()).able);
        // The two receives onto the send's buffer go through scratch memory, 256-byte aligned.
        assert_eq!(
            parked(&ring, 0, 2, 0),
            (vec![None, Some(0), None, None], 256)
        );
        let two = [ring[0], ring[1], ring[1]];
        assert_eq!(parked(&two, 0, 2, 0), (vec![None, Some(0), Some(256)], 512));
        // An in-place all-to-all parks its whole receive buffer; apart, nothing.
        let a2a = |s, r| float_sum(TaskKind::Coll(Collective::AlltoAll), s, r, 100);
        assert_eq!(
            parked(&[a2a(0x3000, 0x3000)], 1, 3, 0),
            (vec![Some(0)], 1280)
        );
        assert_eq!(parked(&[a2a(0x3000, 0x8000)], 1, 3, 0), (vec![None], 0));
        // An in-place all-reduce parks its sum only when it goes one-shot.
        let ar = float_sum(TaskKind::Coll(Collective::AllReduce), 0x3000, 0x3000, 64);
        assert_eq!(parked(&[ar], 0, 2, 256), (vec![Some(0)], 256));
        assert_eq!(parked(&[ar], 0, 2, 255), (vec![None], 0));
    }

    /// The agreement pairs every receive with the matching send and refuses groups that
    /// differ between ranks, saying how.
    #[test]
    fn matching_pairs_receives_and_refuses_different_groups() {
        let ar = |c| float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, c);
        let send = |p, c| float_sum(TaskKind::Send { peer: p }, 0x3000, 0, c);
        let recv = |p, c| float_sum(TaskKind::Recv { peer: p }, 0, 0x4000, c);
        let offers = |groups: &[Vec<Task>]| -> Vec<Offer> {
            groups
                .iter()
                .enumerate()
                .map(|(r, t)| offer(0, t, (r, groups.len()), (true, 0), &mut reach()))
                .collect()
        };
        let ok = offers(&[
            vec![send(1, 4), ar(8), recv(1, 2), send(1, 2)],
            vec![recv(0, 4), recv(0, 2), ar(8), send(0, 2)],
        ]);
        assert_eq!(
            matching(&ok, 0).unwrap(),
            vec![
                vec![usize::MAX, usize::MAX],
                vec![1, 2],
                vec![usize::MAX, 3],
                vec![usize::MAX, usize::MAX]
            ]
        );
        assert_eq!(matching(&ok, 1).unwrap()[1], vec![3, usize::MAX]);
        let other_count = offers(&[vec![ar(8)], vec![ar(9)]]);
        assert!(matching(&other_count, 0)
            .unwrap_err()
            .contains("other collectives"));
        let short = offers(&[vec![send(1, 4)], vec![recv(0, 3)]]);
        assert!(matching(&short, 1)
            .unwrap_err()
            .contains("receive of 12 bytes"));
        let missing = offers(&[vec![send(1, 4)], vec![]]);
        assert!(matching(&missing, 0).unwrap_err().contains("1 sends"));
    }

    /// Host-only capture: each rank's outbox laid out by itself; a receive finds the matching
    /// send's offset in its sender's outbox, a collective the partner's same collective's;
    /// groups that do not pair up are refused with what differs.
    #[test]
    fn host_only_sources_pair_sends_and_collectives_across_layouts() {
        let ar = |c| float_sum(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x2000, c);
        let send = |p, c| float_sum(TaskKind::Send { peer: p }, 0x3000, 0, c);
        let recv = |p, c| float_sum(TaskKind::Recv { peer: p }, 0, 0x4000, c);
        let offers = |groups: &[Vec<Task>]| -> Vec<Vec<u8>> {
            groups
                .iter()
                .enumerate()
                .map(|(r, t)| {
                    let o = host_only_offsets(t, r, groups.len(), 1 << 20);
                    host_only_offer(0, t, o.as_deref())
                })
                .collect()
        };
        // Rank 0's outbox: send (16 B) at 0, all-reduce at 256, nothing for the receive, the
        // second send at 512; rank 1's: its all-reduce at 0, its send at 256.
        let ok = offers(&[
            vec![send(1, 4), ar(8), recv(1, 2), send(1, 2)],
            vec![recv(0, 4), recv(0, 2), ar(8), send(0, 2)],
        ]);
        assert_eq!(
            host_only_sources(1, &ok).unwrap()[0],
            vec![Some(0), Some(512), Some(256), None]
        );
        assert_eq!(
            host_only_sources(0, &ok).unwrap()[1],
            vec![None, Some(0), Some(256), None]
        );
        let other_count = offers(&[vec![ar(8)], vec![ar(9)]]);
        assert!(host_only_sources(0, &other_count)
            .unwrap_err()
            .contains("collectives"));
        let short = offers(&[vec![send(1, 4)], vec![recv(0, 3)]]);
        assert!(host_only_sources(1, &short)
            .unwrap_err()
            .contains("sends 16 bytes"));
        let missing = offers(&[vec![send(1, 4)], vec![]]);
        assert!(host_only_sources(1, &missing)
            .unwrap_err()
            .contains("more than it receives"));
        // A send to itself is not taken (staged).
        assert!(host_only_offsets(&[send(0, 4), recv(0, 4)], 0, 2, 1 << 20).is_none());
    }
}
