//! The topology search for a communicator's ranks, over this host's system (discovered once
//! per process): the transports between ranks and the ring order (`crate::connect`), the NICs
//! of links to other hosts (`crate::link_nics`).

use std::collections::{HashMap, HashSet};

use ccl_topology::types::BusId;
use ccl_topology::System;

use crate::bootstrap::RankInfo;

/// What the search is told of where a rank sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Its host only (its traffic starts at the host's CPU). The transports and the ring of
    /// the host links: those were chosen this way before the GPUs were told, and the GPU
    /// engines keep orders of their own.
    Host,
    /// Its host and its GPU: the NICs of links to other hosts, so that each GPU's traffic
    /// leaves by the NIC closest to that GPU (its rail) and fails over to the next closest.
    Gpu,
}

/// The topology search over this host's system (discovered once per process) for the
/// ranks of `table`, placed by host; `None` (with a warning) when discovery or the search
/// fails.
pub(crate) fn topo_plan(table: &[RankInfo]) -> Option<ccl_topology::plan::Plan> {
    let cfg = ccl_topology::TopoConfig::from_env()
        .inspect_err(|e| tracing::warn!("topology settings: {e}"))
        .ok()?;
    plan_with(table, &cfg, Placement::Host)
}

/// The topology search with settings `cfg` (the environment's, or those with a narrower
/// choice of NICs, `crate::link_nics`).
pub(crate) fn plan_with(
    table: &[RankInfo],
    cfg: &ccl_topology::TopoConfig,
    placement: Placement,
) -> Option<ccl_topology::plan::Plan> {
    static SYSTEM: std::sync::OnceLock<Option<System>> = std::sync::OnceLock::new();
    let sys = SYSTEM
        .get_or_init(|| {
            ccl_topology::discover::system(cfg)
                .inspect_err(|e| tracing::warn!("topology discovery failed: {e}"))
                .ok()
        })
        .as_ref()?;
    plan_on(table, sys, cfg, placement)
        .inspect_err(|e| tracing::warn!("topology search failed: {e}"))
        .ok()
}

/// The topology search over `sys`, taken as every host's system.
pub(crate) fn plan_on(
    table: &[RankInfo],
    sys: &System,
    cfg: &ccl_topology::TopoConfig,
    placement: Placement,
) -> ccl_topology::Result<ccl_topology::plan::Plan> {
    use ccl_topology::plan::{plan, HostSystems, RankInfo as TopoRank};
    let gpus = match placement {
        Placement::Host => vec![None; table.len()],
        Placement::Gpu => rank_gpus(table, sys),
    };
    let ranks: Vec<TopoRank> = table
        .iter()
        .zip(gpus)
        .map(|(i, gpu)| TopoRank {
            host: i.host_id,
            gpu,
            numa: None,
        })
        .collect();
    plan(&ranks, &HostSystems::uniform(sys.clone()), cfg)
}

/// Each rank's GPU as the search can use it: a bus id that `sys` (the system every host is
/// taken to have) holds. The search places one rank per GPU, so the ranks of a host where
/// two share a GPU go by host alone.
pub(crate) fn rank_gpus(table: &[RankInfo], sys: &System) -> Vec<Option<BusId>> {
    let mut gpus: Vec<Option<BusId>> = table
        .iter()
        .map(|t| {
            t.gpu_bus
                .as_deref()
                .and_then(|b| b.parse::<BusId>().ok())
                .filter(|&b| sys.gpu_by_busid(b).is_some())
        })
        .collect();
    let mut seen: HashMap<(u64, BusId), usize> = HashMap::new();
    let mut shared: HashSet<u64> = HashSet::new();
    for (t, g) in table.iter().zip(&gpus) {
        if let Some(b) = g {
            if seen.insert((t.host_id, b.device_id()), t.rank).is_some() {
                shared.insert(t.host_id);
            }
        }
    }
    for (t, g) in table.iter().zip(gpus.iter_mut()) {
        if shared.contains(&t.host_id) {
            *g = None;
        }
    }
    gpus
}
