//! cuda-ipc: GPUs of one host move each other's data directly, with no host thread in the
//! data path (DESIGN.md invariants 2-4).
//!
//! At init every rank allocates a receive area in its own device memory (`CCL_IPC_SLOTS` slots
//! of `CCL_IPC_CHUNK_BYTES` per peer) and a few flag words, and maps every peer's (CUDA IPC
//! handles across processes, peer access inside one). An operation is lowered into chunk
//! transfers per peer: the sender's copy engine copies a chunk from the user's buffer into the
//! receiver's slot (`cuMemcpyAsync`), then writes the receiver's `ready` flag
//! (`cuStreamWriteValue32` into peer memory); the receiver's stream waits on that flag
//! (`cuStreamWaitValue32`), copies the chunk out or reduces it into the user's buffer with a
//! kernel, and writes the sender's `credit` flag, which frees the slot. Everything is queued on
//! streams when the API call is made: the call never waits for a peer, and nothing runs in a
//! host callback.
//!
//! Deadlock freedom: streams may share hardware queues (and do, with
//! `CUDA_DEVICE_MAX_CONNECTIONS=1`), so a queued wait can hold up unrelated work queued after
//! it. Every transfer gets a logical time `t`, computed alike on both sides; each rank queues
//! its work in `(t, sends before receives)` order, and every wait depends only on work that
//! comes earlier in that order on some rank. The earliest unfinished piece of work is then
//! never stuck behind a later one, whatever the queue merging.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ccl_collectives::Collective;
use ccl_cuda::cuda::source::LL_EXCHANGE_MAX_RANKS;
use ccl_cuda::cuda::{
    self, Context, DeviceBuffer, Event, EventFlags, IpcHandle, IpcMapping, KernelOp, Kernels,
    LlTransfers, Stream, WaitCond, IPC_HANDLE_SIZE,
};
use ccl_cuda::host::reduce as host_reduce;
use ccl_cuda::{DataType, ReduceKind};
use parking_lot::Mutex;

use crate::comm::Comm;
use crate::error::{Error, ErrorKind, Result};
use crate::params;
use crate::task::{buffer_counts, Reduction, Scalar, Task, TaskKind};

/// Bytes between flag words (one word per cache line: peers write them over NVLink).
const FLAG_STRIDE: u64 = 64;

/// Copy streams per communicator. Chunk `seq` of a pair goes on lane `seq % LANES`, so one
/// lane's stream memory operations and copy launch overlap the other lane's copy and the
/// copy engines never idle between chunks; each lane has its own `ready` flag per sender,
/// since the lanes' chunks may complete out of order.
const LANES: usize = 2;

/// Smallest chunk a piece is cut into, unless the piece itself is smaller.
const MIN_CHUNK: usize = 256 << 10;

/// Chunk size for a piece of `bytes`: about a quarter of the piece (so even a mid-sized piece
/// pipelines), between [`MIN_CHUNK`] and the slot size. Both sides compute it from the piece
/// alone, which they agree on.
fn piece_chunk(bytes: usize, slot: usize) -> usize {
    (bytes / 4)
        .clamp(MIN_CHUNK.min(slot), slot)
        .next_multiple_of(4096)
        .min(slot)
}

fn cuda_err(e: cuda::CudaError) -> Error {
    Error::new(ErrorKind::Cuda, e.to_string())
}

/// A peer's memory as this rank's device sees it.
struct Peer {
    flags: u64,
    scratch: u64,
    ll: u64,
    /// IPC mappings (other processes) keep the peer's memory mapped while we use it.
    _maps: Vec<IpcMapping>,
}

/// Sequence numbers this rank has queued so far (both sides count alike).
struct Counters {
    /// Chunks sent to / received from each peer (wrapping, as the flags).
    sent: Vec<u32>,
    recvd: Vec<u32>,
    /// Chunks sent to each peer, never wrapping: the first `slots` need no credit.
    sent_total: Vec<u64>,
    /// Local "chunk reduced" events, for sends of reduced data.
    local: u32,
    /// The user stream of the last operation: one that follows on another stream waits for it
    /// (the counters assume operations of a communicator run in call order).
    last_stream: Option<usize>,
    /// Low-latency operations so far.
    ll_seq: u32,
}

/// One communicator's cuda-ipc state.
pub struct IpcEngine {
    ctx: Arc<Context>,
    kernels: Arc<Kernels>,
    rank: usize,
    nranks: usize,
    chunk: usize,
    slots: u32,
    single_stream_max: usize,
    flags: DeviceBuffer,
    _scratch: DeviceBuffer,
    scratch_base: u64,
    /// Largest low-latency all-reduce in bytes (0: none), this rank's area, and the device
    /// array of every rank's area address as mapped here.
    ll_max: usize,
    _ll: DeviceBuffer,
    ll_areas: DeviceBuffer,
    peers: Vec<Option<Peer>>,
    tx: [Stream; LANES],
    rx: Stream,
    fork: Event,
    join_tx: [Event; LANES],
    join_rx: Event,
    /// Recorded on the user stream at the end of every operation.
    last_done: Event,
    counters: Mutex<Counters>,
}

// SAFETY: CUDA handles (streams, events, device pointers, module functions) are process-wide
// driver objects usable from any thread; mutable state is behind the counters' mutex.
unsafe impl Send for IpcEngine {}
// SAFETY: as above.
unsafe impl Sync for IpcEngine {}

impl IpcEngine {
    /// Per sender: a `ready` word per lane, then the `credit` word.
    fn ready_flag(base: u64, from: usize, seq: u32) -> u64 {
        let lane = (seq as usize % LANES) as u64;
        base + ((from * (LANES + 1)) as u64 + lane) * FLAG_STRIDE
    }

    fn credit_flag(base: u64, from: usize) -> u64 {
        base + ((from * (LANES + 1) + LANES) as u64) * FLAG_STRIDE
    }

    fn local_flag(&self) -> u64 {
        self.flags.ptr() + (self.nranks * (LANES + 1)) as u64 * FLAG_STRIDE
    }

    fn flag_bytes(nranks: usize) -> usize {
        (nranks * (LANES + 1) + 1) * FLAG_STRIDE as usize
    }

    /// Where chunk slot `slot` from `sender` lives in the receive area based at `base`
    /// (receiver `receiver`): one region per peer, in rank order, the receiver's own skipped.
    fn slot_addr(&self, base: u64, receiver: usize, sender: usize, slot: u32) -> u64 {
        let region = if sender < receiver {
            sender
        } else {
            sender - 1
        };
        base + ((region as u64 * self.slots as u64 + slot as u64) * self.chunk as u64)
    }
}

/// The device's primary context, leaving the calling thread's current context as it was.
pub(crate) fn device_context(dev: i32) -> Result<Arc<Context>> {
    let prev = cuda::current_device().ok().flatten();
    let ctx = Context::new(dev).map_err(cuda_err)?;
    if let Some(d) = prev.filter(|&d| d != dev) {
        Context::new(d).map_err(cuda_err)?;
    }
    Ok(ctx)
}

/// The reduction kernels of a device, shared by its communicators (compiled once).
fn kernels_for(ctx: &Arc<Context>) -> Result<Arc<Kernels>> {
    static ALL: std::sync::OnceLock<Mutex<Vec<Arc<Kernels>>>> = std::sync::OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock();
    if let Some(k) = all.iter().find(|k| k.ordinal() == ctx.ordinal()) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kernels::new(ctx).map_err(cuda_err)?);
    all.push(k.clone());
    Ok(k)
}

/// What a rank offers its peers at setup.
struct Offer {
    capable: bool,
    dev: i32,
    chunk: u64,
    slots: u32,
    single_max: u64,
    ll_max: u64,
    flags_ptr: u64,
    scratch_ptr: u64,
    ll_ptr: u64,
    flags_handle: [u8; IPC_HANDLE_SIZE],
    scratch_handle: [u8; IPC_HANDLE_SIZE],
    ll_handle: [u8; IPC_HANDLE_SIZE],
}

const OFFER_BYTES: usize = 1 + 4 + 8 + 4 + 8 + 8 + 8 + 8 + 8 + 3 * IPC_HANDLE_SIZE;

impl Offer {
    fn none() -> Offer {
        Offer {
            capable: false,
            dev: -1,
            chunk: 0,
            slots: 0,
            single_max: 0,
            ll_max: 0,
            flags_ptr: 0,
            scratch_ptr: 0,
            ll_ptr: 0,
            flags_handle: [0; IPC_HANDLE_SIZE],
            scratch_handle: [0; IPC_HANDLE_SIZE],
            ll_handle: [0; IPC_HANDLE_SIZE],
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_BYTES);
        b.push(self.capable as u8);
        b.extend_from_slice(&self.dev.to_le_bytes());
        b.extend_from_slice(&self.chunk.to_le_bytes());
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&self.single_max.to_le_bytes());
        b.extend_from_slice(&self.ll_max.to_le_bytes());
        b.extend_from_slice(&self.flags_ptr.to_le_bytes());
        b.extend_from_slice(&self.scratch_ptr.to_le_bytes());
        b.extend_from_slice(&self.ll_ptr.to_le_bytes());
        b.extend_from_slice(&self.flags_handle);
        b.extend_from_slice(&self.scratch_handle);
        b.extend_from_slice(&self.ll_handle);
        b
    }

    fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() != OFFER_BYTES {
            return None;
        }
        let u32_at = |o: usize| b.get(o..o + 4).and_then(|s| s.try_into().ok());
        let u64_at = |o: usize| b.get(o..o + 8).and_then(|s| s.try_into().ok());
        let mut o = Offer::none();
        o.capable = b[0] == 1;
        o.dev = i32::from_le_bytes(u32_at(1)?);
        o.chunk = u64::from_le_bytes(u64_at(5)?);
        o.slots = u32::from_le_bytes(u32_at(13)?);
        o.single_max = u64::from_le_bytes(u64_at(17)?);
        o.ll_max = u64::from_le_bytes(u64_at(25)?);
        o.flags_ptr = u64::from_le_bytes(u64_at(33)?);
        o.scratch_ptr = u64::from_le_bytes(u64_at(41)?);
        o.ll_ptr = u64::from_le_bytes(u64_at(49)?);
        let h = |i: usize| b.get(57 + i * IPC_HANDLE_SIZE..57 + (i + 1) * IPC_HANDLE_SIZE);
        o.flags_handle.copy_from_slice(h(0)?);
        o.scratch_handle.copy_from_slice(h(1)?);
        o.ll_handle.copy_from_slice(h(2)?);
        Some(o)
    }
}

/// This rank's own allocations, made before the offer.
struct Local {
    ctx: Arc<Context>,
    kernels: Arc<Kernels>,
    flags: DeviceBuffer,
    scratch: DeviceBuffer,
    ll: DeviceBuffer,
}

fn prepare_local(
    dev: i32,
    nranks: usize,
    chunk: usize,
    slots: u32,
    single_max: usize,
    ll_max: usize,
) -> Result<(Local, Offer)> {
    let ctx = device_context(dev)?;
    let kernels = kernels_for(&ctx)?;
    let flags = DeviceBuffer::new(&ctx, IpcEngine::flag_bytes(nranks)).map_err(cuda_err)?;
    flags.write(0, &vec![0u8; flags.len()]).map_err(cuda_err)?;
    let bytes = (nranks - 1)
        .checked_mul(slots as usize)
        .and_then(|v| v.checked_mul(chunk))
        .ok_or_else(|| Error::invalid_argument("cuda-ipc receive area size overflows"))?;
    let scratch = DeviceBuffer::new(&ctx, bytes).map_err(cuda_err)?;
    let flags_handle = IpcHandle::of(&ctx, flags.ptr()).map_err(cuda_err)?.0;
    let scratch_handle = IpcHandle::of(&ctx, scratch.ptr()).map_err(cuda_err)?.0;
    let ll = DeviceBuffer::new(&ctx, cuda::source::ll_area_bytes(nranks, ll_max.max(256)))
        .map_err(cuda_err)?;
    // Flags and acknowledgements start at zero (the data regions need no initial value).
    let words = cuda::source::ll_data_offset(nranks);
    ll.write(0, &vec![0u8; words]).map_err(cuda_err)?;
    let ll_handle = IpcHandle::of(&ctx, ll.ptr()).map_err(cuda_err)?.0;
    let offer = Offer {
        capable: true,
        dev,
        chunk: chunk as u64,
        slots,
        single_max: single_max as u64,
        ll_max: ll_max as u64,
        flags_ptr: flags.ptr(),
        scratch_ptr: scratch.ptr(),
        ll_ptr: ll.ptr(),
        flags_handle,
        scratch_handle,
        ll_handle,
    };
    Ok((
        Local {
            ctx,
            kernels,
            flags,
            scratch,
            ll,
        },
        offer,
    ))
}

/// Sets up cuda-ipc for a freshly connected communicator. Collective: every rank calls it,
/// GPU or not, and all reach the same decision (an engine on every rank or on none).
pub fn attach(comm: &Comm) -> Result<()> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let mut guard = comm.0.state.lock();
    let state = guard
        .as_mut()
        .ok_or_else(|| Error::internal("cuda-ipc setup without communicator state"))?;
    let chunk = (params::CCL_IPC_CHUNK_BYTES.get_i64().clamp(4096, 1 << 30) as usize) & !255;
    let slots = params::CCL_IPC_SLOTS.get_i64().clamp(2, 64) as u32;
    let single_max = params::CCL_IPC_SINGLE_STREAM_BYTES.get_i64().max(0) as usize;
    let ll_max = (params::CCL_IPC_LL_BYTES.get_i64().clamp(0, 1 << 22) as usize) & !15;
    let wanted = n > 1
        && comm.0.cuda_dev >= 0
        && crate::gpu::available()
        && !params::NCCL_P2P_DISABLE.get_bool()
        && !params::CCL_IPC_DISABLE.get_bool()
        && state
            .table
            .iter()
            .all(|i| i.host_id == state.table[rank].host_id);
    let (local, offer) = if wanted {
        match prepare_local(comm.0.cuda_dev, n, chunk, slots, single_max, ll_max) {
            Ok((l, o)) => (Some(l), o),
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc unavailable here: {e}");
                (None, Offer::none())
            }
        }
    } else {
        (None, Offer::none())
    };
    let all = state.ctrl.allgather(&offer.encode(), &comm.0.abort)?;
    let offers: Vec<Offer> = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Offer::decode(b)
                .ok_or_else(|| Error::remote(format!("rank {r} sent a malformed cuda-ipc offer")))
        })
        .collect::<Result<_>>()?;
    let agreed = offers.iter().all(|o| {
        o.capable
            && o.chunk == chunk as u64
            && o.slots == slots
            && o.single_max == single_max as u64
    });
    let Some(local) = local.filter(|_| agreed) else {
        if wanted && offers.iter().any(|o| o.capable) {
            tracing::info!(
                "rank {rank}: cuda-ipc off for this communicator (not every rank can map its \
                 peers, or the CCL_IPC_* settings differ between ranks)"
            );
        }
        return Ok(());
    };
    let my_pid = state.table[rank].pid;
    let mut peers: Vec<Option<Peer>> = (0..n).map(|_| None).collect();
    let opened = (|| -> Result<()> {
        for (j, o) in offers.iter().enumerate() {
            if j == rank {
                continue;
            }
            peers[j] = Some(if state.table[j].pid == my_pid {
                // The same process: plain pointers, once this device may access the peer's.
                let pctx = device_context(o.dev)?;
                local.ctx.enable_peer_access(&pctx).map_err(cuda_err)?;
                Peer {
                    flags: o.flags_ptr,
                    scratch: o.scratch_ptr,
                    ll: o.ll_ptr,
                    _maps: Vec::new(),
                }
            } else {
                let f =
                    IpcMapping::open(&local.ctx, &IpcHandle(o.flags_handle)).map_err(cuda_err)?;
                let s =
                    IpcMapping::open(&local.ctx, &IpcHandle(o.scratch_handle)).map_err(cuda_err)?;
                let l = IpcMapping::open(&local.ctx, &IpcHandle(o.ll_handle)).map_err(cuda_err)?;
                Peer {
                    flags: f.ptr(),
                    scratch: s.ptr(),
                    ll: l.ptr(),
                    _maps: vec![f, s, l],
                }
            });
        }
        Ok(())
    })();
    if let Err(e) = &opened {
        tracing::info!("rank {rank}: cannot map a peer's memory: {e}");
    }
    let oks = state
        .ctrl
        .allgather(&[opened.is_ok() as u8], &comm.0.abort)?;
    if oks.iter().any(|b| b.first() != Some(&1)) {
        return Ok(());
    }
    type Made = ([Stream; LANES], Stream, Event, [Event; LANES], Event, Event);
    let streams = || -> Result<Made> {
        let flags = EventFlags {
            timing: false,
            interprocess: false,
            blocking_sync: false,
        };
        let ev = || Event::new(&local.ctx, flags).map_err(cuda_err);
        let stream = || Stream::with_flags(&local.ctx, true).map_err(cuda_err);
        Ok((
            [stream()?, stream()?],
            stream()?,
            ev()?,
            [ev()?, ev()?],
            ev()?,
            ev()?,
        ))
    };
    // Every rank has mapped every peer: from here a local failure is the communicator's.
    let (tx, rx, fork, join_tx, join_rx, last_done) = streams()?;
    let areas: Vec<u8> = (0..n)
        .map(|j| match &peers[j] {
            Some(p) => p.ll,
            None => local.ll.ptr(),
        })
        .flat_map(u64::to_le_bytes)
        .collect();
    let ll_areas = DeviceBuffer::new(&local.ctx, areas.len()).map_err(cuda_err)?;
    ll_areas.write(0, &areas).map_err(cuda_err)?;
    let engine = IpcEngine {
        ctx: local.ctx,
        kernels: local.kernels,
        rank,
        nranks: n,
        chunk,
        slots,
        single_stream_max: single_max,
        scratch_base: local.scratch.ptr(),
        ll_max,
        _ll: local.ll,
        ll_areas,
        flags: local.flags,
        _scratch: local.scratch,
        peers,
        tx,
        rx,
        fork,
        join_tx,
        join_rx,
        last_done,
        counters: Mutex::new(Counters {
            sent: vec![0; n],
            recvd: vec![0; n],
            sent_total: vec![0; n],
            local: 0,
            last_stream: None,
            ll_seq: 0,
        }),
    };
    tracing::info!(
        "rank {rank}: cuda-ipc with {} peers, {} slots of {} KiB each",
        n - 1,
        slots,
        chunk >> 10
    );
    *comm.0.ipc.lock() = Some(Arc::new(engine));
    Ok(())
}

/// Can this group go through cuda-ipc? Decided from what every rank sees alike (the
/// communicator and the kind of reduction), never from local buffer properties.
pub fn engine_for(comm: &Comm, tasks: &[Task]) -> Option<Arc<IpcEngine>> {
    let eng = comm.0.ipc.lock().clone()?;
    // A device-resident PreMulSum scalar must be read in stream order: the staged path does.
    let device_scalar = tasks
        .iter()
        .any(|t| matches!(t.red, Reduction::PreMulSum(Scalar::Device(_))));
    (!device_scalar).then_some(eng)
}

/// How a received chunk is used.
#[derive(Debug, Clone, Copy)]
enum Act {
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
struct TxPiece {
    task: usize,
    src: u64,
    bytes: usize,
    base_t: u64,
    /// Sends reduced data of this target: each chunk waits for its reduction.
    after: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
struct RxPiece {
    task: usize,
    bytes: usize,
    base_t: u64,
    act: Act,
}

/// A buffer that receives a reduction from several peers.
#[derive(Debug, Clone, Copy)]
struct Target {
    dtype: DataType,
    arith: ReduceKind,
    /// Float Avg (1/n) or PreMulSum: every contribution is scaled, the local one fused.
    scalar: Option<[u8; 8]>,
    /// Integer Avg: divide by this once complete.
    postdiv: Option<u64>,
    contributions: usize,
    /// Some send waits for its chunks (all-reduce's second half).
    signals: bool,
}

/// One group lowered to per-peer transfers.
struct Program {
    tx: Vec<Vec<TxPiece>>,
    rx: Vec<Vec<RxPiece>>,
    /// Copies within this rank: (dst, src, bytes).
    locals: Vec<(u64, u64, usize)>,
    targets: Vec<Target>,
    all_reduce: Vec<bool>,
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
fn lower(
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
        targets: Vec::new(),
        all_reduce: vec![false; tasks.len()],
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
        let mut target = |contributions: usize, signals: bool| {
            let scalar = match t.red {
                Reduction::PreMulSum(Scalar::Immediate(s)) => Some(s),
                Reduction::Avg if t.dtype.is_float() => {
                    Some(host_reduce::from_f64(t.dtype, 1.0 / n as f64))
                }
                _ => None,
            };
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
                    .map(|i| {
                        let bytes = slice(t.count, n, i).1 * sz;
                        bytes.div_ceil(piece_chunk(bytes, chunk)) as u64
                    })
                    .max()
                    .unwrap_or(0);
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
    fn bytes(&self) -> usize {
        let tx: usize = self.tx.iter().flatten().map(|x| x.bytes).sum();
        let rx: usize = self.rx.iter().flatten().map(|x| x.bytes).sum();
        tx + rx
    }

    /// Whether a receive may overwrite memory a send still has to read. All-reduce's halves
    /// are causally ordered (the peer's second-half chunk exists only after it received ours),
    /// so only other combinations count.
    fn aliases(&self) -> bool {
        let overlap = |a: u64, al: usize, b: u64, bl: usize| {
            a < b.saturating_add(bl as u64) && b < a.saturating_add(al as u64)
        };
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

#[derive(Debug, Clone, Copy)]
enum ItemKind {
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
struct Item {
    t: u64,
    peer: usize,
    kind: ItemKind,
}

/// Chunks the program and orders it by logical time: per peer and direction, chunk k of a
/// piece gets `max(base_t + k, previous + 1)`, computed alike by the sender and the receiver.
fn schedule(p: &Program, chunk: usize) -> Vec<Item> {
    let mut items = Vec::new();
    for (peer, pieces) in p.tx.iter().enumerate() {
        let mut last: Option<u64> = None;
        for s in pieces {
            let pc = piece_chunk(s.bytes, chunk);
            for k in 0..s.bytes.div_ceil(pc) {
                let t = (s.base_t + k as u64).max(last.map_or(0, |l| l + 1));
                last = Some(t);
                let off = k * pc;
                items.push(Item {
                    t,
                    peer,
                    kind: ItemKind::Tx {
                        src: s.src + off as u64,
                        bytes: (s.bytes - off).min(pc),
                        after: s.after.map(|g| (g, k)),
                    },
                });
            }
        }
    }
    for (peer, pieces) in p.rx.iter().enumerate() {
        let mut last: Option<u64> = None;
        for r in pieces {
            let pc = piece_chunk(r.bytes, chunk);
            for k in 0..r.bytes.div_ceil(pc) {
                let t = (r.base_t + k as u64).max(last.map_or(0, |l| l + 1));
                last = Some(t);
                let off = k * pc;
                items.push(Item {
                    t,
                    peer,
                    kind: ItemKind::Rx {
                        bytes: (r.bytes - off).min(pc),
                        act: r.act,
                        chunk: k,
                        off: off as u64,
                    },
                });
            }
        }
    }
    items.sort_by_key(|i| (i.t, matches!(i.kind, ItemKind::Rx { .. }), i.peer));
    items
}

/// A lowered group being queued on its streams.
struct Emission {
    eng: Arc<IpcEngine>,
    user: Vec<Stream>,
    items: Vec<Item>,
    next: usize,
    program: Program,
    single: bool,
    /// A small all-reduce done by one low-latency kernel instead of transfers.
    ll: Option<LowLatency>,
    contributions: HashMap<(usize, usize), usize>,
    reduced: HashMap<(usize, usize), u32>,
}

impl Emission {
    fn tx_stream(&self, seq: u32) -> &Stream {
        if self.single {
            &self.user[0]
        } else {
            &self.eng.tx[seq as usize % LANES]
        }
    }

    fn rx_stream(&self) -> &Stream {
        if self.single {
            &self.user[0]
        } else {
            &self.eng.rx
        }
    }

    /// Joins the user's streams, forks the engine's, queues the local copies.
    fn begin(&mut self, c: &mut Counters) -> Result<()> {
        let eng = self.eng.clone();
        let first = &self.user[0];
        let raw = first.raw() as usize;
        if c.last_stream.is_some_and(|s| s != raw) {
            first.wait_event(&eng.last_done).map_err(cuda_err)?;
        }
        for s in &self.user[1..] {
            let ev = plain_event(&eng.ctx)?;
            ev.record(s).map_err(cuda_err)?;
            first.wait_event(&ev).map_err(cuda_err)?;
        }
        if !self.single {
            eng.fork.record(first).map_err(cuda_err)?;
            for tx in &eng.tx {
                tx.wait_event(&eng.fork).map_err(cuda_err)?;
            }
            eng.rx.wait_event(&eng.fork).map_err(cuda_err)?;
        }
        if let Some(ll) = &self.ll {
            c.ll_seq = c.ll_seq.wrapping_add(1);
            let (areas, n, me) = (eng.ll_areas.ptr(), eng.nranks as u32, eng.rank as u32);
            // SAFETY: the buffers hold what the task says (validated at enqueue) and fit the
            // areas (checked when choosing this path); every rank launches the same operation
            // with the same sequence number.
            unsafe {
                match ll {
                    LowLatency::AllReduce(t) => eng.kernels.ll_all_reduce(
                        first,
                        t.dtype,
                        t.red.arithmetic(),
                        t.recv as u64,
                        t.send as u64,
                        t.count,
                        areas,
                        n,
                        me,
                        c.ll_seq,
                        eng.ll_max,
                    ),
                    LowLatency::Exchange(x) => eng
                        .kernels
                        .ll_exchange(first, x, areas, n, me, c.ll_seq, eng.ll_max),
                }
            }
            .map_err(cuda_err)?;
        }
        for &(dst, src, bytes) in &self.program.locals {
            // SAFETY: both ranges belong to the caller's buffers for this operation (NCCL's
            // contract: valid until the stream has passed the operation).
            unsafe { self.rx_stream().memcpy(dst, src, bytes) }.map_err(cuda_err)?;
        }
        Ok(())
    }

    /// Queues every item with logical time below `until`.
    fn emit_until(&mut self, until: u64, c: &mut Counters) -> Result<()> {
        while let Some(&it) = self.items.get(self.next) {
            if it.t >= until {
                break;
            }
            self.emit(it, c)?;
            self.next += 1;
        }
        Ok(())
    }

    fn emit(&mut self, it: Item, c: &mut Counters) -> Result<()> {
        let eng = self.eng.clone();
        let (me, p) = (eng.rank, it.peer);
        let peer = eng.peers[p]
            .as_ref()
            .ok_or_else(|| Error::internal(format!("cuda-ipc: rank {p} is not mapped")))?;
        match it.kind {
            ItemKind::Tx { src, bytes, after } => {
                c.sent[p] = c.sent[p].wrapping_add(1);
                c.sent_total[p] += 1;
                let seq = c.sent[p];
                let s = self.tx_stream(seq);
                let slot = seq % eng.slots;
                // SAFETY: flag words and slots lie inside allocations that live as long as the
                // engine (ours) or its mappings (the peer's); `src` is the caller's buffer.
                unsafe {
                    if c.sent_total[p] > eng.slots as u64 {
                        s.wait_value32(
                            IpcEngine::credit_flag(eng.flags.ptr(), p),
                            seq.wrapping_sub(eng.slots),
                            WaitCond::Geq,
                        )
                        .map_err(cuda_err)?;
                    }
                    // On one stream the reduction is already ahead of this send.
                    if let Some(key) = after.filter(|_| !self.single) {
                        let v = *self.reduced.get(&key).ok_or_else(|| {
                            Error::internal("cuda-ipc: a send is ordered before its reduction")
                        })?;
                        s.wait_value32(eng.local_flag(), v, WaitCond::Geq)
                            .map_err(cuda_err)?;
                    }
                    let dst = eng.slot_addr(peer.scratch, p, me, slot);
                    s.memcpy(dst, src, bytes).map_err(cuda_err)?;
                    s.write_value32(IpcEngine::ready_flag(peer.flags, me, seq), seq)
                        .map_err(cuda_err)?;
                }
            }
            ItemKind::Rx {
                bytes,
                act,
                chunk,
                off,
            } => {
                c.recvd[p] = c.recvd[p].wrapping_add(1);
                let seq = c.recvd[p];
                let slot = seq % eng.slots;
                let incoming = eng.slot_addr(eng.scratch_base, me, p, slot);
                let s = self.rx_stream();
                // SAFETY: as for sends; the slot holds `bytes` from the peer once the wait
                // passes, and stays ours until the credit below is written.
                unsafe {
                    s.wait_value32(
                        IpcEngine::ready_flag(eng.flags.ptr(), p, seq),
                        seq,
                        WaitCond::Geq,
                    )
                    .map_err(cuda_err)?;
                }
                match act {
                    Act::Copy { dst } => {
                        // SAFETY: see above; `dst` is the caller's receive buffer.
                        unsafe { s.memcpy(dst + off, incoming, bytes) }.map_err(cuda_err)?
                    }
                    Act::Reduce { target, dst, local } => self.reduce_chunk(
                        c,
                        target,
                        chunk,
                        dst + off,
                        local + off,
                        incoming,
                        bytes,
                    )?,
                }
                // SAFETY: the credit word lives in the peer's flags, mapped for the engine's life.
                unsafe {
                    self.rx_stream()
                        .write_value32(IpcEngine::credit_flag(peer.flags, me), seq)
                        .map_err(cuda_err)?;
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_chunk(
        &mut self,
        c: &mut Counters,
        target: usize,
        chunk: usize,
        dst: u64,
        local: u64,
        incoming: u64,
        bytes: usize,
    ) -> Result<()> {
        let eng = self.eng.clone();
        let tg = *self
            .program
            .targets
            .get(target)
            .ok_or_else(|| Error::internal("cuda-ipc: unknown reduction target"))?;
        let n = bytes / tg.dtype.size();
        let done = self.contributions.entry((target, chunk)).or_insert(0);
        let first = *done == 0;
        *done += 1;
        let complete = *done == tg.contributions;
        let s = self.rx_stream();
        let k = &eng.kernels;
        // SAFETY: `dst`/`local` are the caller's buffers for this chunk, `incoming` our slot;
        // the kernels read and write exactly `n` elements of each, `dst` equal to or disjoint
        // from each input.
        unsafe {
            match tg.scalar {
                Some(scalar) => {
                    k.premul(s, tg.dtype, incoming, incoming, n, scalar)
                        .map_err(cuda_err)?;
                    if first {
                        k.premul_add(s, tg.dtype, dst, local, incoming, n, scalar)
                            .map_err(cuda_err)?;
                    } else {
                        k.reduce(s, tg.dtype, ReduceKind::Sum, dst, incoming, dst, n)
                            .map_err(cuda_err)?;
                    }
                }
                None => {
                    let other = if first { local } else { dst };
                    k.reduce(s, tg.dtype, tg.arith, dst, incoming, other, n)
                        .map_err(cuda_err)?;
                }
            }
            if complete {
                if let Some(d) = tg.postdiv {
                    k.div_int(s, tg.dtype, dst, n, d).map_err(cuda_err)?;
                }
                if tg.signals {
                    c.local = c.local.wrapping_add(1);
                    s.write_value32(eng.local_flag(), c.local)
                        .map_err(cuda_err)?;
                    self.reduced.insert((target, chunk), c.local);
                }
            }
        }
        Ok(())
    }

    /// Joins the engine's streams back into the user's.
    fn end(&mut self, c: &mut Counters) -> Result<()> {
        let eng = self.eng.clone();
        let first = &self.user[0];
        c.last_stream = Some(first.raw() as usize);
        if !self.single {
            for (ev, tx) in eng.join_tx.iter().zip(&eng.tx) {
                ev.record(tx).map_err(cuda_err)?;
                first.wait_event(ev).map_err(cuda_err)?;
            }
            eng.join_rx.record(&eng.rx).map_err(cuda_err)?;
            first.wait_event(&eng.join_rx).map_err(cuda_err)?;
        }
        eng.last_done.record(first).map_err(cuda_err)?;
        if self.user.len() > 1 {
            let ev = plain_event(&eng.ctx)?;
            ev.record(first).map_err(cuda_err)?;
            for s in &self.user[1..] {
                s.wait_event(&ev).map_err(cuda_err)?;
            }
        }
        Ok(())
    }
}

fn plain_event(ctx: &Arc<Context>) -> Result<Event> {
    Event::new(
        ctx,
        EventFlags {
            timing: false,
            interprocess: false,
            blocking_sync: false,
        },
    )
    .map_err(cuda_err)
}

/// A small collective done by one low-latency kernel per rank instead of transfers.
#[derive(Debug, Clone, Copy)]
enum LowLatency {
    AllReduce(Task),
    Exchange(LlTransfers),
}

/// Chooses the low-latency kernel for a group of one small collective. The choice depends
/// only on what every rank sees alike (kind, count, type, reduction, ranks, settings).
fn low_latency(tasks: &[Task], rank: usize, n: usize, ll_max: usize) -> Result<Option<LowLatency>> {
    let [t] = tasks else { return Ok(None) };
    let bytes = t.count.saturating_mul(t.dtype.size());
    if t.count == 0 || bytes > ll_max {
        return Ok(None);
    }
    match t.kind {
        TaskKind::Coll(Collective::AllReduce) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::AllReduce(*t)))
        }
        TaskKind::Coll(
            Collective::AllGather
            | Collective::AlltoAll
            | Collective::Broadcast { .. }
            | Collective::Gather { .. }
            | Collective::Scatter { .. },
        ) if n <= LL_EXCHANGE_MAX_RANKS => {
            let p = lower(tasks, rank, n, usize::MAX, 0)?;
            let mut x = LlTransfers::default();
            for q in 0..n {
                if let [s] = p.tx[q].as_slice() {
                    x.src[q] = s.src;
                    x.sbytes[q] = s.bytes as u64;
                }
                if let [r] = p.rx[q].as_slice() {
                    let Act::Copy { dst } = r.act else {
                        return Ok(None);
                    };
                    x.dst[q] = dst;
                    x.rbytes[q] = r.bytes as u64;
                }
            }
            if let [(dst, src, b)] = p.locals.as_slice() {
                x.src[rank] = *src;
                x.dst[rank] = *dst;
                x.sbytes[rank] = *b as u64;
            }
            Ok(Some(LowLatency::Exchange(x)))
        }
        _ => Ok(None),
    }
}

/// The kernels a lowered group launches.
fn kernels_needed(p: &Program, ll: Option<&LowLatency>) -> Vec<(DataType, KernelOp)> {
    let mut v = Vec::new();
    for tg in &p.targets {
        match tg.scalar {
            Some(_) => {
                v.push((tg.dtype, KernelOp::PreMul));
                v.push((tg.dtype, KernelOp::PreMulAdd));
                v.push((tg.dtype, KernelOp::reduce(ReduceKind::Sum)));
            }
            None => v.push((tg.dtype, KernelOp::reduce(tg.arith))),
        }
        if tg.postdiv.is_some() {
            v.push((tg.dtype, KernelOp::DivInt));
        }
    }
    match ll {
        Some(LowLatency::AllReduce(t)) => {
            v.push((t.dtype, KernelOp::LlAllReduce(t.red.arithmetic().into())))
        }
        Some(LowLatency::Exchange(_)) => v.push((DataType::Uint8, KernelOp::LlExchange)),
        None => {}
    }
    let mut unique = Vec::with_capacity(v.len());
    for k in v {
        if !unique.contains(&k) {
            unique.push(k);
        }
    }
    unique
}

/// Lowers one communicator's group and prepares its emission.
fn prepare(comm: &Comm, eng: Arc<IpcEngine>, tasks: &[Task]) -> Result<Emission> {
    let mut raw: Vec<usize> = Vec::new();
    for t in tasks {
        if !raw.contains(&t.stream) {
            raw.push(t.stream);
        }
    }
    // SAFETY: the caller passes its own live cudaStream_t values (NCCL's contract).
    let user: Vec<Stream> = raw
        .iter()
        .map(|&s| unsafe { Stream::from_raw(&eng.ctx, s as cuda::sys::CUstream) })
        .collect();
    for s in &user {
        if !matches!(
            s.capture_status().map_err(cuda_err)?,
            cuda::CaptureStatus::None
        ) {
            return Err(Error::invalid_usage(
                "capturing libccl operations in a CUDA graph is not supported yet",
            ));
        }
    }
    let ll = low_latency(tasks, comm.rank(), comm.nranks(), eng.ll_max)?;
    let lowered: &[Task] = if ll.is_some() { &[] } else { tasks };
    let program = lower(
        lowered,
        comm.rank(),
        comm.nranks(),
        eng.chunk,
        eng.single_stream_max,
    )?;
    // Load every kernel now: loading a module can wait for the whole device, which must not
    // happen once this device's streams wait on a peer whose work is queued after ours (one
    // thread driving several GPUs).
    for (dt, op) in kernels_needed(&program, ll.as_ref()) {
        eng.kernels.prepare(dt, op).map_err(cuda_err)?;
    }
    let single = ll.is_some() || program.bytes() <= eng.single_stream_max || program.aliases();
    let items = schedule(&program, eng.chunk);
    Ok(Emission {
        eng,
        user,
        items,
        next: 0,
        program,
        single,
        ll,
        contributions: HashMap::new(),
        reduced: HashMap::new(),
    })
}

/// Queues the groups of several communicators (one per GPU of a `-g N` process, say)
/// interleaved by logical time, so no stream runs far ahead of the peers that release it and
/// the host never blocks on a full stream queue that only a later call would drain.
pub fn submit(groups: Vec<(Comm, Arc<IpcEngine>, Vec<Task>)>) -> Result<()> {
    let mut ems: Vec<(Comm, Emission)> = Vec::with_capacity(groups.len());
    for (comm, eng, tasks) in groups {
        let em = prepare(&comm, eng, &tasks)?;
        ems.push((comm, em));
    }
    // From here on sequence numbers are taken: a failure leaves peers waiting on chunks that
    // will not come, so it poisons the communicator.
    let mut locks: Vec<_> = ems.iter().map(|(_, e)| e.eng.clone()).collect::<Vec<_>>();
    let mut guards: Vec<_> = locks.iter_mut().map(|e| e.counters.lock()).collect();
    let poison = |comm: &Comm, e: Error| {
        comm.set_async_error(&e);
        e
    };
    for ((comm, em), c) in ems.iter_mut().zip(guards.iter_mut()) {
        em.begin(c).map_err(|e| poison(comm, e))?;
    }
    let horizon = ems
        .iter()
        .filter_map(|(_, e)| e.items.last().map(|i| i.t + 1))
        .max()
        .unwrap_or(0);
    // Interleave in steps of a few logical times: small enough to bound each stream's queue,
    // large enough to keep the per-step overhead negligible.
    const STEP: u64 = 4;
    let mut t = 0;
    while t < horizon {
        t = (t + STEP).min(horizon);
        for ((comm, em), c) in ems.iter_mut().zip(guards.iter_mut()) {
            em.emit_until(t, c).map_err(|e| poison(comm, e))?;
        }
    }
    for ((comm, em), c) in ems.iter_mut().zip(guards.iter_mut()) {
        em.end(c).map_err(|e| poison(comm, e))?;
    }
    Ok(())
}

/// Waits until the engine's streams have run everything queued (finalize), giving up when the
/// communicator is aborted.
pub fn wait_idle(comm: &Comm) -> Result<()> {
    let Some(eng) = comm.0.ipc.lock().clone() else {
        return Ok(());
    };
    for s in eng.tx.iter().chain([&eng.rx]) {
        while !s.query().map_err(cuda_err)? {
            if comm.0.abort.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// Releases the engine. After an abort its streams may wait forever on peers that are gone,
/// and peers may still write into its memory: then it is leaked rather than freed.
pub fn shutdown(comm: &Comm, aborted: bool) {
    let Some(eng) = comm.0.ipc.lock().take() else {
        return;
    };
    if aborted {
        std::mem::forget(eng);
    }
}

impl std::fmt::Debug for IpcEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IpcEngine(rank {} of {}, {} slots of {} bytes)",
            self.rank, self.nranks, self.slots, self.chunk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
        Task {
            kind,
            send,
            recv,
            count,
            dtype: DataType::Float32,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
        }
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
    fn small_collectives_become_one_low_latency_kernel() {
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("all-gather of 16 bytes should be low-latency");
        };
        assert_eq!((x.src[0], x.sbytes[0]), (0x1000, 16));
        assert_eq!((x.dst[0], x.rbytes[0]), (0x8000, 16));
        assert_eq!((x.src[1], x.dst[1], x.sbytes[1]), (0x1000, 0x8010, 16));
        // In place: no local copy.
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x8010, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("in-place all-gather should be low-latency");
        };
        assert_eq!(x.sbytes[1], 0);
        // Broadcast: the root only sends, the others only receive.
        let bc = task(
            TaskKind::Coll(Collective::Broadcast { root: 0 }),
            0x1000,
            0x2000,
            4,
        );
        let Some(LowLatency::Exchange(x)) = low_latency(&[bc], 1, 3, 1 << 20).unwrap() else {
            panic!("broadcast should be low-latency");
        };
        assert_eq!(x.sbytes, [0; 8]);
        assert_eq!((x.dst[0], x.rbytes[0], x.rbytes[2]), (0x2000, 16, 0));
        // Too big, reductions other than all-reduce, and groups stay on the copy engines.
        assert!(low_latency(&[ag], 1, 2, 8).unwrap().is_none());
        let rs = task(TaskKind::Coll(Collective::ReduceScatter), 0x1000, 0x8000, 4);
        assert!(low_latency(&[rs], 0, 2, 1 << 20).unwrap().is_none());
        assert!(low_latency(&[ag, ag], 1, 2, 1 << 20).unwrap().is_none());
        let ar = task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, 4);
        assert!(matches!(
            low_latency(&[ar], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::AllReduce(_))
        ));
        // More ranks than the exchange table holds.
        assert!(low_latency(&[bc], 1, 9, 1 << 20).unwrap().is_none());
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
