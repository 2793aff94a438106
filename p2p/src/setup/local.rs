//! This rank's part of the setup, made before the offer: its device memory and kernels, its
//! call board and rendezvous inbox, and (as the mode asks) its flag words and receive slots
//! in shared host memory and its ring of the host path, which peers map once they have every
//! offer.

use std::sync::Arc;

use ccl_cuda::cuda::helpers::device_context;
use ccl_cuda::cuda::source::{ReduceKindKey, REDUCE_N_MAX};
use ccl_cuda::cuda::{self, Context, DeviceBuffer, IpcHandle, KernelOp, Kernels, IPC_HANDLE_SIZE};
use ccl_cuda::DataType;

use super::offer::{bus_id_bytes, HostRing, Offer};
use crate::calls::{self, CallBoard, RankBoards};
use crate::config::P2pConfig;
use crate::control::CommCtx;
use crate::engine::{kernels_for, preload, Registered};
use crate::error::{cuda_err, Error, Result};
use crate::host_path::HostPath;
use crate::layout::{self, Layout};

/// Most receive lanes (`CCL_IPC_RX_LANES`).
const MAX_RX_LANES: usize = 4;

/// The engine's geometry from the settings; every rank's offer carries it, and all must
/// agree.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// Bytes per receive slot, and slots per peer.
    pub chunk: usize,
    pub slots: u32,
    /// Groups of at most this many bytes stay on the caller's stream.
    pub single_max: usize,
    /// Largest low-latency all-reduce (bytes) and reduce-scatter (bytes per rank) this rank
    /// takes.
    pub ll_reduce: usize,
    pub ll_scatter: usize,
    pub rx_lanes: usize,
}

impl Geometry {
    /// `n`: the communicator's ranks (the `auto` thresholds depend on them).
    pub fn from_config(cfg: &P2pConfig, n: usize) -> Geometry {
        Geometry {
            chunk: (cfg.chunk_bytes.clamp(4096, 1 << 30) as usize) & !255,
            slots: cfg.slots.clamp(2, 64) as u32,
            single_max: cfg.single_stream_bytes.max(0) as usize,
            ll_reduce: cfg.ll_reduce_for(n),
            ll_scatter: cfg.ll_scatter_for(n),
            rx_lanes: cfg.rx_lanes.clamp(1, MAX_RX_LANES as i64) as usize,
        }
    }

    /// Host-only: the bytes of a rank's flag words and of its receive slots in shared host
    /// memory, in whole pages.
    pub fn host_region_bytes(&self, n: usize) -> (usize, usize) {
        let flags = Layout::flag_bytes(n, self.slots, self.rx_lanes).next_multiple_of(4096);
        let slots = Layout::scratch_bytes(n, self.slots, self.chunk)
            .unwrap_or(0)
            .max(1)
            .next_multiple_of(4096);
        (flags, slots)
    }
}

/// The host path's shares, (smallest transfer, thousandths) one way and in exchanges.
pub(super) type Shares = ((usize, u32), (usize, u32));

/// How this rank takes part in one attempt.
pub(super) struct Mode {
    /// It has a GPU, the settings allow the engine, and every rank runs on this host.
    pub wanted: bool,
    /// Flag words and receive slots in shared host memory, nothing in a peer's GPU memory.
    pub host_only: bool,
    pub shares: Shares,
    /// Names this attempt's shared regions.
    pub nonce: u64,
}

/// This rank's own allocations, made before the offer.
pub(super) struct Local {
    pub ctx: Arc<Context>,
    pub kernels: Arc<Kernels>,
    pub flags: DeviceBuffer,
    pub scratch: DeviceBuffer,
    pub ll: DeviceBuffer,
}

/// What this rank made before offering, and its offer.
pub(super) struct Prepared {
    /// Its allocations, call board and rendezvous inbox (None: it cannot take part).
    pub local: Option<(Local, CallBoard, RankBoards)>,
    pub offer: Offer,
    /// Host-only: its flag words and receive slots in shared host memory.
    pub own_flags: Option<Registered>,
    pub own_slots: Option<Registered>,
    /// Two ranks: its ring of the host path (the peer's transfers to it land there).
    pub own_ring: Option<Registered>,
}

/// Makes this rank's part and its offer; `probe_fd` is a descriptor peers in other
/// processes try to take.
pub(super) fn prepare(
    comm: &CommCtx,
    cfg: &P2pConfig,
    g: &Geometry,
    mode: &Mode,
    probe_fd: Option<i32>,
) -> Prepared {
    let (rank, n, nonce) = (comm.rank(), comm.nranks(), mode.nonce);
    let (local, mut offer) = if mode.wanted {
        match prepare_local(cfg, comm.cuda_dev, n, g).and_then(|(l, o)| {
            let board = CallBoard::create(nonce, rank, n)?;
            let inbox = RankBoards::create("dx", nonce, rank, n, layout::inbox_words(n))?;
            Ok((Some((l, board, inbox)), o))
        }) {
            Ok(made) => made,
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc unavailable here: {e}");
                (None, Offer::none())
            }
        }
    } else {
        (None, Offer::none())
    };
    if let Some(fd) = probe_fd {
        offer.probe_fd = fd;
    }
    offer.host_only = mode.host_only;
    let mut p = Prepared {
        local,
        offer,
        own_flags: None,
        own_slots: None,
        own_ring: None,
    };
    let Some((l, _, _)) = &p.local else {
        return p;
    };
    // Host-only: this rank's flag words in shared host memory (without them this rank cannot
    // take part), and its receive slots (the staged protocol's, which reductions use): peers
    // write chunks there and this rank's kernels reduce out of them.
    if mode.host_only {
        let (flag_len, slot_len) = g.host_region_bytes(n);
        let region = |what: &str, len: usize| {
            host_region(&l.ctx, &calls::board_name(what, nonce, rank), len)
        };
        match region("hf", flag_len).and_then(|f| Ok((f, region("hs", slot_len)?))) {
            Ok((f, s)) => {
                p.own_flags = Some(f);
                p.own_slots = Some(s);
            }
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc host-only regions: {e}");
                p.offer.capable = false;
            }
        }
    }
    // The host path's ring. Two ranks only: with more, every GPU's PCIe share would meet on
    // the way to the CPU.
    let (one_way, exchange) = mode.shares;
    if n == 2 && (one_way.1 > 0 || exchange.1 > 0) && cfg.direct {
        let hs = HostRing::from_config(cfg);
        match host_ring(&l.ctx, nonce, rank, &hs) {
            Ok(r) => {
                p.own_ring = Some(r);
                p.offer.host = hs;
            }
            Err(e) => tracing::info!("rank {rank}: cuda-ipc host path off: {e}"),
        }
    }
    p
}

/// This rank's allocations on device `dev` (its flag words, receive slots and low-latency
/// area, zeroed where it matters) with the kernels loaded ahead, and the offer that tells
/// peers how to map them.
fn prepare_local(cfg: &P2pConfig, dev: i32, nranks: usize, g: &Geometry) -> Result<(Local, Offer)> {
    let ctx = device_context(dev)?;
    let kernels = kernels_for(&ctx, cfg.kernel_preload)?;
    if cfg.kernel_preload && cfg.reduce_n_for(nranks) {
        let k = nranks as u8;
        let keys: Vec<_> = DataType::ALL
            .into_iter()
            .flat_map(|dt| ReduceKindKey::ALL.map(move |r| (dt, KernelOp::ReduceN(r, k))))
            .collect();
        preload(&kernels, &keys);
    }
    if cfg.kernel_preload && cfg.direct_reduce_mailed && (2..=REDUCE_N_MAX).contains(&nranks) {
        let k = nranks as u8;
        let keys: Vec<_> = DataType::ALL
            .into_iter()
            .flat_map(|dt| ReduceKindKey::ALL.map(move |r| (dt, KernelOp::ReduceNMail(r, k))))
            .collect();
        preload(&kernels, &keys);
    }
    let flags = DeviceBuffer::new(&ctx, Layout::flag_bytes(nranks, g.slots, g.rx_lanes))
        .map_err(cuda_err)?;
    flags.write(0, &vec![0u8; flags.len()]).map_err(cuda_err)?;
    let bytes = Layout::scratch_bytes(nranks, g.slots, g.chunk)
        .ok_or_else(|| Error::invalid_argument("cuda-ipc receive area size overflows"))?;
    let scratch = DeviceBuffer::new(&ctx, bytes).map_err(cuda_err)?;
    let flags_handle = IpcHandle::of(&ctx, flags.ptr()).map_err(cuda_err)?.0;
    // One rank has no peers and no receive area.
    let scratch_handle = if scratch.is_empty() {
        [0; IPC_HANDLE_SIZE]
    } else {
        IpcHandle::of(&ctx, scratch.ptr()).map_err(cuda_err)?.0
    };
    let ll_area = cfg.ll_area_for(nranks);
    let ll = DeviceBuffer::new(&ctx, cuda::source::ll_area_bytes(nranks, ll_area.max(256)))
        .map_err(cuda_err)?;
    // Flags, acknowledgements and packed lines start at zero (the data regions need no
    // initial value).
    let words = cuda::source::ll_data_offset(nranks);
    ll.write(0, &vec![0u8; words]).map_err(cuda_err)?;
    let ll_handle = IpcHandle::of(&ctx, ll.ptr()).map_err(cuda_err)?.0;
    let offer = Offer {
        capable: true,
        direct: cfg.direct,
        dev,
        chunk: g.chunk as u64,
        slots: g.slots,
        single_max: g.single_max as u64,
        ll_area: ll_area as u64,
        ll_reduce: g.ll_reduce as u64,
        ll_scatter: g.ll_scatter as u64,
        p2p_max: cfg.p2p_kernel_bytes.max(0) as u64,
        direct_reduce: cfg.direct_reduce_bytes.max(0) as u64,
        ll_exchange_max: cfg.ll_exchange_for(nranks) as u64,
        ll_pack: cfg.ll_pack_bytes.max(0) as u64,
        ll_two_shot: cfg.ll_two_shot_bytes.max(0) as u64,
        ll_block: cfg.ll_block_bytes.max(0) as u64,
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
        mailed_reduce: cfg.direct_reduce_mailed,
        // Set by `prepare`.
        host_only: false,
        bus_id: bus_id_bytes(&ctx.driver().pci_bus_id(ctx.device()).map_err(cuda_err)?),
        // Filled in once the ring exists (`prepare`).
        host: HostRing::default(),
    };
    let local = Local {
        ctx,
        kernels,
        flags,
        scratch,
        ll,
    };
    Ok((local, offer))
}

/// This rank's shares of the host path (local settings: the first poster's share holds).
pub(super) fn host_shares(cfg: &P2pConfig) -> Shares {
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

/// This rank's ring of the host path, made and registered before the offer.
fn host_ring(ctx: &Arc<Context>, nonce: u64, rank: usize, hs: &HostRing) -> Result<Registered> {
    host_region(ctx, &calls::board_name("hp", nonce, rank), hs.ring_bytes())
        .map_err(|e| Error::system(format!("host path ring: {e}")))
}

/// `region`, a mapping this process just made (of a file it created or a peer's), registered
/// with CUDA here.
pub(super) fn registered(
    ctx: &Arc<Context>,
    region: ccl_transports::shm::ShmRegion,
) -> Result<Registered> {
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
