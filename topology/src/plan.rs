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

/// One host's part of one channel's ring.
struct Seg {
    ranks: Vec<usize>,
    /// The port each rank uses on the channel.
    nic: Vec<(usize, Option<NodeId>)>,
    /// The port the ring enters the host on (across hosts).
    nic_in: Option<NodeId>,
    /// The port the ring leaves the host on (across hosts).
    nic_out: Option<NodeId>,
    bw_in: f64,
    bw_out: f64,
}

/// How many channels enter (`recv`) and leave (`send`) each (host, port): ports shared by
/// channels share their bandwidth.
#[derive(Default)]
struct PortUses {
    send: HashMap<(usize, NodeId), usize>,
    recv: HashMap<(usize, NodeId), usize>,
}

impl PortUses {
    fn count(&mut self, h: usize, seg: &Seg) {
        if let Some(x) = seg.nic_in {
            *self.recv.entry((h, x)).or_insert(0) += 1;
        }
        if let Some(x) = seg.nic_out {
            *self.send.entry((h, x)).or_insert(0) += 1;
        }
    }
}

/// What the channels are built from: every choice made before them.
struct Layout<'a> {
    cfg: &'a TopoConfig,
    hosts: &'a HostIndex,
    locs: &'a [RankLoc],
    host_ranks: &'a [Vec<usize>],
    host_intra: &'a [Option<IntraRings>],
    nics: &'a RankNics,
}

impl Layout<'_> {
    fn nhosts(&self) -> usize {
        self.hosts.order.len()
    }

    /// Every channel. The segments of all channels come first: a port's bandwidth is shared
    /// by all the channels that use it, which is only known once every channel has chosen.
    fn channels(&self) -> Vec<Channel> {
        let nch = self.channel_count();
        let tree_pair = double_binary_tree(self.nhosts());
        let mut uses = PortUses::default();
        let all_segs: Vec<Vec<Seg>> = (0..nch).map(|c| self.segments(c, &mut uses)).collect();
        all_segs
            .into_iter()
            .enumerate()
            .map(|(c, segs)| self.channel(nch, segs, &uses, &tree_pair[c % 2]))
            .collect()
    }

    /// As many channels as the intra-host search found rings (2 without GPUs); across
    /// hosts, one or two per NIC: enough to use every NIC, no more than the NICs can feed.
    /// Then `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`.
    fn channel_count(&self) -> usize {
        let mut nch = self
            .host_intra
            .iter()
            .flatten()
            .map(|r| r.rings.len())
            .min()
            .unwrap_or(2);
        if self.nhosts() > 1 {
            let nics = self
                .host_ranks
                .iter()
                .map(|rs| {
                    let mut v: Vec<NodeId> = rs
                        .iter()
                        .filter_map(|&r| self.nics.primary_node[r])
                        .collect();
                    v.sort_unstable();
                    v.dedup();
                    v.len()
                })
                .max()
                .unwrap_or(1)
                .max(1);
            let per_nic = ((nch as f64 / nics as f64).round() as usize).clamp(1, 2);
            nch = (nics * per_nic).min(MAX_CHANNELS);
        }
        self.cfg.clamp_channels(nch)
    }

    /// Channel `c`'s segment on every host, counting the ports they use in `uses`.
    fn segments(&self, c: usize, uses: &mut PortUses) -> Vec<Seg> {
        let mut segs: Vec<Seg> = Vec::with_capacity(self.nhosts());
        for (h, rs) in self.host_ranks.iter().enumerate() {
            let Some(ctx) = self.hosts.ctx(h) else {
                continue;
            };
            let seg = self.host_segment(c, h, rs, ctx);
            if self.nhosts() > 1 {
                uses.count(h, &seg);
            }
            segs.push(seg);
        }
        segs
    }

    /// Host `h`'s segment of channel `c`: its GPU ranks in the channel's intra-host ring
    /// order, then its ranks without GPU; the ports the ring enters and leaves on, and the
    /// port of every rank.
    fn host_segment(&self, c: usize, h: usize, rs: &[usize], ctx: &HostCtx) -> Seg {
        let multi = self.nhosts() > 1;
        let mut order: Vec<usize> = Vec::with_capacity(rs.len());
        let (mut nic_in, mut nic_out) = (None, None);
        if let Some(Some(intra)) = self.host_intra.get(h) {
            let (gpu_order, ends) = self.gpu_ring(c, intra, rs, ctx);
            if let Some((i, o)) = ends {
                (nic_in, nic_out) = (Some(i), Some(o));
            }
            order.extend(gpu_order);
        }
        let rotate = order.is_empty();
        order.extend(self.cpu_ranks(c, rs, &ctx.sys, rotate));
        if nic_in.is_none() && multi {
            (nic_in, nic_out) = self.closest_ends(c, &order);
        }
        let (first, last) = (order.first().copied(), order.last().copied());
        Seg {
            nic: self.rank_ports(c, &order, nic_in, nic_out),
            bw_in: self.port_bw(ctx, first, nic_in),
            bw_out: self.port_bw(ctx, last, nic_out),
            ranks: order,
            nic_in,
            nic_out,
        }
    }

    /// The host's GPU ranks in the order of channel `c`'s intra-host ring. Across hosts the
    /// ring is rotated to enter at a GPU whose primary is the channel's port, and the ports
    /// it enters and leaves on are returned with it.
    fn gpu_ring(
        &self,
        c: usize,
        intra: &IntraRings,
        rs: &[usize],
        ctx: &HostCtx,
    ) -> (Vec<usize>, Option<(NodeId, NodeId)>) {
        let gpu_rank: HashMap<NodeId, usize> = rs
            .iter()
            .filter_map(|&r| self.locs.get(r).and_then(|l| l.gpu).map(|g| (g, r)))
            .collect();
        let mut ranks: Vec<usize> = intra
            .rings
            .get(c % intra.rings.len().max(1))
            .map(|ring| {
                ring.iter()
                    .filter_map(|g| gpu_rank.get(g).copied())
                    .collect()
            })
            .unwrap_or_default();
        if self.nhosts() <= 1 {
            return (ranks, None);
        }
        let Some(nic) = self.channel_port(c, &ranks, &ctx.sys) else {
            return (ranks, None);
        };
        self.enter_at(nic, &mut ranks, &ctx.sys);
        let out = self.exit_port(nic, &ranks, ctx);
        (ranks, Some((nic, out)))
    }

    /// The channel's port on this host: the distinct primaries of `ranks` in device order,
    /// round robin over channels.
    fn channel_port(&self, c: usize, ranks: &[usize], sys: &System) -> Option<NodeId> {
        let mut prim: Vec<(u32, NodeId)> = ranks
            .iter()
            .filter_map(|&r| self.nics.primary_node[r])
            .map(|p| (sys.net(p).map(|i| i.dev).unwrap_or(0), p))
            .collect();
        prim.sort_unstable();
        prim.dedup();
        if prim.is_empty() {
            return None;
        }
        Some(prim[c % prim.len()].1)
    }

    /// Rotates `ranks` to start at the lowest-device GPU whose primary is `nic`.
    fn enter_at(&self, nic: NodeId, ranks: &mut [usize], sys: &System) {
        let entry = ranks
            .iter()
            .copied()
            .filter(|&r| self.nics.primary_node[r] == Some(nic))
            .min_by_key(|&r| {
                self.locs
                    .get(r)
                    .and_then(|l| l.gpu)
                    .and_then(|g| sys.gpu(g))
                    .map(|i| i.dev)
                    .unwrap_or(u32::MAX)
            });
        if let Some(p) = entry.and_then(|e| ranks.iter().position(|&r| r == e)) {
            ranks.rotate_left(p);
        }
    }

    /// The port the ring leaves the host on: the one it entered on (`nic`), unless
    /// `NCCL_CROSS_NIC` lets the last GPU use its own primary and that is closer to it.
    /// `Auto` allows it only when `nic` is farther than PXN from that GPU.
    fn exit_port(&self, nic: NodeId, ranks: &[usize], ctx: &HostCtx) -> NodeId {
        let last = ranks.last().copied();
        let out_gpu = last.and_then(|r| self.locs.get(r)).and_then(origin);
        let (Some(g), Some(lr)) = (out_gpu, last) else {
            return nic;
        };
        let use_own = match self.cfg.cross_nic {
            CrossNic::Never => false,
            CrossNic::Allow => true,
            CrossNic::Auto => ctx.paths.kind(g, nic) > PathType::Pxn,
        };
        match self.nics.primary_node[lr] {
            Some(own)
                if use_own
                    && closeness(&ctx.sys, &ctx.paths, g, own)
                        < closeness(&ctx.sys, &ctx.paths, g, nic) =>
            {
                own
            }
            _ => nic,
        }
    }

    /// The host's ranks without GPU, by NUMA node then rank. `rotate` (a host without GPU
    /// ranks): start channel `c` `c` ranks further, so channels begin at different ranks.
    fn cpu_ranks(&self, c: usize, rs: &[usize], sys: &System, rotate: bool) -> Vec<usize> {
        let mut cpu_ranks: Vec<(u32, usize)> = rs
            .iter()
            .copied()
            .filter(|&r| self.locs.get(r).is_some_and(|l| l.gpu.is_none()))
            .map(|r| {
                let numa = self
                    .locs
                    .get(r)
                    .and_then(|l| l.cpu)
                    .and_then(|cpu| sys.cpu(cpu))
                    .map(|i| i.numa)
                    .unwrap_or(0);
                (numa, r)
            })
            .collect();
        cpu_ranks.sort_unstable();
        let mut ranks: Vec<usize> = cpu_ranks.into_iter().map(|(_, r)| r).collect();
        if rotate && !ranks.is_empty() {
            let len = ranks.len();
            ranks.rotate_left(c % len);
        }
        ranks
    }

    /// Entry and exit ports of a segment that no GPU chose them for: the first and last
    /// ranks' closest ports, round robin over channels (one rail with `NCCL_CROSS_NIC=0`).
    fn closest_ends(&self, c: usize, order: &[usize]) -> (Option<NodeId>, Option<NodeId>) {
        let pick = |&r: &usize| {
            let set = &self.nics.closest[r];
            set.get(c % set.len().max(1)).copied()
        };
        let nic_in = order.first().and_then(pick);
        let nic_out = if self.cfg.cross_nic == CrossNic::Never {
            nic_in
        } else {
            order.last().and_then(pick)
        };
        (nic_in, nic_out)
    }

    /// Each rank's port on channel `c`: across hosts the segment's ends use its entry and
    /// exit ports; every other rank its closest ports, round robin over channels.
    fn rank_ports(
        &self,
        c: usize,
        order: &[usize],
        nic_in: Option<NodeId>,
        nic_out: Option<NodeId>,
    ) -> Vec<(usize, Option<NodeId>)> {
        let multi = self.nhosts() > 1;
        let (first, last) = (order.first().copied(), order.last().copied());
        order
            .iter()
            .map(|&r| {
                let pick = if multi && Some(r) == first {
                    nic_in
                } else if multi && Some(r) == last {
                    nic_out
                } else {
                    let s = &self.nics.closest[r];
                    if s.is_empty() {
                        None
                    } else {
                        s.get(c % s.len()).copied()
                    }
                };
                (r, pick)
            })
            .collect()
    }

    /// Path bandwidth from rank `r` to port `net`; 0 when either is unknown.
    fn port_bw(&self, ctx: &HostCtx, r: Option<usize>, net: Option<NodeId>) -> f64 {
        match (r.and_then(|r| self.locs.get(r)).and_then(origin), net) {
            (Some(o), Some(x)) => ctx.paths.bw(o, x),
            _ => 0.0,
        }
    }

    /// One channel from its host segments (in host order).
    fn channel(&self, nch: usize, segs: Vec<Seg>, uses: &PortUses, t: &NodeTree) -> Channel {
        let n = self.locs.len();
        let bw_intra = (0..self.nhosts())
            .map(|h| self.intra_bw(h, nch, &segs))
            .fold(f64::INFINITY, f64::min);
        let bw_intra = if bw_intra.is_finite() { bw_intra } else { 0.0 };
        let bw_inter = (self.nhosts() > 1).then(|| self.inter_bw(bw_intra, &segs, uses));
        let ring: Vec<usize> = segs.iter().flat_map(|s| s.ranks.iter().copied()).collect();
        let mut ring_pos = vec![0usize; n];
        for (i, &r) in ring.iter().enumerate() {
            if let Some(p) = ring_pos.get_mut(r) {
                *p = i;
            }
        }
        Channel {
            tree: rank_tree(n, &segs, t),
            nic: self.rank_devices(&segs),
            ring,
            ring_pos,
            bw_intra,
            bw_inter,
        }
    }

    /// Host `h`'s bandwidth per channel: its ring search's total over the channels, or on
    /// the host backend the slowest CPU-to-CPU hop of its segment.
    fn intra_bw(&self, h: usize, nch: usize, segs: &[Seg]) -> f64 {
        if let Some(ir) = self.host_intra.get(h).and_then(Option::as_ref) {
            return ir.total() / nch as f64;
        }
        let Some(ctx) = self.hosts.ctx(h) else {
            return 0.0;
        };
        let rs = segs.get(h).map(|s| s.ranks.as_slice()).unwrap_or(&[]);
        rs.windows(2)
            .filter_map(|w| {
                let a = self.locs.get(w[0]).and_then(|l| l.cpu)?;
                let b = self.locs.get(w[1]).and_then(|l| l.cpu)?;
                Some(ctx.paths.bw(a, b))
            })
            .fold(LOC_BW, f64::min)
    }

    /// The channel's bandwidth between hosts: at most `bw_intra`, and per entry / exit port
    /// its speed and its path's bandwidth, each shared by the channels using that port.
    fn inter_bw(&self, bw_intra: f64, segs: &[Seg], uses: &PortUses) -> f64 {
        let mut b = bw_intra;
        for (h, s) in segs.iter().enumerate() {
            let Some(ctx) = self.hosts.ctx(h) else {
                continue;
            };
            if let Some(x) = s.nic_in {
                let k = uses.recv.get(&(h, x)).copied().unwrap_or(1).max(1) as f64;
                let port = ctx.sys.net(x).map(NetInfo::bw).unwrap_or(0.0);
                b = b.min(port / k).min(s.bw_in / k);
            }
            if let Some(x) = s.nic_out {
                let k = uses.send.get(&(h, x)).copied().unwrap_or(1).max(1) as f64;
                let port = ctx.sys.net(x).map(NetInfo::bw).unwrap_or(0.0);
                b = b.min(port / k).min(s.bw_out / k);
            }
        }
        b
    }

    /// Each rank's port on the channel, as a device index.
    fn rank_devices(&self, segs: &[Seg]) -> Vec<Option<u32>> {
        let mut nic = vec![None; self.locs.len()];
        for (h, s) in segs.iter().enumerate() {
            let Some(ctx) = self.hosts.ctx(h) else {
                continue;
            };
            for &(r, x) in &s.nic {
                if let Some(slot) = nic.get_mut(r) {
                    *slot = x.and_then(|x| ctx.sys.net(x)).map(|i| i.dev);
                }
            }
        }
        nic
    }
}

/// The channel's tree over ranks: hosts as in the host tree `t` (each entered at its
/// segment's first rank), inside a host a chain in ring order.
fn rank_tree(n: usize, segs: &[Seg], t: &NodeTree) -> Tree {
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
    Tree { root, up, down }
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
