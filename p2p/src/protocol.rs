//! The cuda-ipc protocol without CUDA: lowering a group into chunk transfers, ordering them
//! by logical time, and queueing the flag waits, flag writes, copies and kernels on a
//! [`Device`] — CUDA streams in production ([`super::CudaDevice`]), a simulator in the tests
//! (`sim.rs`), which runs every collective with arbitrary stream interleavings and with all
//! streams merged into one hardware queue.
//!
//! Flags (one 32-bit word per 64-byte line in each rank's device memory): per sender and per
//! receive slot a `ready` word (the sender writes the chunk's sequence number after its copy
//! into the slot) and a `credit` word in the sender's memory (the receiver writes it once the
//! slot is consumed); per receive lane a `local` word (a reduction finished, for sends of
//! reduced data). Every word only grows: a slot is reused only after its credit, so its
//! `ready` and `credit` values come in order whatever lanes carry them.

use std::collections::HashMap;

use ccl_collectives::Collective;
use ccl_cuda::{DataType, ReduceKind};

use crate::error::{Error, Result};
use crate::layout::{Lane, Layout};
use ccl_collectives::task::{buffer_counts, Reduction, Task, TaskKind};

/// Smallest chunk a piece is cut into, unless the piece itself is smaller.
pub(crate) const MIN_CHUNK: usize = 1 << 20;

/// Chunk size for a piece of `bytes`: about a quarter of the piece (so even a mid-sized piece
/// pipelines), between [`MIN_CHUNK`] and the slot size. Both sides compute it from the piece
/// alone, which they agree on.
pub(crate) fn piece_chunk(bytes: usize, slot: usize) -> usize {
    (bytes / 4)
        .clamp(MIN_CHUNK.min(slot), slot)
        .next_multiple_of(4096)
        .min(slot)
}

/// A kernel launch, with the numerics of [`ccl_cuda::host::reduce`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kernel {
    /// `dst = a (op) b`.
    Reduce {
        dtype: DataType,
        op: ReduceKind,
        dst: u64,
        a: u64,
        b: u64,
        n: usize,
    },
    /// `dst = ((srcs[0] (op) srcs[1]) (op) srcs[2]) ...` over the first `k` sources (3..=8),
    /// in one kernel; bit for bit a chain of [`Kernel::Reduce`] in source order.
    ReduceN {
        dtype: DataType,
        op: ReduceKind,
        dst: u64,
        srcs: [u64; ccl_cuda::cuda::source::REDUCE_N_MAX],
        k: usize,
        n: usize,
    },
    /// `dst = src * scalar`.
    PreMul {
        dtype: DataType,
        dst: u64,
        src: u64,
        n: usize,
        scalar: [u8; 8],
    },
    /// `dst = src * scalar + acc`, rounded once.
    PreMulAdd {
        dtype: DataType,
        dst: u64,
        src: u64,
        acc: u64,
        n: usize,
        scalar: [u8; 8],
    },
    /// `dst /= divisor`.
    DivInt {
        dtype: DataType,
        dst: u64,
        n: usize,
        divisor: u64,
    },
}

/// [`Device::wait_copy_signal`] as a stream wait, a copy and a stream write.
pub(crate) fn wait_copy_signal_in_three<D: Device + ?Sized>(
    dev: &mut D,
    lane: Lane,
    arrive: (u64, u32),
    (dst, src, bytes): (u64, u64, usize),
    done: (u64, u32),
) -> Result<()> {
    dev.wait(lane, arrive.0, arrive.1)?;
    dev.copy(lane, dst, src, bytes)?;
    dev.write(lane, done.0, done.1)
}

/// What a [`Device::wait_long`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LongWait {
    /// A direct transfer's first side, for the peer's copy.
    Transfer,
    /// A direct reduction, for its peers' pushes.
    Reduction,
}

/// What the protocol queues. Each call appends to one lane; lanes run concurrently, in order
/// within a lane.
/// A small captured all-reduce in one kernel ([`Device::fused_all_reduce`]).
#[derive(Debug, Clone)]
pub(crate) struct FusedAllReduce {
    pub dtype: DataType,
    pub op: ReduceKind,
    pub dst: u64,
    /// Every rank's input, in rank order, as this rank reaches it.
    pub srcs: Vec<u64>,
    pub n: usize,
    /// Per partner: (this rank's word there, the partner's word here), before and after.
    pub inputs: Vec<(u64, u64)>,
    pub done: Vec<(u64, u64)>,
    /// `dst` overlaps this rank's input.
    pub inplace: bool,
}

/// A captured group that only copies, in one kernel ([`Device::fused_copies`]).
#[derive(Debug, Clone)]
pub(crate) struct FusedCopies {
    /// (dst, src, bytes), as this rank reaches them: the first phase's, and (with `halfway`)
    /// the second's.
    pub copies: Vec<(u64, u64, usize)>,
    pub second: Vec<(u64, u64, usize)>,
    /// As [`FusedAllReduce`]'s; `halfway` empty: no middle handshake.
    pub inputs: Vec<(u64, u64)>,
    pub halfway: Vec<(u64, u64)>,
    pub done: Vec<(u64, u64)>,
}

pub(crate) trait Device {
    /// Later work on `lane` waits until the word at `addr` reaches `value` (cyclic `>=`).
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()>;
    /// [`Device::wait`] for a wait that lasts as long as a peer takes, with nothing of this
    /// operation queued behind it on `lane`: a device may run it so that other streams'
    /// work is not held up meanwhile. `of`: what it waits for (devices may treat the two
    /// kinds differently).
    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        let _ = of;
        self.wait(lane, addr, value)
    }
    /// A direct transfer's second side: wait until the word at `arrive.0` reaches
    /// `arrive.1`, copy `bytes` from `src` to `dst`, then write `done.1` to the word at
    /// `done.0` (the copy visible first). A device may run all three as one kernel, so that
    /// no command of ours waits queued behind the wait.
    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        copy: (u64, u64, usize),
        done: (u64, u32),
    ) -> Result<()> {
        wait_copy_signal_in_three(self, lane, arrive, copy, done)
    }
    /// [`Device::wait_copy_signal`] for a copy from a peer's buffer into ours whose two
    /// buffers the peer's GPU can reach as well: a device may have that GPU's copy engine run
    /// the copy ([`Device::pull`]), so that ours stays free for this rank's own pushes.
    /// `there`: the source as this process's context on the peer's GPU maps it.
    fn wait_pull_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (dst, src, bytes): (u64, u64, usize),
        there: u64,
        done: (u64, u32),
    ) -> Result<()> {
        if self.copy_signal_is_kernel() {
            return self.wait_copy_signal(lane, arrive, (dst, src, bytes), done);
        }
        self.wait(lane, arrive.0, arrive.1)?;
        self.pull(lane, dst, (src, there), bytes)?;
        self.write(lane, done.0, done.1)
    }
    /// The copy of [`Device::wait_pull_signal`] (the source as our context and as the peer
    /// GPU's map it): ordered on `lane` like [`Device::copy`], whichever GPU's engine runs it.
    fn pull(
        &mut self,
        lane: Lane,
        dst: u64,
        (src, _there): (u64, u64),
        bytes: usize,
    ) -> Result<()> {
        self.copy(lane, dst, src, bytes)
    }
    /// A captured group that is one small all-reduce, as one kernel that does the group's two
    /// handshakes itself ([`super::captured`]); `false`: this device has no such kernel, and
    /// the caller queues the handshakes and the reduction as parts.
    fn fused_all_reduce(&mut self, lane: Lane, f: &FusedAllReduce) -> Result<bool> {
        let _ = (lane, f);
        Ok(false)
    }
    /// [`Device::fused_all_reduce`] for a captured group that only copies.
    fn fused_copies(&mut self, lane: Lane, f: &FusedCopies) -> Result<bool> {
        let _ = (lane, f);
        Ok(false)
    }
    /// Writes `value` to the word at `addr` after earlier work on `lane`, whose writes are
    /// visible first.
    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()>;
    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()>;
    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()>;
    /// Later work on each of `lanes` waits for what [`Lane::User`] has queued so far.
    fn fork(&mut self, lanes: &[Lane]) -> Result<()>;
    /// Later work on [`Lane::User`] waits for what each of `lanes` has queued so far.
    fn join(&mut self, lanes: &[Lane]) -> Result<()>;
    /// Queues `ops` in order on `lane`; a device may do it with one call
    /// ([`Batched`] gathers them).
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        for op in ops {
            match *op {
                FlagOp::Wait(addr, value) => self.wait(lane, addr, value)?,
                FlagOp::Write(addr, value) => self.write(lane, addr, value)?,
            }
        }
        Ok(())
    }
    /// Whether [`Device::wait_long`] of this kind is something other than a flag wait (a
    /// kernel), which [`Batched`] must not hold back.
    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        let _ = of;
        false
    }
    /// Whether [`Device::wait_copy_signal`] is something other than a wait, a copy and a write.
    fn copy_signal_is_kernel(&self) -> bool {
        false
    }
}

/// A flag wait ([`Device::wait`]) or write ([`Device::write`]): (address, value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagOp {
    Wait(u64, u32),
    Write(u64, u32),
}

/// A [`Device`] that holds back consecutive flag waits and writes on one lane and hands them
/// over with one [`Device::flag_ops`]: a zero-SM 8-byte operation is host-bound, and on the
/// GPU machine a write and a wait cost 1.13 us of host time as one `cuStreamBatchMemOp`
/// against 2.0 as two calls (`tests/gpu/host_costs.cu`). Anything else, on any lane, first
/// hands over what is held, so everything reaches the inner device in the order it was
/// queued (which the single hardware queue of `CUDA_DEVICE_MAX_CONNECTIONS=1` needs).
/// [`Batched::flush`] before a host wait on a peer (a held "here" flag would hold the peer
/// up) and when done; dropping it flushes too.
/// Most flag operations [`Batched`] hands over at once (`cuStreamBatchMemOp` takes fewer than
/// 256; a group of many sends queues one "here" flag per send).
pub(crate) const MAX_FLAG_BATCH: usize = 128;

pub(crate) struct Batched<'d> {
    inner: &'d mut dyn Device,
    /// The held operations (one buffer for the wrapper's life) and their lane.
    held: Vec<FlagOp>,
    lane: Lane,
}

impl<'d> Batched<'d> {
    pub fn new(inner: &'d mut dyn Device) -> Batched<'d> {
        Batched {
            inner,
            held: Vec::new(),
            lane: Lane::User,
        }
    }

    /// Hands the held flag operations to the inner device.
    pub fn flush(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let r = self.inner.flag_ops(self.lane, &self.held);
        self.held.clear();
        r
    }

    fn hold(&mut self, lane: Lane, op: FlagOp) -> Result<()> {
        if !self.held.is_empty() && (self.lane != lane || self.held.len() >= MAX_FLAG_BATCH) {
            self.flush()?;
        }
        self.lane = lane;
        self.held.push(op);
        Ok(())
    }
}

impl Drop for Batched<'_> {
    fn drop(&mut self) {
        // An error path may leave flag operations held: they are queued all the same, as
        // without batching (a peer may be waiting on a "here" or "done" among them).
        if let Err(e) = self.flush() {
            tracing::warn!("cuda-ipc: queueing held-back flag operations failed: {e}");
        }
    }
}

impl Device for Batched<'_> {
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.hold(lane, FlagOp::Wait(addr, value))
    }
    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        if self.inner.long_wait_is_kernel(of) {
            self.flush()?;
            return self.inner.wait_long(lane, addr, value, of);
        }
        self.wait(lane, addr, value)
    }
    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        copy: (u64, u64, usize),
        done: (u64, u32),
    ) -> Result<()> {
        if self.inner.copy_signal_is_kernel() {
            self.flush()?;
            return self.inner.wait_copy_signal(lane, arrive, copy, done);
        }
        wait_copy_signal_in_three(self, lane, arrive, copy, done)
    }
    // wait_pull_signal: the trait's, through the methods here (the kernel form goes through
    // wait_copy_signal above, which hands over what is held first).
    fn pull(&mut self, lane: Lane, dst: u64, src: (u64, u64), bytes: usize) -> Result<()> {
        self.flush()?;
        self.inner.pull(lane, dst, src, bytes)
    }
    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        self.hold(lane, FlagOp::Write(addr, value))
    }
    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.flush()?;
        self.inner.copy(lane, dst, src, bytes)
    }
    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()> {
        self.flush()?;
        self.inner.kernel(lane, k)
    }
    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.flush()?;
        self.inner.fork(lanes)
    }
    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        self.flush()?;
        self.inner.join(lanes)
    }
    fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
        for op in ops {
            self.hold(lane, *op)?;
        }
        Ok(())
    }
    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        self.inner.long_wait_is_kernel(of)
    }
    fn copy_signal_is_kernel(&self) -> bool {
        self.inner.copy_signal_is_kernel()
    }
}

/// Sequence numbers one rank has queued (every rank counts alike).
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    /// Chunks sent to / received from each peer (wrapping, as the flags).
    pub sent: Vec<u32>,
    pub recvd: Vec<u32>,
    /// Chunks sent to each peer, never wrapping: the first `slots` need no credit.
    pub sent_total: Vec<u64>,
    /// Reductions finished, per receive lane.
    pub local: Vec<u32>,
    /// Direct transfers to / from each peer.
    pub direct_out: Vec<u64>,
    pub direct_in: Vec<u64>,
    /// Collectives offered to run directly (every rank counts alike).
    pub sym: u64,
    /// Host-path chunks to / from each peer ([`crate::host_path::HostPath`]).
    pub host_out: Vec<u64>,
    pub host_in: Vec<u64>,
}

impl Counters {
    pub fn new(nranks: usize, rx_lanes: usize) -> Counters {
        Counters {
            sent: vec![0; nranks],
            recvd: vec![0; nranks],
            sent_total: vec![0; nranks],
            local: vec![0; rx_lanes],
            direct_out: vec![0; nranks],
            direct_in: vec![0; nranks],
            sym: 0,
            host_out: vec![0; nranks],
            host_in: vec![0; nranks],
        }
    }
}

/// How a received chunk is used.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    Copy {
        dst: u64,
    },
    /// `dst = local (op) incoming` for the first contribution, `dst (op)= incoming` after.
    Reduce {
        target: usize,
        dst: u64,
        local: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TxPiece {
    pub task: usize,
    pub src: u64,
    pub bytes: usize,
    pub base_t: u64,
    /// Sends reduced data of this target: each chunk waits for its reduction.
    pub after: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RxPiece {
    pub task: usize,
    pub bytes: usize,
    pub base_t: u64,
    pub act: Act,
}

/// A buffer that receives a reduction from several peers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub dtype: DataType,
    pub arith: ReduceKind,
    /// Float Avg (1/n) or PreMulSum: every contribution is scaled, the local one fused.
    pub scalar: Option<[u8; 8]>,
    /// Integer Avg: divide by this once complete.
    pub postdiv: Option<u64>,
    pub contributions: usize,
    /// Some send waits for its chunks (all-reduce's second half).
    pub signals: bool,
}

/// One group lowered to per-peer transfers.
pub(crate) struct Program {
    pub tx: Vec<Vec<TxPiece>>,
    pub rx: Vec<Vec<RxPiece>>,
    /// Copies within this rank: (dst, src, bytes).
    pub locals: Vec<(u64, u64, usize)>,
    /// Kernels within this rank, after the copies (a one-rank PreMulSum).
    pub local_kernels: Vec<Kernel>,
    pub targets: Vec<Target>,
    pub all_reduce: Vec<bool>,
    /// Per task: the logical times its pieces take, from its start (the same on every rank:
    /// computed from the task alone), and whether it is a send or receive.
    pub spans: Vec<(u64, bool)>,
}

/// How many chunks a piece of `bytes` is cut into.
fn chunks_of(bytes: usize, chunk: usize) -> u64 {
    bytes.div_ceil(piece_chunk(bytes, chunk)) as u64
}

fn slice(count: usize, n: usize, i: usize) -> (usize, usize) {
    let lo = (count as u128 * i as u128 / n as u128) as usize;
    let hi = (count as u128 * (i as u128 + 1) / n as u128) as usize;
    (lo, hi - lo)
}

fn addr(base: usize, off_elems: usize, size: usize) -> u64 {
    (base as u64).wrapping_add((off_elems as u64).wrapping_mul(size as u64))
}

/// Lowers a group for `rank` of `n`. All-reduces of two ranks moving at most `one_shot_max`
/// bytes in all go one-shot (the caller runs those on one stream: their send and receive
/// ranges alias in place).
pub(crate) fn lower(
    tasks: &[Task],
    rank: usize,
    n: usize,
    chunk: usize,
    one_shot_max: usize,
) -> Result<Program> {
    let mut p = Program {
        tx: vec![Vec::new(); n],
        rx: vec![Vec::new(); n],
        locals: Vec::new(),
        local_kernels: Vec::new(),
        targets: Vec::new(),
        all_reduce: vec![false; tasks.len()],
        spans: Vec::with_capacity(tasks.len()),
    };
    let mut self_sends: Vec<(u64, usize)> = Vec::new();
    let mut self_recvs: Vec<(u64, usize)> = Vec::new();
    for (ti, t) in tasks.iter().enumerate() {
        buffer_counts(t.kind, rank, n, t.count)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let sz = t.dtype.size();
        let b = t
            .count
            .checked_mul(sz)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let (send, recv) = (t.send, t.recv);
        // Every piece of a collective but an all-reduce's second half is one of `b` bytes from
        // its start; the all-reduce says its own below.
        let p2p = matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. });
        p.spans.push((chunks_of(b, chunk), p2p));
        let mut target = |contributions: usize, signals: bool| {
            let scalar = ccl_cuda::host::reduce::premul_scalar(t, n);
            let postdiv =
                (matches!(t.red, Reduction::Avg) && !t.dtype.is_float()).then_some(n as u64);
            p.targets.push(Target {
                dtype: t.dtype,
                arith: t.red.arithmetic(),
                scalar,
                postdiv,
                contributions,
                signals,
            });
            p.targets.len() - 1
        };
        let tx = |p: &mut Program, peer: usize, src: u64, bytes: usize, base_t: u64, after| {
            if bytes > 0 {
                p.tx[peer].push(TxPiece {
                    task: ti,
                    src,
                    bytes,
                    base_t,
                    after,
                });
            }
        };
        let rx = |p: &mut Program, peer: usize, bytes: usize, base_t: u64, act: Act| {
            if bytes > 0 {
                p.rx[peer].push(RxPiece {
                    task: ti,
                    bytes,
                    base_t,
                    act,
                });
            }
        };
        let local = |p: &mut Program, dst: u64, src: u64, bytes: usize| {
            if bytes > 0 && dst != src {
                p.locals.push((dst, src, bytes));
            }
        };
        let peers = (0..n).filter(|&q| q != rank);
        let reduces = matches!(
            t.kind,
            TaskKind::Coll(
                Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
            )
        );
        if n == 1 && reduces {
            // One rank: the result is the input, scaled for PreMulSum (and float Avg by 1/1,
            // which the kernel keeps exact); integer Avg divides by one.
            let g = target(0, false);
            match p.targets[g].scalar {
                Some(scalar) if b > 0 => p.local_kernels.push(Kernel::PreMul {
                    dtype: t.dtype,
                    dst: recv as u64,
                    src: send as u64,
                    n: t.count,
                    scalar,
                }),
                _ => local(&mut p, recv as u64, send as u64, b),
            }
            continue;
        }
        match t.kind {
            TaskKind::Coll(Collective::AllReduce)
                if n == 2 && b <= one_shot_max / 2 && matches!(t.red, Reduction::Plain(_)) =>
            {
                // Small, two ranks: each sends everything and reduces everything (one copy
                // and one kernel each instead of two of each). `a (op) b` is symmetric, so
                // both ranks compute the same bits; Avg and PreMulSum are not (the local
                // input is fused, the peer's rounded first), so they keep one owner per
                // element.
                p.all_reduce[ti] = true;
                let g = target(1, false);
                for q in peers {
                    tx(&mut p, q, send as u64, b, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: recv as u64,
                        local: send as u64,
                    };
                    rx(&mut p, q, b, 0, act);
                }
            }
            TaskKind::Coll(Collective::AllReduce) => {
                p.all_reduce[ti] = true;
                let (lo_r, len_r) = slice(t.count, n, rank);
                let max_chunks = (0..n)
                    .map(|i| chunks_of(slice(t.count, n, i).1 * sz, chunk))
                    .max()
                    .unwrap_or(0);
                p.spans[ti].0 = 2 * max_chunks;
                let g = target(n - 1, true);
                for q in peers.clone() {
                    let (lo_q, len_q) = slice(t.count, n, q);
                    tx(&mut p, q, addr(send, lo_q, sz), len_q * sz, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: addr(recv, lo_r, sz),
                        local: addr(send, lo_r, sz),
                    };
                    rx(&mut p, q, len_r * sz, 0, act);
                }
                for q in peers {
                    let (lo_q, len_q) = slice(t.count, n, q);
                    tx(
                        &mut p,
                        q,
                        addr(recv, lo_r, sz),
                        len_r * sz,
                        max_chunks,
                        Some(g),
                    );
                    let dst = addr(recv, lo_q, sz);
                    rx(&mut p, q, len_q * sz, max_chunks, Act::Copy { dst });
                }
            }
            TaskKind::Coll(Collective::ReduceScatter) => {
                let g = target(n - 1, false);
                for q in peers {
                    tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    let act = Act::Reduce {
                        target: g,
                        dst: recv as u64,
                        local: addr(send, rank * t.count, sz),
                    };
                    rx(&mut p, q, b, 0, act);
                }
            }
            TaskKind::Coll(Collective::Reduce { root }) => {
                if rank == root {
                    let g = target(n - 1, false);
                    for q in peers {
                        let act = Act::Reduce {
                            target: g,
                            dst: recv as u64,
                            local: send as u64,
                        };
                        rx(&mut p, q, b, 0, act);
                    }
                } else {
                    tx(&mut p, root, send as u64, b, 0, None);
                }
            }
            TaskKind::Coll(Collective::Broadcast { root }) => {
                if rank == root {
                    for q in peers {
                        tx(&mut p, q, send as u64, b, 0, None);
                    }
                    local(&mut p, recv as u64, send as u64, b);
                } else {
                    rx(&mut p, root, b, 0, Act::Copy { dst: recv as u64 });
                }
            }
            TaskKind::Coll(Collective::AllGather) => {
                for q in peers {
                    tx(&mut p, q, send as u64, b, 0, None);
                    let dst = addr(recv, q * t.count, sz);
                    rx(&mut p, q, b, 0, Act::Copy { dst });
                }
                local(&mut p, addr(recv, rank * t.count, sz), send as u64, b);
            }
            TaskKind::Coll(Collective::AlltoAll) => {
                for q in peers {
                    tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    let dst = addr(recv, q * t.count, sz);
                    rx(&mut p, q, b, 0, Act::Copy { dst });
                }
                let at = rank * t.count;
                local(&mut p, addr(recv, at, sz), addr(send, at, sz), b);
            }
            TaskKind::Coll(Collective::Gather { root }) => {
                if rank == root {
                    for q in peers {
                        let dst = addr(recv, q * t.count, sz);
                        rx(&mut p, q, b, 0, Act::Copy { dst });
                    }
                    local(&mut p, addr(recv, rank * t.count, sz), send as u64, b);
                } else {
                    tx(&mut p, root, send as u64, b, 0, None);
                }
            }
            TaskKind::Coll(Collective::Scatter { root }) => {
                if rank == root {
                    for q in peers {
                        tx(&mut p, q, addr(send, q * t.count, sz), b, 0, None);
                    }
                    local(&mut p, recv as u64, addr(send, rank * t.count, sz), b);
                } else {
                    rx(&mut p, root, b, 0, Act::Copy { dst: recv as u64 });
                }
            }
            TaskKind::Send { peer } if peer == rank => self_sends.push((send as u64, b)),
            TaskKind::Recv { peer } if peer == rank => self_recvs.push((recv as u64, b)),
            TaskKind::Send { peer } => tx(&mut p, peer, send as u64, b, 0, None),
            TaskKind::Recv { peer } => rx(&mut p, peer, b, 0, Act::Copy { dst: recv as u64 }),
        }
    }
    if self_sends.len() != self_recvs.len() {
        return Err(Error::invalid_usage(format!(
            "{} sends to self but {} receives from self in one group",
            self_sends.len(),
            self_recvs.len()
        )));
    }
    for ((src, sb), (dst, rb)) in self_sends.into_iter().zip(self_recvs) {
        if sb != rb {
            return Err(Error::invalid_usage(format!(
                "a send to self of {sb} bytes meets a receive from self of {rb} bytes"
            )));
        }
        if dst != src && sb > 0 {
            p.locals.push((dst, src, sb));
        }
    }
    Ok(p)
}

impl Program {
    pub fn bytes(&self) -> usize {
        let tx: usize = self.tx.iter().flatten().map(|x| x.bytes).sum();
        let rx: usize = self.rx.iter().flatten().map(|x| x.bytes).sum();
        tx + rx
    }

    /// Whether a receive may overwrite memory a send still has to read. All-reduce's halves
    /// are causally ordered (the peer's second-half chunk exists only after it received ours),
    /// so only other combinations count.
    pub fn aliases(&self) -> bool {
        let writes: Vec<(usize, u64, usize)> = self
            .rx
            .iter()
            .flatten()
            .map(|r| {
                let dst = match r.act {
                    Act::Copy { dst } | Act::Reduce { dst, .. } => dst,
                };
                (r.task, dst, r.bytes)
            })
            .chain(self.locals.iter().map(|&(d, _, b)| (usize::MAX, d, b)))
            .collect();
        self.tx.iter().flatten().any(|s| {
            writes.iter().any(|&(task, dst, bytes)| {
                !(task == s.task && self.all_reduce.get(task).copied().unwrap_or(false))
                    && overlap(s.src, s.bytes, dst, bytes)
            })
        })
    }
}

/// Does `[a, a+al)` overlap `[b, b+bl)`?
pub(crate) fn overlap(a: u64, al: usize, b: u64, bl: usize) -> bool {
    a < b.saturating_add(bl as u64) && b < a.saturating_add(al as u64)
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ItemKind {
    Tx {
        src: u64,
        bytes: usize,
        after: Option<(usize, usize)>,
    },
    Rx {
        bytes: usize,
        act: Act,
        chunk: usize,
        off: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub t: u64,
    pub peer: usize,
    pub kind: ItemKind,
}

/// Cuts one peer's pieces, given as (bytes, base time), into chunks: (piece index, chunk index,
/// logical time, offset, bytes).
fn chunk_times(
    pieces: impl Iterator<Item = (usize, u64)>,
    chunk: usize,
) -> Vec<(usize, usize, u64, usize, usize)> {
    let mut out = Vec::new();
    let mut last: Option<u64> = None;
    for (i, (bytes, base_t)) in pieces.enumerate() {
        let pc = piece_chunk(bytes, chunk);
        for k in 0..bytes.div_ceil(pc) {
            let t = (base_t + k as u64).max(last.map_or(0, |l| l + 1));
            last = Some(t);
            let off = k * pc;
            out.push((i, k, t, off, (bytes - off).min(pc)));
        }
    }
    out
}

/// One peer's pieces in one direction as chunks at their logical times: (piece, chunk index,
/// time, offset, bytes). `what` gives a piece's (task, bytes, base time); collectives' pieces
/// go first, then the transfers', each in group order, from their tasks' `starts`.
fn timed<'a, P>(
    pieces: &'a [P],
    what: impl Fn(&P) -> (usize, usize, u64),
    p: &Program,
    starts: &[u64],
    chunk: usize,
) -> Vec<(&'a P, usize, u64, usize, usize)> {
    let p2p_of = |task: usize| p.spans.get(task).is_some_and(|s| s.1);
    let mut ordered: Vec<&P> = pieces.iter().collect();
    // Stable: group order within each kind.
    ordered.sort_by_key(|&x| p2p_of(what(x).0));
    let spans = ordered.iter().map(|&x| {
        let (task, bytes, base_t) = what(x);
        (bytes, starts.get(task).copied().unwrap_or(0) + base_t)
    });
    chunk_times(spans, chunk)
        .into_iter()
        .map(|(i, k, t, off, bytes)| (ordered[i], k, t, off, bytes))
        .collect()
}

/// Chunks the program and orders it by logical time: per peer and direction, chunk k of a
/// piece gets `max(start + base_t + k, previous + 1)`, computed alike by the sender and the
/// receiver. A collective's `start` is the sum of the spans of the group's collectives before
/// it, the same on every rank, so each one's pieces begin at one time in both directions with
/// every peer, whatever came before (an all-reduce's second half then follows the receives that
/// reduce it: by a clock per peer and direction, a receive from a peer that sent this rank
/// more before could come later than the send of its result). Sends and receives come after
/// every collective of the group, in their order.
pub(crate) fn schedule(p: &Program, chunk: usize) -> Vec<Item> {
    let mut starts = vec![0u64; p.spans.len()];
    let mut clock = 0u64;
    for (start, &(span, p2p)) in starts.iter_mut().zip(&p.spans) {
        if !p2p {
            *start = clock;
            clock += span;
        }
    }
    for (start, &(_, p2p)) in starts.iter_mut().zip(&p.spans) {
        if p2p {
            *start = clock;
        }
    }
    let mut items = Vec::new();
    for (peer, pieces) in p.tx.iter().enumerate() {
        for (s, k, t, off, bytes) in
            timed(pieces, |s| (s.task, s.bytes, s.base_t), p, &starts, chunk)
        {
            let kind = ItemKind::Tx {
                src: s.src + off as u64,
                bytes,
                after: s.after.map(|g| (g, k)),
            };
            items.push(Item { t, peer, kind });
        }
    }
    for (peer, pieces) in p.rx.iter().enumerate() {
        for (r, k, t, off, bytes) in
            timed(pieces, |r| (r.task, r.bytes, r.base_t), p, &starts, chunk)
        {
            let kind = ItemKind::Rx {
                bytes,
                act: r.act,
                chunk: k,
                off: off as u64,
            };
            items.push(Item { t, peer, kind });
        }
    }
    items.sort_by_key(|i| (i.t, matches!(i.kind, ItemKind::Rx { .. }), i.peer));
    items
}

/// One lowered group being queued.
pub(crate) struct Emission {
    pub items: Vec<Item>,
    next: usize,
    pub program: Program,
    /// Everything on the caller's stream (small groups, aliasing buffers).
    pub single: bool,
    contributions: HashMap<(usize, usize), usize>,
    /// (receive lane, value of its `local` word) once a chunk of a target is reduced.
    reduced: HashMap<(usize, usize), (usize, u32)>,
}

impl Emission {
    pub fn new(program: Program, chunk: usize, single: bool) -> Emission {
        let items = schedule(&program, chunk);
        Emission {
            items,
            next: 0,
            program,
            single,
            contributions: HashMap::new(),
            reduced: HashMap::new(),
        }
    }

    /// The last logical time plus one (0 when there is nothing to move).
    pub fn horizon(&self) -> u64 {
        self.items.last().map_or(0, |i| i.t + 1)
    }

    fn lanes(&self, l: &Layout) -> Vec<Lane> {
        (0..l.tx_lanes)
            .map(Lane::Tx)
            .chain((0..l.rx_lanes).map(Lane::Rx))
            .collect()
    }

    fn tx_lane(&self, l: &Layout, seq: u32) -> Lane {
        if self.single {
            Lane::User
        } else {
            Lane::Tx(seq as usize % l.tx_lanes)
        }
    }

    /// Receives of one reduction chunk stay on one lane (they accumulate into the same
    /// output); copies spread by sequence number.
    fn rx_lane(&self, l: &Layout, seq: u32, act: Act, chunk: usize) -> (Lane, usize) {
        let i = match act {
            Act::Reduce { target, .. } => (target + chunk) % l.rx_lanes,
            Act::Copy { .. } => seq as usize % l.rx_lanes,
        };
        if self.single {
            (Lane::User, i)
        } else {
            (Lane::Rx(i), i)
        }
    }

    /// Forks the lanes off the caller's stream and queues the local copies.
    pub fn begin(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if !self.single {
            dev.fork(&self.lanes(l))?;
        }
        let lane = if self.single { Lane::User } else { Lane::Rx(0) };
        for &(dst, src, bytes) in &self.program.locals {
            dev.copy(lane, dst, src, bytes)?;
        }
        for &k in &self.program.local_kernels {
            dev.kernel(lane, k)?;
        }
        Ok(())
    }

    /// Joins the lanes back into the caller's stream.
    pub fn end(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        if !self.single {
            dev.join(&self.lanes(l))?;
        }
        Ok(())
    }

    /// Queues every item with logical time below `until`.
    pub fn emit_until(
        &mut self,
        until: u64,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
    ) -> Result<()> {
        while let Some(&it) = self.items.get(self.next) {
            if it.t >= until {
                break;
            }
            self.emit(it, l, c, dev)?;
            self.next += 1;
        }
        Ok(())
    }

    fn emit(&mut self, it: Item, l: &Layout, c: &mut Counters, dev: &mut dyn Device) -> Result<()> {
        let (me, p) = (l.rank, it.peer);
        match it.kind {
            ItemKind::Tx { src, bytes, after } => {
                c.sent[p] = c.sent[p].wrapping_add(1);
                c.sent_total[p] += 1;
                let seq = c.sent[p];
                let slot = seq % l.slots;
                let lane = self.tx_lane(l, seq);
                if c.sent_total[p] > l.slots as u64 {
                    dev.wait(lane, l.credit(me, p, slot), seq.wrapping_sub(l.slots))?;
                }
                // On one stream the reduction is already ahead of this send.
                if let Some(key) = after.filter(|_| !self.single) {
                    let (rx, v) = *self.reduced.get(&key).ok_or_else(|| {
                        Error::internal("cuda-ipc: a send is ordered before its reduction")
                    })?;
                    dev.wait(lane, l.local(rx), v)?;
                }
                dev.copy(lane, l.slot_addr(p, me, slot), src, bytes)?;
                dev.write(lane, l.ready(p, me, slot), seq)?;
            }
            ItemKind::Rx {
                bytes,
                act,
                chunk,
                off,
            } => {
                c.recvd[p] = c.recvd[p].wrapping_add(1);
                let seq = c.recvd[p];
                let slot = seq % l.slots;
                let incoming = l.slot_addr(me, p, slot);
                let (lane, idx) = self.rx_lane(l, seq, act, chunk);
                dev.wait(lane, l.ready(me, p, slot), seq)?;
                match act {
                    Act::Copy { dst } => dev.copy(lane, dst + off, incoming, bytes)?,
                    Act::Reduce { target, dst, local } => {
                        let incoming = match l.mirror_slot(p, slot) {
                            Some(m) => {
                                dev.copy(lane, m, incoming, bytes)?;
                                m
                            }
                            None => incoming,
                        };
                        self.reduce_chunk(
                            l,
                            c,
                            dev,
                            (lane, idx),
                            (target, chunk),
                            (dst + off, local + off, incoming),
                            bytes,
                        )?
                    }
                }
                dev.write(lane, l.credit(p, me, slot), seq)?;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_chunk(
        &mut self,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
        (lane, idx): (Lane, usize),
        (target, chunk): (usize, usize),
        (dst, local, incoming): (u64, u64, u64),
        bytes: usize,
    ) -> Result<()> {
        let tg = *self
            .program
            .targets
            .get(target)
            .ok_or_else(|| Error::internal("cuda-ipc: unknown reduction target"))?;
        let (dtype, n) = (tg.dtype, bytes / tg.dtype.size());
        let done = self.contributions.entry((target, chunk)).or_insert(0);
        let first = *done == 0;
        *done += 1;
        let complete = *done == tg.contributions;
        match tg.scalar {
            Some(scalar) => {
                let (dst_in, src) = (incoming, incoming);
                dev.kernel(
                    lane,
                    Kernel::PreMul {
                        dtype,
                        dst: dst_in,
                        src,
                        n,
                        scalar,
                    },
                )?;
                if first {
                    let k = Kernel::PreMulAdd {
                        dtype,
                        dst,
                        src: local,
                        acc: incoming,
                        n,
                        scalar,
                    };
                    dev.kernel(lane, k)?;
                } else {
                    let k = Kernel::Reduce {
                        dtype,
                        op: ReduceKind::Sum,
                        dst,
                        a: incoming,
                        b: dst,
                        n,
                    };
                    dev.kernel(lane, k)?;
                }
            }
            None => {
                let b = if first { local } else { dst };
                dev.kernel(
                    lane,
                    Kernel::Reduce {
                        dtype,
                        op: tg.arith,
                        dst,
                        a: incoming,
                        b,
                        n,
                    },
                )?;
            }
        }
        if complete {
            if let Some(divisor) = tg.postdiv {
                dev.kernel(
                    lane,
                    Kernel::DivInt {
                        dtype,
                        dst,
                        n,
                        divisor,
                    },
                )?;
            }
            if tg.signals {
                c.local[idx] = c.local[idx].wrapping_add(1);
                dev.write(lane, l.local(idx), c.local[idx])?;
                self.reduced.insert((target, chunk), (idx, c.local[idx]));
            }
        }
        Ok(())
    }
}

/// A group's staged work as emissions one after another in logical time: its collectives,
/// then its point-to-point transfers. Each schedule alone is the same on every rank that takes
/// part; mixed into one, a rank's own point-to-point pieces would shift its reduction chunks
/// behind the sends of their results (which on one stream means sending unreduced data).
pub(crate) struct Chain {
    parts: Vec<Emission>,
    /// Logical time at which each part starts.
    starts: Vec<u64>,
    cur: usize,
}

impl Chain {
    /// Lowers `tasks` for `rank` of `n`, collectives and point-to-point apart.
    pub fn lower(
        tasks: &[Task],
        rank: usize,
        n: usize,
        chunk: usize,
        single_max: usize,
    ) -> Result<Chain> {
        let (p2p, colls): (Vec<Task>, Vec<Task>) = tasks
            .iter()
            .partition(|t| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }));
        let groups: Vec<&[Task]> = if p2p.is_empty() || colls.is_empty() {
            vec![tasks]
        } else {
            vec![&colls, &p2p]
        };
        let mut parts = Vec::with_capacity(groups.len());
        for g in groups {
            let p = lower(g, rank, n, chunk, single_max)?;
            let single = p.bytes() <= single_max || p.aliases();
            parts.push(Emission::new(p, chunk, single));
        }
        Ok(Chain::new(parts))
    }

    pub fn new(parts: Vec<Emission>) -> Chain {
        let mut starts = Vec::with_capacity(parts.len());
        let mut t = 0;
        for p in &parts {
            starts.push(t);
            t += p.horizon();
        }
        Chain {
            parts,
            starts,
            cur: 0,
        }
    }

    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        self.parts.iter().map(|p| &p.program)
    }

    /// Bytes sent through receive slots.
    pub fn sent_bytes(&self) -> usize {
        self.programs()
            .flat_map(|p| p.tx.iter().flatten())
            .map(|x| x.bytes)
            .sum()
    }

    pub fn horizon(&self) -> u64 {
        match (self.starts.last(), self.parts.last()) {
            (Some(s), Some(p)) => s + p.horizon(),
            _ => 0,
        }
    }

    pub fn begin(&mut self, l: &Layout, dev: &mut dyn Device) -> Result<()> {
        match self.parts.first_mut() {
            Some(p) => p.begin(l, dev),
            None => Ok(()),
        }
    }

    /// Queues every item with logical time below `until`, ending a part and beginning the
    /// next when the time passes between them.
    pub fn emit_until(
        &mut self,
        until: u64,
        l: &Layout,
        c: &mut Counters,
        dev: &mut dyn Device,
    ) -> Result<()> {
        while let Some(p) = self.parts.get_mut(self.cur) {
            let start = self.starts.get(self.cur).copied().unwrap_or(0);
            p.emit_until(until.saturating_sub(start), l, c, dev)?;
            let next = self.starts.get(self.cur + 1).copied();
            match next {
                Some(s) if until >= s => {
                    p.end(l, dev)?;
                    self.cur += 1;
                    if let Some(q) = self.parts.get_mut(self.cur) {
                        q.begin(l, dev)?;
                    }
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// Queues what is left and joins the lanes back.
    pub fn end(&mut self, l: &Layout, dev: &mut dyn Device, c: &mut Counters) -> Result<()> {
        self.emit_until(self.horizon(), l, c, dev)?;
        match self.parts.get_mut(self.cur) {
            Some(p) => p.end(l, dev),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use ccl_collectives::task::float_sum as task;

    /// What reaches a device: one entry per call, flag batches as one entry.
    #[derive(Default)]
    struct Calls {
        log: Vec<String>,
        kernels: bool,
    }

    impl Device for Calls {
        fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.log.push(format!("wait {lane:?} {addr}"));
            Ok(())
        }
        fn wait_long(&mut self, lane: Lane, addr: u64, _: u32, _: LongWait) -> Result<()> {
            self.log.push(format!("wait-kernel {lane:?} {addr}"));
            Ok(())
        }
        fn wait_copy_signal(
            &mut self,
            lane: Lane,
            _: (u64, u32),
            (dst, _, _): (u64, u64, usize),
            _: (u64, u32),
        ) -> Result<()> {
            self.log.push(format!("copy-kernel {lane:?} {dst}"));
            Ok(())
        }
        fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.log.push(format!("write {lane:?} {addr}"));
            Ok(())
        }
        fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
            self.log.push(format!("copy {lane:?} {dst}"));
            Ok(())
        }
        fn pull(&mut self, lane: Lane, dst: u64, (_, there): (u64, u64), _: usize) -> Result<()> {
            self.log.push(format!("pull {lane:?} {dst} from {there}"));
            Ok(())
        }
        fn kernel(&mut self, lane: Lane, _: Kernel) -> Result<()> {
            self.log.push(format!("kernel {lane:?}"));
            Ok(())
        }
        fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
            self.log.push(format!("fork {lanes:?}"));
            Ok(())
        }
        fn join(&mut self, lanes: &[Lane]) -> Result<()> {
            self.log.push(format!("join {lanes:?}"));
            Ok(())
        }
        fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
            let ops: Vec<String> = ops
                .iter()
                .map(|op| match op {
                    FlagOp::Wait(a, _) => format!("wait {a}"),
                    FlagOp::Write(a, _) => format!("write {a}"),
                })
                .collect();
            self.log
                .push(format!("flags {lane:?} [{}]", ops.join(", ")));
            Ok(())
        }
        fn long_wait_is_kernel(&self, _: LongWait) -> bool {
            self.kernels
        }
        fn copy_signal_is_kernel(&self) -> bool {
            self.kernels
        }
    }

    /// A direct transfer's usual calls through [`Batched`]: flag operations next to each other
    /// on one lane reach the device as one batch, in order; a copy, a fork or another lane's
    /// operation hands over what is held first, so the device sees everything in the order it
    /// was queued; a flush (or the end) hands over the rest.
    #[test]
    fn batched_flag_operations_keep_their_place_among_the_other_calls() {
        let (u, t) = (Lane::User, Lane::Tx(0));
        let mut calls = Calls::default();
        {
            let mut dev = Batched::new(&mut calls);
            dev.write(u, 1, 1).unwrap();
            dev.write(u, 2, 1).unwrap();
            dev.flush().unwrap();
            dev.flush().unwrap(); // nothing held: no call
            dev.wait_copy_signal(u, (3, 1), (100, 200, 8), (4, 1))
                .unwrap();
            dev.wait_long(u, 5, 1, LongWait::Transfer).unwrap();
            dev.write(t, 6, 1).unwrap();
            dev.fork(&[t]).unwrap();
            dev.wait(t, 7, 1).unwrap();
            dev.wait(u, 8, 1).unwrap();
            dev.kernel(
                t,
                Kernel::DivInt {
                    dtype: DataType::Int32,
                    dst: 0,
                    n: 0,
                    divisor: 1,
                },
            )
            .unwrap();
            dev.write(u, 9, 1).unwrap();
            // dropped with the last write held: it is handed over all the same
        }
        assert_eq!(
            calls.log,
            [
                "flags User [write 1, write 2]",
                "flags User [wait 3]",
                "copy User 100",
                "flags User [write 4, wait 5]",
                "flags Tx(0) [write 6]",
                "fork [Tx(0)]",
                "flags Tx(0) [wait 7]",
                "flags User [wait 8]",
                "kernel Tx(0)",
                "flags User [write 9]",
            ]
        );
    }

    /// A pull through [`Batched`] reaches the device as a pull (which it may run on the peer
    /// GPU), between its wait and its "done" write, each handed over in order; with copies as
    /// kernels it is the one wait-copy-signal kernel.
    #[test]
    fn batched_pulls_reach_the_device_as_pulls() {
        for kernels in [false, true] {
            let mut calls = Calls {
                kernels,
                ..Calls::default()
            };
            {
                let mut dev = Batched::new(&mut calls);
                dev.write(Lane::User, 1, 1).unwrap();
                dev.wait_pull_signal(Lane::Rx(0), (3, 1), (100, 200, 8), 300, (4, 1))
                    .unwrap();
            }
            let want: &[&str] = if kernels {
                &["flags User [write 1]", "copy-kernel Rx(0) 100"]
            } else {
                &[
                    "flags User [write 1]",
                    "flags Rx(0) [wait 3]",
                    "pull Rx(0) 100 from 300",
                    "flags Rx(0) [write 4]",
                ]
            };
            assert_eq!(calls.log, want, "kernels {kernels}");
        }
    }

    /// A long run of flag operations (a group of many sends, each flagging "here") goes over
    /// in batches of at most [`MAX_FLAG_BATCH`], in order.
    #[test]
    fn batched_flag_operations_go_in_batches_of_at_most_the_limit() {
        let mut calls = Calls::default();
        let n = 2 * MAX_FLAG_BATCH + 3;
        {
            let mut dev = Batched::new(&mut calls);
            for i in 0..n {
                dev.write(Lane::User, i as u64, 1).unwrap();
            }
        }
        let sizes: Vec<usize> = calls
            .log
            .iter()
            .map(|c| c.matches("write").count())
            .collect();
        assert_eq!(sizes, [MAX_FLAG_BATCH, MAX_FLAG_BATCH, 3]);
        let order: Vec<u64> = calls
            .log
            .iter()
            .flat_map(|c| {
                c.split("write ")
                    .skip(1)
                    .map(|w| w.trim_end_matches([',', ' ', ']']).parse::<u64>().unwrap())
            })
            .collect();
        assert_eq!(order, (0..n as u64).collect::<Vec<_>>());
    }

    /// Each call a device sees: its number and what it did; a batch's operations share one.
    #[derive(Default)]
    struct Flat {
        calls: usize,
        ops: Vec<(usize, Lane, String)>,
    }

    impl Flat {
        fn one(&mut self, lane: Lane, what: String) {
            self.calls += 1;
            self.ops.push((self.calls, lane, what));
        }
    }

    impl Device for Flat {
        fn wait(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.one(lane, format!("wait {addr}"));
            Ok(())
        }
        fn write(&mut self, lane: Lane, addr: u64, _: u32) -> Result<()> {
            self.one(lane, format!("write {addr}"));
            Ok(())
        }
        fn copy(&mut self, lane: Lane, dst: u64, _: u64, _: usize) -> Result<()> {
            self.one(lane, format!("copy {dst}"));
            Ok(())
        }
        fn kernel(&mut self, lane: Lane, _: Kernel) -> Result<()> {
            self.one(lane, "kernel".into());
            Ok(())
        }
        fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
            self.one(Lane::User, format!("fork {lanes:?}"));
            Ok(())
        }
        fn join(&mut self, lanes: &[Lane]) -> Result<()> {
            self.one(Lane::User, format!("join {lanes:?}"));
            Ok(())
        }
        fn flag_ops(&mut self, lane: Lane, ops: &[FlagOp]) -> Result<()> {
            self.calls += 1;
            for op in ops {
                let what = match op {
                    FlagOp::Wait(a, _) => format!("wait {a}"),
                    FlagOp::Write(a, _) => format!("write {a}"),
                };
                self.ops.push((self.calls, lane, what));
            }
            Ok(())
        }
    }

    /// Random call sequences (seeded) through [`Batched`] reach the device as the same
    /// operations in the same order as without it; a batch holds one lane's flag operations
    /// only, at most [`MAX_FLAG_BATCH`] of them; after a flush nothing is held back.
    #[test]
    fn batched_random_sequences_arrive_unchanged() {
        use rand::{Rng, SeedableRng};
        let lanes = [Lane::User, Lane::Tx(0), Lane::Tx(1), Lane::Rx(0)];
        for seed in 0..300u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let n = rng.gen_range(1..600);
            let script: Vec<(u8, Lane, u64)> = (0..n)
                .map(|i| (rng.gen_range(0..20u8), lanes[rng.gen_range(0..4)], i as u64))
                .collect();
            let run = |dev: &mut dyn Device| {
                for &(k, lane, a) in &script {
                    match k {
                        0..=7 => dev.wait(lane, a, 1).unwrap(),
                        8..=15 => dev.write(lane, a, 1).unwrap(),
                        16 => dev.copy(lane, a, 0, 8).unwrap(),
                        17 => {
                            let k = Kernel::DivInt {
                                dtype: DataType::Int32,
                                dst: a,
                                n: 1,
                                divisor: 2,
                            };
                            dev.kernel(lane, k).unwrap()
                        }
                        18 => dev.fork(&[lane]).unwrap(),
                        _ => dev.join(&[lane]).unwrap(),
                    }
                }
            };
            let mut plain = Flat::default();
            run(&mut plain);
            let mut batched = Flat::default();
            {
                let mut dev = Batched::new(&mut batched);
                run(&mut dev);
                dev.flush().unwrap();
                // After a flush the device has everything queued so far.
                assert!(dev.held.is_empty());
            }
            let strip = |f: &Flat| {
                f.ops
                    .iter()
                    .map(|(_, l, w)| (*l, w.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(&batched), strip(&plain), "seed {seed}");
            let mut per_call: HashMap<usize, (Lane, usize, bool)> = HashMap::new();
            for (c, l, w) in &batched.ops {
                let flag = w.starts_with("wait") || w.starts_with("write");
                let e = per_call.entry(*c).or_insert((*l, 0, flag));
                assert_eq!(e.0, *l, "seed {seed}: one batch, one lane");
                assert_eq!(
                    e.2, flag,
                    "seed {seed}: flag operations batched with nothing else"
                );
                e.1 += 1;
            }
            assert!(
                per_call.values().all(|&(_, k, _)| k <= MAX_FLAG_BATCH),
                "seed {seed}"
            );
            // Fewer calls than operations whenever flag operations came in runs on one lane.
            assert!(batched.calls <= plain.calls, "seed {seed}");
        }
    }

    /// Where the device runs the long wait and the wait-copy-signal as kernels, those are not
    /// flag operations: what is held goes first, then the kernel call itself.
    #[test]
    fn batched_hands_kernel_waits_to_the_device_as_they_are() {
        let u = Lane::User;
        let mut calls = Calls {
            kernels: true,
            ..Calls::default()
        };
        let mut dev = Batched::new(&mut calls);
        dev.write(u, 1, 1).unwrap();
        dev.wait_copy_signal(u, (2, 1), (100, 200, 8), (3, 1))
            .unwrap();
        dev.write(u, 4, 1).unwrap();
        dev.wait_long(u, 5, 1, LongWait::Transfer).unwrap();
        dev.flush().unwrap();
        drop(dev);
        assert_eq!(
            calls.log,
            [
                "flags User [write 1]",
                "copy-kernel User 100",
                "flags User [write 4]",
                "wait-kernel User 5",
            ]
        );
    }

    /// Sender and receiver must agree on every chunk's logical time and size, pair by pair.
    fn check_pairing(tasks_of: &dyn Fn(usize) -> Vec<Task>, n: usize, chunk: usize) {
        let items: Vec<Vec<Item>> = (0..n)
            .map(|r| schedule(&lower(&tasks_of(r), r, n, chunk, 0).unwrap(), chunk))
            .collect();
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                let sent: Vec<(u64, usize)> = items[a]
                    .iter()
                    .filter(|i| i.peer == b)
                    .filter_map(|i| match i.kind {
                        ItemKind::Tx { bytes, .. } => Some((i.t, bytes)),
                        _ => None,
                    })
                    .collect();
                let got: Vec<(u64, usize)> = items[b]
                    .iter()
                    .filter(|i| i.peer == a)
                    .filter_map(|i| match i.kind {
                        ItemKind::Rx { bytes, .. } => Some((i.t, bytes)),
                        _ => None,
                    })
                    .collect();
                assert_eq!(sent, got, "ranks {a} -> {b}");
            }
        }
    }

    #[test]
    fn every_collective_pairs_up_chunk_for_chunk() {
        for n in [2usize, 3, 4, 8] {
            for count in [0usize, 1, 3, 1000, 70_001] {
                for chunk in [4096usize, 65536] {
                    let colls = [
                        Collective::AllReduce,
                        Collective::ReduceScatter,
                        Collective::AllGather,
                        Collective::AlltoAll,
                        Collective::Broadcast { root: 1 },
                        Collective::Reduce { root: n - 1 },
                        Collective::Gather { root: 0 },
                        Collective::Scatter { root: 1 },
                    ];
                    for c in colls {
                        check_pairing(
                            &|_| vec![task(TaskKind::Coll(c), 0x1000_0000, 0x8000_0000, count)],
                            n,
                            chunk,
                        );
                    }
                    // A ring of sends and receives plus an exchange, in one group.
                    check_pairing(
                        &|r| {
                            vec![
                                task(TaskKind::Send { peer: (r + 1) % n }, 0x1000_0000, 0, count),
                                task(
                                    TaskKind::Recv {
                                        peer: (r + n - 1) % n,
                                    },
                                    0,
                                    0x8000_0000,
                                    count,
                                ),
                                task(
                                    TaskKind::Send { peer: (r + 2) % n },
                                    0x2000_0000,
                                    0,
                                    count + 5,
                                ),
                                task(
                                    TaskKind::Recv {
                                        peer: (r + n - 2) % n,
                                    },
                                    0,
                                    0x9000_0000,
                                    count + 5,
                                ),
                            ]
                        },
                        n,
                        chunk,
                    );
                }
            }
        }
    }

    #[test]
    fn one_shot_all_reduce_pairs_up_and_runs_on_one_stream() {
        let t = task(
            TaskKind::Coll(Collective::AllReduce),
            0x1000_0000,
            0x1000_0000,
            100,
        );
        for r in 0..2 {
            let p = lower(&[t], r, 2, 4096, 1 << 20).unwrap();
            assert_eq!(p.tx[1 - r].len(), 1);
            assert_eq!(p.tx[1 - r][0].bytes, 400);
            assert!(p.bytes() <= 1 << 20);
        }
        // Three ranks never go one-shot (each rank would sum in its own order).
        let p = lower(&[t], 0, 3, 4096, 1 << 20).unwrap();
        assert!(p.tx[1].len() == 2);
    }

    /// All-reduce's second half is sent only after the reduction it carries was queued: each
    /// dependent send comes later in the queue order than the receive that completes it.
    #[test]
    fn all_reduce_sends_follow_their_reductions() {
        for n in [2usize, 3, 4, 8] {
            for count in [1usize, 5, 1000, 123_457] {
                let t = task(
                    TaskKind::Coll(Collective::AllReduce),
                    0x1000_0000,
                    0x1000_0000,
                    count,
                );
                for r in 0..n {
                    let p = lower(&[t], r, n, 4096, 0).unwrap();
                    let items = schedule(&p, 4096);
                    let mut seen: HashMap<usize, usize> = HashMap::new();
                    for it in &items {
                        match it.kind {
                            ItemKind::Rx {
                                act: Act::Reduce { .. },
                                chunk,
                                ..
                            } => *seen.entry(chunk).or_default() += 1,
                            ItemKind::Tx {
                                after: Some((_, k)),
                                ..
                            } => assert_eq!(
                                seen.get(&k).copied(),
                                Some(n - 1),
                                "n {n} count {count} rank {r} chunk {k}"
                            ),
                            _ => {}
                        }
                    }
                    // In-place all-reduce still pipelines on two streams.
                    assert!(!p.aliases());
                }
            }
        }
    }

    /// Groups whose earlier operations move more one way than the other between two ranks (a
    /// receive, a reduce, an all-reduce of fewer elements than ranks) still pair up chunk for
    /// chunk, and every all-reduce's second half still comes after its reductions: with a clock
    /// per peer and direction, the receives of a later all-reduce fell at the time of its
    /// result's sends and were queued after them (on one stream: the unreduced result sent).
    #[test]
    fn mixed_groups_keep_sends_after_their_reductions() {
        let at = |k: usize| 0x1000_0000 + k * 0x100_0000;
        let avg = |t: Task| Task {
            red: Reduction::Avg,
            ..t
        };
        let ar = |k: usize, count| {
            avg(task(
                TaskKind::Coll(Collective::AllReduce),
                at(k),
                at(k) + 0x80_0000,
                count,
            ))
        };
        for n in [2usize, 3, 4, 8] {
            let groups = |r: usize| -> Vec<Vec<Task>> {
                let recv_from_next = task(TaskKind::Recv { peer: (r + 1) % n }, 0, at(20), 3000);
                let send_to_prev = task(
                    TaskKind::Send {
                        peer: (r + n - 1) % n,
                    },
                    at(21),
                    0,
                    3000,
                );
                let reduce = |root| {
                    avg(task(
                        TaskKind::Coll(Collective::Reduce { root }),
                        at(22),
                        at(23),
                        5000,
                    ))
                };
                vec![
                    vec![ar(0, 3001), ar(1, 1)],
                    vec![ar(1, 1), ar(0, 3001), ar(2, n - 1)],
                    vec![recv_from_next, send_to_prev, ar(0, 70_001)],
                    vec![reduce(1 % n), ar(0, 20_000), ar(1, 1)],
                ]
            };
            for g in 0..4 {
                check_pairing(&|r| groups(r)[g].clone(), n, 4096);
                for r in 0..n {
                    let p = lower(&groups(r)[g], r, n, 4096, 0).unwrap();
                    let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
                    for it in &schedule(&p, 4096) {
                        match it.kind {
                            ItemKind::Rx {
                                act: Act::Reduce { target, .. },
                                chunk,
                                ..
                            } => *seen.entry((target, chunk)).or_default() += 1,
                            ItemKind::Tx {
                                after: Some(key), ..
                            } => {
                                let want = p.targets[key.0].contributions;
                                let got = seen.get(&key).copied();
                                assert_eq!(got, Some(want), "n {n} group {g} rank {r} {key:?}");
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_alltoall_and_overlapping_p2p_run_on_one_stream() {
        let a2a = task(
            TaskKind::Coll(Collective::AlltoAll),
            0x1000_0000,
            0x1000_0000,
            1000,
        );
        assert!(lower(&[a2a], 0, 2, 4096, 0).unwrap().aliases());
        let oop = task(
            TaskKind::Coll(Collective::AlltoAll),
            0x1000_0000,
            0x2000_0000,
            1000,
        );
        assert!(!lower(&[oop], 0, 2, 4096, 0).unwrap().aliases());
        let send = task(TaskKind::Send { peer: 1 }, 0x1000_0000, 0, 1000);
        let recv = task(TaskKind::Recv { peer: 1 }, 0, 0x1000_0100, 1000);
        assert!(lower(&[send, recv], 0, 2, 4096, 0).unwrap().aliases());
        let ag = task(
            TaskKind::Coll(Collective::AllGather),
            0x1000_0000 + 4000,
            0x1000_0000,
            1000,
        );
        assert!(!lower(&[ag], 1, 2, 4096, 0).unwrap().aliases());
    }

    #[test]
    fn pieces_are_cut_into_quarters_within_bounds() {
        let slot = 8 << 20;
        assert_eq!(piece_chunk(8, slot), MIN_CHUNK);
        assert_eq!(piece_chunk(4 << 20, slot), 1 << 20);
        assert_eq!(piece_chunk(16 << 20, slot), 4 << 20);
        assert_eq!(piece_chunk(256 << 20, slot), slot);
        assert_eq!(piece_chunk(1 << 20, 4096), 4096);
        // Every chunk boundary is 4 KiB aligned, so elements of any type stay whole.
        assert_eq!(piece_chunk(3_000_001, slot) % 4096, 0);
        // Sender and receiver pair up with the mixed sizes of a real sweep.
        for count in [1usize, 1 << 18, 3_000_001, 50 << 20] {
            check_pairing(
                &|_| {
                    vec![task(
                        TaskKind::Coll(Collective::AllReduce),
                        0x1000_0000,
                        0x9000_0000,
                        count,
                    )]
                },
                2,
                slot,
            );
        }
    }

    #[test]
    fn self_sends_must_meet_self_receives() {
        let send = task(TaskKind::Send { peer: 0 }, 0x1000, 0, 10);
        assert!(lower(&[send], 0, 2, 4096, 0).is_err());
        let recv = task(TaskKind::Recv { peer: 0 }, 0, 0x2000, 10);
        let p = lower(&[send, recv], 0, 2, 4096, 0).unwrap();
        assert_eq!(p.locals, vec![(0x2000, 0x1000, 40)]);
    }
}
