//! Direct all-reduce, reduce-scatter and reduce: every rank reads its peers' input buffers over
//! NVLink in one reduction kernel (its own slice of the result), for all-reduce pushes the
//! reduced slice straight into every peer's output buffer on a copy engine, chunk by chunk
//! behind the kernel, and for reduce writes its slice straight into the root's output (the
//! root no longer takes in every byte as the staged star did: 0.34x NCCL on 4 GPUs). No
//! receive slots, no staging copies: each byte crosses NVLink once per direction, as in a
//! ring, with the reduction reading the peer instead of a staged copy.
//!
//! Both sides need both sides' buffers, so unlike point-to-point transfers (one side copies,
//! [`super::direct`]) this takes a symmetric rendezvous: every rank posts its buffers on one
//! entry (in rank 0's inbox) and waits, briefly, until all have. If one is late (or cannot
//! export its buffers) the entry is marked failed with a compare-and-swap, and every rank then
//! runs the staged protocol instead; the swap makes the choice the same everywhere.
//!
//! Ordering, per operation: each rank flags "here" to every peer (its input is ready and its
//! output may be written), waits for every peer's "here", reduces, pushes, then flags "done"
//! (it has read the peer's input and written into the peer's output) and waits for every
//! peer's "done". Only "here" flags precede the waits, so no cycle; a rank's output is written
//! by a peer only after this rank's own kernel has read what sits there (in place: a peer
//! pushes slice q only after reading it).

use std::time::Instant;

use ccl_collectives::Collective;
use ccl_cuda::cuda::source::REDUCE_N_MAX;
use ccl_cuda::{DataType, ReduceKind};

use crate::device::{BatchCopy, Device, Kernel, LongWait};
use crate::error::{Error, Result};
use crate::layout::{sym_entry_words, sym_ring_base, Lane, Layout, POST_WORDS, SYM_RING};
use crate::rendezvous::{wait_for_ring, Post, PushWait, Words};
use crate::sync::{Atomic64, Ordering};
use ccl_collectives::task::{Reduction, Task, TaskKind};

/// Largest communicator the rendezvous word can hold (one bit per rank).
pub(crate) const MAX_RANKS: usize = 32;
const FAILED: u64 = 1 << 32;
/// Two ranks only: the rank that posted first stopped waiting and leaves the whole reduction
/// to the other, which does it when it posts (no host waits on either side).
const PASSIVE: u64 = 1 << 33;
const GEN_SHIFT: u32 = 34;
const ALL_BITS: u64 = FAILED - 1;

/// A collective that may run directly: one plain all-reduce, reduce-scatter or reduce of at
/// least `min_bytes` (smaller ones do better with the one-kernel low-latency path; a reduce
/// at least `reduce_min_bytes`, [`REDUCE_MIN_BYTES`] in the engine), input and output either
/// the same buffer or disjoint.
/// Every rank decides alike (kind, count, type, settings); the buffers' own properties come
/// into it only through the rendezvous.
pub(crate) fn candidate(
    tasks: &[Task],
    n: usize,
    min_bytes: usize,
    reduce_min_bytes: usize,
) -> Option<Task> {
    let [t] = tasks else { return None };
    if !(2..=MAX_RANKS).contains(&n) || !matches!(t.red, Reduction::Plain(_)) || t.count == 0 {
        return None;
    }
    let (total, min) = match t.kind {
        TaskKind::Coll(Collective::AllReduce) => (t.count, min_bytes),
        TaskKind::Coll(Collective::ReduceScatter) => (t.count.checked_mul(n)?, min_bytes),
        TaskKind::Coll(Collective::Reduce { .. }) => (t.count, reduce_min_bytes),
        _ => return None,
    };
    (total.checked_mul(t.dtype.size())? >= min).then_some(*t)
}

/// Smallest reduce (bytes) that runs as a direct reduction: below it the staged protocol's
/// pipeline through the root is as quick as the rendezvous and two rounds of flags.
pub(crate) const REDUCE_MIN_BYTES: usize = 1 << 20;

/// Whether this rank's output takes part in a direct reduction: every rank's, except a
/// reduce's ranks other than the root (their receive buffer is not used and may be NULL).
pub(crate) fn output_posted(t: &Task, rank: usize) -> bool {
    !matches!(t.kind, TaskKind::Coll(Collective::Reduce { root }) if root != rank)
}

/// What a rank posts for a buffer that is not used ([`output_posted`]), and what stands for
/// the peer's buffers on a rank that left its reduction to the peer.
pub(crate) const NO_POST: Post = Post {
    pid: 0,
    addr: 0,
    bytes: 0,
    buffer_id: 0,
    offset: 0,
    handle: [0; 64],
    host_permille: 0,
};

/// What the symmetric rendezvous decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SymOutcome {
    /// Every rank posted: (input, output) of every rank, this rank's included.
    Direct(Vec<(Post, Post)>),
    /// Someone was late or could not export: everybody runs the staged protocol.
    Staged,
    /// Posted; the others have not all posted yet ([`sym_settle`]).
    Pending,
    /// Two ranks: this rank stopped waiting; its peer reduces for both (this rank's stream
    /// flags "here" and waits for "done").
    Passive,
    /// Two ranks: the peer stopped waiting; this rank reduces for both, with the peer's
    /// buffers as posted (this rank's own post is not used).
    Active(Vec<(Post, Post)>),
}

struct SymEntry<'a> {
    board: &'a dyn Words,
    base: usize,
    gen: u64,
    n: usize,
}

impl<'a> SymEntry<'a> {
    fn new(board: &'a dyn Words, n: usize, seq: u64) -> SymEntry<'a> {
        SymEntry {
            board,
            base: sym_ring_base(n) + (seq % SYM_RING as u64) as usize * sym_entry_words(n),
            gen: seq / SYM_RING as u64,
            n,
        }
    }

    fn word(&self, i: usize) -> Result<&'a dyn Atomic64> {
        self.board
            .word(self.base + i)
            .ok_or_else(|| Error::internal("cuda-ipc: collective rendezvous outside the board"))
    }

    fn write(&self, rank: usize, posts: &(Post, Post)) -> Result<()> {
        let at = 2 + rank * 2 * POST_WORDS;
        for (k, p) in [posts.0, posts.1].iter().enumerate() {
            for (i, v) in p.to_words().into_iter().enumerate() {
                self.word(at + k * POST_WORDS + i)?
                    .store(v, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<(Post, Post)>> {
        (0..self.n)
            .map(|r| {
                let at = 2 + r * 2 * POST_WORDS;
                let mut two = [[0u64; POST_WORDS]; 2];
                for (k, w) in two.iter_mut().enumerate() {
                    for (i, v) in w.iter_mut().enumerate() {
                        *v = self.word(at + k * POST_WORDS + i)?.load(Ordering::Relaxed);
                    }
                }
                Ok((Post::from_words(&two[0]), Post::from_words(&two[1])))
            })
            .collect()
    }

    /// This rank is done with the entry; the last of all frees it for `seq + SYM_RING`.
    fn leave(&self) -> Result<()> {
        let count = self.word(1)?;
        if count.fetch_add(1, Ordering::AcqRel) + 1 == self.n as u64 {
            count.store(0, Ordering::Relaxed);
            self.word(0)?
                .store((self.gen + 1) << GEN_SHIFT, Ordering::Release);
        }
        Ok(())
    }

    fn finish(&self, w: u64) -> Result<SymOutcome> {
        let all = (1u64 << self.n) - 1;
        if w & FAILED != 0 {
            self.leave()?;
            return Ok(SymOutcome::Staged);
        }
        if w & ALL_BITS == all {
            let posts = self.read_all()?;
            self.leave()?;
            return Ok(SymOutcome::Direct(posts));
        }
        Ok(SymOutcome::Pending)
    }
}

/// Posts this rank's buffers for collective `seq` (`None`: they cannot be exported, so the
/// collective goes staged for everyone). `board` is rank 0's inbox. Waits only while the entry
/// still serves the collective `SYM_RING` earlier.
pub(crate) fn sym_post(
    board: &dyn Words,
    n: usize,
    rank: usize,
    seq: u64,
    mine: Option<(Post, Post)>,
    ring_deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> Result<SymOutcome> {
    let e = SymEntry::new(board, n, seq);
    let state = e.word(0)?;
    let mut spins = 0u32;
    loop {
        let w = state.load(Ordering::Acquire);
        let g = w >> GEN_SHIFT;
        if g == e.gen {
            if w & (1 << rank) != 0 {
                return Err(Error::internal(format!(
                    "cuda-ipc: collective {seq} posted twice by rank {rank}"
                )));
            }
            if w & FAILED != 0 {
                return e.finish(w);
            }
            if w & PASSIVE != 0 {
                // The peer left it to us: we need only its buffers, not our own exported.
                let next = w | 1 << rank;
                if state
                    .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    let posts = e.read_all()?;
                    e.leave()?;
                    return Ok(SymOutcome::Active(posts));
                }
                continue;
            }
            let next = match &mine {
                Some(p) => {
                    e.write(rank, p)?;
                    w | 1 << rank
                }
                None => w | FAILED,
            };
            if state
                .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return e.finish(next);
            }
            continue;
        }
        if g > e.gen {
            return Err(Error::internal(format!(
                "cuda-ipc: collective rendezvous {seq} is at generation {g}, ahead of rank {rank}"
            )));
        }
        wait_for_ring(state, &mut spins, stop, ring_deadline, || {
            format!("{SYM_RING} collectives behind rank {rank}")
        })?;
    }
}

/// Settles a [`SymOutcome::Pending`] post: `Direct` once everybody has posted, `Staged` if
/// someone marked it failed or `wait` ran out first (then this rank marks it) -- or, with
/// `takeover` on two ranks, `Passive` when the wait runs out: the peer does all of it.
pub(crate) fn sym_settle(
    board: &dyn Words,
    n: usize,
    seq: u64,
    wait: PushWait<'_>,
    takeover: bool,
    stop: &dyn Fn() -> bool,
) -> Result<SymOutcome> {
    let e = SymEntry::new(board, n, seq);
    let state = e.word(0)?;
    let mut spins = 0u32;
    loop {
        let w = state.load(Ordering::Acquire);
        if w >> GEN_SHIFT != e.gen {
            return Err(Error::internal(format!(
                "cuda-ipc: collective rendezvous {seq} moved on while pending"
            )));
        }
        let o = e.finish(w)?;
        if o != SymOutcome::Pending {
            return Ok(o);
        }
        if wait.over(stop) {
            if takeover && n == 2 {
                if state
                    .compare_exchange(w, w | PASSIVE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    e.leave()?;
                    return Ok(SymOutcome::Passive);
                }
                continue;
            }
            if state
                .compare_exchange(w, w | FAILED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return e.finish(w | FAILED);
            }
            continue;
        }
        state.pause(&mut spins);
    }
}

/// What a rank whose buffers lie in symmetric windows makes of its post: it never waits for
/// its peers, since the windows already name their buffers (`mirrored`, from
/// [`crate::windows::Windows::reduction_posts`]). Posted before the others, it leaves the entry
/// at once and reduces from the mirrored buffers; posting last, it checks the others' posts
/// against the mirrors, so a rank whose buffers are not where the windows say is reported
/// (`ncclInvalidUsage`) rather than read at the wrong place unnoticed. A peer that went staged
/// (its buffers outside its window, so it waited and gave up) is reported the same way.
pub(crate) fn on_windows(
    board: &dyn Words,
    n: usize,
    rank: usize,
    seq: u64,
    o: SymOutcome,
    mirrored: Vec<(Post, Post)>,
) -> Result<SymOutcome> {
    match o {
        SymOutcome::Pending => {
            SymEntry::new(board, n, seq).leave()?;
            Ok(SymOutcome::Direct(mirrored))
        }
        SymOutcome::Direct(actual) => {
            for (q, (a, m)) in actual.iter().zip(&mirrored).enumerate() {
                let what = [("input", &a.0, &m.0), ("output", &a.1, &m.1)];
                for (what, a, m) in what.into_iter().filter(|_| q != rank) {
                    if (a.addr, a.bytes) != (m.addr, m.bytes) {
                        return Err(not_mirrored(seq, q, rank, what, a, m));
                    }
                }
            }
            Ok(SymOutcome::Direct(actual))
        }
        SymOutcome::Staged => Err(Error::invalid_usage(format!(
            "direct reduction {seq}: rank {rank}'s buffers lie in a symmetric window, a peer's \
             could not be used directly (outside its window, or not mappable): a collective on \
             symmetric windows (NCCL_WIN_COLL_SYMMETRIC) needs its buffers at the same offset of \
             every rank's window"
        ))),
        o => Ok(o),
    }
}

fn not_mirrored(seq: u64, q: usize, rank: usize, what: &str, a: &Post, m: &Post) -> Error {
    Error::invalid_usage(format!(
        "direct reduction {seq}: rank {q}'s {what} is {} bytes at {:#x}, where rank {rank}'s \
         symmetric window puts it at {:#x} ({} bytes): a collective on symmetric windows \
         (NCCL_WIN_COLL_SYMMETRIC) needs its buffers at the same offset of every rank's window",
        a.bytes, a.addr, m.addr, m.bytes
    ))
}

/// One direct all-reduce or reduce-scatter on this rank, with every rank's buffers as this
/// device sees them.
#[derive(Debug, Clone)]
pub(crate) struct SymPlan {
    pub seq: u64,
    pub dtype: DataType,
    pub op: ReduceKind,
    /// Elements of this rank's result slice, where it starts in every input (elements), and
    /// where it lands in every output.
    pub count: usize,
    pub in_off: usize,
    pub out_off: usize,
    /// Every rank's input and output (this rank's at its index).
    pub inputs: Vec<u64>,
    pub outputs: Vec<u64>,
    /// All-reduce: push the reduced slice into every peer's output.
    pub push: bool,
    /// Reduce: the rank whose output every slice lands in (None: each rank's own).
    pub out_rank: Option<usize>,
    /// Pieces the slice is reduced and pushed in (so pushes overlap the next reduction).
    pub pieces: usize,
    /// Who reduces: every rank its slice, or (two ranks) one of them all of it.
    pub role: SymRole,
    /// The task's count (an all-reduce's whole buffer, a reduce-scatter's output).
    pub total: usize,
    /// More than two ranks: reduce the slice in one kernel over every rank's input
    /// ([`Kernel::ReduceN`]: all peers read at once, the slice written once) rather than a
    /// chain of two-input kernels. Bit for bit the same result, so each rank chooses alone
    /// (`CCL_IPC_DIRECT_REDUCE_MULTI`).
    pub multi: bool,
    /// All-reduce, up to `REDUCE_N_MAX` ranks: that one kernel also writes the slice into
    /// every peer's output, so no copy engine pushes it (`CCL_IPC_DIRECT_REDUCE_WRITE_ALL`; the
    /// same bits, a local choice).
    pub write_all: bool,
    /// Queued before every rank posted: the kernel takes every address from this mailbox slot
    /// ([`crate::mail::ReduceJob`], `CCL_IPC_DIRECT_REDUCE_MAILED`).
    pub mailed: Option<Mailed>,
    /// This rank's buffers could not be mapped by its peers: they read and write its bounce
    /// buffer, copied in before "here" and out after "done".
    pub bounce: Option<SymBounce>,
}

/// How the work of a direct reduction is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SymRole {
    /// Every rank reduces its own slice (and pushes it, for all-reduce).
    Shared,
    /// Two ranks, this one does everything: both slices of a reduce-scatter, or the whole
    /// all-reduce and the copy into the peer's output.
    Active { peer: usize },
    /// Two ranks, the peer does everything: flag "here", wait for "done".
    Passive { peer: usize },
}

impl SymPlan {
    /// Builds the plan from the rendezvous (`addr` maps a post to an address here).
    pub fn new(
        t: &Task,
        rank: usize,
        n: usize,
        seq: u64,
        posts: &[(Post, Post)],
        addr: &mut dyn FnMut(usize, &Post) -> Result<u64>,
        piece_bytes: usize,
    ) -> Result<SymPlan> {
        let op = match t.red {
            Reduction::Plain(k) => k,
            _ => {
                return Err(Error::internal(
                    "cuda-ipc: a direct reduction needs a plain op",
                ))
            }
        };
        let (mut inputs, mut outputs) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (r, (i, o)) in posts.iter().enumerate() {
            if r == rank {
                inputs.push(t.send as u64);
                outputs.push(t.recv as u64);
            } else {
                inputs.push(addr(r, i)?);
                // A reduce's other ranks posted no output ([`output_posted`]).
                outputs.push(if output_posted(t, r) { addr(r, o)? } else { 0 });
            }
        }
        let slice = || {
            let lo = (t.count as u128 * rank as u128 / n as u128) as usize;
            let hi = (t.count as u128 * (rank as u128 + 1) / n as u128) as usize;
            (hi - lo, lo)
        };
        let (count, in_off, out_off, push, out_rank) = match t.kind {
            TaskKind::Coll(Collective::AllReduce) => {
                let (count, lo) = slice();
                (count, lo, lo, true, None)
            }
            TaskKind::Coll(Collective::ReduceScatter) => (t.count, rank * t.count, 0, false, None),
            TaskKind::Coll(Collective::Reduce { root }) => {
                let (count, lo) = slice();
                (count, lo, lo, false, Some(root))
            }
            _ => return Err(Error::internal("cuda-ipc: not a direct reduction")),
        };
        let bytes = count * t.dtype.size();
        let pieces = if push {
            bytes.div_ceil(piece_bytes.max(1)).clamp(1, 16)
        } else {
            1
        };
        Ok(SymPlan {
            seq,
            dtype: t.dtype,
            op,
            count,
            in_off,
            out_off,
            inputs,
            outputs,
            push,
            out_rank,
            pieces,
            role: SymRole::Shared,
            total: t.count,
            multi: false,
            write_all: false,
            mailed: None,
            bounce: None,
        })
    }

    /// The peers in rotated order (me+1, me+2, ...), and the inputs in the order they are
    /// folded: this rank's first, then the peers; a reduce's from the root's.
    fn order(&self, me: usize, n: usize) -> (Vec<usize>, Vec<usize>) {
        // Rotated: at every step the ranks read from, and push to, a permutation of each
        // other, so no rank's NVLink ports serve several readers at once while others idle
        // (in plain order every rank first reads rank 0: 0.51x NCCL's reduce-scatter on 4
        // GPUs, measured 2026-11-22).
        let peers: Vec<usize> = (1..n).map(|k| (me + k) % n).collect();
        // A reduce starts from the root's input, since in place the root's input is the
        // destination, which the chain of two-input kernels overwrites after its first step.
        let order = match self.out_rank {
            Some(root) => std::iter::once(root)
                .chain(
                    std::iter::once(me)
                        .chain(peers.iter().copied())
                        .filter(|&q| q != root),
                )
                .collect(),
            None => std::iter::once(me).chain(peers.iter().copied()).collect(),
        };
        (peers, order)
    }

    /// The plan a settled rendezvous calls for on this rank: shared (`Direct`), or on two
    /// ranks this rank doing it all (`Active`, from the peer's posts; our own entry is not
    /// read) or leaving it to the peer (`Passive`); `None` when it goes staged.
    #[allow(clippy::too_many_arguments)]
    pub fn from_outcome(
        o: SymOutcome,
        t: &Task,
        rank: usize,
        n: usize,
        seq: u64,
        addr: &mut dyn FnMut(usize, &Post) -> Result<u64>,
        piece_bytes: usize,
    ) -> Result<Option<SymPlan>> {
        let alone = |role| {
            if n != 2 || rank > 1 {
                return Err(Error::internal(
                    "cuda-ipc: a reduction alone needs two ranks",
                ));
            }
            Ok(role)
        };
        let peer = 1 - rank.min(1);
        let (mut p, role) = match o {
            SymOutcome::Direct(posts) => (
                SymPlan::new(t, rank, n, seq, &posts, addr, piece_bytes)?,
                SymRole::Shared,
            ),
            SymOutcome::Active(posts) => (
                SymPlan::new(t, rank, 2, seq, &posts, addr, piece_bytes)?,
                alone(SymRole::Active { peer })?,
            ),
            SymOutcome::Passive => {
                let posts = [(NO_POST, NO_POST), (NO_POST, NO_POST)];
                (
                    SymPlan::new(t, rank, 2, seq, &posts, &mut |_, _| Ok(0), piece_bytes)?,
                    alone(SymRole::Passive { peer })?,
                )
            }
            SymOutcome::Staged | SymOutcome::Pending => return Ok(None),
        };
        p.role = role;
        Ok(Some(p))
    }

    /// `dst = a (op) b` over `n` elements of this reduction's type.
    fn two_input(&self, dst: u64, a: u64, b: u64, n: usize) -> Kernel {
        Kernel::Reduce {
            dtype: self.dtype,
            op: self.op,
            dst,
            a,
            b,
            n,
        }
    }

    fn flag(&self) -> u32 {
        (self.seq as u32).wrapping_add(1)
    }

    /// "Here" to every peer, then wait for theirs (alone: the passive rank flags, the active
    /// one waits).
    pub fn begin(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if let Some(b) = self.bounce {
            dev.copy(Lane::User, b.b_in, b.send, b.in_bytes)?;
        }
        match self.role {
            SymRole::Shared => {}
            SymRole::Passive { peer } => {
                return dev.write(Lane::User, l.sym_word(peer, l.rank, false), self.flag());
            }
            SymRole::Active { peer } => {
                return dev.wait(Lane::User, l.sym_word(l.rank, peer, false), self.flag());
            }
        }
        let peers = (0..l.nranks).filter(|&q| q != l.rank);
        for q in peers.clone() {
            dev.write(Lane::User, l.sym_word(q, l.rank, false), self.flag())?;
        }
        for q in peers {
            dev.wait(Lane::User, l.sym_word(l.rank, q, false), self.flag())?;
        }
        Ok(())
    }

    /// Reduce piece by piece on the caller's stream, push each piece on a copy lane behind
    /// it, then "done" to every peer and wait for theirs.
    pub fn end(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        match self.role {
            SymRole::Shared => {}
            SymRole::Passive { peer } => {
                return dev.wait_long(
                    Lane::User,
                    l.sym_word(l.rank, peer, true),
                    self.flag(),
                    LongWait::Reduction,
                );
            }
            SymRole::Active { peer } => return self.end_alone(l, peer, dev),
        }
        let (me, n, sz) = (l.rank, l.nranks, self.dtype.size());
        let at = |base: u64, elems: usize| base + (elems * sz) as u64;
        let (peers, order) = self.order(me, n);
        if let Some(m) = self.mailed {
            return self.end_mailed(l, &peers, m, dev);
        }
        // Each peer's pushes (and then its "done") on that peer's copy lane, so pushes to
        // several peers run on several copy engines at once.
        let mut lanes: Vec<Lane> = Vec::new();
        for &q in &peers {
            let lane = l.push_lane(q);
            if !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
        if self.push && self.write_all && n <= REDUCE_N_MAX {
            return self.end_written(l, &peers, &order, dev);
        }
        // One piece pushes as one batch on the caller's stream where the device batches
        // (nothing to pipeline: a fork, a copy per peer and a join become one call); pieces
        // push on the peers' lanes, the next piece reducing meanwhile.
        let batched = self.push && self.pieces == 1 && dev.batches_copies(Lane::User, 0);
        let mut batch: Vec<BatchCopy> = Vec::new();
        for p in 0..self.pieces {
            let lo = self.count * p / self.pieces;
            let hi = self.count * (p + 1) / self.pieces;
            if hi == lo {
                continue;
            }
            let dst = at(self.outputs[self.out_rank.unwrap_or(me)], self.out_off + lo);
            self.reduce_piece(dev, &order, dst, lo, hi)?;
            if !self.push {
                continue;
            }
            let to = |q: usize| at(self.outputs[q], self.out_off + lo);
            let bytes = (hi - lo) * sz;
            if batched {
                batch.extend(peers.iter().map(|&q| BatchCopy {
                    dst: to(q),
                    src: dst,
                    bytes,
                    peer: Some(q),
                }));
                continue;
            }
            dev.fork(&lanes)?;
            for &q in &peers {
                dev.copy(l.push_lane(q), to(q), dst, bytes)?;
            }
        }
        if batched && !batch.is_empty() {
            dev.copy_batch(Lane::User, &batch)?;
        }
        let on_lanes = self.push && !batched;
        if on_lanes && self.count == 0 {
            dev.fork(&lanes)?;
        }
        // "Done" to a peer: its input is read (the kernels, before the fork) and everything
        // for its output pushed (on its lane, or in the batch, before this write).
        for &q in &peers {
            let lane = if on_lanes { l.push_lane(q) } else { Lane::User };
            dev.write(lane, l.sym_word(q, me, true), self.flag())?;
        }
        if on_lanes {
            dev.join(&lanes)?;
        }
        self.wait_done(l, dev)
    }

    /// Every peer's "done" on the caller's stream, then this rank's output out of its bounce
    /// buffer.
    fn wait_done(&self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        for q in (0..l.nranks).filter(|&q| q != l.rank) {
            dev.wait_long(
                Lane::User,
                l.sym_word(l.rank, q, true),
                self.flag(),
                LongWait::Reduction,
            )?;
        }
        match self.bounce {
            Some(b) => dev.copy(Lane::User, b.recv, b.b_out, b.out_bytes),
            None => Ok(()),
        }
    }

    /// An all-reduce's slice reduced from every input (folded in `order`) and written into
    /// every rank's output by one kernel; then "done" to every peer (its input read, its
    /// output written: both by that kernel, before the write on the same stream).
    fn end_written(
        &self,
        l: &Layout,
        peers: &[usize],
        order: &[usize],
        dev: &mut dyn Device,
    ) -> Result<()> {
        let sz = self.dtype.size() as u64;
        let (src_at, dst_at) = (self.in_off as u64 * sz, self.out_off as u64 * sz);
        let mut srcs = [0u64; REDUCE_N_MAX];
        for (s, &q) in srcs.iter_mut().zip(order) {
            *s = self.inputs[q] + src_at;
        }
        let mut also = [0u64; REDUCE_N_MAX];
        for (a, &q) in also.iter_mut().zip(peers) {
            *a = self.outputs[q] + dst_at;
        }
        if self.count > 0 {
            let k = Kernel::ReduceN {
                dtype: self.dtype,
                op: self.op,
                dst: self.outputs[l.rank] + dst_at,
                srcs,
                k: order.len(),
                n: self.count,
                also,
                nalso: peers.len(),
            };
            dev.kernel(Lane::User, k)?;
        }
        for &q in peers {
            dev.write(Lane::User, l.sym_word(q, l.rank, true), self.flag())?;
        }
        self.wait_done(l, dev)
    }
}

impl SymPlan {
    /// Reduces elements `lo..hi` of every input, folded in `order`, into `dst`: one kernel
    /// over all inputs (`multi`, 3 to `REDUCE_N_MAX` ranks) or a chain of two-input kernels.
    fn reduce_piece(
        &self,
        dev: &mut dyn Device,
        order: &[usize],
        dst: u64,
        lo: usize,
        hi: usize,
    ) -> Result<()> {
        let sz = self.dtype.size();
        let at = |base: u64| base + ((self.in_off + lo) * sz) as u64;
        let n = order.len();
        if self.multi && (3..=REDUCE_N_MAX).contains(&n) {
            let mut srcs = [0u64; REDUCE_N_MAX];
            for (s, &q) in srcs.iter_mut().zip(order) {
                *s = at(self.inputs[q]);
            }
            let k = Kernel::ReduceN {
                dtype: self.dtype,
                op: self.op,
                dst,
                srcs,
                k: n,
                n: hi - lo,
                also: [0; REDUCE_N_MAX],
                nalso: 0,
            };
            return dev.kernel(Lane::User, k);
        }
        let mut a = at(self.inputs[order[0]]);
        for &q in &order[1..] {
            dev.kernel(
                Lane::User,
                self.two_input(dst, a, at(self.inputs[q]), hi - lo),
            )?;
            a = dst;
        }
        Ok(())
    }

    /// The active rank of a two-rank reduction: a reduce-scatter reduces both slices (the
    /// peer's straight into the peer's output); an all-reduce reduces everything into this
    /// rank's output, piece by piece, each piece copied into the peer's output behind it.
    /// Then "done" to the peer; nothing of the peer's is waited for after its "here".
    fn end_alone(&self, l: &Layout, peer: usize, dev: &mut dyn Device) -> Result<()> {
        let (me, sz) = (l.rank, self.dtype.size());
        let at = |base: u64, elems: usize| base + (elems * sz) as u64;
        let lane = Lane::Tx(0);
        if self.push {
            // All-reduce: the whole buffer (SymPlan::new cut out this rank's slice).
            let total = self.total;
            let pieces = (self.pieces * 2).clamp(1, 16);
            for p in 0..pieces {
                let lo = total * p / pieces;
                let hi = total * (p + 1) / pieces;
                if hi == lo {
                    continue;
                }
                let dst = at(self.outputs[me], lo);
                dev.kernel(
                    Lane::User,
                    self.two_input(
                        dst,
                        at(self.inputs[me], lo),
                        at(self.inputs[peer], lo),
                        hi - lo,
                    ),
                )?;
                dev.fork(&[lane])?;
                dev.copy(lane, at(self.outputs[peer], lo), dst, (hi - lo) * sz)?;
            }
            if total == 0 {
                dev.fork(&[lane])?;
            }
            dev.write(lane, l.sym_word(peer, me, true), self.flag())?;
            return dev.join(&[lane]);
        }
        if let Some(root) = self.out_rank {
            // Reduce: the whole buffer into the root's output.
            dev.kernel(
                Lane::User,
                self.two_input(
                    self.outputs[root],
                    self.inputs[me],
                    self.inputs[peer],
                    self.total,
                ),
            )?;
            return dev.write(Lane::User, l.sym_word(peer, me, true), self.flag());
        }
        // Reduce-scatter: slice r of every input lands in rank r's output (count each).
        for r in [me, peer] {
            let (mine, theirs) = if r == me { (me, peer) } else { (peer, me) };
            dev.kernel(
                Lane::User,
                self.two_input(
                    self.outputs[r],
                    at(self.inputs[mine], r * self.count),
                    at(self.inputs[theirs], r * self.count),
                    self.count,
                ),
            )?;
        }
        dev.write(Lane::User, l.sym_word(peer, me, true), self.flag())
    }
}

mod mailed;
pub(crate) use mailed::{sym_peek, sym_poll, Mailed, Part, SymBounce, SymPoll};

#[cfg(test)]
mod tests;
