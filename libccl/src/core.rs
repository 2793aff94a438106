//! What every part of libccl may know of a communicator: its place (rank, ranks, device), its
//! configuration, the abort flag and async error slot, the control plane and links, what
//! issuing operations keeps, and the slots of the engines that run them. Its lifecycle (init,
//! split, shrink, finalize, destroy, abort) is [`crate::comm`]'s; the engines depend on this
//! module, never on that one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ccl_cuda::DataType;
use ccl_transports::Link;
use parking_lot::Mutex;

use crate::bootstrap::{Ctrl, RankInfo};
use crate::engine::EngineSlot;
use crate::error::{Error, Result};
use crate::task::Scalar;

/// The parts of `ncclConfig_t` libccl acts on.
#[derive(Debug, Clone, Default)]
pub struct CommConfig {
    pub blocking: bool,
    pub comm_name: Option<String>,
    pub split_share: bool,
}

impl CommConfig {
    pub fn blocking() -> Self {
        CommConfig {
            blocking: true,
            ..Default::default()
        }
    }
}

/// Lifecycle of a communicator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Life {
    Initializing,
    Ready,
    /// `ncclCommRevoke`d: operations ended and refused; split, shrink and destroy still work.
    Revoked,
    Finalized,
    Gone,
}

/// The state the data path needs, behind the communicator's lock.
pub struct CommState {
    pub ctrl: Ctrl,
    pub links: Vec<Option<Box<dyn Link>>>,
    pub table: Vec<RankInfo>,

    pub staging: Vec<u8>,
    pub exec_stats: crate::exec::ExecStats,
}

/// What issuing operations needs, under its own lock so the API thread never waits for the
/// proxy that holds the links.
#[derive(Debug, Clone, Default)]
pub struct IssueState {
    /// Ring order from the topology search (rank 0's, so every rank agrees): ranks of one
    /// host are adjacent, so only two ring edges per host cross the network.
    pub ring: Vec<usize>,
    /// Collectives issued so far (all ranks count alike; carried in operation headers).
    pub coll_seq: u64,
    /// Per peer: sends and receives issued so far.
    pub p2p_seqs: Vec<(u64, u64)>,
    /// Every rank on one host with shared memory allowed, so collectives cross only shared
    /// memory (every rank computes the same from the same table and settings): it decides
    /// which small all-reduces go in one exchange ([`crate::group`]).
    pub shared_memory_only: bool,
    /// `NCCL_P2P_LEVEL` set and, per the topology search, some two GPUs of one host lie
    /// farther apart than it: NCCL takes shared memory between them instead of peer-to-peer,
    /// and so does cuda-ipc (host-only, see `CCL_IPC_HOST_ONLY`). The same on every rank (same
    /// table, same settings).
    pub p2p_beyond_level: bool,
    /// Schedules by (collective, count, element size, the all-to-all's buffers disjoint or
    /// the collective in one small exchange -- never both for one collective): they depend
    /// on nothing else here (whether a two-rank all-reduce goes in one exchange follows from
    /// the count and element size).
    pub schedules: std::collections::HashMap<
        (ccl_collectives::Collective, usize, usize, bool),
        std::sync::Arc<ccl_collectives::Schedule>,
    >,
}

/// Shared part of a communicator.
pub struct CommCore {
    pub rank: usize,
    pub nranks: usize,
    pub cuda_dev: i32,
    pub config: CommConfig,
    pub abort: Arc<AtomicBool>,
    pub(crate) nonce: AtomicU64,
    pub(crate) life: Mutex<Life>,
    pub(crate) async_error: Mutex<Option<Error>>,
    pub state: Mutex<Option<CommState>>,
    pub issue: Mutex<IssueState>,
    pub(crate) splits: AtomicU64,
    redops: Mutex<Vec<Option<(Scalar, DataType)>>>,
    /// The GPU engine, made at the first operation on device memory.
    pub gpu: EngineSlot,
    /// Direct GPU peer transfers (cuda-ipc), set up at init when every rank can map its peers.
    pub ipc: EngineSlot,
    /// The replay thread of operations captured into CUDA graphs, made at the first capture.
    pub graph: EngineSlot,
    /// Sub-communicators of hierarchical all-reduces (ranks on several hosts), made at init.
    pub hier: EngineSlot,
    /// Streams of its own for its part of a group whose other communicators use the same
    /// caller's stream ([`the GPU engine's stream forks`]), made when first needed.
    pub side_streams: Mutex<Vec<ccl_cuda::cuda::Stream>>,
    /// The process's throughput monitor while `CCL_MONITOR` is on (see [`crate::monitor`]);
    /// dropped at destroy, so the last communicator's destroy stops it.
    pub monitor: Mutex<Option<Arc<ccl_monitor::Monitor>>>,
    /// Its profiler plugin context while `NCCL_PROFILER_PLUGIN` loaded one, finalised at
    /// destroy or abort. Held without naming its type (`crate::profiler` reads it), as the
    /// engine slots are, so this module does not depend on the profiler.
    pub profiler: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
}

/// A communicator handle (what `ncclComm_t` points at).
#[derive(Clone)]
pub struct Comm(pub Arc<CommCore>);

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {})", self.0.rank, self.0.nranks)
    }
}

/// First PreMulSum op handle, as NCCL numbers them.
pub const FIRST_USER_REDOP: i32 = 5;

impl Comm {
    pub(crate) fn new_inner(rank: usize, nranks: usize, config: CommConfig, cuda_dev: i32) -> Comm {
        Comm(Arc::new(CommCore {
            rank,
            nranks,
            cuda_dev,
            config,
            abort: Arc::new(AtomicBool::new(false)),
            nonce: AtomicU64::new(0),
            life: Mutex::new(Life::Initializing),
            async_error: Mutex::new(None),
            state: Mutex::new(None),
            issue: Mutex::new(IssueState::default()),
            splits: AtomicU64::new(0),
            redops: Mutex::new(Vec::new()),
            gpu: EngineSlot::default(),
            ipc: EngineSlot::default(),
            graph: EngineSlot::default(),
            hier: EngineSlot::default(),
            side_streams: Mutex::new(Vec::new()),
            monitor: Mutex::new(None),
            profiler: Mutex::new(None),
        }))
    }

    /// A handle with no connections, for tests of what only looks at handles.
    #[cfg(test)]
    pub(crate) fn unconnected(rank: usize, nranks: usize) -> Comm {
        Comm::new_inner(rank, nranks, CommConfig::blocking(), -1)
    }

    pub fn rank(&self) -> usize {
        self.0.rank
    }

    /// The communicator's bootstrap nonce (equal on all its ranks, unique per communicator).
    pub fn nonce(&self) -> u64 {
        self.0.nonce.load(Ordering::Relaxed)
    }

    pub fn nranks(&self) -> usize {
        self.0.nranks
    }

    /// Tells every peer this rank failed with `e` (they stop waiting for it at once, and say
    /// why), if the communicator still has its connections.
    pub(crate) fn notify_error(&self, e: &Error) {
        if let Some(st) = self.0.state.lock().as_mut() {
            st.ctrl.notify_error(e);
        }
    }

    /// Records an error that makes the communicator unusable.
    pub fn set_async_error(&self, e: &Error) {
        let mut a = self.0.async_error.lock();
        if a.is_none() {
            *a = Some(e.clone());
        }
    }

    /// Fails unless the communicator can take operations.
    pub fn check_usable(&self) -> Result<()> {
        match *self.0.life.lock() {
            Life::Initializing => {
                return Err(Error::invalid_usage(
                    "communicator is still initializing (poll ncclCommGetAsyncError)",
                ))
            }
            Life::Finalized => return Err(Error::invalid_usage("communicator was finalized")),
            Life::Revoked => return Err(Error::invalid_usage("communicator was revoked")),
            Life::Gone => {
                return Err(Error::invalid_usage(
                    "communicator was destroyed or aborted",
                ))
            }
            Life::Ready => {}
        }
        if let Some(e) = &*self.0.async_error.lock() {
            return Err(Error::new(
                e.kind,
                format!("communicator failed earlier: {}", e.message),
            ));
        }
        Ok(())
    }

    /// Registers a PreMulSum op and returns its `ncclRedOp_t` value.
    pub fn create_premul(&self, scalar: Scalar, dtype: DataType) -> Result<i32> {
        let mut ops = self.0.redops.lock();
        let slot = match ops.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                ops.push(None);
                ops.len() - 1
            }
        };
        ops[slot] = Some((scalar, dtype));
        i32::try_from(slot)
            .ok()
            .and_then(|s| s.checked_add(FIRST_USER_REDOP))
            .ok_or_else(|| Error::invalid_usage("too many PreMulSum ops"))
    }

    pub fn destroy_premul(&self, op: i32) -> Result<()> {
        let mut ops = self.0.redops.lock();
        let slot = usize::try_from(op - FIRST_USER_REDOP)
            .ok()
            .filter(|&s| ops.get(s).is_some_and(Option::is_some))
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "reduction op {op} was not created on this communicator"
                ))
            })?;
        ops[slot] = None;
        Ok(())
    }

    /// The PreMulSum op `op`, if it exists, with the dtype it was created for.
    pub fn premul(&self, op: i32) -> Option<(Scalar, DataType)> {
        let slot = usize::try_from(op.checked_sub(FIRST_USER_REDOP)?).ok()?;
        self.0.redops.lock().get(slot).copied().flatten()
    }
}
