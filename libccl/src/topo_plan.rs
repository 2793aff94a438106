//! The topology search for a communicator's ranks, over this host's system (discovered once
//! per process): the transports between ranks and the ring order (`crate::connect`), the NICs
//! of links to other hosts (`crate::link_nics`).

use crate::bootstrap::RankInfo;

/// The topology search over this host's system (discovered once per process) for the
/// ranks of `table`; `None` (with a warning) when discovery or the search fails.
pub(crate) fn topo_plan(table: &[RankInfo]) -> Option<ccl_topology::plan::Plan> {
    let cfg = ccl_topology::TopoConfig::from_env()
        .inspect_err(|e| tracing::warn!("topology settings: {e}"))
        .ok()?;
    plan_with(table, &cfg)
}

/// The topology search with settings `cfg` (the environment's, or those with a narrower
/// choice of NICs, `crate::link_nics`).
pub(crate) fn plan_with(
    table: &[RankInfo],
    cfg: &ccl_topology::TopoConfig,
) -> Option<ccl_topology::plan::Plan> {
    use ccl_topology::plan::{plan, HostSystems, RankInfo as TopoRank};
    static SYSTEM: std::sync::OnceLock<Option<ccl_topology::System>> = std::sync::OnceLock::new();
    let sys = SYSTEM
        .get_or_init(|| {
            ccl_topology::discover::system(cfg)
                .inspect_err(|e| tracing::warn!("topology discovery failed: {e}"))
                .ok()
        })
        .clone()?;
    let ranks: Vec<TopoRank> = table
        .iter()
        .map(|i| TopoRank {
            host: i.host_id,
            gpu: None,
            numa: None,
        })
        .collect();
    plan(&ranks, &HostSystems::uniform(sys), cfg)
        .inspect_err(|e| tracing::warn!("topology search failed: {e}"))
        .ok()
}
