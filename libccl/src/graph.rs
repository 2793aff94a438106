//! Operations captured into CUDA graphs (`torch.cuda.graph` around collectives:
//! tensor-parallel layers under CUDA graphs, inference engines' decode steps).
//!
//! The GPU paths decide at call time what each operation does: they take sequence numbers
//! peers match, pick staging chunks, rendezvous with peers and queue copies and flag
//! operations whose values are fixed then. A graph replays what was queued, so none of that
//! can be captured as it is. A captured group instead takes the staged path with memory and
//! flags of its own ([`crate::gpu::CapturedGroup`]): on the capturing stream a host node,
//! the copies of its device inputs into its pinned chunk, a `start` flag, a wait for a `done`
//! flag, both reset, the copies of its outputs back. At every replay the host node hands the
//! group to this communicator's replay thread, which takes its sequence numbers and gives it
//! to the GPU proxy; the proxy runs it over the host transports once `start` is up and raises
//! `done`. Nothing at replay time calls CUDA: a driver call there could wait behind the
//! application's launch of later replays, which (queued on the GPU behind this group) wait
//! for it -- a deadlock seen with 64 replays queued ahead when the replay thread ran the
//! group through the ordinary paths.
//!
//! Costs: the staged path (host memory and the host transports, not NVLink copy engines)
//! and a host-node round trip per captured group, where NCCL replays captured kernels.
//! Ordering: a replayed group takes its sequence numbers when its host node runs; eager
//! operations queued on the same stream behind the replay run after it on every rank (the
//! proxy lets the replay's job overtake them), but eager calls racing a replay on another
//! stream may be matched in a different order on different ranks (reported as
//! `ncclInvalidUsage`): synchronise before mixing, as with NCCL.

use std::sync::{Arc, Weak};

use ccl_cuda::cuda::{self, RelaxedCapture};
use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::comm::{Comm, CommInner};
use crate::error::{Error, Result};
use crate::gpu::{cuda_err, CapturedGroup};
use crate::task::Task;

enum Msg {
    /// Run the [`Captured`] group at this address.
    Run(usize),
    Stop,
}

/// One captured group. Never freed: a graph can be replayed for as long as the process
/// lives, and its host node keeps this address (the group's pinned staging memory and two
/// flags stay with it).
struct Captured {
    comm: Weak<CommInner>,
    group: CapturedGroup,
    tx: Sender<Msg>,
}

/// A communicator's replay thread.
pub struct Replayer {
    tx: Sender<Msg>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Whether `tasks` are queued on streams being captured (an invalidated capture is an
/// error). Host-memory operations cannot be captured.
pub(crate) fn capturing(comm: &Comm, tasks: &[Task]) -> Result<bool> {
    if comm.0.cuda_dev < 0 || !crate::gpu::available() {
        return Ok(false);
    }
    let mut any = false;
    let mut seen: Vec<usize> = Vec::new();
    for t in tasks {
        if seen.contains(&t.stream) {
            continue;
        }
        seen.push(t.stream);
        match cuda::capture_status_of(t.stream).map_err(cuda_err)? {
            cuda::CaptureStatus::None => {}
            cuda::CaptureStatus::Active => any = true,
            cuda::CaptureStatus::Invalidated => {
                return Err(Error::invalid_usage(
                    "the stream's CUDA graph capture was invalidated by an earlier call",
                ))
            }
        }
    }
    Ok(any)
}

fn replayer(comm: &Comm) -> Result<Arc<Replayer>> {
    let mut slot = comm.0.graph.lock();
    if let Some(r) = slot.as_ref() {
        return Ok(r.clone());
    }
    let (tx, rx) = crossbeam::channel::unbounded();
    let thread = std::thread::Builder::new()
        .name(format!("ccl-graph-r{}", comm.rank()))
        .spawn(move || replay_loop(rx))
        .map_err(|e| Error::system(format!("spawn graph replay thread: {e}")))?;
    let r = Arc::new(Replayer {
        tx,
        thread: Mutex::new(Some(thread)),
    });
    *slot = Some(r.clone());
    Ok(r)
}

/// Captures a group of `comm`'s operations into the graph its streams are capturing.
pub(crate) fn capture(comm: &Comm, tasks: Vec<Task>) -> Result<()> {
    // Pointer queries, allocations and events are refused while the caller captures in
    // global mode.
    let _relaxed = RelaxedCapture::new().map_err(cuda_err)?;
    // Empty operations move nothing on any rank (their counts agree), so every rank leaves
    // them out alike.
    if tasks.iter().all(|t| t.count == 0) {
        return Ok(());
    }
    if !crate::gpu::wants_gpu(comm, &tasks)? {
        return Err(Error::invalid_usage(
            "an operation on host memory cannot be captured into a CUDA graph",
        ));
    }
    let rep = replayer(comm)?;
    let group = CapturedGroup::new(comm, tasks)?;
    let ctx = crate::gpu::device_context(comm.0.cuda_dev)?;
    let streams = crate::gpu::streams_of(&ctx, group.tasks());
    let Some(first) = streams.first() else {
        return Ok(());
    };
    let captured: &'static Captured = Box::leak(Box::new(Captured {
        comm: Arc::downgrade(&comm.0),
        group,
        tx: rep.tx.clone(),
    }));
    for s in &streams[1..] {
        let ev = crate::gpu::plain_event(&ctx)?;
        ev.record(s).map_err(cuda_err)?;
        first.wait_event(&ev).map_err(cuda_err)?;
    }
    // SAFETY: `trigger` only sends on a channel or stores to a flag (no CUDA call, no
    // blocking); `captured` is leaked, so it is valid at every replay.
    unsafe {
        first
            .launch_host_func(
                trigger,
                captured as *const Captured as *mut std::ffi::c_void,
            )
            .map_err(cuda_err)?;
        captured.group.queue(first)?;
    }
    tracing::debug!(
        "rank {}: captured a group of {} operations ({:p})",
        comm.rank(),
        captured.group.tasks().len(),
        captured
    );
    if streams.len() > 1 {
        let ev = crate::gpu::plain_event(&ctx)?;
        ev.record(first).map_err(cuda_err)?;
        for s in &streams[1..] {
            s.wait_event(&ev).map_err(cuda_err)?;
        }
    }
    Ok(())
}

/// The host node of a captured group.
unsafe extern "C" fn trigger(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is a leaked `Captured` (see `capture`).
    let c = unsafe { &*(data as *const Captured) };
    if c.tx.send(Msg::Run(data as usize)).is_err() {
        // The communicator is gone: let the graph go on rather than hang.
        c.group.release();
    }
}

fn replay_loop(rx: Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        let Msg::Run(ptr) = msg else { break };
        // SAFETY: only `trigger` sends `Run`, with a leaked `Captured`.
        let c: &'static Captured = unsafe { &*(ptr as *const Captured) };
        let Some(inner) = c.comm.upgrade() else {
            c.group.release();
            continue;
        };
        let comm = Comm(inner);
        tracing::debug!("rank {}: replaying {:p}", comm.rank(), c);
        if let Err(e) = c.group.replay(&comm) {
            tracing::warn!(
                "rank {}: replaying a captured operation failed: {e}",
                comm.rank()
            );
            comm.set_async_error(&e);
            c.group.release();
        }
    }
    // Replays queued behind the stop would otherwise wait forever.
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Run(ptr) = msg {
            // SAFETY: as above.
            unsafe { &*(ptr as *const Captured) }.group.release();
        }
    }
}

/// Stops the replay thread (communicator destroy or abort). Later replays of graphs that
/// captured the communicator's operations run nothing and do not wait.
pub fn shutdown(comm: &Comm) {
    let Some(r) = comm.0.graph.lock().take() else {
        return;
    };
    let _ = r.tx.send(Msg::Stop);
    let thread = r.thread.lock().take();
    if let Some(h) = thread {
        let _ = h.join();
    }
}
