//! Building the channels from what the plan chose before them: each channel's ring as one
//! segment per host, the port each rank uses, the bandwidth a shared port leaves each, and
//! each channel's tree.

use super::*;

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
pub(super) struct Layout<'a> {
    pub(super) cfg: &'a TopoConfig,
    pub(super) hosts: &'a HostIndex,
    pub(super) locs: &'a [RankLoc],
    pub(super) host_ranks: &'a [Vec<usize>],
    pub(super) host_intra: &'a [Option<IntraRings>],
    pub(super) nics: &'a RankNics,
}

impl Layout<'_> {
    fn nhosts(&self) -> usize {
        self.hosts.order.len()
    }

    /// Every channel. The segments of all channels come first: a port's bandwidth is shared
    /// by all the channels that use it, which is only known once every channel has chosen.
    pub(super) fn channels(&self) -> Vec<Channel> {
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
