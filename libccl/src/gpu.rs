//! The GPU path, first version: operations on device buffers are ordered with the caller's
//! CUDA streams by flags in pinned host memory and carried out by a proxy thread per
//! communicator (DESIGN.md invariant 2), so API calls return at once.
//!
//! For each group the caller's stream gets exactly two stream memory operations: it writes
//! the operation's start slot (everything queued before it on the stream has finished) and
//! waits on its done slot. The proxy polls the start slot, stages the device buffers through
//! pinned host memory, runs the same plans as the host backend over the shm/socket links,
//! copies the results back and writes the done slot. Slots are per operation (a ring of
//! `SLOTS`), so operations on different streams of one communicator cannot release each
//! other early. Host callbacks are never used and nothing waits inside one.
//!
//! Staging keeps NCCL's in-place aliasing: overlapping device ranges are staged as one host
//! range. Moving the data on copy engines between GPUs (cuda-ipc) replaces the staging in a
//! later step; the ordering machinery stays.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::{
    self, Context, Event, EventFlags, MemoryKind, PinnedBuffer, Stream, WaitCond,
};
use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::comm::Comm;
use crate::error::{Error, ErrorKind, Result};
use crate::group::{plan_specs, run_plans, PlanSpec};
use crate::params;
use crate::task::{buffer_counts, Reduction, Scalar, Task};

/// Operations that may be outstanding on one communicator's streams.
const SLOTS: u32 = 1024;
const SLOT_STRIDE: usize = 64;

fn cuda_err(e: cuda::CudaError) -> Error {
    Error::new(ErrorKind::Cuda, e.to_string())
}

/// Whether CUDA can be used at all (driver present, a device, not `CCL_DEVICE=host`).
pub fn available() -> bool {
    if params::CCL_DEVICE.get_str().eq_ignore_ascii_case("host") {
        return false;
    }
    cuda::Driver::get()
        .and_then(|d| d.device_count())
        .map(|n| n > 0)
        .unwrap_or(false)
}

/// The device of the calling thread's current context (what `cudaSetDevice` chose), 0 if
/// none, -1 without CUDA.
pub fn current_device() -> i32 {
    if !available() {
        return -1;
    }
    cuda::current_device().ok().flatten().unwrap_or(0)
}

fn is_device_ptr(p: usize) -> bool {
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
    Ok(tasks
        .iter()
        .any(|t| is_device_ptr(t.send) || is_device_ptr(t.recv)))
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

struct Job {
    seq: u32,
    specs: Vec<PlanSpec>,
}

/// A communicator's GPU state: its device context, flag slots and proxy thread.
pub struct GpuEngine {
    ctx: Arc<Context>,
    start: Arc<Slots>,
    done: Arc<Slots>,
    submitted: AtomicU32,
    completed: Arc<AtomicU32>,
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

// SAFETY: the pinned buffers are process-wide memory accessed through atomics; the context is
// Sync per ccl_cuda.
unsafe impl Send for GpuEngine {}
// SAFETY: as above.
unsafe impl Sync for GpuEngine {}

fn engine(comm: &Comm) -> Result<Arc<GpuEngine>> {
    let mut slot = comm.0.gpu.lock();
    if let Some(e) = slot.as_ref() {
        return Ok(e.clone());
    }
    // Context::new leaves the device's context current; the caller's thread (a `-g N` driver
    // switching between devices, or PyTorch) must keep the one it had.
    let prev = cuda::current_device().ok().flatten();
    let ctx = Context::new(comm.0.cuda_dev).map_err(cuda_err)?;
    if let Some(d) = prev.filter(|&d| d != comm.0.cuda_dev) {
        Context::new(d).map_err(cuda_err)?;
    }
    let start = Arc::new(Slots::new(&ctx)?);
    let done = Arc::new(Slots::new(&ctx)?);
    let (tx, rx) = crossbeam::channel::unbounded();
    let completed = Arc::new(AtomicU32::new(0));
    let e = Arc::new(GpuEngine {
        ctx: ctx.clone(),
        start: start.clone(),
        done: done.clone(),
        submitted: AtomicU32::new(0),
        completed: completed.clone(),
        tx: Mutex::new(Some(tx)),
        thread: Mutex::new(None),
    });
    let c = comm.clone();
    let proxy = Proxy {
        comm: c,
        ctx,
        start,
        done,
        completed,
        staging: None,
    };
    let h = std::thread::Builder::new()
        .name(format!("ccl-proxy-r{}", comm.rank()))
        .spawn(move || proxy.run(rx))
        .map_err(|e| Error::system(format!("spawn proxy thread: {e}")))?;
    *e.thread.lock() = Some(h);
    *slot = Some(e.clone());
    Ok(e)
}

/// Hands a group's operations on one communicator to its proxy and orders them on the
/// callers' streams. Returns without waiting for peers.
pub fn submit(comm: &Comm, tasks: Vec<Task>) -> Result<()> {
    let eng = engine(comm)?;
    let mut streams: Vec<usize> = Vec::new();
    for t in &tasks {
        if !streams.contains(&t.stream) {
            streams.push(t.stream);
        }
    }
    // SAFETY: the caller passes its own live cudaStream_t values (NCCL's contract).
    let streams: Vec<Stream> = streams
        .iter()
        .map(|&s| unsafe { Stream::from_raw(&eng.ctx, s as cuda::sys::CUstream) })
        .collect();
    for s in &streams {
        if !matches!(
            s.capture_status().map_err(cuda_err)?,
            cuda::CaptureStatus::None
        ) {
            return Err(Error::invalid_usage(
                "capturing libccl operations in a CUDA graph is not supported yet",
            ));
        }
    }
    let seq = eng.submitted.load(Ordering::Relaxed).wrapping_add(1);
    // Bounded enqueue: never more than SLOTS operations outstanding on one communicator.
    while seq.wrapping_sub(eng.completed.load(Ordering::Acquire)) >= SLOTS {
        if comm.0.abort.load(Ordering::Relaxed) {
            return Err(Error::system("communicator aborted"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let specs = plan_specs(comm, &mut comm.0.issue.lock(), &tasks)?;
    let tx = eng
        .tx
        .lock()
        .clone()
        .ok_or_else(|| Error::invalid_usage("communicator is shutting down"))?;
    tx.send(Job { seq, specs })
        .map_err(|_| Error::internal("proxy thread is gone"))?;
    eng.submitted.store(seq, Ordering::Release);
    let first = &streams[0];
    let flags = EventFlags {
        timing: false,
        interprocess: false,
        blocking_sync: false,
    };
    for s in &streams[1..] {
        let ev = Event::new(&eng.ctx, flags).map_err(cuda_err)?;
        ev.record(s).map_err(cuda_err)?;
        first.wait_event(&ev).map_err(cuda_err)?;
    }
    // SAFETY: the slots live as long as the engine, which outlives every queued operation
    // (destroy waits for them).
    unsafe {
        first
            .write_value32(eng.start.device(seq), seq)
            .map_err(cuda_err)?;
        first
            .wait_value32(eng.done.device(seq), seq, WaitCond::Geq)
            .map_err(cuda_err)?;
    }
    for s in &streams[1..] {
        let ev = Event::new(&eng.ctx, flags).map_err(cuda_err)?;
        ev.record(first).map_err(cuda_err)?;
        s.wait_event(&ev).map_err(cuda_err)?;
    }
    Ok(())
}

/// Waits until the proxy has finished everything submitted (host-path operations and
/// finalize must not overtake queued GPU work).
pub fn wait_idle(comm: &Comm) -> Result<()> {
    let Some(eng) = comm.0.gpu.lock().clone() else {
        return Ok(());
    };
    let mut rounds = 0u32;
    while eng.completed.load(Ordering::Acquire) != eng.submitted.load(Ordering::Acquire) {
        if comm.0.abort.load(Ordering::Relaxed) {
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

/// Stops the proxy (after `wait_idle`, or at abort, when it releases every queued stream).
pub fn shutdown(comm: &Comm) {
    let Some(eng) = comm.0.gpu.lock().take() else {
        return;
    };
    eng.tx.lock().take();
    let thread = eng.thread.lock().take();
    if let Some(h) = thread {
        let _ = h.join();
    }
}

struct Proxy {
    comm: Comm,
    ctx: Arc<Context>,
    start: Arc<Slots>,
    done: Arc<Slots>,
    completed: Arc<AtomicU32>,
    staging: Option<(Vec<u8>, Stream)>,
}

// SAFETY: moved once into the proxy thread; pinned memory and CUDA handles may be used from
// any thread with the context current.
unsafe impl Send for Proxy {}

impl Proxy {
    fn run(mut self, rx: Receiver<Job>) {
        let abort: &AtomicBool = &self.comm.0.abort.clone();
        let _bound = self.ctx.bind();
        while let Ok(job) = rx.recv() {
            let mut rounds = 0u32;
            while !abort.load(Ordering::Relaxed)
                && self.start.atomic(job.seq).load(Ordering::Acquire) != job.seq
            {
                rounds = rounds.saturating_add(1);
                if rounds < 256 {
                    std::hint::spin_loop();
                } else if rounds < 4096 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
            let r = if abort.load(Ordering::Relaxed) {
                Err(Error::system("communicator aborted"))
            } else {
                self.execute(job.specs)
            };
            if let Err(e) = r {
                // The streams still move on (their data is not valid); the error is the
                // communicator's async error, as NCCL reports kernel-side failures.
                tracing::warn!("rank {}: GPU operation failed: {e}", self.comm.rank());
                self.comm.set_async_error(&e);
            }
            self.done.atomic(job.seq).store(job.seq, Ordering::Release);
            self.completed.store(job.seq, Ordering::Release);
        }
    }

    fn execute(&mut self, specs: Vec<PlanSpec>) -> Result<()> {
        let (rank, n) = (self.comm.rank(), self.comm.nranks());
        let comm = self.comm.clone();
        let mut guard = comm.0.state.lock();
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator was destroyed or aborted"))?;
        for mut spec in specs {
            let outputs = self.stage(spec.tasks_mut(), rank, n)?;
            let plan = spec.build(rank, n)?;
            run_plans(&comm, state, vec![plan])?;
            self.unstage(&outputs)?;
        }
        Ok(())
    }

    /// Host staging memory, grown as needed. Pageable on purpose: allocating or freeing
    /// pinned memory can synchronise the device, whose streams may be waiting on this very
    /// proxy, which would deadlock.
    fn staging(&mut self, bytes: usize) -> Result<(*mut u8, &Stream)> {
        let need = bytes.max(4096);
        if self.staging.is_none() {
            let stream = Stream::with_flags(&self.ctx, true).map_err(cuda_err)?;
            self.staging = Some((Vec::new(), stream));
        }
        match &mut self.staging {
            Some((b, s)) => {
                if b.len() < need {
                    b.resize(need.next_power_of_two(), 0);
                }
                Ok((b.as_mut_ptr(), &*s))
            }
            None => Err(Error::internal("staging buffer missing")),
        }
    }

    /// Copies device inputs into host memory and points the tasks at it. Returns the
    /// (device, host, bytes) ranges to copy back afterwards.
    fn stage(
        &mut self,
        tasks: &mut [Task],
        rank: usize,
        n: usize,
    ) -> Result<Vec<(u64, usize, usize)>> {
        // Device ranges: (start, end, is_input, task index, is_send).
        let mut ranges: Vec<(usize, usize, bool, usize, bool)> = Vec::new();
        for (i, t) in tasks.iter().enumerate() {
            let (se, re) = buffer_counts(t.kind, rank, n, t.count)
                .ok_or_else(|| Error::invalid_argument("count overflows"))?;
            let sz = t.dtype.size();
            if se > 0 && is_device_ptr(t.send) {
                ranges.push((t.send, t.send + se * sz, true, i, true));
            }
            if re > 0 && is_device_ptr(t.recv) {
                ranges.push((t.recv, t.recv + re * sz, false, i, false));
            }
        }
        // Merge overlapping ranges so aliasing (in-place calls) survives staging.
        let mut spans: Vec<(usize, usize)> = ranges.iter().map(|r| (r.0, r.1)).collect();
        spans.sort_unstable();
        let mut unions: Vec<(usize, usize, usize)> = Vec::new(); // (lo, hi, host offset)
        let mut total = 0usize;
        for (lo, hi) in spans {
            match unions.last_mut() {
                Some(u) if lo < u.1 => u.1 = u.1.max(hi),
                _ => unions.push((lo, hi, 0)),
            }
        }
        for u in unions.iter_mut() {
            u.2 = total;
            total += (u.1 - u.0).div_ceil(64) * 64;
        }
        let (host, stream) = self.staging(total)?;
        let host = host as usize;
        let to_host = |p: usize| -> usize {
            unions
                .iter()
                .find(|u| p >= u.0 && p < u.1)
                .map(|u| host + u.2 + (p - u.0))
                .unwrap_or(p)
        };
        let mut outputs = Vec::new();
        for &(lo, hi, input, i, is_send) in &ranges {
            let h = to_host(lo);
            if input {
                // SAFETY: `lo..hi` is device memory of the caller's (validated size); `h`
                // points into our pinned staging buffer with room for it.
                unsafe { stream.memcpy_dtoh(h as *mut u8, lo as u64, hi - lo) }
                    .map_err(cuda_err)?;
            } else {
                outputs.push((lo as u64, h, hi - lo));
            }
            let t = &mut tasks[i];
            if is_send {
                t.send = h;
            } else {
                t.recv = h;
            }
        }
        for t in tasks.iter_mut() {
            if let Reduction::PreMulSum(Scalar::Device(p)) = t.red {
                if is_device_ptr(p) {
                    let mut b = [0u8; 8];
                    // SAFETY: `p` points at one element of the op's dtype in device memory.
                    unsafe { stream.memcpy_dtoh(b.as_mut_ptr(), p as u64, t.dtype.size()) }
                        .map_err(cuda_err)?;
                    stream.synchronize().map_err(cuda_err)?;
                    t.red = Reduction::PreMulSum(Scalar::Immediate(b));
                }
            }
        }
        stream.synchronize().map_err(cuda_err)?;
        Ok(outputs)
    }

    fn unstage(&mut self, outputs: &[(u64, usize, usize)]) -> Result<()> {
        let Some((_, stream)) = &self.staging else {
            return Ok(());
        };
        for &(dev, host, bytes) in outputs {
            // SAFETY: copies our staged result back into the caller's device buffer range.
            unsafe { stream.memcpy_htod(dev, host as *const u8, bytes) }.map_err(cuda_err)?;
        }
        stream.synchronize().map_err(cuda_err)
    }
}
