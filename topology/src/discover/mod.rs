//! Discovery of the local machine: sysfs, the CUDA driver and NVML (both loaded at run
//! time), merged with `NCCL_TOPO_FILE` and dumped to `NCCL_TOPO_DUMP_FILE`. This is the
//! only module that does IO besides the XML file helpers.

pub mod cuda;
pub mod nvml;
pub mod sysfs;

use std::collections::HashMap;
use std::path::Path;

use crate::config::TopoConfig;
use crate::error::Result;
use crate::model::{NodeId, NodeKind, System};
use crate::types::BusId;

pub use sysfs::CudaGpu;

/// What discovery found and what it could not use.
#[derive(Clone, Debug, Default)]
pub struct DiscoveryNotes {
    /// Why CUDA gave no GPUs, if it did not.
    pub cuda: Option<String>,
    /// Why NVML gave no NVLinks, if it did not.
    pub nvml: Option<String>,
}

/// Discovers this machine (sysfs below `root`, CUDA, NVML). Never fails: whatever is
/// missing is left out and noted.
pub fn discover_local(root: &Path) -> (System, DiscoveryNotes) {
    let mut notes = DiscoveryNotes::default();
    let gpus = match cuda::gpus() {
        Ok(g) => g,
        Err(e) => {
            tracing::debug!(error = %e, "CUDA not available for topology discovery");
            notes.cuda = Some(e);
            Vec::new()
        }
    };
    let mut sys = sysfs::discover(root, &gpus);
    let busids: Vec<BusId> = sys
        .gpus()
        .iter()
        .filter_map(|&g| sys.gpu(g).map(|i| i.pci.busid))
        .collect();
    if !busids.is_empty() {
        match nvml::nvlinks(&busids) {
            Ok(map) => {
                for id in sys.gpus() {
                    if let Some(NodeKind::Gpu(g)) = sys.nodes.get_mut(id).map(|n| &mut n.kind) {
                        if let Some(l) = map.get(&g.pci.busid) {
                            g.nvlinks = l.clone();
                        }
                    }
                }
                sys.build_links();
            }
            Err(e) => {
                tracing::debug!(error = %e, "NVML not available for NVLink discovery");
                notes.nvml = Some(e);
            }
        }
    }
    (sys, notes)
}

/// The system of this machine as the communicator should see it: discovery, merged into
/// `NCCL_TOPO_FILE` when set, written to `NCCL_TOPO_DUMP_FILE` when set.
pub fn system(cfg: &TopoConfig) -> Result<System> {
    system_with_notes(cfg).map(|(s, _)| s)
}

/// [`system`], with what discovery could not use.
pub fn system_with_notes(cfg: &TopoConfig) -> Result<(System, DiscoveryNotes)> {
    let (found, notes) = discover_local(Path::new("/"));
    let sys = match &cfg.topo_file {
        Some(f) => merge(&crate::xml::read_file(f)?, &found),
        None => found,
    };
    if let Some(d) = &cfg.topo_dump_file {
        crate::xml::write_file(&sys, d)?;
    }
    Ok((sys, notes))
}

fn pci_key(sys: &System, id: NodeId) -> Option<BusId> {
    sys.busid(id).map(BusId::device_id)
}

/// Merges what discovery `found` into a topology file's system `file`: the file's layout
/// and attributes win; discovered GPUs fill in device index, SM and NVLinks of the file's
/// GPUs with the same bus id; discovered ports replace the guessed ports of PCI-only NICs;
/// devices the file lacks are added under their discovered bridges (or CPU).
pub fn merge(file: &System, found: &System) -> System {
    let mut out = file.clone();
    let found_gpus = found.gpus();
    if !found_gpus.is_empty() {
        // Indexes come from CUDA: file GPUs that discovery did not see get new ones.
        for id in out.gpus() {
            let seen = out
                .gpu(id)
                .is_some_and(|g| found.gpu_by_busid(g.pci.busid).is_some());
            if !seen {
                if let Some(NodeKind::Gpu(g)) = out.nodes.get_mut(id).map(|n| &mut n.kind) {
                    g.dev = u32::MAX;
                }
            }
        }
    }
    for fg in found_gpus {
        let Some(info) = found.gpu(fg).cloned() else {
            continue;
        };
        match out.gpu_by_busid(info.pci.busid) {
            Some(id) => {
                if let Some(NodeKind::Gpu(g)) = out.nodes.get_mut(id).map(|n| &mut n.kind) {
                    g.dev = info.dev;
                    if g.sm.is_none() {
                        g.sm = info.sm;
                    }
                    if g.nvlinks.is_empty() {
                        g.nvlinks = info.nvlinks.clone();
                    }
                    if g.gdr.is_none() {
                        g.gdr = info.gdr;
                    }
                }
            }
            None => {
                let parent = graft_parent(&mut out, found, fg);
                out.add_gpu(parent, info);
            }
        }
    }
    // Ports.
    let mut nic_map: HashMap<NodeId, NodeId> = HashMap::new();
    for fnet in found.nets() {
        let Some(net) = found.net(fnet).cloned() else {
            continue;
        };
        let Some(fnic) = found.nic_of_net(fnet) else {
            continue;
        };
        if out.nets().iter().any(|&n| {
            out.net(n)
                .is_some_and(|o| o.name == net.name && o.port == net.port && !o.synthetic)
        }) {
            continue;
        }
        let target_nic = match nic_map.get(&fnic) {
            Some(&n) => Some(n),
            None => {
                let found_key = pci_key(found, fnic);
                let existing = found_key.and_then(|k| {
                    (0..out.nodes.len()).find(|&i| {
                        matches!(out.kind(i), Some(NodeKind::Nic(_))) && pci_key(&out, i) == Some(k)
                    })
                });
                if let Some(e) = existing {
                    // Discovered ports replace guessed ones.
                    let kids = out
                        .nodes
                        .get(e)
                        .map(|n| n.children.clone())
                        .unwrap_or_default();
                    let all_synth = kids
                        .iter()
                        .all(|&k| out.net(k).is_some_and(|n| n.synthetic));
                    if all_synth {
                        if let Some(n) = out.nodes.get_mut(e) {
                            n.children.clear();
                        }
                        for k in kids {
                            if let Some(n) = out.nodes.get_mut(k) {
                                n.parent = None;
                            }
                        }
                    }
                }
                existing
            }
        };
        let nic = match target_nic {
            Some(n) => n,
            None => {
                let parent = graft_parent(&mut out, found, fnic);
                let info = match found.kind(fnic) {
                    Some(NodeKind::Nic(i)) => i.clone(),
                    _ => continue,
                };
                out.add_nic(parent, info)
            }
        };
        nic_map.insert(fnic, nic);
        let mut net = net;
        net.dev = u32::MAX;
        out.add_net(nic, net);
    }
    // Drop detached (replaced) ports by rebuilding without them.
    let out = compact(out);
    let mut out = out;
    crate::xml::assign_devs_and_names(&mut out);
    out.build_links();
    out
}

/// Finds or creates, in `out`, the parent for a copy of `found`'s node `id`.
fn graft_parent(out: &mut System, found: &System, id: NodeId) -> NodeId {
    // Ancestors in `found`, nearest first.
    let mut chain = Vec::new();
    let mut cur = found.nodes.get(id).and_then(|n| n.parent);
    while let Some(c) = cur {
        chain.push(c);
        cur = found.nodes.get(c).and_then(|n| n.parent);
    }
    // The deepest ancestor that `out` has.
    let mut attach: Option<(usize, NodeId)> = None;
    for (i, &a) in chain.iter().enumerate() {
        let hit = match found.kind(a) {
            Some(NodeKind::Cpu(c)) => out.cpu_by_numa(c.numa),
            Some(NodeKind::Pci(p)) => (0..out.nodes.len())
                .find(|&j| matches!(out.kind(j), Some(NodeKind::Pci(q)) if q.busid == p.busid)),
            _ => None,
        };
        if let Some(h) = hit {
            attach = Some((i, h));
            break;
        }
    }
    let (depth, mut parent) = match attach {
        Some(x) => x,
        None => {
            // Not even the CPU: add it (or use the first CPU of the file).
            let cpu = chain.last().and_then(|&c| found.cpu(c)).cloned();
            match cpu {
                Some(c) => (chain.len().saturating_sub(1), out.add_cpu(c)),
                None => match out.cpus().first() {
                    Some(&c) => (chain.len(), c),
                    None => (chain.len(), out.add_cpu(Default::default())),
                },
            }
        }
    };
    // Copy the missing bridges below the attach point, top down.
    for &a in chain.iter().take(depth).rev() {
        if let Some(NodeKind::Pci(p)) = found.kind(a) {
            parent = out.add_pci(parent, p.clone());
        }
    }
    parent
}

/// Removes nodes that lost their parent (replaced ports), renumbering ids.
fn compact(sys: System) -> System {
    let keep: Vec<bool> = sys
        .nodes
        .iter()
        .map(|n| match n.kind {
            NodeKind::Net(_) => n.parent.is_some(),
            _ => true,
        })
        .collect();
    if keep.iter().all(|&k| k) {
        return sys;
    }
    let mut map = vec![None; sys.nodes.len()];
    let mut next = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            map[i] = Some(next);
            next += 1;
        }
    }
    let mut out = System {
        nodes: Vec::new(),
        links: Vec::new(),
        adj: Vec::new(),
        extra: sys.extra.clone(),
    };
    for (i, n) in sys.nodes.into_iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let mut n = n;
        n.parent = n.parent.and_then(|p| map.get(p).copied().flatten());
        n.children = n
            .children
            .iter()
            .filter_map(|&c| map.get(c).copied().flatten())
            .collect();
        out.nodes.push(n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_yields_a_valid_system() {
        let (sys, _notes) = discover_local(Path::new("/"));
        assert!(!sys.cpus().is_empty());
        let text = crate::xml::to_string(&sys);
        let again = crate::xml::parse_str(&text, "dump").unwrap();
        assert_eq!(crate::xml::to_string(&again), text);
    }

    #[test]
    fn empty_root_yields_one_cpu() {
        let dir = std::env::temp_dir().join(format!("ccl-topo-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sys = sysfs::discover(&dir, &[]);
        assert_eq!(sys.cpus().len(), 1);
        assert!(sys.gpus().is_empty() && sys.nets().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
