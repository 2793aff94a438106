//! A communicator's GPU engine: its device context, flag slots, pinned staging chunks, fold
//! scratch and proxy thread; made at the first operation on device memory, kept in the
//! communicator's GPU [`EngineSlot`](crate::engine::EngineSlot).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::{Context, Event, PinnedBuffer};
use crossbeam::channel::Sender;
use parking_lot::Mutex;

use super::device::{cuda_err, device_context};
use super::proxy::{Job, Proxy, Slots};
use super::scratch::StreamScratch;
use crate::core::Comm;
use crate::error::{Error, Result};

/// A communicator's GPU state: its device context, flag slots, staging chunks and proxy.
pub struct GpuEngine {
    pub(super) ctx: Arc<Context>,
    pub(super) start: Arc<Slots>,
    pub(super) done: Arc<Slots>,
    pub(super) submitted: AtomicU32,
    pub(super) completed: Arc<AtomicU32>,
    pub(super) tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(super) chunks: Mutex<Vec<Chunk>>,
    pub(super) fold: Mutex<StreamScratch>,
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

/// A pinned staging chunk and the event after the last stream copy that uses it.
pub(super) struct Chunk {
    buf: PinnedBuffer,
    pub(super) busy: Option<Event>,
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
    pub(super) fn chunk(&self, bytes: usize, abort: &AtomicBool) -> Result<(usize, usize)> {
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

/// Longest a caller waits for a staging chunk before making one more (see `GpuEngine::chunk`).
const CHUNK_WAIT: Duration = Duration::from_secs(2);

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

    /// The fold scratch (the staging chunks are host memory).
    fn gpu_bytes(&self) -> u64 {
        self.fold.lock().bytes()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
