//! Operations captured into CUDA graphs (`torch.cuda.graph` around collectives:
//! tensor-parallel layers under CUDA graphs, inference engines' decode steps).
//!
//! The GPU path decides at call time what each operation does: it takes sequence numbers its
//! peers match, picks staging chunks, rendezvouses with peers and queues copies and flag
//! operations whose values are fixed then. A graph replays what was queued, so none of that
//! can be captured as it is. Instead a captured group becomes three nodes on the capturing
//! stream: a host node that hands the group to the communicator's replay thread, a wait until
//! a flag is 1, and a write of 0 back into it. At every replay the host node runs once the
//! graph's earlier work is done; the replay thread then runs the group through the ordinary
//! path on its own stream, which starts after that work by construction, and queues the
//! flag's write of 1 behind it, releasing the graph's later nodes. The flag goes back to 0
//! inside the graph, so each replay waits anew with the same captured values.
//!
//! Costs: a host-node round trip per captured group (tens of microseconds), not the
//! captured kernels NCCL replays. Limits: every rank must replay its graphs' collectives
//! in the same order relative to its other calls on the communicator, as with NCCL; a
//! group is run when its host node fires, so collectives issued eagerly while a replay has
//! not reached them yet may be matched out of order (libccl reports the mismatch as
//! `ncclInvalidUsage`, it does not corrupt): synchronise before mixing.

use std::sync::{Arc, Weak};

use ccl_cuda::cuda::{self, Context, Flag, RelaxedCapture, Stream, WaitCond};
use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::comm::{Comm, CommInner};
use crate::error::{Error, Result};
use crate::gpu::cuda_err;
use crate::task::Task;

enum Msg {
    /// Run the [`Captured`] group at this address.
    Run(usize),
    Stop,
}

/// One captured group. Never freed: a graph can be replayed for as long as the process
/// lives, and its host node keeps this address (a few hundred bytes and a pinned flag per
/// captured group).
struct Captured {
    comm: Weak<CommInner>,
    /// The group, on the replay stream.
    tasks: Vec<Task>,
    done: Flag,
    tx: Sender<Msg>,
}

/// A communicator's replay thread and stream.
pub struct Replayer {
    tx: Sender<Msg>,
    ctx: Arc<Context>,
    stream_raw: usize,
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
    let ctx = crate::gpu::device_context(comm.0.cuda_dev)?;
    let stream = Stream::with_flags(&ctx, true).map_err(cuda_err)?;
    let stream_raw = stream.raw() as usize;
    let (tx, rx) = crossbeam::channel::unbounded();
    let thread = std::thread::Builder::new()
        .name(format!("ccl-graph-r{}", comm.rank()))
        .spawn(move || replay_loop(stream, rx))
        .map_err(|e| Error::system(format!("spawn graph replay thread: {e}")))?;
    let r = Arc::new(Replayer {
        tx,
        ctx,
        stream_raw,
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
    if !crate::gpu::wants_gpu(comm, &tasks)? {
        return Err(Error::invalid_usage(
            "an operation on host memory cannot be captured into a CUDA graph",
        ));
    }
    let rep = replayer(comm)?;
    let streams = crate::gpu::streams_of(&rep.ctx, &tasks);
    let Some(first) = streams.first() else {
        return Ok(());
    };
    let done = Flag::new(&rep.ctx).map_err(cuda_err)?;
    let replay_tasks = tasks
        .iter()
        .map(|t| Task {
            stream: rep.stream_raw,
            ..*t
        })
        .collect();
    let captured: &'static Captured = Box::leak(Box::new(Captured {
        comm: Arc::downgrade(&comm.0),
        tasks: replay_tasks,
        done,
        tx: rep.tx.clone(),
    }));
    for s in &streams[1..] {
        let ev = crate::gpu::plain_event(&rep.ctx)?;
        ev.record(s).map_err(cuda_err)?;
        first.wait_event(&ev).map_err(cuda_err)?;
    }
    // SAFETY: `trigger` only sends on a channel or stores to the flag (no CUDA call, no
    // blocking); `captured` is leaked, so it is valid at every replay; the flag lives as long
    // and is released by the replay thread (or `trigger`) at every replay.
    unsafe {
        first
            .launch_host_func(
                trigger,
                captured as *const Captured as *mut std::ffi::c_void,
            )
            .map_err(cuda_err)?;
        captured
            .done
            .stream_wait(first, 1, WaitCond::Eq)
            .map_err(cuda_err)?;
        captured.done.stream_write(first, 0).map_err(cuda_err)?;
    }
    if streams.len() > 1 {
        let ev = crate::gpu::plain_event(&rep.ctx)?;
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
        // The communicator is gone: release the graph rather than hang it.
        c.done.store(1);
    }
}

fn replay_loop(stream: Stream, rx: Receiver<Msg>) {
    // This thread's calls must neither fail nor break a capture another thread of the
    // application runs in global mode meanwhile.
    let _relaxed = RelaxedCapture::new();
    while let Ok(msg) = rx.recv() {
        let Msg::Run(ptr) = msg else { break };
        // SAFETY: only `trigger` sends `Run`, with a leaked `Captured`.
        let c = unsafe { &*(ptr as *const Captured) };
        replay(&stream, c);
    }
    // Replays queued behind the stop would otherwise wait forever.
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Run(ptr) = msg {
            // SAFETY: as above.
            unsafe { &*(ptr as *const Captured) }.done.store(1);
        }
    }
}

fn replay(stream: &Stream, c: &Captured) {
    let Some(inner) = c.comm.upgrade() else {
        c.done.store(1);
        return;
    };
    let comm = Comm(inner);
    let tasks: Vec<(Comm, Task)> = c.tasks.iter().map(|t| (comm.clone(), *t)).collect();
    if let Err(e) = crate::group::run(tasks) {
        // The error is the communicator's (set by the path that failed, or here).
        tracing::warn!("rank {}: replayed graph operation failed: {e}", comm.rank());
        comm.set_async_error(&e);
    }
    // SAFETY: the flag outlives every replay (leaked with its `Captured`).
    if unsafe { c.done.stream_write(stream, 1) }.is_err() {
        c.done.store(1);
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
