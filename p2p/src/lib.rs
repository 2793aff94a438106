//! cuda-ipc: GPUs of one host move each other's data directly, with no host thread in the
//! data path (DESIGN.md invariants 2-4).
//!
//! At init every rank allocates a receive area in its own device memory (`CCL_IPC_SLOTS` slots
//! of `CCL_IPC_CHUNK_BYTES` per peer) and a few flag words, and maps every peer's (CUDA IPC
//! handles across processes, peer access inside one). An operation is lowered into chunk
//! transfers per peer: the sender's copy engine copies a chunk from the user's buffer into the
//! receiver's slot (`cuMemcpyAsync`), then writes the receiver's `ready` flag
//! (`cuStreamWriteValue32` into peer memory); the receiver's stream waits on that flag
//! (`cuStreamWaitValue32`), copies the chunk out or reduces it into the user's buffer with a
//! kernel, and writes the sender's `credit` flag, which frees the slot. Everything is queued on
//! streams when the API call is made: the call never waits for a peer, and nothing runs in a
//! host callback.
//!
//! Deadlock freedom: streams may share hardware queues (and do, with
//! `CUDA_DEVICE_MAX_CONNECTIONS=1`), so a queued wait can hold up unrelated work queued after
//! it. Every transfer gets a logical time `t`, computed alike on both sides; each rank queues
//! its work in `(t, sends before receives)` order, and every wait depends only on work that
//! comes earlier in that order on some rank. The earliest unfinished piece of work is then
//! never stuck behind a later one, whatever the queue merging. The protocol itself lives in
//! [`protocol`], over a [`device::Device`]; this module sets it up and drives CUDA streams.

mod buffers;
mod calls;
mod captured;
pub mod config;
pub mod control;
mod device;
mod direct;
mod direct_reduce;
pub mod error;
mod host_path;
mod layout;
mod limits;
mod protocol;
mod relay;
mod rendezvous;
#[cfg(test)]
mod sim;
mod small_p2p;
mod sync;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccl_collectives::Collective;
use ccl_cuda::cuda::source::{ReduceKindKey, LL_EXCHANGE_MAX_RANKS};
use ccl_cuda::cuda::{
    self, Context, DeviceBuffer, Event, Flag, IpcHandle, IpcMapping, KernelOp, Kernels,
    LlTransfers, MemOp, Stream, WaitCond, IPC_HANDLE_SIZE,
};
use ccl_cuda::{DataType, ReduceKind};
use parking_lot::Mutex;

use ccl_collectives::task::{Reduction, Scalar, Task, TaskKind};
use ccl_cuda::cuda::helpers::{device_context, plain_event};

use buffers::Buffers;
use calls::{CallBoard, CallSig, History, RankBoards};
pub use config::P2pConfig;
pub use control::{CommCtx, Control, PeerHealth};
use device::{Batched, Device, Kernel, LongWait};
use error::cuda_err;
pub use error::{Error, ErrorKind, Result};
use host_path::HostPath;
use layout::{Lane, Layout};
use protocol::{lower, Act, Chain, Counters, Program};

/// Copy lanes (streams) per communicator: chunk `seq` of a pair goes on lane `seq % TX_LANES`,
/// so one lane's flag operations and copy launch overlap the other lane's copy and the copy
/// engines never idle between chunks.
const TX_LANES: usize = 2;

/// Most receive lanes (`CCL_IPC_RX_LANES`).
const MAX_RX_LANES: usize = 4;

/// A peer's memory as this rank's device sees it.
struct Peer {
    flags: u64,
    scratch: u64,
    ll: u64,
    /// IPC mappings (other processes) keep the peer's memory mapped while we use it.
    _maps: Vec<IpcMapping>,
}

/// What one communicator has queued so far.
struct Queued {
    counters: Counters,
    /// The user stream of the last operation: one that follows on another stream waits for it
    /// (the counters assume operations of a communicator run in call order).
    last_stream: Option<usize>,
    /// Low-latency operations so far.
    ll_seq: u32,
    /// Small sends and receives so far, per pair (the point-to-point kernel's numbering).
    small: small_p2p::Seqs,
    /// Collectives called so far, for the mismatch check.
    calls: History,
    /// Groups queued so far.
    ops: u64,
    /// Our buffers as peers reach them, and theirs as we do.
    bufs: Buffers,
    /// Bytes this rank sent: straight between user buffers, through its bounce buffer, and
    /// through the receive slots (logged when the communicator goes).
    sent_direct: u64,
    sent_bounced: u64,
    /// Of `sent_direct`, bytes through the host path's pinned ring.
    sent_host: u64,
    sent_staged: u64,
    /// Bytes this rank sent as small sends through the point-to-point kernel.
    sent_small: u64,
    push_waits: direct::PushWaits,
    /// Direct reductions by how they went (shared, alone, passive, staged after the
    /// rendezvous), and the host time spent waiting for the other ranks' posts.
    sym_outcomes: [u64; 4],
    sym_waited: Duration,
    /// Host time spent queueing groups (logged when the communicator goes): a host-bound
    /// training loop pays it directly, as it cannot launch its next kernels meanwhile.
    queueing: QueueTimes,
    /// Peers whose receives came late (the push wait is skipped for a while).
    push_late: direct::Lateness,
}

/// One communicator's cuda-ipc state.
pub struct IpcEngine {
    /// The settings it was made with.
    cfg: P2pConfig,
    /// Host-only mode (`CCL_IPC_HOST_ONLY`): flag words and receive slots in shared host
    /// memory, every direct transfer wholly through the host path, reductions through the
    /// slots, nothing that touches a peer's GPU memory (captured groups go staged).
    pub(crate) host_only: bool,
    /// Host-only: every rank's flag region as this process registered and mapped it
    /// (registrations drop first).
    _host_flags: Vec<Registered>,
    ctx: Arc<Context>,
    kernels: Arc<Kernels>,
    layout: Layout,
    single_stream_max: usize,
    /// Waits that last as long as a peer takes (a transfer's "done") run as a one-thread
    /// kernel instead of a stream wait (`CCL_IPC_WAIT_KERNEL`).
    wait_kernel: WaitKernel,
    /// A direct transfer's second side as one wait-copy-signal kernel
    /// (`CCL_IPC_COPY_KERNEL`).
    copy_kernel: bool,
    _flags: DeviceBuffer,
    /// This rank's receive area in its GPU memory: the staged protocol's slots, or in host-only
    /// mode (whose slots are in host memory) their mirror and the partners' inputs of captured
    /// groups ([`captured::capture_host_only`]).
    device_slots: DeviceBuffer,
    /// Largest low-latency all-reduce in bytes (0: none), this rank's area, and the device
    /// array of every rank's area address as mapped here.
    ll_max: usize,
    /// Smallest all-reduce / reduce-scatter that runs as a direct reduction (0: none).
    direct_reduce: usize,
    /// More than two ranks: a direct reduction reduces its slice in one kernel over every
    /// rank's input (`CCL_IPC_DIRECT_REDUCE_MULTI`); cleared if that kernel fails to load, so
    /// the chain of two-input kernels takes over.
    reduce_n: AtomicBool,
    _ll: DeviceBuffer,
    ll_areas: DeviceBuffer,
    /// Data collectives (no arithmetic) of at most this many bytes take the low-latency
    /// kernel instead of the zero-SM direct transfers (0: never).
    ll_exchange_max: usize,
    /// Broadcasts over more than two ranks that go as a pipelined scatter and all-gather.
    relay: relay::Relay,
    /// Two ranks: how long a direct reduction's first poster waits before leaving the whole
    /// reduction to its peer (`CCL_IPC_DIRECT_REDUCE_TAKEOVER_US`; None: never).
    takeover: Option<Duration>,
    /// Settings of the per-operation path, read once.
    tuning: Tuning,
    /// Where the point-to-point kernel reports a small receive whose size differed from its
    /// send's (1 + the sender's rank; host-mapped, so checking it needs no CUDA call).
    small_mismatch: Flag,
    _peers: Vec<Option<Peer>>,
    tx: Vec<Stream>,
    rx: Vec<Stream>,
    /// The host path's two lanes (none while it is off) and its rings.
    host_lanes: Vec<Stream>,
    _host_rings: Option<HostRings>,
    /// This GPU's clock limiters and how often they are read: while the GPU is held at its
    /// power or thermal limit (someone's compute at full tilt) new transfers skip the host
    /// path (`CCL_IPC_HOST_PATH_WHEN_LIMITED`); None: the host path does not look.
    host_limits: Option<(cuda::ClockLimits, limits::LimitWatch)>,
    /// Transfers the host path would have taken, posted without it because the GPU was limited.
    host_skipped: std::sync::atomic::AtomicU64,
    fork: Event,
    /// One per lane, tx lanes first.
    joins: Vec<Event>,
    /// Recorded on the user stream at the end of every operation.
    last_done: Event,
    queued: Mutex<Queued>,
    board: CallBoard,
    /// Direct transfers on (every rank asked for them), and every rank's rendezvous inbox.
    direct: bool,
    inbox: RankBoards,
    watch: Mutex<Watch>,
    /// Copies pulled from the peer run on the peer GPU's engine (`CCL_IPC_REMOTE_COPY`).
    remote: Option<RemoteLanes>,
    /// Groups captured into CUDA graphs so far (each takes the next index of
    /// [`captured::groups`], whichever path it ends up on).
    captured: std::sync::atomic::AtomicUsize,
}

/// A context of this process on the peer's GPU (two ranks): a transfer this rank would pull
/// -- its GPU's copy engine reading the peer's memory, which halves both directions while that
/// engine also pushes this rank's own data -- is queued on a stream there instead, so the
/// peer GPU's engine pushes it (2026-11-23, `tests/gpu/cross_issue.cu`: 390 GB/s each way with
/// both queued by one process, also while the other process's kernel holds every SM of that
/// GPU). Per receive lane: the stream there, an event of ours it waits on (the peer's "here"
/// flag seen on our lane) and one of its own our lane waits on before writing "done". Only
/// copies and event waits run there: stream memory operations refuse the peer mappings of
/// our context.
struct RemoteLanes {
    ctx: Arc<Context>,
    streams: Vec<Stream>,
    here: Vec<Event>,
    there: Vec<Event>,
    min_bytes: usize,
    pulls: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

/// The peer GPU's lanes for [`RemoteLanes`]; an error says why there are none (logged).
fn remote_lanes(
    cfg: &P2pConfig,
    local: &Arc<Context>,
    peer: &Offer,
    lanes: usize,
) -> Result<RemoteLanes> {
    let ordinal = device_by_bus_id(&peer.bus_id)?
        .ok_or_else(|| Error::system("the peer's GPU is not visible in this process"))?;
    if ordinal == local.ordinal() {
        return Err(Error::system("the peer uses this process's GPU"));
    }
    let ctx = device_context(ordinal)?;
    if !ctx.can_access_peer(local).map_err(cuda_err)? {
        return Err(Error::system(
            "the peer's GPU cannot reach this one's memory",
        ));
    }
    // The engine there writes into our buffers.
    ctx.enable_peer_access(local).map_err(cuda_err)?;
    let ev = |c: &Arc<Context>| {
        (0..lanes)
            .map(|_| plain_event(c).map_err(cuda_err))
            .collect::<Result<Vec<_>>>()
    };
    Ok(RemoteLanes {
        streams: (0..lanes)
            .map(|_| Stream::with_flags(&ctx, true).map_err(cuda_err))
            .collect::<Result<Vec<_>>>()?,
        here: ev(local)?,
        there: ev(&ctx)?,
        ctx,
        min_bytes: cfg.remote_copy_min_bytes.max(1) as usize,
        pulls: Default::default(),
        bytes: Default::default(),
    })
}

/// What the stuck-work check has seen.
#[derive(Debug, Default)]
struct Watch {
    /// Since when the last queued operation has been pending, and how many were queued then.
    pending: Option<(std::time::Instant, u64)>,
    /// When a peer was first seen gone while work was queued.
    peer_left: Option<std::time::Instant>,
}

/// How long posting a direct transfer may wait for a peer that is a whole ring of transfers
/// behind, when `CCL_TIMEOUT_S` does not say.
const DIRECT_POST_TIMEOUT: Duration = Duration::from_secs(600);

/// How long queued work may outlive a peer's departure before it counts as stuck.
const PEER_LEFT_GRACE: Duration = Duration::from_secs(1);

// SAFETY: CUDA handles (streams, events, device pointers, module functions) are process-wide
// driver objects usable from any thread; mutable state is behind the counters' mutex.
unsafe impl Send for IpcEngine {}
// SAFETY: as above.
unsafe impl Sync for IpcEngine {}

/// The callers' streams of a group, each once.
fn streams_of(ctx: &Arc<Context>, tasks: &[Task]) -> Vec<Stream> {
    // SAFETY: the callers pass their own live cudaStream_t values (NCCL's contract).
    unsafe { ccl_cuda::cuda::helpers::streams_from_raw(ctx, tasks.iter().map(|t| t.stream)) }
}

/// The reduction kernels of a device, shared by its communicators (compiled once).
pub fn kernels_for(ctx: &Arc<Context>, preload_all: bool) -> Result<Arc<Kernels>> {
    static ALL: std::sync::OnceLock<Mutex<Vec<Arc<Kernels>>>> = std::sync::OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock();
    if let Some(k) = all.iter().find(|k| k.ordinal() == ctx.ordinal()) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kernels::new(ctx).map_err(cuda_err)?);
    // Now, while no communicator of this process has work on the device: see
    // `Kernels::preload`.
    if preload_all {
        let lls = ReduceKindKey::ALL.map(KernelOp::LlAllReduce);
        let keys: Vec<_> = DataType::ALL
            .into_iter()
            .flat_map(|dt| KernelOp::ALL.into_iter().chain(lls).map(move |op| (dt, op)))
            .collect();
        preload(&k, &keys);
    }
    all.push(k.clone());
    Ok(k)
}

/// [`Kernels::preload`] on every core (at most 16), with what it did in the log.
fn preload(kernels: &Kernels, keys: &[(DataType, KernelOp)]) {
    let before = kernels.stats();
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get().min(16));
    let r = kernels.preload(keys, threads);
    let after = kernels.stats();
    for ((dt, op), e) in &r.failed {
        tracing::debug!(
            "device {}: kernel {op:?} for {dt:?} not loaded ahead: {e}",
            kernels.ordinal()
        );
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    tracing::info!(
        "device {}: {} kernels loaded ahead ({} compiled in {} programs, {} from the disk cache, \
         {} left to their first use) in {:.0} ms: {:.0} waiting for another process's \
         compilation, {:.0} compiling, {:.0} storing, {:.0} loading",
        kernels.ordinal(),
        keys.len(),
        after.compiled - before.compiled,
        r.programs,
        after.from_disk - before.from_disk,
        r.failed.len(),
        ms(r.took),
        ms(r.lock_wait),
        ms(r.compiling),
        ms(r.storing),
        ms(r.loading)
    );
}

/// What a rank offers its peers at setup.
struct Offer {
    capable: bool,
    /// Wants direct transfers (`CCL_IPC_DIRECT`): used only if every rank does.
    direct: bool,
    dev: i32,
    chunk: u64,
    slots: u32,
    single_max: u64,
    ll_max: u64,
    /// `CCL_IPC_DIRECT_REDUCE_BYTES` (0: off): used only if every rank has it on.
    direct_reduce: u64,
    /// `CCL_IPC_LL_EXCHANGE_BYTES` (0: off): the smallest over the ranks is used.
    ll_exchange_max: u64,
    /// `CCL_IPC_BCAST_RELAY_BYTES` (0: off, on any rank) and `_CHUNK_BYTES`.
    relay_min: u64,
    relay_chunk: u64,
    /// A descriptor kept open during setup: peers in other processes try to take it, to learn
    /// whether VMM memory (shared by descriptor) can travel between the ranks (-1: none).
    probe_fd: i32,
    flags_ptr: u64,
    scratch_ptr: u64,
    ll_ptr: u64,
    flags_handle: [u8; IPC_HANDLE_SIZE],
    scratch_handle: [u8; IPC_HANDLE_SIZE],
    ll_handle: [u8; IPC_HANDLE_SIZE],
    /// Wants remote copies (`CCL_IPC_REMOTE_COPY`): used only if every rank does.
    remote: bool,
    /// Host-only mode (`CCL_IPC_HOST_ONLY`): every rank must offer it alike.
    host_only: bool,
    /// The GPU's PCI bus id, NUL-padded: a peer in another process finds our GPU by it (device
    /// numbers differ between processes under `CUDA_VISIBLE_DEVICES`).
    bus_id: [u8; BUS_ID_BYTES],
    /// The host path's ring geometry (no slots: off, or this rank could not make its ring):
    /// used only if both ranks offer the same.
    host: HostRing,
}

/// The geometry of a rank's host-path ring (`CCL_IPC_HOST_PATH_SLOT_BYTES`, `_SLOTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct HostRing {
    slot_bytes: u64,
    slots: u32,
}

impl HostRing {
    fn from_config(cfg: &P2pConfig) -> HostRing {
        HostRing {
            slot_bytes: (cfg.host_path_slot_bytes.clamp(4096, 1 << 30) as u64) & !4095,
            slots: cfg.host_path_slots.clamp(2, 64) as u32,
        }
    }

    fn ring_bytes(&self) -> usize {
        self.slot_bytes as usize * self.slots as usize
    }
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

/// How the engine may reach the peer GPUs' memory, from the settings alone (every rank reads
/// the same ones; the offers check that they agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerReach {
    /// Mapped peer memory (CUDA IPC, or plain pointers in one process).
    Mapped,
    /// Shared host memory only: flag words, receive slots and the host path's ring.
    HostOnly,
    /// Not at all: GPU operations are staged through the host transports.
    None,
}

/// `CCL_IPC_HOST_ONLY` as forced on or off (`1`, `0`), or left to `auto` (None; also what an
/// unparsable value means, with a warning).
fn forced_host_only(setting: &str) -> Option<bool> {
    match setting.trim() {
        "auto" | "" => None,
        v => match v.parse::<i64>() {
            Ok(v) => Some(v != 0),
            Err(_) => {
                tracing::warn!("CCL_IPC_HOST_ONLY={v:?} is not auto, 0 or 1; using auto");
                None
            }
        },
    }
}

impl PeerReach {
    /// `forced` is `CCL_IPC_HOST_ONLY` ([`forced_host_only`]), `p2p_off` whether the user turned
    /// GPU peer-to-peer off, `shm_off` whether `NCCL_SHM_DISABLE` asks for sockets between local
    /// ranks. Host-only is a shared-memory transport on copy engines, so `auto` takes it where
    /// NVIDIA's NCCL would take its shared-memory transport: peer-to-peer off, shared memory on.
    fn from_settings(forced: Option<bool>, n: usize, p2p_off: bool, shm_off: bool) -> Self {
        let host_only = n >= 2 && forced.unwrap_or(p2p_off && !shm_off);
        match (host_only, p2p_off) {
            (true, _) => PeerReach::HostOnly,
            (false, false) => PeerReach::Mapped,
            (false, true) => PeerReach::None,
        }
    }

    /// What to try when every rank offered mapped peer memory but some rank could not map it
    /// (GPUs without peer access: consumer cards, many VMs, GPUs hidden from each other):
    /// host-only, where `auto` would have chosen it had the settings said so, as NCCL falls
    /// back to its shared-memory transport there.
    fn when_unmappable(self, forced: Option<bool>, n: usize, shm_off: bool) -> Option<Self> {
        (self == PeerReach::Mapped && forced.is_none() && n >= 2 && !shm_off)
            .then_some(PeerReach::HostOnly)
    }
}

/// Whether the user turned GPU peer-to-peer off: `NCCL_P2P_DISABLE=1`, `NCCL_P2P_LEVEL=LOC`
/// (or `0`), which NCCL reads as "never peer-to-peer", or a `NCCL_P2P_LEVEL` nearer than the
/// path between some two GPUs of a host (`beyond_level`, from the topology search).
fn p2p_disabled(cfg: &P2pConfig, beyond_level: bool) -> bool {
    beyond_level
        || cfg.p2p_disable
        || cfg
            .p2p_level
            .as_deref()
            .and_then(|v| ccl_topology::types::PathType::parse_level(&v))
            == Some(ccl_topology::types::PathType::Loc)
}

/// This rank's shares of the host path (local settings: the first poster's share holds),
/// as (smallest transfer, thousandths) one way and in exchanges.
fn host_shares(cfg: &P2pConfig) -> ((usize, u32), (usize, u32)) {
    let share = |min: i64, permille: i64| {
        (
            min.max(0) as usize,
            permille.clamp(0, HostPath::WHOLE.into()) as u32,
        )
    };
    (
        share(cfg.host_path_min_bytes, cfg.host_path_permille),
        share(
            cfg.host_path_exchange_min_bytes,
            cfg.host_path_exchange_permille,
        ),
    )
}

/// The host path's rings: the peer's (our transfers to it go there) and ours (its transfers
/// to us land in it), each mapped here and registered with CUDA, in that order. Fields drop
/// in order: registrations before mappings.
struct HostRings {
    regs: [cuda::HostRegistration; 2],
    own: ccl_transports::shm::ShmRegion,
    _peer: ccl_transports::shm::ShmRegion,
}

impl HostRings {
    /// The peer's ring and ours as the device reaches them: [`HostPath`]'s
    /// `out_ring` and `in_ring`.
    fn device_ptrs(&self) -> (u64, u64) {
        (self.regs[0].device_ptr(), self.regs[1].device_ptr())
    }
}

/// This rank's ring of the host path, made and registered before the offer.
fn host_ring(ctx: &Arc<Context>, nonce: u64, rank: usize, hs: &HostRing) -> Result<Registered> {
    host_region(ctx, &calls::board_name("hp", nonce, rank), hs.ring_bytes())
        .map_err(|e| Error::system(format!("host path ring: {e}")))
}

/// A shared region registered with CUDA (its device address is the registration's), the
/// registration first so that it drops before the mapping.
type Registered = (cuda::HostRegistration, ccl_transports::shm::ShmRegion);

/// `region`, a mapping this process just made (of a file it created or a peer's), registered
/// with CUDA here.
fn registered(ctx: &Arc<Context>, region: ccl_transports::shm::ShmRegion) -> Result<Registered> {
    // SAFETY: the region is a page-aligned mapping of ours, new (so not registered: a peer's
    // file mapped here is a second mapping), and it travels beside its registration, which
    // drops first.
    let reg = unsafe { cuda::HostRegistration::new(ctx, region.as_ptr(), region.len()) }
        .map_err(cuda_err)?;
    Ok((reg, region))
}

/// A new shared region `name` of `len` bytes (zeroed), mapped and registered here.
fn host_region(ctx: &Arc<Context>, name: &str, len: usize) -> Result<Registered> {
    let region = ccl_transports::shm::ShmRegion::create(name, len)
        .map_err(|e| Error::system(format!("{name}: {e}")))?;
    registered(ctx, region)
}

const BUS_ID_BYTES: usize = 16;

const OFFER_BYTES: usize =
    1 + 4 + 8 + 4 + 8 + 8 + 8 + 8 + 8 + 3 * IPC_HANDLE_SIZE + 8 + 4 + 8 + 16 + BUS_ID_BYTES + 12;

impl Offer {
    fn none() -> Offer {
        Offer {
            capable: false,
            direct: false,
            dev: -1,
            chunk: 0,
            slots: 0,
            single_max: 0,
            ll_max: 0,
            direct_reduce: 0,
            ll_exchange_max: 0,
            relay_min: 0,
            relay_chunk: 0,
            probe_fd: -1,
            flags_ptr: 0,
            scratch_ptr: 0,
            ll_ptr: 0,
            flags_handle: [0; IPC_HANDLE_SIZE],
            scratch_handle: [0; IPC_HANDLE_SIZE],
            ll_handle: [0; IPC_HANDLE_SIZE],
            remote: false,
            host_only: false,
            bus_id: [0; BUS_ID_BYTES],
            host: HostRing::default(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_BYTES);
        b.push(
            self.capable as u8
                | (self.direct as u8) << 1
                | (self.remote as u8) << 2
                | (self.host_only as u8) << 3,
        );
        b.extend_from_slice(&self.dev.to_le_bytes());
        b.extend_from_slice(&self.chunk.to_le_bytes());
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&self.single_max.to_le_bytes());
        b.extend_from_slice(&self.ll_max.to_le_bytes());
        b.extend_from_slice(&self.flags_ptr.to_le_bytes());
        b.extend_from_slice(&self.scratch_ptr.to_le_bytes());
        b.extend_from_slice(&self.ll_ptr.to_le_bytes());
        b.extend_from_slice(&self.flags_handle);
        b.extend_from_slice(&self.scratch_handle);
        b.extend_from_slice(&self.ll_handle);
        b.extend_from_slice(&self.direct_reduce.to_le_bytes());
        b.extend_from_slice(&self.probe_fd.to_le_bytes());
        b.extend_from_slice(&self.ll_exchange_max.to_le_bytes());
        b.extend_from_slice(&self.relay_min.to_le_bytes());
        b.extend_from_slice(&self.relay_chunk.to_le_bytes());
        b.extend_from_slice(&self.bus_id);
        b.extend_from_slice(&self.host.slot_bytes.to_le_bytes());
        b.extend_from_slice(&self.host.slots.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() != OFFER_BYTES {
            return None;
        }
        let u32_at = |o: usize| b.get(o..o + 4).and_then(|s| s.try_into().ok());
        let u64_at = |o: usize| b.get(o..o + 8).and_then(|s| s.try_into().ok());
        let mut o = Offer::none();
        o.capable = b[0] & 1 == 1;
        o.direct = b[0] & 2 == 2;
        o.remote = b[0] & 4 == 4;
        o.host_only = b[0] & 8 == 8;
        o.dev = i32::from_le_bytes(u32_at(1)?);
        o.chunk = u64::from_le_bytes(u64_at(5)?);
        o.slots = u32::from_le_bytes(u32_at(13)?);
        o.single_max = u64::from_le_bytes(u64_at(17)?);
        o.ll_max = u64::from_le_bytes(u64_at(25)?);
        o.flags_ptr = u64::from_le_bytes(u64_at(33)?);
        o.scratch_ptr = u64::from_le_bytes(u64_at(41)?);
        o.ll_ptr = u64::from_le_bytes(u64_at(49)?);
        let h = |i: usize| b.get(57 + i * IPC_HANDLE_SIZE..57 + (i + 1) * IPC_HANDLE_SIZE);
        o.flags_handle.copy_from_slice(h(0)?);
        o.scratch_handle.copy_from_slice(h(1)?);
        o.ll_handle.copy_from_slice(h(2)?);
        o.direct_reduce = u64::from_le_bytes(u64_at(57 + 3 * IPC_HANDLE_SIZE)?);
        o.probe_fd = i32::from_le_bytes(u32_at(65 + 3 * IPC_HANDLE_SIZE)?);
        o.ll_exchange_max = u64::from_le_bytes(u64_at(69 + 3 * IPC_HANDLE_SIZE)?);
        o.relay_min = u64::from_le_bytes(u64_at(77 + 3 * IPC_HANDLE_SIZE)?);
        o.relay_chunk = u64::from_le_bytes(u64_at(85 + 3 * IPC_HANDLE_SIZE)?);
        let at = 93 + 3 * IPC_HANDLE_SIZE;
        o.bus_id.copy_from_slice(b.get(at..at + BUS_ID_BYTES)?);
        let at = at + BUS_ID_BYTES;
        o.host = HostRing {
            slot_bytes: u64::from_le_bytes(u64_at(at)?),
            slots: u32::from_le_bytes(u32_at(at + 8)?),
        };
        Some(o)
    }
}

/// This rank's own allocations, made before the offer.
struct Local {
    ctx: Arc<Context>,
    kernels: Arc<Kernels>,
    flags: DeviceBuffer,
    scratch: DeviceBuffer,
    ll: DeviceBuffer,
}

/// A PCI bus id as the offer carries it (lower case, NUL-padded, cut to [`BUS_ID_BYTES`]).
fn bus_id_bytes(id: &str) -> [u8; BUS_ID_BYTES] {
    let mut b = [0u8; BUS_ID_BYTES];
    for (d, c) in b.iter_mut().zip(id.to_ascii_lowercase().bytes()) {
        *d = c;
    }
    b
}

/// This process's number for the GPU with PCI bus id `id` (`None`: not visible here).
fn device_by_bus_id(id: &[u8; BUS_ID_BYTES]) -> Result<Option<i32>> {
    let drv = cuda::Driver::get().map_err(cuda_err)?;
    for ordinal in 0..drv.device_count().map_err(cuda_err)? {
        let dev = drv.device(ordinal).map_err(cuda_err)?;
        if bus_id_bytes(&drv.pci_bus_id(dev).map_err(cuda_err)?) == *id {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

fn prepare_local(
    cfg: &P2pConfig,
    dev: i32,
    nranks: usize,
    chunk: usize,
    slots: u32,
    single_max: usize,
    ll_max: usize,
    rx_lanes: usize,
) -> Result<(Local, Offer)> {
    let ctx = device_context(dev)?;
    let kernels = kernels_for(&ctx, cfg.kernel_preload)?;
    if cfg.kernel_preload
        && cfg.direct_reduce_multi
        && (3..=ccl_cuda::cuda::source::REDUCE_N_MAX).contains(&nranks)
    {
        let k = nranks as u8;
        let keys: Vec<_> = DataType::ALL
            .into_iter()
            .flat_map(|dt| ReduceKindKey::ALL.map(move |r| (dt, KernelOp::ReduceN(r, k))))
            .collect();
        preload(&kernels, &keys);
    }
    let flags =
        DeviceBuffer::new(&ctx, Layout::flag_bytes(nranks, slots, rx_lanes)).map_err(cuda_err)?;
    flags.write(0, &vec![0u8; flags.len()]).map_err(cuda_err)?;
    let bytes = Layout::scratch_bytes(nranks, slots, chunk)
        .ok_or_else(|| Error::invalid_argument("cuda-ipc receive area size overflows"))?;
    let scratch = DeviceBuffer::new(&ctx, bytes).map_err(cuda_err)?;
    let flags_handle = IpcHandle::of(&ctx, flags.ptr()).map_err(cuda_err)?.0;
    // One rank has no peers and no receive area.
    let scratch_handle = if scratch.is_empty() {
        [0; IPC_HANDLE_SIZE]
    } else {
        IpcHandle::of(&ctx, scratch.ptr()).map_err(cuda_err)?.0
    };
    let ll = DeviceBuffer::new(&ctx, cuda::source::ll_area_bytes(nranks, ll_max.max(256)))
        .map_err(cuda_err)?;
    // Flags and acknowledgements start at zero (the data regions need no initial value).
    let words = cuda::source::ll_data_offset(nranks);
    ll.write(0, &vec![0u8; words]).map_err(cuda_err)?;
    let ll_handle = IpcHandle::of(&ctx, ll.ptr()).map_err(cuda_err)?.0;
    let offer = Offer {
        capable: true,
        direct: cfg.direct,
        dev,
        chunk: chunk as u64,
        slots,
        single_max: single_max as u64,
        ll_max: ll_max as u64,
        direct_reduce: cfg.direct_reduce_bytes.max(0) as u64,
        ll_exchange_max: cfg.ll_exchange_bytes.max(0) as u64,
        relay_min: cfg.bcast_relay_bytes.max(0) as u64,
        relay_chunk: cfg.bcast_relay_chunk_bytes.max(1 << 20) as u64,
        probe_fd: -1,
        flags_ptr: flags.ptr(),
        scratch_ptr: scratch.ptr(),
        ll_ptr: ll.ptr(),
        flags_handle,
        scratch_handle,
        ll_handle,
        remote: cfg.remote_copy,
        // Set by `attach`.
        host_only: false,
        bus_id: bus_id_bytes(&ctx.driver().pci_bus_id(ctx.device()).map_err(cuda_err)?),
        // Filled in once the ring exists (attach).
        host: HostRing::default(),
    };
    Ok((
        Local {
            ctx,
            kernels,
            flags,
            scratch,
            ll,
        },
        offer,
    ))
}

/// Sets up cuda-ipc for a freshly connected communicator. Collective: every rank calls it,
/// GPU or not, and all reach the same decision (an engine on every rank or on none).
pub fn attach(comm: &CommCtx, cfg: &P2pConfig) -> Result<Option<Arc<IpcEngine>>> {
    let n = comm.nranks();
    let forced = forced_host_only(&cfg.host_only);
    let shm_off = cfg.shm_disable;
    let reach =
        PeerReach::from_settings(forced, n, p2p_disabled(cfg, comm.p2p_beyond_level), shm_off);
    match attach_as(comm, cfg, reach, comm.nonce)? {
        Attached::Unmappable => match reach.when_unmappable(forced, n, shm_off) {
            Some(fallback) => {
                tracing::info!(
                    "rank {}: cuda-ipc: a rank cannot map its peers' GPU memory (no peer \
                     access between these GPUs?); host-only instead",
                    comm.rank()
                );
                // Names of its own: the first attempt's regions may still be on their way out.
                match attach_as(comm, cfg, fallback, !comm.nonce)? {
                    Attached::On(e) => Ok(Some(e)),
                    _ => Ok(None),
                }
            }
            None => Ok(None),
        },
        Attached::On(e) => Ok(Some(e)),
        Attached::Off => Ok(None),
    }
}

/// How one attempt at setting up the engine ended (every rank alike: each outcome follows
/// what all ranks exchanged).
enum Attached {
    On(Arc<IpcEngine>),
    /// Settings or capabilities rule the engine out.
    Off,
    /// Every rank offered the engine, but some rank could not open its peers' memory.
    Unmappable,
}

/// One attempt with `reach`, its shared-memory names built from `nonce`.
fn attach_as(comm: &CommCtx, cfg: &P2pConfig, reach: PeerReach, nonce: u64) -> Result<Attached> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let chunk = (cfg.chunk_bytes.clamp(4096, 1 << 30) as usize) & !255;
    let slots = cfg.slots.clamp(2, 64) as u32;
    let single_max = cfg.single_stream_bytes.max(0) as usize;
    let ll_max = (cfg.ll_bytes.clamp(0, 1 << 22) as usize) & !15;
    let rx_lanes = cfg.rx_lanes.clamp(1, MAX_RX_LANES as i64) as usize;
    // Host-only mode: ranks of one host whose GPUs need not reach each other's memory
    // (peer-to-peer off, or no peer access): their flag words and receive slots live in shared
    // host memory, and with two ranks every byte of a direct transfer goes through the host
    // path's ring.
    let host_only = reach == PeerReach::HostOnly;
    let wanted = comm.cuda_dev >= 0
        && cfg.gpu_available
        && reach != PeerReach::None
        && !cfg.disable
        && comm.one_host;
    // Kept open until every peer has tried to take it (the second allgather below).
    let probe = nix::unistd::pipe().ok();
    let (local, mut offer) = if wanted {
        match prepare_local(
            cfg,
            comm.cuda_dev,
            n,
            chunk,
            slots,
            single_max,
            ll_max,
            rx_lanes,
        ) {
            Ok((l, o)) => match CallBoard::create(nonce, rank, n).and_then(|b| {
                let inbox = RankBoards::create("dx", nonce, rank, n, layout::inbox_words(n))?;
                Ok((b, inbox))
            }) {
                Ok((b, inbox)) => (Some((l, b, inbox)), o),
                Err(e) => {
                    tracing::info!("rank {rank}: cuda-ipc unavailable here: {e}");
                    (None, Offer::none())
                }
            },
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc unavailable here: {e}");
                (None, Offer::none())
            }
        }
    } else {
        (None, Offer::none())
    };
    if let Some((r, _)) = &probe {
        use std::os::fd::AsRawFd;
        offer.probe_fd = r.as_raw_fd();
    }
    // The host path's ring, before the offer: peers open it once they have every offer.
    offer.host_only = host_only;
    // Host-only: this rank's flag words in shared host memory, before the offer (peers map
    // them once they have every offer); without them this rank cannot take part.
    // So do its receive slots (the staged protocol's, which reductions use): peers write
    // chunks there and this rank's kernels reduce out of them.
    let flag_len = Layout::flag_bytes(n, slots, rx_lanes).next_multiple_of(4096);
    let slot_len = Layout::scratch_bytes(n, slots, chunk)
        .unwrap_or(0)
        .max(1)
        .next_multiple_of(4096);
    let mut own_flags = None;
    let mut own_slots = None;
    if let (true, Some((l, _, _))) = (host_only, &local) {
        let region = |what: &str, len: usize| {
            host_region(&l.ctx, &calls::board_name(what, nonce, rank), len)
        };
        match region("hf", flag_len).and_then(|f| Ok((f, region("hs", slot_len)?))) {
            Ok((f, s)) => {
                own_flags = Some(f);
                own_slots = Some(s);
            }
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc host-only regions: {e}");
                offer.capable = false;
            }
        }
    }
    let (one_way, exchange) = if host_only {
        ((1, HostPath::WHOLE), (1, HostPath::WHOLE))
    } else {
        host_shares(cfg)
    };
    let mut own_ring = None;
    if let Some((l, _, _)) = &local {
        let hs = HostRing::from_config(cfg);
        // Two ranks only: with more, every GPU's PCIe share would meet on the way to the CPU.
        if n == 2 && (one_way.1 > 0 || exchange.1 > 0) && cfg.direct {
            match host_ring(&l.ctx, nonce, rank, &hs) {
                Ok(r) => {
                    own_ring = Some(r);
                    offer.host = hs;
                }
                Err(e) => tracing::info!("rank {rank}: cuda-ipc host path off: {e}"),
            }
        }
    }
    let all = comm.control.allgather(&offer.encode())?;
    let offers: Vec<Offer> = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Offer::decode(b)
                .ok_or_else(|| Error::remote(format!("rank {r} sent a malformed cuda-ipc offer")))
        })
        .collect::<Result<_>>()?;
    let agreed = offers.iter().all(|o| {
        o.capable
            && o.chunk == chunk as u64
            && o.slots == slots
            && o.single_max == single_max as u64
            && o.host_only == host_only
    });
    // Host-only: direct transfers go through the host path's ring, which joins two ranks; with
    // more (or with direct transfers off) every byte goes through the receive slots in shared
    // host memory instead: pushed there on copy engines, copied or reduced out by kernels.
    let direct_on = offers.iter().all(|o| o.direct) && (!host_only || n == 2);
    // Paths every rank must choose alike: the smallest low-latency limit (every rank's area
    // holds that much), direct reductions only if every rank has them on, from the largest
    // threshold.
    // Host-only: nothing that reads or writes a peer's GPU memory (small operations as
    // kernels, direct reductions, relays, remote copies).
    let ll_max = if host_only {
        0
    } else {
        offers.iter().map(|o| o.ll_max as usize).min().unwrap_or(0)
    };
    let ll_exchange_max = offers
        .iter()
        .map(|o| o.ll_exchange_max as usize)
        .min()
        .unwrap_or(0)
        .min(ll_max);
    let direct_reduce = if host_only || offers.iter().any(|o| o.direct_reduce == 0) {
        0
    } else {
        offers
            .iter()
            .map(|o| o.direct_reduce as usize)
            .max()
            .unwrap_or(0)
    };
    // Relayed broadcasts only if every rank has them on, from the largest threshold and chunk.
    let relay = relay::Relay {
        min_bytes: if host_only || offers.iter().any(|o| o.relay_min == 0) {
            0
        } else {
            offers
                .iter()
                .map(|o| o.relay_min as usize)
                .max()
                .unwrap_or(0)
        },
        chunk_bytes: offers
            .iter()
            .map(|o| o.relay_chunk as usize)
            .max()
            .unwrap_or(1 << 20),
    };
    let Some((local, mut board, mut inbox)) = local.filter(|_| agreed) else {
        if wanted && offers.iter().any(|o| o.capable) {
            tracing::info!(
                "rank {rank}: cuda-ipc off for this communicator (not every rank can map its \
                 peers, or the CCL_IPC_* settings differ between ranks)"
            );
        }
        return Ok(Attached::Off);
    };
    let my_pid = comm.pids[rank];
    // Host-only keeps two more streams per rank waiting on host words; ranks that share a GPU
    // in one process share its hardware queues, where such a wait can hold up the very work of
    // the other rank that would release it (tests/gpu/two_comms.c, two communicators of two
    // ranks on one GPU in one process: hung within 3000 iterations). Those stay staged; both
    // ranks see the same table, so both decide alike.
    let sharing: Vec<usize> = (0..n)
        .filter(|&j| comm.pids[j] == my_pid && offers[j].bus_id == offers[rank].bus_id)
        .collect();
    if host_only && sharing.len() > 1 {
        tracing::info!(
            "rank {rank}: cuda-ipc host-only off: another rank of this communicator shares this \
             process's GPU (the staged path carries the communicator)"
        );
        return Ok(Attached::Off);
    }
    let max_connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok();
    warn_of_shared_queues(rank, sharing, max_connections.as_deref());
    let mut peers: Vec<Option<Peer>> = (0..n).map(|_| None).collect();
    // Host-only: every rank's flag region as this process maps and registers it.
    let mut host_flags: Vec<Registered> = Vec::new();
    let opened = (|| -> Result<()> {
        if !host_only && cfg.fault_no_peer_access {
            return Err(Error::system(
                "peer GPU memory left unmapped (CCL_IPC_FAULT_NO_PEER_ACCESS)",
            ));
        }
        board.boards.open_peers(nonce)?;
        inbox.open_peers(nonce)?;
        for (j, o) in offers.iter().enumerate() {
            if j == rank {
                continue;
            }
            peers[j] = Some(if host_only {
                let mut map = |what: &str, len: usize| -> Result<u64> {
                    let name = calls::board_name(what, nonce, j);
                    let region = ccl_transports::shm::ShmRegion::open(&name, len)
                        .map_err(|e| Error::system(format!("the peer's host-only {what}: {e}")))?;
                    let (reg, region) = registered(&local.ctx, region)?;
                    let at = reg.device_ptr();
                    host_flags.push((reg, region));
                    Ok(at)
                };
                Peer {
                    flags: map("hf", flag_len)?,
                    scratch: map("hs", slot_len)?,
                    ll: 0,
                    _maps: Vec::new(),
                }
            } else if comm.pids[j] == my_pid {
                // The same process: plain pointers, once this device may access the peer's.
                let pctx = device_context(o.dev)?;
                local.ctx.enable_peer_access(&pctx).map_err(cuda_err)?;
                Peer {
                    flags: o.flags_ptr,
                    scratch: o.scratch_ptr,
                    ll: o.ll_ptr,
                    _maps: Vec::new(),
                }
            } else {
                let f =
                    IpcMapping::open(&local.ctx, &IpcHandle(o.flags_handle)).map_err(cuda_err)?;
                let s =
                    IpcMapping::open(&local.ctx, &IpcHandle(o.scratch_handle)).map_err(cuda_err)?;
                let l = IpcMapping::open(&local.ctx, &IpcHandle(o.ll_handle)).map_err(cuda_err)?;
                Peer {
                    flags: f.ptr(),
                    scratch: s.ptr(),
                    ll: l.ptr(),
                    _maps: vec![f, s, l],
                }
            });
        }
        Ok(())
    })();
    if let Err(e) = &opened {
        tracing::info!("rank {rank}: cannot map a peer's memory: {e}");
    }
    // The host path: both ranks made their rings with the same settings, and this one maps
    // the peer's.
    let host_settings = offers[0].host;
    let peer_ring = match own_ring.take() {
        Some(own) if opened.is_ok() && n == 2 && offers.iter().all(|o| o.host == host_settings) => {
            (|| -> Result<HostRings> {
                let name = calls::board_name("hp", nonce, 1 - rank);
                let peer = ccl_transports::shm::ShmRegion::open(&name, host_settings.ring_bytes())
                    .map_err(|e| Error::system(format!("the peer's host path ring: {e}")))?;
                let (reg, peer) = registered(&local.ctx, peer)?;
                let (own_reg, own) = own;
                Ok(HostRings {
                    regs: [reg, own_reg],
                    own,
                    _peer: peer,
                })
            })()
            .inspect_err(|e| tracing::info!("rank {rank}: cuda-ipc host path off: {e}"))
            .ok()
        }
        _ => None,
    };
    // Remote copies: both ranks asked, and this one can queue on the peer's GPU.
    let remote = if opened.is_ok() && n == 2 && !host_only && offers.iter().all(|o| o.remote) {
        match remote_lanes(cfg, &local.ctx, &offers[1 - rank], rx_lanes) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc remote copies off: {e}");
                None
            }
        }
    } else {
        None
    };
    // Can this rank take descriptors from every peer in another process?
    let takes_fds = offers.iter().enumerate().all(|(j, o)| {
        j == rank
            || comm.pids[j] == my_pid
            || (o.probe_fd >= 0 && buffers::can_take_fd(comm.pids[j], o.probe_fd))
    });
    let oks = comm.control.allgather(&[
        opened.is_ok() as u8,
        takes_fds as u8,
        remote.is_some() as u8,
        peer_ring.is_some() as u8,
    ])?;
    drop(probe);
    if oks.iter().any(|b| b.first() != Some(&1)) {
        return Ok(Attached::Unmappable);
    }
    let vmm_ok = oks.iter().all(|b| b.get(1) == Some(&1));
    // Only if both can: a sender gives up waiting for its receiver because the receiver's
    // copy will still be a push.
    let remote = remote.filter(|_| oks.iter().all(|b| b.get(2) == Some(&1)));
    if let Some(r) = &remote {
        tracing::info!(
            "rank {rank}: cuda-ipc remote copies on: transfers of at least {} bytes this rank \
             pulls run on the peer GPU's copy engine",
            r.min_bytes
        );
    }
    let peer_ring = peer_ring.filter(|_| oks.iter().all(|b| b.get(3) == Some(&1)));
    // Host-only direct transfers have no other way for the bytes: no ring on some rank, no
    // engine on any.
    if host_only && direct_on && !oks.iter().all(|b| b.get(3) == Some(&1)) {
        tracing::info!("rank {rank}: cuda-ipc host-only off: a rank has no host path ring");
        return Ok(Attached::Off);
    }
    let host_path = peer_ring.as_ref().map(|rings| {
        let (out_ring, in_ring) = rings.device_ptrs();
        HostPath {
            out_ring,
            in_ring,
            slot_bytes: host_settings.slot_bytes as usize,
            slots: host_settings.slots,
            one_way,
            exchange,
        }
    });
    if let Some(h) = &host_path {
        tracing::info!(
            "rank {rank}: cuda-ipc host path on: {} permille of direct transfers of at least {} \
             bytes ({} permille from {} bytes in groups that also receive from the peer) go \
             through pinned host memory beside NVLink, in chunks of at most {} KiB ({} slots)",
            h.one_way.1,
            h.one_way.0,
            h.exchange.1,
            h.exchange.0,
            h.slot_bytes >> 10,
            h.slots
        );
    }
    // Every peer has mapped this rank's boards (and ring).
    board.boards.unlink();
    for (_, region) in own_flags.iter().chain(&own_slots) {
        region.unlink();
    }
    inbox.unlink();
    // Both ranks have mapped both rings (a ring whose path went off is removed as it drops).
    if let Some(rings) = &peer_ring {
        rings.own.unlink();
    }
    let ev = || plain_event(&local.ctx).map_err(cuda_err);
    let high = matches!(cfg.lane_priority.trim(), "high" | "1");
    let stream = || Stream::non_blocking_with_priority(&local.ctx, high).map_err(cuda_err);
    // Every rank has mapped every peer: from here a local failure is the communicator's.
    let direct_tx = layout::direct_tx_lanes(n, TX_LANES);
    let tx = (0..direct_tx)
        .map(|_| stream())
        .collect::<Result<Vec<_>>>()?;
    let rx = (0..rx_lanes)
        .map(|_| stream())
        .collect::<Result<Vec<_>>>()?;
    let host_lanes = if host_path.is_some() {
        (0..2).map(|_| stream()).collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let joins = (0..direct_tx + rx_lanes + host_lanes.len())
        .map(|_| ev())
        .collect::<Result<Vec<_>>>()?;
    let (fork, last_done) = (ev()?, ev()?);
    let own = |f: fn(&Peer) -> u64, mine: u64| -> Vec<u64> {
        peers.iter().map(|p| p.as_ref().map_or(mine, f)).collect()
    };
    let areas: Vec<u8> = own(|p| p.ll, local.ll.ptr())
        .into_iter()
        .flat_map(u64::to_le_bytes)
        .collect();
    let ll_areas = DeviceBuffer::new(&local.ctx, areas.len()).map_err(cuda_err)?;
    ll_areas.write(0, &areas).map_err(cuda_err)?;
    let layout = Layout {
        rank,
        nranks: n,
        chunk,
        slots,
        tx_lanes: TX_LANES,
        rx_lanes,
        direct_tx,
        flags: own(
            |p| p.flags,
            own_flags
                .as_ref()
                .map_or(local.flags.ptr(), |(reg, _)| reg.device_ptr()),
        ),
        scratch: own(
            |p| p.scratch,
            own_slots
                .as_ref()
                .map_or(local.scratch.ptr(), |(reg, _)| reg.device_ptr()),
        ),
        host: host_path,
        // Host-only leaves this rank's GPU receive area unused otherwise: the slots are in
        // host memory.
        mirror: (host_only && cfg.host_only_stage_in).then(|| local.scratch.ptr()),
    };
    let mut bufs = Buffers::new(local.ctx.clone(), vmm_ok);
    bufs.there = remote.as_ref().map(|r| r.ctx.clone());
    // A local setting (each rank orders its own streams); the kernel is loaded now, never
    // while streams wait on peers.
    let wait_kernel = wants_wait_kernel(&cfg.wait_kernel, max_connections.as_deref());
    let copy_kernel = wants_wait_kernel(&cfg.copy_kernel, max_connections.as_deref()).any();
    // A local setting too: the protocol lets each rank decide whether it stops waiting.
    let takeover = takeover_wait(&cfg.direct_reduce_takeover_us, max_connections.as_deref())
        .filter(|_| n == 2);
    if copy_kernel {
        local
            .kernels
            .prepare(DataType::Uint8, KernelOp::WaitCopy)
            .map_err(cuda_err)?;
    }
    if wait_kernel.any() {
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
    let small_mismatch = Flag::new(&local.ctx).map_err(cuda_err)?;
    // Host-only never pauses the host path at a power limit: it is the only way for the bytes.
    let host_limits = host_limits(cfg, &local.ctx, layout.host.is_some() && !host_only);
    let engine = IpcEngine {
        ctx: local.ctx,
        kernels: local.kernels,
        layout,
        single_stream_max: single_max,
        wait_kernel,
        copy_kernel,
        ll_max,
        ll_exchange_max,
        relay,
        takeover,
        tuning: Tuning::from_config(cfg),
        cfg: cfg.clone(),
        small_mismatch,
        direct_reduce,
        reduce_n: AtomicBool::new(
            cfg.direct_reduce_multi && (3..=ccl_cuda::cuda::source::REDUCE_N_MAX).contains(&n),
        ),
        _ll: local.ll,
        ll_areas,
        _flags: local.flags,
        device_slots: local.scratch,
        _peers: peers,
        tx,
        rx,
        host_lanes,
        host_limits,
        host_skipped: std::sync::atomic::AtomicU64::new(0),
        _host_rings: peer_ring,
        host_only,
        _host_flags: own_flags
            .into_iter()
            .chain(own_slots)
            .chain(host_flags)
            .collect(),
        fork,
        joins,
        last_done,
        queued: Mutex::new(Queued {
            counters: Counters::new(n, rx_lanes),
            last_stream: None,
            ll_seq: 0,
            small: small_p2p::Seqs::new(n),
            calls: History::default(),
            ops: 0,
            bufs,
            sent_direct: 0,
            sent_bounced: 0,
            sent_host: 0,
            push_waits: direct::PushWaits::default(),
            sym_outcomes: [0; 4],
            sym_waited: Duration::ZERO,
            push_late: direct::Lateness::default(),
            sent_staged: 0,
            sent_small: 0,
            queueing: QueueTimes::default(),
        }),
        board,
        direct: direct_on,
        inbox,
        watch: Mutex::new(Watch::default()),
        remote,
        captured: std::sync::atomic::AtomicUsize::new(0),
    };
    tracing::info!(
        "rank {rank}: cuda-ipc{} with {} peers, {} slots of {} KiB each, {} copy ({} for direct copies) and {} receive lanes",
        if host_only {
            " host-only (no peer GPU memory: flags, slots and ring in shared host memory)"
        } else {
            ""
        },
        n - 1,
        slots,
        chunk >> 10,
        TX_LANES,
        direct_tx,
        rx_lanes
    );
    Ok(Attached::On(Arc::new(engine)))
}

/// Hardware queues a device gives a process's streams when `CUDA_DEVICE_MAX_CONNECTIONS`
/// does not say.
const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// Warns (from the lowest of them) when several ranks of this communicator share one GPU in
/// this process (`sharing`, this rank's included) with fewer than 32 hardware queues: their
/// streams then share queues, and a stream waiting for a peer at the head of a queue holds up
/// whatever is queued behind it there, which may be the very work that would release it (four
/// ranks on one H100, an 8 MiB average all-reduce through the slots: hung at the default 8,
/// done in 2 s at 32; measured 2026-11-23). NCCL refuses two ranks on one GPU; libccl allows
/// it for machines with fewer GPUs than ranks. Returns whether it warned.
fn warn_of_shared_queues(rank: usize, sharing: Vec<usize>, max_connections: Option<&str>) -> bool {
    let queues = max_connections
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let warn = sharing.len() > 1 && sharing.first() == Some(&rank) && queues < 32;
    if warn {
        tracing::warn!(
            "ranks {sharing:?} of this communicator share one GPU in this process, whose \
             streams then share {queues} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): a \
             stream waiting for a peer can hold up the work that would release it, and the \
             communicator can hang; set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process \
             starts CUDA"
        );
    }
    warn
}

/// Can this group go through cuda-ipc? Decided from what every rank sees alike (the
/// communicator and the kind of reduction), never from local buffer properties.
pub fn takes(tasks: &[Task]) -> bool {
    // A device-resident PreMulSum scalar must be read in stream order: the staged path does.
    !tasks
        .iter()
        .any(|t| matches!(t.red, Reduction::PreMulSum(Scalar::Device(_))))
}

/// The protocols' queues on CUDA streams: [`Lane::User`] is the caller's stream. Used behind
/// [`Batched`], which hands consecutive flag operations over as one
/// `cuStreamBatchMemOp`.
struct CudaDevice<'a> {
    eng: &'a IpcEngine,
    user: &'a Stream,
}

impl<'a> CudaDevice<'a> {
    fn new(eng: &'a IpcEngine, user: &'a Stream) -> CudaDevice<'a> {
        CudaDevice { eng, user }
    }

    fn stream(&self, lane: Lane) -> Result<&Stream> {
        let s = match lane {
            Lane::User => Some(self.user),
            Lane::Tx(i) => self.eng.tx.get(i),
            Lane::Rx(i) => self.eng.rx.get(i),
            Lane::Host(i) => self.eng.host_lanes.get(i),
        };
        s.ok_or_else(|| Error::internal(format!("cuda-ipc: no stream for {lane:?}")))
    }

    fn join_event(&self, lane: Lane) -> Result<&Event> {
        let i = match lane {
            Lane::Tx(i) => Some(i),
            Lane::Rx(i) => Some(self.eng.layout.direct_tx + i),
            Lane::Host(i) => Some(self.eng.layout.direct_tx + self.eng.layout.rx_lanes + i),
            Lane::User => None,
        };
        i.and_then(|i| self.eng.joins.get(i))
            .ok_or_else(|| Error::internal(format!("cuda-ipc: no join event for {lane:?}")))
    }
}

// SAFETY (for every method below): the addresses come from the protocol's `Layout` (flag words
// and slots inside allocations that live as long as the engine, ours or mapped) or from the
// caller's buffers of the operation being queued, valid until the stream has passed it (NCCL's
// contract); kernels get ranges of exactly `n` elements, `dst` equal to or disjoint from each
// input.
impl Device for CudaDevice<'_> {
    fn wait(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.wait_value32(addr, value, WaitCond::Geq) }.map_err(cuda_err)
    }

    fn wait_long(&mut self, lane: Lane, addr: u64, value: u32, of: LongWait) -> Result<()> {
        if !self.eng.wait_kernel.covers(of) {
            return self.wait(lane, addr, value);
        }
        let s = self.stream(lane)?;
        // SAFETY: see the impl; the word is a flag of the layout, which a peer's stream (or
        // an abort) writes.
        unsafe { self.eng.kernels.wait_flag(s, addr, value) }.map_err(cuda_err)
    }

    fn wait_copy_signal(
        &mut self,
        lane: Lane,
        arrive: (u64, u32),
        (dst, src, bytes): (u64, u64, usize),
        done: (u64, u32),
    ) -> Result<()> {
        if !self.eng.copy_kernel {
            return device::wait_copy_signal_in_three(self, lane, arrive, (dst, src, bytes), done);
        }
        let s = self.stream(lane)?;
        // SAFETY: see the impl: both words are flags of the layout (a peer's stream writes
        // `arrive`; `done` is a peer's flag mapped here), the ranges are the transfer's two
        // buffers (ours and the peer's, mapped), disjoint, valid until the stream passes.
        unsafe {
            self.eng.kernels.wait_copy(
                s,
                arrive.0,
                arrive.1,
                dst,
                src,
                bytes as u64,
                done.0,
                done.1,
            )
        }
        .map_err(cuda_err)
    }

    fn write(&mut self, lane: Lane, addr: u64, value: u32) -> Result<()> {
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.write_value32(addr, value) }.map_err(cuda_err)
    }

    fn fused_all_reduce(&mut self, lane: Lane, f: &device::FusedAllReduce) -> Result<bool> {
        let s = self.stream(lane)?;
        let words = cuda::GraphWords {
            inputs: f.inputs.clone(),
            done: f.done.clone(),
            halfway: Vec::new(),
        };
        // SAFETY: see the impl: the sources are every rank's input of the captured all-reduce
        // (peers' mapped at capture), `dst` this rank's output, `n` elements each; the words
        // are the group's captured words of the layout, which only the group's graphs write.
        unsafe {
            self.eng
                .kernels
                .graph_all_reduce(s, f.dtype, f.op, f.dst, &f.srcs, f.n, &words, f.inplace)
        }
        .map_err(cuda_err)?;
        Ok(true)
    }

    fn fused_copies(&mut self, lane: Lane, f: &device::FusedCopies) -> Result<bool> {
        let s = self.stream(lane)?;
        let words = cuda::GraphWords {
            inputs: f.inputs.clone(),
            done: f.done.clone(),
            halfway: f.halfway.clone(),
        };
        // SAFETY: see the impl: the copies are the captured group's, between user buffers
        // (peers' mapped at capture) and its scratch memory, disjoint; the words as in
        // `fused_all_reduce`.
        unsafe {
            self.eng
                .kernels
                .graph_copies(s, &f.copies, &f.second, &words)
        }
        .map_err(cuda_err)?;
        Ok(true)
    }

    fn flag_ops(&mut self, lane: Lane, ops: &[device::FlagOp]) -> Result<()> {
        if let [op] = ops {
            // One operation: its own call is cheaper than a batch of one.
            return match *op {
                device::FlagOp::Wait(addr, value) => self.wait(lane, addr, value),
                device::FlagOp::Write(addr, value) => self.write(lane, addr, value),
            };
        }
        let ops = ops.iter().map(|op| match *op {
            device::FlagOp::Wait(addr, value) => MemOp::Wait {
                addr,
                value,
                cond: WaitCond::Geq,
            },
            device::FlagOp::Write(addr, value) => MemOp::Write { addr, value },
        });
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.mem_ops(ops) }.map_err(cuda_err)
    }

    fn long_wait_is_kernel(&self, of: LongWait) -> bool {
        self.eng.wait_kernel.covers(of)
    }

    fn copy_signal_is_kernel(&self) -> bool {
        self.eng.copy_kernel
    }

    fn copy(&mut self, lane: Lane, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // Nothing to move (a direct transfer wholly through the host path: its NVLink part,
        // whose peer address is then not even resolved).
        if bytes == 0 {
            return Ok(());
        }
        let s = self.stream(lane)?;
        // SAFETY: see the impl.
        unsafe { s.memcpy(dst, src, bytes) }.map_err(cuda_err)
    }

    fn pull(
        &mut self,
        lane: Lane,
        dst: u64,
        (src, src_there): (u64, u64),
        bytes: usize,
    ) -> Result<()> {
        let remote = self.eng.remote.as_ref().filter(|r| bytes >= r.min_bytes);
        let (Some(r), Lane::Rx(i)) = (remote, lane) else {
            return self.copy(lane, dst, src, bytes);
        };
        let (Some(stream_there), Some(seen_here), Some(done_there)) =
            (r.streams.get(i), r.here.get(i), r.there.get(i))
        else {
            return self.copy(lane, dst, src, bytes);
        };
        let s = self.stream(lane)?;
        // Each event is waited on right after it is recorded, so one per lane serves every
        // transfer.
        seen_here.record(s).map_err(cuda_err)?;
        stream_there.wait_event(seen_here).map_err(cuda_err)?;
        // SAFETY: see the impl; `src_there` is the peer's buffer as our context on its GPU
        // maps it (`Transfer::there`: no VMM memory on either side), `dst` ours, which that
        // context reaches through the peer access enabled for it at setup.
        unsafe { stream_there.memcpy(dst, src_there, bytes) }.map_err(cuda_err)?;
        done_there.record(stream_there).map_err(cuda_err)?;
        s.wait_event(done_there).map_err(cuda_err)?;
        r.pulls.fetch_add(1, Ordering::Relaxed);
        r.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    fn kernel(&mut self, lane: Lane, k: Kernel) -> Result<()> {
        let s = self.stream(lane)?;
        let kn = &self.eng.kernels;
        // SAFETY: see the impl.
        unsafe {
            match k {
                Kernel::Reduce {
                    dtype,
                    op,
                    dst,
                    a,
                    b,
                    n,
                } => kn.reduce(s, dtype, op, dst, a, b, n),
                Kernel::ReduceN {
                    dtype,
                    op,
                    dst,
                    srcs,
                    k,
                    n,
                } => kn.reduce_n(s, dtype, op, dst, srcs.get(..k).unwrap_or(&[]), n),
                Kernel::PreMul {
                    dtype,
                    dst,
                    src,
                    n,
                    scalar,
                } => kn.premul(s, dtype, dst, src, n, scalar),
                Kernel::PreMulAdd {
                    dtype,
                    dst,
                    src,
                    acc,
                    n,
                    scalar,
                } => kn.premul_add(s, dtype, dst, src, acc, n, scalar),
                Kernel::DivInt {
                    dtype,
                    dst,
                    n,
                    divisor,
                } => kn.div_int(s, dtype, dst, n, divisor),
            }
        }
        .map_err(cuda_err)
    }

    fn fork(&mut self, lanes: &[Lane]) -> Result<()> {
        self.eng.fork.record(self.user).map_err(cuda_err)?;
        for &l in lanes {
            self.stream(l)?
                .wait_event(&self.eng.fork)
                .map_err(cuda_err)?;
        }
        Ok(())
    }

    fn join(&mut self, lanes: &[Lane]) -> Result<()> {
        for &l in lanes {
            let ev = self.join_event(l)?;
            ev.record(self.stream(l)?).map_err(cuda_err)?;
            self.user.wait_event(ev).map_err(cuda_err)?;
        }
        Ok(())
    }
}

/// A group being queued on one communicator's streams.
struct Queueing {
    comm: CommCtx,
    eng: Arc<IpcEngine>,
    user: Vec<Stream>,
    em: Chain,
    ll: Option<LowLatency>,
    /// Small sends and receives for the point-to-point kernel, in call order.
    small: Vec<Task>,
    sig: Option<CallSig>,
    /// The group's direct transfers, lowered, and once posted, this rank's plan for them.
    direct: Option<Program>,
    /// The direct transfers are all sends and receives (no collective's blocks): only then
    /// does a send to a peer the group also receives from wait `CCL_IPC_EXCHANGE_WAIT_US`
    /// (a 2-rank all-gather or all-to-all also sends to and receives from its peer, but in a
    /// host-bound tensor-parallel loop a 20 ms host wait per call would cost more than the
    /// serial copies it saves).
    point_to_point: bool,
    /// Bytes the staged program sends through receive slots.
    staged_tx: usize,
    posting: Option<direct::Posting>,
    plan: direct::Plan,
    /// A peer disagreed on a transfer's size (reported once everything is queued).
    direct_err: Option<Error>,
    /// An all-reduce or reduce-scatter that may run directly, its rendezvous, and the plan
    /// if every rank posted in time (then the staged emission is dropped).
    sym: Option<Task>,
    sym_post: Option<(u64, direct_reduce::SymOutcome)>,
    sym_plan: Option<direct_reduce::SymPlan>,
}

impl Queueing {
    /// Posts this rank's buffers for a direct reduction: its input and output as peers map
    /// them, or nothing (then everyone goes staged) if they cannot, or overlap partly.
    fn post_sym(&mut self, q: &mut Queued) -> Result<()> {
        let Some(t) = self.sym else {
            return Ok(());
        };
        let eng = &*self.eng;
        let l = &eng.layout;
        let Some(board) = eng.inbox.of(0) else {
            return Err(Error::internal("cuda-ipc: no inbox of rank 0"));
        };
        let (sb, rb) = ccl_collectives::task::buffer_counts(t.kind, l.rank, l.nranks, t.count)
            .map(|(s, r)| (s * t.dtype.size(), r * t.dtype.size()))
            .ok_or_else(|| Error::invalid_argument("count overflows"))?;
        let (s, r) = (t.send as u64, t.recv as u64);
        let disjoint = s + sb as u64 <= r || r + rb as u64 <= s;
        let in_place = match t.kind {
            TaskKind::Coll(Collective::ReduceScatter) => r == s + (l.rank * rb) as u64,
            _ => s == r,
        };
        let posts_output = direct_reduce::output_posted(&t, l.rank);
        let mine = if disjoint || in_place || !posts_output {
            let pid = rendezvous::Reach::pid(&q.bufs);
            let si = rendezvous::Reach::export(&mut q.bufs, s)?;
            let ro = if posts_output {
                rendezvous::Reach::export(&mut q.bufs, r)?.map(|ri| ri.post(pid, r, rb))
            } else {
                Some(direct_reduce::NO_POST)
            };
            si.zip(ro).map(|(si, ro)| (si.post(pid, s, sb), ro))
        } else {
            None
        };
        let seq = q.counters.sym;
        q.counters.sym += 1;
        let abort = self.comm.abort.clone();
        let o = direct_reduce::sym_post(
            board,
            l.nranks,
            l.rank,
            seq,
            mine,
            Some(std::time::Instant::now() + DIRECT_POST_TIMEOUT),
            &|| abort.load(std::sync::atomic::Ordering::Relaxed),
        )?;
        self.sym_post = Some((seq, o));
        Ok(())
    }

    /// Posts the group's direct transfers (host only: no stream work, no wait for a peer's
    /// call, so every communicator of a `-g N` group posts before any settles).
    fn post_direct(&mut self, q: &mut Queued) -> Result<()> {
        self.post_sym(q)?;
        let Some(p) = self.direct.take() else {
            return Ok(());
        };
        let eng = &*self.eng;
        let timeout = eng.tuning.post_timeout;
        let abort = self.comm.abort.clone();
        self.posting = Some(direct::post_group(
            &mut q.bufs,
            &p,
            eng.layout.rank,
            &mut q.counters,
            &|r| eng.inbox.of(r).map(|b| b as &dyn rendezvous::Words),
            Some(std::time::Instant::now() + timeout),
            &|| abort.load(std::sync::atomic::Ordering::Relaxed),
            eng.layout.host.as_ref(),
            &|| self.host_paused(),
        )?);
        Ok(())
    }

    /// Whether a transfer the host path would take goes without it: while the GPU is held at
    /// its power or thermal limit (see [`IpcEngine::host_limits`]).
    fn host_paused(&self) -> bool {
        let eng = &*self.eng;
        let Some((clocks, watch)) = &eng.host_limits else {
            return false;
        };
        let paused = watch.limited(std::time::Instant::now(), || {
            clocks.power_or_thermal_limited()
        });
        if paused {
            eng.host_skipped.fetch_add(1, Ordering::Relaxed);
        }
        paused
    }

    /// Orders the user's streams, then the direct transfers' local copies and flags, then the
    /// low-latency kernel or the fork and local copies.
    fn begin(&mut self, q: &mut Queued, wait: Deadlines) -> Result<()> {
        let eng = &*self.eng;
        let first = &self.user[0];
        let raw = first.raw() as usize;
        if q.last_stream.is_some_and(|s| s != raw) {
            first.wait_event(&eng.last_done).map_err(cuda_err)?;
        }
        for s in &self.user[1..] {
            let ev = plain_event(&eng.ctx)?;
            ev.record(s).map_err(cuda_err)?;
            first.wait_event(&ev).map_err(cuda_err)?;
        }
        // How long the direct paths wait for peers' posts: longer while this GPU is busy.
        let busy = || !eng.last_done.query().unwrap_or(true);
        // Transfers and direct reductions below this never hold the host for a peer's call.
        let wait_min_bytes = eng.tuning.wait_min_bytes;
        let push_wait = rendezvous::PushWait {
            soft: wait.soft,
            hard: wait.hard,
            busy: &busy,
            futile: &|| false,
        };
        let abort = self.comm.abort.clone();
        let stop = || abort.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(posting) = self.posting.take() {
            let (plan, err) = posting.settle(
                &mut q.bufs,
                eng.layout.rank,
                &|r| eng.inbox.of(r).map(|b| b as &dyn rendezvous::Words),
                direct::SettleHow {
                    wait: push_wait,
                    // Lanes only pay off when copies can overlap; a local setting (each rank
                    // orders its own streams).
                    single_max: eng.tuning.single_max,
                    late: eng.tuning.push_wait_adapt.then_some(&mut q.push_late),
                    wait_min_bytes,
                    local_split: direct::LocalSplit {
                        lanes: eng.tuning.local_copy_lanes,
                        ..direct::LocalSplit::default()
                    },
                    exchange_until: wait.exchange.filter(|_| self.point_to_point),
                    // Sends and receives only: beside an all-to-all's or all-gather's own
                    // block (a kernel of this process on its GPU) the peer process's copy on
                    // that GPU slowed both (2026-11-23: 256 MiB all-to-all 370 -> 510 us).
                    remote_min: eng
                        .remote
                        .as_ref()
                        .filter(|_| self.point_to_point)
                        .map(|r| r.min_bytes),
                    host: eng.layout.host.as_ref().map(|h| {
                        let c = &mut q.counters;
                        (h, &mut c.host_out, &mut c.host_in)
                    }),
                },
                &stop,
            )?;
            q.sent_direct += plan
                .transfers
                .iter()
                .filter(|t| t.outgoing)
                .map(|t| t.bytes as u64)
                .sum::<u64>();
            q.sent_bounced += plan.bounced as u64;
            q.sent_host += plan
                .transfers
                .iter()
                .filter(|t| t.outgoing)
                .filter_map(|t| t.host.map(|h| t.bytes.saturating_sub(h.nvl) as u64))
                .sum::<u64>();
            q.push_waits.add(&plan.waits);
            self.plan = plan;
            self.direct_err = err;
            let mut cuda = CudaDevice::new(eng, first);
            let mut dev = Batched::new(&mut cuda);
            self.plan.begin(&eng.layout, &mut dev)?;
            dev.flush()?;
        }
        if let Some((seq, o)) = self.sym_post.take() {
            let l = &eng.layout;
            // Below CCL_IPC_PUSH_WAIT_MIN_BYTES the host does not wait for the other ranks'
            // posts either: all go staged unless every rank had already posted.
            let bytes = self
                .sym
                .map_or(0, |t| t.count.saturating_mul(t.dtype.size()));
            let now = std::time::Instant::now();
            // Two ranks may leave the reduction to whoever posts second instead of waiting
            // (CCL_IPC_DIRECT_REDUCE_TAKEOVER_US): the host never waits longer than that. From
            // CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES on the first poster waits as long as
            // any reduction would and only then leaves it to the peer, rather than going
            // staged (a pipeline's tied-embedding all-reduce of 131 MB: the stages reach it
            // milliseconds apart, and staged it took 786 us of host time on the late one).
            let takeover = eng.takeover;
            let quick = takeover.filter(|_| bytes < eng.tuning.takeover_max_bytes);
            let sym_wait = if let Some(d) = quick {
                rendezvous::PushWait {
                    soft: now + d,
                    hard: now + d,
                    ..push_wait
                }
            } else if bytes < wait_min_bytes {
                rendezvous::PushWait {
                    soft: now,
                    hard: now,
                    ..push_wait
                }
            } else {
                push_wait
            };
            let o = match o {
                direct_reduce::SymOutcome::Pending => direct_reduce::sym_settle(
                    eng.inbox
                        .of(0)
                        .ok_or_else(|| Error::internal("cuda-ipc: no inbox"))?,
                    l.nranks,
                    seq,
                    sym_wait,
                    takeover.is_some(),
                    &stop,
                )?,
                o => o,
            };
            q.sym_waited += now.elapsed();
            q.sym_outcomes[match &o {
                direct_reduce::SymOutcome::Direct(_) => 0,
                direct_reduce::SymOutcome::Active(_) => 1,
                direct_reduce::SymOutcome::Passive => 2,
                _ => 3,
            }] += 1;
            // Pieces of the slice: each is reduced, then pushed while the next reduces (a
            // local setting: pushes and kernels are this rank's own).
            let piece = eng.tuning.reduce_piece;
            let bufs = &mut q.bufs;
            let mut addr = |_: usize, p: &rendezvous::Post| rendezvous::Reach::resolve(bufs, p);
            let plan = match self.sym {
                Some(t) => direct_reduce::SymPlan::from_outcome(
                    o, &t, l.rank, l.nranks, seq, &mut addr, piece,
                )?,
                None => None,
            }
            .map(|mut p| {
                p.multi = eng.reduce_n.load(Ordering::Relaxed);
                p
            });
            if let (Some(plan), Some(t)) = (plan, self.sym) {
                q.sent_direct += match plan.role {
                    direct_reduce::SymRole::Shared => plan.count * (l.nranks - 1),
                    direct_reduce::SymRole::Active { .. } => plan.total,
                    direct_reduce::SymRole::Passive { .. } => 0,
                } as u64
                    * t.dtype.size() as u64;
                // Nothing goes through the slots: drop the staged program.
                self.em = Chain::new(Vec::new());
                self.staged_tx = 0;
                let mut cuda = CudaDevice::new(eng, first);
                let mut dev = Batched::new(&mut cuda);
                plan.begin(l, &mut dev)?;
                dev.flush()?;
                self.sym_plan = Some(plan);
            }
        }
        if let Some(ll) = &self.ll {
            q.ll_seq = q.ll_seq.wrapping_add(1);
            let l = &eng.layout;
            let (areas, n, me) = (eng.ll_areas.ptr(), l.nranks as u32, l.rank as u32);
            // SAFETY: the buffers hold what the task says (validated at enqueue) and fit the
            // areas (checked when choosing this path); every rank launches the same operation
            // with the same sequence number.
            unsafe {
                match ll {
                    LowLatency::AllReduce(t) | LowLatency::ReduceScatter(t) => {
                        eng.kernels.ll_all_reduce(
                            first,
                            t.dtype,
                            t.red.arithmetic(),
                            t.recv as u64,
                            t.send as u64,
                            t.count,
                            areas,
                            n,
                            me,
                            q.ll_seq,
                            eng.ll_max,
                            matches!(ll, LowLatency::ReduceScatter(_)),
                        )
                    }
                    LowLatency::Exchange(x) => eng
                        .kernels
                        .ll_exchange(first, x, areas, n, me, q.ll_seq, eng.ll_max),
                }
            }
            .map_err(cuda_err)?;
        }
        if !self.small.is_empty() {
            let l = &eng.layout;
            for launch in small_p2p::plan(&self.small, &mut q.small) {
                let x = &launch.x;
                q.sent_small += x.sbytes[..x.nsend as usize].iter().sum::<u64>();
                // SAFETY: the buffers hold what the tasks say (validated at enqueue), each at
                // most a slot; the areas' point-to-point words were zeroed at setup; each
                // pair's numbers and the ticket go on in this communicator's call order (under
                // the queue lock), as the peers' do for the matching receives and sends.
                unsafe {
                    eng.kernels.ll_p2p(
                        first,
                        x,
                        eng.ll_areas.ptr(),
                        l.rank as u32,
                        l.nranks as u32,
                        launch.ticket_base,
                        eng.small_mismatch.device_ptr(),
                    )
                }
                .map_err(cuda_err)?;
            }
        }
        let mut cuda = CudaDevice::new(eng, first);
        let mut dev = Batched::new(&mut cuda);
        self.em.begin(&eng.layout, &mut dev)?;
        dev.flush()
    }

    fn emit_until(&mut self, until: u64, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let mut cuda = CudaDevice::new(eng, &self.user[0]);
        let mut dev = Batched::new(&mut cuda);
        self.em
            .emit_until(until, &eng.layout, &mut q.counters, &mut dev)?;
        dev.flush()
    }

    /// Joins the lanes and the user's other streams back.
    fn end(&mut self, q: &mut Queued) -> Result<()> {
        let eng = &*self.eng;
        let first = &self.user[0];
        let mut cuda = CudaDevice::new(eng, first);
        let mut dev = Batched::new(&mut cuda);
        self.em.end(&eng.layout, &mut dev, &mut q.counters)?;
        self.plan.end(&eng.layout, &mut dev)?;
        if let Some(p) = &self.sym_plan {
            p.end(&eng.layout, &mut dev)?;
        }
        dev.flush()?;
        q.last_stream = Some(first.raw() as usize);
        q.ops += 1;
        q.sent_staged += self.staged_tx as u64;
        eng.last_done.record(first).map_err(cuda_err)?;
        if self.user.len() > 1 {
            let ev = plain_event(&eng.ctx)?;
            ev.record(first).map_err(cuda_err)?;
            for s in &self.user[1..] {
                s.wait_event(&ev).map_err(cuda_err)?;
            }
        }
        Ok(())
    }
}

/// Host time spent in [`submit`], per group.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct QueueTimes {
    groups: u64,
    total: Duration,
    longest: Duration,
    over_100us: u64,
    over_1ms: u64,
}

impl QueueTimes {
    fn add(&mut self, d: Duration) {
        self.groups += 1;
        self.total += d;
        self.longest = self.longest.max(d);
        self.over_100us += u64::from(d > Duration::from_micros(100));
        self.over_1ms += u64::from(d > Duration::from_millis(1));
    }
}

/// A small collective done by one low-latency kernel per rank instead of transfers.
#[derive(Debug, Clone, Copy)]
enum LowLatency {
    AllReduce(Task),
    ReduceScatter(Task),
    Exchange(LlTransfers),
}

/// The low-latency kernel, or else a direct reduction (`direct_reduce` bytes and up, 0: never),
/// for a staged group. Never both: the low-latency kernel writes the result itself, and a
/// direct reduction over it would reduce an in-place result a second time.
fn reduction_paths(
    tasks: &[Task],
    rank: usize,
    n: usize,
    ll_max: usize,
    direct_reduce: usize,
) -> Result<(Option<LowLatency>, Option<Task>)> {
    let ll = low_latency(tasks, rank, n, ll_max)?;
    let sym = if ll.is_none() && direct_reduce > 0 {
        direct_reduce::candidate(
            tasks,
            n,
            direct_reduce,
            direct_reduce.max(direct_reduce::REDUCE_MIN_BYTES),
        )
    } else {
        None
    };
    Ok((ll, sym))
}

/// The settings the per-operation path needs, read from the parameters once per engine (a
/// parameter read takes a lock, a map lookup and a string copy; several per operation added
/// up in host-bound loops).
#[derive(Debug, Clone, Copy, Default)]
struct Tuning {
    /// How long a direct post waits for ring room (`CCL_TIMEOUT_S`, else a default).
    post_timeout: Duration,
    /// `CCL_IPC_PUSH_WAIT_MIN_BYTES`.
    wait_min_bytes: usize,
    /// `CCL_IPC_DIRECT_SINGLE_BYTES`.
    single_max: usize,
    /// `CCL_IPC_PUSH_WAIT_ADAPT`.
    push_wait_adapt: bool,
    /// `CCL_IPC_LOCAL_COPY_LANES` (1..=8).
    local_copy_lanes: usize,
    /// `CCL_IPC_DIRECT_REDUCE_PIECE_BYTES`.
    reduce_piece: usize,
    /// `CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES`: reductions this large wait as long as any
    /// before taking over (there one GPU doing both halves costs more than a short host wait).
    takeover_max_bytes: usize,
    /// `CCL_IPC_PUSH_WAIT_US` and `CCL_IPC_PUSH_WAIT_BUSY_US`.
    push_wait: Duration,
    push_wait_busy: Duration,
    /// `CCL_IPC_EXCHANGE_WAIT_US` (None: 0, off).
    exchange_wait: Option<Duration>,
}

impl Tuning {
    fn from_config(cfg: &P2pConfig) -> Tuning {
        let us = |v: i64| Duration::from_micros(v.clamp(0, 10_000_000) as u64);
        Tuning {
            post_timeout: match cfg.timeout_s {
                s if s > 0 => Duration::from_secs(s as u64),
                _ => DIRECT_POST_TIMEOUT,
            },
            wait_min_bytes: cfg.push_wait_min_bytes.max(0) as usize,
            single_max: cfg.direct_single_bytes.max(0) as usize,
            push_wait_adapt: cfg.push_wait_adapt,
            local_copy_lanes: cfg.local_copy_lanes.clamp(1, 8) as usize,
            reduce_piece: cfg.direct_reduce_piece_bytes.max(1) as usize,
            takeover_max_bytes: cfg.direct_reduce_takeover_max_bytes.max(0) as usize,
            push_wait: us(cfg.push_wait_us),
            push_wait_busy: us(cfg.push_wait_busy_us),
            exchange_wait: Some(us(cfg.exchange_wait_us)).filter(|d| !d.is_zero()),
        }
    }
}

/// How long one call's direct transfers wait for their peers' posts.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// `CCL_IPC_PUSH_WAIT_US` from the call...
    soft: std::time::Instant,
    /// ...and `CCL_IPC_PUSH_WAIT_BUSY_US` while this GPU is busy.
    hard: std::time::Instant,
    /// `CCL_IPC_EXCHANGE_WAIT_US`: sends to a peer the group also receives from.
    exchange: Option<std::time::Instant>,
}

/// Which long waits run as the wait kernel (`CCL_IPC_WAIT_KERNEL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct WaitKernel {
    transfers: bool,
    reductions: bool,
}

impl WaitKernel {
    fn covers(self, of: LongWait) -> bool {
        match of {
            LongWait::Transfer => self.transfers,
            LongWait::Reduction => self.reductions,
        }
    }

    fn any(self) -> bool {
        self.transfers || self.reductions
    }
}

/// `CCL_IPC_WAIT_KERNEL`: "1" both kinds of long wait, "transfers" only direct transfers';
/// with an "auto" prefix ("auto", "auto-transfers") only where every stream shares one
/// hardware queue (`CUDA_DEVICE_MAX_CONNECTIONS=1`); anything else off.
/// `CCL_IPC_DIRECT_REDUCE_TAKEOVER_US`: a number of microseconds (negative: off), or `auto`
/// / `auto-US` (on, waiting 0 or US microseconds, when `CUDA_DEVICE_MAX_CONNECTIONS=1`, as
/// Megatron-LM's host-bound training sets it; off otherwise).
fn takeover_wait(setting: &str, max_connections: Option<&str>) -> Option<Duration> {
    let s = setting.trim();
    let us = match s.strip_prefix("auto") {
        Some(rest) => {
            if !max_connections.is_some_and(|v| v.trim() == "1") {
                return None;
            }
            match rest.trim_start_matches('-') {
                "" => 0,
                n => n.parse::<i64>().ok()?,
            }
        }
        None => s.parse::<i64>().ok()?,
    };
    (us >= 0).then(|| Duration::from_micros(us.min(10_000_000) as u64))
}

fn wants_wait_kernel(setting: &str, max_connections: Option<&str>) -> WaitKernel {
    let s = setting.trim();
    let (auto, what) = match s.strip_prefix("auto") {
        Some(rest) => (true, rest.trim_start_matches('-')),
        None => (false, s),
    };
    if auto && !max_connections.is_some_and(|v| v.trim() == "1") {
        return WaitKernel::default();
    }
    match what {
        "" if auto => WaitKernel {
            transfers: true,
            reductions: true,
        },
        "transfers" => WaitKernel {
            transfers: true,
            reductions: false,
        },
        w if w.parse::<i64>().is_ok_and(|v| v != 0) => WaitKernel {
            transfers: true,
            reductions: true,
        },
        _ => WaitKernel::default(),
    }
}

/// Whether a group is one data collective small enough (`max` bytes, 0: never) for the
/// low-latency kernel rather than copy engines: at 8 B the copy engines' driver calls cost 2-3x
/// NCCL's one kernel. Depends only on what every rank sees alike.
fn small_exchange(tasks: &[Task], n: usize, max: usize) -> bool {
    let [t] = tasks else { return false };
    matches!(
        t.kind,
        TaskKind::Coll(
            Collective::AllGather
                | Collective::AlltoAll
                | Collective::Broadcast { .. }
                | Collective::Gather { .. }
                | Collective::Scatter { .. }
        )
    ) && (2..=LL_EXCHANGE_MAX_RANKS).contains(&n)
        && t.count.saturating_mul(t.dtype.size()) <= max
}

/// Chooses the low-latency kernel for a group of one small collective. The choice depends
/// only on what every rank sees alike (kind, count, type, reduction, ranks, settings).
fn low_latency(tasks: &[Task], rank: usize, n: usize, ll_max: usize) -> Result<Option<LowLatency>> {
    let [t] = tasks else { return Ok(None) };
    let bytes = t.count.saturating_mul(t.dtype.size());
    if n < 2 || t.count == 0 || bytes > ll_max {
        return Ok(None);
    }
    match t.kind {
        TaskKind::Coll(Collective::AllReduce) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::AllReduce(*t)))
        }
        TaskKind::Coll(Collective::ReduceScatter) if matches!(t.red, Reduction::Plain(_)) => {
            Ok(Some(LowLatency::ReduceScatter(*t)))
        }
        TaskKind::Coll(
            Collective::AllGather
            | Collective::AlltoAll
            | Collective::Broadcast { .. }
            | Collective::Gather { .. }
            | Collective::Scatter { .. },
        ) if n <= LL_EXCHANGE_MAX_RANKS => {
            let p = lower(tasks, rank, n, usize::MAX, 0)?;
            let mut x = LlTransfers::default();
            for q in 0..n {
                if let [s] = p.tx[q].as_slice() {
                    x.src[q] = s.src;
                    x.sbytes[q] = s.bytes as u64;
                }
                if let [r] = p.rx[q].as_slice() {
                    let Act::Copy { dst } = r.act else {
                        return Ok(None);
                    };
                    x.dst[q] = dst;
                    x.rbytes[q] = r.bytes as u64;
                }
            }
            if let [(dst, src, b)] = p.locals.as_slice() {
                x.src[rank] = *src;
                x.dst[rank] = *dst;
                x.sbytes[rank] = *b as u64;
            }
            Ok(Some(LowLatency::Exchange(x)))
        }
        _ => Ok(None),
    }
}

/// The kernels a lowered group launches.
fn kernels_needed<'a>(
    programs: impl Iterator<Item = &'a Program>,
    ll: Option<&LowLatency>,
) -> Vec<(DataType, KernelOp)> {
    let mut v = Vec::new();
    for p in programs {
        kernels_of(p, &mut v);
    }
    match ll {
        Some(LowLatency::AllReduce(t) | LowLatency::ReduceScatter(t)) => {
            v.push((t.dtype, KernelOp::LlAllReduce(t.red.arithmetic().into())))
        }
        Some(LowLatency::Exchange(_)) => v.push((DataType::Uint8, KernelOp::LlExchange)),
        None => {}
    }
    let mut unique = Vec::with_capacity(v.len());
    for k in v {
        if !unique.contains(&k) {
            unique.push(k);
        }
    }
    unique
}

/// The reduction kernels one lowered program launches.
fn kernels_of(p: &Program, v: &mut Vec<(DataType, KernelOp)>) {
    for k in &p.local_kernels {
        if let Kernel::PreMul { dtype, .. } = k {
            v.push((*dtype, KernelOp::PreMul));
        }
    }
    for tg in &p.targets {
        match tg.scalar {
            Some(_) => {
                v.push((tg.dtype, KernelOp::PreMul));
                v.push((tg.dtype, KernelOp::PreMulAdd));
                v.push((tg.dtype, KernelOp::reduce(ReduceKind::Sum)));
            }
            None => v.push((tg.dtype, KernelOp::reduce(tg.arith))),
        }
        if tg.postdiv.is_some() {
            v.push((tg.dtype, KernelOp::DivInt));
        }
    }
}

/// Lowers one communicator's group and prepares its emission.
fn prepare(
    comm: &CommCtx,
    eng: Arc<IpcEngine>,
    tasks: &[Task],
    sig: Option<CallSig>,
) -> Result<Queueing> {
    let user = streams_of(&eng.ctx, tasks);
    if user.is_empty() {
        return Err(Error::internal("cuda-ipc: a group without operations"));
    }
    let l = &eng.layout;
    let tiny = small_exchange(tasks, l.nranks, eng.ll_exchange_max);
    let (small, tasks): (Vec<Task>, Vec<Task>) = tasks
        .iter()
        .partition(|t| small_p2p::is_small(t, l.rank, eng.ll_exchange_max));
    let (direct_tasks, staged): (Vec<Task>, Vec<Task>) = tasks
        .iter()
        .partition(|t| eng.direct && !tiny && direct::goes_direct(t.kind));
    let point_to_point = direct_tasks
        .iter()
        .all(|t| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. }));
    let direct = if direct_tasks.is_empty() {
        None
    } else {
        Some(lower(&direct_tasks, l.rank, l.nranks, usize::MAX, 0)?)
    };
    let tasks = &staged[..];
    let (ll, sym) = reduction_paths(
        tasks,
        l.rank,
        l.nranks,
        eng.ll_max,
        if eng.direct && direct.is_none() {
            eng.direct_reduce
        } else {
            0
        },
    )?;
    let lowered: &[Task] = if ll.is_some() { &[] } else { tasks };
    let em = Chain::lower(lowered, l.rank, l.nranks, l.chunk, eng.single_stream_max)?;
    // Load every kernel now: loading a module can wait for the whole device, which must not
    // happen once this device's streams wait on a peer whose work is queued after ours (one
    // thread driving several GPUs).
    for (dt, op) in kernels_needed(em.programs(), ll.as_ref()) {
        eng.kernels.prepare(dt, op).map_err(cuda_err)?;
    }
    if let Some(t) = sym.filter(|_| eng.reduce_n.load(Ordering::Relaxed)) {
        let op = KernelOp::ReduceN(t.red.arithmetic().into(), l.nranks as u8);
        if let Err(e) = eng.kernels.prepare(t.dtype, op) {
            // Not fatal: the chain of two-input kernels computes the same bits.
            eng.reduce_n.store(false, Ordering::Relaxed);
            tracing::warn!(
                "rank {}: cuda-ipc could not load {op:?}; direct reductions use two-input kernels: {e}",
                l.rank
            );
        }
    }
    if !small.is_empty() {
        eng.kernels
            .prepare(DataType::Uint8, KernelOp::LlP2p)
            .map_err(cuda_err)?;
    }
    let staged_tx = em.sent_bytes();
    Ok(Queueing {
        comm: comm.clone(),
        eng,
        user,
        em,
        ll,
        small,
        sig,
        direct,
        point_to_point,
        staged_tx,
        posting: None,
        plan: direct::Plan::default(),
        direct_err: None,
        sym,
        sym_post: None,
        sym_plan: None,
    })
}

/// Queues the groups of several communicators (one per GPU of a `-g N` process, say). A
/// group with a relayed broadcast ([`relay`]) goes in phases, each queued for every
/// communicator before the next, so a stream only ever waits on work already queued.
pub fn submit(groups: Vec<(CommCtx, Arc<IpcEngine>, Vec<Task>)>) -> Result<()> {
    let mut phased = Vec::with_capacity(groups.len());
    for (comm, eng, tasks) in groups {
        let (rank, n) = (eng.layout.rank, eng.layout.nranks);
        // The call as the application made it is what peers compare.
        let sig = CallSig::of(&tasks);
        let phases = if eng.direct {
            eng.relay.phases(tasks, rank, n)
        } else {
            vec![tasks]
        };
        phased.push((comm, eng, sig, phases));
    }
    let most = phased.iter().map(|g| g.3.len()).max().unwrap_or(0);
    for p in 0..most {
        let mut groups = Vec::with_capacity(phased.len());
        for (comm, eng, sig, phases) in &mut phased {
            match phases.get_mut(p).map(std::mem::take) {
                Some(tasks) if !tasks.is_empty() => {
                    groups.push((comm.clone(), eng.clone(), tasks, sig.take()))
                }
                _ => {}
            }
        }
        if !groups.is_empty() {
            submit_phase(groups)?;
        }
    }
    Ok(())
}

/// Queues one phase of the groups, interleaved by logical time, so no stream runs far ahead
/// of the peers that release it and the host never blocks on a full stream queue that only a
/// later call would drain.
/// One communicator's part of a phase: its tasks and, in its first phase, the signature peers
/// compare.
type PhaseGroup = (CommCtx, Arc<IpcEngine>, Vec<Task>, Option<CallSig>);

fn submit_phase(groups: Vec<PhaseGroup>) -> Result<()> {
    let started = std::time::Instant::now();
    let mut qs: Vec<Queueing> = Vec::with_capacity(groups.len());
    for (comm, eng, tasks, sig) in groups {
        qs.push(prepare(&comm, eng, &tasks, sig)?);
    }
    // From here on sequence numbers are taken: a failure leaves peers waiting on chunks that
    // will not come, so it poisons the communicator.
    let engines: Vec<Arc<IpcEngine>> = qs.iter().map(|q| q.eng.clone()).collect();
    let mut guards: Vec<_> = engines.iter().map(|e| e.queued.lock()).collect();
    let poison = |comm: &CommCtx, e: Error| {
        comm.set_async_error(&e);
        e
    };
    // Post and compare the collectives before anything is queued: a mismatch fails the group
    // with nothing queued (every communicator of it, since their counts moved on), and the
    // peers see it through their async error.
    let mut mismatch = None;
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        if let Some(sig) = q.sig {
            let seq = g.calls.push(sig);
            q.eng.board.post(seq, sig);
            mismatch = mismatch.or_else(|| q.eng.board.check(&g.calls.recent));
        }
    }
    if let Some(e) = mismatch {
        for q in &qs {
            q.comm.set_async_error(&e);
        }
        return Err(e);
    }
    let locked = started.elapsed();
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.post_direct(g).map_err(|e| poison(&q.comm, e))?;
    }
    let now = std::time::Instant::now();
    let posted = started.elapsed();
    let t = qs.first().map_or_else(Tuning::default, |q| q.eng.tuning);
    let wait = Deadlines {
        soft: now + t.push_wait,
        hard: now + t.push_wait_busy,
        exchange: t.exchange_wait.map(|d| now + d),
    };
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.begin(g, wait).map_err(|e| poison(&q.comm, e))?;
    }
    let begun = started.elapsed();
    let horizon = qs.iter().map(|q| q.em.horizon()).max().unwrap_or(0);
    // Interleave in steps of a few logical times: small enough to bound each stream's queue,
    // large enough to keep the per-step overhead negligible.
    const STEP: u64 = 4;
    let mut t = 0;
    while t < horizon {
        t = (t + STEP).min(horizon);
        for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
            q.emit_until(t, g).map_err(|e| poison(&q.comm, e))?;
        }
    }
    for (q, g) in qs.iter_mut().zip(guards.iter_mut()) {
        q.end(g).map_err(|e| poison(&q.comm, e))?;
    }
    let took = started.elapsed();
    for g in guards.iter_mut() {
        g.queueing.add(took);
    }
    // Where a group's host time goes (NCCL_DEBUG=TRACE): a host-bound loop beside a compute
    // thread showed 0.67 ms per send/receive call with little of it in push waits.
    if tracing::enabled!(tracing::Level::TRACE) {
        let us = |d: std::time::Duration| d.as_micros();
        tracing::trace!(
            "cuda-ipc group queued in {} us: prepared and locked {}, posted {}, settled and \
             begun {}, emitted and ended {}",
            us(took),
            us(locked),
            us(posted - locked),
            us(begun - posted),
            us(took - begun)
        );
    }
    match qs
        .iter_mut()
        .find_map(|q| q.direct_err.take().map(|e| (q, e)))
    {
        Some((q, e)) => Err(poison(&q.comm, e)),
        None => Ok(()),
    }
}

/// For `ncclCommGetAsyncError`: compares this rank's recent collectives with what its peers
/// posted, and looks for queued GPU work that cannot finish; either becomes the communicator's
/// async error. Skipped while another thread is queueing on the communicator.
pub fn check_health(comm: &CommCtx, eng: &IpcEngine) {
    // The caller may be capturing a CUDA graph in global mode (PyTorch polls the async error
    // of nonblocking communicators between captured calls): the event query below would
    // break its capture.
    let _relaxed = cuda::RelaxedCapture::new();
    let Some(q) = eng.queued.try_lock() else {
        return;
    };
    let ops = q.ops;
    if let Some(e) = small_mismatch(eng) {
        drop(q);
        comm.set_async_error(&e);
        return;
    }
    if let Some(e) = eng.board.check(&q.calls.recent) {
        drop(q);
        comm.set_async_error(&e);
        return;
    }
    drop(q);
    check_stuck(comm, eng, ops);
}

/// A small receive whose size differed from its send's, as the point-to-point kernel reported.
fn small_mismatch(eng: &IpcEngine) -> Option<Error> {
    let v = eng.small_mismatch.load();
    (v != 0).then(|| {
        Error::invalid_usage(format!(
            "rank {}: a receive of at most {} bytes from rank {} did not match the size of its \
             send (ncclSend and ncclRecv counts x type sizes must agree)",
            eng.layout.rank,
            small_p2p::max_bytes(eng.ll_exchange_max),
            v - 1
        ))
    })
}

/// With GPU work still queued: a peer that died, left or failed means that work may never
/// finish, and `CCL_TIMEOUT_S` without any operation finishing is a failure too. Both become
/// the async error (PyTorch's watchdog then aborts), instead of a hang with no word.
fn check_stuck(comm: &CommCtx, eng: &IpcEngine, ops: u64) {
    let pending = !eng.last_done.query().unwrap_or(true);
    let mut watch = eng.watch.lock();
    if !pending {
        *watch = Watch::default();
        return;
    }
    let now = std::time::Instant::now();
    if let Some(health) = comm.control.poll_peers() {
        let failed = match health {
            PeerHealth::Ok => None,
            // A peer that left in order (or died) may have delivered all this rank still
            // needs: fail only if the work stays queued a while after.
            PeerHealth::NeededPeerLeft(e) => {
                let first = *watch.peer_left.get_or_insert(now);
                (now.duration_since(first) > PEER_LEFT_GRACE).then_some(e)
            }
            PeerHealth::Failed(e) => Some(e),
        };
        if let Some(e) = failed {
            comm.set_async_error(&e.context(format!(
                "rank {}: GPU operations are still queued",
                comm.rank()
            )));
            return;
        }
    }
    let since = match watch.pending {
        Some((t, seen)) if seen == ops => t,
        _ => {
            watch.pending = Some((now, ops));
            now
        }
    };
    let limit = eng.cfg.timeout_s;
    if limit > 0 && now.duration_since(since) > Duration::from_secs(limit as u64) {
        comm.set_async_error(&Error::system(format!(
            "rank {}: GPU operations queued on this communicator made no progress for {limit} s \
             (CCL_TIMEOUT_S); {ops} queued so far",
            comm.rank()
        )));
    }
}

/// Waits until the engine's streams have run everything queued (finalize), giving up when the
/// communicator is aborted.
pub fn wait_idle(eng: &IpcEngine, abort: &AtomicBool) -> Result<()> {
    for s in eng.tx.iter().chain(&eng.rx) {
        while !s.query().map_err(cuda_err)? {
            if abort.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(Error::system("communicator aborted"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// Releases the engine. After an abort its streams may wait forever on peers that are gone,
/// and peers may still write into its memory: then it is leaked rather than freed.
pub fn shutdown(eng: Arc<IpcEngine>, aborted: bool) {
    if let Some(q) = eng.queued.try_lock() {
        tracing::info!(
            "rank {}: cuda-ipc sent {} bytes straight between user buffers, {} of them through \
             the bounce buffer and {} through the host path beside NVLink, {} bytes through \
             receive slots and {} bytes as small sends; {} transfers went without the host path \
             while the GPU was at its power or thermal limit",
            eng.layout.rank,
            q.sent_direct,
            q.sent_bounced,
            q.sent_host,
            q.sent_staged,
            q.sent_small,
            eng.host_skipped.load(Ordering::Relaxed)
        );
        if let Some(r) = &eng.remote {
            tracing::info!(
                "rank {}: cuda-ipc had the peer GPU's copy engine push {} of the transfers it \
                 pulled ({} bytes)",
                eng.layout.rank,
                r.pulls.load(Ordering::Relaxed),
                r.bytes.load(Ordering::Relaxed)
            );
        }
        let t = &q.queueing;
        tracing::info!(
            "rank {}: cuda-ipc queued {} groups in {:.3} ms of host time ({} over 100 us, {} \
             over 1 ms, {} us at most)",
            eng.layout.rank,
            t.groups,
            t.total.as_secs_f64() * 1e3,
            t.over_100us,
            t.over_1ms,
            t.longest.as_micros()
        );
        let w = &q.push_waits;
        if w.pushed + w.left_to_pull > 0 {
            tracing::info!(
                "rank {}: {} sends posted before their receives: {} pushed after waiting, {} \
                 left to the receiver to pull; the host waited {:.3} ms in all, {} us at most \
                 (CCL_IPC_PUSH_WAIT_US, CCL_IPC_PUSH_WAIT_BUSY_US)",
                eng.layout.rank,
                w.pushed + w.left_to_pull,
                w.pushed,
                w.left_to_pull,
                w.waited.as_secs_f64() * 1e3,
                w.longest.as_micros()
            );
        }
        let [shared, alone, passive, staged] = q.sym_outcomes;
        if shared + alone + passive + staged > 0 {
            tracing::info!(
                "rank {}: direct reductions: {shared} shared, {alone} done alone, {passive} left \
                 to the peer, {staged} staged after the rendezvous; the host waited {:.3} ms for \
                 the other ranks' posts (CCL_IPC_DIRECT_REDUCE_TAKEOVER_US)",
                eng.layout.rank,
                q.sym_waited.as_secs_f64() * 1e3
            );
        }
    }
    // Graphs that captured groups on the direct paths keep the flag area's addresses (ours
    // and, mapped, the peers'): it stays for as long as the process may replay them.
    if aborted || eng.captured.load(Ordering::Relaxed) > 0 {
        std::mem::forget(eng);
    }
}

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

impl std::fmt::Debug for IpcEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IpcEngine(rank {} of {}, {} slots of {} bytes)",
            self.layout.rank, self.layout.nranks, self.layout.slots, self.layout.chunk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::task::float_sum as task;
    use ccl_collectives::Collective;

    /// `auto` takes host-only exactly where NCCL would take shared memory between two GPUs;
    /// `1` and `0` force it on (two ranks only) or off.
    #[test]
    fn host_only_where_peer_to_peer_is_off_and_shared_memory_on() {
        use PeerReach::*;
        let r = |s: &str, n, p2p_off, shm_off| {
            PeerReach::from_settings(forced_host_only(s), n, p2p_off, shm_off)
        };
        assert_eq!(r("auto", 2, false, false), Mapped);
        assert_eq!(r("auto", 2, true, false), HostOnly);
        assert_eq!(r("", 2, true, false), HostOnly);
        assert_eq!(
            r("auto", 2, true, true),
            None,
            "NCCL_SHM_DISABLE: the network path"
        );
        assert_eq!(
            r("auto", 4, true, false),
            HostOnly,
            "more ranks: through the slots"
        );
        assert_eq!(r("auto", 1, true, false), None);
        assert_eq!(r("auto", 3, false, false), Mapped);
        assert_eq!(r("1", 2, false, false), HostOnly);
        assert_eq!(
            r("1", 2, true, true),
            HostOnly,
            "forced on over the shared-memory veto"
        );
        assert_eq!(r("1", 4, false, false), HostOnly);
        assert_eq!(r("0", 2, true, false), None);
        assert_eq!(r("0", 2, false, false), Mapped);
        assert_eq!(r(" 1 ", 2, true, false), HostOnly);
        assert_eq!(r("junk", 2, true, false), HostOnly, "unparsable: auto");
    }

    /// Peers whose memory cannot be mapped: host-only under `auto` (as NCCL falls back to shared
    /// memory), never when forced either way, nor against `NCCL_SHM_DISABLE`.
    #[test]
    fn unmappable_peers_fall_back_to_host_only_under_auto() {
        use PeerReach::*;
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 2, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 8, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only(""), 2, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 2, true),
            Option::None
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("0"), 2, false),
            Option::None
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("1"), 2, false),
            Option::None
        );
        assert_eq!(
            HostOnly.when_unmappable(forced_host_only("auto"), 2, false),
            Option::None
        );
        assert_eq!(
            None.when_unmappable(forced_host_only("auto"), 2, false),
            Option::None
        );
    }

    /// Only the lowest of several ranks sharing a GPU warns, and only below 32 queues (8 when
    /// unset or unreadable).
    #[test]
    fn ranks_sharing_a_gpu_are_warned_of_shared_queues() {
        assert!(warn_of_shared_queues(0, vec![0, 2], None));
        assert!(warn_of_shared_queues(0, vec![0, 1], Some("31")));
        assert!(warn_of_shared_queues(1, vec![1, 3], Some("junk")));
        assert!(!warn_of_shared_queues(2, vec![0, 2], None));
        assert!(!warn_of_shared_queues(0, vec![0, 1], Some("32")));
        assert!(!warn_of_shared_queues(0, vec![0], None));
    }

    /// Every rank's exchange table pairs up with its peers': what rank a sends to b is what b
    /// expects from a, and every rank's local copy is its own part.
    #[test]
    fn offers_round_trip_and_reject_other_lengths() {
        let mut o = Offer::none();
        o.capable = true;
        o.direct = true;
        o.dev = 3;
        o.chunk = 8 << 20;
        o.slots = 4;
        o.single_max = 1 << 19;
        o.ll_max = 1 << 20;
        o.direct_reduce = 2 << 20;
        o.probe_fd = 17;
        o.ll_exchange_max = 4096;
        o.flags_ptr = 0x7000_0000_1000;
        o.ll_handle = [7; IPC_HANDLE_SIZE];
        o.remote = true;
        o.bus_id = bus_id_bytes("0000:3B:00.0");
        o.relay_chunk = 1 << 24;
        o.host = HostRing {
            slot_bytes: 8 << 20,
            slots: 8,
        };
        let b = o.encode();
        assert_eq!(b.len(), OFFER_BYTES);
        let d = Offer::decode(&b).unwrap();
        assert!(d.capable && d.direct && d.remote);
        assert_eq!(&d.bus_id[..13], b"0000:3b:00.0\0", "lower case, NUL-padded");
        assert_eq!(d.relay_chunk, 1 << 24);
        assert_eq!(
            (
                d.dev,
                d.chunk,
                d.slots,
                d.single_max,
                d.ll_max,
                d.direct_reduce,
                d.flags_ptr
            ),
            (3, 8 << 20, 4, 1 << 19, 1 << 20, 2 << 20, 0x7000_0000_1000)
        );
        assert_eq!(d.ll_handle, [7; IPC_HANDLE_SIZE]);
        assert_eq!((d.probe_fd, d.ll_exchange_max), (17, 4096));
        assert_eq!(d.host, o.host);
        assert!(!d.host_only);
        assert!(Offer::decode(&b[..b.len() - 1]).is_none());
        // Host-only travels in the flag byte, beside the others.
        o.host_only = true;
        let d = Offer::decode(&o.encode()).unwrap();
        assert!(d.host_only && d.capable && d.direct && d.remote);
    }

    #[test]
    fn low_latency_exchange_tables_pair_up() {
        let colls = |n: usize| {
            [
                Collective::AllGather,
                Collective::AlltoAll,
                Collective::Broadcast { root: n - 1 },
                Collective::Gather { root: 0 },
                Collective::Scatter { root: n / 2 },
            ]
        };
        for n in 2..=LL_EXCHANGE_MAX_RANKS {
            for c in colls(n) {
                for count in [1usize, 5, 1000] {
                    let tables: Vec<LlTransfers> = (0..n)
                        .map(|r| {
                            let t = task(TaskKind::Coll(c), 0x1000_0000, 0x2000_0000, count);
                            match low_latency(&[t], r, n, 1 << 20).unwrap() {
                                Some(LowLatency::Exchange(x)) => x,
                                other => panic!("{c:?} n {n}: {other:?}"),
                            }
                        })
                        .collect();
                    for a in 0..n {
                        for b in 0..n {
                            if a != b {
                                assert_eq!(
                                    tables[a].sbytes[b], tables[b].rbytes[a],
                                    "{c:?} n {n} count {count}: {a} -> {b}"
                                );
                            }
                        }
                        for q in n..LL_EXCHANGE_MAX_RANKS {
                            assert_eq!((tables[a].sbytes[q], tables[a].rbytes[q]), (0, 0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn small_collectives_become_one_low_latency_kernel() {
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("all-gather of 16 bytes should be low-latency");
        };
        assert_eq!((x.src[0], x.sbytes[0]), (0x1000, 16));
        assert_eq!((x.dst[0], x.rbytes[0]), (0x8000, 16));
        assert_eq!((x.src[1], x.dst[1], x.sbytes[1]), (0x1000, 0x8010, 16));
        // In place: no local copy.
        let ag = task(TaskKind::Coll(Collective::AllGather), 0x8010, 0x8000, 4);
        let Some(LowLatency::Exchange(x)) = low_latency(&[ag], 1, 2, 1 << 20).unwrap() else {
            panic!("in-place all-gather should be low-latency");
        };
        assert_eq!(x.sbytes[1], 0);
        // Broadcast: the root only sends, the others only receive.
        let bc = task(
            TaskKind::Coll(Collective::Broadcast { root: 0 }),
            0x1000,
            0x2000,
            4,
        );
        let Some(LowLatency::Exchange(x)) = low_latency(&[bc], 1, 3, 1 << 20).unwrap() else {
            panic!("broadcast should be low-latency");
        };
        assert_eq!(x.sbytes, [0; 8]);
        assert_eq!((x.dst[0], x.rbytes[0], x.rbytes[2]), (0x2000, 16, 0));
        // Too big, reductions other than all-reduce, and groups stay on the copy engines.
        assert!(low_latency(&[ag], 1, 2, 8).unwrap().is_none());
        let rs = task(TaskKind::Coll(Collective::ReduceScatter), 0x1000, 0x8000, 4);
        assert!(matches!(
            low_latency(&[rs], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::ReduceScatter(_))
        ));
        let mut avg = rs;
        avg.red = Reduction::Avg;
        assert!(low_latency(&[avg], 0, 2, 1 << 20).unwrap().is_none());
        assert!(low_latency(&[ag, ag], 1, 2, 1 << 20).unwrap().is_none());
        let ar = task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, 4);
        assert!(matches!(
            low_latency(&[ar], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::AllReduce(_))
        ));
        // More ranks than the exchange table holds.
        assert!(low_latency(&[bc], 1, 9, 1 << 20).unwrap().is_none());
    }

    #[test]
    fn the_takeover_wait_follows_its_setting_and_the_hardware_queues() {
        let us = Duration::from_micros;
        assert_eq!(takeover_wait("-1", Some("1")), None);
        assert_eq!(takeover_wait("0", None), Some(us(0)));
        assert_eq!(takeover_wait(" 25 ", Some("8")), Some(us(25)));
        assert_eq!(takeover_wait("auto", Some("1")), Some(us(0)));
        assert_eq!(takeover_wait("auto", Some("8")), None);
        assert_eq!(takeover_wait("auto", None), None);
        assert_eq!(takeover_wait("auto-40", Some("1")), Some(us(40)));
        assert_eq!(takeover_wait("soon", Some("1")), None);
    }

    #[test]
    fn the_wait_kernel_follows_its_setting_and_the_hardware_queues() {
        let both = WaitKernel {
            transfers: true,
            reductions: true,
        };
        let transfers = WaitKernel {
            transfers: true,
            reductions: false,
        };
        let off = WaitKernel::default();
        assert_eq!(wants_wait_kernel("1", None), both);
        assert_eq!(wants_wait_kernel("0", Some("1")), off);
        assert_eq!(wants_wait_kernel("auto", Some("1")), both);
        assert_eq!(wants_wait_kernel("auto", Some("8")), off);
        assert_eq!(wants_wait_kernel("auto", None), off);
        assert_eq!(wants_wait_kernel("yes", Some("1")), off);
        assert_eq!(wants_wait_kernel("transfers", None), transfers);
        assert_eq!(wants_wait_kernel("auto-transfers", Some("1")), transfers);
        assert_eq!(wants_wait_kernel("auto-transfers", Some("8")), off);
        assert!(transfers.covers(LongWait::Transfer) && !transfers.covers(LongWait::Reduction));
    }

    /// A reduce-scatter whose slice fits the low-latency kernel while the whole input reaches
    /// the direct-reduction threshold (1 MiB slices of 2 ranks at 2 MiB) takes the kernel
    /// alone: both at once reduced an in-place result twice (found on the GPU machine).
    #[test]
    fn low_latency_and_direct_reduction_never_both() {
        let (ll_max, dr) = (1 << 20, 2 << 20);
        let rs = |count| {
            task(
                TaskKind::Coll(Collective::ReduceScatter),
                0x1000,
                0x1000,
                count,
            )
        };
        // float slices of 1 MiB (just the kernel), then 1 MiB + 4 B (just direct).
        let (ll, sym) = reduction_paths(&[rs(1 << 18)], 0, 2, ll_max, dr).unwrap();
        assert!(matches!(ll, Some(LowLatency::ReduceScatter(_))) && sym.is_none());
        let (ll, sym) = reduction_paths(&[rs((1 << 18) + 1)], 0, 2, ll_max, dr).unwrap();
        assert!(ll.is_none() && sym.is_some());
        // All-reduce: the kernel up to ll_max, direct from the threshold, staged between.
        let ar = |count| task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, count);
        let (ll, sym) = reduction_paths(&[ar(1 << 18)], 0, 2, ll_max, dr).unwrap();
        assert!(ll.is_some() && sym.is_none());
        let (ll, sym) = reduction_paths(&[ar((1 << 18) + 1)], 0, 2, ll_max, dr).unwrap();
        assert!(ll.is_none() && sym.is_none());
        let (ll, sym) = reduction_paths(&[ar(1 << 19)], 0, 2, ll_max, dr).unwrap();
        assert!(ll.is_none() && sym.is_some());
        // Switched off.
        let (_, sym) = reduction_paths(&[ar(1 << 19)], 0, 2, ll_max, 0).unwrap();
        assert!(sym.is_none());
    }

    /// Boundary pair of the small-exchange route: exactly the limit takes the kernel, one
    /// element more goes to the copy engines; never with the limit 0, a group of two, an
    /// operation with arithmetic, or more ranks than the kernel serves.
    #[test]
    fn small_data_collectives_take_the_kernel_up_to_the_limit() {
        let ag = |count| task(TaskKind::Coll(Collective::AllGather), 0x1000, 0x9000, count);
        assert!(small_exchange(&[ag(1024)], 2, 4096));
        assert!(!small_exchange(&[ag(1025)], 2, 4096));
        assert!(!small_exchange(&[ag(1)], 2, 0));
        assert!(!small_exchange(&[ag(1), ag(1)], 2, 4096));
        assert!(!small_exchange(&[ag(1)], LL_EXCHANGE_MAX_RANKS + 1, 4096));
        assert!(!small_exchange(&[ag(1)], 1, 4096));
        let ar = task(TaskKind::Coll(Collective::AllReduce), 0x1000, 0x1000, 1);
        assert!(!small_exchange(&[ar], 2, 4096));
        let a2a = task(TaskKind::Coll(Collective::AlltoAll), 0x1000, 0x9000, 2);
        assert!(small_exchange(&[a2a], 2, 4096));
        // What the kernel then does with it: the exchange (the same limit as its area).
        assert!(matches!(
            low_latency(&[ag(1024)], 0, 2, 1 << 20).unwrap(),
            Some(LowLatency::Exchange(_))
        ));
    }
}
