//! Which NIC a link to another host uses first: the topology plan's primary NIC of the rank
//! (the one closest to its GPU, found by the GPU's PCI bus id, else to its CPU; ranks of one
//! host spread over NICs tied for closest), then its backup NIC (the next closest), then the
//! other selected NICs in list order.
//!
//! The NICs are those `CCL_MPT_IFNAMES` names, else those a positive `NCCL_SOCKET_IFNAME`
//! list selects: the same list on every host, so a NIC's place in it (its rail) means the same
//! port on both ends of a link. Both ends must put the same rail first (a path or connection
//! binds this side's rail `k` and talks to the peer's rail `k`), so the two exchange their
//! preferred orders when the link is set up and both take the lower rank's: the same answer
//! on both sides even where their views of each other's host differ.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};

use ccl_topology::link_order::{link_order, plan_nic_names, preferred_order, widest_order};
use ccl_topology::plan::Plan;

use crate::bootstrap::RankInfo;
use crate::error::{Error, Result};
use crate::params;

/// The NICs selected for links to other hosts, in list order, and this rank's preferred order
/// of them (indices into `ips`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkNics {
    /// Interface names, in list order (a rail is a place in this list).
    pub names: Vec<String>,
    /// Their addresses.
    pub ips: Vec<IpAddr>,
    /// This rank's order: the plan's primary first, then its backup, then the rest.
    pub mine: Vec<usize>,
}

impl LinkNics {
    /// The selected NICs and this rank's order of them from the topology plan of `table`
    /// (list order when the plan has no NIC for this rank or names none of them).
    pub(crate) fn for_rank(table: &[RankInfo], rank: usize) -> Result<Self> {
        let (names, ips) = selected_nics()?;
        let mine = if names.len() < 2 {
            (0..names.len()).collect()
        } else {
            let plan = nic_plan(table, &names);
            let (primary, backup) = plan
                .as_ref()
                .map(|p| plan_nic_names(p, rank))
                .unwrap_or_default();
            let order = preferred_order(&names, primary.as_deref(), backup.as_deref());
            let host = table.get(rank).map(|t| t.host_id);
            let local = table.iter().filter(|t| Some(t.host_id) == host).count();
            widest_order(&PROCESS_ORDER, &names, local, order)
        };
        let nics = LinkNics { names, ips, mine };
        if nics.ips.len() >= 2 {
            tracing::info!(
                "rank {rank}: links to other hosts prefer NICs {}",
                nics.describe(&nics.mine)
            );
        }
        Ok(nics)
    }

    /// The NICs of `order`, named with their addresses, for logs.
    pub(crate) fn describe(&self, order: &[usize]) -> String {
        order
            .iter()
            .filter_map(|&k| Some(format!("{} ({})", self.names.get(k)?, self.ips.get(k)?)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The addresses of `order`.
    pub(crate) fn ips_in(&self, order: &[usize]) -> Vec<IpAddr> {
        order
            .iter()
            .filter_map(|&k| self.ips.get(k).copied())
            .collect()
    }
}

static PROCESS_ORDER: ccl_topology::link_order::Widest = std::sync::Mutex::new(None);

/// `CCL_MPT_IFNAMES`, else the NICs a positive `NCCL_SOCKET_IFNAME` list names (two or more):
/// their names and addresses (empty: the link's own address).
pub(crate) fn selected_nics() -> Result<(Vec<String>, Vec<IpAddr>)> {
    let spec = params::CCL_MPT_IFNAMES.get_str();
    let names: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.len() > ccl_transports::mpt_link::MAX_NICS {
        return Err(Error::invalid_argument(format!(
            "CCL_MPT_IFNAMES names {} interfaces; at most {}",
            names.len(),
            ccl_transports::mpt_link::MAX_NICS
        )));
    }
    let nics = if names.is_empty() {
        crate::bootstrap::socket_ifname_nics(ccl_transports::mpt_link::MAX_NICS)?
    } else {
        let ips = crate::bootstrap::named_interface_ips(&names)?;
        names.iter().map(|n| n.to_string()).zip(ips).collect()
    };
    Ok(nics.into_iter().unzip())
}

/// The topology plan of `table` with the selected interfaces as this host's only network
/// ports (socket interfaces, whatever RDMA devices the host has: these links are sockets);
/// `None` (logged) when discovery or the search fails.
fn nic_plan(table: &[RankInfo], names: &[String]) -> Option<Plan> {
    let mut cfg = ccl_topology::TopoConfig::from_env()
        .inspect_err(|e| tracing::warn!("topology settings: {e}"))
        .ok()?;
    cfg.net = Some(ccl_topology::NetSelect::Socket);
    cfg.socket_ifname = Some(
        ccl_topology::DeviceFilter::parse(
            "CCL_MPT_IFNAMES",
            &format!("={}", names.join(",")),
            false,
        )
        .inspect_err(|e| tracing::warn!("NIC list for the topology: {e}"))
        .ok()?,
    );
    crate::topo_plan::plan_with(table, &cfg, crate::topo_plan::Placement::Gpu)
}

/// Sends this rank's order over the data stream `s` to `peer` and reads the peer's; returns
/// the order both use ([`link_order`]). Both sides write before they read, and a few bytes fit
/// any socket buffer, so neither waits on the other's read.
pub(crate) fn agree(s: &TcpStream, rank: usize, peer: usize, mine: &[usize]) -> Result<Vec<usize>> {
    let io = |e: std::io::Error| Error::system(format!("NIC order with rank {peer}: {e}"));
    let mut s = s.try_clone().map_err(io)?;
    let before = s.read_timeout().map_err(io)?;
    s.set_nonblocking(false).map_err(io)?;
    s.set_read_timeout(Some(crate::bootstrap::bootstrap_timeout()))
        .map_err(io)?;
    let mut msg = vec![mine.len() as u8];
    msg.extend(mine.iter().map(|&k| k as u8));
    s.write_all(&msg).map_err(io)?;
    let mut len = [0u8; 1];
    s.read_exact(&mut len).map_err(io)?;
    let mut theirs = vec![0u8; usize::from(len[0])];
    s.read_exact(&mut theirs).map_err(io)?;
    s.set_read_timeout(before).map_err(io)?;
    let theirs: Vec<usize> = theirs.into_iter().map(usize::from).collect();
    let mut sorted = theirs.clone();
    sorted.sort_unstable();
    if sorted != (0..mine.len()).collect::<Vec<_>>() {
        return Err(Error::invalid_argument(format!(
            "rank {peer} orders NICs {theirs:?}, not a permutation of this rank's {} selected \
             NICs: every rank must select the same number (CCL_MPT_IFNAMES / NCCL_SOCKET_IFNAME)",
            mine.len()
        )));
    }
    Ok(link_order(rank, peer, mine, &theirs))
}

#[cfg(test)]
mod tests;
