//! `ncclCommRegister` and `ncclCommWindowRegister`: a buffer the caller will use again is
//! exported now (its IPC handle or VMM descriptor, once per allocation), so the direct paths
//! find it in the engine's cache instead of asking the driver while they queue an operation.

use crate::engine::IpcEngine;
use crate::error::Result;
use crate::rendezvous::Reach;

/// Learns how peers will reach the allocation holding `ptr`. Memory that cannot be shared
/// (host memory, another device's) is remembered as such, which is as useful to the direct
/// paths. Host-only engines never map peers' buffers, so there is nothing to learn.
pub fn register(eng: &IpcEngine, ptr: usize) -> Result<()> {
    if eng.host_only {
        return Ok(());
    }
    let mut q = eng.queued.lock();
    q.bufs.export(ptr as u64).map(drop)
}
