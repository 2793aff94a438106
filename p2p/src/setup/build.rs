//! The engine itself, built once every rank has mapped every peer: from here a local failure
//! is the communicator's.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::helpers::plain_event;
use ccl_cuda::cuda::{self, Context, DeviceBuffer, Event, Flag, KernelOp, Stream};
use ccl_cuda::DataType;
use parking_lot::Mutex;

use super::local::{Geometry, Local};
use crate::buffers::Buffers;
use crate::calls::{CallBoard, RankBoards};
use crate::config::P2pConfig;
use crate::control::CommCtx;
use crate::engine::{HostRings, IpcEngine, Peer, Queued, Registered, RemoteLanes, Watch};
use crate::error::{cuda_err, Result};
use crate::host_path::HostPath;
use crate::layout::{self, Layout};
use crate::limits;
use crate::tuning::{takeover_wait, wants_wait_kernel, Tuning};
use ccl_collectives::relay::Relay;

/// Copy lanes (streams) per communicator: chunk `seq` of a pair goes on lane `seq % TX_LANES`,
/// so one lane's flag operations and copy launch overlap the other lane's copy and the copy
/// engines never idle between chunks.
const TX_LANES: usize = 2;

/// The paths every rank chose alike from every offer.
#[derive(Debug, Clone)]
pub(super) struct Agreed {
    /// Every rank can take part, with the same geometry and mode.
    pub capable: bool,
    /// Direct transfers (every rank asked for them).
    pub direct: bool,
    /// Bytes per sender of every rank's low-latency area, the largest low-latency all-reduce,
    /// reduce-scatter (per rank) and data collective through the low-latency kernel (bytes;
    /// 0: none).
    pub ll_max: usize,
    pub ll_reduce_max: usize,
    pub ll_scatter_max: usize,
    pub ll_exchange_max: usize,
    /// The largest send the point-to-point kernel takes (0: none).
    pub p2p_max: usize,
    /// Low-latency operations of at most this many bytes per peer go in packed lines.
    pub ll_pack_max: usize,
    /// Payload bytes per peer a low-latency kernel's block takes (0: always the most blocks).
    pub ll_block_bytes: usize,
    /// Low-latency all-reduces of more than two ranks from this many bytes go in two shots
    /// (0: never).
    pub ll_two_shot_min: usize,
    /// Smallest all-reduce / reduce-scatter that runs as a direct reduction (0: none).
    pub direct_reduce: usize,
    /// Direct all-reduces and reduce-scatters whose peers have not all posted are mailed
    /// (every rank asked for it).
    pub mailed_reduce: bool,
    pub relay: Relay,
}

/// What this rank made and reached during setup, all of which the engine keeps.
pub(super) struct Parts {
    pub local: Local,
    pub board: CallBoard,
    pub inbox: Arc<RankBoards>,
    pub peers: Vec<Option<Peer>>,
    /// Host-only: this rank's flag words and receive slots, then every peer's, registered.
    pub own_flags: Option<Registered>,
    pub own_slots: Option<Registered>,
    pub host_flags: Vec<Registered>,
    pub host_path: Option<HostPath>,
    pub host_rings: Option<HostRings>,
    pub remote: Option<RemoteLanes>,
    /// Every peer in another process can take this rank's file descriptors (VMM buffers).
    pub vmm_ok: bool,
    /// `CUDA_DEVICE_MAX_CONNECTIONS`, which some settings' `auto` follows.
    pub max_connections: Option<String>,
    /// Ranks of the communicator on this rank's GPU.
    pub gpu_sharing: crate::sharing::GpuSharing,
}

/// The engine of `comm` from its `parts`, as `g`, `a` and the settings say.
pub(super) fn build(
    comm: &CommCtx,
    cfg: &P2pConfig,
    g: &Geometry,
    a: Agreed,
    host_only: bool,
    p: Parts,
) -> Result<IpcEngine> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let (mail, mailed_reduce) = mail_for(cfg, &a, n, host_only, &p)?;
    let Parts {
        local,
        board,
        inbox,
        peers,
        own_flags,
        own_slots,
        host_flags,
        host_path,
        host_rings,
        remote,
        vmm_ok,
        max_connections,
        gpu_sharing,
    } = p;
    let lanes = Lanes::new(&local.ctx, cfg, n, g.rx_lanes, host_path.is_some())?;
    // Every rank's flags, receive area and low-latency area as this device reaches them
    // (this rank's own at its index).
    let every = |f: fn(&Peer) -> u64, mine: u64| -> Vec<u64> {
        peers.iter().map(|q| q.as_ref().map_or(mine, f)).collect()
    };
    let own_at = |r: &Option<Registered>, mine: &DeviceBuffer| {
        r.as_ref().map_or(mine.ptr(), |(reg, _)| reg.device_ptr())
    };
    let ll_areas = device_array(&local.ctx, &every(|q| q.ll, local.ll.ptr()))?;
    let layout = Layout {
        rank,
        nranks: n,
        chunk: g.chunk,
        slots: g.slots,
        tx_lanes: TX_LANES,
        rx_lanes: g.rx_lanes,
        direct_tx: lanes.direct_tx,
        flags: every(|q| q.flags, own_at(&own_flags, &local.flags)),
        scratch: every(|q| q.scratch, own_at(&own_slots, &local.scratch)),
        host: host_path,
        // Host-only leaves this rank's GPU receive area unused otherwise: the slots are in
        // host memory.
        mirror: (host_only && cfg.host_only_stage_in).then(|| local.scratch.ptr()),
    };
    let mut bufs = Buffers::new(local.ctx.clone(), vmm_ok);
    bufs.there = remote.as_ref().map(|r| r.ctx.clone());
    let max_connections = max_connections.as_deref();
    // A local setting (each rank orders its own streams); the kernel is loaded now, never
    // while streams wait on peers.
    let wait_kernel = wants_wait_kernel(&cfg.wait_kernel, max_connections);
    let copy_kernel = wants_wait_kernel(&cfg.copy_kernel, max_connections).any();
    // A local setting too: the protocol lets each rank decide whether it stops waiting.
    let takeover =
        takeover_wait(&cfg.direct_reduce_takeover_us, max_connections).filter(|_| n == 2);
    load_kernels(
        &local,
        rank,
        copy_kernel || cfg.eager_copy_kernel,
        wait_kernel.any(),
        a.ll_exchange_max,
    )?;
    let small_mismatch = Flag::new(&local.ctx).map_err(cuda_err)?;
    let wants_batch = cfg.batch_copies.local_max(n, cfg.batch_local_max);
    let batch_copies = wants_batch.filter(|_| local.ctx.driver().batch_copy().is_some());
    if wants_batch.is_some() && batch_copies.is_none() {
        tracing::info!("rank {rank}: the driver has no cuMemcpyBatchAsync: a copy lane per peer");
    }
    // Host-only never pauses the host path at a power limit: it is the only way for the bytes.
    let host_limits = host_limits(cfg, &local.ctx, layout.host.is_some() && !host_only);
    log_engine(rank, n, g, lanes.direct_tx, host_only);
    let graph_copy_blocks = copy_blocks(cfg, &local.ctx, rank, gpu_sharing.count());
    Ok(IpcEngine {
        ctx: local.ctx,
        kernels: local.kernels,
        layout,
        single_stream_max: g.single_max,
        wait_kernel,
        copy_kernel,
        batch_copies,
        ll_max: a.ll_max,
        ll_reduce_max: a.ll_reduce_max,
        ll_scatter_max: a.ll_scatter_max,
        ll_exchange_max: a.ll_exchange_max,
        p2p_max: a.p2p_max,
        ll_launch: ccl_cuda::cuda::LlLaunch {
            pack_max: a.ll_pack_max,
            block_bytes: a.ll_block_bytes,
            threads: cfg.ll_threads_per_block(),
            ack_unfenced: cfg.ll_ack_unfenced,
        },
        ll_two_shot_min: a.ll_two_shot_min,
        copies: std::sync::OnceLock::new(),
        relay: a.relay,
        takeover,
        tuning: Tuning::from_config(cfg, max_connections),
        graph_copy_blocks,
        gpu_sharing,
        windows: Mutex::default(),
        cfg: cfg.clone(),
        small_mismatch,
        direct_reduce: a.direct_reduce,
        reduce_n: AtomicBool::new(cfg.reduce_n_for(n)),
        _ll: local.ll,
        ll_areas,
        _flags: local.flags,
        device_slots: local.scratch,
        _peers: peers,
        tx: lanes.tx,
        rx: lanes.rx,
        host_lanes: lanes.host,
        host_limits,
        host_skipped: AtomicU64::new(0),
        _host_rings: host_rings,
        host_only,
        _host_flags: own_flags
            .into_iter()
            .chain(own_slots)
            .chain(host_flags)
            .collect(),
        fork: lanes.fork,
        joins: lanes.joins,
        last_done: lanes.last_done,
        queued: Mutex::new(Queued::new(n, g.rx_lanes, bufs)),
        board,
        direct: a.direct,
        inbox,
        mail,
        mailed_reduce,
        watch: Mutex::new(Watch::default()),
        remote,
        captured: AtomicUsize::new(0),
        ll_captured: AtomicBool::new(false),
    })
}

/// The mail thread and its slots, where sends (`CCL_IPC_MAILED_PUSH`) or direct reductions
/// (`CCL_IPC_DIRECT_REDUCE_MAILED`, agreed, up to the many-source kernel's ranks) are mailed;
/// and whether reductions are.
fn mail_for(
    cfg: &P2pConfig,
    a: &Agreed,
    n: usize,
    host_only: bool,
    p: &Parts,
) -> Result<(Option<crate::mail::Mail>, bool)> {
    let reduce = a.mailed_reduce
        && a.direct
        && a.direct_reduce > 0
        && n <= ccl_cuda::cuda::source::REDUCE_N_MAX;
    if !(cfg.mailed_push || reduce) || !a.direct || host_only {
        return Ok((None, false));
    }
    let mail = crate::mail::Mail::new(
        &p.local.ctx,
        p.inbox.clone(),
        std::process::id() as u64,
        cfg.mail_blocks.clamp(1, 1024) as u32,
    )?;
    Ok((Some(mail), reduce))
}

/// What the engine of `rank` of `n` is made of (`NCCL_DEBUG=INFO`).
fn log_engine(rank: usize, n: usize, g: &Geometry, direct_tx: usize, host_only: bool) {
    tracing::info!(
        "rank {rank}: cuda-ipc{} with {} peers, {} slots of {} KiB each, {} copy ({} for direct copies) and {} receive lanes",
        if host_only {
            " host-only (no peer GPU memory: flags, slots and ring in shared host memory)"
        } else {
            ""
        },
        n - 1,
        g.slots,
        g.chunk >> 10,
        TX_LANES,
        direct_tx,
        g.rx_lanes
    );
}

/// The engine's streams and the events that fork and join them.
struct Lanes {
    /// Copy lanes of the direct paths (the staged protocol uses the first `TX_LANES`).
    direct_tx: usize,
    tx: Vec<Stream>,
    rx: Vec<Stream>,
    /// The host path's two lanes (none while it is off).
    host: Vec<Stream>,
    /// One per lane, tx lanes first.
    joins: Vec<Event>,
    fork: Event,
    last_done: Event,
}

impl Lanes {
    fn new(
        ctx: &std::sync::Arc<Context>,
        cfg: &P2pConfig,
        n: usize,
        rx_lanes: usize,
        host_path: bool,
    ) -> Result<Lanes> {
        let ev = || plain_event(ctx).map_err(cuda_err);
        let high = matches!(cfg.lane_priority.trim(), "high" | "1");
        let stream = || Stream::non_blocking_with_priority(ctx, high).map_err(cuda_err);
        let streams = |k: usize| (0..k).map(|_| stream()).collect::<Result<Vec<_>>>();
        let direct_tx = layout::direct_tx_lanes(n, TX_LANES);
        let tx = streams(direct_tx)?;
        let rx = streams(rx_lanes)?;
        let host = streams(if host_path { 2 } else { 0 })?;
        let joins = (0..direct_tx + rx_lanes + host.len())
            .map(|_| ev())
            .collect::<Result<Vec<_>>>()?;
        let (fork, last_done) = (ev()?, ev()?);
        Ok(Lanes {
            direct_tx,
            tx,
            rx,
            host,
            joins,
            fork,
            last_done,
        })
    }
}

/// `words` in a new device buffer (the kernels read every rank's low-latency area from one).
fn device_array(ctx: &std::sync::Arc<Context>, words: &[u64]) -> Result<DeviceBuffer> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let buf = DeviceBuffer::new(ctx, bytes.len()).map_err(cuda_err)?;
    buf.write(0, &bytes).map_err(cuda_err)?;
    Ok(buf)
}

/// Loads the kernels that streams waiting on peers may launch, now, never while they wait.
fn load_kernels(
    local: &Local,
    rank: usize,
    copy_kernel: bool,
    wait_kernel: bool,
    ll_exchange_max: usize,
) -> Result<()> {
    if copy_kernel {
        local
            .kernels
            .prepare(DataType::Uint8, KernelOp::WaitCopy)
            .map_err(cuda_err)?;
    }
    if wait_kernel {
        local
            .kernels
            .prepare(DataType::Uint8, KernelOp::WaitFlag)
            .map_err(cuda_err)?;
    }
    // The kernels of small operations too: one of them waits for a launch that another
    // communicator of this process (the peer GPU's, under `-g N`) makes next, and a module
    // load, which can wait for the whole device, must not come in between.
    // Not fatal here (the peers already count on this rank): a kernel that fails to load
    // fails the first operation that needs it, with NVRTC's message.
    if ll_exchange_max > 0 {
        for op in [KernelOp::LlExchange, KernelOp::LlP2p] {
            if let Err(e) = local.kernels.prepare(DataType::Uint8, op) {
                tracing::warn!("rank {rank}: cuda-ipc could not load {op:?} at setup: {e}");
            }
        }
    }
    Ok(())
}

/// The clock limiters the host path consults, if it is on and told to
/// (`CCL_IPC_HOST_PATH_WHEN_LIMITED=0`, the default) and NVML knows this GPU.
fn host_limits(
    cfg: &P2pConfig,
    ctx: &Context,
    host_path: bool,
) -> Option<(cuda::ClockLimits, limits::LimitWatch)> {
    if !host_path || cfg.host_path_when_limited {
        return None;
    }
    let bus = ctx.driver().pci_bus_id(ctx.device()).ok()?;
    let clocks = match cuda::ClockLimits::for_bus_id(&bus) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!("cuda-ipc: the host path cannot see GPU {bus}'s clock limiters: {e}");
            return None;
        }
    };
    tracing::info!(
        "cuda-ipc: the host path pauses while GPU {bus} is at its power or thermal limit \
         (clock event reasons now {:#x})",
        clocks.reasons().unwrap_or(0)
    );
    let watch = limits::LimitWatch::new(Duration::from_millis(5), Duration::from_millis(100));
    Some((clocks, watch))
}

/// [`crate::tuning::graph_copy_blocks`] for this GPU, said when sharing it lowers the setting.
fn copy_blocks(cfg: &P2pConfig, ctx: &Context, rank: usize, sharers: usize) -> u32 {
    let sms = ctx.sm_count().map_or(u32::MAX, |s| s.max(1) as u32);
    let blocks = crate::tuning::graph_copy_blocks(cfg.graph_copy_blocks, sms, sharers);
    if sharers > 1 && i64::from(blocks) < cfg.graph_copy_blocks.min(1024) {
        tracing::info!(
            "rank {rank}: {sharers} ranks share this GPU: captured copy kernels take at most \
             {blocks} blocks (CCL_GRAPH_COPY_BLOCKS={})",
            cfg.graph_copy_blocks
        );
    }
    blocks
}
