//! Which NIC a link to another host uses first: the topology plan's primary NIC of the rank
//! (the one closest to its GPU or CPU, ranks of one host spread over NICs tied for closest),
//! then its backup NIC, then the other selected NICs in list order.
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
    crate::topo_plan::plan_with(table, &cfg)
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
mod tests {
    use super::{link_order, plan_nic_names, preferred_order};

    /// A host without RDMA devices as the topology discovers it from sysfs: two socket
    /// interfaces up (veth, no PCI device) besides loopback.
    fn host_root(dir: &std::path::Path) {
        for (name, state) in [("lo", "unknown"), ("nic0", "up"), ("nic1", "up")] {
            let d = dir.join("sys/class/net").join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("operstate"), state).unwrap();
            std::fs::write(d.join("speed"), "10000").unwrap();
        }
    }

    /// Two hosts of two ranks with the selected interfaces nic0 and nic1: the plan spreads
    /// each host's ranks over both (first rank nic0, second nic1), each with the other as
    /// backup, and the link orders follow the lower rank.
    #[test]
    fn ranks_of_a_host_spread_their_primaries_over_the_selected_nics() {
        use ccl_topology::plan::{plan, HostSystems, RankInfo};
        let dir = std::env::temp_dir().join(format!("ccl-link-nics-{}", std::process::id()));
        host_root(&dir);
        let (sys, _) = ccl_topology::discover::discover_local(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = ccl_topology::TopoConfig {
            net: Some(ccl_topology::NetSelect::Socket),
            ..Default::default()
        };
        cfg.socket_ifname =
            Some(ccl_topology::DeviceFilter::parse("X", "=nic0,nic1", false).unwrap());
        let ranks: Vec<RankInfo> = [7u64, 7, 9, 9]
            .iter()
            .map(|&host| RankInfo {
                host,
                gpu: None,
                numa: None,
            })
            .collect();
        let p = plan(&ranks, &HostSystems::uniform(sys), &cfg).unwrap();
        let list: Vec<String> = ["nic0", "nic1"].map(String::from).to_vec();
        let orders: Vec<Vec<usize>> = (0..4)
            .map(|r| {
                let (primary, backup) = plan_nic_names(&p, r);
                preferred_order(&list, primary.as_deref(), backup.as_deref())
            })
            .collect();
        assert_eq!(orders, [vec![0, 1], vec![1, 0], vec![0, 1], vec![1, 0]]);
        assert_eq!(
            plan_nic_names(&p, 1),
            (Some("nic1".to_string()), Some("nic0".to_string()))
        );
        // Rank 1's links to host 9 run on nic1 first; rank 0's on nic0.
        assert_eq!(link_order(2, 1, &orders[2], &orders[1]), [1, 0]);
        assert_eq!(link_order(0, 3, &orders[0], &orders[3]), [0, 1]);
        // One interface selected (the list of NCCL_SOCKET_IFNAME=nic1): it is every rank's.
        cfg.socket_ifname = Some(ccl_topology::DeviceFilter::parse("X", "=nic1", false).unwrap());
        let dir = std::env::temp_dir().join(format!("ccl-link-nics1-{}", std::process::id()));
        host_root(&dir);
        let (sys, _) = ccl_topology::discover::discover_local(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let p = plan(&ranks, &HostSystems::uniform(sys), &cfg).unwrap();
        for r in 0..4 {
            assert_eq!(plan_nic_names(&p, r), (Some("nic1".to_string()), None));
        }
    }
}
