//! Paths between every pair of nodes of one host: type (LOC .. SYS), bottleneck bandwidth
//! and the links they use.

use crate::model::{NodeId, NodeKind, System};
use crate::types::{LinkType, PathType, LOC_BW};

/// One path.
#[derive(Clone, Debug, PartialEq)]
pub struct Path {
    /// Its type: the farthest hop type along it.
    pub kind: PathType,
    /// Bottleneck bandwidth, GB/s.
    pub bw: f64,
    /// The directed links it uses, in order (indexes into [`System::links`]).
    pub links: Vec<usize>,
}

/// Options that change path computation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathOptions {
    /// No NVLink paths through an intermediate GPU (`NCCL_NVB_DISABLE`).
    pub nvb_disable: bool,
    /// No GPU->NIC paths through an NVLink peer (`NCCL_PXN_DISABLE`).
    pub pxn_disable: bool,
}

/// All-pairs paths of one system.
#[derive(Clone, Debug)]
pub struct Paths {
    n: usize,
    paths: Vec<Option<Path>>,
}

fn hop_type(sys: &System, from: NodeId, to: NodeId, kind: LinkType, from_is_mid: bool) -> PathType {
    let k = |id: NodeId| sys.kind(id);
    match kind {
        LinkType::Loc | LinkType::Net => PathType::Loc,
        LinkType::Nvl => {
            if from_is_mid && matches!(k(from), Some(NodeKind::Gpu(_))) {
                PathType::Nvb
            } else {
                PathType::Nvl
            }
        }
        LinkType::C2c => PathType::C2c,
        LinkType::Sys => PathType::Sys,
        LinkType::Pci => {
            let is_cpu = |id| matches!(k(id), Some(NodeKind::Cpu(_)));
            let is_sw = |id| matches!(k(id), Some(NodeKind::Pci(_)));
            if is_cpu(from) || is_cpu(to) {
                PathType::Phb
            } else if is_sw(from) && is_sw(to) {
                PathType::Pxb
            } else {
                PathType::Pix
            }
        }
    }
}

#[derive(Clone)]
struct Label {
    hops: usize,
    bw: f64,
    kind: PathType,
    links: Vec<usize>,
}

impl Paths {
    /// Computes the paths of `sys` (whose links must be built).
    pub fn compute(sys: &System, opts: PathOptions) -> Paths {
        let n = sys.nodes.len();
        let mut paths: Vec<Option<Path>> = vec![None; n * n];
        for src in 0..n {
            let labels = Self::from_source(sys, src, opts);
            for (dst, l) in labels.into_iter().enumerate() {
                if let Some(l) = l {
                    paths[src * n + dst] = Some(Path {
                        kind: l.kind,
                        bw: l.bw,
                        links: l.links,
                    });
                }
            }
        }
        let mut p = Paths { n, paths };
        if !opts.pxn_disable {
            p.add_pxn(sys);
        }
        p
    }

    /// Breadth-first by hop count; among equal hop counts the larger bandwidth, then the
    /// closer type wins. GPUs are crossed only NVLink to NVLink; ports are never crossed.
    fn from_source(sys: &System, src: NodeId, opts: PathOptions) -> Vec<Option<Label>> {
        let n = sys.nodes.len();
        let mut best: Vec<Option<Label>> = vec![None; n];
        best[src] = Some(Label {
            hops: 0,
            bw: LOC_BW,
            kind: PathType::Loc,
            links: Vec::new(),
        });
        let mut frontier = vec![src];
        let mut hops = 0;
        while !frontier.is_empty() {
            hops += 1;
            let mut next: Vec<NodeId> = Vec::new();
            for &u in &frontier {
                let Some(lu) = best[u].clone() else { continue };
                let mid = u != src;
                let last_kind = lu
                    .links
                    .last()
                    .and_then(|&l| sys.links.get(l))
                    .map(|l| l.kind);
                for &li in sys.adj.get(u).map(Vec::as_slice).unwrap_or(&[]) {
                    let Some(link) = sys.links.get(li) else {
                        continue;
                    };
                    if mid {
                        match sys.kind(u) {
                            Some(NodeKind::Gpu(_))
                                if opts.nvb_disable
                                    || link.kind != LinkType::Nvl
                                    || last_kind != Some(LinkType::Nvl) =>
                            {
                                continue;
                            }
                            Some(NodeKind::Net(_)) => continue,
                            Some(NodeKind::Nic(_)) => {
                                // Down into ports, or up from a port; never port to port.
                                let to_port = link.kind == LinkType::Net;
                                let from_port = last_kind == Some(LinkType::Net);
                                if to_port == from_port {
                                    continue;
                                }
                            }
                            _ => {}
                        }
                    }
                    let v = link.to;
                    if let Some(b) = &best[v] {
                        if b.hops < hops {
                            continue;
                        }
                    }
                    let cand = Label {
                        hops,
                        bw: lu.bw.min(link.bw),
                        kind: lu.kind.max(hop_type(sys, u, v, link.kind, mid)),
                        links: {
                            let mut l = lu.links.clone();
                            l.push(li);
                            l
                        },
                    };
                    let better = match &best[v] {
                        None => true,
                        Some(b) => {
                            cand.bw > b.bw + 1e-9
                                || ((cand.bw - b.bw).abs() <= 1e-9 && cand.kind < b.kind)
                        }
                    };
                    if better {
                        if best[v].is_none() {
                            next.push(v);
                        }
                        best[v] = Some(cand);
                    }
                }
            }
            frontier = next;
        }
        best
    }

    /// GPU <-> NIC paths through an NVLink peer that sits near the NIC (PXN), where the
    /// GPU's own path goes through the CPU.
    fn add_pxn(&mut self, sys: &System) {
        let gpus = sys.gpus();
        let nics: Vec<NodeId> = (0..sys.nodes.len())
            .filter(|&i| matches!(sys.kind(i), Some(NodeKind::Net(_)) | Some(NodeKind::Nic(_))))
            .collect();
        for &g in &gpus {
            for &nic in &nics {
                let Some(own) = self.get(g, nic) else {
                    continue;
                };
                if own.kind <= PathType::Pxb {
                    continue;
                }
                let mut best: Option<(f64, NodeId)> = None;
                for &p in &gpus {
                    if p == g {
                        continue;
                    }
                    let (Some(gp), Some(pn)) = (self.get(g, p), self.get(p, nic)) else {
                        continue;
                    };
                    if gp.kind != PathType::Nvl || pn.kind > PathType::Pxb {
                        continue;
                    }
                    let bw = gp.bw.min(pn.bw);
                    if best.map_or(true, |(b, _)| bw > b + 1e-9) {
                        best = Some((bw, p));
                    }
                }
                let Some((bw, p)) = best else { continue };
                let fwd = self.concat(g, p, nic, bw);
                let rev = self.concat(nic, p, g, bw);
                self.set(g, nic, fwd);
                self.set(nic, g, rev);
            }
        }
    }

    fn concat(&self, a: NodeId, mid: NodeId, b: NodeId, bw: f64) -> Option<Path> {
        let x = self.get(a, mid)?;
        let y = self.get(mid, b)?;
        let mut links = x.links.clone();
        links.extend_from_slice(&y.links);
        Some(Path {
            kind: PathType::Pxn,
            bw,
            links,
        })
    }

    fn set(&mut self, a: NodeId, b: NodeId, p: Option<Path>) {
        if p.is_none() {
            return;
        }
        if let Some(slot) = self.paths.get_mut(a * self.n + b) {
            *slot = p;
        }
    }

    /// The path from `a` to `b`, if they are connected.
    pub fn get(&self, a: NodeId, b: NodeId) -> Option<&Path> {
        if a >= self.n || b >= self.n {
            return None;
        }
        self.paths.get(a * self.n + b).and_then(Option::as_ref)
    }

    /// The path type from `a` to `b` (DIS when not connected).
    pub fn kind(&self, a: NodeId, b: NodeId) -> PathType {
        self.get(a, b).map(|p| p.kind).unwrap_or(PathType::Dis)
    }

    /// The bandwidth from `a` to `b` (0 when not connected).
    pub fn bw(&self, a: NodeId, b: NodeId) -> f64 {
        self.get(a, b).map(|p| p.bw).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml::parse_str;

    #[test]
    fn pcie_switch_paths() {
        let x = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="8 GT/s" link_width="16">
      <pci busid="0000:02:00.0" class="0x030200" link_speed="8 GT/s" link_width="16"/>
      <pci busid="0000:03:00.0" class="0x030200" link_speed="8 GT/s" link_width="16"/>
    </pci>
    <pci busid="0000:04:00.0" class="0x030200" link_speed="8 GT/s" link_width="16"/>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:81:00.0" class="0x030200" link_speed="8 GT/s" link_width="16"/>
  </cpu>
</system>"#;
        let s = parse_str(x, "t").unwrap();
        let p = Paths::compute(&s, PathOptions::default());
        let g = s.gpus();
        assert_eq!(p.kind(g[0], g[1]), PathType::Pix);
        assert_eq!(p.kind(g[0], g[2]), PathType::Phb);
        assert_eq!(p.kind(g[0], g[3]), PathType::Sys);
        assert_eq!(p.kind(g[0], g[0]), PathType::Loc);
        assert_eq!(p.bw(g[0], g[1]), 12.0);
        assert_eq!(p.bw(g[0], g[3]), 10.0);
    }

    #[test]
    fn nvlink_and_nvb() {
        // A chain 0 - 1 - 2 over NVLink, all on one CPU.
        let x = r#"<system version="1">
  <cpu numaid="0">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="80"><nvlink target="0000:02:00.0" count="2" tclass="0x030200"/></gpu></pci>
    <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="80"><nvlink target="0000:01:00.0" count="2" tclass="0x030200"/><nvlink target="0000:03:00.0" count="2" tclass="0x030200"/></gpu></pci>
    <pci busid="0000:03:00.0" class="0x030200"><gpu dev="2" sm="80"><nvlink target="0000:02:00.0" count="2" tclass="0x030200"/></gpu></pci>
  </cpu>
</system>"#;
        let s = parse_str(x, "t").unwrap();
        let p = Paths::compute(&s, PathOptions::default());
        let g = s.gpus();
        assert_eq!(p.kind(g[0], g[1]), PathType::Nvl);
        assert_eq!(p.bw(g[0], g[1]), 40.0);
        assert_eq!(p.kind(g[0], g[2]), PathType::Nvb);
        let q = Paths::compute(
            &s,
            PathOptions {
                nvb_disable: true,
                pxn_disable: false,
            },
        );
        assert_eq!(q.kind(g[0], g[2]), PathType::Phb);
    }
}
