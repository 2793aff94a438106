#![allow(dead_code, clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::path::PathBuf;

use ccl_topology::model::System;
use ccl_topology::nic::closeness;
use ccl_topology::plan::Plan;
use ccl_topology::xml;

pub const SYNTHETIC: [&str; 5] = [
    "h200-nccl-dump.xml",
    "dgx-h100-nvswitch.xml",
    "pcie-8gpu.xml",
    "dualport.xml",
    "nvlink-pair.xml",
];
pub const SHARED: [&str; 3] = ["ndv2-topo.xml", "ndv4-topo.xml", "ndv5-topo.xml"];

pub fn synthetic_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/topologies")
}

/// `../shared/topologies` of the repository root, when this checkout has it.
pub fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/topologies");
    d.is_dir().then_some(d)
}

pub fn load(name: &str) -> Option<System> {
    let p = if SYNTHETIC.contains(&name) {
        synthetic_dir().join(name)
    } else {
        shared_dir()?.join(name)
    };
    Some(xml::read_file(&p).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// All topology files available here: (name, system).
pub fn all() -> Vec<(&'static str, System)> {
    let mut v = Vec::new();
    for n in SYNTHETIC.iter().chain(SHARED.iter()) {
        if let Some(s) = load(n) {
            v.push((*n, s));
        } else {
            eprintln!("note: {n} not available in this checkout; skipped");
        }
    }
    v
}

/// Checks the invariants every plan must hold.
pub fn check_plan(plan: &Plan) {
    let n = plan.nranks;
    let nhosts = plan.hosts.len();
    assert!(!plan.channels.is_empty());
    for (c, ch) in plan.channels.iter().enumerate() {
        // The ring visits every rank exactly once.
        let mut seen = vec![false; n];
        for &r in &ch.ring {
            assert!(!seen[r], "channel {c}: rank {r} twice");
            seen[r] = true;
        }
        assert!(seen.iter().all(|&s| s), "channel {c}: ring misses ranks");
        for r in 0..n {
            let nx = ch.ring_next(r).unwrap();
            assert_eq!(ch.ring_prev(nx), Some(r));
        }
        // Each host's ranks are contiguous: exactly `nhosts` ring edges cross hosts.
        if nhosts > 1 {
            let crossing = (0..n)
                .filter(|&i| {
                    let a = ch.ring[i];
                    let b = ch.ring[(i + 1) % n];
                    plan.host_of(a) != plan.host_of(b)
                })
                .count();
            assert_eq!(crossing, nhosts, "channel {c}: {crossing} network edges");
        }
        // The tree spans all ranks.
        let t = &ch.tree;
        assert_eq!(t.up[t.root], None);
        for r in 0..n {
            assert!(
                t.down[r].len() <= 3,
                "channel {c}: rank {r} has {:?}",
                t.down[r]
            );
            for &k in &t.down[r] {
                assert_eq!(t.up[k], Some(r));
            }
            let mut cur = r;
            let mut steps = 0;
            while let Some(p) = t.up[cur] {
                cur = p;
                steps += 1;
                assert!(steps <= n, "channel {c}: cycle in tree");
            }
            assert_eq!(cur, t.root);
        }
        // Every rank has a NIC on every channel when its host has usable ones.
        for r in 0..n {
            let h = plan.host_of(r).unwrap();
            if !plan.hosts[h].nets.is_empty() {
                assert!(ch.nic[r].is_some(), "channel {c}: rank {r} without NIC");
            }
        }
        assert!(ch.bw_intra > 0.0);
    }
    // NICs: closest primary, backup never the primary and next closest (other port first).
    for r in 0..n {
        let h = plan.host_of(r).unwrap();
        let usable_devs = &plan.hosts[h].nets;
        let sys = plan.system(r).unwrap();
        let paths = plan.paths(r).unwrap();
        let from = plan.gpu_node(r).or(plan.cpu_node(r)).unwrap();
        let usable: Vec<_> = usable_devs
            .iter()
            .map(|&d| sys.net_by_dev(d).unwrap())
            .collect();
        let class = |x| {
            let (k, bw, sp, _) = closeness(sys, paths, from, x);
            (k, bw, sp)
        };
        let Some(p) = plan.primary_nic[r] else {
            assert!(usable.is_empty(), "rank {r} has no primary NIC");
            continue;
        };
        let pn = sys.net_by_dev(p).unwrap();
        let best = usable.iter().map(|&x| class(x)).min().unwrap();
        assert_eq!(class(pn), best, "rank {r}: primary {p} is not the closest");
        match plan.backup_nic[r] {
            None => assert_eq!(usable.len(), 1, "rank {r}: no backup with several NICs"),
            Some(b) => {
                assert_ne!(b, p, "rank {r}: backup is the primary");
                let bn = sys.net_by_dev(b).unwrap();
                let nic = sys.nic_of_net(pn);
                let siblings: Vec<_> = usable
                    .iter()
                    .copied()
                    .filter(|&x| x != pn && sys.nic_of_net(x) == nic)
                    .collect();
                if siblings.is_empty() {
                    let next = usable
                        .iter()
                        .filter(|&&x| x != pn)
                        .map(|&x| class(x))
                        .min()
                        .unwrap();
                    assert_eq!(
                        class(bn),
                        next,
                        "rank {r}: backup {b} is not the next closest"
                    );
                } else {
                    assert!(
                        siblings.contains(&bn),
                        "rank {r}: backup {b} is not the other port"
                    );
                }
            }
        }
    }
}
