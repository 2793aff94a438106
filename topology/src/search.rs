//! Ring search inside one host, and the double binary tree across hosts.
//!
//! A ring is a cyclic order of the host's GPUs. Each hop of a ring uses the links of the
//! path between two consecutive GPUs (through the CPU's memory when P2P is not allowed
//! between them), and each channel's ring consumes its per-channel bandwidth on every link
//! it uses, in that direction. The search tries per-channel speeds from high to low and
//! finds as many rings as the links carry at each speed, keeping the speed with the most
//! total bandwidth.

use crate::config::{TopoConfig, MAX_CHANNELS};
use crate::model::{NodeId, System};
use crate::paths::Paths;
use crate::types::{PathType, LOC_BW};

/// Result of the ring search on one host.
#[derive(Clone, Debug, PartialEq)]
pub struct IntraRings {
    /// One GPU order per channel (node ids of the host's system).
    pub rings: Vec<Vec<NodeId>>,
    /// Bandwidth per channel, GB/s.
    pub speed: f64,
}

impl IntraRings {
    /// Total bandwidth of all channels.
    pub fn total(&self) -> f64 {
        self.speed * self.rings.len() as f64
    }
}

/// One hop between two GPUs: the links it uses, its bandwidth and path type.
#[derive(Clone, Debug)]
pub(crate) struct Hop {
    pub links: Vec<usize>,
    pub bw: f64,
    pub kind: PathType,
}

/// The hop from GPU `a` to GPU `b`: the direct path when P2P is allowed over it, otherwise
/// through the memory of `a`'s CPU.
pub(crate) fn hop(
    sys: &System,
    paths: &Paths,
    a: NodeId,
    b: NodeId,
    cfg: &TopoConfig,
) -> Option<Hop> {
    let p = paths.get(a, b)?;
    let p2p = cfg.effective_p2p_level().is_some_and(|l| p.kind <= l);
    if p2p {
        return Some(Hop {
            links: p.links.clone(),
            bw: p.bw,
            kind: p.kind,
        });
    }
    let cpu = sys.local_cpu(a)?;
    let x = paths.get(a, cpu)?;
    let y = paths.get(cpu, b)?;
    let mut links = x.links.clone();
    links.extend_from_slice(&y.links);
    Some(Hop {
        links,
        bw: x.bw.min(y.bw),
        kind: p.kind,
    })
}

/// Per-channel speed ladders, GB/s.
const SPEEDS: [f64; 13] = [
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];
/// Hopper.
const SM90_SPEEDS: [f64; 11] = [
    60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
];
/// Blackwell.
const SM100_SPEEDS: [f64; 12] = [
    90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
];
/// Below every ladder (slow PCIe or CPU paths).
const LOW_SPEEDS: [f64; 4] = [2.4, 1.2, 0.24, 0.12];

/// How much more total bandwidth a slower per-channel speed must give to be preferred.
const SLOWER_GAIN: f64 = 1.2;

/// Most rings the search itself produces before duplication.
const SEARCH_MAX_RINGS: usize = MAX_CHANNELS / 2;
/// DFS steps allowed per ring attempt.
const RING_BUDGET: usize = 1 << 14;
/// DFS steps allowed for a whole search.
const TOTAL_BUDGET: usize = 1 << 18;
/// Channels at or above this speed are split in two (more, narrower channels), GB/s.
const DUPLICATE_ABOVE: f64 = 25.0;

struct Dfs<'a> {
    k: usize,
    hops: &'a [Vec<Option<Hop>>],
    remaining: Vec<f64>,
    speed: f64,
    budget: usize,
    total_budget: &'a mut usize,
}

impl Dfs<'_> {
    fn fits(&self, h: &Hop) -> bool {
        h.bw + 1e-9 >= self.speed
            && h.links.iter().all(|&l| {
                self.remaining
                    .get(l)
                    .is_some_and(|r| *r + 1e-9 >= self.speed)
            })
    }

    fn take(&mut self, h: &Hop, sign: f64) {
        for &l in &h.links {
            if let Some(r) = self.remaining.get_mut(l) {
                *r -= sign * self.speed;
            }
        }
    }

    fn hop(&self, a: usize, b: usize) -> Option<&Hop> {
        self.hops
            .get(a)
            .and_then(|r| r.get(b))
            .and_then(Option::as_ref)
    }

    fn ring(&mut self) -> Option<Vec<usize>> {
        let mut order = vec![0usize];
        let mut used = vec![false; self.k];
        if let Some(u) = used.first_mut() {
            *u = true;
        }
        self.budget = RING_BUDGET;
        if self.extend(&mut order, &mut used) {
            Some(order)
        } else {
            None
        }
    }

    fn extend(&mut self, order: &mut Vec<usize>, used: &mut [bool]) -> bool {
        if self.budget == 0 || *self.total_budget == 0 {
            return false;
        }
        self.budget -= 1;
        *self.total_budget -= 1;
        let last = order.last().copied().unwrap_or(0);
        if order.len() == self.k {
            let Some(h) = self.hop(last, 0).cloned() else {
                return false;
            };
            if self.fits(&h) {
                self.take(&h, 1.0);
                return true;
            }
            return false;
        }
        let mut cands: Vec<usize> = (0..self.k).filter(|&j| !used[j]).collect();
        cands.sort_by(|&x, &y| {
            let hx = self.hop(last, x);
            let hy = self.hop(last, y);
            let key = |h: Option<&Hop>, j: usize| {
                (
                    h.map(|h| h.kind).unwrap_or(PathType::Dis),
                    -(h.map(|h| h.bw).unwrap_or(0.0)),
                    (j + self.k - last) % self.k,
                )
            };
            let (a, b) = (key(hx, x), key(hy, y));
            a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
        });
        for j in cands {
            let Some(h) = self.hop(last, j).cloned() else {
                continue;
            };
            if !self.fits(&h) {
                continue;
            }
            self.take(&h, 1.0);
            used[j] = true;
            order.push(j);
            if self.extend(order, used) {
                return true;
            }
            order.pop();
            used[j] = false;
            self.take(&h, -1.0);
        }
        false
    }
}

/// Searches rings over `gpus` (node ids of `sys`, in the order ranks should prefer).
pub fn search_rings(sys: &System, paths: &Paths, gpus: &[NodeId], cfg: &TopoConfig) -> IntraRings {
    let k = gpus.len();
    if k <= 1 {
        return IntraRings {
            rings: vec![gpus.to_vec()],
            speed: LOC_BW,
        };
    }
    let hops: Vec<Vec<Option<Hop>>> = gpus
        .iter()
        .map(|&a| {
            gpus.iter()
                .map(|&b| {
                    if a == b {
                        None
                    } else {
                        hop(sys, paths, a, b, cfg)
                    }
                })
                .collect()
        })
        .collect();
    let min_sm = gpus
        .iter()
        .filter_map(|&g| sys.gpu(g).and_then(|i| i.sm))
        .min()
        .unwrap_or(0);
    // Per-channel speeds to try, highest first (NCCL's ladders by GPU generation), from
    // the first one the fastest hop can carry.
    let ladder: &[f64] = if min_sm >= 100 {
        &SM100_SPEEDS
    } else if min_sm >= 90 {
        &SM90_SPEEDS
    } else {
        &SPEEDS
    };
    let max_hop = hops
        .iter()
        .flatten()
        .flatten()
        .map(|h| h.bw)
        .fold(0.0, f64::max);
    let floor = ladder.last().copied().unwrap_or(0.0);
    let cands: Vec<f64> = ladder
        .iter()
        .copied()
        .chain(SPEEDS.iter().copied().filter(|&s| s < floor))
        .chain(LOW_SPEEDS.iter().copied())
        .filter(|&s| s <= max_hop + 1e-9)
        .collect();
    // Upper bound on rings at a speed: every GPU sends once per ring.
    let out_bw: f64 = gpus
        .iter()
        .map(|&g| {
            sys.adj
                .get(g)
                .map(|ls| {
                    ls.iter()
                        .filter_map(|&l| sys.links.get(l))
                        .map(|l| l.bw)
                        .sum()
                })
                .unwrap_or(0.0)
        })
        .fold(f64::INFINITY, f64::min);
    let mut best: Option<(Vec<Vec<usize>>, f64)> = None;
    let mut best_total = 0.0;
    let mut total_budget = TOTAL_BUDGET;
    for s in cands {
        let ub = ((out_bw / s + 1e-9).floor() as usize).min(SEARCH_MAX_RINGS);
        if (ub as f64) * s <= best_total * SLOWER_GAIN + 1e-9 {
            continue;
        }
        let mut dfs = Dfs {
            k,
            hops: &hops,
            remaining: sys.links.iter().map(|l| l.bw).collect(),
            speed: s,
            budget: RING_BUDGET,
            total_budget: &mut total_budget,
        };
        let mut rings = Vec::new();
        while rings.len() < ub {
            match dfs.ring() {
                Some(r) => rings.push(r),
                None => break,
            }
        }
        // A slower speed must bring clearly more total bandwidth (many thin channels
        // cost more than they carry).
        let total = rings.len() as f64 * s;
        if total > best_total * SLOWER_GAIN + 1e-9 {
            best_total = total;
            best = Some((rings, s));
        }
        if total_budget == 0 {
            break;
        }
    }
    let (rings, speed) = match best {
        Some((r, s)) if !r.is_empty() => (r, s),
        // Nothing fits (disconnected GPUs): one ring in index order at the slowest hop.
        _ => {
            let slow = (0..k)
                .filter_map(|i| {
                    hops.get(i)
                        .and_then(|r| r.get((i + 1) % k))
                        .and_then(Option::as_ref)
                })
                .map(|h| h.bw)
                .fold(f64::INFINITY, f64::min);
            (
                vec![(0..k).collect()],
                if slow.is_finite() { slow } else { 0.0 },
            )
        }
    };
    let mut out = IntraRings {
        rings: rings
            .into_iter()
            .map(|r| r.into_iter().filter_map(|i| gpus.get(i).copied()).collect())
            .collect(),
        speed,
    };
    if out.speed >= DUPLICATE_ABOVE && out.rings.len() * 2 <= MAX_CHANNELS {
        let dup = out.rings.clone();
        out.rings.extend(dup);
        out.speed /= 2.0;
    }
    out
}

/// Parent of position `p` (1-based) in an in-order binary tree over `1..=n`, or none for
/// the root. Odd positions are leaves.
fn btree_parent(p: usize, n: usize) -> Option<usize> {
    let root = {
        let mut r = 1;
        while r * 2 <= n {
            r *= 2;
        }
        r
    };
    if p == root {
        return None;
    }
    let mut q = p;
    let mut low = p & p.wrapping_neg();
    loop {
        q = if q & (low << 1) == 0 {
            q + low
        } else {
            q - low
        };
        low <<= 1;
        if q <= n {
            return Some(q);
        }
        if low > 2 * n {
            return Some(root);
        }
    }
}

/// One tree over `n` nodes (0-based): parent of each node, children of each node, root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTree {
    /// The root.
    pub root: usize,
    /// Parent of each node.
    pub up: Vec<Option<usize>>,
    /// Children of each node (at most 2).
    pub down: Vec<Vec<usize>>,
}

/// The two trees of a double binary tree over `n` nodes: tree 0 is an in-order binary
/// tree (odd positions are leaves); tree 1 is it mirrored (n even) or shifted by one
/// (n odd), so most nodes that are leaves in one tree are inner nodes in the other.
pub fn double_binary_tree(n: usize) -> [NodeTree; 2] {
    let build = |map: &dyn Fn(usize) -> usize| {
        let mut up = vec![None; n];
        let mut down = vec![Vec::new(); n];
        let mut root = 0;
        for pos in 1..=n {
            let me = map(pos - 1);
            match btree_parent(pos, n) {
                Some(pp) => {
                    let parent = map(pp - 1);
                    if let Some(u) = up.get_mut(me) {
                        *u = Some(parent);
                    }
                    if let Some(d) = down.get_mut(parent) {
                        d.push(me);
                    }
                }
                None => root = me,
            }
        }
        for d in &mut down {
            d.sort_unstable();
        }
        NodeTree { root, up, down }
    };
    let t0 = build(&|i| i);
    let t1 = if n % 2 == 0 {
        build(&|i| n - 1 - i)
    } else {
        build(&|i| (i + 1) % n)
    };
    [t0, t1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_tree(t: &NodeTree, n: usize) {
        assert_eq!(t.up[t.root], None);
        for i in 0..n {
            assert!(t.down[i].len() <= 2, "node {i} has {:?}", t.down[i]);
            // Walk to the root without cycles.
            let mut cur = i;
            let mut steps = 0;
            while let Some(p) = t.up[cur] {
                assert!(t.down[p].contains(&cur));
                cur = p;
                steps += 1;
                assert!(steps <= n);
            }
            assert_eq!(cur, t.root);
        }
    }

    #[test]
    fn double_binary_trees_are_trees() {
        for n in 1..=300 {
            let [a, b] = double_binary_tree(n);
            check_tree(&a, n);
            check_tree(&b, n);
        }
    }

    #[test]
    fn leaves_alternate() {
        let [a, b] = double_binary_tree(16);
        let inner_both = (0..16)
            .filter(|&i| !a.down[i].is_empty() && !b.down[i].is_empty())
            .count();
        assert_eq!(inner_both, 0);
    }

    #[test]
    fn depth_is_logarithmic() {
        let n = 128;
        let [a, _] = double_binary_tree(n);
        let depth = (0..n)
            .map(|mut i| {
                let mut d = 0;
                while let Some(p) = a.up[i] {
                    i = p;
                    d += 1;
                }
                d
            })
            .max()
            .unwrap();
        assert!(depth <= 8, "depth {depth}");
    }
}
