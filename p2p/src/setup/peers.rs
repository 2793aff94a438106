//! Reaching the peers once every offer is in: their memory mapped here (host-only: their
//! shared regions registered here), the peer's ring of the host path, and the peer GPU's
//! lanes for remote copies.

use std::sync::Arc;

use ccl_cuda::cuda::helpers::{device_context, plain_event};
use ccl_cuda::cuda::{self, Context, IpcHandle, IpcMapping, Stream};

use super::local::{registered, Local};
use super::offer::{bus_id_bytes, HostRing, Offer, BUS_ID_BYTES};
use crate::calls::{self, CallBoard, RankBoards};
use crate::config::P2pConfig;
use crate::control::CommCtx;
use crate::engine::{HostRings, Peer, Registered, RemoteLanes};
use crate::error::{cuda_err, Error, Result};

/// The peers as this rank reaches them, and whether it reached every one.
pub(super) struct Mapped {
    /// Every peer's memory as mapped here (None at this rank's own index).
    pub peers: Vec<Option<Peer>>,
    /// Host-only: every peer's flag words and receive slots as this process maps and
    /// registers them.
    pub host_flags: Vec<Registered>,
    /// Err: some peer could not be reached (the peers mapped before it are kept).
    pub opened: Result<()>,
}

/// Opens the peers' call boards and inboxes and maps every peer's memory, as `offers` say
/// (`region_bytes`: host-only, the sizes of a rank's shared flag words and slots).
pub(super) fn map_peers(
    comm: &CommCtx,
    cfg: &P2pConfig,
    local: &Local,
    (board, inbox): (&mut CallBoard, &mut RankBoards),
    offers: &[Offer],
    (host_only, nonce): (bool, u64),
    region_bytes: (usize, usize),
) -> Mapped {
    let rank = comm.rank();
    let mut m = Mapped {
        peers: (0..comm.nranks()).map(|_| None).collect(),
        host_flags: Vec::new(),
        opened: Ok(()),
    };
    m.opened = (|| -> Result<()> {
        if !host_only && cfg.fault_no_peer_access {
            return Err(Error::system(
                "peer GPU memory left unmapped (CCL_IPC_FAULT_NO_PEER_ACCESS)",
            ));
        }
        board.boards.open_peers(nonce)?;
        inbox.open_peers(nonce)?;
        for (j, o) in offers.iter().enumerate().filter(|&(j, _)| j != rank) {
            m.peers[j] = Some(if host_only {
                map_host_only(&local.ctx, j, nonce, region_bytes, &mut m.host_flags)?
            } else if comm.pids[j] == comm.pids[rank] {
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
                map_ipc(&local.ctx, o)?
            });
        }
        Ok(())
    })();
    if let Err(e) = &m.opened {
        tracing::info!("rank {rank}: cannot map a peer's memory: {e}");
    }
    m
}

/// Peer `j`'s flag words and receive slots in shared host memory, mapped and registered here
/// (the registrations kept in `regs`).
fn map_host_only(
    ctx: &Arc<Context>,
    j: usize,
    nonce: u64,
    (flag_len, slot_len): (usize, usize),
    regs: &mut Vec<Registered>,
) -> Result<Peer> {
    let mut map = |what: &str, len: usize| -> Result<u64> {
        let name = calls::board_name(what, nonce, j);
        let region = ccl_transports::shm::ShmRegion::open(&name, len)
            .map_err(|e| Error::system(format!("the peer's host-only {what}: {e}")))?;
        let (reg, region) = registered(ctx, region)?;
        let at = reg.device_ptr();
        regs.push((reg, region));
        Ok(at)
    };
    Ok(Peer {
        flags: map("hf", flag_len)?,
        scratch: map("hs", slot_len)?,
        ll: 0,
        _maps: Vec::new(),
    })
}

/// The memory of a peer in another process, mapped here through the CUDA IPC handles of its
/// offer `o`.
fn map_ipc(ctx: &Arc<Context>, o: &Offer) -> Result<Peer> {
    let f = IpcMapping::open(ctx, &IpcHandle(o.flags_handle)).map_err(cuda_err)?;
    let s = IpcMapping::open(ctx, &IpcHandle(o.scratch_handle)).map_err(cuda_err)?;
    let l = IpcMapping::open(ctx, &IpcHandle(o.ll_handle)).map_err(cuda_err)?;
    Ok(Peer {
        flags: f.ptr(),
        scratch: s.ptr(),
        ll: l.ptr(),
        _maps: vec![f, s, l],
    })
}

/// Two ranks: the peer's ring of the host path mapped and registered here, beside this
/// rank's own (`own`), both made with `settings`.
pub(super) fn open_peer_ring(
    ctx: &Arc<Context>,
    own: Registered,
    (nonce, rank): (u64, usize),
    settings: &HostRing,
) -> Result<HostRings> {
    let name = calls::board_name("hp", nonce, 1 - rank);
    let peer = ccl_transports::shm::ShmRegion::open(&name, settings.ring_bytes())
        .map_err(|e| Error::system(format!("the peer's host path ring: {e}")))?;
    let (reg, peer) = registered(ctx, peer)?;
    let (own_reg, own) = own;
    Ok(HostRings {
        regs: [reg, own_reg],
        own,
        _peer: peer,
    })
}

/// The peer GPU's lanes for [`RemoteLanes`]; an error says why there are none (logged).
pub(super) fn remote_lanes(
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
