//! Reference semantics of every collective, and a simulator that runs all ranks' schedules
//! together under the execution contract of the crate docs.
//!
//! The simulator works on `u64` elements. Each rank has one backing array holding its send,
//! receive and scratch buffers; in-place calls place send and receive at the aliasing offsets
//! the contract lists, so a schedule that overwrites input it still has to send produces wrong
//! output. Receive and scratch memory start as garbage, so reading before writing shows too.
//!
//! It reports, as [`SimError`]s: bad peers, zero-count operations, out-of-bounds slices,
//! writes into `Send` (the caller's input is read-only), count mismatches between the two ends
//! of a message (FIFO per ordered pair), data hazards inside one step (two operations writing
//! overlapping memory, or one reading what another writes; a `Copy` onto identical memory is a
//! no-op, as executors skip it), and deadlock under rendezvous semantics: a `Send` completes
//! only while the matching receive belongs to the receiver's *current* step.

use std::collections::HashMap;

use crate::{
    buffer_sizes, schedule_ordered, schedule_with, Algorithm, BufId, Collective, Error, Op,
    Pipeline, Schedule, Slice,
};

/// Elementwise reduction used by the reference and the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Wrapping add: with random inputs a lost or doubled contribution changes the result.
    Sum,
    Max,
    /// Neither commutative nor associative (`a * P + b`): a schedule matches the reference
    /// with it only if it folds the ranks' inputs exactly as the reference does, in rank order
    /// with the partial result first -- what makes float results equal bit for bit on every
    /// rank.
    Ordered,
}

impl ReduceOp {
    pub fn apply(self, a: u64, b: u64) -> u64 {
        match self {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Ordered => a.wrapping_mul(0x0000_0100_0000_01b3).wrapping_add(b),
        }
    }
}

/// Where an operation sits: rank, step index in that rank's schedule, index in the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRef {
    pub rank: usize,
    pub step: usize,
    pub op: usize,
}

impl std::fmt::Display for OpRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} step {} op {}", self.rank, self.step, self.op)
    }
}

/// What went wrong in a simulation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("building a schedule: {0}")]
    Schedule(#[from] Error),
    #[error("expected {expected} per-rank entries, got {got}")]
    RankCount { expected: usize, got: usize },
    #[error("rank {rank}: input has {got} elements, expected {expected}")]
    InputSize {
        rank: usize,
        expected: usize,
        got: usize,
    },
    #[error("{0}: peer out of range or self")]
    BadPeer(OpRef),
    #[error("{0}: zero-count operation")]
    ZeroCount(OpRef),
    #[error("{0}: slices of one operation differ in count")]
    SizeMismatch(OpRef),
    #[error("{0}: slice out of bounds")]
    OutOfBounds(OpRef),
    #[error("{0}: writes into the send buffer")]
    WritesSend(OpRef),
    #[error("rank {rank} step {step}: ops {a} and {b} conflict on memory")]
    Hazard {
        rank: usize,
        step: usize,
        a: usize,
        b: usize,
    },
    #[error("{from} -> {to}: {sends} sends but {recvs} receives")]
    Unmatched {
        from: usize,
        to: usize,
        sends: usize,
        recvs: usize,
    },
    #[error("{from} -> {to}: message {index} sends {sent} elements, receive expects {received}")]
    MessageSize {
        from: usize,
        to: usize,
        index: usize,
        sent: usize,
        received: usize,
    },
    #[error("deadlock; (rank, step) of unfinished ranks: {stuck:?}")]
    Deadlock { stuck: Vec<(usize, usize)> },
    #[error("rank {rank}: output has {got} elements, expected {expected}")]
    OutputSize {
        rank: usize,
        expected: usize,
        got: usize,
    },
    #[error("rank {rank} element {index}: got {got:#x}, expected {expected:#x}")]
    Mismatch {
        rank: usize,
        index: usize,
        got: u64,
        expected: u64,
    },
}

/// The receive buffers every rank must end with, from every rank's send buffer. Ranks without
/// a receive buffer (non-roots of Reduce and Gather) get an empty vector.
pub fn expected(
    coll: Collective,
    nranks: usize,
    count: usize,
    inputs: &[Vec<u64>],
    op: ReduceOp,
) -> Result<Vec<Vec<u64>>, SimError> {
    check_inputs(coll, nranks, count, inputs)?;
    let input = |r: usize| inputs.get(r).map(Vec::as_slice).unwrap_or(&[]);
    // Reduce block `[off, off+len)` over all ranks' inputs.
    let reduce = |off: usize, len: usize| -> Vec<u64> {
        (0..len)
            .map(|i| {
                (0..nranks)
                    .filter_map(|r| input(r).get(off + i).copied())
                    .reduce(|a, b| op.apply(a, b))
                    .unwrap_or(0)
            })
            .collect()
    };
    let block = |r: usize, b: usize| -> Vec<u64> {
        input(r)
            .get(b * count..(b + 1) * count)
            .map(<[u64]>::to_vec)
            .unwrap_or_default()
    };
    let out = (0..nranks)
        .map(|r| match coll {
            Collective::AllReduce => reduce(0, count),
            Collective::Broadcast { root } => input(root).to_vec(),
            Collective::Reduce { root } if r == root => reduce(0, count),
            Collective::Gather { root } if r == root => {
                (0..nranks).flat_map(|q| block(q, 0)).collect()
            }
            Collective::Reduce { .. } | Collective::Gather { .. } => Vec::new(),
            Collective::AllGather => (0..nranks).flat_map(|q| block(q, 0)).collect(),
            Collective::ReduceScatter => reduce(r * count, count),
            Collective::AlltoAll => (0..nranks).flat_map(|q| block(q, r)).collect(),
            Collective::Scatter { root } => block(root, r),
        })
        .collect();
    Ok(out)
}

fn check_inputs(
    coll: Collective,
    nranks: usize,
    count: usize,
    inputs: &[Vec<u64>],
) -> Result<(), SimError> {
    if inputs.len() != nranks {
        return Err(SimError::RankCount {
            expected: nranks,
            got: inputs.len(),
        });
    }
    for (rank, inp) in inputs.iter().enumerate() {
        let want = buffer_sizes(coll, rank, nranks, count)?.send;
        if inp.len() != want {
            return Err(SimError::InputSize {
                rank,
                expected: want,
                got: inp.len(),
            });
        }
    }
    Ok(())
}

/// A range of a rank's backing array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub offset: usize,
    pub len: usize,
}

/// Where a rank's buffers live in its backing array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub send: Region,
    pub recv: Region,
    pub scratch: Region,
    pub total: usize,
}

impl Layout {
    fn region(&self, buf: BufId) -> Region {
        match buf {
            BufId::Send => self.send,
            BufId::Recv => self.recv,
            BufId::Scratch => self.scratch,
        }
    }
}

/// Backing-array layout of `rank`: out of place the buffers are disjoint; in place they alias
/// exactly as the contract lists (buffers that exist only at the root stay separate elsewhere).
pub fn layout(
    coll: Collective,
    rank: usize,
    nranks: usize,
    count: usize,
    scratch: usize,
    in_place: bool,
) -> Result<Layout, Error> {
    let s = buffer_sizes(coll, rank, nranks, count)?;
    let region = |offset, len| Region { offset, len };
    let (send, recv) = match coll {
        _ if !in_place => (region(0, s.send), region(s.send, s.recv)),
        Collective::AllReduce
        | Collective::Broadcast { .. }
        | Collective::Reduce { .. }
        | Collective::AlltoAll => (region(0, s.send), region(0, s.recv)),
        Collective::AllGather => (region(rank * count, s.send), region(0, s.recv)),
        Collective::ReduceScatter => (region(0, s.send), region(rank * count, s.recv)),
        Collective::Gather { root } if rank == root => {
            (region(root * count, s.send), region(0, s.recv))
        }
        Collective::Scatter { root } if rank == root => {
            (region(0, s.send), region(root * count, s.recv))
        }
        Collective::Gather { .. } | Collective::Scatter { .. } => {
            (region(0, s.send), region(s.send, s.recv))
        }
    };
    let end = (send.offset + send.len).max(recv.offset + recv.len);
    let total = end.checked_add(scratch).ok_or(Error::Overflow)?;
    Ok(Layout {
        send,
        recv,
        scratch: region(end, scratch),
        total,
    })
}

/// Options of one simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    pub in_place: bool,
    pub op: ReduceOp,
}

/// What a successful simulation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimReport {
    /// Every rank's receive buffer at the end.
    pub recv: Vec<Vec<u64>>,
    /// Rounds of the lock-step execution: in a round every send whose receive is current on
    /// both sides completes, then every finished step is left. A latency measure.
    pub rounds: usize,
    /// Messages delivered.
    pub messages: usize,
    /// Elements each rank sent.
    pub sent: Vec<usize>,
}

type Range = (usize, usize);
/// Per ordered pair (from, to): (step, op, count) of each message end, in FIFO order.
type Ends = HashMap<(usize, usize), Vec<(usize, usize, usize)>>;

#[derive(Debug, Clone, Copy)]
enum Res {
    Send {
        peer: usize,
        src: Range,
    },
    Recv {
        peer: usize,
        dst: Range,
    },
    /// `local_first`: `local (op) incoming` ([`Op::RecvFold`]), else `incoming (op) local`.
    Reduce {
        peer: usize,
        local: Range,
        dst: Range,
        local_first: bool,
    },
    /// `None` when source and destination are the same memory (skipped).
    Copy(Option<(Range, Range)>),
    LocalReduce {
        src: Range,
        local: Range,
        dst: Range,
    },
}

fn overlap(a: Range, b: Range) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// A deterministic 64-bit mix (SplitMix64 finaliser).
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn resolve(lay: &Layout, nranks: usize, at: OpRef, op: &Op) -> Result<Res, SimError> {
    let addr = |s: &Slice| -> Result<Range, SimError> {
        let r = lay.region(s.buf);
        match s.offset.checked_add(s.count) {
            Some(end) if end <= r.len => Ok((r.offset + s.offset, s.count)),
            _ => Err(SimError::OutOfBounds(at)),
        }
    };
    let peer_ok = |p: usize| -> Result<usize, SimError> {
        if p < nranks && p != at.rank {
            Ok(p)
        } else {
            Err(SimError::BadPeer(at))
        }
    };
    let writable = |s: &Slice| -> Result<(), SimError> {
        if s.buf == BufId::Send {
            Err(SimError::WritesSend(at))
        } else {
            Ok(())
        }
    };
    if crate::plan::op_count(op) == 0 {
        return Err(SimError::ZeroCount(at));
    }
    Ok(match op {
        Op::Send { peer, src } => Res::Send {
            peer: peer_ok(*peer)?,
            src: addr(src)?,
        },
        Op::Recv { peer, dst } => {
            writable(dst)?;
            Res::Recv {
                peer: peer_ok(*peer)?,
                dst: addr(dst)?,
            }
        }
        Op::RecvReduce { peer, local, dst } | Op::RecvFold { peer, local, dst } => {
            writable(dst)?;
            if local.count != dst.count {
                return Err(SimError::SizeMismatch(at));
            }
            Res::Reduce {
                peer: peer_ok(*peer)?,
                local: addr(local)?,
                dst: addr(dst)?,
                local_first: matches!(op, Op::RecvFold { .. }),
            }
        }
        Op::Copy { src, dst } => {
            writable(dst)?;
            if src.count != dst.count {
                return Err(SimError::SizeMismatch(at));
            }
            let (s, d) = (addr(src)?, addr(dst)?);
            Res::Copy(if s == d { None } else { Some((s, d)) })
        }
        Op::Reduce { src, local, dst } => {
            writable(dst)?;
            if src.count != dst.count || local.count != dst.count {
                return Err(SimError::SizeMismatch(at));
            }
            Res::LocalReduce {
                src: addr(src)?,
                local: addr(local)?,
                dst: addr(dst)?,
            }
        }
    })
}

/// What an operation waits for inside its step (indices of earlier operations of the step).
#[derive(Debug, Clone, Default)]
struct Deps {
    /// A send: receives that must have landed before its data is taken (it forwards what they
    /// wrote).
    capture_after: Vec<usize>,
    /// A receive: sends whose data must have been taken (it overwrites what they read).
    captured: Vec<usize>,
    /// A receive: receives from the same peer that must have landed (it overwrites what they
    /// wrote or read).
    done: Vec<usize>,
}

/// Checks one step for hazards between (and inside) its operations and returns what each
/// operation waits for. Overlaps are allowed only where executors order the two operations,
/// each pair in op order: a receive overwriting what an earlier send reads (the send's data is
/// taken first: executors copy its frames as they queue them and hold the receive until then),
/// a send reading what an earlier receive writes (it forwards each frame once landed), and a
/// receive after another one from the same peer (messages from a peer land in order).
fn check_hazards(rank: usize, step: usize, ops: &[Res]) -> Result<Vec<Deps>, SimError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Who {
        Send,
        Recv(usize),
        Local,
    }
    let hazard = |a, b| SimError::Hazard { rank, step, a, b };
    // (op, range, writes, who)
    let mut acc: Vec<(usize, Range, bool, Who)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Res::Send { src, .. } => acc.push((i, src, false, Who::Send)),
            Res::Recv { peer, dst } => acc.push((i, dst, true, Who::Recv(peer))),
            Res::Reduce {
                peer, local, dst, ..
            } => {
                // Elementwise in place is fine; a shifted overlap is not.
                if local != dst && overlap(local, dst) {
                    return Err(hazard(i, i));
                }
                acc.push((i, local, false, Who::Recv(peer)));
                acc.push((i, dst, true, Who::Recv(peer)));
            }
            Res::Copy(Some((s, d))) => {
                if overlap(s, d) {
                    return Err(hazard(i, i));
                }
                acc.push((i, s, false, Who::Local));
                acc.push((i, d, true, Who::Local));
            }
            Res::LocalReduce { src, local, dst } => {
                // Elementwise in place (dst exactly one of the operands) is fine.
                if [src, local].iter().any(|&r| r != dst && overlap(r, dst)) {
                    return Err(hazard(i, i));
                }
                acc.push((i, src, false, Who::Local));
                acc.push((i, local, false, Who::Local));
                acc.push((i, dst, true, Who::Local));
            }
            Res::Copy(None) => {}
        }
    }
    let mut deps = vec![Deps::default(); ops.len()];
    for (x, &(i, ri, wi, ki)) in acc.iter().enumerate() {
        for &(j, rj, wj, kj) in acc.iter().skip(x + 1) {
            if i == j || !(wi || wj) || !overlap(ri, rj) {
                continue;
            }
            // `acc` is in op order, so `i < j` here.
            let d = deps.get_mut(j).ok_or_else(|| hazard(i, j))?;
            match (ki, wi, kj, wj) {
                (Who::Send, false, Who::Recv(_), true) => d.captured.push(i),
                (Who::Recv(_), true, Who::Send, false) => d.capture_after.push(i),
                (Who::Recv(p), _, Who::Recv(q), _) if p == q => d.done.push(i),
                _ => return Err(hazard(i, j)),
            }
        }
    }
    Ok(deps)
}

/// Runs every rank's schedule together and returns every rank's receive buffer: the
/// reference the executors are checked against, a direct reading of the execution semantics
/// in the crate documentation (resolve every rank's operations, pair sends with receives in
/// FIFO order, then run all ranks in lock step).
pub fn simulate(
    coll: Collective,
    nranks: usize,
    count: usize,
    schedules: &[Schedule],
    inputs: &[Vec<u64>],
    opts: SimOptions,
) -> Result<SimReport, SimError> {
    check_inputs(coll, nranks, count, inputs)?;
    if schedules.len() != nranks {
        return Err(SimError::RankCount {
            expected: nranks,
            got: schedules.len(),
        });
    }
    let Prepared {
        mut mem,
        layouts,
        res,
        deps,
    } = prepare(coll, count, opts, (schedules, inputs))?;
    let partner = partners(&res)?;
    let mut report = SimReport {
        recv: Vec::new(),
        rounds: 0,
        messages: 0,
        sent: vec![0; nranks],
    };
    let mut cur = vec![0usize; nranks];
    let mut done: Vec<Vec<bool>> = vec![Vec::new(); nranks];
    // The data of each rank's sends in its current step, taken as the step began or, for a
    // send forwarding what earlier receives of its step write, once they have landed.
    let mut snaps: Vec<HashMap<usize, Vec<u64>>> = vec![HashMap::new(); nranks];
    Sim {
        res: &res,
        deps: &deps,
        cur: &mut cur,
        done: &mut done,
        mem: &mut mem,
        snaps: &mut snaps,
        op: opts.op,
    }
    .run(&partner, &mut report)?;
    report.recv = mem
        .iter()
        .zip(&layouts)
        .map(|(m, l)| {
            m.get(l.recv.offset..l.recv.offset + l.recv.len)
                .map(<[u64]>::to_vec)
                .unwrap_or_default()
        })
        .collect();
    Ok(report)
}

/// Every rank's memory (its input in place, the rest filled with rank-specific noise), its
/// layout, its resolved operations and what each waits for inside its step (per rank, step,
/// operation).
struct Prepared {
    mem: Vec<Vec<u64>>,
    layouts: Vec<Layout>,
    res: Vec<Vec<Vec<Res>>>,
    deps: Vec<Vec<Vec<Deps>>>,
}

/// [`Prepared`] for every rank of `schedules` (one per rank, with its input).
fn prepare(
    coll: Collective,
    count: usize,
    opts: SimOptions,
    (schedules, inputs): (&[Schedule], &[Vec<u64>]),
) -> Result<Prepared, SimError> {
    let nranks = schedules.len();
    let mut p = Prepared {
        mem: Vec::with_capacity(nranks),
        layouts: Vec::with_capacity(nranks),
        res: Vec::with_capacity(nranks),
        deps: Vec::with_capacity(nranks),
    };
    for (rank, (sched, input)) in schedules.iter().zip(inputs).enumerate() {
        let lay = layout(coll, rank, nranks, count, sched.scratch, opts.in_place)?;
        let mut m: Vec<u64> = (0..lay.total)
            .map(|a| mix(((rank as u64) << 40) ^ a as u64 ^ 0x5eed))
            .collect();
        if let Some(dst) = m.get_mut(lay.send.offset..lay.send.offset + lay.send.len) {
            dst.copy_from_slice(input);
        }
        let mut steps = Vec::with_capacity(sched.steps.len());
        let mut step_deps = Vec::with_capacity(sched.steps.len());
        for (si, step) in sched.steps.iter().enumerate() {
            let ops = step
                .ops
                .iter()
                .enumerate()
                .map(|(oi, op)| {
                    let at = OpRef {
                        rank,
                        step: si,
                        op: oi,
                    };
                    resolve(&lay, nranks, at, op)
                })
                .collect::<Result<Vec<_>, _>>()?;
            step_deps.push(check_hazards(rank, si, &ops)?);
            steps.push(ops);
        }
        p.mem.push(m);
        p.layouts.push(lay);
        p.res.push(steps);
        p.deps.push(step_deps);
    }
    Ok(p)
}

/// Each send's receive, (from rank, step, op) -> (step, op) on the receiving rank.
type Partners = HashMap<(usize, usize, usize), (usize, usize)>;

/// FIFO matching: the k-th send a->b pairs with the k-th receive on b from a, of equal size.
fn partners(res: &[Vec<Vec<Res>>]) -> Result<Partners, SimError> {
    let mut sends: Ends = HashMap::new();
    let mut recvs: Ends = HashMap::new();
    for (rank, steps) in res.iter().enumerate() {
        for (si, ops) in steps.iter().enumerate() {
            for (oi, op) in ops.iter().enumerate() {
                match *op {
                    Res::Send { peer, src } => {
                        sends.entry((rank, peer)).or_default().push((si, oi, src.1))
                    }
                    Res::Recv { peer, dst } | Res::Reduce { peer, dst, .. } => {
                        recvs.entry((peer, rank)).or_default().push((si, oi, dst.1))
                    }
                    Res::Copy(_) | Res::LocalReduce { .. } => {}
                }
            }
        }
    }
    let mut partner = Partners::new();
    let mut pairs: Vec<(usize, usize)> = sends.keys().chain(recvs.keys()).copied().collect();
    pairs.sort_unstable();
    pairs.dedup();
    for (from, to) in pairs {
        let s = sends.get(&(from, to)).map(Vec::as_slice).unwrap_or(&[]);
        let r = recvs.get(&(from, to)).map(Vec::as_slice).unwrap_or(&[]);
        if s.len() != r.len() {
            return Err(SimError::Unmatched {
                from,
                to,
                sends: s.len(),
                recvs: r.len(),
            });
        }
        for (index, (&(ss, so, sc), &(rs, ro, rc))) in s.iter().zip(r).enumerate() {
            if sc != rc {
                return Err(SimError::MessageSize {
                    from,
                    to,
                    index,
                    sent: sc,
                    received: rc,
                });
            }
            partner.insert((from, ss, so), (rs, ro));
        }
    }
    Ok(partner)
}

/// A send ready to land: (sender, its op, its source, receiver, the receive's op).
type Match = (usize, usize, Range, usize, usize);

fn read(mem: &[Vec<u64>], rank: usize, (off, len): Range) -> Vec<u64> {
    mem.get(rank)
        .and_then(|m| m.get(off..off + len))
        .map(<[u64]>::to_vec)
        .unwrap_or_default()
}

fn write(mem: &mut [Vec<u64>], rank: usize, (off, len): Range, data: &[u64]) {
    if let Some(d) = mem.get_mut(rank).and_then(|m| m.get_mut(off..off + len)) {
        d.copy_from_slice(data);
    }
}

/// The lock-step simulation's state, for [`Sim::settle`].
struct Sim<'a> {
    res: &'a [Vec<Vec<Res>>],
    deps: &'a [Vec<Vec<Deps>>],
    cur: &'a mut [usize],
    done: &'a mut [Vec<bool>],
    mem: &'a mut [Vec<u64>],
    snaps: &'a mut [HashMap<usize, Vec<u64>>],
    op: ReduceOp,
}

impl Sim<'_> {
    /// Lock-step execution: in each round every send whose receive is current on both sides
    /// lands, then every rank settles; a round with nothing to deliver is a deadlock.
    fn run(&mut self, partner: &Partners, report: &mut SimReport) -> Result<(), SimError> {
        self.settle_all();
        while !self.finished() {
            let matches = self.ready(partner);
            if matches.is_empty() {
                return Err(SimError::Deadlock {
                    stuck: self.stuck(),
                });
            }
            for m in &matches {
                self.deliver(m, report);
            }
            report.rounds += 1;
            self.settle_all();
        }
        Ok(())
    }

    fn settle_all(&mut self) {
        for r in 0..self.cur.len() {
            self.settle(r);
        }
    }

    fn nsteps(&self, r: usize) -> usize {
        self.res.get(r).map(Vec::len).unwrap_or(0)
    }

    fn step_of(&self, r: usize) -> usize {
        self.cur.get(r).copied().unwrap_or(0)
    }

    fn finished(&self) -> bool {
        (0..self.cur.len()).all(|r| self.step_of(r) >= self.nsteps(r))
    }

    /// The ranks not finished, with the step each is in.
    fn stuck(&self) -> Vec<(usize, usize)> {
        (0..self.cur.len())
            .filter(|&r| self.step_of(r) < self.nsteps(r))
            .map(|r| (r, self.step_of(r)))
            .collect()
    }

    /// Every send of a current step whose data is taken and whose receive is current, not yet
    /// done, and free of its step's hazards.
    fn ready(&self, partner: &Partners) -> Vec<Match> {
        let captured = |r: usize, i: usize| self.snaps.get(r).is_some_and(|m| m.contains_key(&i));
        let landed = |r: usize, i: usize| self.done.get(r).and_then(|d| d.get(i)) == Some(&true);
        let pending = |r: usize, i: usize| {
            !self
                .done
                .get(r)
                .and_then(|d| d.get(i))
                .copied()
                .unwrap_or(true)
        };
        let mut matches = Vec::new();
        for a in 0..self.cur.len() {
            let sa = self.step_of(a);
            let Some(ops) = self.res.get(a).and_then(|s| s.get(sa)) else {
                continue;
            };
            for (oi, op) in ops.iter().enumerate() {
                let Res::Send { peer: b, src } = *op else {
                    continue;
                };
                if !pending(a, oi) {
                    continue;
                }
                let Some(&(sb, ob)) = partner.get(&(a, sa, oi)) else {
                    continue;
                };
                let waits = self
                    .deps
                    .get(b)
                    .and_then(|s| s.get(sb))
                    .and_then(|d| d.get(ob));
                let ready = self.cur.get(b) == Some(&sb)
                    && pending(b, ob)
                    && captured(a, oi)
                    && waits.is_some_and(|w| {
                        w.captured.iter().all(|&i| captured(b, i))
                            && w.done.iter().all(|&i| landed(b, i))
                    });
                if ready {
                    matches.push((a, oi, src, b, ob));
                }
            }
        }
        matches
    }

    /// Lands one send: the receive writes (or reduces into) its destination, both ends are
    /// done, and the report counts it.
    fn deliver(&mut self, &(a, oi, src, b, ob): &Match, report: &mut SimReport) {
        let data = self
            .snaps
            .get(a)
            .and_then(|m| m.get(&oi))
            .cloned()
            .unwrap_or_default();
        let sb = self.step_of(b);
        match self
            .res
            .get(b)
            .and_then(|s| s.get(sb))
            .and_then(|o| o.get(ob))
        {
            Some(Res::Recv { dst, .. }) => write(self.mem, b, *dst, &data),
            Some(Res::Reduce {
                local,
                dst,
                local_first,
                ..
            }) => {
                let l = read(self.mem, b, *local);
                let v: Vec<u64> = data
                    .iter()
                    .zip(&l)
                    .map(|(&x, &y)| {
                        if *local_first {
                            self.op.apply(y, x)
                        } else {
                            self.op.apply(x, y)
                        }
                    })
                    .collect();
                write(self.mem, b, *dst, &v);
            }
            _ => {}
        }
        for (r, o) in [(a, oi), (b, ob)] {
            if let Some(f) = self.done.get_mut(r).and_then(|d| d.get_mut(o)) {
                *f = true;
            }
        }
        report.messages += 1;
        if let Some(s) = report.sent.get_mut(a) {
            *s += src.1;
        }
    }

    /// Enters `r`'s current step if needed (running its copies), takes the data of every send
    /// whose receives have landed, and leaves every finished step.
    fn settle(&mut self, r: usize) {
        let Some(steps) = self.res.get(r) else { return };
        loop {
            let Some(c) = self.cur.get(r).copied() else {
                return;
            };
            let Some(ops) = steps.get(c) else { return };
            let Some(d) = self.done.get_mut(r) else {
                return;
            };
            let Some(snap) = self.snaps.get_mut(r) else {
                return;
            };
            if d.len() != ops.len() {
                // Entering the step: local copies and reductions complete at once (no hazard
                // lets them race with anything else in the step, so when they run inside it
                // does not matter).
                *d = ops
                    .iter()
                    .map(|o| matches!(o, Res::Copy(_) | Res::LocalReduce { .. }))
                    .collect();
                snap.clear();
                for o in ops {
                    match *o {
                        Res::Copy(Some((s, dst))) => {
                            let data = read(self.mem, r, s);
                            write(self.mem, r, dst, &data);
                        }
                        Res::LocalReduce { src, local, dst } => {
                            let (a, b) = (read(self.mem, r, src), read(self.mem, r, local));
                            let v: Vec<u64> = a
                                .iter()
                                .zip(&b)
                                .map(|(&x, &y)| self.op.apply(x, y))
                                .collect();
                            write(self.mem, r, dst, &v);
                        }
                        _ => {}
                    }
                }
            }
            let waits = self.deps.get(r).and_then(|s| s.get(c));
            for (i, o) in ops.iter().enumerate() {
                if let Res::Send { src, .. } = *o {
                    let after = waits.and_then(|w| w.get(i)).map(|w| &w.capture_after);
                    let landed = after.is_some_and(|a| a.iter().all(|&j| d.get(j) == Some(&true)));
                    if landed && !snap.contains_key(&i) {
                        snap.insert(i, read(self.mem, r, src));
                    }
                }
            }
            if d.iter().all(|&f| f) {
                d.clear();
                if let Some(cr) = self.cur.get_mut(r) {
                    *cr += 1;
                }
            } else {
                return;
            }
        }
    }
}

/// One end-to-end check of an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    pub coll: Collective,
    pub algo: Algorithm,
    pub nranks: usize,
    pub count: usize,
    pub pipeline: Pipeline,
    pub opts: SimOptions,
    /// Seeds the random inputs.
    pub seed: u64,
}

/// Builds every rank's schedule for `case`, feeds random inputs, simulates and compares every
/// rank's output with [`expected`] exactly.
pub fn check(case: &Case) -> Result<SimReport, SimError> {
    let n = case.nranks;
    let schedules = (0..n)
        .map(|r| schedule_with(case.coll, case.algo, r, n, case.count, case.pipeline))
        .collect::<Result<Vec<_>, _>>()?;
    run_case(case, &schedules)
}

/// [`check`] with schedules built by [`schedule_ordered`] over the
/// ring order `order` (whose length must be `case.nranks`).
pub fn check_ordered(case: &Case, order: &[usize]) -> Result<SimReport, SimError> {
    let n = case.nranks;
    if order.len() != n {
        return Err(SimError::RankCount {
            expected: n,
            got: order.len(),
        });
    }
    let schedules = (0..n)
        .map(|r| schedule_ordered(case.coll, case.algo, r, order, case.count, case.pipeline))
        .collect::<Result<Vec<_>, _>>()?;
    run_case(case, &schedules)
}

/// [`check`] with the caller's schedules (one per rank), for schedules not built from
/// `case.algo` (such as [`crate::alltoall_out_of_place`]).
pub fn check_schedules(case: &Case, schedules: &[Schedule]) -> Result<SimReport, SimError> {
    run_case(case, schedules)
}

/// Random inputs, simulation and exact comparison for `case` with the given schedules.
fn run_case(case: &Case, schedules: &[Schedule]) -> Result<SimReport, SimError> {
    let n = case.nranks;
    let inputs = (0..n)
        .map(|r| {
            let len = buffer_sizes(case.coll, r, n, case.count)?.send;
            Ok((0..len)
                .map(|i| mix(case.seed ^ ((r as u64) << 48) ^ i as u64))
                .collect())
        })
        .collect::<Result<Vec<Vec<u64>>, Error>>()?;
    let want = expected(case.coll, n, case.count, &inputs, case.opts.op)?;
    let report = simulate(case.coll, n, case.count, schedules, &inputs, case.opts)?;
    for (rank, (got, exp)) in report.recv.iter().zip(&want).enumerate() {
        if got.len() != exp.len() {
            return Err(SimError::OutputSize {
                rank,
                expected: exp.len(),
                got: got.len(),
            });
        }
        if let Some((index, (&g, &e))) = got.iter().zip(exp).enumerate().find(|(_, (g, e))| g != e)
        {
            return Err(SimError::Mismatch {
                rank,
                index,
                got: g,
                expected: e,
            });
        }
    }
    Ok(report)
}
