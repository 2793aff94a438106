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
//!
//! The files, one concern each: `device` (CUDA as this path sees it), `engine` (a
//! communicator's engine: its slots, chunks and proxy), `proxy` (the proxy thread and the jobs
//! and flag slots it shares with the streams), `staging` (device buffers laid out in pinned
//! memory), `handover` (jobs to the proxy; copies, flag writes and waits onto the streams),
//! `staged`, `streamed` and `schedule` (a group's submission, whole or in pieces), `fold_rule`,
//! `fold` and `scratch` (reductions folded on the GPU), `captured` (groups captured into CUDA
//! graphs), `forks` (callers' streams shared by the communicators of a group) and `alloc`
//! (`ncclMemAlloc`).

mod alloc;
mod captured;
mod device;
mod engine;
mod fold;
mod fold_rule;
mod forks;
mod handover;
mod proxy;
mod schedule;
mod scratch;
mod staged;
mod staging;
mod streamed;

pub use alloc::{mem_alloc, mem_free};
pub(crate) use captured::CapturedGroup;
pub use device::{available, current_device, wants_gpu};
pub(crate) use device::{cuda_err, device_context, is_device_ptr, pci_bus_id, streams_of};
pub(crate) use engine::engine;
pub use engine::GpuEngine;
pub(crate) use forks::{fork_shared_streams, Forks};
pub(crate) use scratch::StreamScratch;

use fold::submit_folded;
use fold_rule::folds_of;
use staged::submit_staged;

use crate::core::Comm;
use crate::error::Result;
use crate::task::Task;

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

/// Waits until the proxy has finished everything submitted (host-path operations and
/// finalize must not overtake queued GPU work).
pub fn wait_idle(comm: &Comm) -> Result<()> {
    comm.0.gpu.wait_idle(&comm.0.abort)
}
