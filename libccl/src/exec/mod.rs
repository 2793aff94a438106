//! The host executor: turns schedules and point-to-point tasks into raw operations on links
//! and runs them to completion without blocking, so one thread can drive many communicators
//! of one group at once (the `-g N` case) without deadlock.
//!
//! Every operation's first frame starts with a 48-byte header describing the API call that
//! produced it (kind, dtype, reduction, count, root, sequence number). The receiver checks it
//! against its own call, so ranks that issue different collectives get `ncclInvalidUsage`
//! naming both calls instead of silently corrupting memory or hanging.

use std::sync::atomic::{AtomicU32, Ordering};

use ccl_collectives::{BufId, Op, Schedule};
use ccl_cuda::host::reduce;
use ccl_cuda::{DataType, ReduceKind};
pub use ccl_monitor::ExecStats;
use ccl_monitor::TIMED_BYTES;
use ccl_transports::Link;

use crate::error::{Error, Result};
use crate::task::{Reduction, Scalar, Task, TaskKind};

pub const HDR_BYTES: usize = 48;
const HDR_MAGIC: u32 = 0x4343_4f50; // "CCOP"

/// The identity of an operation on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHeader {
    pub kind: u8,
    pub dtype: u8,
    pub red: u8,
    pub root: i32,
    pub seq: u64,
    pub count: u64,
    pub bytes: u64,
}

/// The root a send/receive header carries when the GPU path made it of a reduction.
const P2P_FOLD_ROOT: i32 = -2;

impl OpHeader {
    /// The header of the `seq`-th send or receive between two ranks, of `bytes` bytes;
    /// `fold`: one the GPU path made of a reduction it folds (`Task::fold`), marked by its root.
    fn p2p(seq: u64, bytes: usize, fold: bool) -> OpHeader {
        OpHeader {
            kind: 9,
            dtype: 0,
            red: 0,
            root: if fold { P2P_FOLD_ROOT } else { -1 },
            seq,
            count: bytes as u64,
            bytes: bytes as u64,
        }
    }

    fn encode(&self, out: &mut [u8]) {
        out[..HDR_BYTES].fill(0);
        out[0..4].copy_from_slice(&HDR_MAGIC.to_le_bytes());
        out[4] = self.kind;
        out[5] = self.dtype;
        out[6] = self.red;
        out[8..12].copy_from_slice(&self.root.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.count.to_le_bytes());
        out[32..40].copy_from_slice(&self.bytes.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < HDR_BYTES {
            return None;
        }
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        if u32at(0) != HDR_MAGIC {
            return None;
        }
        Some(OpHeader {
            kind: b[4],
            dtype: b[5],
            red: b[6],
            root: u32at(8) as i32,
            seq: u64at(16),
            count: u64at(24),
            bytes: u64at(32),
        })
    }

    fn describe(&self) -> String {
        let kind = match self.kind {
            1 => "AllReduce",
            2 => "Broadcast",
            3 => "Reduce",
            4 => "AllGather",
            5 => "ReduceScatter",
            6 => "AlltoAll",
            7 => "Gather",
            8 => "Scatter",
            9 if self.root == P2P_FOLD_ROOT => "Send/Recv of a reduction folded on the GPU",
            9 => "Send/Recv",
            _ => "?",
        };
        let dt = DataType::from_raw(i32::from(self.dtype))
            .map(|d| d.name())
            .unwrap_or("?");
        format!(
            "{kind}(#{}, count={}, {dt}, op={}, root={}, {} bytes on this link)",
            self.seq, self.count, self.red, self.root, self.bytes
        )
    }
}

#[derive(Debug, Clone, Copy)]
enum XKind {
    Send {
        src: *const u8,
    },
    Recv {
        dst: *mut u8,
    },
    /// `fused`: `local` is this rank's raw input of a PreMulSum/float-Avg reduction, folded in
    /// as `local * scalar + incoming` with one rounding, as NCCL's kernels do. `local_first`:
    /// `local (op) incoming` (a fold in rank order, [`Op::RecvFold`]), else `incoming (op)
    /// local`.
    RecvReduce {
        local: *const u8,
        dst: *mut u8,
        fused: bool,
        local_first: bool,
    },
    Copy {
        src: *const u8,
        dst: *mut u8,
    },
    /// `dst = src (op) local`, all local: the folds of a one-exchange all-reduce or
    /// reduce-scatter.
    Reduce {
        src: *const u8,
        local: *const u8,
        dst: *mut u8,
    },
}

impl XKind {
    /// Runs on this rank alone: no link, no peer.
    fn is_local(&self) -> bool {
        self.local_addrs().is_some()
    }

    /// A local operation's addresses -- the ranges it reads (a copy reads one, twice named)
    /// and the one it writes, each `bytes` long -- for gates on staged pieces.
    fn local_addrs(&self) -> Option<[usize; 3]> {
        match *self {
            XKind::Copy { src, dst } => Some([src as usize, src as usize, dst as usize]),
            XKind::Reduce { src, local, dst } => Some([src as usize, local as usize, dst as usize]),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct XOp {
    kind: XKind,
    peer: usize,
    bytes: usize,
    done: usize,
    header_done: bool,
    finished: bool,
    hdr: OpHeader,
    /// Gated point-to-point groups: the piece whose bytes this operation reads (sends and
    /// local copies wait for it) and the piece its output lands in.
    piece: Option<usize>,
    lands_in: Option<usize>,
    /// A send whose source a later receive of its step overwrites: its frames are copied into
    /// the link as they are queued (not sent from the source), so the receive may write there
    /// as soon as they are.
    copy_frames: bool,
    /// A receive into what an earlier send of its step reads: each frame waits until that
    /// send has queued the bytes it would overwrite ([`order_overwrites`]).
    after_sends: bool,
    /// A send of what an earlier receive of its step writes: each frame waits until that
    /// receive has written the bytes it carries ([`order_overwrites`]).
    after_receives: bool,
}

/// A 32-bit word in memory another agent shares (pinned host memory a GPU stream writes and
/// waits on) holding a sequence number.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    word: *const AtomicU32,
    value: u32,
}

// SAFETY: the word is process memory that outlives every plan using the flag (the GPU
// engine's flag slots), accessed only atomically.
unsafe impl Send for Flag {}
// SAFETY: as above.
unsafe impl Sync for Flag {}

impl Flag {
    /// # Safety
    /// `word` must stay valid, and be accessed only atomically, while any plan holds the flag.
    pub unsafe fn new(word: *const AtomicU32, value: u32) -> Flag {
        Flag { word, value }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: valid for the flag's life (see `new`).
        unsafe { &*self.word }
    }

    /// Reached `value` (wrap-safe: a later sequence number counts too).
    fn is_set(&self) -> bool {
        (self.word().load(Ordering::Acquire).wrapping_sub(self.value) as i32) >= 0
    }

    fn set(&self) {
        self.word().store(self.value, Ordering::Release);
    }
}

/// A point-to-point group staged in pieces ([`crate::pieces`]): sends of piece k start once
/// `start[k]` is set (its bytes reached host memory), and once every receive of piece k has
/// landed, `landed[k]` is set (its bytes may go back to the GPU) -- all in one plan, so pieces
/// of different operations never wait on each other's order across ranks.
#[derive(Debug, Clone)]
pub struct PieceGates {
    /// The piece of each task, in task order.
    pub of_task: Vec<usize>,
    pub start: Vec<Flag>,
    /// One per piece but the last (whose end is the plan's end).
    pub landed: Vec<Flag>,
}

/// A lone collective staged in pieces that runs as ONE plan ([`crate::pieces::streamed`]):
/// an operation reads (or, in place, writes) a piece of the staged input only once the GPU
/// stream has copied it down, and a piece of the staged output may go back up once every write
/// the schedule makes into it is done -- so the copies overlap the transfers without cutting
/// the collective into smaller ones, whose steps each drained the links.
#[derive(Debug, Clone)]
pub struct CollGates {
    /// (host start, host end, flag set once the bytes are in host memory), any order.
    pub input: Vec<(usize, usize, Flag)>,
    /// (host start, host end, flag this plan sets once it wrote its last byte there).
    pub output: Vec<(usize, usize, Flag)>,
}

/// [`CollGates`] with the bytes the plan still writes into each output piece.
struct CollGateState {
    gates: CollGates,
    left: Vec<usize>,
}

fn overlap(a: (usize, usize), lo: usize, len: usize) -> usize {
    a.1.min(lo.saturating_add(len)).saturating_sub(a.0.max(lo))
}

impl CollGateState {
    /// Every input piece that `[lo, lo+len)` touches is in host memory.
    fn ready(&self, lo: usize, len: usize) -> bool {
        self.gates
            .input
            .iter()
            .all(|&(a, b, f)| overlap((a, b), lo, len) == 0 || f.is_set())
    }

    /// The plan wrote `[lo, lo+len)`: output pieces with nothing left to write are released.
    fn wrote(&mut self, lo: usize, len: usize) {
        for (&(a, b, f), left) in self.gates.output.iter().zip(self.left.iter_mut()) {
            let o = overlap((a, b), lo, len);
            if o > 0 && *left > 0 {
                *left = left.saturating_sub(o);
                if *left == 0 {
                    f.set();
                }
            }
        }
    }
}

impl XOp {
    /// Every byte (and the header) handed to the link; a send may still wait for the link to
    /// push them out before it is `finished`.
    fn queued(&self) -> bool {
        self.finished || (self.header_done && self.done == self.bytes)
    }

    /// An operation on `peer` moving `hdr.bytes` bytes, not started.
    fn new(kind: XKind, peer: usize, hdr: OpHeader) -> XOp {
        XOp {
            kind,
            peer,
            bytes: hdr.bytes as usize,
            done: 0,
            // Local copies never send a header.
            header_done: kind.is_local(),
            finished: false,
            hdr,
            piece: None,
            lands_in: None,
            copy_frames: false,
            after_sends: false,
            after_receives: false,
        }
    }

    /// The range a receive writes, if this is one.
    fn receives_into(&self) -> Option<(usize, usize)> {
        match self.kind {
            XKind::Recv { dst } | XKind::RecvReduce { dst, .. } => {
                Some((dst as usize, dst as usize + self.bytes))
            }
            _ => None,
        }
    }

    /// The part of a receive's destination not yet written (frames land in order).
    fn unwritten(&self) -> Option<(usize, usize)> {
        self.receives_into().map(|(lo, hi)| (lo + self.done, hi))
    }

    /// The part of a send's source not yet queued (all of it before its first frame).
    fn unqueued_source(&self) -> Option<(usize, usize)> {
        match self.kind {
            XKind::Send { src } => {
                let from = if self.header_done { self.done } else { 0 };
                Some((src as usize + from, src as usize + self.bytes))
            }
            _ => None,
        }
    }
}

/// Schedules may let a receive overwrite what a send earlier in its step reads (the send's data
/// is taken first: an in-place exchange all-reduce sends its input and folds the peer's into the
/// same buffer), and a send read what an earlier receive of its step writes (it forwards what
/// landed: a ring whose steps run as one). The first kind of send copies its frames into the
/// link as it queues them, and the receive takes a frame only once the send has queued every
/// byte the frame would write over; the second kind sends a frame only once the receive has
/// written every byte of it.
fn order_overwrites(ops: &mut [XOp]) {
    for j in 0..ops.len() {
        let (before, rest) = ops.split_at_mut(j);
        let Some(later) = rest.first_mut() else {
            continue;
        };
        for earlier in before.iter_mut() {
            match (earlier.kind, later.kind) {
                (XKind::Send { src }, _) => {
                    if let Some((lo, hi)) = later.receives_into() {
                        if overlap((src as usize, src as usize + earlier.bytes), lo, hi - lo) > 0 {
                            earlier.copy_frames = true;
                            later.after_sends = true;
                        }
                    }
                }
                (_, XKind::Send { src }) => {
                    if let Some(w) = earlier.receives_into() {
                        if overlap(w, src as usize, later.bytes) > 0 {
                            later.after_receives = true;
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

struct Prescale {
    src: *const u8,
    buf: Vec<u8>,
    scalar: [u8; 8],
    elems: usize,
}

/// What a plan does, kept as data so the message is formatted only on error.
#[derive(Debug, Clone, Copy)]
enum PlanWhat {
    Coll {
        name: &'static str,
        seq: u64,
        count: usize,
        dtype: DataType,
    },
    P2p {
        ops: usize,
    },
}

/// A plan for one communicator: steps of raw operations, plus pre/post processing.
pub struct Plan {
    steps: Vec<Vec<XOp>>,
    cur: usize,
    dtype: DataType,
    arith: ReduceKind,
    /// The PreMulSum scalar (also float Avg's 1/n), for fused receive-reduce steps.
    scalar: [u8; 8],
    /// Float Avg and PreMulSum scale the input into a private copy before the first step.
    prescale: Option<Prescale>,
    /// Integer Avg divides the output by nranks after the last step.
    postdiv: Option<(*mut u8, usize, u64)>,
    _scratch: Vec<u8>,
    /// What the plan is, for error messages (formatted only when one is needed).
    what: PlanWhat,
    started: bool,
    /// Pieces of a gated point-to-point group, and receives (and local copies) still to land
    /// per piece.
    gates: Option<PieceGates>,
    landing: Vec<usize>,
    /// A lone collective staged in pieces.
    coll_gates: Option<CollGateState>,
    /// Since when the current step has waited only for its sends' acknowledgements.
    settling_since: Option<std::time::Instant>,
}

// SAFETY: the raw pointers are user buffers handed to us for the duration of the operation
// (NCCL's contract) and plan-owned vectors; a plan is executed by one thread at a time.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self._scratch));
        if let Some(p) = self.prescale.take() {
            give_back(p.buf);
        }
    }
}

thread_local! {
    /// Plan-owned buffers (scratch, pre-scaled inputs) of finished plans on this thread,
    /// for the next plans: tens of MiB freshly allocated are page-faulted in by whatever
    /// first writes them, and an all-to-all's receives into new scratch ran at ~1 GB/s.
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare buffers kept per thread, and their bytes at most.
const SPARE_BUFFERS: usize = 4;
const SPARE_BYTES: usize = 512 << 20;

/// A buffer of `len` bytes for a plan: a spare one of this thread's if one is large enough
/// (its bytes are whatever a previous plan left: every plan writes its scratch before
/// reading it), else a new one.
fn take_buffer(len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    let spare = SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let best = s
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        best.map(|i| s.swap_remove(i))
    });
    match spare {
        Some(mut v) => {
            // Growth within the capacity is zero-filled; shrinking touches nothing.
            v.resize(len, 0);
            v
        }
        None => vec![0u8; len],
    }
}

/// Keeps `v` for a later plan on this thread, within the spare limits.
fn give_back(v: Vec<u8>) {
    if v.capacity() == 0 {
        return;
    }
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let held: usize = s.iter().map(Vec::capacity).sum();
        if s.len() < SPARE_BUFFERS && held + v.capacity() <= SPARE_BYTES {
            s.push(v);
        }
    });
}

fn elem_ptr(base: usize, off_elems: usize, size: usize) -> usize {
    base.wrapping_add(off_elems.wrapping_mul(size))
}

impl Plan {
    fn new(steps: Vec<Vec<XOp>>, dtype: DataType, arith: ReduceKind, what: PlanWhat) -> Plan {
        Plan {
            steps,
            cur: 0,
            dtype,
            arith,
            scalar: [0; 8],
            prescale: None,
            postdiv: None,
            _scratch: Vec::new(),
            what,
            started: false,
            gates: None,
            landing: Vec::new(),
            coll_gates: None,
            settling_since: None,
        }
    }

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
        let scalar = match task.red {
            Reduction::PreMulSum(Scalar::Device(p)) => {
                let mut b = [0u8; 8];
                // SAFETY: the caller gave a pointer to one element of `dtype` that stays valid
                // while operations using the op run (NCCL's contract); it was checked non-NULL.
                unsafe { std::ptr::copy_nonoverlapping(p as *const u8, b.as_mut_ptr(), size) };
                Some(b)
            }
            _ => ccl_cuda::host::reduce::premul_scalar(task, nranks),
        };
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
        let scratch_base = scratch.as_mut_ptr() as usize;
        let base = |b: BufId| match b {
            BufId::Send => send_base,
            BufId::Recv => task.recv,
            BufId::Scratch => scratch_base,
        };
        let hdr = OpHeader {
            kind: task.kind.code(),
            dtype: task.dtype as u8,
            red: task.red.code(),
            root: task.kind.root().map(|r| r as i32).unwrap_or(-1),
            seq,
            count: task.count as u64,
            bytes: 0,
        };
        // Folds in rank order must compute the same operations on every rank, so no rank may
        // fuse its pre-scaling into them: with a scalar, every operand is pre-scaled by its
        // owner (the plan's `prescale`) and the folds are plain.
        let ordered_folds = schedule
            .steps
            .iter()
            .flat_map(|s| &s.ops)
            .any(|o| matches!(o, Op::RecvFold { .. }));
        let mut steps = Vec::with_capacity(schedule.steps.len());
        for step in &schedule.steps {
            let mut ops = Vec::with_capacity(step.ops.len());
            for op in &step.ops {
                let (kind, peer, count) = match *op {
                    Op::Send { peer, src } => (
                        XKind::Send {
                            src: elem_ptr(base(src.buf), src.offset, size) as *const u8,
                        },
                        peer,
                        src.count,
                    ),
                    Op::Recv { peer, dst } => (
                        XKind::Recv {
                            dst: elem_ptr(base(dst.buf), dst.offset, size) as *mut u8,
                        },
                        peer,
                        dst.count,
                    ),
                    Op::RecvReduce { peer, local, dst } | Op::RecvFold { peer, local, dst } => {
                        // A raw input folded into a scaled partial sum: NCCL computes
                        // fma(x, s, partial), so read the unscaled input and fuse.
                        let fused = scalar.is_some() && local.buf == BufId::Send && !ordered_folds;
                        let local_base = if fused { task.send } else { base(local.buf) };
                        (
                            XKind::RecvReduce {
                                local: elem_ptr(local_base, local.offset, size) as *const u8,
                                dst: elem_ptr(base(dst.buf), dst.offset, size) as *mut u8,
                                fused,
                                local_first: matches!(op, Op::RecvFold { .. }),
                            },
                            peer,
                            dst.count,
                        )
                    }
                    Op::Copy { src, dst } => (
                        XKind::Copy {
                            src: elem_ptr(base(src.buf), src.offset, size) as *const u8,
                            dst: elem_ptr(base(dst.buf), dst.offset, size) as *mut u8,
                        },
                        rank,
                        src.count,
                    ),
                    Op::Reduce { src, local, dst } => (
                        XKind::Reduce {
                            src: elem_ptr(base(src.buf), src.offset, size) as *const u8,
                            local: elem_ptr(base(local.buf), local.offset, size) as *const u8,
                            dst: elem_ptr(base(dst.buf), dst.offset, size) as *mut u8,
                        },
                        rank,
                        dst.count,
                    ),
                };
                if peer >= nranks {
                    return Err(Error::internal(format!(
                        "schedule names peer {peer} of {nranks}"
                    )));
                }
                let bytes = count * size;
                ops.push(XOp::new(
                    kind,
                    peer,
                    OpHeader {
                        bytes: bytes as u64,
                        ..hdr
                    },
                ));
            }
            order_overwrites(&mut ops);
            steps.push(ops);
        }
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

    /// Gated pieces: a receive or local copy of piece `k` finished; once all of the piece's
    /// have, the GPU stream may copy its bytes back.
    fn landed(&mut self, k: usize) {
        let Some(g) = &self.gates else { return };
        if let Some(left) = self.landing.get_mut(k) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                if let Some(f) = g.landed.get(k) {
                    f.set();
                }
            }
        }
    }

    /// What the plan is, for error messages: "AllReduce(#3, count=10, float)".
    pub fn desc(&self) -> String {
        match self.what {
            PlanWhat::Coll {
                name,
                seq,
                count,
                dtype,
            } => {
                format!("{name}(#{seq}, count={count}, {})", dtype.name())
            }
            PlanWhat::P2p { ops } => format!("Send/Recv group of {ops} operations"),
        }
    }

    pub fn is_done(&self) -> bool {
        self.cur >= self.steps.len() && self.postdiv.is_none()
    }

    /// Peers the current step still waits for.
    pub fn waiting_on(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .steps
            .get(self.cur)
            .map(|ops| {
                ops.iter()
                    .filter(|o| !o.finished && !o.kind.is_local())
                    .map(|o| o.peer)
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Moves the plan as far as the links allow without waiting. Returns whether anything
    /// moved.
    pub fn progress(
        &mut self,
        links: &mut [Option<Box<dyn Link>>],
        staging: &mut Vec<u8>,
        stats: &mut ExecStats,
    ) -> Result<bool> {
        let mut progressed = false;
        if !self.started {
            self.started = true;
            if let Some(g) = &self.gates {
                // Pieces with nothing to receive have landed already.
                for (f, _) in g.landed.iter().zip(&self.landing).filter(|(_, &n)| n == 0) {
                    f.set();
                }
            }
            if let Some(c) = &self.coll_gates {
                for (&(_, _, f), _) in c.gates.output.iter().zip(&c.left).filter(|(_, &n)| n == 0) {
                    f.set();
                }
            }
            if let Some(p) = &mut self.prescale {
                // SAFETY: `src` is the user's send buffer, valid for `elems` elements
                // (validated at enqueue); `buf` is our own allocation of the same size.
                unsafe {
                    reduce::premul(
                        self.dtype,
                        p.buf.as_mut_ptr(),
                        p.src,
                        p.elems,
                        p.scalar.as_ptr(),
                    )
                };
            }
        }
        while self.cur < self.steps.len() {
            let mut all_done = true;
            let size = self.dtype.size();
            let (dtype, arith) = (self.dtype, self.arith);
            let gates = &self.gates;
            let coll_gates = &mut self.coll_gates;
            let mut landed = Vec::new();
            let ops = &mut self.steps[self.cur];
            // Transfers first, then local copies: the copy (an all-to-all's or a gather's
            // own block, as large as what crosses the links) then runs while the engines move
            // the frames already queued and lent, instead of before any of them left.
            let order = (0..ops.len())
                .map(|i| (false, i))
                .chain((0..ops.len()).map(|i| (true, i)));
            for (copies, i) in order {
                let (before, rest) = ops.split_at_mut(i);
                let Some(op) = rest.first_mut() else { break };
                if op.finished || op.kind.is_local() != copies {
                    continue;
                }
                // A gated piece's sends and local copies wait until its bytes are in host
                // memory.
                if let (Some(g), Some(k), XKind::Send { .. } | XKind::Copy { .. }) =
                    (gates, op.piece, op.kind)
                {
                    if g.start.get(k).is_some_and(|f| !f.is_set()) {
                        all_done = false;
                        continue;
                    }
                }
                if let (Some(c), Some(addrs)) = (coll_gates.as_ref(), op.kind.local_addrs()) {
                    if !addrs.iter().all(|&p| c.ready(p, op.bytes)) {
                        all_done = false;
                        continue;
                    }
                }
                if let XKind::Copy { src, dst } = op.kind {
                    let (s0, d0, n) = (src as usize, dst as usize, op.bytes);
                    if s0 + n <= d0 || d0 + n <= s0 {
                        // Disjoint: in parts on the copy threads, if any (an all-to-all's
                        // own block, a gather's: as large as what goes over the links).
                        // SAFETY: both ranges lie inside buffers validated at enqueue (or
                        // plan-owned) and do not overlap.
                        unsafe { ccl_transports::par::copy(src, dst, n) };
                    } else if src != dst.cast_const() && n > 0 {
                        // SAFETY: both ranges are inside buffers validated at enqueue (or
                        // plan-owned); `copy` tolerates overlap.
                        unsafe { std::ptr::copy(src, dst, n) };
                    }
                    op.finished = true;
                    progressed = true;
                    landed.extend(op.lands_in);
                    if let Some(c) = coll_gates.as_mut() {
                        c.wrote(d0, n);
                    }
                    continue;
                }
                if let XKind::Reduce { src, local, dst } = op.kind {
                    // SAFETY: the three ranges lie inside buffers validated at enqueue (or
                    // plan-owned), `op.bytes` long each; the schedule lets `dst` be exactly
                    // `src` or `local` and overlap them nowhere else (elementwise in place).
                    unsafe { reduce::reduce(dtype, arith, dst, src, local, op.bytes / size) };
                    op.finished = true;
                    progressed = true;
                    if let Some(c) = coll_gates.as_mut() {
                        c.wrote(dst as usize, op.bytes);
                    }
                    continue;
                }
                // Messages between one pair of ranks are FIFO: an operation waits for the
                // earlier ones of its step with the same peer and direction -- a send only
                // until they have queued all their bytes (their wait for the link to empty
                // overlaps this one's frames; waiting for it drained the link between every
                // two pieces of a staged GPU group over the network).
                let sending = matches!(op.kind, XKind::Send { .. });
                if before.iter().any(|o| {
                    o.peer == op.peer
                        && !o.kind.is_local()
                        && matches!(o.kind, XKind::Send { .. }) == sending
                        && if sending { !o.queued() } else { !o.finished }
                }) {
                    all_done = false;
                    continue;
                }
                let link = links
                    .get_mut(op.peer)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| Error::internal(format!("no link to rank {}", op.peer)))?;
                // What earlier sends of the step have yet to queue, which this receive must
                // not overwrite.
                let before: &[XOp] = before;
                let unsent = |lo: usize, len: usize| {
                    before.iter().any(|o| {
                        o.copy_frames
                            && o.unqueued_source().is_some_and(|r| overlap(r, lo, len) > 0)
                    })
                };
                // What earlier receives of the step have yet to write, which this send must
                // not read.
                let unlanded = |lo: usize, len: usize| {
                    before
                        .iter()
                        .any(|o| o.unwritten().is_some_and(|r| overlap(r, lo, len) > 0))
                };
                progressed |= match op.kind {
                    XKind::Send { src } => send_op(
                        op,
                        src,
                        link.as_mut(),
                        staging,
                        stats,
                        coll_gates.as_ref(),
                        &unlanded,
                    )?,
                    _ => recv_op(
                        op,
                        link.as_mut(),
                        Arith {
                            dtype,
                            arith,
                            scalar: &self.scalar,
                        },
                        stats,
                        coll_gates.as_mut(),
                        &unsent,
                    )?,
                };
                if !op.finished {
                    all_done = false;
                } else {
                    landed.extend(op.lands_in);
                }
            }
            for k in landed {
                self.landed(k);
            }
            if !all_done {
                // Read the clock once per such wait, not on the busy path.
                if self.settling_since.is_none()
                    && self.steps[self.cur]
                        .iter()
                        .all(|o| o.finished || (o.queued() && matches!(o.kind, XKind::Send { .. })))
                {
                    self.settling_since = Some(std::time::Instant::now());
                }
                break;
            }
            if let Some(t) = self.settling_since.take() {
                stats.settle += t.elapsed();
                stats.settle_steps += 1;
            }
            self.cur += 1;
            progressed = true;
        }
        if self.cur >= self.steps.len() {
            if let Some((dst, elems, n)) = self.postdiv.take() {
                // SAFETY: `dst` is the user's receive buffer of `elems` elements (validated).
                unsafe { reduce::div_int(self.dtype, dst, elems, n) };
            }
        }
        Ok(progressed)
    }
}

/// Bytes of an operation that ride in its first frame, behind the header, on links whose
/// frames are over 4 times as long (a multiple of every element size).
const FIRST_FRAME_DATA: usize = 256 << 10;

fn send_op(
    op: &mut XOp,
    src: *const u8,
    link: &mut dyn Link,
    staging: &mut Vec<u8>,
    stats: &mut ExecStats,
    gates: Option<&CollGateState>,
    unlanded: &dyn Fn(usize, usize) -> bool,
) -> Result<bool> {
    // A staged piece not yet in host memory holds back the frames that read it, and so do
    // bytes an earlier receive of the step has yet to write.
    let ready = |at: usize, len: usize| {
        gates.map_or(true, |g| g.ready(src as usize + at, len))
            && !(op.after_receives && unlanded(src as usize + at, len))
    };
    let mut progressed = false;
    let max = link.max_frame();
    if op.header_done && op.done == op.bytes {
        // Everything was queued; the operation ends when the link has handed it to the OS.
        progressed |= link.flush()?;
        op.finished = !link.has_pending();
        return Ok(progressed);
    }
    while !op.finished {
        let left = op.bytes - op.done;
        let t0 = (left >= TIMED_BYTES).then(std::time::Instant::now);
        let before = op.done;
        if !op.header_done {
            // The first frame's bytes pass through `staging`, the rest go from the source
            // itself (deferrable): on links of large frames it carries at most
            // FIRST_FRAME_DATA behind the header (on small ones the extra frame cost ~3%).
            let first = if max > 4 * FIRST_FRAME_DATA {
                FIRST_FRAME_DATA
            } else {
                max
            };
            let data = left.min(max.saturating_sub(HDR_BYTES).min(first) & !15);
            if !ready(0, data) {
                break;
            }
            // Header, then the first bytes, appended (zero-filling the whole frame first cost
            // a memset as long as the copy).
            staging.clear();
            staging.resize(HDR_BYTES, 0);
            op.hdr.encode(staging);
            if data > 0 {
                // SAFETY: `src` is valid for `bytes` reads (validated at enqueue) and data <=
                // bytes; it is user (or plan-owned) memory, disjoint from `staging`.
                staging.extend_from_slice(unsafe { std::slice::from_raw_parts(src, data) });
            }
            if !link.try_send(staging)? {
                break;
            }
            op.header_done = true;
            op.done = data;
        } else {
            let data = left.min(max);
            if !ready(op.done, data) {
                break;
            }
            // SAFETY: done + data <= bytes, inside the validated source range.
            let s = unsafe { std::slice::from_raw_parts(src.add(op.done), data) };
            let queued = if op.copy_frames {
                // A receive of this step overwrites the source once these bytes are queued.
                link.try_send(s)?
            } else {
                // SAFETY: the source (a user buffer validated at enqueue, or plan-owned) stays
                // as it is until this operation finishes, which waits for `has_pending` to be
                // false; a failed plan quiesces its links before its buffers go back
                // (group::drive).
                unsafe { link.try_send_deferred(s) }?
            };
            if !queued {
                break;
            }
            op.done += data;
        }
        if let Some(t0) = t0 {
            stats.send_busy += t0.elapsed();
            stats.send_bytes += (op.done - before) as u64;
        }
        progressed = true;
        if op.done == op.bytes {
            progressed |= link.flush()?;
            op.finished = !link.has_pending();
            break;
        }
    }
    Ok(progressed)
}

/// How a plan's receives fold what arrives: its type, reduction and pre-multiplier.
#[derive(Clone, Copy)]
struct Arith<'a> {
    dtype: DataType,
    arith: ReduceKind,
    scalar: &'a [u8; 8],
}

fn recv_op(
    op: &mut XOp,
    link: &mut dyn Link,
    Arith {
        dtype,
        arith,
        scalar,
    }: Arith<'_>,
    stats: &mut ExecStats,
    mut gates: Option<&mut CollGateState>,
    unsent: &dyn Fn(usize, usize) -> bool,
) -> Result<bool> {
    let size = dtype.size();
    let mut progressed = false;
    while !op.finished {
        if let Some(g) = gates.as_deref() {
            // The next frame's local input (and, in place, its destination) must be in host
            // memory before it is taken; its length is at most what is left.
            let left = op.bytes - op.done;
            let (dst, local) = match op.kind {
                XKind::Recv { dst } => (dst as usize, dst as usize),
                XKind::RecvReduce { local, dst, .. } => (dst as usize, local as usize),
                _ => (0, 0),
            };
            if !(g.ready(dst + op.done, left.min(link.max_frame()))
                && g.ready(local + op.done, left.min(link.max_frame())))
            {
                break;
            }
        }
        let Some(frame) = link.peek()? else { break };
        let data = if op.header_done {
            frame
        } else {
            let theirs = OpHeader::decode(frame).ok_or_else(|| {
                Error::invalid_usage(format!(
                    "rank {} sent data this rank did not expect (no operation header)",
                    op.peer
                ))
            })?;
            if theirs != op.hdr {
                return Err(Error::invalid_usage(format!(
                    "mismatched operations: rank {} issued {} while this rank expects {}",
                    op.peer,
                    theirs.describe(),
                    op.hdr.describe()
                )));
            }
            &frame[HDR_BYTES..]
        };
        let n = data.len();
        if n > op.bytes - op.done || n % size != 0 {
            return Err(Error::invalid_usage(format!(
                "rank {} sent {n} bytes where {} remained of this operation",
                op.peer,
                op.bytes - op.done
            )));
        }
        // Addresses as integers: the parts may run on the copy threads (ccl_transports::par).
        let (from, done) = (data.as_ptr() as usize, op.done);
        // (what, destination, local input): 0 copy, 1 reduce, 2 pre-multiplied sum, 3 reduce
        // with the local operand first.
        let (what, dst, local) = match op.kind {
            XKind::Recv { dst } => (0u8, dst as usize, 0usize),
            XKind::RecvReduce {
                local,
                dst,
                fused,
                local_first,
            } => {
                let what = match (fused, local_first) {
                    (true, _) => 2,
                    (false, true) => 3,
                    (false, false) => 1,
                };
                (what, dst as usize, local as usize)
            }
            _ => (4, 0, 0),
        };
        if op.after_sends && unsent(dst + done, n) {
            // This rank's own send of these bytes has not left yet (in place).
            break;
        }
        // A frame the link wrote straight into the destination lent to it (below) is where
        // it belongs already; one shown anywhere else inside the destination means the two
        // sides cut the operation into frames differently, which would corrupt it.
        let lent_frame = what == 0 && n > 0 && (dst..dst + op.bytes).contains(&from);
        if lent_frame && from != dst + done {
            return Err(Error::internal(format!(
                "a frame from rank {} arrived at offset {} of its destination, expected {done}",
                op.peer,
                from - dst
            )));
        }
        if lent_frame {
            stats.placed_bytes += n as u64;
        } else if n > 0 {
            let part = |r: std::ops::Range<usize>| {
                let (src, len, at) = ((from + r.start) as *const u8, r.len(), done + r.start);
                let (d, l) = ((dst + at) as *mut u8, (local + at) as *const u8);
                // SAFETY: dst/local ranges [done, done+n) lie inside buffers validated at
                // enqueue (or plan-owned) and r lies inside [0, n), element-aligned; `data` is
                // the link's frame, disjoint from user memory and left in place until every
                // part has run; `scalar` holds one element of `dtype`.
                unsafe {
                    match what {
                        0 => std::ptr::copy_nonoverlapping(src, d, len),
                        1 => reduce::reduce(dtype, arith, d, src, l, len / size),
                        2 => reduce::premul_add(dtype, d, l, src, len / size, scalar.as_ptr()),
                        3 => reduce::reduce(dtype, arith, d, l, src, len / size),
                        _ => {}
                    }
                }
            };
            let t0 = (n >= TIMED_BYTES).then(std::time::Instant::now);
            ccl_transports::par::for_parts(n, size, &part);
            if let Some(t0) = t0 {
                stats.recv_busy += t0.elapsed();
                stats.recv_bytes += n as u64;
            }
        }
        if let Some(g) = gates.as_deref_mut() {
            g.wrote(dst + done, n);
        }
        op.done += n;
        op.header_done = true;
        link.pop();
        progressed = true;
        if op.done == op.bytes {
            op.finished = true;
        } else if what == 0 && gates.is_none() && !op.after_sends {
            // The rest of the operation comes in frames cut as min(left, the largest), so the
            // link can be told where each goes (it checks that the sender's largest frame is
            // its own before it takes the offer).
            // SAFETY: the rest of the destination, validated at enqueue (or plan-owned), is
            // written by nothing but this operation's frames until it finishes; a failed plan
            // quiesces its links (which withdraws the loan) before its buffers go back
            // (group::drive).
            unsafe { link.lend((dst + op.done) as *mut u8, op.bytes - op.done) };
        }
    }
    Ok(progressed)
}

/// In-memory links for tests of plans (here and in `pieces`).
#[cfg(test)]
pub(crate) mod mem_link {
    #![allow(clippy::unwrap_used)] // tests: a poisoned lock is a failed test

    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use ccl_transports::Link;

    /// One direction of a pair: frames in order.
    pub(crate) type Wire = Arc<Mutex<VecDeque<Vec<u8>>>>;
    /// Each rank's links, indexed by peer (`None` for itself).
    pub(crate) type Links = Vec<Vec<Option<Box<dyn Link>>>>;

    struct MemLink {
        out: Wire,
        inp: Wire,
        head: Option<Vec<u8>>,
        max_frame: usize,
        cap: usize,
    }

    impl Link for MemLink {
        fn max_frame(&self) -> usize {
            self.max_frame
        }
        fn try_send(&mut self, frame: &[u8]) -> ccl_transports::Result<bool> {
            let mut q = self.out.lock().unwrap();
            if q.len() >= self.cap {
                return Ok(false);
            }
            q.push_back(frame.to_vec());
            Ok(true)
        }
        fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
            if self.head.is_none() {
                self.head = self.inp.lock().unwrap().pop_front();
            }
            Ok(self.head.as_deref())
        }
        fn pop(&mut self) {
            self.head = None;
        }
        fn flush(&mut self) -> ccl_transports::Result<bool> {
            Ok(false)
        }
        fn has_pending(&self) -> bool {
            false
        }
        fn kind(&self) -> &'static str {
            "mem"
        }
    }

    /// Two ranks' links to each other, as `links[rank][peer]`: frames of at most `max_frame`
    /// bytes, at most `cap` of them queued per direction (then the sender stalls, as on a real
    /// link); and the two wires (rank 0's outgoing, rank 1's), to check they drained.
    #[allow(clippy::type_complexity)]
    pub(crate) fn pair(max_frame: usize, cap: usize) -> (Links, [Wire; 2]) {
        pair_capped(max_frame, [cap, cap])
    }

    /// As [`pair`], with rank `r`'s outgoing wire holding at most `caps[r]` frames.
    pub(crate) fn pair_capped(max_frame: usize, caps: [usize; 2]) -> (Links, [Wire; 2]) {
        let (a, b): (Wire, Wire) = Default::default();
        let link = |out: &Wire, inp: &Wire, cap: usize| -> Option<Box<dyn Link>> {
            Some(Box::new(MemLink {
                out: out.clone(),
                inp: inp.clone(),
                head: None,
                max_frame,
                cap,
            }))
        };
        let links = vec![
            vec![None, link(&a, &b, caps[0])],
            vec![link(&b, &a, caps[1]), None],
        ];
        (links, [a, b])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::task::{Reduction, Task, TaskKind};
    use ccl_cuda::{DataType, ReduceKind};
    use std::sync::{Arc, Mutex};

    /// What a [`HoldingLink`] was sent, and whether it still says it holds bytes.
    #[derive(Default)]
    struct Held {
        sent: Vec<Vec<u8>>,
        holding: bool,
    }

    /// A link that takes every frame at once but says it still holds bytes until told
    /// otherwise (as a network link may until its peer acknowledges them).
    struct HoldingLink(Arc<Mutex<Held>>);

    impl Link for HoldingLink {
        fn max_frame(&self) -> usize {
            64 + HDR_BYTES
        }
        fn try_send(&mut self, frame: &[u8]) -> ccl_transports::Result<bool> {
            self.0.lock().unwrap().sent.push(frame.to_vec());
            Ok(true)
        }
        fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
            Ok(None)
        }
        fn pop(&mut self) {}
        fn flush(&mut self) -> ccl_transports::Result<bool> {
            Ok(false)
        }
        fn has_pending(&self) -> bool {
            self.0.lock().unwrap().holding
        }
        fn kind(&self) -> &'static str {
            "holding"
        }
    }

    /// Two sends to one peer in one group: the second queues its frames while the first
    /// still waits for the link to push its bytes out (waiting drained the link between
    /// every two pieces of a staged GPU group), in order; neither completes before the link
    /// is empty.
    #[test]
    fn a_send_queues_behind_an_earlier_one_that_waits_for_the_link_to_empty() {
        let (a, b) = (vec![1u8; 100], vec![2u8; 40]);
        let send = |src: &[u8]| Task {
            kind: TaskKind::Send { peer: 1 },
            send: src.as_ptr() as usize,
            recv: 0,
            count: src.len(),
            dtype: DataType::Uint8,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        };
        let mut seqs = vec![(0u64, 0u64); 2];
        let mut plan = Plan::p2p(&[send(&a), send(&b)], 0, 2, &mut seqs, None).unwrap();
        let held = Arc::new(Mutex::new(Held {
            holding: true,
            ..Held::default()
        }));
        let mut links: Vec<Option<Box<dyn Link>>> =
            vec![None, Some(Box::new(HoldingLink(Arc::clone(&held))))];
        let mut staging = Vec::new();
        assert!(plan
            .progress(&mut links, &mut staging, &mut ExecStats::default())
            .unwrap());
        assert!(!plan.is_done(), "complete while the link still holds bytes");
        let frames = std::mem::take(&mut held.lock().unwrap().sent);
        // a: a header frame carrying 64 of its bytes, then 36; b: a header frame with 40.
        let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
        assert_eq!(lens, [HDR_BYTES + 64, 36, HDR_BYTES + 40]);
        let payload: Vec<u8> = [
            &frames[0][HDR_BYTES..],
            &frames[1][..],
            &frames[2][HDR_BYTES..],
        ]
        .concat();
        assert_eq!(payload, [a.clone(), b.clone()].concat());
        held.lock().unwrap().holding = false;
        plan.progress(&mut links, &mut staging, &mut ExecStats::default())
            .unwrap();
        assert!(plan.is_done());
    }

    /// A link that delivers `frames` (as a sender cut them) and, like an mpt link that
    /// places receives, writes each frame into the loan it was given before showing it: the
    /// next frame at the loan's start, the one after `max_frame` further on. `skew` shifts
    /// where it writes (a sender that cut its frames differently).
    struct PlacingLink {
        frames: std::collections::VecDeque<Vec<u8>>,
        loan: Option<(usize, usize)>,
        shown: Option<(usize, usize)>,
        skew: usize,
    }

    impl Link for PlacingLink {
        fn max_frame(&self) -> usize {
            64 + HDR_BYTES
        }
        fn try_send(&mut self, _: &[u8]) -> ccl_transports::Result<bool> {
            Ok(false)
        }
        fn peek(&mut self) -> ccl_transports::Result<Option<&[u8]>> {
            let Some(f) = self.frames.front() else {
                return Ok(None);
            };
            let at = match self.loan {
                Some((addr, len)) if len >= f.len() => {
                    let at = addr + self.skew;
                    // SAFETY: the executor lent [addr, addr + len) (`Link::lend`); the test
                    // keeps `skew` inside the destination it owns.
                    unsafe { std::ptr::copy_nonoverlapping(f.as_ptr(), at as *mut u8, f.len()) };
                    at
                }
                _ => f.as_ptr() as usize,
            };
            self.shown = Some((at, f.len()));
            // SAFETY: `at` holds the frame's bytes (just written, or the frame itself), alive
            // until `pop`.
            Ok(Some(unsafe {
                std::slice::from_raw_parts(at as *const u8, f.len())
            }))
        }
        fn pop(&mut self) {
            if let (Some((_, n)), Some((addr, len))) = (self.shown.take(), self.loan) {
                if len >= n {
                    let step = self.max_frame().min(len);
                    self.loan = Some((addr + step, len - step));
                }
            }
            self.frames.pop_front();
        }
        fn flush(&mut self) -> ccl_transports::Result<bool> {
            Ok(false)
        }
        fn has_pending(&self) -> bool {
            false
        }
        unsafe fn lend(&mut self, dst: *mut u8, len: usize) {
            self.loan = Some((dst as usize, len));
        }
        fn kind(&self) -> &'static str {
            "placing"
        }
    }

    /// The frames a send of `src` to rank 1 is cut into.
    fn frames_of(src: &[u8]) -> Vec<Vec<u8>> {
        frames_of_send(src, false)
    }

    /// The frames a send of `src` to rank 1 is cut into, `fold` as [`Task::fold`].
    fn frames_of_send(src: &[u8], fold: bool) -> Vec<Vec<u8>> {
        let t = Task {
            fold,
            ..p2p_task(
                TaskKind::Send { peer: 1 },
                src.as_ptr() as usize,
                0,
                src.len(),
            )
        };
        let mut plan = Plan::p2p(&[t], 0, 2, &mut [(0, 0); 2], None).unwrap();
        let held = Arc::new(Mutex::new(Held::default()));
        let mut links: Vec<Option<Box<dyn Link>>> =
            vec![None, Some(Box::new(HoldingLink(Arc::clone(&held))))];
        plan.progress(&mut links, &mut Vec::new(), &mut ExecStats::default())
            .unwrap();
        assert!(plan.is_done());
        let frames = std::mem::take(&mut held.lock().unwrap().sent);
        frames
    }

    fn p2p_task(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
        Task {
            kind,
            send,
            recv,
            count,
            dtype: DataType::Uint8,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        }
    }

    /// Receives `src`'s frames from rank 1 over a [`PlacingLink`].
    fn receive_placed(src: &[u8], skew: usize) -> (Result<bool>, Vec<u8>, ExecStats) {
        receive_marked(src, skew, (false, false))
    }

    /// [`receive_placed`] with the send's and the receive's [`Task::fold`].
    fn receive_marked(
        src: &[u8],
        skew: usize,
        (sent_fold, recv_fold): (bool, bool),
    ) -> (Result<bool>, Vec<u8>, ExecStats) {
        let mut dst = vec![0u8; src.len()];
        let t = Task {
            fold: recv_fold,
            ..p2p_task(
                TaskKind::Recv { peer: 1 },
                0,
                dst.as_mut_ptr() as usize,
                dst.len(),
            )
        };
        let mut plan = Plan::p2p(&[t], 0, 2, &mut [(0, 0); 2], None).unwrap();
        let link = PlacingLink {
            frames: frames_of_send(src, sent_fold).into(),
            loan: None,
            shown: None,
            skew,
        };
        let mut links: Vec<Option<Box<dyn Link>>> = vec![None, Some(Box::new(link))];
        let mut stats = ExecStats::default();
        let r = plan.progress(&mut links, &mut Vec::new(), &mut stats);
        let done = r.as_ref().is_ok_and(|_| plan.is_done());
        (r.map(|_| done), dst, stats)
    }

    /// A receive lends the rest of its destination after each frame; frames shown in place
    /// are not copied again. 64 + 3 x 112 bytes: the header frame (64 of them) is copied, the
    /// three full frames after it are placed.
    #[test]
    fn a_receive_takes_frames_placed_in_its_destination_without_copying_them() {
        let src: Vec<u8> = (0..400u32).map(|i| (i * 7 + 1) as u8).collect();
        let lens: Vec<usize> = frames_of(&src).iter().map(Vec::len).collect();
        assert_eq!(lens, [HDR_BYTES + 64, 112, 112, 112]);
        let (r, dst, stats) = receive_placed(&src, 0);
        assert!(r.unwrap(), "receive not done");
        assert_eq!(dst, src);
        assert_eq!(stats.placed_bytes, 336);
    }

    /// The sends and receives the GPU path makes of a folded reduction meet only their own
    /// kind: a user's send of the same size met by one (the ranks called them in crossed
    /// orders) is a mismatch error naming it, not the other operation's bytes.
    #[test]
    fn a_folded_reductions_transfer_meets_only_another_such_transfer() {
        let src: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        for marks in [(false, false), (true, true)] {
            let (r, dst, _) = receive_marked(&src, 0, marks);
            assert!(r.unwrap(), "{marks:?}: receive not done");
            assert_eq!(dst, src);
        }
        for marks in [(true, false), (false, true)] {
            let (r, dst, _) = receive_marked(&src, 0, marks);
            let e = r.expect_err("crossed transfers met");
            assert!(
                e.to_string().contains("mismatched operations")
                    && e.to_string().contains("folded on the GPU"),
                "{marks:?}: {e}"
            );
            assert!(dst.iter().all(|&b| b == 0), "{marks:?}: bytes landed");
        }
    }

    /// A frame shown inside the destination but not where it belongs (the two sides cut
    /// the operation differently) is an error, not a silent misorder.
    #[test]
    fn a_frame_placed_at_the_wrong_offset_is_an_error() {
        let src = vec![5u8; 400];
        let (r, _, _) = receive_placed(&src, 16);
        let e = r.unwrap_err().to_string();
        assert!(e.contains("arrived at offset"), "{e}");
    }

    /// A two-rank all-reduce on piece gates: nothing that reads a piece moves before its input
    /// flag is set (flags set here in reverse order, one at a time); each output flag is set
    /// only once its piece holds the final sum; at the end every output flag is set and the
    /// result is exact. Out of place and in place.
    /// Runs rank `ahead`'s plan alone for a few rounds, then both to the end.
    fn run_ahead(plans: &mut [Plan], links: &mut mem_link::Links, ahead: usize) {
        let mut stats = ExecStats::default();
        for _ in 0..5 {
            plans[ahead]
                .progress(&mut links[ahead], &mut Vec::new(), &mut stats)
                .unwrap();
        }
        for _ in 0..400 {
            for (r, p) in plans.iter_mut().enumerate() {
                p.progress(&mut links[r], &mut Vec::new(), &mut stats)
                    .unwrap();
            }
        }
    }

    /// Two ranks' buffers for an all-reduce of `u32` sums, checked exactly.
    struct TwoRanks {
        send: Vec<Vec<u32>>,
        recv: Vec<Vec<u32>>,
        want: Vec<u32>,
        in_place: bool,
    }

    impl TwoRanks {
        fn new(n: usize, in_place: bool) -> TwoRanks {
            let send: Vec<Vec<u32>> = (0..2u32)
                .map(|r| (0..n as u32).map(|i| i * 3 + r * 100_000 + 1).collect())
                .collect();
            let want = (0..n).map(|i| send[0][i] + send[1][i]).collect();
            TwoRanks {
                recv: vec![vec![0; n]; 2],
                send,
                want,
                in_place,
            }
        }

        /// Rank `r`'s all-reduce (in place: the send buffer is the output).
        fn task(&mut self, r: usize) -> Task {
            let sp = self.send[r].as_mut_ptr() as usize;
            Task {
                kind: TaskKind::Coll(ccl_collectives::Collective::AllReduce),
                send: sp,
                recv: if self.in_place {
                    sp
                } else {
                    self.recv[r].as_mut_ptr() as usize
                },
                count: self.want.len(),
                dtype: DataType::Uint32,
                red: Reduction::Plain(ReduceKind::Sum),
                stream: 0,
                fold: false,
            }
        }

        fn out(&self, r: usize) -> &[u32] {
            if self.in_place {
                &self.send[r]
            } else {
                &self.recv[r]
            }
        }
    }

    #[test]
    fn a_collective_on_piece_gates_reads_only_arrived_pieces_and_releases_finished_ones() {
        use ccl_collectives::{schedule, Algorithm, Collective};
        const N: usize = 120; // u32 elements: 480 bytes, 4 pieces of 120 bytes
        const PIECE: usize = 120;
        for in_place in [false, true] {
            let mut bufs = TwoRanks::new(N, in_place);
            // Flag words: [rank][piece] inputs, outputs.
            let words: Vec<Vec<AtomicU32>> = (0..4)
                .map(|_| (0..4).map(|_| AtomicU32::new(0)).collect())
                .collect();
            let (mut links, [a, b]) = mem_link::pair(64 + HDR_BYTES, usize::MAX);
            let mut plans = Vec::new();
            for r in 0..2 {
                let task = bufs.task(r);
                let (sp, rp) = (task.send, task.recv);
                let sched = schedule(Collective::AllReduce, Algorithm::Ring, r, 2, N).unwrap();
                let piece = |base: usize, k: usize, w: &AtomicU32| {
                    // SAFETY: the words outlive the plans (dropped at the end of the test).
                    (base + k * PIECE, base + (k + 1) * PIECE, unsafe {
                        Flag::new(w, 1)
                    })
                };
                let gates = CollGates {
                    input: (0..4).map(|k| piece(sp, k, &words[r][k])).collect(),
                    output: (0..4).map(|k| piece(rp, k, &words[2 + r][k])).collect(),
                };
                plans.push(Plan::collective(&task, &sched, r, 2, 1, Some(&gates)).unwrap());
            }
            let mut stats = ExecStats::default();
            let mut drive = |plans: &mut Vec<Plan>| {
                for _ in 0..50 {
                    for (r, p) in plans.iter_mut().enumerate() {
                        p.progress(&mut links[r], &mut Vec::new(), &mut stats)
                            .unwrap();
                    }
                }
            };
            drive(&mut plans);
            assert!(a.lock().unwrap().is_empty() && b.lock().unwrap().is_empty());
            let (out, want) = (|r: usize| bufs.out(r), &bufs.want);
            let mut released_early = 0;
            for k in (0..4).rev() {
                for w in words.iter().take(2) {
                    w[k].store(1, Ordering::Release);
                }
                drive(&mut plans);
                for r in 0..2 {
                    for j in 0..4 {
                        if words[2 + r][j].load(Ordering::Acquire) == 1 {
                            released_early += (k > 0) as usize;
                            let e = (j + 1) * PIECE / 4;
                            assert_eq!(out(r)[j * PIECE / 4..e], want[j * PIECE / 4..e]);
                        }
                    }
                }
            }
            assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
            // Each rank's own half is final after the reduce-scatter, before the last input.
            assert!(released_early > 0, "in place {in_place}");
            for r in 0..2 {
                assert_eq!(out(r), want, "rank {r} in place {in_place}");
                assert!(words[2 + r].iter().all(|w| w.load(Ordering::Acquire) == 1));
            }
            drop(plans);
        }
    }

    /// A two-rank ring all-reduce with its steps run as one (`one_step`): the second half's
    /// send forwards each frame only once the reduce-scatter has folded it, and in place the
    /// all-gather's receive overwrites the first half only once its send has taken it; exact
    /// sums on both ranks whichever rank runs ahead (without the forwarding rule rank 1 gets
    /// unreduced bytes).
    #[test]
    fn a_ring_in_one_step_forwards_only_what_has_landed() {
        use ccl_collectives::{one_step, schedule, Algorithm, Collective};
        const N: usize = 100;
        for in_place in [false, true] {
            for ahead in 0..2 {
                let mut bufs = TwoRanks::new(N, in_place);
                // The rank ahead may queue everything it sends at once; the other one frame.
                let mut caps = [1, 1];
                caps[ahead] = 1000;
                let (mut links, _) = mem_link::pair_capped(16 + HDR_BYTES, caps);
                let mut plans = Vec::new();
                for r in 0..2 {
                    let task = bufs.task(r);
                    let sched = one_step(
                        schedule(Collective::AllReduce, Algorithm::Ring, r, 2, N).unwrap(),
                    );
                    let plan = Plan::collective(&task, &sched, r, 2, 1, None).unwrap();
                    assert_eq!(plan.steps.len(), 1);
                    assert!(plan.steps[0][2].after_receives, "rank {r}");
                    assert_eq!(plan.steps[0][0].copy_frames, in_place, "rank {r}");
                    plans.push(plan);
                }
                run_ahead(&mut plans, &mut links, ahead);
                assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
                for r in 0..2 {
                    assert_eq!(
                        bufs.out(r),
                        bufs.want,
                        "rank {r} in place {in_place} ahead {ahead}"
                    );
                }
                drop(plans);
            }
        }
    }

    /// The two-rank exchange all-reduce in place: all of the peer's frames are already waiting
    /// when rank 0 starts, and rank 0's link takes one frame at a time, so the fold could
    /// overwrite input that rank 0 has yet to send; each frame is held until the send has
    /// queued (copied) what it covers, and both ranks end with the exact sums (without the
    /// hold rank 1 gets rank 0's partly folded input). Out of place nothing is held.
    #[test]
    fn an_in_place_exchange_folds_a_frame_only_after_sending_what_it_overwrites() {
        const N: usize = 100; // u32: 400 bytes, 16-byte frames after the first
        for in_place in [false, true] {
            let mut bufs = TwoRanks::new(N, in_place);
            let (mut links, _) = mem_link::pair_capped(16 + HDR_BYTES, [1, 1000]);
            let mut plans = Vec::new();
            for r in 0..2 {
                let task = bufs.task(r);
                let sched = ccl_collectives::allreduce_exchange(r, 2, N).unwrap();
                let plan = Plan::collective(&task, &sched, r, 2, 1, None).unwrap();
                let ops = &plan.steps[0];
                assert_eq!(ops.len(), 2);
                assert_eq!(ops[0].copy_frames, in_place, "rank {r}");
                assert_eq!(ops[1].after_sends, in_place, "rank {r}");
                plans.push(plan);
            }
            // Rank 1 alone first: its frames wait in rank 0's link.
            run_ahead(&mut plans, &mut links, 1);
            assert!(plans.iter().all(Plan::is_done), "in place {in_place}");
            for r in 0..2 {
                assert_eq!(bufs.out(r), bufs.want, "rank {r} in place {in_place}");
            }
            drop(plans);
        }
    }
}
