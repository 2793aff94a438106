//! Capturing a group into the CUDA graph its stream is capturing, on this communicator's
//! engine.

use ccl_collectives::task::Task;

use crate::captured;
use crate::control::CommCtx;
use crate::engine::IpcEngine;
use crate::error::Result;

/// Captures `tasks` on the direct paths into the CUDA graph their stream is capturing, when
/// every rank can ([`captured`]); `false`: every rank goes on to the staged captured path.
/// Collective: every rank of a communicator with cuda-ipc calls it for the same group.
pub fn capture(comm: &CommCtx, eng: &IpcEngine, tasks: &[Task]) -> Result<bool> {
    if eng.host_only {
        captured::capture_host_only(comm, eng, tasks)
    } else {
        captured::capture(comm, eng, tasks)
    }
}
