//! From systems and ranks to channels: ring order and tree per channel, the NIC each rank
//! uses per channel, its backup NIC, and the transport between any two ranks.
//!
//! Ranks are grouped by host (hosts in order of their first rank). On a host with GPUs the
//! ring search orders its GPUs; on a host without GPUs (the host backend) ranks are ordered
//! by NUMA node. Each channel's ring visits every host's ranks as one contiguous segment, so
//! only two ring edges per host cross the network. Between hosts each channel enters a host
//! at the GPU nearest the channel's NIC.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use crate::config::{CrossNic, TopoConfig, MAX_CHANNELS};
use crate::error::{Result, TopoError};
use crate::model::{NetInfo, NodeId, System};
use crate::nic::{backup_net, closest_set, select_nets, NetSelection};
use crate::paths::{PathOptions, Paths};
use crate::search::{double_binary_tree, search_rings, IntraRings};
use crate::types::{BusId, PathType, LOC_BW};

/// What the communicator knows about one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// Host identity (e.g. a hash of the host name); ranks with equal ids share a host.
    pub host: u64,
    /// The rank's GPU, or none on the host backend.
    pub gpu: Option<BusId>,
    /// The rank's NUMA node, when known.
    pub numa: Option<u32>,
}

/// The system of each host.
#[derive(Clone, Debug, Default)]
pub struct HostSystems {
    map: BTreeMap<u64, Arc<System>>,
    default: Option<Arc<System>>,
}

impl HostSystems {
    /// No systems yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every host has this system (the usual case: all hosts alike).
    pub fn uniform(sys: System) -> Self {
        HostSystems {
            map: BTreeMap::new(),
            default: Some(Arc::new(sys)),
        }
    }
    /// Sets one host's system.
    pub fn insert(&mut self, host: u64, sys: Arc<System>) {
        self.map.insert(host, sys);
    }
    /// Sets the system of hosts not inserted.
    pub fn set_default(&mut self, sys: Arc<System>) {
        self.default = Some(sys);
    }
    fn get(&self, host: u64) -> Option<Arc<System>> {
        self.map.get(&host).or(self.default.as_ref()).cloned()
    }
}

/// How two ranks exchange data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The same rank.
    Loc,
    /// GPU peer access (CUDA IPC / copy engines) over a path of this type (NVL, NVB, PIX..).
    P2p(PathType),
    /// Host shared memory.
    Shm,
    /// The network.
    Net,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Loc => f.write_str("LOC"),
            Transport::P2p(p) => write!(f, "P2P/{p}"),
            Transport::Shm => f.write_str("SHM"),
            Transport::Net => f.write_str("NET"),
        }
    }
}

/// Why P2P is not used between two ranks of one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoP2p {
    /// `NCCL_P2P_DISABLE=1`.
    Disabled,
    /// The path is farther than `NCCL_P2P_LEVEL` (default PXB).
    BeyondLevel {
        /// The GPUs' path type.
        path: PathType,
        /// The level in force.
        level: PathType,
    },
    /// At least one side has no GPU.
    NoGpu,
    /// The GPUs are not connected in the topology.
    Disconnected,
}

impl fmt::Display for NoP2p {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoP2p::Disabled => f.write_str("P2P disabled by NCCL_P2P_DISABLE"),
            NoP2p::BeyondLevel { path, level } => {
                write!(f, "path {path} is beyond the P2P level {level}")
            }
            NoP2p::NoGpu => f.write_str("no GPU on one side"),
            NoP2p::Disconnected => f.write_str("GPUs not connected"),
        }
    }
}

/// Why a transport was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportReason {
    /// Same rank.
    SameRank,
    /// P2P: the path is within the P2P level.
    P2pWithinLevel {
        /// Path type.
        path: PathType,
        /// Level in force.
        level: PathType,
    },
    /// Shared memory on one host, because P2P is not possible.
    SharedMemory(NoP2p),
    /// The network on one host: P2P not possible and `NCCL_SHM_DISABLE=1`.
    ShmDisabled(NoP2p),
    /// The ranks are on different hosts.
    DifferentHosts,
}

impl fmt::Display for TransportReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportReason::SameRank => f.write_str("same rank"),
            TransportReason::P2pWithinLevel { path, level } => {
                write!(f, "path {path} within P2P level {level}")
            }
            TransportReason::SharedMemory(w) => write!(f, "same host, {w}"),
            TransportReason::ShmDisabled(w) => {
                write!(f, "same host, {w}, and SHM disabled by NCCL_SHM_DISABLE")
            }
            TransportReason::DifferentHosts => f.write_str("different hosts"),
        }
    }
}

/// The transport between two ranks, with its path and reason.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerTransport {
    /// The transport.
    pub transport: Transport,
    /// The path type between the ranks' devices (NET across hosts).
    pub path: PathType,
    /// The path bandwidth, GB/s (0 across hosts).
    pub bw: f64,
    /// Why.
    pub reason: TransportReason,
}

/// A tree over ranks for one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The root rank.
    pub root: usize,
    /// Parent of each rank.
    pub up: Vec<Option<usize>>,
    /// Children of each rank (at most 3: two hosts and the next rank of the chain).
    pub down: Vec<Vec<usize>>,
}

/// One channel.
#[derive(Clone, Debug, PartialEq)]
pub struct Channel {
    /// Ring order of all ranks.
    pub ring: Vec<usize>,
    ring_pos: Vec<usize>,
    /// Tree of this channel (channels alternate between the two trees of a double binary
    /// tree across hosts; inside a host the tree is a chain in ring order).
    pub tree: Tree,
    /// The net device each rank uses on this channel (none when its host has no usable one).
    pub nic: Vec<Option<u32>>,
    /// Per-channel bandwidth inside hosts, GB/s.
    pub bw_intra: f64,
    /// Per-channel bandwidth between hosts, GB/s (none with one host).
    pub bw_inter: Option<f64>,
}

impl Channel {
    /// The rank after `rank` in the ring.
    pub fn ring_next(&self, rank: usize) -> Option<usize> {
        let p = *self.ring_pos.get(rank)?;
        self.ring.get((p + 1) % self.ring.len()).copied()
    }
    /// The rank before `rank` in the ring.
    pub fn ring_prev(&self, rank: usize) -> Option<usize> {
        let p = *self.ring_pos.get(rank)?;
        let n = self.ring.len();
        self.ring.get((p + n - 1) % n).copied()
    }
    /// Position of `rank` in the ring.
    pub fn ring_index(&self, rank: usize) -> Option<usize> {
        self.ring_pos.get(rank).copied()
    }
}

/// One host of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct HostPlan {
    /// Host id.
    pub host: u64,
    /// Its ranks, ascending.
    pub ranks: Vec<usize>,
    /// Usable net devices (after the network knobs).
    pub nets: Vec<u32>,
    /// Ring search result on this host (GPU node ids), when it has GPU ranks.
    pub intra: Option<IntraRings>,
}

#[derive(Clone, Debug)]
struct HostCtx {
    sys: Arc<System>,
    paths: Paths,
    nets: NetSelection,
}

#[derive(Clone, Copy, Debug)]
struct RankLoc {
    host: usize,
    ctx: usize,
    gpu: Option<NodeId>,
    cpu: Option<NodeId>,
}

/// The search result for a communicator.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Number of ranks.
    pub nranks: usize,
    /// Hosts, in ring order.
    pub hosts: Vec<HostPlan>,
    /// Channels.
    pub channels: Vec<Channel>,
    /// Each rank's closest usable net device.
    pub primary_nic: Vec<Option<u32>>,
    /// Each rank's backup net device (another port of its NIC, else the next closest).
    pub backup_nic: Vec<Option<u32>>,
    ctxs: Vec<HostCtx>,
    locs: Vec<RankLoc>,
    cfg: TopoConfig,
}

fn path_opts(cfg: &TopoConfig) -> PathOptions {
    PathOptions {
        nvb_disable: cfg.nvb_disable,
        pxn_disable: cfg.pxn_disable,
    }
}

/// Where a rank's traffic starts in its host's system: its GPU, else its CPU.
fn origin(l: &RankLoc) -> Option<NodeId> {
    l.gpu.or(l.cpu)
}

/// Builds the plan. Deterministic: every rank computing it from the same inputs gets the
/// same result.
pub fn plan(ranks: &[RankInfo], systems: &HostSystems, cfg: &TopoConfig) -> Result<Plan> {
    let n = ranks.len();
    if n == 0 {
        return Err(TopoError::Search("no ranks".into()));
    }
    // Distinct systems -> contexts.
    let mut ctxs: Vec<HostCtx> = Vec::new();
    let mut host_order: Vec<u64> = Vec::new();
    let mut host_index: HashMap<u64, usize> = HashMap::new();
    let mut host_ctx: Vec<usize> = Vec::new();
    for (r, info) in ranks.iter().enumerate() {
        if host_index.contains_key(&info.host) {
            continue;
        }
        let sys = systems.get(info.host).ok_or_else(|| TopoError::Rank {
            rank: r,
            msg: format!("no system given for host {:#x}", info.host),
        })?;
        let ci = match ctxs
            .iter()
            .position(|c| Arc::ptr_eq(&c.sys, &sys) || *c.sys == *sys)
        {
            Some(i) => i,
            None => {
                let paths = Paths::compute(&sys, path_opts(cfg));
                let nets = select_nets(&sys, cfg);
                ctxs.push(HostCtx { sys, paths, nets });
                ctxs.len() - 1
            }
        };
        host_index.insert(info.host, host_order.len());
        host_order.push(info.host);
        host_ctx.push(ci);
    }
    let nhosts = host_order.len();
    // Locate ranks.
    let mut locs: Vec<RankLoc> = Vec::with_capacity(n);
    let mut host_ranks: Vec<Vec<usize>> = vec![Vec::new(); nhosts];
    let mut seen_gpu: HashMap<(usize, NodeId), usize> = HashMap::new();
    for (r, info) in ranks.iter().enumerate() {
        let h = host_index.get(&info.host).copied().unwrap_or(0);
        let ci = host_ctx.get(h).copied().unwrap_or(0);
        let Some(ctx) = ctxs.get(ci) else {
            return Err(TopoError::Search("internal: missing host context".into()));
        };
        let sys = &ctx.sys;
        let gpu = match info.gpu {
            Some(b) => Some(sys.gpu_by_busid(b).ok_or_else(|| TopoError::Rank {
                rank: r,
                msg: format!("GPU {b} is not in the topology of host {:#x}", info.host),
            })?),
            None => None,
        };
        if let Some(g) = gpu {
            if let Some(other) = seen_gpu.insert((h, g), r) {
                return Err(TopoError::Rank {
                    rank: r,
                    msg: format!("uses the same GPU as rank {other}"),
                });
            }
        }
        let cpu = gpu
            .and_then(|g| sys.local_cpu(g))
            .or_else(|| info.numa.and_then(|m| sys.cpu_by_numa(m)))
            .or_else(|| sys.cpus().first().copied());
        locs.push(RankLoc {
            host: h,
            ctx: ci,
            gpu,
            cpu,
        });
        if let Some(v) = host_ranks.get_mut(h) {
            v.push(r);
        }
    }
    // Intra-host ring search, cached per (system, GPU set).
    let mut cache: HashMap<(usize, Vec<NodeId>), IntraRings> = HashMap::new();
    let mut host_intra: Vec<Option<IntraRings>> = Vec::with_capacity(nhosts);
    for (h, rs) in host_ranks.iter().enumerate() {
        let ci = host_ctx.get(h).copied().unwrap_or(0);
        let mut gpus: Vec<(u32, NodeId)> = rs
            .iter()
            .filter_map(|&r| locs.get(r).and_then(|l| l.gpu))
            .map(|g| {
                let dev = ctxs
                    .get(ci)
                    .and_then(|c| c.sys.gpu(g))
                    .map(|i| i.dev)
                    .unwrap_or(0);
                (dev, g)
            })
            .collect();
        if gpus.is_empty() {
            host_intra.push(None);
            continue;
        }
        gpus.sort_unstable();
        let key: Vec<NodeId> = gpus.iter().map(|(_, g)| *g).collect();
        let res = match cache.get(&(ci, key.clone())) {
            Some(r) => r.clone(),
            None => {
                let Some(ctx) = ctxs.get(ci) else {
                    return Err(TopoError::Search("internal: missing host context".into()));
                };
                let r = search_rings(&ctx.sys, &ctx.paths, &key, cfg);
                cache.insert((ci, key), r.clone());
                r
            }
        };
        host_intra.push(Some(res));
    }
    // Primary/backup NICs and closest sets per rank.
    let mut primary_nic: Vec<Option<u32>> = vec![None; n];
    let mut backup_nic: Vec<Option<u32>> = vec![None; n];
    let mut closest: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    let mut primary_node: Vec<Option<NodeId>> = vec![None; n];
    for rs in &host_ranks {
        // Spread ranks that share the same closest set over its members.
        let mut groups: HashMap<Vec<NodeId>, usize> = HashMap::new();
        let mut ordered: Vec<usize> = rs.clone();
        ordered.sort_by_key(|&r| {
            let l = locs.get(r);
            let dev = l
                .and_then(|l| {
                    l.gpu
                        .and_then(|g| ctxs.get(l.ctx).and_then(|c| c.sys.gpu(g)))
                })
                .map(|g| g.dev)
                .unwrap_or(u32::MAX);
            (dev, r)
        });
        for r in ordered {
            let Some(l) = locs.get(r).copied() else {
                continue;
            };
            let (Some(ctx), Some(from)) = (ctxs.get(l.ctx), origin(&l)) else {
                continue;
            };
            let set = closest_set(&ctx.sys, &ctx.paths, from, &ctx.nets.usable);
            if set.is_empty() {
                continue;
            }
            let idx = groups.entry(set.clone()).or_insert(0);
            let p = set[*idx % set.len()];
            *idx += 1;
            // Rotate so the rank's own pick comes first.
            let start = set.iter().position(|&x| x == p).unwrap_or(0);
            let mut rot = set.clone();
            rot.rotate_left(start);
            closest[r] = rot;
            primary_node[r] = Some(p);
            primary_nic[r] = ctx.sys.net(p).map(|i| i.dev);
            backup_nic[r] = backup_net(&ctx.sys, &ctx.paths, from, p, &ctx.nets.usable)
                .and_then(|b| ctx.sys.net(b))
                .map(|i| i.dev);
        }
    }
    if nhosts > 1 {
        for (h, &ci) in host_ctx.iter().enumerate() {
            if let Some(ctx) = ctxs.get(ci) {
                if ctx.nets.usable.is_empty() {
                    return Err(TopoError::NoNetwork {
                        host: host_order.get(h).copied().unwrap_or(0),
                        why: ctx.nets.why_none.clone(),
                    });
                }
            }
        }
    }
    // Channel count.
    let mut nch = host_intra
        .iter()
        .flatten()
        .map(|r| r.rings.len())
        .min()
        .unwrap_or(2);
    if nhosts > 1 {
        let nics = host_ranks
            .iter()
            .map(|rs| {
                let mut v: Vec<NodeId> = rs.iter().filter_map(|&r| primary_node[r]).collect();
                v.sort_unstable();
                v.dedup();
                v.len()
            })
            .max()
            .unwrap_or(1)
            .max(1);
        // One or two channels per NIC: enough to use every NIC, no more than the NICs
        // can feed.
        let per_nic = ((nch as f64 / nics as f64).round() as usize).clamp(1, 2);
        nch = (nics * per_nic).min(MAX_CHANNELS);
    }
    let nch = cfg.clamp_channels(nch);
    // Per-channel host segments.
    let tree_pair = double_binary_tree(nhosts);
    let mut channels: Vec<Channel> = Vec::with_capacity(nch);
    let mut send_uses: HashMap<(usize, NodeId), usize> = HashMap::new();
    let mut recv_uses: HashMap<(usize, NodeId), usize> = HashMap::new();
    struct Seg {
        ranks: Vec<usize>,
        nic: Vec<(usize, Option<NodeId>)>,
        nic_in: Option<NodeId>,
        nic_out: Option<NodeId>,
        bw_in: f64,
        bw_out: f64,
    }
    let mut all_segs: Vec<Vec<Seg>> = Vec::with_capacity(nch);
    for c in 0..nch {
        let mut segs: Vec<Seg> = Vec::with_capacity(nhosts);
        for (h, rs) in host_ranks.iter().enumerate() {
            let ci = host_ctx.get(h).copied().unwrap_or(0);
            let Some(ctx) = ctxs.get(ci) else { continue };
            let sys = &ctx.sys;
            let gpu_rank: HashMap<NodeId, usize> = rs
                .iter()
                .filter_map(|&r| locs.get(r).and_then(|l| l.gpu).map(|g| (g, r)))
                .collect();
            let mut order: Vec<usize> = Vec::with_capacity(rs.len());
            let mut nic_in = None;
            let mut nic_out = None;
            if let Some(Some(intra)) = host_intra.get(h) {
                let ring = intra
                    .rings
                    .get(c % intra.rings.len().max(1))
                    .cloned()
                    .unwrap_or_default();
                let mut rranks: Vec<usize> = ring
                    .iter()
                    .filter_map(|g| gpu_rank.get(g).copied())
                    .collect();
                if nhosts > 1 {
                    // The channel's NIC: the distinct primaries in device order, round robin.
                    let mut prim: Vec<(u32, NodeId)> = rranks
                        .iter()
                        .filter_map(|&r| primary_node[r])
                        .map(|p| (sys.net(p).map(|i| i.dev).unwrap_or(0), p))
                        .collect();
                    prim.sort_unstable();
                    prim.dedup();
                    if !prim.is_empty() {
                        let (_, n_c) = prim[c % prim.len()];
                        // Enter at the lowest-device GPU whose primary is n_c.
                        let entry = rranks
                            .iter()
                            .copied()
                            .filter(|&r| primary_node[r] == Some(n_c))
                            .min_by_key(|&r| {
                                locs.get(r)
                                    .and_then(|l| l.gpu)
                                    .and_then(|g| sys.gpu(g))
                                    .map(|i| i.dev)
                                    .unwrap_or(u32::MAX)
                            });
                        if let Some(e) = entry {
                            if let Some(p) = rranks.iter().position(|&r| r == e) {
                                rranks.rotate_left(p);
                            }
                        }
                        nic_in = Some(n_c);
                        let last = rranks.last().copied();
                        let out_gpu = last.and_then(|r| locs.get(r)).and_then(origin);
                        nic_out = Some(n_c);
                        if let (Some(g), Some(lr)) = (out_gpu, last) {
                            let own = primary_node[lr];
                            let to_in = ctx.paths.kind(g, n_c);
                            let use_own = match cfg.cross_nic {
                                CrossNic::Never => false,
                                CrossNic::Allow => true,
                                CrossNic::Auto => to_in > PathType::Pxn,
                            };
                            if use_own {
                                if let Some(o) = own {
                                    if crate::nic::closeness(sys, &ctx.paths, g, o)
                                        < crate::nic::closeness(sys, &ctx.paths, g, n_c)
                                    {
                                        nic_out = Some(o);
                                    }
                                }
                            }
                        }
                    }
                }
                order.extend(rranks);
            }
            // Ranks without GPU: by NUMA node, then rank.
            let mut cpu_ranks: Vec<(u32, usize)> = rs
                .iter()
                .copied()
                .filter(|&r| locs.get(r).is_some_and(|l| l.gpu.is_none()))
                .map(|r| {
                    let numa = locs
                        .get(r)
                        .and_then(|l| l.cpu)
                        .and_then(|cpu| sys.cpu(cpu))
                        .map(|i| i.numa)
                        .unwrap_or(0);
                    (numa, r)
                })
                .collect();
            cpu_ranks.sort_unstable();
            let mut cr: Vec<usize> = cpu_ranks.into_iter().map(|(_, r)| r).collect();
            if order.is_empty() && !cr.is_empty() {
                let len = cr.len();
                cr.rotate_left(c % len);
            }
            order.extend(cr);
            if nic_in.is_none() && nhosts > 1 {
                nic_in = order
                    .first()
                    .and_then(|&r| closest[r].get(c % closest[r].len().max(1)).copied());
                nic_out = order
                    .last()
                    .and_then(|&r| closest[r].get(c % closest[r].len().max(1)).copied());
                if cfg.cross_nic == CrossNic::Never {
                    nic_out = nic_in;
                }
            }
            // NIC per rank on this channel.
            let first = order.first().copied();
            let last = order.last().copied();
            let nic: Vec<(usize, Option<NodeId>)> = order
                .iter()
                .map(|&r| {
                    let pick = if nhosts > 1 && Some(r) == first {
                        nic_in
                    } else if nhosts > 1 && Some(r) == last {
                        nic_out
                    } else {
                        let s = &closest[r];
                        if s.is_empty() {
                            None
                        } else {
                            s.get(c % s.len()).copied()
                        }
                    };
                    (r, pick)
                })
                .collect();
            let bw_of = |r: Option<usize>, net: Option<NodeId>| -> f64 {
                match (r.and_then(|r| locs.get(r)).and_then(origin), net) {
                    (Some(o), Some(x)) => ctx.paths.bw(o, x),
                    _ => 0.0,
                }
            };
            if nhosts > 1 {
                if let Some(x) = nic_in {
                    *recv_uses.entry((h, x)).or_insert(0) += 1;
                }
                if let Some(x) = nic_out {
                    *send_uses.entry((h, x)).or_insert(0) += 1;
                }
            }
            segs.push(Seg {
                bw_in: bw_of(first, nic_in),
                bw_out: bw_of(last, nic_out),
                ranks: order,
                nic,
                nic_in,
                nic_out,
            });
        }
        all_segs.push(segs);
    }
    // Bandwidths.
    let intra_bw = |h: usize, segs: &[Seg]| -> f64 {
        match host_intra.get(h).and_then(Option::as_ref) {
            Some(ir) => ir.total() / nch as f64,
            None => {
                // Host backend: the slowest CPU-to-CPU hop of the segment.
                let ci = host_ctx.get(h).copied().unwrap_or(0);
                let Some(ctx) = ctxs.get(ci) else { return 0.0 };
                let rs = segs.get(h).map(|s| s.ranks.as_slice()).unwrap_or(&[]);
                rs.windows(2)
                    .filter_map(|w| {
                        let a = locs.get(w[0]).and_then(|l| l.cpu)?;
                        let b = locs.get(w[1]).and_then(|l| l.cpu)?;
                        Some(ctx.paths.bw(a, b))
                    })
                    .fold(LOC_BW, f64::min)
            }
        }
    };
    for (c, segs) in all_segs.into_iter().enumerate() {
        let bw_intra = (0..nhosts)
            .map(|h| intra_bw(h, &segs))
            .fold(f64::INFINITY, f64::min);
        let bw_intra = if bw_intra.is_finite() { bw_intra } else { 0.0 };
        let bw_inter = if nhosts > 1 {
            let mut b = bw_intra;
            for (h, s) in segs.iter().enumerate() {
                let ci = host_ctx.get(h).copied().unwrap_or(0);
                let Some(ctx) = ctxs.get(ci) else { continue };
                if let Some(x) = s.nic_in {
                    let k = recv_uses.get(&(h, x)).copied().unwrap_or(1).max(1) as f64;
                    let port = ctx.sys.net(x).map(NetInfo::bw).unwrap_or(0.0);
                    b = b.min(port / k).min(s.bw_in / k);
                }
                if let Some(x) = s.nic_out {
                    let k = send_uses.get(&(h, x)).copied().unwrap_or(1).max(1) as f64;
                    let port = ctx.sys.net(x).map(NetInfo::bw).unwrap_or(0.0);
                    b = b.min(port / k).min(s.bw_out / k);
                }
            }
            Some(b)
        } else {
            None
        };
        // Ring.
        let ring: Vec<usize> = segs.iter().flat_map(|s| s.ranks.iter().copied()).collect();
        let mut ring_pos = vec![0usize; n];
        for (i, &r) in ring.iter().enumerate() {
            if let Some(p) = ring_pos.get_mut(r) {
                *p = i;
            }
        }
        // Tree: hosts in a double binary tree; inside a host a chain in ring order.
        let t = &tree_pair[c % 2];
        let mut up = vec![None; n];
        let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
        let head = |h: usize| segs.get(h).and_then(|s| s.ranks.first().copied());
        for (h, s) in segs.iter().enumerate() {
            for w in s.ranks.windows(2) {
                up[w[1]] = Some(w[0]);
                down[w[0]].push(w[1]);
            }
            if let Some(me) = s.ranks.first().copied() {
                if let Some(p) = t.up.get(h).copied().flatten().and_then(head) {
                    up[me] = Some(p);
                }
                let kids: Vec<usize> = t
                    .down
                    .get(h)
                    .map(|d| d.iter().filter_map(|&k| head(k)).collect())
                    .unwrap_or_default();
                // Children on other hosts first, then the next rank on this host.
                let local = std::mem::take(&mut down[me]);
                down[me] = kids;
                down[me].extend(local);
            }
        }
        let root = head(t.root).unwrap_or(0);
        // NIC per rank.
        let mut nic = vec![None; n];
        for (h, s) in segs.iter().enumerate() {
            let ci = host_ctx.get(h).copied().unwrap_or(0);
            let Some(ctx) = ctxs.get(ci) else { continue };
            for &(r, x) in &s.nic {
                if let Some(slot) = nic.get_mut(r) {
                    *slot = x.and_then(|x| ctx.sys.net(x)).map(|i| i.dev);
                }
            }
        }
        channels.push(Channel {
            ring,
            ring_pos,
            tree: Tree { root, up, down },
            nic,
            bw_intra,
            bw_inter,
        });
    }
    let hosts = host_order
        .iter()
        .enumerate()
        .map(|(h, &id)| {
            let ci = host_ctx.get(h).copied().unwrap_or(0);
            let nets = ctxs
                .get(ci)
                .map(|c| {
                    c.nets
                        .usable
                        .iter()
                        .filter_map(|&x| c.sys.net(x).map(|i| i.dev))
                        .collect()
                })
                .unwrap_or_default();
            HostPlan {
                host: id,
                ranks: host_ranks.get(h).cloned().unwrap_or_default(),
                nets,
                intra: host_intra.get(h).cloned().flatten(),
            }
        })
        .collect();
    Ok(Plan {
        nranks: n,
        hosts,
        channels,
        primary_nic,
        backup_nic,
        ctxs,
        locs,
        cfg: cfg.clone(),
    })
}

impl Plan {
    /// The transport between ranks `a` and `b` (computed on demand).
    pub fn transport(&self, a: usize, b: usize) -> Option<PeerTransport> {
        let la = self.locs.get(a)?;
        let lb = self.locs.get(b)?;
        if a == b {
            return Some(PeerTransport {
                transport: Transport::Loc,
                path: PathType::Loc,
                bw: LOC_BW,
                reason: TransportReason::SameRank,
            });
        }
        if la.host != lb.host {
            return Some(PeerTransport {
                transport: Transport::Net,
                path: PathType::Net,
                bw: 0.0,
                reason: TransportReason::DifferentHosts,
            });
        }
        let ctx = self.ctxs.get(la.ctx)?;
        let (path, bw, no_p2p) = match (la.gpu, lb.gpu) {
            (Some(ga), Some(gb)) => {
                let p = ctx.paths.kind(ga, gb);
                let bw = ctx.paths.bw(ga, gb);
                let why = match self.cfg.effective_p2p_level() {
                    None => Some(NoP2p::Disabled),
                    Some(_) if p == PathType::Dis => Some(NoP2p::Disconnected),
                    Some(level) if p > level => Some(NoP2p::BeyondLevel { path: p, level }),
                    Some(level) => {
                        return Some(PeerTransport {
                            transport: Transport::P2p(p),
                            path: p,
                            bw,
                            reason: TransportReason::P2pWithinLevel { path: p, level },
                        })
                    }
                };
                (p, bw, why)
            }
            _ => {
                let (x, y) = (origin(la), origin(lb));
                let (p, bw) = match (x, y) {
                    (Some(x), Some(y)) => (ctx.paths.kind(x, y), ctx.paths.bw(x, y)),
                    _ => (PathType::Loc, LOC_BW),
                };
                (p, bw, Some(NoP2p::NoGpu))
            }
        };
        let why = no_p2p.unwrap_or(NoP2p::NoGpu);
        Some(if self.cfg.shm_disable {
            PeerTransport {
                transport: Transport::Net,
                path,
                bw,
                reason: TransportReason::ShmDisabled(why),
            }
        } else {
            PeerTransport {
                transport: Transport::Shm,
                path,
                bw,
                reason: TransportReason::SharedMemory(why),
            }
        })
    }

    /// The system of a rank's host.
    pub fn system(&self, rank: usize) -> Option<&System> {
        let l = self.locs.get(rank)?;
        self.ctxs.get(l.ctx).map(|c| c.sys.as_ref())
    }

    /// The paths of a rank's host.
    pub fn paths(&self, rank: usize) -> Option<&Paths> {
        let l = self.locs.get(rank)?;
        self.ctxs.get(l.ctx).map(|c| &c.paths)
    }

    /// A rank's GPU node in its host's system.
    pub fn gpu_node(&self, rank: usize) -> Option<NodeId> {
        self.locs.get(rank).and_then(|l| l.gpu)
    }

    /// A rank's CPU node in its host's system.
    pub fn cpu_node(&self, rank: usize) -> Option<NodeId> {
        self.locs.get(rank).and_then(|l| l.cpu)
    }

    /// Index into [`Plan::hosts`] of a rank's host.
    pub fn host_of(&self, rank: usize) -> Option<usize> {
        self.locs.get(rank).map(|l| l.host)
    }

    /// The port record of net device `dev` on `rank`'s host.
    pub fn net_info(&self, rank: usize, dev: u32) -> Option<&NetInfo> {
        let sys = self.system(rank)?;
        sys.net_by_dev(dev).and_then(|n| sys.net(n))
    }

    /// The config the plan was made with.
    pub fn config(&self) -> &TopoConfig {
        &self.cfg
    }
}
