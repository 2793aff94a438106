//! The GPU path: operations on device buffers are ordered with the caller's CUDA streams by
//! flags in pinned host memory and carried out by a proxy thread per communicator (DESIGN.md
//! invariant 2), so API calls return at once.
//!
//! For each group the caller's stream gets, in order: copies of the device inputs into a
//! pinned staging chunk, a write of the operation's start slot, a wait on its done slot, and
//! copies of the results back to the device buffers. The proxy polls the start slot, runs the
//! same plans as the host backend over the shm/socket links on the staged host memory, and
//! writes the done slot. The proxy makes no CUDA call at all: a proxy-side copy could sit in a
//! hardware queue behind a stream that is blocked on the proxy itself (streams share a few
//! hardware queues), which deadlocks. Slots are per operation (a ring of `SLOTS`), so
//! operations on different streams of one communicator cannot release each other early. Host
//! callbacks are never used.
//!
//! Staging keeps NCCL's semantics: overlapping device ranges of a group (in-place calls, or one
//! operation's output feeding the next) share one host range, so operations see each other's
//! results in call order. Moving data on copy engines between GPUs (cuda-ipc) replaces the
//! staging in a later step; the ordering machinery stays.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::{self, Context, Event, MemoryKind, PinnedBuffer, Stream, WaitCond};
use ccl_cuda::cuda::kernels::Kernels;
use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::core::Comm;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{CollGates, Flag, PieceGates};
use crate::host::{plan_specs, run_plans, PlanSpec};
use crate::params;
use crate::pieces::Gating;
use crate::task::{buffer_counts, Reduction, Scalar, Task, TaskKind};

/// Operations that may be outstanding on one communicator's streams.
const SLOTS: u32 = 1024;
const SLOT_STRIDE: usize = 64;

pub(crate) use ccl_cuda::cuda::helpers::{device_context, plain_event};

/// The callers' streams of a group, each once.
pub(crate) fn streams_of(ctx: &Arc<Context>, tasks: &[Task]) -> Vec<Stream> {
    // SAFETY: the callers pass their own live cudaStream_t values (NCCL's contract).
    unsafe { ccl_cuda::cuda::helpers::streams_from_raw(ctx, tasks.iter().map(|t| t.stream)) }
}

pub(crate) fn cuda_err(e: cuda::CudaError) -> Error {
    Error::new(ErrorKind::Cuda, e.to_string())
}

/// Whether CUDA can be used at all (driver present, a device, not `CCL_DEVICE=host`);
/// decided once per process, since every operation asks.
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        !params::CCL_DEVICE.get_str().eq_ignore_ascii_case("host")
            && cuda::Driver::get()
                .and_then(|d| d.device_count())
                .map(|n| n > 0)
                .unwrap_or(false)
    })
}

/// The device of the calling thread's current context (what `cudaSetDevice` chose), 0 if
/// none, -1 without CUDA.
pub fn current_device() -> i32 {
    if !available() {
        return -1;
    }
    cuda::current_device().ok().flatten().unwrap_or(0)
}

pub(crate) fn is_device_ptr(p: usize) -> bool {
    p != 0
        && cuda::pointer_info(p as u64)
            .map(|i| matches!(i.kind, MemoryKind::Device | MemoryKind::Managed))
            .unwrap_or(false)
}

/// Does this group of operations touch device memory (and so take the GPU path)?
pub fn wants_gpu(comm: &Comm, tasks: &[Task]) -> Result<bool> {
    if comm.0.cuda_dev < 0 || !available() {
        return Ok(false);
    }
    if tasks
        .iter()
        .any(|t| is_device_ptr(t.send) || is_device_ptr(t.recv))
    {
        return Ok(true);
    }
    // Operations with no buffers at all (count 0, NULL pointers) on a communicator that
    // already works on the GPU stay in stream order there, instead of making the host wait for
    // the GPU to catch up.
    Ok(comm.0.gpu.is_some() && tasks.iter().all(|t| t.send == 0 && t.recv == 0))
}

/// Per-operation flags in pinned, device-mapped host memory.
struct Slots {
    buf: PinnedBuffer,
}

impl Slots {
    fn new(ctx: &Arc<Context>) -> Result<Slots> {
        let buf = PinnedBuffer::new(ctx, SLOTS as usize * SLOT_STRIDE).map_err(cuda_err)?;
        // SAFETY: freshly allocated, not yet visible to any stream.
        unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, SLOTS as usize * SLOT_STRIDE) };
        Ok(Slots { buf })
    }

    fn offset(seq: u32) -> usize {
        (seq % SLOTS) as usize * SLOT_STRIDE
    }

    fn atomic(&self, seq: u32) -> &AtomicU32 {
        // SAFETY: the slot is inside the buffer, 64-byte aligned, and only accessed
        // atomically by the host or by aligned 32-bit stream memory operations.
        unsafe { AtomicU32::from_ptr(self.buf.as_ptr().add(Self::offset(seq)).cast()) }
    }

    fn device(&self, seq: u32) -> u64 {
        self.buf.device_ptr() + Self::offset(seq) as u64
    }
}

/// One proxy job: its plans, and the flag slots it owns (several for a gated group), or the
/// flags of the captured group it replays.
struct Job {
    first: u32,
    last: u32,
    specs: Vec<PlanSpec>,
    graph: Option<&'static CapturedGroup>,
}

/// A group captured into a CUDA graph ([`crate::graph`]), on the staged path: its own pinned
/// staging memory and two flags of its own, so that a replay needs no CUDA call of this
/// library (a driver call then can wait behind the application's launch of graphs queued
/// after this one, which wait for this group: a deadlock). At each replay the graph copies
/// the inputs down and writes `start` = 1; the proxy, handed the job by the graph's host node
/// (through [`crate::graph`]'s thread), waits for it, runs the plans and writes `done` = 1;
/// the graph waits for that, resets both to 0 and copies the outputs up.
pub(crate) struct CapturedGroup {
    tasks: Vec<Task>,
    st: Staging,
    io: PieceIo,
    chunk: PinnedBuffer,
    start: cuda::Flag,
    done: cuda::Flag,
}

// SAFETY: the pinned chunk is process-wide memory that the graph's copies and the proxy use
// in turn (the flags order them); the flags are accessed atomically; CUDA handles may be used
// from any thread.
unsafe impl Send for CapturedGroup {}
// SAFETY: as above; nothing is mutated through a shared reference but the flags.
unsafe impl Sync for CapturedGroup {}

impl CapturedGroup {
    /// Lays out `tasks`' device buffers in a pinned chunk of their own.
    pub(crate) fn new(comm: &Comm, tasks: Vec<Task>) -> Result<CapturedGroup> {
        let eng = engine(comm)?;
        let (rank, n) = (comm.rank(), comm.nranks());
        let (st, ios) = stage_pieces(std::slice::from_ref(&tasks), None, rank, n, &is_device_ptr)?;
        let io = ios.into_iter().next().unwrap_or_default();
        let chunk = PinnedBuffer::new(&eng.ctx, st.bytes.max(64)).map_err(cuda_err)?;
        let start = cuda::Flag::new(&eng.ctx).map_err(cuda_err)?;
        let done = cuda::Flag::new(&eng.ctx).map_err(cuda_err)?;
        start.store(0);
        done.store(0);
        Ok(CapturedGroup {
            tasks,
            st,
            io,
            chunk,
            start,
            done,
        })
    }

    /// Queues on `stream` (being captured) the GPU side of every replay.
    ///
    /// # Safety
    /// The group lives as long as any graph it is captured into (it is leaked).
    pub(crate) unsafe fn queue(&self, stream: &Stream) -> Result<()> {
        let base = self.chunk.as_ptr() as usize;
        // SAFETY: device ranges are the caller's validated buffers, host ranges lie in the
        // chunk laid out for them; the flags outlive the graph (caller's contract).
        unsafe {
            self.io.queue_inputs(stream, base)?;
            self.start.stream_write(stream, 1).map_err(cuda_err)?;
            self.done
                .stream_wait(stream, 1, WaitCond::Eq)
                .map_err(cuda_err)?;
            self.done.stream_write(stream, 0).map_err(cuda_err)?;
            self.start.stream_write(stream, 0).map_err(cuda_err)?;
            self.io.queue_outputs(stream, base)?;
        }
        Ok(())
    }

    /// The group's operations, as captured.
    pub(crate) fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// A replay reached the group: takes its sequence numbers and hands it to the proxy.
    /// Makes no CUDA call.
    pub(crate) fn replay(&'static self, comm: &Comm) -> Result<()> {
        let eng = comm
            .0
            .gpu
            .get::<GpuEngine>()
            .ok_or_else(|| Error::invalid_usage("communicator was destroyed or aborted"))?;
        let mut specs = plan_specs(comm, &mut comm.0.issue.lock(), &self.tasks)?;
        self.st.rebase(&mut specs, self.chunk.as_ptr() as usize);
        let tx = eng
            .tx
            .lock()
            .clone()
            .ok_or_else(|| Error::invalid_usage("communicator is shutting down"))?;
        tx.send(Job {
            first: 0,
            last: 0,
            specs,
            graph: Some(self),
        })
        .map_err(|_| Error::internal("proxy thread is gone"))
    }

    /// Lets the replay's graph go on: the group ran, failed, or cannot run (its communicator
    /// is gone).
    pub(crate) fn finish(&self) {
        self.done.store(1);
    }
}

/// A pinned staging chunk and the event after the last stream copy that uses it.
struct Chunk {
    buf: PinnedBuffer,
    busy: Option<Event>,
}

/// A communicator's GPU state: its device context, flag slots, staging chunks and proxy.
pub struct GpuEngine {
    ctx: Arc<Context>,
    start: Arc<Slots>,
    done: Arc<Slots>,
    submitted: AtomicU32,
    completed: Arc<AtomicU32>,
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    chunks: Mutex<Vec<Chunk>>,
    fold: Mutex<StreamScratch>,
}

// SAFETY: the pinned buffers are process-wide memory accessed through atomics or by the
// stream/proxy hand-over protocol; CUDA handles may be used from any thread.
unsafe impl Send for GpuEngine {}
// SAFETY: as above; mutable state is behind mutexes and atomics.
unsafe impl Sync for GpuEngine {}

pub(crate) fn engine(comm: &Comm) -> Result<Arc<GpuEngine>> {
    comm.0.gpu.get_or_make(|| start_engine(comm))
}

/// A new engine for `comm`, its proxy thread running.
fn start_engine(comm: &Comm) -> Result<Arc<GpuEngine>> {
    let ctx = device_context(comm.0.cuda_dev)?;
    let start = Arc::new(Slots::new(&ctx)?);
    let done = Arc::new(Slots::new(&ctx)?);
    let (tx, rx) = crossbeam::channel::unbounded();
    let completed = Arc::new(AtomicU32::new(0));
    let e = Arc::new(GpuEngine {
        ctx,
        start: start.clone(),
        done: done.clone(),
        submitted: AtomicU32::new(0),
        completed: completed.clone(),
        tx: Mutex::new(Some(tx)),
        thread: Mutex::new(None),
        chunks: Mutex::new(Vec::new()),
        fold: Mutex::new(StreamScratch::default()),
    });
    let proxy = Proxy {
        comm: comm.clone(),
        start,
        done,
        completed,
    };
    let h = std::thread::Builder::new()
        .name(format!("ccl-proxy-r{}", comm.rank()))
        .spawn(move || proxy.run(rx))
        .map_err(|e| Error::system(format!("spawn proxy thread: {e}")))?;
    *e.thread.lock() = Some(h);
    Ok(e)
}

/// Where a group's device buffers live in host memory while the proxy works on them.
#[derive(Default)]
struct Staging {
    /// (device start, device end, host offset) of each merged device range.
    unions: Vec<(usize, usize, usize)>,
    bytes: usize,
}

/// A device range a group reads (`true`) or writes: (start, end, input).
type DevRange = (usize, usize, bool);

/// The device ranges of `tasks`' buffers (`is_dev` tells device memory); device-resident
/// PreMulSum scalars are read too.
fn device_ranges<'a>(
    tasks: impl IntoIterator<Item = &'a Task>,
    rank: usize,
    n: usize,
    is_dev: &dyn Fn(usize) -> bool,
) -> Result<Vec<DevRange>> {
    let mut ranges = Vec::new();
    for t in tasks {
        let (se, re) = buffer_counts(t.kind, rank, n, t.count)
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let sz = t.dtype.size();
        if se > 0 && is_dev(t.send) {
            ranges.push((t.send, t.send + se * sz, true));
        }
        if re > 0 && is_dev(t.recv) {
            ranges.push((t.recv, t.recv + re * sz, false));
        }
        if let Reduction::PreMulSum(Scalar::Device(p)) = t.red {
            if is_dev(p) {
                ranges.push((p, p + t.dtype.size(), true));
            }
        }
    }
    Ok(ranges)
}

/// The staging layout of a group's jobs and the copies of each piece: per job (`gated`
/// None), or per gate, a task's inputs going down before its input gate opens and its outputs
/// coming back once its output gate has landed.
fn stage_pieces(
    jobs: &[Vec<Task>],
    gated: Option<&Gating>,
    rank: usize,
    n: usize,
    is_dev: &dyn Fn(usize) -> bool,
) -> Result<(Staging, Vec<PieceIo>)> {
    let st = Staging::plan(&device_ranges(jobs.iter().flatten(), rank, n, is_dev)?);
    let ios = match gated {
        None => jobs
            .iter()
            .map(|p| st.io(&device_ranges(p, rank, n, is_dev)?))
            .collect::<Result<Vec<_>>>()?,
        Some(Gating {
            input,
            output,
            gates,
            ..
        }) => {
            let gates = *gates;
            let mut ios: Vec<PieceIo> = (0..gates).map(|_| PieceIo::default()).collect();
            for (i, t) in jobs.iter().flatten().enumerate() {
                let io = st.io(&device_ranges([t], rank, n, is_dev)?)?;
                let at = |g: Option<&usize>| {
                    g.copied()
                        .filter(|&g| g < gates)
                        .ok_or_else(|| Error::internal("a task without a gate"))
                };
                let (gi, go) = (at(input.get(i))?, at(output.get(i))?);
                ios[gi].inputs.extend(io.inputs);
                ios[go].outputs.extend(io.outputs);
            }
            ios
        }
    };
    Ok((st, ios))
}

/// Copies of one piece of a group: device ranges to the host before its start flag, and back
/// after its done flag, as (device, host offset, bytes).
#[derive(Default)]
struct PieceIo {
    inputs: Vec<(usize, usize, usize)>,
    outputs: Vec<(usize, usize, usize)>,
}

impl PieceIo {
    /// Queues on `stream` the copies of the piece's inputs into host memory at `base`.
    ///
    /// # Safety
    /// The device ranges are buffers of the caller's operations, and `base` holds the staging
    /// layout they were planned in, alive until the copies ran.
    unsafe fn queue_inputs(&self, stream: &Stream, base: usize) -> Result<()> {
        for &(dev, off, bytes) in &self.inputs {
            // SAFETY: per this function's contract.
            unsafe { stream.memcpy_dtoh((base + off) as *mut u8, dev as u64, bytes) }
                .map_err(cuda_err)?;
        }
        Ok(())
    }

    /// Queues on `stream` the copies of the piece's outputs back from host memory at `base`.
    ///
    /// # Safety
    /// As [`PieceIo::queue_inputs`].
    unsafe fn queue_outputs(&self, stream: &Stream, base: usize) -> Result<()> {
        for &(dev, off, bytes) in &self.outputs {
            // SAFETY: per this function's contract.
            unsafe { stream.memcpy_htod(dev as u64, (base + off) as *const u8, bytes) }
                .map_err(cuda_err)?;
        }
        Ok(())
    }
}

impl Staging {
    /// Lays out every device range of the group in host memory: overlapping ranges share one
    /// host range, so operations of the group see each other's results in call order.
    fn plan(ranges: &[DevRange]) -> Staging {
        let mut spans: Vec<(usize, usize)> = ranges.iter().map(|r| (r.0, r.1)).collect();
        spans.sort_unstable();
        let mut st = Staging::default();
        for (lo, hi) in spans {
            match st.unions.last_mut() {
                Some(u) if lo < u.1 => u.1 = u.1.max(hi),
                _ => st.unions.push((lo, hi, 0)),
            }
        }
        for u in st.unions.iter_mut() {
            u.2 = st.bytes;
            st.bytes += (u.1 - u.0).div_ceil(64) * 64;
        }
        st
    }

    /// The copies of a piece whose device ranges are `ranges` (within the group's).
    fn io(&self, ranges: &[DevRange]) -> Result<PieceIo> {
        let mut io = PieceIo::default();
        for &(lo, hi, input) in ranges {
            let off = self
                .offset(lo)
                .ok_or_else(|| Error::internal("staging range lost"))?;
            if input {
                io.inputs.push((lo, off, hi - lo));
            } else {
                io.outputs.push((lo, off, hi - lo));
            }
        }
        Ok(io)
    }

    fn offset(&self, p: usize) -> Option<usize> {
        self.unions
            .iter()
            .find(|u| p >= u.0 && p < u.1)
            .map(|u| u.2 + (p - u.0))
    }

    /// Points every device address of the tasks at its host copy under `base`.
    fn rebase(&self, specs: &mut [PlanSpec], base: usize) {
        let host = |p: usize| self.offset(p).map(|o| base + o).unwrap_or(p);
        for spec in specs.iter_mut() {
            for t in spec.tasks_mut() {
                if t.send != 0 {
                    t.send = host(t.send);
                }
                if t.recv != 0 {
                    t.recv = host(t.recv);
                }
                if let Reduction::PreMulSum(Scalar::Device(p)) = t.red {
                    t.red = Reduction::PreMulSum(Scalar::Device(host(p)));
                }
            }
        }
    }
}

impl GpuEngine {
    /// A pinned chunk of at least `bytes` whose previous use has finished on its stream.
    /// Returns its index; chunks are never freed while the engine lives (freeing pinned memory
    /// can synchronise the device).
    ///
    /// At most [`CHUNKS_PER_SIZE`] chunks large enough for `bytes` are made: past that the
    /// caller waits for one of them to come free. Callers queue operations far ahead of their
    /// streams (a benchmark loop, a training step), and a new chunk for every operation still in
    /// flight cost a fresh pinned allocation of the whole group each time (128 MiB all_reduce
    /// over the network path: 46 ms out of place, where every chunk was new, against 30 ms in
    /// place, which found them made). Waiting is safe: the chunk's operation was handed to the
    /// proxy and ordered on its stream before this call, so it finishes without this thread --
    /// unless that stream waits on work this thread has yet to issue elsewhere; so past
    /// [`CHUNK_WAIT`] a new chunk is made after all (and a warning says so, once).
    fn chunk(&self, bytes: usize, abort: &AtomicBool) -> Result<(usize, usize)> {
        let give_up = std::time::Instant::now() + CHUNK_WAIT;
        loop {
            {
                let mut chunks = self.chunks.lock();
                let mut fitting = 0;
                for (i, c) in chunks.iter_mut().enumerate() {
                    if c.buf.len() < bytes {
                        continue;
                    }
                    fitting += 1;
                    let free = match &c.busy {
                        None => true,
                        Some(ev) => ev.query().unwrap_or(false),
                    };
                    if free {
                        c.busy = None;
                        return Ok((i, c.buf.as_ptr() as usize));
                    }
                }
                let waited_out = std::time::Instant::now() >= give_up;
                if waited_out {
                    static TOLD: AtomicBool = AtomicBool::new(false);
                    if !TOLD.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "GPU staging: no free pinned chunk of {bytes} bytes after {} ms; \
                             allocating another (queued operations wait on each other?)",
                            CHUNK_WAIT.as_millis()
                        );
                    }
                }
                if fitting < CHUNKS_PER_SIZE || waited_out {
                    let cap = bytes.max(1 << 20).next_power_of_two();
                    let buf = PinnedBuffer::new(&self.ctx, cap).map_err(cuda_err)?;
                    let base = buf.as_ptr() as usize;
                    chunks.push(Chunk { buf, busy: None });
                    return Ok((chunks.len() - 1, base));
                }
            }
            if abort.load(Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Staging chunks large enough for one group that may be in use at once. Two: a stream runs
/// its groups one after another anyway, so the second only lets the next group be issued (its
/// proxy job queued, its copies down ordered) while this one runs; a third would only cost
/// another allocation.
const CHUNKS_PER_SIZE: usize = 2;

/// The caller's streams a group's communicators share, each forked onto a stream of the
/// communicator's own for the group ([`fork_shared_streams`]); joined back by [`Forks::join`].
#[derive(Default)]
#[must_use = "the caller's streams must wait for the forks (Forks::join)"]
pub(crate) struct Forks(Vec<(Stream, Stream)>);

impl Forks {
    /// Makes each caller's stream wait for the work queued on its forks.
    pub(crate) fn join(self) -> Result<()> {
        for (user, side) in self.0 {
            let ev = plain_event(side.context())?;
            ev.record(&side).map_err(cuda_err)?;
            user.wait_event(&ev).map_err(cuda_err)?;
        }
        Ok(())
    }
}

/// NCCL runs the communicators of a group side by side (each on a stream of its own, joined
/// to the caller's streams), so a rank that calls their operations one by one matches a rank
/// that groups them. Queued one after the other on one shared stream, each part would wait
/// for the other's peers: so every communicator's part but the first on a caller's stream
/// moves onto a stream of the communicator's own that waits for the caller's stream first;
/// [`Forks::join`] makes the caller's stream wait for them after everything is queued.
/// Parts on streams no other part uses stay where they are.
pub(crate) fn fork_shared_streams(parts: &mut [(Comm, Vec<Task>)]) -> Result<Forks> {
    let mut forks = Forks::default();
    if parts.len() < 2 {
        return Ok(forks);
    }
    let moves = streams_to_fork(parts.iter().map(|(_, ts)| ts.as_slice()));
    for (i, (comm, tasks)) in parts.iter_mut().enumerate() {
        let mine: Vec<usize> = moves
            .iter()
            .filter(|(p, _)| *p == i)
            .map(|&(_, s)| s)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let ctx = device_context(comm.0.cuda_dev)?;
        let mut pool = comm.0.side_streams.lock();
        while pool.len() < mine.len() {
            pool.push(Stream::with_flags(&ctx, true).map_err(cuda_err)?);
        }
        for (&user_raw, side) in mine.iter().zip(pool.iter()) {
            // SAFETY: `user_raw` is the caller's own live stream (NCCL's contract); `side`
            // lives as long as the communicator, past any work queued on it (a destroyed
            // stream's queued work still completes).
            let (user, side) = unsafe {
                (
                    Stream::from_raw(&ctx, user_raw as cuda::sys::CUstream),
                    Stream::from_raw(&ctx, side.raw()),
                )
            };
            let ev = plain_event(&ctx)?;
            ev.record(&user).map_err(cuda_err)?;
            side.wait_event(&ev).map_err(cuda_err)?;
            for t in tasks.iter_mut().filter(|t| t.stream == user_raw) {
                t.stream = side.raw() as usize;
            }
            forks.0.push((user, side));
        }
    }
    Ok(forks)
}

/// Which parts of a group move off which caller's stream ([`fork_shared_streams`]): each
/// `(part, stream)` where an earlier part uses that stream too, once.
fn streams_to_fork<'a>(parts: impl Iterator<Item = &'a [Task]>) -> Vec<(usize, usize)> {
    let mut first_user: Vec<(usize, usize)> = Vec::new();
    let mut moves: Vec<(usize, usize)> = Vec::new();
    for (i, tasks) in parts.enumerate() {
        for t in tasks {
            match first_user.iter().find(|(s, _)| *s == t.stream) {
                None => first_user.push((t.stream, i)),
                Some(&(_, j)) if j != i && !moves.contains(&(i, t.stream)) => {
                    moves.push((i, t.stream))
                }
                Some(_) => {}
            }
        }
    }
    moves
}

/// Longest a caller waits for a staging chunk before making one more (see `GpuEngine::chunk`).
const CHUNK_WAIT: Duration = Duration::from_secs(2);

/// `CCL_GPU_STREAM_PIECE_BYTES` for this communicator: `auto` streams collectives
/// ([`crate::pieces::streamed`]) over the network in pieces of 2 MiB or a sixteenth of the
/// operation, whichever is longer (one H100, 128 MiB all-reduce: 8 MiB pieces 3.5-4.3 GB/s against 2 MiB pieces'
/// 3.1-3.6, three alternations, where 2 MiB paid from 4 to 16 MiB), and leaves those over
/// shared memory alone whole.
fn stream_cut(comm: &Comm) -> crate::pieces::StreamCut {
    use crate::pieces::StreamCut;
    let p = &params::CCL_GPU_STREAM_PIECE_BYTES;
    if p.get_str().trim().eq_ignore_ascii_case("auto") {
        if comm.0.issue.lock().shared_memory_only {
            StreamCut::OFF
        } else {
            StreamCut {
                min: 2 << 20,
                most: 16,
            }
        }
    } else {
        StreamCut::fixed(p.get_i64().max(0) as usize)
    }
}

/// Hands a group's operations on one communicator to its proxy and orders them on the
/// callers' streams. Returns without waiting for peers. A large group goes in pieces
/// ([`crate::pieces`]: a job per piece of a lone collective, else one gated job), so the
/// stream's copies to and from pinned memory overlap the proxy's transfers.
pub fn submit(comm: &Comm, tasks: Vec<Task>) -> Result<()> {
    let eng = engine(comm)?;
    let folds = folds_of(comm, &tasks);
    if folds.iter().any(Option::is_some) {
        return submit_folded(comm, &eng, tasks, &folds);
    }
    submit_staged(comm, &eng, tasks)
}

/// [`submit`] of a group with nothing to fold on the GPU.
fn submit_staged(comm: &Comm, eng: &Arc<GpuEngine>, tasks: Vec<Task>) -> Result<()> {
    let streams = streams_of(&eng.ctx, &tasks);
    let (rank, n) = (comm.rank(), comm.nranks());
    let piece_bytes = params::CCL_GPU_PIECE_BYTES.get_i64().max(0) as usize;
    let stream = stream_cut(comm);
    if let (Some(per), [t]) = (crate::pieces::streamed(&tasks, n, stream), &tasks[..]) {
        return submit_streamed(comm, eng, &streams, *t, per);
    }
    let p2p = if params::CCL_GPU_STREAM_P2P.get_bool() {
        stream
    } else {
        crate::pieces::StreamCut::OFF
    };
    if let Some(per) = crate::pieces::streamed_p2p(&tasks, p2p) {
        return submit_streamed_p2p(comm, eng, &streams, &tasks, per);
    }
    let whole_p2p = p2p.min > 0;
    let (jobs, gated) = crate::pieces::split(
        &tasks,
        rank,
        n,
        piece_bytes,
        stream,
        whole_p2p,
        &is_device_ptr,
    )
    .into_jobs(tasks);
    let gates = gated.as_ref().map_or(jobs.len(), |g| g.gates);
    let (first, count) = take_slots(eng, comm, gates, "a group")?;
    let seq = |k: usize| first.wrapping_add(k as u32);
    let mut specs = Vec::with_capacity(jobs.len());
    {
        let mut issue = comm.0.issue.lock();
        for (k, p) in jobs.iter().enumerate() {
            match plan_specs(comm, &mut issue, p) {
                Ok(s) => specs.push(s),
                // Before any job took sequence numbers nothing is lost; after, the peers wait
                // for pieces this rank will never send.
                Err(e) if k == 0 => return Err(e),
                Err(e) => {
                    comm.set_async_error(&e);
                    return Err(e);
                }
            }
        }
    }
    // From here on this rank has taken sequence numbers its peers will match: a failure must
    // poison the communicator, and the proxy must still run (and release) the operations.
    let staged = (|| {
        let (st, ios) = stage_pieces(&jobs, gated.as_ref(), rank, n, &is_device_ptr)?;
        let (chunk, base) = eng.chunk(st.bytes, &comm.0.abort)?;
        for s in specs.iter_mut() {
            st.rebase(s, base);
        }
        if let Some(g) = &gated {
            attach_gates(eng, &mut specs, &jobs, &g.input, g.gates, first);
        }
        Ok((ios, chunk, base))
    })();
    let (ios, chunk, base) = staged.inspect_err(|e| comm.set_async_error(e))?;
    let per_job = if gated.is_some() { count } else { 1 };
    let jobs = specs.into_iter().enumerate().map(|(k, s)| Job {
        first: seq(k),
        last: seq(k).wrapping_add(per_job - 1),
        specs: s,
        graph: None,
    });
    let local = gated.as_ref().map_or(&[][..], |g| &g.local[..]);
    let staged = Staged {
        ios: &ios,
        local,
        chunk,
        base,
    };
    hand_over(comm, eng, &streams, first, count, jobs, staged)
}

/// A reduction that goes as sends and receives of the operands, folded on the GPU
/// (`CCL_GPU_FOLD_BYTES`): of two ranks an all-reduce, reduce-scatter or reduce; of three to
/// eight ([`Wide`]) an all-reduce or reduce-scatter, block by block.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fold {
    /// What each transfer carries (and the fold covers): of more than two ranks, one block.
    bytes: usize,
    /// Two ranks: where in the send buffer the operand this rank sends starts (`None`: it
    /// sends nothing, a reduce's root).
    send_at: Option<usize>,
    /// Where in the send buffer this rank's own operand starts, folded with the ones it
    /// receives into its receive buffer (`None`: it receives nothing, a reduce's other rank).
    own_at: Option<usize>,
    /// Float average and PreMulSum: each rank scales its operands by this before they meet.
    prescale: Option<[u8; 8]>,
    /// Integer average: the sum divided by the number of ranks afterwards.
    divide: bool,
    /// More than two ranks.
    wide: Option<Wide>,
}

/// A fold of `n` ranks (3 to [`REDUCE_N_MAX`]): each rank sends block `j` of its input to rank
/// `j`, receives its own block of every other rank's input, and folds the `n` of them in rank
/// order in one kernel; an all-reduce (`gather`) then sends its folded block to every rank and
/// receives theirs, as an all-gather. The same bytes as the ring cross the network, each rank
/// reaching every other at once, and no CPU reduces.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Wide {
    n: usize,
    gather: bool,
}

/// Most ranks a wide fold takes: one kernel reads every operand.
const REDUCE_N_MAX: usize = ccl_cuda::cuda::source::REDUCE_N_MAX;

/// Which of a group's operations [`submit_folded`] folds on the GPU. Each is decided on the
/// operation alone and the settings every rank shares, so a rank that groups it with other
/// operations and one that calls it alone decide alike; a reduce's other rank does not look at
/// its receive buffer. One that shares memory with another operation of its group stays staged
/// (those see each other's results in call order; the fold writes after the whole group).
fn folds_of(comm: &Comm, tasks: &[Task]) -> Vec<Option<Fold>> {
    let min = params::CCL_GPU_FOLD_BYTES.get_i64();
    if min <= 0 {
        return vec![None; tasks.len()];
    }
    let who = (comm.rank(), comm.nranks());
    if who.1 > 2 && !params::CCL_GPU_FOLD_WIDE.get_bool() {
        return vec![None; tasks.len()];
    }
    let max = params::CCL_GPU_FOLD_MAX_BYTES.get_i64().max(0) as usize;
    let shared_memory_only = comm.0.issue.lock().shared_memory_only;
    let mut folds: Vec<Option<Fold>> = tasks
        .iter()
        .map(|t| {
            fold_rule(
                t,
                who,
                shared_memory_only,
                (min as usize, max),
                &is_device_ptr,
            )
        })
        .collect();
    for (i, f) in folds.iter_mut().enumerate() {
        if f.is_some() && shares_memory(tasks, i, who) {
            *f = None;
        }
    }
    folds
}

/// Whether task `i`'s buffers overlap those of another task of the group.
fn shares_memory(tasks: &[Task], i: usize, (rank, nranks): (usize, usize)) -> bool {
    let ranges = |t: &Task| {
        let size = t.dtype.size();
        let (s, r) = crate::task::buffer_counts(t.kind, rank, nranks, t.count).unwrap_or((0, 0));
        [
            (t.send, s.saturating_mul(size)),
            (t.recv, r.saturating_mul(size)),
        ]
    };
    let overlap = |(a, la): (usize, usize), (b, lb): (usize, usize)| {
        la > 0 && lb > 0 && a < b.saturating_add(lb) && b < a.saturating_add(la)
    };
    let mine = ranges(&tasks[i]);
    tasks.iter().enumerate().any(|(j, t)| {
        j != i
            && ranges(t)
                .into_iter()
                .any(|o| mine.into_iter().any(|m| overlap(m, o)))
    })
}

fn fold_rule(
    t: &Task,
    (rank, nranks): (usize, usize),
    shared_memory_only: bool,
    (min, max): (usize, usize),
    is_dev: &dyn Fn(usize) -> bool,
) -> Option<Fold> {
    use ccl_collectives::Collective;
    if !(2..=REDUCE_N_MAX).contains(&nranks) || shared_memory_only || rank >= nranks {
        return None;
    }
    let peer = 1 - rank.min(1);
    let size = t.dtype.size();
    let whole = t.count.checked_mul(size)?;
    let (bytes, send_at, own_at, wide) = match t.kind {
        TaskKind::Coll(Collective::AllReduce) if nranks == 2 => (whole, Some(0), Some(0), None),
        TaskKind::Coll(Collective::ReduceScatter) if nranks == 2 => {
            (whole, Some(peer * whole), Some(rank * whole), None)
        }
        TaskKind::Coll(Collective::Reduce { root }) if nranks == 2 && root == rank => {
            (whole, None, Some(0), None)
        }
        TaskKind::Coll(Collective::Reduce { root }) if nranks == 2 && root == peer => {
            (whole, Some(0), None, None)
        }
        TaskKind::Coll(Collective::AllReduce) if nranks > 2 && t.count % nranks == 0 => {
            let block = whole / nranks;
            let wide = Wide {
                n: nranks,
                gather: true,
            };
            (block, None, Some(rank * block), Some(wide))
        }
        TaskKind::Coll(Collective::ReduceScatter) if nranks > 2 => {
            let wide = Wide {
                n: nranks,
                gather: false,
            };
            (whole, None, Some(rank * whole), Some(wide))
        }
        _ => return None,
    };
    // The kernels read whole elements; a reduce's other rank has no receive buffer.
    let folds = own_at.is_some();
    let usable = |p: usize| p % size == 0 && is_dev(p);
    if !(min..=max).contains(&bytes) || !usable(t.send) || (folds && !usable(t.recv)) {
        return None;
    }
    // A device-resident PreMulSum scalar is written by earlier stream work: its value is not
    // known when the kernels are queued.
    if let Reduction::PreMulSum(Scalar::Device(_)) = t.red {
        return None;
    }
    let prescale = ccl_cuda::host::reduce::premul_scalar(t, nranks);
    let divide = t.red == Reduction::Avg && !t.dtype.is_float();
    Some(Fold {
        bytes,
        send_at,
        own_at,
        prescale,
        divide,
        wide,
    })
}

/// A GPU scratch buffer reused by work queued on callers' streams: a communicator's folded
/// reductions (the operands received land in it and, for scaled reductions, this rank's scaled
/// operands) and a hierarchy's partial reductions ([`crate::hier`]).
#[derive(Default)]
pub(crate) struct StreamScratch {
    buf: Option<cuda::DeviceBuffer>,
    /// Recorded on each stream of the last group that used `buf`, after its folds: the next
    /// group's streams wait for them before anything writes `buf` again (groups may come on
    /// different streams).
    last_use: Vec<Event>,
    /// Events for the next recording.
    spare: Vec<Event>,
    /// Buffers outgrown while queued work may still read them: freed once that work is done.
    retired: Vec<(cuda::DeviceBuffer, Vec<Event>)>,
}

/// Where one folded operation's operands are: this rank's own and the one it sends (two
/// ranks), or the base of the blocks it sends (wide), in the caller's send buffer or, scaled,
/// in the scratch; and where the received ones land in the scratch, one block after another
/// in rank order.
struct FoldPlace {
    own: Option<u64>,
    sent: Option<u64>,
    incoming: u64,
}

/// A group with reductions to fold on the GPU ([`Fold`]): each becomes sends and receives of
/// its operands through the staged network path (those received landing in a scratch buffer on
/// the GPU), inside the group where the call put it; after the group one kernel per operation
/// folds the received operands with this rank's own in rank order, and wide all-reduces then
/// gather the folded blocks (a group of their own, after the group). The CPUs only move bytes:
/// the ring (or the exchange folded on the CPU) reduces in host memory, which held a two-GPU
/// all-reduce over the network below the send/receive rate (two H200s, 128 MiB, 2026-11-24:
/// 5.8-6.6 GB/s against 9.0 for a send/receive of host memory).
fn submit_folded(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    tasks: Vec<Task>,
    folds: &[Option<Fold>],
) -> Result<()> {
    let kernels = ccl_p2p::kernels_for(&eng.ctx, params::CCL_KERNEL_PRELOAD.get_bool())?;
    let rank = comm.rank();
    let nranks = comm.nranks();
    let folded: Vec<(&Task, Fold)> = tasks
        .iter()
        .zip(folds)
        .filter_map(|(t, f)| f.map(|f| (t, f)))
        .collect();
    let streams = streams_of(
        &eng.ctx,
        &folded.iter().map(|(t, _)| **t).collect::<Vec<_>>(),
    );
    let mut scratch = eng.fold.lock();
    let places = place_operands(eng, &kernels, &mut scratch, &folded, &streams)?;
    let group = with_transfers(&tasks, folds, &places, rank, nranks);
    submit_staged(comm, eng, group)?;
    // From here on the peers have this rank's operands: a failure must poison the communicator.
    let gathers = fold_received(eng, &kernels, &folded, &places, rank, nranks)
        .and_then(|g| scratch.release(&eng.ctx, &streams).map(|()| g))
        .inspect_err(|e| comm.set_async_error(e))?;
    drop(scratch);
    if gathers.is_empty() {
        return Ok(());
    }
    submit_staged(comm, eng, gathers).inspect_err(|e| comm.set_async_error(e))
}

/// The caller's stream of `t`.
fn stream_of(eng: &GpuEngine, t: &Task) -> Stream {
    // SAFETY: the caller's own live streams (NCCL's contract).
    unsafe { Stream::from_raw(&eng.ctx, t.stream as cuda::sys::CUstream) }
}

/// A folded operation's operands in the caller's send buffer (this rank's own and the one it
/// sends, each where used) and its share of the scratch, in blocks of `bytes`: the received
/// operands, then the scaled ones (two ranks: own and sent, each where used; wide: the whole
/// input). Returned as (own, sent, received, scaled).
fn scratch_blocks(t: &Task, f: &Fold) -> (Option<u64>, Option<u64>, usize, usize) {
    let own = f.own_at.map(|o| t.send as u64 + o as u64);
    let sent = f.send_at.map(|o| t.send as u64 + o as u64);
    let received = match f.wide {
        Some(w) => w.n - 1,
        None => usize::from(own.is_some()),
    };
    let scaled = match (f.prescale, f.wide) {
        (None, _) => 0,
        (Some(_), Some(w)) => w.n,
        (Some(_), None) => usize::from(own.is_some()) + usize::from(sent.is_some() && sent != own),
    };
    (own, sent, received, scaled)
}

/// Claims the scratch for the folded operations of a group (on `streams`) and places each
/// one's operands ([`FoldPlace`]), queuing the scaling of those a reduction scales first.
fn place_operands(
    eng: &GpuEngine,
    kernels: &Kernels,
    scratch: &mut StreamScratch,
    folded: &[(&Task, Fold)],
    streams: &[Stream],
) -> Result<Vec<FoldPlace>> {
    let total: usize = folded
        .iter()
        .map(|(t, f)| {
            let (_, _, received, scaled) = scratch_blocks(t, f);
            (received + scaled) * f.bytes
        })
        .sum();
    let mut next = scratch.claim(&eng.ctx, total, streams)?;
    let mut places = Vec::with_capacity(folded.len());
    for (t, f) in folded {
        let (own, sent, received, _) = scratch_blocks(t, f);
        let incoming = next;
        next += (received * f.bytes) as u64;
        let stream = stream_of(eng, t);
        let size = t.dtype.size();
        let mut scale = |src: u64, blocks: usize| -> Result<u64> {
            let Some(s) = f.prescale else { return Ok(src) };
            let dst = next;
            next += (blocks * f.bytes) as u64;
            let n = blocks * f.bytes / size;
            // SAFETY: `src` holds `n` elements of the caller's send buffer (checked device
            // memory, aligned); `dst` is a part of the scratch claimed above for the group's
            // streams.
            unsafe { kernels.premul(&stream, t.dtype, dst, src, n, s) }.map_err(cuda_err)?;
            Ok(dst)
        };
        let place = match f.wide {
            Some(w) => {
                let base = scale(t.send as u64, w.n)?;
                FoldPlace {
                    own: f.own_at.map(|o| base + o as u64),
                    sent: Some(base),
                    incoming,
                }
            }
            None => {
                let own_op = own.map(|o| scale(o, 1)).transpose()?;
                let sent_op = if sent.is_some() && sent == own {
                    own_op
                } else {
                    sent.map(|o| scale(o, 1)).transpose()?
                };
                FoldPlace {
                    own: own_op,
                    sent: sent_op,
                    incoming,
                }
            }
        };
        places.push(place);
    }
    Ok(places)
}

/// The group as it goes to the staged path: each folded operation, where the call put it,
/// replaced by the sends and receives of its operands.
fn with_transfers(
    tasks: &[Task],
    folds: &[Option<Fold>],
    places: &[FoldPlace],
    rank: usize,
    nranks: usize,
) -> Vec<Task> {
    let mut group = Vec::with_capacity(tasks.len() + places.len() * 2);
    let mut place = places.iter();
    for (t, f) in tasks.iter().zip(folds) {
        let (Some(f), Some(p)) = (f, f.and_then(|_| place.next())) else {
            group.push(*t);
            continue;
        };
        group.extend(fold_transfers(t, f, p, rank, nranks));
    }
    group
}

/// Queues, behind the group on each folded operation's stream, the kernels that fold the
/// received operands with this rank's own in rank order (an integer average then divided).
/// Returns the transfers of the wide all-reduces' gathers.
fn fold_received(
    eng: &GpuEngine,
    kernels: &Kernels,
    folded: &[(&Task, Fold)],
    places: &[FoldPlace],
    rank: usize,
    nranks: usize,
) -> Result<Vec<Task>> {
    let mut gathers = Vec::new();
    for ((t, f), p) in folded.iter().zip(places) {
        let Some(own) = p.own else { continue };
        let (dt, op) = (t.dtype, t.red.arithmetic());
        let n = f.bytes / dt.size();
        let stream = stream_of(eng, t);
        let (out, srcs) = match f.wide {
            Some(w) => {
                let out = t.recv as u64
                    + if w.gather {
                        f.own_at.unwrap_or(0) as u64
                    } else {
                        0
                    };
                let srcs: Vec<u64> = (0..w.n)
                    .map(|j| match j == rank {
                        true => own,
                        false => received_from(p, f, j, rank),
                    })
                    .collect();
                (out, srcs)
            }
            None if rank == 0 => (t.recv as u64, vec![own, p.incoming]),
            None => (t.recv as u64, vec![p.incoming, own]),
        };
        // SAFETY: the sources are the scratch (claimed for these streams until the events
        // the caller records after this) and the caller's send buffer; `out` is in the
        // caller's receive buffer, `n` elements (checked device memory, aligned), equal to or
        // disjoint from each source (NCCL's in-place rule); every one stays valid until the
        // stream has run the kernels.
        unsafe { fold_kernels(kernels, &stream, (dt, op), out, &srcs, n) }?;
        if f.divide {
            // SAFETY: as above.
            unsafe { kernels.div_int(&stream, dt, out, n, nranks as u64) }.map_err(cuda_err)?;
        }
        if let Some(Wide { gather: true, .. }) = f.wide {
            gathers.extend(gather_transfers(t, f, rank, nranks));
        }
    }
    Ok(gathers)
}

/// Where rank `j`'s operand lands in the scratch of a wide fold on `rank`: the other ranks'
/// blocks one after another in rank order.
fn received_from(p: &FoldPlace, f: &Fold, j: usize, rank: usize) -> u64 {
    let slot = if j < rank { j } else { j - 1 };
    p.incoming + (slot * f.bytes) as u64
}

/// A send or receive of one of `t`'s folded blocks, marked as a fold's (`Task::fold`).
fn fold_transfer(t: &Task, f: &Fold, kind: TaskKind, send: u64, recv: u64) -> Task {
    Task {
        kind,
        send: send as usize,
        recv: recv as usize,
        count: f.bytes / t.dtype.size(),
        red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
        fold: true,
        ..*t
    }
}

/// The sends and receives that carry one folded operation's operands: to the peer (two
/// ranks), or block `j` to rank `j` and every other rank's block of this rank into the scratch
/// in rank order (wide).
fn fold_transfers(t: &Task, f: &Fold, p: &FoldPlace, rank: usize, nranks: usize) -> Vec<Task> {
    let transfer = |kind, send, recv| fold_transfer(t, f, kind, send, recv);
    let mut out = Vec::new();
    match f.wide {
        Some(w) => {
            let base = p.sent.unwrap_or(t.send as u64);
            for j in (0..w.n).filter(|&j| j != rank) {
                let block = (j * f.bytes) as u64;
                out.push(transfer(TaskKind::Send { peer: j }, base + block, 0));
                let into = received_from(p, f, j, rank);
                out.push(transfer(TaskKind::Recv { peer: j }, 0, into));
            }
        }
        None => {
            let peer = 1 - rank.min(1);
            debug_assert_eq!(nranks, 2);
            if let Some(src) = p.sent {
                out.push(transfer(TaskKind::Send { peer }, src, 0));
            }
            if p.own.is_some() {
                out.push(transfer(TaskKind::Recv { peer }, 0, p.incoming));
            }
        }
    }
    out
}

/// A wide all-reduce's second half: this rank's folded block to every rank, theirs into their
/// places in the receive buffer.
fn gather_transfers(t: &Task, f: &Fold, rank: usize, nranks: usize) -> Vec<Task> {
    let block = |j: usize| (t.recv + j * f.bytes) as u64;
    let transfer = |kind, send, recv| fold_transfer(t, f, kind, send, recv);
    (0..nranks)
        .filter(|&j| j != rank)
        .flat_map(|j| {
            [
                transfer(TaskKind::Send { peer: j }, block(rank), 0),
                transfer(TaskKind::Recv { peer: j }, 0, block(j)),
            ]
        })
        .collect()
}

/// `out = srcs[0] (op) srcs[1] (op) ...` in source order: one kernel over every source, or,
/// where that kernel is not to be had, a chain of two-source kernels (the same bits, unless
/// `out` is a source other than the first: that one then leads the chain, since each step
/// overwrites `out`; a wide fold's block is folded by one rank only, so all ranks still hold
/// the same bits).
///
/// # Safety
/// As [`ccl_cuda::cuda::kernels::Kernels::reduce_n`]: every source and `out` hold `n` elements
/// valid until the stream has run the kernels; `out` is equal to or disjoint from each source.
unsafe fn fold_kernels(
    kernels: &ccl_cuda::cuda::kernels::Kernels,
    stream: &Stream,
    (dt, op): (ccl_cuda::DataType, ccl_cuda::ReduceKind),
    out: u64,
    srcs: &[u64],
    n: usize,
) -> Result<()> {
    if srcs.len() > 2 {
        // SAFETY: the caller's contract.
        if unsafe { kernels.reduce_n(stream, dt, op, out, srcs, n) }.is_ok() {
            return Ok(());
        }
    }
    let mut order = srcs.to_vec();
    // One step reads both sources before writing: the order stays (two ranks each fold the
    // whole message and must get the same bits).
    if let Some(k) = order
        .iter()
        .position(|&s| s == out)
        .filter(|_| srcs.len() > 2)
    {
        let aliased = order.remove(k);
        order.insert(0, aliased);
    }
    let (first, rest) = order
        .split_first()
        .ok_or_else(|| Error::internal("a fold of no operands"))?;
    let mut acc = *first;
    for &s in rest {
        // SAFETY: the caller's contract; `out` is no source read after the first step (the
        // one it equals, if any, leads), and from then on `acc` is `out`, written by the
        // kernel before it in stream order.
        unsafe { kernels.reduce(stream, dt, op, out, acc, s, n) }.map_err(cuda_err)?;
        acc = out;
    }
    Ok(())
}

impl StreamScratch {
    /// A scratch of at least `bytes` for work queued next on `streams`, which are made to wait
    /// for the previous group's use of it.
    pub(crate) fn claim(
        &mut self,
        ctx: &Arc<Context>,
        bytes: usize,
        streams: &[Stream],
    ) -> Result<u64> {
        self.retired
            .retain(|(_, evs)| !evs.iter().all(|ev| ev.query().unwrap_or(false)));
        if !self.buf.as_ref().is_some_and(|b| b.len() >= bytes) {
            if let Some(old) = self.buf.take() {
                self.retired.push((old, std::mem::take(&mut self.last_use)));
            }
            // Whole MiBs, so nearby sizes share one buffer.
            let cap = bytes.max(1).div_ceil(1 << 20) << 20;
            self.buf = Some(cuda::DeviceBuffer::new(ctx, cap).map_err(cuda_err)?);
        }
        for s in streams {
            for ev in &self.last_use {
                s.wait_event(ev).map_err(cuda_err)?;
            }
        }
        self.buf
            .as_ref()
            .map(|b| b.ptr())
            .ok_or_else(|| Error::internal("fold scratch missing"))
    }

    /// Waits for the work queued on it so far (before it is freed under that work).
    pub(crate) fn settle(&self) {
        for ev in self
            .last_use
            .iter()
            .chain(self.retired.iter().flat_map(|(_, evs)| evs))
        {
            let _ = ev.synchronize();
        }
    }

    /// Marks the scratch as read by the work queued on `streams` so far.
    pub(crate) fn release(&mut self, ctx: &Arc<Context>, streams: &[Stream]) -> Result<()> {
        self.spare.append(&mut self.last_use);
        for s in streams {
            let ev = match self.spare.pop() {
                Some(ev) => ev,
                None => plain_event(ctx)?,
            };
            s.record(&ev).map_err(cuda_err)?;
            self.last_use.push(ev);
        }
        Ok(())
    }
}

/// A staged group laid out in a pinned chunk: its piece copies, own-block copies on the
/// device, and the chunk (index and address).
struct Staged<'a> {
    ios: &'a [PieceIo],
    local: &'a [crate::pieces::LocalCopy],
    chunk: usize,
    base: usize,
}

/// Hands a staged group's jobs (slots `first..first+count`) to the proxy and orders its copies
/// on the streams. The ranks' sequence numbers are taken: a failure poisons the communicator,
/// and the proxy still runs (and releases) what was handed over.
fn hand_over(
    comm: &Comm,
    eng: &GpuEngine,
    streams: &[Stream],
    first: u32,
    count: u32,
    jobs: impl Iterator<Item = Job>,
    st: Staged,
) -> Result<()> {
    let tx = eng
        .tx
        .lock()
        .clone()
        .ok_or_else(|| Error::invalid_usage("communicator is shutting down"))?;
    for job in jobs {
        tx.send(job)
            .map_err(|_| Error::internal("proxy thread is gone"))?;
    }
    eng.submitted
        .store(first.wrapping_add(count - 1), Ordering::Release);
    if let Err(e) = order_on_streams(eng, streams, first, st.ios, st.local, st.chunk, st.base) {
        // The stream may never write the start slots now: write them from here so the proxy
        // runs the operations with its peers and releases whatever the stream did queue.
        for k in 0..count {
            let s = first.wrapping_add(k);
            eng.start.atomic(s).store(s, Ordering::Release);
        }
        comm.set_async_error(&e);
        return Err(e);
    }
    Ok(())
}

/// Bounded enqueue: never more than [`SLOTS`] operations outstanding on one communicator.
/// The start/done slots of a submission of `pieces` pieces: the first one and the count, once
/// the proxy has room for all of them. `what` names the submission in the error.
fn take_slots(eng: &GpuEngine, comm: &Comm, pieces: usize, what: &str) -> Result<(u32, u32)> {
    let count = u32::try_from(pieces)
        .ok()
        .filter(|c| (1..SLOTS).contains(c))
        .ok_or_else(|| Error::internal(format!("{what} split into too many pieces")))?;
    let first = eng.submitted.load(Ordering::Relaxed).wrapping_add(1);
    wait_for_room(eng, comm, first.wrapping_add(count - 1))?;
    Ok((first, count))
}

fn wait_for_room(eng: &GpuEngine, comm: &Comm, last: u32) -> Result<()> {
    while last.wrapping_sub(eng.completed.load(Ordering::Acquire)) >= SLOTS {
        if comm.0.abort.load(Ordering::Relaxed) {
            return Err(Error::system("communicator aborted"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

/// [`submit`] of a lone collective that runs as one plan on piece gates
/// ([`crate::pieces::streamed`], pieces of `per` bytes): gate g's start slot opens when the
/// g-th input piece the schedule needs is in host memory, and its done slot when the g-th
/// output piece to be finished is, so the stream copies down first what is read first and
/// copies up each piece of the result as soon as the schedule wrote its last byte there.
fn submit_streamed(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    streams: &[Stream],
    task: Task,
    per: usize,
) -> Result<()> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let sz = task.dtype.size();
    // Bytes of the input and the output (a reduce-scatter's output is a block of its input).
    let (in_bytes, out_bytes) = buffer_counts(task.kind, rank, n, task.count)
        .and_then(|(s, r)| Some((s.checked_mul(sz)?, r.checked_mul(sz)?)))
        .ok_or_else(|| Error::invalid_argument("count overflows"))?;
    let (k_in, k_out) = (in_bytes.div_ceil(per), out_bytes.div_ceil(per));
    // Gate g opens once the g-th input piece is down and lands once the g-th output piece
    // is final; a gate beyond either buffer's pieces copies nothing that way (its done slot
    // is set when the job ends).
    let k = k_in.max(k_out);
    let (first, count) = take_slots(eng, comm, k, "a streamed collective")?;
    let mut specs = plan_specs(comm, &mut comm.0.issue.lock(), std::slice::from_ref(&task))?;
    // A buffer in host memory (the caller's) needs no copies and no gates.
    let (dev_in, dev_out) = (is_device_ptr(task.send), is_device_ptr(task.recv));
    let own = own_block_on_device(&task, rank, n, dev_in && dev_out);
    // An all-to-all in place stages its input and output apart in host memory and runs the
    // schedule for buffers apart: its receives land in place at once, where in one buffer they
    // go to scratch and are copied into place on the CPU after every send (a receive's target
    // may still hold a block to send). On the device every copy down is queued before any copy
    // up, so the copies up cannot overwrite input the copies down still read.
    let apart_in_host = task.kind == TaskKind::Coll(ccl_collectives::Collective::AlltoAll)
        && task.send == task.recv
        && dev_in
        && dev_out;
    tracing::trace!(
        "rank {rank}: {} streamed on {k} gates, {per}-byte pieces: {in_bytes} bytes in, \
         {out_bytes} out{}{}",
        task.kind.name(),
        if own.is_some() {
            ", own block on the GPU"
        } else {
            ""
        },
        if apart_in_host { ", staged apart" } else { "" }
    );
    let streaming = Streaming {
        task,
        rank,
        n,
        per,
        in_bytes,
        out_bytes,
        k_in,
        k_out,
        dev_in,
        dev_out,
        own,
        apart_in_host,
    };
    let mut local = Vec::new();
    // From here on this rank has taken a sequence number its peers will match.
    let staged = streaming.stage(comm, eng, first, &mut specs, &mut local);
    hand_over_streamed(comm, eng, streams, (first, count), specs, staged, &local)
}

/// A lone collective [`submit_streamed`] runs on piece gates: its buffers cut in pieces of
/// `per` bytes, what of them goes through host memory and how.
struct Streaming {
    task: Task,
    rank: usize,
    n: usize,
    per: usize,
    /// Bytes of the input and the output.
    in_bytes: usize,
    out_bytes: usize,
    /// Pieces of the input and of the output.
    k_in: usize,
    k_out: usize,
    /// Which buffers are GPU memory (the others need no copies and no gates).
    dev_in: bool,
    dev_out: bool,
    /// The own block that stays on the device.
    own: Option<OwnBlock>,
    /// An all-to-all in place, staged with its input and output apart in host memory.
    apart_in_host: bool,
}

impl Streaming {
    /// Piece `i` of the buffer at `dev` that holds `bytes`: (start, end).
    fn piece(&self, dev: usize, i: usize, bytes: usize) -> (usize, usize) {
        (dev + i * self.per, dev + ((i + 1) * self.per).min(bytes))
    }

    /// Lays the collective out in a pinned chunk and gates its one plan (`specs`), the copies
    /// of own blocks on the device going to `local`. Returns each gate's copies, the chunk and
    /// its address.
    fn stage(
        &self,
        comm: &Comm,
        eng: &GpuEngine,
        first: u32,
        specs: &mut [PlanSpec],
        local: &mut Vec<crate::pieces::LocalCopy>,
    ) -> Result<(Vec<PieceIo>, usize, usize)> {
        let task = &self.task;
        let (down, up) = self.schedule(specs, local)?;
        let st = Staging::plan(&device_ranges([task], self.rank, self.n, &is_device_ptr)?);
        // Where the input and the output start in the pinned chunk when staged apart.
        let out_at = self.in_bytes.div_ceil(64) * 64;
        let chunk_bytes = if self.apart_in_host {
            out_at + self.out_bytes.div_ceil(64) * 64
        } else {
            st.bytes
        };
        // The host offset of device address `x` of the input or the output.
        let host_off = |x: usize, input: bool| -> Result<usize> {
            match (self.apart_in_host, input) {
                (true, true) => Ok(x - task.send),
                (true, false) => Ok(out_at + (x - task.recv)),
                _ => st
                    .offset(x)
                    .ok_or_else(|| Error::internal("staging range lost")),
            }
        };
        let sz = task.dtype.size();
        // The parts of a piece that go through host memory: all of it but an own block that
        // stays on the device.
        let staged_parts = |dev: usize, i: usize, input: bool| {
            let bytes = if input { self.in_bytes } else { self.out_bytes };
            let (a, b) = self.piece(dev, i, bytes);
            let stays = self.own.as_ref().and_then(|o| o.stays(sz, input));
            let (o0, o1) = stays.map_or((b, b), |(lo, hi)| (dev + lo, dev + hi));
            [(a, b.min(o0)), (a.max(o1), b)]
                .into_iter()
                .filter(|(x, y)| x < y)
                .map(|(x, y)| Ok((x, host_off(x, input)?, y - x)))
                .collect::<Result<Vec<_>>>()
        };
        let k = self.k_in.max(self.k_out);
        let mut ios: Vec<PieceIo> = Vec::with_capacity(k);
        for g in 0..k {
            let mut io = PieceIo::default();
            if let (true, Some(&p)) = (self.dev_in, down.get(g)) {
                io.inputs = staged_parts(task.send, p, true)?;
            }
            if let (true, Some(&p)) = (self.dev_out, up.get(g)) {
                io.outputs = staged_parts(task.recv, p, false)?;
            }
            ios.push(io);
        }
        let (chunk, base) = eng.chunk(chunk_bytes, &comm.0.abort)?;
        // A buffer in host memory keeps its address.
        let host = |dev: usize, input: bool| host_off(dev, input).map_or(dev, |o| base + o);
        let (hs, hr) = (host(task.send, true), host(task.recv, false));
        if self.apart_in_host {
            if let [PlanSpec::Coll { task: t, .. }] = &mut specs[..] {
                (t.send, t.recv) = (hs, hr);
            }
        } else {
            st.rebase(specs, base);
        }
        let gates = self.gates(eng, first, (hs, hr), (&down, &up));
        if let [PlanSpec::Coll { gates: g, .. }] = &mut specs[..] {
            *g = Some(gates);
        }
        Ok((ios, chunk, base))
    }

    /// The schedule of the one plan in `specs` as it runs here (for buffers apart in host
    /// memory, without the own block's copy, which goes to `local`), and the order its
    /// pieces go down and come up ([`piece_orders`]).
    fn schedule(
        &self,
        specs: &mut [PlanSpec],
        local: &mut Vec<crate::pieces::LocalCopy>,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        let (task, rank, n) = (&self.task, self.rank, self.n);
        let sz = task.dtype.size();
        let [PlanSpec::Coll { sched, .. }] = specs else {
            return Err(Error::internal("a streamed collective is not one plan"));
        };
        if self.apart_in_host {
            *sched = Arc::new(
                ccl_collectives::alltoall_out_of_place(rank, n, task.count)
                    .map_err(|e| Error::internal(format!("all-to-all schedule: {e}")))?,
            );
        }
        if let Some(o) = &self.own {
            *sched = Arc::new(without_copy(sched, o));
            let (src, dst) = (task.send + o.src * sz, task.recv + o.dst * sz);
            if src != dst {
                local.push(crate::pieces::LocalCopy {
                    src,
                    dst,
                    bytes: o.elems * sz,
                });
            }
        }
        Ok(piece_orders(sched, self.per / sz, self.k_in, self.k_out))
    }

    /// The plan's gates, for the buffers at `hs` (input) and `hr` (output) in host memory:
    /// each piece's host range with the flag of its gate, the inverse of the orders the
    /// pieces go `down` and come `up`. Done slots of gates without an output piece are set
    /// when the job ends.
    fn gates(
        &self,
        eng: &GpuEngine,
        first: u32,
        (hs, hr): (usize, usize),
        (down, up): (&[usize], &[usize]),
    ) -> CollGates {
        let seq = |g: usize| first.wrapping_add(g as u32);
        // SAFETY: the slots are pinned memory of the engine, which outlives every job; they
        // are accessed only atomically.
        let flag = |slots: &Slots, g: usize| unsafe { Flag::new(slots.atomic(seq(g)), seq(g)) };
        let pieces = |h: usize, bytes: usize, slots: &Slots, order: &[usize]| {
            let mut v = vec![(0, 0, flag(slots, 0)); order.len()];
            for (gate, &i) in order.iter().enumerate() {
                let (a, b) = self.piece(h, i, bytes);
                v[i] = (a, b, flag(slots, gate));
            }
            v
        };
        CollGates {
            input: if self.dev_in {
                pieces(hs, self.in_bytes, &eng.start, down)
            } else {
                Vec::new()
            },
            output: if self.dev_out {
                pieces(hr, self.out_bytes, &eng.done, up)
            } else {
                Vec::new()
            },
        }
    }
}

/// The own block of a streamed all-to-all, or a gather's, scatter's or broadcast's at its
/// root, whose buffers are both GPU memory, in place or apart: it goes from the input to the
/// output on the device (one device copy, none in place) instead of down to host memory,
/// through a host copy and back up -- with two ranks half of the data, and the host copy took
/// CPU the network path's engines need (one H100, two ranks over loopback, 128 and 512 MiB
/// all-to-all: streamed 2.7-3.4 GB/s against 3.1-4.2 for one collective per piece, which
/// copies own blocks on the device). Where nothing sends the block, that part of the input
/// stays on the device too.
struct OwnBlock {
    /// The schedule's copy it replaces: elements into the input and the output, and how many.
    src: usize,
    dst: usize,
    elems: usize,
    /// The schedule also sends the block (a broadcast's root): its input still goes down.
    sent: bool,
}

fn own_block_on_device(task: &Task, rank: usize, n: usize, on_device: bool) -> Option<OwnBlock> {
    use ccl_collectives::Collective;
    let (c, r) = (task.count, rank.checked_mul(task.count)?);
    let (src, dst, sent) = match task.kind {
        TaskKind::Coll(Collective::AlltoAll) => (r, r, false),
        TaskKind::Coll(Collective::Gather { root }) if root == rank => (0, r, false),
        TaskKind::Coll(Collective::Scatter { root }) if root == rank => (r, 0, false),
        TaskKind::Coll(Collective::Broadcast { root }) if root == rank => (0, 0, true),
        _ => return None,
    };
    if !on_device {
        return None;
    }
    let sz = task.dtype.size();
    let (in_len, out_len) = buffer_counts(task.kind, rank, n, c)?;
    let (in_end, out_end) = (
        task.send.checked_add(in_len.checked_mul(sz)?)?,
        task.recv.checked_add(out_len.checked_mul(sz)?)?,
    );
    let apart = in_end <= task.recv || out_end <= task.send;
    // In place (NCCL's conventions): the block sits at the same address in both buffers.
    let in_place = task.send.checked_add(src * sz) == task.recv.checked_add(dst * sz);
    (apart || in_place).then_some(OwnBlock {
        src,
        dst,
        elems: c,
        sent,
    })
}

impl OwnBlock {
    /// Its byte range in the input (`input`) or the output.
    fn bytes(&self, sz: usize, input: bool) -> (usize, usize) {
        let at = if input { self.src } else { self.dst };
        (at * sz, (at + self.elems) * sz)
    }

    /// The byte range of the input (`input`) or output that does not go through host memory.
    fn stays(&self, sz: usize, input: bool) -> Option<(usize, usize)> {
        (!(input && self.sent)).then(|| self.bytes(sz, input))
    }
}

/// `sched` without the copy of `own`'s block from the input to the output.
fn without_copy(sched: &ccl_collectives::Schedule, own: &OwnBlock) -> ccl_collectives::Schedule {
    use ccl_collectives::{BufId, Op, Slice};
    let mut s = sched.clone();
    let is = |sl: &Slice, buf, at| sl.buf == buf && sl.offset == at && sl.count == own.elems;
    for st in &mut s.steps {
        st.ops.retain(|op| {
            !matches!(op, Op::Copy { src, dst }
                if is(src, BufId::Send, own.src) && is(dst, BufId::Recv, own.dst))
        });
    }
    s
}

/// Hands a streamed submission -- one job over slots `first..first+count`, its pieces staged
/// (or the error that stopped that, which poisons the communicator) -- to the proxy and the
/// streams.
fn hand_over_streamed(
    comm: &Comm,
    eng: &GpuEngine,
    streams: &[Stream],
    (first, count): (u32, u32),
    specs: Vec<PlanSpec>,
    staged: Result<(Vec<PieceIo>, usize, usize)>,
    local: &[crate::pieces::LocalCopy],
) -> Result<()> {
    let (ios, chunk, base) = staged.inspect_err(|e| comm.set_async_error(e))?;
    let job = Job {
        first,
        last: first.wrapping_add(count - 1),
        specs,
        graph: None,
    };
    let staged = Staged {
        ios: &ios,
        local,
        chunk,
        base,
    };
    hand_over(
        comm,
        eng,
        streams,
        first,
        count,
        std::iter::once(job),
        staged,
    )
}

/// [`submit`] of a group of sends and receives that runs as one plan on byte-range gates
/// ([`crate::pieces::streamed_p2p`], pieces of `per` bytes): gate g's start slot opens when
/// the g-th piece of the sends' device buffers (in call order) is in host memory, its done
/// slot when the g-th piece of the receives' device buffers has every byte, so the stream's
/// copies overlap the transfers while every message stays whole.
fn submit_streamed_p2p(
    comm: &Comm,
    eng: &Arc<GpuEngine>,
    streams: &[Stream],
    tasks: &[Task],
    per: usize,
) -> Result<()> {
    let (rank, n) = (comm.rank(), comm.nranks());
    // (device start, device end) of every piece, inputs (sends) then outputs (receives).
    let mut pieces: [Vec<(usize, usize)>; 2] = Default::default();
    for t in tasks {
        let (addr, dir) = match t.kind {
            TaskKind::Send { .. } => (t.send, 0),
            TaskKind::Recv { .. } => (t.recv, 1),
            TaskKind::Coll(_) => return Err(Error::internal("a collective in a streamed group")),
        };
        if !is_device_ptr(addr) {
            continue;
        }
        let end = addr + t.count * t.dtype.size();
        pieces[dir].extend((addr..end).step_by(per).map(|a| (a, (a + per).min(end))));
    }
    let [inputs, outputs] = pieces;
    let k = inputs.len().max(outputs.len()).max(1);
    let (first, count) = take_slots(eng, comm, k, "a streamed group")?;
    let seq = |g: usize| first.wrapping_add(g as u32);
    let mut specs = plan_specs(comm, &mut comm.0.issue.lock(), tasks)?;
    // From here on this rank has taken sequence numbers its peers will match.
    let staged = (|| {
        let st = Staging::plan(&device_ranges(tasks, rank, n, &is_device_ptr)?);
        let mut ios: Vec<PieceIo> = (0..k).map(|_| PieceIo::default()).collect();
        for (io, &(a, b)) in ios.iter_mut().zip(&inputs) {
            io.inputs = st.io(&[(a, b, true)])?.inputs;
        }
        for (io, &(c, d)) in ios.iter_mut().zip(&outputs) {
            io.outputs = st.io(&[(c, d, false)])?.outputs;
        }
        let (chunk, base) = eng.chunk(st.bytes, &comm.0.abort)?;
        st.rebase(&mut specs, base);
        // A piece's host range from its start (its end may be the end of a staged range,
        // which maps to no byte of it).
        let host = |dev: usize| st.offset(dev).map_or(dev, |o| base + o);
        // SAFETY: the slots are pinned memory of the engine, which outlives every job; they
        // are accessed only atomically.
        let flag = |slots: &Slots, g: usize| unsafe { Flag::new(slots.atomic(seq(g)), seq(g)) };
        let gated = |list: &[(usize, usize)], slots: &Slots| {
            list.iter()
                .enumerate()
                .map(|(g, &(a, b))| (host(a), host(a) + (b - a), flag(slots, g)))
                .collect()
        };
        let gates = CollGates {
            input: gated(&inputs, &eng.start),
            output: gated(&outputs, &eng.done),
        };
        for spec in specs.iter_mut() {
            if let PlanSpec::P2p { byte_gates, .. } = spec {
                *byte_gates = Some(gates.clone());
            }
        }
        Ok((ios, chunk, base))
    })();
    hand_over_streamed(comm, eng, streams, (first, count), specs, staged, &[])
}

/// The order a streamed collective's `k` pieces of `per` elements go down and come back up:
/// inputs by the first step (and place in it) that reads them from the send buffer, outputs by
/// the last step that writes them in the receive buffer. Element `[i*per, (i+1)*per)` is
/// piece `i`; returned as piece indices in order.
fn piece_orders(
    sched: &ccl_collectives::Schedule,
    per: usize,
    k_in: usize,
    k_out: usize,
) -> (Vec<usize>, Vec<usize>) {
    use ccl_collectives::{BufId, Op, Slice};
    let mut first_read = vec![(usize::MAX, 0usize); k_in];
    let mut last_write = vec![(0usize, 0usize); k_out];
    // (step, thousandths into the slice) of each piece a slice covers.
    let touch = |s: &Slice, k: usize, step: usize, f: &mut dyn FnMut(usize, (usize, usize))| {
        let end = s.offset + s.count;
        for i in s.offset / per.max(1)..end.div_ceil(per.max(1)).min(k) {
            let from = (i * per).max(s.offset);
            f(i, (step, (from - s.offset) * 1000 / s.count.max(1)));
        }
    };
    for (step, st) in sched.steps.iter().enumerate() {
        for op in &st.ops {
            let (reads, write): (Vec<&Slice>, Option<&Slice>) = match op {
                Op::Send { src, .. } => (vec![src], None),
                Op::Recv { dst, .. } => (vec![], Some(dst)),
                Op::RecvReduce { local, dst, .. } | Op::RecvFold { local, dst, .. } => {
                    (vec![local], Some(dst))
                }
                Op::Copy { src, dst } => (vec![src], Some(dst)),
                Op::Reduce { src, local, dst } => (vec![src, local], Some(dst)),
            };
            for s in reads.into_iter().filter(|s| s.buf == BufId::Send) {
                touch(s, k_in, step, &mut |i, key| {
                    first_read[i] = first_read[i].min(key)
                });
            }
            if let Some(s) = write.filter(|s| s.buf == BufId::Recv) {
                touch(s, k_out, step, &mut |i, key| {
                    last_write[i] = last_write[i].max(key)
                });
            }
        }
    }
    let sorted = |keys: &[(usize, usize)]| {
        let mut v: Vec<usize> = (0..keys.len()).collect();
        v.sort_by_key(|&i| keys[i]);
        v
    };
    (sorted(&first_read), sorted(&last_write))
}

/// Gates of a gated group's point-to-point plan: its sends of piece k wait for start slot
/// `first + k`, its receives of piece k report on done slot `first + k` (the last piece's is
/// the job's end).
fn attach_gates(
    eng: &GpuEngine,
    specs: &mut [Vec<PlanSpec>],
    jobs: &[Vec<Task>],
    input: &[usize],
    gates: usize,
    first: u32,
) {
    let seq = |k: usize| first.wrapping_add(k as u32);
    // The point-to-point tasks' gates, in the order plan_specs keeps them.
    let of_task: Vec<usize> = jobs
        .iter()
        .flatten()
        .zip(input)
        .filter(|(t, _)| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }))
        .map(|(_, &g)| g)
        .collect();
    // SAFETY: the slots are pinned memory of the engine, which outlives every job; they are
    // accessed only atomically.
    let flag = |slots: &Slots, k: usize| unsafe { Flag::new(slots.atomic(seq(k)), seq(k)) };
    for spec in specs.iter_mut().flatten() {
        if let PlanSpec::P2p { gates: g, .. } = spec {
            *g = Some(PieceGates {
                of_task: of_task.clone(),
                start: (0..gates).map(|k| flag(&eng.start, k)).collect(),
                landed: (0..gates - 1).map(|k| flag(&eng.done, k)).collect(),
            });
        }
    }
}

/// The stream side of one group: every piece's inputs to the pinned chunk and its start slot,
/// then every piece's wait on its done slot and results back (so piece k's copies overlap the
/// proxy's work on its neighbours), the other streams joined before and after.
fn order_on_streams(
    eng: &GpuEngine,
    streams: &[Stream],
    first_seq: u32,
    pieces: &[PieceIo],
    local: &[crate::pieces::LocalCopy],
    chunk: usize,
    base: usize,
) -> Result<()> {
    let Some(first) = streams.first() else {
        return Ok(());
    };
    for s in &streams[1..] {
        let ev = plain_event(&eng.ctx)?;
        ev.record(s).map_err(cuda_err)?;
        first.wait_event(&ev).map_err(cuda_err)?;
    }
    let seq = |k: usize| first_seq.wrapping_add(k as u32);
    // SAFETY: device ranges are the caller's validated buffers; host ranges lie in the pinned
    // chunk sized for them, which is not reused before the event recorded below completes; the
    // slots live as long as the engine, which outlives every queued operation.
    unsafe {
        for (k, p) in pieces.iter().enumerate() {
            p.queue_inputs(first, base)?;
            first
                .write_value32(eng.start.device(seq(k)), seq(k))
                .map_err(cuda_err)?;
        }
        // Own blocks after every input went down, so they do not hold the pieces back.
        for c in local {
            first
                .memcpy_dtod(c.dst as u64, c.src as u64, c.bytes)
                .map_err(cuda_err)?;
        }
        for (k, p) in pieces.iter().enumerate() {
            first
                .wait_value32(eng.done.device(seq(k)), seq(k), WaitCond::Geq)
                .map_err(cuda_err)?;
            p.queue_outputs(first, base)?;
        }
    }
    let done_ev = plain_event(&eng.ctx)?;
    done_ev.record(first).map_err(cuda_err)?;
    for s in &streams[1..] {
        s.wait_event(&done_ev).map_err(cuda_err)?;
    }
    if let Some(c) = eng.chunks.lock().get_mut(chunk) {
        c.busy = Some(done_ev);
    }
    Ok(())
}

/// Waits until the proxy has finished everything submitted (host-path operations and
/// finalize must not overtake queued GPU work).
pub fn wait_idle(comm: &Comm) -> Result<()> {
    comm.0.gpu.wait_idle(&comm.0.abort)
}

impl crate::engine::Engine for GpuEngine {
    fn wait_idle(&self, abort: &std::sync::atomic::AtomicBool) -> Result<()> {
        let mut rounds = 0u32;
        while self.completed.load(Ordering::Acquire) != self.submitted.load(Ordering::Acquire) {
            if abort.load(Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            rounds = rounds.saturating_add(1);
            if rounds < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(())
    }

    /// Stops the proxy (after `wait_idle`, or at abort, when it releases every queued stream),
    /// then waits for the streams' last copies out of the staging chunks before freeing them.
    fn shutdown(&self, _aborted: bool) {
        self.tx.lock().take();
        let thread = self.thread.lock().take();
        if let Some(h) = thread {
            let _ = h.join();
        }
        for c in self.chunks.lock().iter() {
            if let Some(ev) = &c.busy {
                let _ = ev.synchronize();
            }
        }
        // The fold scratch is freed with the engine: not under kernels still queued to read it.
        self.fold.lock().settle();
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// Which of the proxy's queued jobs runs next, if any is ready (its inputs in host memory):
/// the first; else the first replayed graph job, ahead of the operations queued before it
/// (see `Proxy::run`). Replayed jobs keep their order among themselves, and so do the others.
fn next_job<T>(
    queue: &std::collections::VecDeque<T>,
    ready: impl Fn(&T) -> bool,
    replayed: impl Fn(&T) -> bool,
) -> Option<usize> {
    if queue.front().is_some_and(&ready) {
        return Some(0);
    }
    queue
        .iter()
        .position(replayed)
        .filter(|&k| queue.get(k).is_some_and(&ready))
}

/// The proxy: polls start slots, runs plans on staged host memory, writes done slots. It
/// makes no CUDA call (see the module doc).
struct Proxy {
    comm: Comm,
    start: Arc<Slots>,
    done: Arc<Slots>,
    completed: Arc<AtomicU32>,
}

// SAFETY: moved once into the proxy thread; the slots are pinned host memory accessed with
// atomics.
unsafe impl Send for Proxy {}

impl Proxy {
    fn run(self, rx: Receiver<Job>) {
        let abort: Arc<AtomicBool> = self.comm.0.abort.clone();
        // Jobs received, in order. A replayed graph's job may run before earlier ones whose
        // inputs have not reached host memory yet: those may be queued on a stream behind
        // the graph, which waits for its job (the same on every rank, so the order on the
        // wire agrees).
        let mut queue: std::collections::VecDeque<Job> = std::collections::VecDeque::new();
        let mut open = true;
        loop {
            if queue.is_empty() {
                if !open {
                    break;
                }
                match rx.recv() {
                    Ok(job) => queue.push_back(job),
                    Err(_) => break,
                }
            }
            let mut rounds = 0u32;
            let at = loop {
                if abort.load(Ordering::Relaxed) {
                    break 0;
                }
                let ready = |j: &Job| match j.graph {
                    Some(g) => g.start.load() == 1,
                    None => self.start.atomic(j.first).load(Ordering::Acquire) == j.first,
                };
                if let Some(k) = next_job(&queue, ready, |j| j.graph.is_some()) {
                    break k;
                }
                while open {
                    match rx.try_recv() {
                        Ok(job) => queue.push_back(job),
                        Err(crossbeam::channel::TryRecvError::Empty) => break,
                        Err(crossbeam::channel::TryRecvError::Disconnected) => open = false,
                    }
                }
                rounds = rounds.saturating_add(1);
                if rounds < 256 {
                    std::hint::spin_loop();
                } else if rounds < 4096 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            };
            let Some(job) = queue.remove(at) else {
                continue;
            };
            let r = if abort.load(Ordering::Relaxed) {
                Err(Error::system("communicator aborted"))
            } else {
                // A panic must not kill the proxy: the streams would wait on its done slot
                // forever.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(job.specs)))
                    .unwrap_or_else(|_| Err(Error::internal("panic in the GPU proxy")))
            };
            if let Err(e) = r {
                // The streams still move on (their data is not valid); the error is the
                // communicator's async error, as NCCL reports kernel-side failures.
                tracing::warn!("rank {}: GPU operation failed: {e}", self.comm.rank());
                self.comm.set_async_error(&e);
            }
            if let Some(g) = job.graph {
                g.finish();
                continue;
            }
            // Every slot of the job, pieces that landed early included (idempotent), so no
            // stream wait is left behind after an error.
            let mut s = job.first;
            loop {
                self.done.atomic(s).store(s, Ordering::Release);
                if s == job.last {
                    break;
                }
                s = s.wrapping_add(1);
            }
            self.completed.store(job.last, Ordering::Release);
        }
    }

    fn execute(&self, specs: Vec<PlanSpec>) -> Result<()> {
        let (rank, n) = (self.comm.rank(), self.comm.nranks());
        let mut guard = self.comm.0.state.lock();
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator was destroyed or aborted"))?;
        let plans = specs
            .iter()
            .map(|s| s.build(rank, n))
            .collect::<Result<Vec<_>>>()?;
        run_plans(&self.comm, state, plans)
    }
}

/// `ncclMemAlloc` with a GPU: device memory on the calling thread's current device (or
/// device 0). As NCCL does, CUDA VMM memory ([`cuda::VmmAllocation`], registered in
/// [`cuda::vmm`] so that peers can map it through its file descriptor) readable and writable by
/// every GPU of the process that has P2P to it; `cuMemAlloc` memory (legacy CUDA IPC) with
/// `NCCL_CUMEM_ENABLE=0` or where VMM fails. `None` without CUDA: the caller uses host memory.
pub fn mem_alloc(bytes: usize) -> Result<Option<usize>> {
    if !available() {
        return Ok(None);
    }
    let drv = cuda::Driver::get().map_err(cuda_err)?;
    let dev = cuda::current_device().ok().flatten().unwrap_or(0);
    // The device's primary context stays retained for the life of the process: releasing the
    // last reference would destroy it, and every allocation with it.
    static RETAINED: std::sync::OnceLock<Mutex<Vec<Arc<Context>>>> = std::sync::OnceLock::new();
    let ctx = {
        let mut held = RETAINED.get_or_init(Default::default).lock();
        match held.iter().find(|c| c.ordinal() == dev) {
            Some(c) => c.clone(),
            None => {
                let c = Context::new(dev).map_err(cuda_err)?;
                held.push(c.clone());
                c
            }
        }
    };
    if params::NCCL_CUMEM_ENABLE.get_bool() {
        match vmm_alloc(&ctx, bytes) {
            Ok(ptr) => {
                static TOLD: AtomicBool = AtomicBool::new(false);
                if !TOLD.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "ncclMemAlloc: CUDA VMM memory on device {dev}, shared with peers by file descriptor"
                    );
                }
                return Ok(Some(ptr));
            }
            Err(e) => {
                // Once at info: a device or driver without VMM fails every time.
                static TOLD: AtomicBool = AtomicBool::new(false);
                let msg = format!(
                    "ncclMemAlloc: no CUDA VMM memory for {bytes} bytes on device {dev} ({e}); \
                     using cuMemAlloc"
                );
                if TOLD.swap(true, Ordering::Relaxed) {
                    tracing::debug!("{msg}");
                } else {
                    tracing::info!("{msg}");
                }
            }
        }
    }
    let _current = ctx.scope().map_err(cuda_err)?;
    let mut ptr: cuda::sys::CUdeviceptr = 0;
    // SAFETY: writes one CUdeviceptr; `ctx` is current on this thread for the call.
    let r = unsafe { (drv.fns.cuMemAlloc)(&mut ptr, bytes.max(1)) };
    drv.check("cuMemAlloc_v2", r).map_err(cuda_err)?;
    Ok(Some(ptr as usize))
}

fn vmm_alloc(ctx: &Arc<Context>, bytes: usize) -> cuda::Result<usize> {
    let alloc = cuda::VmmAllocation::new(ctx, bytes)?;
    // Other GPUs of this process (one process driving several devices) reach the memory only
    // once granted; cuCtxEnablePeerAccess does not cover VMM memory.
    alloc.grant_peers()?;
    let info = cuda::vmm::register(alloc)?;
    tracing::debug!(
        "ncclMemAlloc: VMM {:#x}+{} on device {} (id {})",
        info.base,
        info.len,
        info.device,
        info.alloc_id
    );
    Ok(info.base as usize)
}

/// `ncclMemFree`: frees device memory from [`mem_alloc`]; `Ok(false)` when `ptr` is not
/// device memory (the caller frees host memory).
pub fn mem_free(ptr: usize) -> Result<bool> {
    if !available() {
        return Ok(false);
    }
    if let Some(alloc) = cuda::vmm::take(ptr as cuda::sys::CUdeviceptr) {
        alloc.free().map_err(cuda_err)?;
        return Ok(true);
    }
    if !is_device_ptr(ptr) {
        return Ok(false);
    }
    let drv = cuda::Driver::get().map_err(cuda_err)?;
    // SAFETY: `ptr` is a device allocation (checked above) the caller gives up.
    let r = unsafe { (drv.fns.cuMemFree)(ptr as cuda::sys::CUdeviceptr) };
    drv.check("cuMemFree_v2", r).map_err(cuda_err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::Collective;

    #[test]
    fn only_parts_after_the_first_on_a_stream_are_forked() {
        let on = |streams: &[usize]| -> Vec<Task> {
            streams
                .iter()
                .map(|&s| Task {
                    kind: TaskKind::Coll(Collective::AllReduce),
                    send: 0x1000,
                    recv: 0x1000,
                    count: 1,
                    dtype: ccl_cuda::DataType::Float32,
                    red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
                    stream: s,
                    fold: false,
                })
                .collect()
        };
        let parts = [
            on(&[1, 1, 2]),
            on(&[1]),
            on(&[3]),
            on(&[2, 1, 2]),
            on(&[3, 3]),
        ];
        let moves = streams_to_fork(parts.iter().map(Vec::as_slice));
        assert_eq!(moves, vec![(1, 1), (3, 2), (3, 1), (4, 3)]);
        // One part alone, or parts on streams of their own, stay put.
        assert!(streams_to_fork([on(&[1, 1])].iter().map(Vec::as_slice)).is_empty());
        assert!(streams_to_fork([on(&[1]), on(&[2])].iter().map(Vec::as_slice)).is_empty());
    }

    use crate::task::float_sum as t;

    /// A streamed two-rank all-reduce of 8 pieces: each rank copies down first the pieces its
    /// reduce-scatter reads first (the half it sends and the half it reduces into,
    /// alternating), and copies up first the 4 pieces of its own half, final after the
    /// reduce-scatter, while the all-gather still brings the rest.
    #[test]
    fn streamed_pieces_go_down_as_first_read_and_up_as_last_written() {
        use ccl_collectives::{schedule, Algorithm, BufId, Op};
        for rank in 0..2 {
            let sched = schedule(Collective::AllReduce, Algorithm::Ring, rank, 2, 800).unwrap();
            let own = sched.steps[0]
                .ops
                .iter()
                .find_map(|o| match o {
                    Op::RecvReduce { dst, .. } if dst.buf == BufId::Recv => Some(dst.offset / 100),
                    _ => None,
                })
                .unwrap();
            let (down, up) = piece_orders(&sched, 100, 8, 8);
            let mut sorted = down.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..8).collect::<Vec<_>>());
            let mine = |p: usize| (own..own + 4).contains(&p);
            assert!(up[..4].iter().all(|&p| mine(p)), "rank {rank}: {up:?}");
            assert!(
                down.chunks(2).all(|c| mine(c[0]) != mine(c[1])),
                "rank {rank}: {down:?}"
            );
        }
    }

    /// A streamed reduce-scatter has twice as many input pieces as output pieces (two ranks):
    /// both orders are whole permutations of their own pieces.
    #[test]
    fn a_streamed_reduce_scatter_orders_its_input_and_output_pieces_apart() {
        use ccl_collectives::{schedule, Algorithm};
        for rank in 0..2 {
            let sched = schedule(Collective::ReduceScatter, Algorithm::Ring, rank, 2, 400).unwrap();
            let (down, up) = piece_orders(&sched, 100, 8, 4);
            let mut d = down.clone();
            d.sort_unstable();
            assert_eq!(d, (0..8).collect::<Vec<_>>(), "rank {rank}");
            let mut u = up.clone();
            u.sort_unstable();
            assert_eq!(u, (0..4).collect::<Vec<_>>(), "rank {rank}");
        }
    }

    /// A streamed all-to-all, and a gather, scatter or broadcast at its root, keep the own
    /// block of GPU buffers on the device: the schedule loses exactly the copy of that block
    /// (in place and apart), nothing else; the input's block goes down only where it is sent.
    /// Non-roots, buffers that overlap only partly, host buffers and other collectives keep
    /// theirs.
    #[test]
    fn a_streamed_collective_leaves_its_own_block_on_the_device() {
        use ccl_collectives::{Algorithm, BufId, Op, Schedule};
        let task = |coll, send, recv| t(TaskKind::Coll(coll), send, recv, 100);
        let copies = |s: &Schedule| {
            s.steps
                .iter()
                .flat_map(|st| &st.ops)
                .filter(|op| matches!(op, Op::Copy { .. }))
                .cloned()
                .collect::<Vec<_>>()
        };
        for (n, rank) in [(2, 0), (2, 1), (3, 2)] {
            let ar = task(Collective::AllReduce, 0x1000, 0x9000);
            assert!(own_block_on_device(&ar, rank, n, true).is_none());
            let r = 100 * rank;
            // 4-byte floats, 100 per block: (collective, input block, output block, input and
            // output addresses in place).
            for (coll, src, dst, in_place, sent) in [
                (Collective::AlltoAll, r, r, (0x1000, 0x1000), false),
                (
                    Collective::Gather { root: rank },
                    0,
                    r,
                    (0x1000 + 4 * r, 0x1000),
                    false,
                ),
                (
                    Collective::Scatter { root: rank },
                    r,
                    0,
                    (0x1000, 0x1000 + 4 * r),
                    false,
                ),
                (
                    Collective::Broadcast { root: rank },
                    0,
                    0,
                    (0x1000, 0x1000),
                    true,
                ),
            ] {
                let apart = task(coll, 0x100000, 0x1000);
                let o = own_block_on_device(&apart, rank, n, true).expect("buffers apart");
                assert_eq!(
                    (o.src, o.dst, o.elems, o.sent),
                    (src, dst, 100, sent),
                    "{coll:?}"
                );
                let input = (!sent).then_some((4 * src, 4 * src + 400));
                assert_eq!(o.stays(4, true), input);
                assert_eq!(o.stays(4, false), Some((4 * dst, 4 * dst + 400)));
                let ip = task(coll, in_place.0, in_place.1);
                assert!(
                    own_block_on_device(&ip, rank, n, true).is_some(),
                    "{coll:?}"
                );
                let part = task(coll, in_place.0 + 4, in_place.1);
                assert!(
                    own_block_on_device(&part, rank, n, true).is_none(),
                    "{coll:?}"
                );
                assert!(own_block_on_device(&apart, rank, n, false).is_none());
                let algos: &[Algorithm] = match coll {
                    Collective::Broadcast { .. } => {
                        &[Algorithm::Direct, Algorithm::Ring, Algorithm::Tree]
                    }
                    _ => &[Algorithm::Direct],
                };
                let mut scheds: Vec<Schedule> = algos
                    .iter()
                    .map(|&a| ccl_collectives::schedule(coll, a, rank, n, 100).unwrap())
                    .collect();
                if coll == Collective::AlltoAll {
                    scheds.push(ccl_collectives::alltoall_out_of_place(rank, n, 100).unwrap());
                }
                for sched in scheds {
                    let before = copies(&sched);
                    let after = copies(&without_copy(&sched, &o));
                    assert_eq!(after.len() + 1, before.len(), "{coll:?} n {n} rank {rank}");
                    let gone: Vec<_> = before.iter().filter(|c| !after.contains(c)).collect();
                    assert!(
                        matches!(gone[..], [Op::Copy { src: s, dst: d }]
                            if s.buf == BufId::Send && d.buf == BufId::Recv
                                && s.offset == src && d.offset == dst),
                        "{gone:?}"
                    );
                    // Nothing sends the block from the output, which the host no longer
                    // holds, nor from the input unless it still goes down.
                    let sends = |buf, at: usize| {
                        sched.steps.iter().flat_map(|st| &st.ops).any(|op| {
                            matches!(op, Op::Send { src: s, .. }
                                if s.buf == buf && (at..at + 100).contains(&s.offset) && s.count > 0)
                        })
                    };
                    assert!(
                        !sends(BufId::Recv, dst),
                        "{coll:?} sends from its output block"
                    );
                    assert_eq!(
                        sends(BufId::Send, src),
                        sent,
                        "{coll:?} sends its input block"
                    );
                }
            }
            // A non-root gather, scatter or broadcast has no own block.
            let other = (rank + 1) % n;
            for coll in [
                Collective::Gather { root: other },
                Collective::Scatter { root: other },
                Collective::Broadcast { root: other },
            ] {
                let x = task(coll, 0x100000, 0x1000);
                assert!(own_block_on_device(&x, rank, n, true).is_none(), "{coll:?}");
            }
        }
    }

    /// A replayed graph's job overtakes operations queued before it that wait for their
    /// inputs (they may sit on a stream behind the graph); nothing else changes order.
    #[test]
    fn replayed_jobs_overtake_waiting_operations_only() {
        use std::collections::VecDeque;
        // (replayed, ready)
        let q = |v: &[(bool, bool)]| v.iter().copied().collect::<VecDeque<_>>();
        let next = |v: &[(bool, bool)]| next_job(&q(v), |j| j.1, |j| j.0);
        assert_eq!(next(&[]), None);
        assert_eq!(next(&[(false, true), (true, true)]), Some(0));
        assert_eq!(next(&[(false, false), (true, true)]), Some(1));
        assert_eq!(
            next(&[(false, false), (false, true), (true, true)]),
            Some(2)
        );
        assert_eq!(next(&[(false, false), (true, false), (true, true)]), None);
        assert_eq!(next(&[(true, false), (false, true)]), None);
        assert_eq!(next(&[(false, false), (false, true)]), None);
    }

    /// Device bytes a list of copies covers, as a sorted list of byte addresses' ranges merged.
    fn covered(copies: impl Iterator<Item = (usize, usize, usize)>) -> Vec<(usize, usize)> {
        let mut v: Vec<(usize, usize)> = copies.map(|(d, _, b)| (d, d + b)).collect();
        v.sort_unstable();
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (lo, hi) in v {
            match out.last_mut() {
                Some(l) if lo <= l.1 => l.1 = l.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        out
    }

    /// Pieces copy exactly what the whole group copies, each range once, at the host offsets
    /// of the one staging layout; a gated group's receives come back at their own piece.
    #[test]
    fn pieces_copy_what_the_whole_group_copies() {
        let dev = |p: usize| p != 0;
        let (rank, n) = (0, 2);
        let groups = [
            vec![
                t(TaskKind::Send { peer: 1 }, 0x10_0000, 0, 3 << 20),
                t(TaskKind::Recv { peer: 1 }, 0, 0x400_0000, 3 << 20),
            ],
            vec![t(
                TaskKind::Coll(Collective::AllReduce),
                0x10_0000,
                0x10_0000,
                5 << 20,
            )],
            vec![t(
                TaskKind::Coll(Collective::AlltoAll),
                0x10_0000,
                0x800_0000,
                2 << 20,
            )],
            vec![t(
                TaskKind::Coll(Collective::AllGather),
                0x800_0000 + (1 << 23) * rank,
                0x800_0000,
                2 << 20,
            )],
        ];
        for g in &groups {
            let (whole_st, whole) =
                stage_pieces(std::slice::from_ref(g), None, rank, n, &dev).unwrap();
            let split = crate::pieces::split(
                g,
                rank,
                n,
                4 << 20,
                crate::pieces::StreamCut::OFF,
                false,
                &|_| false,
            );
            assert!(
                !matches!(split, crate::pieces::Split::Whole),
                "{g:?} not cut"
            );
            let (jobs, gated) = split.into_jobs(g.clone());
            let (st, ios) = stage_pieces(&jobs, gated.as_ref(), rank, n, &dev).unwrap();
            assert!(ios.len() > 1, "{g:?}");
            assert_eq!(st.bytes, whole_st.bytes);
            let all_in = || ios.iter().flat_map(|p| p.inputs.iter().copied());
            let all_out = || ios.iter().flat_map(|p| p.outputs.iter().copied());
            let bytes = |v: &[(usize, usize, usize)]| v.iter().map(|c| c.2).sum::<usize>();
            assert_eq!(
                covered(all_in()),
                covered(whole[0].inputs.iter().copied()),
                "{g:?}"
            );
            // Outputs: the whole group's, less what no piece writes because it is the input
            // itself (an in-place all-gather's own block).
            let out = covered(all_out());
            let whole_out = covered(whole[0].outputs.iter().copied());
            let ins = covered(whole[0].inputs.iter().copied());
            let inside = |a: (usize, usize), v: &[(usize, usize)]| {
                v.iter().any(|b| b.0 <= a.0 && a.1 <= b.1)
            };
            assert!(out.iter().all(|&o| inside(o, &whole_out)), "{g:?}");
            let mut gaps = Vec::new();
            for w in &whole_out {
                let mut at = w.0;
                for o in out.iter().filter(|o| o.0 < w.1 && w.0 < o.1) {
                    if o.0 > at {
                        gaps.push((at, o.0));
                    }
                    at = at.max(o.1);
                }
                if at < w.1 {
                    gaps.push((at, w.1));
                }
            }
            assert!(
                gaps.iter().all(|&gap| inside(gap, &ins)),
                "{g:?}: {gaps:x?} lost"
            );
            // No byte copied twice in one direction (in place, a range is both, once each).
            assert_eq!(
                all_in().map(|c| c.2).sum::<usize>(),
                bytes(&whole[0].inputs),
                "{g:?}"
            );
            let out_bytes: usize = out.iter().map(|o| o.1 - o.0).sum();
            assert_eq!(all_out().map(|c| c.2).sum::<usize>(), out_bytes, "{g:?}");
            for (d, off, b) in all_in().chain(all_out()) {
                assert_eq!(st.offset(d), Some(off));
                assert!(off + b <= st.bytes);
            }
            if let Some(Gating {
                input,
                output,
                gates,
                ..
            }) = &gated
            {
                // A receive returns at its own gate, not at the end.
                assert_eq!(ios.len(), *gates);
                let early = output.iter().filter(|&&o| o + 1 < *gates).count();
                assert!(early > 0, "receives all wait for the end: {output:?}");
                assert!(input.iter().all(|&i| i < *gates));
            }
        }
    }

    /// The GPU fold takes two-rank reductions of aligned device buffers over the network within
    /// the window, with what each rank sends and folds and the scaling each reduction needs;
    /// nothing else.
    #[test]
    fn fold_takes_two_rank_reductions_of_device_memory_over_the_network() {
        use ccl_cuda::{DataType, ReduceKind};
        let dev = |p: usize| p >= 0x1000;
        let coll = |c, count| t(TaskKind::Coll(c), 0x10_0000, 0x20_0000, count);
        let ar = |count| coll(Collective::AllReduce, count);
        let win = (4096, 1 << 20);
        let rule = |ts: &[Task], rank, n, shm| fold_rule(&ts[0], (rank, n), shm, win, &dev);
        let plain = Some(Fold {
            bytes: 4096,
            send_at: Some(0),
            own_at: Some(0),
            prescale: None,
            divide: false,
            wide: None,
        });
        // floats: 1024 of them is just in the window, 1023 just out; the top edge likewise.
        assert_eq!(rule(&[ar(1024)], 0, 2, false), plain);
        assert_eq!(rule(&[ar(1024)], 1, 2, false), plain);
        assert_eq!(rule(&[ar(1023)], 0, 2, false), None);
        assert!(rule(&[ar(1 << 18)], 0, 2, false).is_some());
        assert_eq!(rule(&[ar((1 << 18) + 1)], 0, 2, false), None);
        // Reduce-scatter: each rank sends the peer's block and folds its own.
        let rs = coll(Collective::ReduceScatter, 1024);
        let at = |f: Option<Fold>| f.map(|f| (f.send_at, f.own_at));
        assert_eq!(at(rule(&[rs], 0, 2, false)), Some((Some(4096), Some(0))));
        assert_eq!(at(rule(&[rs], 1, 2, false)), Some((Some(0), Some(4096))));
        // Reduce: the root only receives and folds, the other rank only sends (and its receive
        // buffer, unused, is not looked at: both ranks decide alike).
        let mut to_one = coll(Collective::Reduce { root: 1 }, 1024);
        assert_eq!(at(rule(&[to_one], 1, 2, false)), Some((None, Some(0))));
        to_one.recv = 0;
        assert_eq!(at(rule(&[to_one], 0, 2, false)), Some((Some(0), None)));
        assert_eq!(rule(&[to_one], 1, 2, false), None);
        // Three to eight ranks: all-reduces whose count splits evenly go block by block (the
        // window is on a block: 3 x 1024 floats just in), reduce-scatters too, reduces not;
        // nine ranks, shared memory alone, a collective without arithmetic: not folded.
        let wide = |n, gather| Some(Wide { n, gather });
        let w = rule(&[ar(3 * 1024)], 1, 3, false);
        assert_eq!(
            w.map(|f| (f.bytes, f.own_at, f.wide)),
            Some((4096, Some(4096), wide(3, true)))
        );
        assert_eq!(rule(&[ar(3 * 1024 + 1)], 1, 3, false), None);
        assert_eq!(rule(&[ar(3 * 1023)], 1, 3, false), None);
        let rs8 = rule(&[rs], 7, 8, false);
        assert_eq!(
            rs8.map(|f| (f.own_at, f.wide)),
            Some((Some(7 * 4096), wide(8, false)))
        );
        let to_one = coll(Collective::Reduce { root: 1 }, 1024);
        assert_eq!(rule(&[to_one], 1, 3, false), None);
        assert_eq!(rule(&[ar(9 * 1024)], 0, 9, false), None);
        assert_eq!(rule(&[ar(1024)], 0, 2, true), None);
        let bc = coll(Collective::Broadcast { root: 0 }, 1024);
        assert_eq!(rule(&[bc], 0, 2, false), None);
        // Host memory or a misaligned element on either side: not folded.
        let mut host = ar(1024);
        host.send = 0x100;
        assert_eq!(rule(&[host], 0, 2, false), None);
        let mut odd = ar(1024);
        odd.recv += 2;
        assert_eq!(rule(&[odd], 0, 2, false), None);
        // Reductions: float average scales by 1/2 first, integer average divides after;
        // PreMulSum with an immediate scalar scales by it, with a device scalar it stays on the
        // ring; max stays plain.
        let with = |dtype, red| {
            let mut x = ar(1024);
            x.dtype = dtype;
            x.red = red;
            rule(&[x], 0, 2, false)
        };
        let half = ccl_cuda::host::reduce::from_f64(DataType::Float32, 0.5);
        assert_eq!(
            with(DataType::Float32, Reduction::Avg).map(|f| (f.prescale, f.divide)),
            Some((Some(half), false))
        );
        assert_eq!(
            with(DataType::Int32, Reduction::Avg).map(|f| (f.prescale, f.divide)),
            Some((None, true))
        );
        let s = [7, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            with(DataType::Int32, Reduction::PreMulSum(Scalar::Immediate(s))).map(|f| f.prescale),
            Some(Some(s))
        );
        assert_eq!(
            with(
                DataType::Int32,
                Reduction::PreMulSum(Scalar::Device(0x3000))
            ),
            None
        );
        assert_eq!(
            with(DataType::Int32, Reduction::Plain(ReduceKind::Max)).map(|f| f.bytes),
            Some(4096)
        );
    }

    /// A wide all-reduce of three ranks, seen from rank 1: block j of its input to rank j, the
    /// others' block 1 into the scratch in rank order; then its folded block to both and
    /// theirs into their places; every transfer marked as a fold's.
    #[test]
    fn a_wide_fold_sends_blocks_to_their_owners_and_gathers_the_folded_ones() {
        let t = t(
            TaskKind::Coll(Collective::AllReduce),
            0x10_0000,
            0x20_0000,
            3 * 1024,
        );
        let f = fold_rule(&t, (1, 3), false, (1, 1 << 30), &|_| true).unwrap();
        let p = FoldPlace {
            own: Some(0x10_1000),
            sent: Some(0x10_0000),
            incoming: 0x90_0000,
        };
        let what = |ts: Vec<Task>| -> Vec<(TaskKind, usize, usize, usize, bool)> {
            ts.iter()
                .map(|t| (t.kind, t.send, t.recv, t.count, t.fold))
                .collect()
        };
        assert_eq!(
            what(fold_transfers(&t, &f, &p, 1, 3)),
            [
                (TaskKind::Send { peer: 0 }, 0x10_0000, 0, 1024, true),
                (TaskKind::Recv { peer: 0 }, 0, 0x90_0000, 1024, true),
                (TaskKind::Send { peer: 2 }, 0x10_2000, 0, 1024, true),
                (TaskKind::Recv { peer: 2 }, 0, 0x90_1000, 1024, true),
            ]
        );
        assert_eq!(
            what(gather_transfers(&t, &f, 1, 3)),
            [
                (TaskKind::Send { peer: 0 }, 0x20_1000, 0, 1024, true),
                (TaskKind::Recv { peer: 0 }, 0, 0x20_0000, 1024, true),
                (TaskKind::Send { peer: 2 }, 0x20_1000, 0, 1024, true),
                (TaskKind::Recv { peer: 2 }, 0, 0x20_2000, 1024, true),
            ]
        );
    }

    /// In a group, an operation whose buffers another one's overlap is not folded (they see
    /// each other's results in call order); disjoint ones are, the way the peer calling them
    /// alone decides.
    #[test]
    fn fold_leaves_operations_sharing_memory_in_a_group_staged() {
        let ar = |send, recv| t(TaskKind::Coll(Collective::AllReduce), send, recv, 1024);
        let send = |at, count| t(TaskKind::Send { peer: 1 }, at, 0, count);
        let who = (0, 2);
        // 4096 bytes each: [0x10000, 0x11000) -> [0x20000, 0x21000).
        let group = [ar(0x1_0000, 0x2_0000), send(0x3_0000, 1024)];
        assert!(!shares_memory(&group, 0, who));
        assert!(!shares_memory(&group, 1, who));
        // A send of the all-reduce's last float of output overlaps; one just past it does not.
        assert!(shares_memory(
            &[ar(0x1_0000, 0x2_0000), send(0x2_0ffc, 1)],
            0,
            who
        ));
        assert!(!shares_memory(
            &[ar(0x1_0000, 0x2_0000), send(0x2_1000, 1)],
            0,
            who
        ));
        // An all-reduce reading another's output.
        let chained = [ar(0x1_0000, 0x2_0000), ar(0x2_0000, 0x4_0000)];
        assert!(shares_memory(&chained, 0, who) && shares_memory(&chained, 1, who));
        // In place alone shares nothing with another task.
        assert!(!shares_memory(&[ar(0x1_0000, 0x1_0000)], 0, who));
    }

    #[test]
    fn mem_alloc_is_vmm_memory_and_mem_free_releases_it() {
        if !available() {
            assert_eq!(mem_alloc(1000).ok().flatten(), None);
            assert!(!mem_free(0x1000).unwrap_or(true));
            return;
        }
        let p = mem_alloc(1000).unwrap().unwrap();
        match cuda::vmm::lookup(p as u64 + 999) {
            Some(info) => {
                assert_eq!(info.base, p as u64);
                assert!(info.len >= 1000);
            }
            // NCCL_CUMEM_ENABLE=0, or a device without VMM: cuMemAlloc memory.
            None => eprintln!("ncclMemAlloc fell back to cuMemAlloc"),
        }
        assert!(is_device_ptr(p));
        assert!(mem_free(p).unwrap());
        assert_eq!(cuda::vmm::lookup(p as u64), None);
    }
}
