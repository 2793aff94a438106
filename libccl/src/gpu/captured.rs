//! Groups captured into CUDA graphs on the staged path ([`crate::graph`]).

use ccl_cuda::cuda::{self, PinnedBuffer, Stream, WaitCond};

use super::device::{cuda_err, is_device_ptr};
use super::engine::{engine, GpuEngine};
use super::proxy::{Job, Replayed};
use super::staging::{stage_pieces, PieceIo, Staging};
use crate::core::Comm;
use crate::error::{Error, Result};
use crate::host::plan_specs;
use crate::task::Task;

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

impl Replayed for CapturedGroup {
    fn started(&self) -> bool {
        self.start.load() == 1
    }

    fn finish(&self) {
        CapturedGroup::finish(self);
    }
}
