//! Setting the engine up for a freshly connected communicator: every rank offers what it
//! can and has made, all decide alike from every offer, map their peers, and build the engine.

mod offer;
mod reach;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use ccl_cuda::cuda::helpers::{device_context, plain_event};
use ccl_cuda::cuda::source::ReduceKindKey;
use ccl_cuda::cuda::{
    self, Context, DeviceBuffer, Flag, IpcHandle, IpcMapping, KernelOp, Kernels, Stream,
    IPC_HANDLE_SIZE,
};
use ccl_cuda::DataType;
use parking_lot::Mutex;

use crate::buffers::Buffers;
use crate::calls::{self, CallBoard, History, RankBoards};
use crate::config::P2pConfig;
use crate::control::CommCtx;
use crate::direct::{plan, posting};
use crate::engine::{
    kernels_for, preload, HostRings, IpcEngine, Peer, QueueTimes, Queued, Registered, RemoteLanes,
    Watch,
};
use crate::error::{cuda_err, Error, Result};
use crate::host_path::HostPath;
use crate::layout::{self, Layout};
use crate::protocol::Counters;
use crate::tuning::{takeover_wait, wants_wait_kernel, Tuning};
use crate::{buffers, limits, relay, small_p2p};
use offer::{bus_id_bytes, HostRing, Offer, BUS_ID_BYTES};
use reach::{forced_host_only, p2p_disabled, PeerReach};

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
            push_waits: plan::PushWaits::default(),
            sym_outcomes: [0; 4],
            sym_waited: Duration::ZERO,
            push_late: posting::Lateness::default(),
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

/// Copy lanes (streams) per communicator: chunk `seq` of a pair goes on lane `seq % TX_LANES`,
/// so one lane's flag operations and copy launch overlap the other lane's copy and the copy
/// engines never idle between chunks.
const TX_LANES: usize = 2;

/// Most receive lanes (`CCL_IPC_RX_LANES`).
const MAX_RX_LANES: usize = 4;

/// This rank's own allocations, made before the offer.
struct Local {
    ctx: Arc<Context>,
    kernels: Arc<Kernels>,
    flags: DeviceBuffer,
    scratch: DeviceBuffer,
    ll: DeviceBuffer,
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

/// This rank's ring of the host path, made and registered before the offer.
fn host_ring(ctx: &Arc<Context>, nonce: u64, rank: usize, hs: &HostRing) -> Result<Registered> {
    host_region(ctx, &calls::board_name("hp", nonce, rank), hs.ring_bytes())
        .map_err(|e| Error::system(format!("host path ring: {e}")))
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
