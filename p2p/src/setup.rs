//! Setting the engine up for a freshly connected communicator: every rank offers what it
//! can and has made, all decide alike from every offer, map their peers, and build the engine.

mod build;
mod local;
mod offer;
mod peers;
mod reach;

use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::buffers;
use crate::config::P2pConfig;
use crate::control::CommCtx;
use crate::engine::{HostRings, IpcEngine};
use crate::error::{Error, Result};
use crate::host_path::HostPath;
use crate::sharing::GpuSharing;
use build::{Agreed, Parts};
use ccl_collectives::relay::Relay;
use ccl_cuda::cuda::source::{LL_P2P_BYTES, LL_PACK_MAX};
use local::{host_shares, Geometry, Mode, Prepared, Shares};
use offer::{HostRing, Offer};
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

/// One attempt with `reach`, its shared-memory names built from `nonce`: every rank makes its
/// part and offers it, all decide alike from every offer, each maps its peers, a second round
/// says whether every rank could, and each builds its engine.
fn attach_as(comm: &CommCtx, cfg: &P2pConfig, reach: PeerReach, nonce: u64) -> Result<Attached> {
    let (rank, n) = (comm.rank(), comm.nranks());
    let g = Geometry::from_config(cfg, n);
    // Host-only mode: ranks of one host whose GPUs need not reach each other's memory
    // (peer-to-peer off, or no peer access): their flag words and receive slots live in shared
    // host memory, and with two ranks every byte of a direct transfer goes through the host
    // path's ring.
    let host_only = reach == PeerReach::HostOnly;
    let mode = Mode {
        wanted: comm.cuda_dev >= 0
            && cfg.gpu_available
            && reach != PeerReach::None
            && !cfg.disable
            && comm.one_host,
        host_only,
        shares: if host_only {
            ((1, HostPath::WHOLE), (1, HostPath::WHOLE))
        } else {
            host_shares(cfg)
        },
        nonce,
    };
    // Kept open until every peer has tried to take it (the second allgather below).
    let probe = nix::unistd::pipe().ok();
    let probe_fd = probe.as_ref().map(|(r, _)| r.as_raw_fd());
    let Prepared {
        local,
        offer,
        own_flags,
        own_slots,
        own_ring,
    } = local::prepare(comm, cfg, &g, &mode, probe_fd);
    let offers = exchange_offers(comm, &offer)?;
    let agreed = agree(&offers, &g, host_only, n);
    let Some((local, mut board, mut inbox)) = local.filter(|_| agreed.capable) else {
        if mode.wanted && offers.iter().any(|o| o.capable) {
            tracing::info!(
                "rank {rank}: cuda-ipc off for this communicator (not every rank can map its \
                 peers, or the CCL_IPC_* settings differ between ranks)"
            );
        }
        return Ok(Attached::Off);
    };
    let max_connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok();
    let bus_ids: Vec<_> = offers.iter().map(|o| o.bus_id).collect();
    let gpu_sharing = GpuSharing::of(rank, &comm.pids, &bus_ids);
    if !gpu_sharing.allows(rank, host_only, max_connections.as_deref()) {
        return Ok(Attached::Off);
    }
    let peers::Mapped {
        peers,
        host_flags,
        opened,
    } = peers::map_peers(
        comm,
        cfg,
        &local,
        (&mut board, &mut inbox),
        &offers,
        (host_only, nonce),
        g.host_region_bytes(n),
    );
    // The host path: both ranks made their rings with the same settings, and this one maps
    // the peer's.
    let ring_settings = offers[0].host;
    let host_rings = match own_ring {
        Some(own) if opened.is_ok() && n == 2 && offers.iter().all(|o| o.host == ring_settings) => {
            peers::open_peer_ring(&local.ctx, own, (nonce, rank), &ring_settings)
                .inspect_err(|e| tracing::info!("rank {rank}: cuda-ipc host path off: {e}"))
                .ok()
        }
        _ => None,
    };
    // Remote copies: both ranks asked, and this one can queue on the peer's GPU.
    let remote = if opened.is_ok() && n == 2 && !host_only && offers.iter().all(|o| o.remote) {
        match peers::remote_lanes(cfg, &local.ctx, &offers[1 - rank], g.rx_lanes) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::info!("rank {rank}: cuda-ipc remote copies off: {e}");
                None
            }
        }
    } else {
        None
    };
    let oks = comm.control.allgather(&[
        opened.is_ok() as u8,
        takes_fds(comm, &offers) as u8,
        remote.is_some() as u8,
        host_rings.is_some() as u8,
    ])?;
    drop(probe);
    if oks.iter().any(|b| b.first() != Some(&1)) {
        return Ok(Attached::Unmappable);
    }
    let all_ok = |i: usize| oks.iter().all(|b| b.get(i) == Some(&1));
    // Only if both can: a sender gives up waiting for its receiver because the receiver's
    // copy will still be a push.
    let remote = remote.filter(|_| all_ok(2));
    if let Some(r) = &remote {
        tracing::info!(
            "rank {rank}: cuda-ipc remote copies on: transfers of at least {} bytes this rank \
             pulls run on the peer GPU's copy engine",
            r.min_bytes
        );
    }
    let host_rings = host_rings.filter(|_| all_ok(3));
    // Host-only direct transfers have no other way for the bytes: no ring on some rank, no
    // engine on any.
    if host_only && agreed.direct && !all_ok(3) {
        tracing::info!("rank {rank}: cuda-ipc host-only off: a rank has no host path ring");
        return Ok(Attached::Off);
    }
    let host_path = host_rings
        .as_ref()
        .map(|rings| host_path(rank, rings, &ring_settings, mode.shares));
    // Every peer has mapped this rank's boards (and ring).
    board.boards.unlink();
    for (_, region) in own_flags.iter().chain(&own_slots) {
        region.unlink();
    }
    inbox.unlink();
    // Both ranks have mapped both rings (a ring whose path went off is removed as it drops).
    if let Some(rings) = &host_rings {
        rings.own.unlink();
    }
    let parts = Parts {
        local,
        board,
        inbox: std::sync::Arc::new(inbox),
        peers,
        own_flags,
        own_slots,
        host_flags,
        host_path,
        host_rings,
        remote,
        vmm_ok: all_ok(1),
        max_connections,
        gpu_sharing,
    };
    let engine = build::build(comm, cfg, &g, agreed, host_only, parts)?;
    Ok(Attached::On(Arc::new(engine)))
}

/// Every rank's offer, over the communicator's control connections.
fn exchange_offers(comm: &CommCtx, offer: &Offer) -> Result<Vec<Offer>> {
    comm.control
        .allgather(&offer.encode())?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Offer::decode(b)
                .ok_or_else(|| Error::remote(format!("rank {r} sent a malformed cuda-ipc offer")))
        })
        .collect()
}

/// The paths every rank chooses alike from every rank's offer.
fn agree(offers: &[Offer], g: &Geometry, host_only: bool, n: usize) -> Agreed {
    let capable = offers.iter().all(|o| {
        o.capable
            && o.chunk == g.chunk as u64
            && o.slots == g.slots
            && o.single_max == g.single_max as u64
            && o.host_only == host_only
    });
    // Host-only: direct transfers go through the host path's ring, which joins two ranks; with
    // more (or with direct transfers off) every byte goes through the receive slots in shared
    // host memory instead: pushed there on copy engines, copied or reduced out by kernels.
    let direct = offers.iter().all(|o| o.direct) && (!host_only || n == 2);
    // Paths every rank must choose alike: the smallest low-latency limit (every rank's area
    // holds that much), direct reductions only if every rank has them on, from the largest
    // threshold.
    // Host-only: nothing that reads or writes a peer's GPU memory (small operations as
    // kernels, direct reductions, relays, remote copies).
    let lowest = |f: fn(&Offer) -> u64| offers.iter().map(|o| f(o) as usize).min().unwrap_or(0);
    let ll_max = if host_only { 0 } else { lowest(|o| o.ll_area) };
    let ll_reduce_max = lowest(|o| o.ll_reduce).min(ll_max);
    let ll_scatter_max = lowest(|o| o.ll_scatter).min(ll_max);
    let ll_exchange_max = lowest(|o| o.ll_exchange_max).min(ll_max);
    // Sends on the point-to-point kernel only where the exchange's kernels run at all (0
    // there is the zero-SM setting), at most a slot.
    let p2p_max = lowest(|o| o.p2p_max).min(ll_exchange_max).min(LL_P2P_BYTES);
    // Packed lines live in buffers of their own, there whenever the areas are.
    let ll_pack_max = if ll_max == 0 {
        0
    } else {
        lowest(|o| o.ll_pack).min(LL_PACK_MAX)
    };
    // A grid every rank computes alike from what an operation moves per peer.
    let ll_block_bytes = lowest(|o| o.ll_block);
    let ll_two_shot_min = if ll_reduce_max == 0 {
        0
    } else {
        lowest(|o| o.ll_two_shot)
    };
    // Mailed reductions: a rank that queued one cannot go staged, so all or none.
    let mailed_reduce = !host_only && offers.iter().all(|o| o.mailed_reduce);
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
    let relay = Relay {
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
    Agreed {
        capable,
        direct,
        ll_max,
        ll_reduce_max,
        ll_scatter_max,
        ll_exchange_max,
        p2p_max,
        ll_pack_max,
        ll_block_bytes,
        ll_two_shot_min,
        direct_reduce,
        mailed_reduce,
        relay,
    }
}

/// Can this rank take file descriptors from every peer in another process (VMM buffers
/// travel so)? Each offered a descriptor to try.
fn takes_fds(comm: &CommCtx, offers: &[Offer]) -> bool {
    let (rank, my_pid) = (comm.rank(), comm.pids[comm.rank()]);
    offers.iter().enumerate().all(|(j, o)| {
        j == rank
            || comm.pids[j] == my_pid
            || (o.probe_fd >= 0 && buffers::can_take_fd(comm.pids[j], o.probe_fd))
    })
}

/// The host path over `rings` as both ranks made them (`settings`), with this rank's shares.
fn host_path(rank: usize, rings: &HostRings, settings: &HostRing, shares: Shares) -> HostPath {
    let (out_ring, in_ring) = rings.device_ptrs();
    let (one_way, exchange) = shares;
    let h = HostPath {
        out_ring,
        in_ring,
        slot_bytes: settings.slot_bytes as usize,
        slots: settings.slots,
        one_way,
        exchange,
    };
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
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(area: u64, reduce: u64, exchange: u64) -> Offer {
        let mut o = Offer::none();
        (o.capable, o.ll_area, o.ll_reduce, o.ll_exchange_max) = (true, area, reduce, exchange);
        o
    }

    /// Two ranks offering 1 MiB low-latency areas, reductions and exchanges.
    fn two_capable() -> [Offer; 2] {
        [
            offer(1 << 20, 1 << 20, 1 << 20),
            offer(1 << 20, 1 << 20, 1 << 20),
        ]
    }

    /// Every rank uses the smallest area any rank mapped, and no all-reduce or exchange
    /// larger than it; host-only ranks (no peer GPU memory) none at all.
    #[test]
    fn low_latency_limits_are_the_smallest_offered_and_fit_the_smallest_area() {
        let g = Geometry::from_config(&P2pConfig::default(), 2);
        let offers = [
            offer(2 << 20, 1 << 20, 2 << 20),
            offer(4 << 20, 4 << 20, 4 << 20),
        ];
        let a = agree(&offers, &g, false, 2);
        assert_eq!(
            (a.ll_max, a.ll_reduce_max, a.ll_exchange_max),
            (2 << 20, 1 << 20, 2 << 20)
        );
        let offers = [
            offer(1 << 20, 1 << 20, 4 << 20),
            offer(4 << 20, 4 << 20, 4 << 20),
        ];
        let a = agree(&offers, &g, false, 2);
        assert_eq!(
            (a.ll_max, a.ll_reduce_max, a.ll_exchange_max),
            (1 << 20, 1 << 20, 1 << 20)
        );
        let a = agree(&offers, &g, true, 2);
        assert_eq!((a.ll_max, a.ll_reduce_max, a.ll_exchange_max), (0, 0, 0));
    }

    /// Packed lines up to the smallest limit offered, at most what the packed buffers hold,
    /// and none without low-latency areas (host-only) or when one rank has them off.
    #[test]
    fn the_packed_limit_is_the_smallest_offered() {
        let g = Geometry::from_config(&P2pConfig::default(), 2);
        let packing = |a: u64, b: u64| {
            let mut offers = two_capable();
            (offers[0].ll_pack, offers[1].ll_pack) = (a, b);
            offers
        };
        assert_eq!(agree(&packing(16384, 8192), &g, false, 2).ll_pack_max, 8192);
        assert_eq!(
            agree(&packing(1 << 30, 1 << 30), &g, false, 2).ll_pack_max,
            LL_PACK_MAX
        );
        assert_eq!(agree(&packing(0, 16384), &g, false, 2).ll_pack_max, 0);
        assert_eq!(agree(&packing(16384, 16384), &g, true, 2).ll_pack_max, 0);
    }

    /// Sends take the point-to-point kernel up to the smallest limit offered, never beyond
    /// the exchange's limit (0 there: the zero-SM setting) or a slot.
    #[test]
    fn the_point_to_point_limit_is_the_smallest_offered_within_the_exchange() {
        let g = Geometry::from_config(&P2pConfig::default(), 2);
        let p2p = |a: u64, b: u64, exchange: u64| {
            let mut offers = two_capable();
            (offers[0].p2p_max, offers[1].p2p_max) = (a, b);
            (offers[0].ll_exchange_max, offers[1].ll_exchange_max) = (exchange, exchange);
            agree(&offers, &g, false, 2).p2p_max
        };
        assert_eq!(p2p(65536, 32768, 1 << 20), 32768);
        assert_eq!(p2p(65536, 65536, 0), 0);
        assert_eq!(p2p(65536, 65536, 40000), 40000);
        assert_eq!(p2p(1 << 30, 1 << 30, 1 << 20), LL_P2P_BYTES.min(1 << 20));
        assert_eq!(p2p(0, 32768, 1 << 20), 0);
    }

    /// The packed limit and the block size travel in the offer (appended: the rest keeps its
    /// offsets); the smallest block size offered is agreed (0, the most blocks, wins).
    #[test]
    fn the_offer_carries_the_packed_limit_and_block_size() {
        let mut o = offer(2 << 20, 1 << 20, 2 << 20);
        (o.ll_pack, o.ll_block) = (12345, 4096);
        let back = Offer::decode(&o.encode()).expect("an offer decodes");
        assert_eq!(
            (back.ll_pack, back.ll_block, back.ll_reduce, back.ll_area),
            (12345, 4096, 1 << 20, 2 << 20)
        );
        let g = Geometry::from_config(&P2pConfig::default(), 2);
        let blocks = |a: u64, b: u64| {
            let mut offers = two_capable();
            (offers[0].ll_block, offers[1].ll_block) = (a, b);
            agree(&offers, &g, false, 2).ll_block_bytes
        };
        assert_eq!((blocks(8192, 4096), blocks(0, 4096)), (4096, 0));
    }
}
