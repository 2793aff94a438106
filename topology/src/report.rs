//! Human and JSON descriptions of a system and a plan (what `ccl-topo` prints).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::model::{NodeId, NodeKind, System};
use crate::paths::Paths;
use crate::plan::{HostSystems, Plan, RankInfo};
use crate::types::round_bw;
use crate::{plan, Result, TopoConfig};

/// Ranks for `hosts` copies of `sys`: one rank per GPU (rank = host * gpus + dev order), or,
/// without GPUs, one rank per NUMA node. Host ids are 0..hosts.
pub fn cluster_ranks(sys: &System, hosts: usize) -> Vec<RankInfo> {
    let gpus = sys.gpus();
    let mut ranks = Vec::new();
    for h in 0..hosts {
        if gpus.is_empty() {
            let cpus = sys.cpus();
            if cpus.is_empty() {
                ranks.push(RankInfo {
                    host: h as u64,
                    gpu: None,
                    numa: None,
                });
            }
            for c in cpus {
                ranks.push(RankInfo {
                    host: h as u64,
                    gpu: None,
                    numa: sys.cpu(c).map(|i| i.numa),
                });
            }
        } else {
            for &g in &gpus {
                ranks.push(RankInfo {
                    host: h as u64,
                    gpu: sys.gpu(g).map(|i| i.pci.busid),
                    numa: sys.numa_of(g),
                });
            }
        }
    }
    ranks
}

/// Plans `hosts` copies of `sys` with [`cluster_ranks`].
pub fn plan_cluster(sys: &System, hosts: usize, cfg: &TopoConfig) -> Result<Plan> {
    let ranks = cluster_ranks(sys, hosts.max(1));
    plan(&ranks, &HostSystems::uniform(sys.clone()), cfg)
}

fn net_name(sys: &System, dev: Option<u32>) -> Value {
    match dev.and_then(|d| sys.net_by_dev(d)) {
        Some(n) => Value::String(sys.name(n)),
        None => Value::Null,
    }
}

/// Endpoints listed in path tables: GPUs then ports.
fn endpoints(sys: &System) -> (Vec<NodeId>, Vec<NodeId>) {
    (sys.gpus(), sys.nets())
}

/// The first host's rank of each GPU of `sys` (by node), if the plan has one.
fn rank_of_gpu(plan: &Plan, host: usize, g: NodeId) -> Option<usize> {
    plan.hosts
        .get(host)?
        .ranks
        .iter()
        .copied()
        .find(|&r| plan.gpu_node(r) == Some(g))
}

/// One JSON object describing the first host's system, its paths, and the plan.
pub fn json_report(plan: &Plan) -> Value {
    let Some(sys) = plan.system(0) else {
        return json!({});
    };
    let Some(paths) = plan.paths(0) else {
        return json!({});
    };
    let (gpus, nets) = endpoints(sys);
    let host0_nets: Vec<u32> = plan
        .hosts
        .first()
        .map(|h| h.nets.clone())
        .unwrap_or_default();
    let gpu_json: Vec<Value> = gpus
        .iter()
        .filter_map(|&g| {
            let info = sys.gpu(g)?;
            let r = rank_of_gpu(plan, 0, g);
            Some(json!({
                "dev": info.dev,
                "busid": info.pci.busid.to_string(),
                "numa": sys.numa_of(g),
                "sm": info.sm,
                "nvlinks": sys.nvlink_count(g),
                "rank": r,
                "nic": net_name(sys, r.and_then(|r| plan.primary_nic.get(r).copied().flatten())),
                "backup_nic": net_name(sys, r.and_then(|r| plan.backup_nic.get(r).copied().flatten())),
            }))
        })
        .collect();
    let nic_json: Vec<Value> = nets
        .iter()
        .filter_map(|&n| {
            let info = sys.net(n)?;
            Some(json!({
                "name": sys.name(n),
                "dev": info.dev,
                "busid": sys.busid(n).map(|b| b.to_string()),
                "speed_gbps": info.speed_mbps as f64 / 1000.0,
                "port": info.port,
                "kind": info.kind.as_str(),
                "numa": sys.numa_of(n),
                "usable": host0_nets.contains(&info.dev),
            }))
        })
        .collect();
    let mut path_json = Vec::new();
    for &a in &gpus {
        for &b in gpus.iter().chain(nets.iter()) {
            if a == b {
                continue;
            }
            if let Some(p) = paths.get(a, b) {
                path_json.push(json!({
                    "from": sys.name(a),
                    "to": sys.name(b),
                    "type": p.kind.as_str(),
                    "bw_gbps": round_bw(p.bw),
                }));
            }
        }
    }
    let mut transports = Vec::new();
    if let Some(h0) = plan.hosts.first() {
        for &a in &h0.ranks {
            for &b in &h0.ranks {
                if a == b {
                    continue;
                }
                if let Some(t) = plan.transport(a, b) {
                    transports.push(json!({
                        "from": a, "to": b,
                        "transport": t.transport.to_string(),
                        "reason": t.reason.to_string(),
                    }));
                }
            }
        }
    }
    let rings: Vec<Value> = plan
        .channels
        .iter()
        .enumerate()
        .map(|(c, ch)| {
            json!({
                "channel": c,
                "order": ch.ring,
                "bw_gbps": round_bw(ch.bw_inter.unwrap_or(ch.bw_intra)),
                "bw_intra_gbps": round_bw(ch.bw_intra),
                "bw_inter_gbps": ch.bw_inter.map(round_bw),
                "nics": ch.nic.iter().map(|d| d.map(|d| d as i64).unwrap_or(-1)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let trees: Vec<Value> = plan
        .channels
        .iter()
        .enumerate()
        .map(|(c, ch)| {
            json!({
                "channel": c,
                "root": ch.tree.root,
                "up": ch.tree.up,
                "down": ch.tree.down,
            })
        })
        .collect();
    let cpus: Vec<Value> = sys
        .cpus()
        .iter()
        .filter_map(|&c| {
            let i = sys.cpu(c)?;
            Some(
                json!({"numa": i.numa, "arch": i.arch, "vendor": i.vendor, "affinity": i.affinity}),
            )
        })
        .collect();
    json!({
        "hosts": plan.hosts.len(),
        "ranks": plan.nranks,
        "cpus": cpus,
        "gpus": gpu_json,
        "nics": nic_json,
        "paths": path_json,
        "transports": transports,
        "channels": plan.channels.len(),
        "rings": rings,
        "trees": trees,
    })
}

/// A path matrix in the style of `nvidia-smi topo -m` over GPUs and ports.
pub fn path_matrix(sys: &System, paths: &Paths) -> String {
    let (gpus, nets) = endpoints(sys);
    let all: Vec<NodeId> = gpus.iter().chain(nets.iter()).copied().collect();
    let names: Vec<String> = all.iter().map(|&n| sys.name(n)).collect();
    let w = names.iter().map(String::len).max().unwrap_or(4).max(4) + 1;
    let mut out = String::new();
    let _ = write!(out, "{:w$}", "");
    for n in &names {
        let _ = write!(out, "{n:>w$}");
    }
    let _ = writeln!(out, "  NUMA");
    for (i, &a) in all.iter().enumerate() {
        let _ = write!(out, "{:w$}", names[i]);
        for &b in &all {
            let cell = if a == b {
                "X".to_string()
            } else {
                match paths.get(a, b) {
                    Some(p)
                        if matches!(sys.kind(a), Some(NodeKind::Gpu(_)))
                            && matches!(sys.kind(b), Some(NodeKind::Gpu(_)))
                            && p.kind == crate::PathType::Nvl =>
                    {
                        // nvidia-smi prints NV<links> for direct NVLink.
                        let direct = sys
                            .gpu(a)
                            .map(|g| {
                                g.nvlinks
                                    .iter()
                                    .filter(|l| {
                                        Some(l.target.device_id())
                                            == sys.busid(b).map(|x| x.device_id())
                                    })
                                    .map(|l| l.count)
                                    .sum::<u32>()
                            })
                            .unwrap_or(0);
                        if direct > 0 {
                            format!("NV{direct}")
                        } else {
                            // Through NVSwitches: as many links as the narrower side has.
                            let k = sys.nvlink_count(a).min(sys.nvlink_count(b));
                            format!("NV{k}")
                        }
                    }
                    Some(p) => p.kind.as_str().to_string(),
                    None => "DIS".to_string(),
                }
            };
            let _ = write!(out, "{cell:>w$}");
        }
        let numa = sys
            .numa_of(a)
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "  {numa}");
    }
    out
}

/// A text description of the first host's system and the plan.
pub fn text_report(plan: &Plan, max_ring_ranks: usize) -> String {
    let mut out = String::new();
    let Some(sys) = plan.system(0) else {
        return out;
    };
    let Some(paths) = plan.paths(0) else {
        return out;
    };
    let (gpus, nets) = endpoints(sys);
    let _ = writeln!(
        out,
        "system: {} CPU(s), {} GPU(s), {} net port(s); {} host(s), {} rank(s)",
        sys.cpus().len(),
        gpus.len(),
        nets.len(),
        plan.hosts.len(),
        plan.nranks
    );
    for c in sys.cpus() {
        if let Some(i) = sys.cpu(c) {
            let _ = writeln!(
                out,
                "  cpu{} {} {} (inter-socket {} GB/s)",
                i.numa,
                i.arch.as_deref().unwrap_or("?"),
                i.vendor.as_deref().unwrap_or("?"),
                i.inter_socket_bw()
            );
        }
    }
    for &g in &gpus {
        let Some(i) = sys.gpu(g) else { continue };
        let r = rank_of_gpu(plan, 0, g);
        let nic = |d: Option<u32>| match net_name(sys, d) {
            Value::String(s) => s,
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "  gpu{} {} numa {} sm {} nvlinks {} nic {} backup {}",
            i.dev,
            i.pci.busid,
            sys.numa_of(g).map(|n| n.to_string()).unwrap_or("-".into()),
            i.sm.map(|s| s.to_string()).unwrap_or("-".into()),
            sys.nvlink_count(g),
            nic(r.and_then(|r| plan.primary_nic.get(r).copied().flatten())),
            nic(r.and_then(|r| plan.backup_nic.get(r).copied().flatten())),
        );
    }
    let usable: Vec<u32> = plan
        .hosts
        .first()
        .map(|h| h.nets.clone())
        .unwrap_or_default();
    for &n in &nets {
        let Some(i) = sys.net(n) else { continue };
        let _ = writeln!(
            out,
            "  net{} {} {} port {} {} Gb/s {} numa {}{}",
            i.dev,
            sys.name(n),
            sys.busid(n).map(|b| b.to_string()).unwrap_or("-".into()),
            i.port,
            i.speed_mbps / 1000,
            i.kind.as_str(),
            sys.numa_of(n).map(|n| n.to_string()).unwrap_or("-".into()),
            if usable.contains(&i.dev) {
                ""
            } else {
                " (not used)"
            }
        );
    }
    out.push_str(&path_matrix(sys, paths));
    if let Some(ch) = plan.channels.first() {
        let _ = writeln!(
            out,
            "channels: {}, ring bw {} GB/s intra{}",
            plan.channels.len(),
            round_bw(ch.bw_intra),
            ch.bw_inter
                .map(|b| format!(", {} GB/s inter", round_bw(b)))
                .unwrap_or_default()
        );
    }
    let clip = |v: &[usize]| -> String {
        let mut s: Vec<String> = v
            .iter()
            .take(max_ring_ranks)
            .map(|r| r.to_string())
            .collect();
        if v.len() > max_ring_ranks {
            s.push(format!("... ({} ranks)", v.len()));
        }
        s.join(" ")
    };
    for (c, ch) in plan.channels.iter().enumerate() {
        let nics: Vec<String> = ch
            .ring
            .iter()
            .take(max_ring_ranks)
            .map(|&r| match ch.nic.get(r).copied().flatten() {
                Some(d) => d.to_string(),
                None => "-".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "  ring {c:2}: {}   nics {}",
            clip(&ch.ring),
            nics.join(" ")
        );
    }
    for (c, ch) in plan.channels.iter().enumerate().take(2) {
        let mut s = format!("  tree {c:2}: root {}", ch.tree.root);
        for r in ch.ring.iter().take(max_ring_ranks) {
            let up = ch.tree.up.get(*r).copied().flatten();
            let down = ch.tree.down.get(*r).cloned().unwrap_or_default();
            let _ = write!(
                s,
                " | {r}^{} v{:?}",
                up.map(|u| u.to_string()).unwrap_or("-".into()),
                down
            );
        }
        let _ = writeln!(out, "{s}");
    }
    out
}
