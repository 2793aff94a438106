//! Operations captured into CUDA graphs (`torch.cuda.graph` around collectives:
//! tensor-parallel layers under CUDA graphs, inference engines' decode steps). Design, invariants
//! and limits: `docs/GRAPHS.md`.
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
//! A lone rank's group is captured as what it does, copies of inputs to outputs
//! ([`lone_rank_copies`]), with no host node.
//!
//! Costs: the staged path (host memory and the host transports, not NVLink copy engines)
//! and a host-node round trip per captured group, where NCCL replays captured kernels; and
//! pinned memory as large as the group's device buffers per captured group, kept for the
//! life of the process (a graph may be replayed until then).
//! Ordering: a replayed group takes its sequence numbers when its host node runs; eager
//! operations queued on the same stream behind the replay run after it on every rank (the
//! proxy lets the replay's job overtake them), but eager calls racing a replay on another
//! stream may be matched in a different order on different ranks (reported as
//! `ncclInvalidUsage`): synchronise before mixing, as with NCCL.

use std::sync::{Arc, Weak};

use ccl_cuda::cuda::{self, RelaxedCapture};
use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::core::{Comm, CommCore};
use crate::error::{Error, Result};
use crate::gpu::{cuda_err, CapturedGroup};
use crate::task::{buffer_counts, Reduction, Task, TaskKind};
use ccl_cuda::cuda::helpers::on_first_stream;

enum Msg {
    /// Run the [`Captured`] group at this address.
    Run(usize),
    Stop,
}

/// One captured group. Never freed: a graph can be replayed for as long as the process
/// lives, and its host node keeps this address (the group's pinned staging memory and two
/// flags stay with it).
struct Captured {
    comm: Weak<CommCore>,
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
    comm.0.graph.get_or_make(|| start_replayer(comm.rank()))
}

fn start_replayer(rank: usize) -> Result<Arc<Replayer>> {
    let (tx, rx) = crossbeam::channel::unbounded();
    let thread = std::thread::Builder::new()
        .name(format!("ccl-graph-r{rank}"))
        .spawn(move || replay_loop(rx))
        .map_err(|e| Error::system(format!("spawn graph replay thread: {e}")))?;
    Ok(Arc::new(Replayer {
        tx,
        thread: Mutex::new(Some(thread)),
    }))
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
    let ctx = crate::gpu::device_context(comm.0.cuda_dev)?;
    if comm.nranks() == 1 {
        if let Some(copies) = lone_rank_copies(&tasks, &crate::gpu::is_device_ptr) {
            let streams = crate::gpu::streams_of(&ctx, &tasks);
            return on_first_stream(&ctx, &streams, |first| {
                for &(dst, src, bytes) in &copies {
                    // SAFETY: both ranges are the caller's device buffers of the operation,
                    // validated at enqueue.
                    unsafe { first.memcpy(dst as u64, src as u64, bytes) }.map_err(cuda_err)?;
                }
                Ok(())
            });
        }
    }
    if crate::ipc::capture(comm, &tasks)? {
        return Ok(());
    }
    let rep = replayer(comm)?;
    let group = CapturedGroup::new(comm, tasks)?;
    let streams = crate::gpu::streams_of(&ctx, group.tasks());
    if streams.is_empty() {
        return Ok(());
    }
    let captured: &'static Captured = Box::leak(Box::new(Captured {
        comm: Arc::downgrade(&comm.0),
        group,
        tx: rep.tx.clone(),
    }));
    on_first_stream(&ctx, &streams, |first| {
        // SAFETY: `trigger` only sends on a channel or stores to a flag (no CUDA call, no
        // blocking); `captured` is leaked, so it is valid at every replay.
        unsafe {
            first
                .launch_host_func(
                    trigger,
                    captured as *const Captured as *mut std::ffi::c_void,
                )
                .map_err(cuda_err)?;
            captured.group.queue(first)
        }
    })?;
    tracing::debug!(
        "rank {}: captured a group of {} operations ({:p})",
        comm.rank(),
        captured.group.tasks().len(),
        captured
    );
    Ok(())
}

/// A lone rank's collectives copy their input to their output and nothing else (a reduction
/// of one input is that input, PreMulSum aside), and its sends to itself land in its receives
/// from itself, k-th send in k-th receive: those copies, captured as they are (no host node,
/// no staging), when every buffer is device memory; None otherwise (the staged path then
/// reports what does not match).
fn lone_rank_copies(
    tasks: &[Task],
    device: &dyn Fn(usize) -> bool,
) -> Option<Vec<(usize, usize, usize)>> {
    let mut copies = Vec::new();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for t in tasks {
        let bytes = t.count.checked_mul(t.dtype.size())?;
        match t.kind {
            TaskKind::Send { .. } => sends.push((t.send, bytes)),
            TaskKind::Recv { .. } => recvs.push((t.recv, bytes)),
            TaskKind::Coll(_) => {
                if matches!(t.red, Reduction::PreMulSum(_)) {
                    return None;
                }
                let (se, re) = buffer_counts(t.kind, 0, 1, t.count)?;
                let bytes = se.min(re).checked_mul(t.dtype.size())?;
                if bytes == 0 || t.send == t.recv {
                    continue;
                }
                if !device(t.send) || !device(t.recv) {
                    return None;
                }
                copies.push((t.recv, t.send, bytes));
            }
        }
    }
    if sends.len() != recvs.len() {
        return None;
    }
    for (&(src, sb), &(dst, rb)) in sends.iter().zip(&recvs) {
        if sb != rb || (sb > 0 && (!device(src) || !device(dst))) {
            return None;
        }
        if sb > 0 && src != dst {
            copies.push((dst, src, sb));
        }
    }
    Some(copies)
}

/// The host node of a captured group.
unsafe extern "C" fn trigger(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is a leaked `Captured` (see `capture`).
    let c = unsafe { &*(data as *const Captured) };
    if c.tx.send(Msg::Run(data as usize)).is_err() {
        // The communicator is gone: let the graph go on rather than hang.
        c.group.finish();
    }
}

fn replay_loop(rx: Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        let Msg::Run(ptr) = msg else { break };
        // SAFETY: only `trigger` sends `Run`, with a leaked `Captured`.
        let c: &'static Captured = unsafe { &*(ptr as *const Captured) };
        let Some(inner) = c.comm.upgrade() else {
            c.group.finish();
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
            c.group.finish();
        }
    }
    // Replays queued behind the stop would otherwise wait forever.
    while let Ok(msg) = rx.try_recv() {
        if let Msg::Run(ptr) = msg {
            // SAFETY: as above.
            unsafe { &*(ptr as *const Captured) }.group.finish();
        }
    }
}

impl crate::engine::Engine for Replayer {
    /// Replays run on the streams that launch the graphs, not queued here.
    fn wait_idle(&self, _: &std::sync::atomic::AtomicBool) -> Result<()> {
        Ok(())
    }

    /// Stops the replay thread (destroy or abort): later replays of graphs that captured the
    /// communicator's operations run nothing and do not wait.
    fn shutdown(&self, _aborted: bool) {
        let _ = self.tx.send(Msg::Stop);
        let thread = self.thread.lock().take();
        if let Some(h) = thread {
            let _ = h.join();
        }
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::Collective;
    use ccl_cuda::DataType;

    fn task(kind: TaskKind, send: usize, recv: usize, count: usize) -> Task {
        let mut t = crate::task::float_sum(kind, send, recv, count);
        t.dtype = DataType::Float32;
        t
    }

    /// One rank's captured group: out-of-place collectives and self sends become copies in
    /// place of the staged path; in place and empty ones copy nothing; PreMulSum, host
    /// buffers and unpaired or mismatched sends and receives are left to the staged path.
    #[test]
    fn a_lone_rank_captures_copies() {
        let dev = |p: usize| p >= 0x1000;
        let ar = TaskKind::Coll(Collective::AllReduce);
        let ag = TaskKind::Coll(Collective::AllGather);
        let g = [
            task(ar, 0x1000, 0x2000, 4),
            task(ar, 0x3000, 0x3000, 4),
            task(ag, 0x4000, 0x5000, 0),
            task(TaskKind::Send { peer: 0 }, 0x6000, 0, 8),
            task(TaskKind::Recv { peer: 0 }, 0, 0x7000, 8),
        ];
        assert_eq!(
            lone_rank_copies(&g, &dev),
            Some(vec![(0x2000, 0x1000, 16), (0x7000, 0x6000, 32)])
        );
        let mut pre = task(ar, 0x1000, 0x2000, 4);
        pre.red = Reduction::PreMulSum(crate::task::Scalar::Immediate([0; 8]));
        assert_eq!(lone_rank_copies(&[pre], &dev), None);
        assert_eq!(lone_rank_copies(&[task(ar, 0x10, 0x2000, 4)], &dev), None);
        let unpaired = [task(TaskKind::Send { peer: 0 }, 0x6000, 0, 8)];
        assert_eq!(lone_rank_copies(&unpaired, &dev), None);
        let mismatched = [
            task(TaskKind::Send { peer: 0 }, 0x6000, 0, 8),
            task(TaskKind::Recv { peer: 0 }, 0, 0x7000, 4),
        ];
        assert_eq!(lone_rank_copies(&mismatched, &dev), None);
    }
}
