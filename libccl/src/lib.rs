//! The libccl communicator: configuration, bootstrap, communicators, groups, plans and their
//! execution. The C ABI in `ffi/` is a thin layer over this crate.

pub mod bootstrap;
pub mod comm;
mod connect;
pub mod core;
pub mod engine;
mod env_notes;
pub mod error;
pub mod exec;
pub mod gpu;
pub mod graph;
pub mod group;
pub mod hier;
mod host;
pub mod ipc;
mod link_nics;
pub mod log;
pub mod monitor;
pub use ccl_params as params;
mod pieces;
pub mod profiler;
mod route;
pub mod task;
mod topo_plan;

pub use bootstrap::UniqueId;
pub use comm::SPLIT_NOCOLOR;
pub use core::{Comm, CommConfig};
pub use error::{Error, ErrorKind, Result};
pub use task::{Reduction, Scalar, Task, TaskKind};

/// The NCCL API level libccl implements.
pub const NCCL_MAJOR: i32 = 2;
pub const NCCL_MINOR: i32 = 28;
pub const NCCL_PATCH: i32 = 9;
/// `NCCL_VERSION(2, 28, 9)`.
pub const NCCL_VERSION_CODE: i32 = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
pub const VERSION_STRING: &str = env!("CARGO_PKG_VERSION");

/// `ncclGetUniqueId`: starts a root rendezvous on this host and returns its id. With
/// `NCCL_COMM_ID` set, returns an id naming that address (rank 0 will listen there).
pub fn get_unique_id() -> Result<UniqueId> {
    log::init();
    if let Some(spec) = params::NCCL_COMM_ID.raw() {
        let addr = bootstrap::resolve(&spec)?;
        return Ok(UniqueId::encode(addr, bootstrap::fnv1a(spec.as_bytes())));
    }
    fresh_unique_id()
}

/// An id of a root rendezvous started on this host now, whatever `NCCL_COMM_ID` says (a grow
/// meets at a root of its own, not at the one the first communicator used).
pub fn fresh_unique_id() -> Result<UniqueId> {
    let listener = bootstrap::listen()?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::system(format!("root address: {e}")))?;
    let nonce: u64 = rand::random();
    bootstrap::spawn_root(listener, nonce)?;
    Ok(UniqueId::encode(addr, nonce))
}

/// `ncclCommInitAll`: `ndev` ranks in this process, initialised concurrently.
pub fn init_all(ndev: usize, devices: Option<&[i32]>) -> Result<Vec<Comm>> {
    if ndev == 0 {
        return Err(Error::invalid_argument("ncclCommInitAll with ndev 0"));
    }
    let id = get_unique_id()?;
    let n = i32::try_from(ndev).map_err(|_| Error::invalid_argument("ndev too large"))?;
    let mut comms = Vec::with_capacity(ndev);
    let mut inits = Vec::with_capacity(ndev);
    for r in 0..n {
        let dev = devices
            .and_then(|d| d.get(r as usize).copied())
            .unwrap_or(r);
        let (c, id) = Comm::prepare_on(n, &id, r, CommConfig::blocking(), Some(dev))?;
        inits.push((c.clone(), id));
        comms.push(c);
    }
    group::run_inits(inits)?;
    Ok(comms)
}
