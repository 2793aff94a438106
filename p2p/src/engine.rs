//! One communicator's engine as setup made it (streams, events, mapped peers, the layout, the
//! settings read once) and what queueing has counted so far; and the reduction kernels a
//! device's communicators share.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ccl_collectives::task::Task;
use ccl_cuda::cuda::source::ReduceKindKey;
use ccl_cuda::cuda::{
    self, Context, DeviceBuffer, Event, Flag, IpcMapping, KernelOp, Kernels, Stream,
};
use ccl_cuda::DataType;
use parking_lot::Mutex;

use crate::buffers::Buffers;
use crate::calls::{CallBoard, History, RankBoards};
use crate::config::P2pConfig;
use crate::direct::{plan, posting};
use crate::error::{cuda_err, Result};
use crate::layout::Layout;
use crate::protocol::Counters;
use crate::tuning::{Tuning, WaitKernel};
use crate::{limits, small_p2p};

/// A peer's memory as this rank's device sees it.
pub(crate) struct Peer {
    pub(crate) flags: u64,
    pub(crate) scratch: u64,
    pub(crate) ll: u64,
    /// IPC mappings (other processes) keep the peer's memory mapped while we use it.
    pub(crate) _maps: Vec<IpcMapping>,
}

/// What one communicator has queued so far.
pub(crate) struct Queued {
    pub(crate) counters: Counters,
    /// The user stream of the last operation: one that follows on another stream waits for it
    /// (the counters assume operations of a communicator run in call order).
    pub(crate) last_stream: Option<usize>,
    /// Small sends and receives so far, per pair (the point-to-point kernel's numbering).
    pub(crate) small: small_p2p::Seqs,
    /// Collectives called so far, for the mismatch check.
    pub(crate) calls: History,
    /// Groups queued so far.
    pub(crate) ops: u64,
    /// Our buffers as peers reach them, and theirs as we do.
    pub(crate) bufs: Buffers,
    /// Bytes this rank sent: straight between user buffers, through its bounce buffer, and
    /// through the receive slots (logged when the communicator goes).
    pub(crate) sent_direct: u64,
    pub(crate) sent_bounced: u64,
    /// Of `sent_direct`, bytes through the host path's pinned ring.
    pub(crate) sent_host: u64,
    pub(crate) sent_staged: u64,
    /// Bytes this rank sent as small sends through the point-to-point kernel.
    pub(crate) sent_small: u64,
    pub(crate) push_waits: plan::PushWaits,
    /// Direct reductions by how they went (shared, alone, passive, staged after the
    /// rendezvous), and the host time spent waiting for the other ranks' posts.
    pub(crate) sym_outcomes: [u64; 4],
    pub(crate) sym_waited: Duration,
    /// Of those, the ones on symmetric windows (no wait for the others' posts).
    pub(crate) sym_windowed: u64,
    /// Of the direct reductions, those queued before every rank posted, their kernel waiting
    /// on a mailbox slot (`CCL_IPC_DIRECT_REDUCE_MAILED`).
    pub(crate) sym_mailed: u64,
    /// Host time spent queueing groups (logged when the communicator goes): a host-bound
    /// training loop pays it directly, as it cannot launch its next kernels meanwhile.
    pub(crate) queueing: QueueTimes,
    /// Peers whose receives came late (the push wait is skipped for a while).
    pub(crate) push_late: posting::Lateness,
    /// Where small sends that a receive of their group overwrites are copied first
    /// ([`small_p2p::SmallGroup::place_snapshots`]): the last one is in use, the ones before
    /// it were outgrown and stay until the engine goes (a kernel queued earlier may still
    /// read them).
    pub(crate) snapshots: Vec<DeviceBuffer>,
}

impl Queued {
    /// Nothing queued yet on a communicator of `n` ranks, with `bufs` for its direct paths.
    pub(crate) fn new(n: usize, rx_lanes: usize, bufs: Buffers) -> Queued {
        Queued {
            counters: Counters::new(n, rx_lanes),
            last_stream: None,
            small: small_p2p::Seqs::new(n),
            calls: History::default(),
            ops: 0,
            bufs,
            sent_direct: 0,
            sent_bounced: 0,
            sent_host: 0,
            push_waits: plan::PushWaits::default(),
            sym_outcomes: [0; 4],
            sym_waited: Duration::ZERO,
            sym_windowed: 0,
            sym_mailed: 0,
            push_late: posting::Lateness::default(),
            sent_staged: 0,
            sent_small: 0,
            queueing: QueueTimes::default(),
            snapshots: Vec::new(),
        }
    }

    /// The snapshot area, grown to at least `bytes` (doubling).
    pub(crate) fn snapshot_area(&mut self, ctx: &Arc<Context>, bytes: usize) -> Result<u64> {
        match self.snapshots.last() {
            Some(b) if b.len() >= bytes => Ok(b.ptr()),
            last => {
                let len = bytes.max(last.map_or(0, |b| 2 * b.len()));
                let b = DeviceBuffer::new(ctx, len).map_err(cuda_err)?;
                let ptr = b.ptr();
                self.snapshots.push(b);
                Ok(ptr)
            }
        }
    }
}

/// One communicator's cuda-ipc state.
pub struct IpcEngine {
    /// The settings it was made with.
    pub(crate) cfg: P2pConfig,
    /// Host-only mode (`CCL_IPC_HOST_ONLY`): flag words and receive slots in shared host
    /// memory, every direct transfer wholly through the host path, reductions through the
    /// slots, nothing that touches a peer's GPU memory (captured groups go staged).
    pub(crate) host_only: bool,
    /// Host-only: every rank's flag region as this process registered and mapped it
    /// (registrations drop first).
    pub(crate) _host_flags: Vec<Registered>,
    pub(crate) ctx: Arc<Context>,
    pub(crate) kernels: Arc<Kernels>,
    pub(crate) layout: Layout,
    pub(crate) single_stream_max: usize,
    /// Waits that last as long as a peer takes (a transfer's "done") run as a one-thread
    /// kernel instead of a stream wait (`CCL_IPC_WAIT_KERNEL`).
    pub(crate) wait_kernel: WaitKernel,
    /// A direct transfer's second side as one wait-copy-signal kernel
    /// (`CCL_IPC_COPY_KERNEL`).
    pub(crate) copy_kernel: bool,
    /// A group's direct copies as one `cuMemcpyBatchAsync` (`CCL_IPC_BATCH_COPIES`), and the
    /// most bytes of local copies such a batch holds
    /// ([`crate::config::BatchCopies::local_max`]); None: a copy lane per peer.
    pub(crate) batch_copies: Option<usize>,
    pub(crate) _flags: DeviceBuffer,
    /// This rank's receive area in its GPU memory: the staged protocol's slots, or in host-only
    /// mode (whose slots are in host memory) their mirror and the partners' inputs of captured
    /// groups ([`crate::captured::host_only`]).
    pub(crate) device_slots: DeviceBuffer,
    /// Bytes per sender of every rank's low-latency area (0: none; the kernels' stride), the
    /// largest low-latency all-reduce in bytes and reduce-scatter in bytes per rank, this
    /// rank's area, and the device array of every rank's area address as mapped here.
    pub(crate) ll_max: usize,
    pub(crate) ll_reduce_max: usize,
    pub(crate) ll_scatter_max: usize,
    /// Smallest all-reduce / reduce-scatter that runs as a direct reduction (0: none).
    pub(crate) direct_reduce: usize,
    /// More than two ranks: a direct reduction reduces its slice in one kernel over every
    /// rank's input (`CCL_IPC_DIRECT_REDUCE_MULTI`); cleared if that kernel fails to load, so
    /// the chain of two-input kernels takes over.
    pub(crate) reduce_n: AtomicBool,
    pub(crate) _ll: DeviceBuffer,
    pub(crate) ll_areas: DeviceBuffer,
    /// Data collectives (no arithmetic) of at most this many bytes take the low-latency
    /// kernel instead of the zero-SM direct transfers (0: never).
    pub(crate) ll_exchange_max: usize,
    /// Sends and receives of at most this many bytes take the point-to-point kernel (agreed;
    /// 0: none).
    pub(crate) p2p_max: usize,
    /// How the low-latency kernels launch: packed lines up to `CCL_IPC_LL_PACK_BYTES` per peer
    /// and the grid by `CCL_IPC_LL_BLOCK_BYTES` (both agreed), threads and acknowledgement
    /// fence this rank's own.
    pub(crate) ll_launch: ccl_cuda::cuda::LlLaunch,
    /// Low-latency all-reduces of more than two ranks from this many bytes go in two shots
    /// (`CCL_IPC_LL_TWO_SHOT_BYTES`, agreed; 0: never).
    pub(crate) ll_two_shot_min: usize,
    /// The throughput monitor's timing of copy-engine transfers, once the communicator has a
    /// monitor ([`crate::monitor_copies`]).
    pub(crate) copies: std::sync::OnceLock<crate::copy_monitor::CopyMonitor>,
    /// Broadcasts over more than two ranks that go as a pipelined scatter and all-gather.
    pub(crate) relay: ccl_collectives::relay::Relay,
    /// Two ranks: how long a direct reduction's first poster waits before leaving the whole
    /// reduction to its peer (`CCL_IPC_DIRECT_REDUCE_TAKEOVER_US`; None: never).
    pub(crate) takeover: Option<Duration>,
    /// Settings of the per-operation path, read once.
    pub(crate) tuning: Tuning,
    /// Most blocks of a captured group's copy kernels ([`crate::tuning::graph_copy_blocks`]).
    pub(crate) graph_copy_blocks: u32,
    /// The ranks of this communicator on this rank's GPU.
    pub(crate) gpu_sharing: crate::sharing::GpuSharing,
    /// The symmetric windows registered so far ([`crate::registration::register_window`]).
    pub(crate) windows: Mutex<crate::windows::Windows>,
    /// Where the point-to-point kernel reports a small receive whose size differed from its
    /// send's (1 + the sender's rank; host-mapped, so checking it needs no CUDA call).
    pub(crate) small_mismatch: Flag,
    pub(crate) _peers: Vec<Option<Peer>>,
    pub(crate) tx: Vec<Stream>,
    pub(crate) rx: Vec<Stream>,
    /// The host path's two lanes (none while it is off) and its rings.
    pub(crate) host_lanes: Vec<Stream>,
    pub(crate) _host_rings: Option<HostRings>,
    /// This GPU's clock limiters and how often they are read: while the GPU is held at its
    /// power or thermal limit (someone's compute at full tilt) new transfers skip the host
    /// path (`CCL_IPC_HOST_PATH_WHEN_LIMITED`); None: the host path does not look.
    pub(crate) host_limits: Option<(cuda::ClockLimits, limits::LimitWatch)>,
    /// Transfers the host path would have taken, posted without it because the GPU was limited.
    pub(crate) host_skipped: std::sync::atomic::AtomicU64,
    pub(crate) fork: Event,
    /// One per lane, tx lanes first.
    pub(crate) joins: Vec<Event>,
    /// Recorded on the user stream at the end of every operation.
    pub(crate) last_done: Event,
    pub(crate) queued: Mutex<Queued>,
    pub(crate) board: CallBoard,
    /// Direct transfers on (every rank asked for them), and every rank's rendezvous inbox.
    pub(crate) direct: bool,
    pub(crate) inbox: Arc<RankBoards>,
    /// Sends posted before their receives go without waiting (`CCL_IPC_MAILED_PUSH`).
    pub(crate) mail: Option<crate::mail::Mail>,
    /// Direct all-reduces and reduce-scatters whose peers have not all posted are mailed
    /// (`CCL_IPC_DIRECT_REDUCE_MAILED`, agreed; the mail thread is there).
    pub(crate) mailed_reduce: bool,
    pub(crate) watch: Mutex<Watch>,
    /// Copies pulled from the peer run on the peer GPU's engine (`CCL_IPC_REMOTE_COPY`).
    pub(crate) remote: Option<RemoteLanes>,
    /// Groups captured into CUDA graphs so far (each takes the next index of
    /// [`crate::layout::groups`], whichever path it ends up on).
    pub(crate) captured: std::sync::atomic::AtomicUsize,
    /// Some low-latency kernel was captured into a CUDA graph: the graph keeps the areas'
    /// addresses (ours and, mapped, the peers').
    pub(crate) ll_captured: std::sync::atomic::AtomicBool,
}

// SAFETY: CUDA handles (streams, events, device pointers, module functions) are process-wide
// driver objects usable from any thread; mutable state is behind the counters' mutex.
unsafe impl Send for IpcEngine {}

// SAFETY: as above.
unsafe impl Sync for IpcEngine {}

impl IpcEngine {
    /// Whether direct reductions read every input in one kernel (`CCL_IPC_DIRECT_REDUCE_MULTI`)
    /// and, for all-reduces, write every output from it (`CCL_IPC_DIRECT_REDUCE_WRITE_ALL`):
    /// each as set, while the kernel is loaded.
    pub(crate) fn reduce_n_uses(&self) -> (bool, bool) {
        let loaded = self.reduce_n.load(std::sync::atomic::Ordering::Relaxed);
        (
            loaded && self.cfg.direct_reduce_multi,
            loaded && self.cfg.direct_reduce_write_all,
        )
    }

    /// The low-latency limits every rank agreed on.
    pub(crate) fn ll_limits(&self) -> crate::paths::LlLimits {
        crate::paths::LlLimits {
            reduce: self.ll_reduce_max,
            scatter: self.ll_scatter_max,
            area: self.ll_max,
        }
    }

    /// Bytes of GPU memory the engine allocated: the flag words, the receive area, the
    /// low-latency area and its address table, and the bounce buffers made so far.
    pub fn gpu_bytes(&self) -> u64 {
        let fixed = [&self._flags, &self.device_slots, &self._ll, &self.ll_areas];
        let fixed: usize = fixed.iter().map(|b| b.len()).sum();
        fixed as u64 + self.queued.lock().bufs.bounce_bytes()
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

/// A context of this process on the peer's GPU (two ranks): a transfer this rank would pull
/// -- its GPU's copy engine reading the peer's memory, which halves both directions while that
/// engine also pushes this rank's own data -- is queued on a stream there instead, so the
/// peer GPU's engine pushes it (2026-11-23, `tests/gpu/cross_issue.cu`: 390 GB/s each way with
/// both queued by one process, also while the other process's kernel holds every SM of that
/// GPU). Per receive lane: the stream there, an event of ours it waits on (the peer's "here"
/// flag seen on our lane) and one of its own our lane waits on before writing "done". Only
/// copies and event waits run there: stream memory operations refuse the peer mappings of
/// our context.
pub(crate) struct RemoteLanes {
    pub(crate) ctx: Arc<Context>,
    pub(crate) streams: Vec<Stream>,
    pub(crate) here: Vec<Event>,
    pub(crate) there: Vec<Event>,
    pub(crate) min_bytes: usize,
    pub(crate) pulls: std::sync::atomic::AtomicU64,
    pub(crate) bytes: std::sync::atomic::AtomicU64,
}

/// The host path's rings: the peer's (our transfers to it go there) and ours (its transfers
/// to us land in it), each mapped here and registered with CUDA, in that order. Fields drop
/// in order: registrations before mappings.
pub(crate) struct HostRings {
    pub(crate) regs: [cuda::HostRegistration; 2],
    pub(crate) own: ccl_transports::shm::ShmRegion,
    pub(crate) _peer: ccl_transports::shm::ShmRegion,
}

impl HostRings {
    /// The peer's ring and ours as the device reaches them: [`crate::host_path::HostPath`]'s
    /// `out_ring` and `in_ring`.
    pub(crate) fn device_ptrs(&self) -> (u64, u64) {
        (self.regs[0].device_ptr(), self.regs[1].device_ptr())
    }
}

/// A shared region registered with CUDA (its device address is the registration's), the
/// registration first so that it drops before the mapping.
pub(crate) type Registered = (cuda::HostRegistration, ccl_transports::shm::ShmRegion);

/// What the stuck-work check has seen.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Since when the last queued operation has been pending, and how many were queued then.
    pub(crate) pending: Option<(std::time::Instant, u64)>,
    /// When a peer was first seen gone while work was queued.
    pub(crate) peer_left: Option<std::time::Instant>,
}

/// Host time spent queueing groups (`submit`), per group.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueTimes {
    pub(crate) groups: u64,
    pub(crate) total: Duration,
    pub(crate) longest: Duration,
    pub(crate) over_100us: u64,
    pub(crate) over_1ms: u64,
    /// The total split by phase ([`Phases`]): where a host-bound loop's time goes.
    pub(crate) phases: Phases,
}

/// A group's host time by phase of `submit_phase`: lowering and locking, posting the direct
/// transfers, settling them (push waits included) and beginning, emitting and ending.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Phases {
    pub(crate) prepare: Duration,
    pub(crate) post: Duration,
    pub(crate) begin: Duration,
    pub(crate) emit: Duration,
}

impl QueueTimes {
    /// Counts one group of `d` in all, split as `p`.
    pub(crate) fn add(&mut self, d: Duration, p: Phases) {
        self.phases.prepare += p.prepare;
        self.phases.post += p.post;
        self.phases.begin += p.begin;
        self.phases.emit += p.emit;
        self.groups += 1;
        self.total += d;
        self.longest = self.longest.max(d);
        self.over_100us += u64::from(d > Duration::from_micros(100));
        self.over_1ms += u64::from(d > Duration::from_millis(1));
    }
}

/// The callers' streams of a group, each once.
pub(crate) fn streams_of(ctx: &Arc<Context>, tasks: &[Task]) -> Vec<Stream> {
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
pub(crate) fn preload(kernels: &Kernels, keys: &[(DataType, KernelOp)]) {
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
