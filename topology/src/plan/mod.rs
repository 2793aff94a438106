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
use crate::nic::{backup_net, closeness, closest_set, select_nets, NetSelection};
use crate::paths::{PathOptions, Paths};
use crate::search::{double_binary_tree, search_rings, IntraRings, NodeTree};
use crate::types::{BusId, PathType, LOC_BW};

mod channels;
use channels::Layout;

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
    let hosts = index_hosts(ranks, systems, cfg)?;
    let (locs, host_ranks) = locate_ranks(ranks, &hosts)?;
    let host_intra = search_hosts(&host_ranks, &locs, &hosts, cfg)?;
    let nics = assign_nics(n, &host_ranks, &locs, &hosts.ctxs);
    if hosts.order.len() > 1 {
        require_networks(&hosts)?;
    }
    let layout = Layout {
        cfg,
        hosts: &hosts,
        locs: &locs,
        host_ranks: &host_ranks,
        host_intra: &host_intra,
        nics: &nics,
    };
    let channels = layout.channels();
    let hosts_out = host_plans(&hosts, &host_ranks, &host_intra);
    Ok(Plan {
        nranks: n,
        hosts: hosts_out,
        channels,
        primary_nic: nics.primary_nic,
        backup_nic: nics.backup_nic,
        ctxs: hosts.ctxs,
        locs,
        cfg: cfg.clone(),
    })
}

/// The hosts of a communicator, in order of their first rank, and the distinct systems they
/// run: hosts with equal systems share one context, so paths and port selection are
/// computed once per kind of machine, not once per host.
struct HostIndex {
    ctxs: Vec<HostCtx>,
    /// Host ids, in order of first rank.
    order: Vec<u64>,
    /// Each host's context (index into `ctxs`).
    ctx_of: Vec<usize>,
    /// Host id -> position in `order`.
    index: HashMap<u64, usize>,
}

impl HostIndex {
    fn ctx_index(&self, h: usize) -> usize {
        self.ctx_of.get(h).copied().unwrap_or(0)
    }

    fn ctx(&self, h: usize) -> Option<&HostCtx> {
        self.ctxs.get(self.ctx_index(h))
    }

    /// The context of `sys`, made on first sight.
    fn ctx_for(&mut self, sys: Arc<System>, cfg: &TopoConfig) -> usize {
        if let Some(i) = self
            .ctxs
            .iter()
            .position(|c| Arc::ptr_eq(&c.sys, &sys) || *c.sys == *sys)
        {
            return i;
        }
        let paths = Paths::compute(&sys, path_opts(cfg));
        let nets = select_nets(&sys, cfg);
        self.ctxs.push(HostCtx { sys, paths, nets });
        self.ctxs.len() - 1
    }
}

fn index_hosts(ranks: &[RankInfo], systems: &HostSystems, cfg: &TopoConfig) -> Result<HostIndex> {
    let mut hosts = HostIndex {
        ctxs: Vec::new(),
        order: Vec::new(),
        ctx_of: Vec::new(),
        index: HashMap::new(),
    };
    for (r, info) in ranks.iter().enumerate() {
        if hosts.index.contains_key(&info.host) {
            continue;
        }
        let sys = systems.get(info.host).ok_or_else(|| TopoError::Rank {
            rank: r,
            msg: format!("no system given for host {:#x}", info.host),
        })?;
        let ci = hosts.ctx_for(sys, cfg);
        hosts.index.insert(info.host, hosts.order.len());
        hosts.order.push(info.host);
        hosts.ctx_of.push(ci);
    }
    Ok(hosts)
}

/// Each rank's place in its host's system, and each host's ranks (ascending).
fn locate_ranks(ranks: &[RankInfo], hosts: &HostIndex) -> Result<(Vec<RankLoc>, Vec<Vec<usize>>)> {
    let mut locs: Vec<RankLoc> = Vec::with_capacity(ranks.len());
    let mut host_ranks: Vec<Vec<usize>> = vec![Vec::new(); hosts.order.len()];
    let mut seen_gpu: HashMap<(usize, NodeId), usize> = HashMap::new();
    for (r, info) in ranks.iter().enumerate() {
        let h = hosts.index.get(&info.host).copied().unwrap_or(0);
        let ci = hosts.ctx_index(h);
        let Some(ctx) = hosts.ctxs.get(ci) else {
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
    Ok((locs, host_ranks))
}

/// The intra-host ring search of each host with GPU ranks, cached per (system, GPU set):
/// the hosts of a cluster are mostly alike, and the search is the costly step.
fn search_hosts(
    host_ranks: &[Vec<usize>],
    locs: &[RankLoc],
    hosts: &HostIndex,
    cfg: &TopoConfig,
) -> Result<Vec<Option<IntraRings>>> {
    let mut cache: HashMap<(usize, Vec<NodeId>), IntraRings> = HashMap::new();
    let mut host_intra: Vec<Option<IntraRings>> = Vec::with_capacity(host_ranks.len());
    for (h, rs) in host_ranks.iter().enumerate() {
        let ci = hosts.ctx_index(h);
        let key = host_gpus(rs, locs, hosts.ctxs.get(ci));
        if key.is_empty() {
            host_intra.push(None);
            continue;
        }
        let res = match cache.get(&(ci, key.clone())) {
            Some(r) => r.clone(),
            None => {
                let Some(ctx) = hosts.ctxs.get(ci) else {
                    return Err(TopoError::Search("internal: missing host context".into()));
                };
                let r = search_rings(&ctx.sys, &ctx.paths, &key, cfg);
                cache.insert((ci, key), r.clone());
                r
            }
        };
        host_intra.push(Some(res));
    }
    Ok(host_intra)
}

/// The GPU nodes of ranks `rs`, in device order (then node order).
fn host_gpus(rs: &[usize], locs: &[RankLoc], ctx: Option<&HostCtx>) -> Vec<NodeId> {
    let mut gpus: Vec<(u32, NodeId)> = rs
        .iter()
        .filter_map(|&r| locs.get(r).and_then(|l| l.gpu))
        .map(|g| {
            let dev = ctx.and_then(|c| c.sys.gpu(g)).map(|i| i.dev).unwrap_or(0);
            (dev, g)
        })
        .collect();
    gpus.sort_unstable();
    gpus.into_iter().map(|(_, g)| g).collect()
}

/// Each rank's ports: the set tied for closest to it (rotated so that its own pick comes
/// first), that pick as node and device (the primary), and the backup device.
struct RankNics {
    primary_nic: Vec<Option<u32>>,
    backup_nic: Vec<Option<u32>>,
    closest: Vec<Vec<NodeId>>,
    primary_node: Vec<Option<NodeId>>,
}

fn assign_nics(
    n: usize,
    host_ranks: &[Vec<usize>],
    locs: &[RankLoc],
    ctxs: &[HostCtx],
) -> RankNics {
    let mut nics = RankNics {
        primary_nic: vec![None; n],
        backup_nic: vec![None; n],
        closest: vec![Vec::new(); n],
        primary_node: vec![None; n],
    };
    for rs in host_ranks {
        // Ranks that share the same closest set are spread over its members, in GPU
        // device order so that the spread is the same on every host.
        let mut groups: HashMap<Vec<NodeId>, usize> = HashMap::new();
        let mut ordered: Vec<usize> = rs.clone();
        ordered.sort_by_key(|&r| {
            let dev = locs
                .get(r)
                .and_then(|l| {
                    l.gpu
                        .and_then(|g| ctxs.get(l.ctx).and_then(|c| c.sys.gpu(g)))
                })
                .map(|g| g.dev)
                .unwrap_or(u32::MAX);
            (dev, r)
        });
        for r in ordered {
            nics.assign(r, locs, ctxs, &mut groups);
        }
    }
    nics
}

impl RankNics {
    /// Picks rank `r`'s ports; `groups` counts the picks made so far per closest set.
    fn assign(
        &mut self,
        r: usize,
        locs: &[RankLoc],
        ctxs: &[HostCtx],
        groups: &mut HashMap<Vec<NodeId>, usize>,
    ) {
        let Some(l) = locs.get(r).copied() else {
            return;
        };
        let (Some(ctx), Some(from)) = (ctxs.get(l.ctx), origin(&l)) else {
            return;
        };
        let set = closest_set(&ctx.sys, &ctx.paths, from, &ctx.nets.usable);
        if set.is_empty() {
            return;
        }
        let idx = groups.entry(set.clone()).or_insert(0);
        let p = set[*idx % set.len()];
        *idx += 1;
        let start = set.iter().position(|&x| x == p).unwrap_or(0);
        let mut rot = set;
        rot.rotate_left(start);
        self.closest[r] = rot;
        self.primary_node[r] = Some(p);
        self.primary_nic[r] = ctx.sys.net(p).map(|i| i.dev);
        self.backup_nic[r] = backup_net(&ctx.sys, &ctx.paths, from, p, &ctx.nets.usable)
            .and_then(|b| ctx.sys.net(b))
            .map(|i| i.dev);
    }
}

/// Across hosts every host needs a usable port.
fn require_networks(hosts: &HostIndex) -> Result<()> {
    for (h, &ci) in hosts.ctx_of.iter().enumerate() {
        if let Some(ctx) = hosts.ctxs.get(ci) {
            if ctx.nets.usable.is_empty() {
                return Err(TopoError::NoNetwork {
                    host: hosts.order.get(h).copied().unwrap_or(0),
                    why: ctx.nets.why_none.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Host plans, in ring order.
fn host_plans(
    hosts: &HostIndex,
    host_ranks: &[Vec<usize>],
    host_intra: &[Option<IntraRings>],
) -> Vec<HostPlan> {
    hosts
        .order
        .iter()
        .enumerate()
        .map(|(h, &id)| {
            let nets = hosts
                .ctx(h)
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
        .collect()
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
