//! The copy-engine engine (`ccl-p2p`) as the communicator uses it: its settings read from the
//! parameter registry in one place, the communicator handed to it only as a context (rank,
//! device, abort flag, control plane, error slot), and its errors mapped to ours.

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};

use ccl_p2p::{BatchCopies, CommCtx, Control, IpcEngine, P2pConfig, PeerHealth};

use crate::bootstrap::Health;
use crate::core::{Comm, CommCore};
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::params;
use crate::task::Task;

/// The engine's settings, from the registry.
pub fn config() -> P2pConfig {
    use params::*;
    P2pConfig {
        gpu_available: crate::gpu::available(),
        disable: CCL_IPC_DISABLE.get_bool(),
        host_only: CCL_IPC_HOST_ONLY.get_str(),
        shm_disable: NCCL_SHM_DISABLE.get_bool(),
        p2p_disable: NCCL_P2P_DISABLE.get_bool(),
        p2p_level: NCCL_P2P_LEVEL.raw(),
        fault_no_peer_access: CCL_IPC_FAULT_NO_PEER_ACCESS.get_bool(),
        kernel_preload: CCL_KERNEL_PRELOAD.get_bool(),
        timeout_s: CCL_TIMEOUT_S.get_i64(),
        chunk_bytes: CCL_IPC_CHUNK_BYTES.get_i64(),
        slots: CCL_IPC_SLOTS.get_i64(),
        single_stream_bytes: CCL_IPC_SINGLE_STREAM_BYTES.get_i64(),
        ll_bytes: CCL_IPC_LL_BYTES.get_auto_i64(),
        rx_lanes: CCL_IPC_RX_LANES.get_i64(),
        lane_priority: CCL_IPC_LANE_PRIORITY.get_str(),
        wait_kernel: CCL_IPC_WAIT_KERNEL.get_str(),
        copy_kernel: CCL_IPC_COPY_KERNEL.get_str(),
        direct: CCL_IPC_DIRECT.get_bool(),
        direct_single_bytes: CCL_IPC_DIRECT_SINGLE_BYTES.get_i64(),
        direct_reduce_bytes: CCL_IPC_DIRECT_REDUCE_BYTES.get_i64(),
        direct_reduce_multi: CCL_IPC_DIRECT_REDUCE_MULTI.get_bool(),
        direct_reduce_write_all: CCL_IPC_DIRECT_REDUCE_WRITE_ALL.get_bool(),
        direct_reduce_mailed: CCL_IPC_DIRECT_REDUCE_MAILED.get_bool(),
        direct_reduce_piece_bytes: CCL_IPC_DIRECT_REDUCE_PIECE_BYTES.get_i64(),
        direct_reduce_takeover_us: CCL_IPC_DIRECT_REDUCE_TAKEOVER_US.get_str(),
        direct_reduce_takeover_max_bytes: CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES.get_i64(),
        ll_exchange_bytes: CCL_IPC_LL_EXCHANGE_BYTES.get_auto_i64(),
        ll_pack_bytes: CCL_IPC_LL_PACK_BYTES.get_i64(),
        p2p_kernel_bytes: CCL_IPC_P2P_KERNEL_BYTES.get_i64(),
        ll_two_shot_bytes: CCL_IPC_LL_TWO_SHOT_BYTES.get_i64(),
        ll_block_bytes: CCL_IPC_LL_BLOCK_BYTES.get_i64(),
        ll_threads: CCL_IPC_LL_THREADS.get_i64(),
        ll_ack_unfenced: !CCL_IPC_LL_ACK_FENCE.get_bool(),
        bcast_relay_bytes: CCL_IPC_BCAST_RELAY_BYTES.get_i64(),
        bcast_relay_chunk_bytes: CCL_IPC_BCAST_RELAY_CHUNK_BYTES.get_i64(),
        remote_copy: CCL_IPC_REMOTE_COPY.get_bool(),
        batch_copies: BatchCopies::from_setting(CCL_IPC_BATCH_COPIES.get_auto_i64()),
        batch_local_max: CCL_IPC_BATCH_LOCAL_MAX_BYTES.get_auto_i64(),
        remote_copy_min_bytes: CCL_IPC_REMOTE_COPY_MIN_BYTES.get_i64(),
        local_copy_lanes: CCL_IPC_LOCAL_COPY_LANES.get_i64(),
        push_wait_us: CCL_IPC_PUSH_WAIT_US.get_i64(),
        push_wait_busy_us: CCL_IPC_PUSH_WAIT_BUSY_US.get_i64(),
        push_wait_min_bytes: CCL_IPC_PUSH_WAIT_MIN_BYTES.get_i64(),
        push_wait_adapt: CCL_IPC_PUSH_WAIT_ADAPT.get_bool(),
        exchange_wait_us: CCL_IPC_EXCHANGE_WAIT_US.get_i64(),
        mailed_push: CCL_IPC_MAILED_PUSH.get_bool(),
        mail_blocks: CCL_IPC_MAIL_BLOCKS.get_i64(),
        eager_send: CCL_IPC_EAGER_SEND.get_str(),
        eager_min_bytes: CCL_IPC_EAGER_MIN_BYTES.get_i64(),
        eager_copy_kernel: CCL_IPC_EAGER_COPY_KERNEL.get_bool(),
        host_path_slot_bytes: CCL_IPC_HOST_PATH_SLOT_BYTES.get_i64(),
        host_path_slots: CCL_IPC_HOST_PATH_SLOTS.get_i64(),
        host_path_when_limited: CCL_IPC_HOST_PATH_WHEN_LIMITED.get_bool(),
        host_path_min_bytes: CCL_IPC_HOST_PATH_MIN_BYTES.get_i64(),
        host_path_permille: CCL_IPC_HOST_PATH_PERMILLE.get_i64(),
        host_path_exchange_min_bytes: CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES.get_i64(),
        host_path_exchange_permille: CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE.get_i64(),
        host_only_stage_in: CCL_IPC_HOST_ONLY_STAGE_IN.get_bool(),
        graph_ll: CCL_GRAPH_LL.get_bool(),
        graph_direct: CCL_GRAPH_DIRECT.get_bool(),
        graph_one_shot_bytes: CCL_GRAPH_ONE_SHOT_BYTES.get_i64(),
        graph_fused: CCL_GRAPH_FUSED.get_bool(),
        graph_fused_copy_bytes: CCL_GRAPH_FUSED_COPY_BYTES.get_i64(),
        graph_copy_blocks: CCL_GRAPH_COPY_BLOCKS.get_i64(),
        graph_handshake_kernel: CCL_GRAPH_HANDSHAKE_KERNEL.get_bool(),
        symmetric_windows: CCL_IPC_SYMMETRIC_WINDOWS.get_bool(),
    }
}

/// The communicator's control plane and error slot, held weakly: the engine lives inside the
/// communicator and must not keep it alive.
struct CommControl(Weak<CommCore>);

impl CommControl {
    fn comm(&self) -> std::result::Result<Comm, ccl_p2p::Error> {
        self.0
            .upgrade()
            .map(Comm)
            .ok_or_else(|| ccl_p2p::Error::invalid_usage("communicator was destroyed"))
    }
}

impl Control for CommControl {
    fn allgather(&self, mine: &[u8]) -> ccl_p2p::Result<Vec<Vec<u8>>> {
        let comm = self.comm()?;
        let mut guard = comm.0.state.lock();
        let state = guard.as_mut().ok_or_else(|| {
            ccl_p2p::Error::invalid_usage("communicator was destroyed or aborted")
        })?;
        Ok(state.ctrl.allgather(mine, &comm.0.abort)?)
    }

    fn settle_others(&self) -> ccl_p2p::Result<()> {
        Ok(crate::gpu::wait_idle(&self.comm()?)?)
    }

    fn poll_peers(&self) -> Option<PeerHealth> {
        let comm = self.comm().ok()?;
        let mut guard = comm.0.state.try_lock()?;
        let state = guard.as_mut()?;
        Some(match state.ctrl.poll_health(&|_| true) {
            Ok(Health::Ok) => PeerHealth::Ok,
            Ok(Health::NeededPeerLeft(e)) => PeerHealth::NeededPeerLeft(e.into()),
            Err(e) => PeerHealth::Failed(e.into()),
        })
    }

    fn set_async_error(&self, e: &ccl_p2p::Error) {
        if let Ok(comm) = self.comm() {
            comm.set_async_error(&e.clone().into());
        }
    }
}

/// The context the engine gets of `comm`.
pub fn context(comm: &Comm) -> Result<CommCtx> {
    let (one_host, pids) = {
        let guard = comm.0.state.lock();
        let state = guard
            .as_ref()
            .ok_or_else(|| Error::internal("cuda-ipc setup without communicator state"))?;
        let host = state.table[comm.rank()].host_id;
        (
            state.table.iter().all(|i| i.host_id == host),
            state.table.iter().map(|i| i.pid).collect(),
        )
    };
    Ok(CommCtx {
        rank: comm.rank(),
        nranks: comm.nranks(),
        cuda_dev: comm.0.cuda_dev,
        nonce: comm.nonce(),
        abort: comm.0.abort.clone(),
        one_host,
        pids,
        p2p_beyond_level: comm.0.issue.lock().p2p_beyond_level,
        control: Arc::new(CommControl(Arc::downgrade(&comm.0))),
    })
}

/// Sets up the engine for a freshly connected communicator. Collective: every rank calls it,
/// GPU or not, and all reach the same decision (an engine on every rank or on none).
pub fn attach(comm: &Comm) -> Result<()> {
    let ctx = context(comm)?;
    if let Some(eng) = ccl_p2p::attach(&ctx, &config())? {
        // The links report to the monitor already (`attach_monitor` ran first): the copy
        // engines too.
        if let Some(m) = comm.0.monitor.lock().as_ref() {
            let hash = comm.0.nonce.load(std::sync::atomic::Ordering::Relaxed);
            let every =
                crate::monitor::config().map_or(std::time::Duration::from_millis(1), |c| c.sample);
            ccl_p2p::monitor_copies(&eng, m.publisher(), hash, every);
        }
        comm.0.ipc.set(Arc::new(Held { ctx, eng }));
    }
    Ok(())
}

/// The engine with the context it was made for, as the communicator's slot holds it.
pub struct Held {
    ctx: CommCtx,
    eng: Arc<IpcEngine>,
}

impl Engine for Held {
    fn wait_idle(&self, abort: &AtomicBool) -> Result<()> {
        Ok(ccl_p2p::wait_idle(&self.eng, abort)?)
    }

    /// Mismatched calls and stuck work become the async error.
    fn check_health(&self) {
        ccl_p2p::check_health(&self.ctx, &self.eng);
    }

    /// Leaks the engine after an abort: peers may still write into its memory.
    fn shutdown(&self, aborted: bool) {
        ccl_p2p::shutdown(self.eng.clone(), aborted);
    }

    fn gpu_bytes(&self) -> u64 {
        self.eng.gpu_bytes()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

fn held(comm: &Comm) -> Option<Arc<Held>> {
    comm.0.ipc.get::<Held>()
}

/// The engine, if this group can go through it: decided from what every rank sees alike
/// (the communicator and the kind of reduction), never from local buffer properties.
pub fn engine_for(comm: &Comm, tasks: &[Task]) -> Option<(CommCtx, Arc<IpcEngine>)> {
    let h = held(comm)?;
    ccl_p2p::takes(tasks).then(|| (h.ctx.clone(), h.eng.clone()))
}

/// Queues the groups of several communicators (one per GPU of a `-g N` process, say).
pub fn submit(groups: Vec<(CommCtx, Arc<IpcEngine>, Vec<Task>)>) -> Result<()> {
    Ok(ccl_p2p::submit(groups)?)
}

/// `ncclCommRegister` / `ncclCommWindowRegister`: the engine learns now how its peers will
/// reach `[ptr, ptr + size)` (its IPC handle or VMM descriptor), so the operations that use it
/// find it in the engine's cache instead of asking the driver on their way. Host memory, and a
/// communicator without the engine, have nothing to learn. `true`: the engine took it.
pub fn register(comm: &Comm, ptr: usize, size: usize) -> Result<bool> {
    match held(comm) {
        Some(h) if size > 0 && crate::gpu::is_device_ptr(ptr) => {
            ccl_p2p::register(&h.eng, ptr)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC` (every rank calls it, in the same
/// order): the window is agreed with every rank, so collectives on it push without waiting
/// for their receivers. `true`: it is symmetric; `false`: a plain registration only.
pub fn register_window(comm: &Comm, ptr: usize, size: usize) -> Result<bool> {
    match held(comm) {
        Some(h) => Ok(ccl_p2p::register_window(&h.ctx, &h.eng, ptr, size)?),
        None => Ok(false),
    }
}

/// `ncclCommWindowDeregister`: the window at `ptr` is no longer symmetric.
pub fn deregister_window(comm: &Comm, ptr: usize) {
    if let Some(h) = held(comm) {
        ccl_p2p::deregister_window(&h.eng, ptr);
    }
}

/// Captures `tasks` on the direct paths into the graph their stream is capturing, when every
/// rank can; `false`: every rank goes on to the staged captured path.
pub fn capture(comm: &Comm, tasks: &[Task]) -> Result<bool> {
    match held(comm) {
        Some(h) => Ok(ccl_p2p::capture(&h.ctx, &h.eng, tasks)?),
        None => Ok(false),
    }
}

impl From<ccl_p2p::Error> for Error {
    fn from(e: ccl_p2p::Error) -> Self {
        let kind = match e.kind {
            ccl_p2p::ErrorKind::InvalidArgument => ErrorKind::InvalidArgument,
            ccl_p2p::ErrorKind::InvalidUsage => ErrorKind::InvalidUsage,
            ccl_p2p::ErrorKind::System => ErrorKind::System,
            ccl_p2p::ErrorKind::Remote => ErrorKind::Remote,
            ccl_p2p::ErrorKind::Internal => ErrorKind::Internal,
            ccl_p2p::ErrorKind::Cuda => ErrorKind::Cuda,
        };
        Error {
            kind,
            message: e.message,
            location: e.location,
        }
    }
}

impl From<Error> for ccl_p2p::Error {
    fn from(e: Error) -> Self {
        let kind = match e.kind {
            ErrorKind::InvalidArgument => ccl_p2p::ErrorKind::InvalidArgument,
            ErrorKind::InvalidUsage => ccl_p2p::ErrorKind::InvalidUsage,
            ErrorKind::System => ccl_p2p::ErrorKind::System,
            ErrorKind::Remote => ccl_p2p::ErrorKind::Remote,
            ErrorKind::Internal | ErrorKind::InProgress => ccl_p2p::ErrorKind::Internal,
            ErrorKind::Cuda => ccl_p2p::ErrorKind::Cuda,
        };
        ccl_p2p::Error {
            kind,
            message: e.message,
            location: e.location,
        }
    }
}
