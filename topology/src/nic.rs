//! Which network ports are usable (`NCCL_NET`, `NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`) and
//! which is closest to a GPU or CPU: path type first (PIX, PXB, PXN, PHB, SYS), then path
//! bandwidth, then port speed, then device index.

use crate::config::{DeviceFilter, NetSelect, TopoConfig};
use crate::model::{NetKind, NodeId, System};
use crate::paths::Paths;
use crate::types::PathType;

/// The ports a host may use for the network.
#[derive(Clone, Debug, PartialEq)]
pub struct NetSelection {
    /// Usable port nodes, by device index.
    pub usable: Vec<NodeId>,
    /// The network kind chosen (none when nothing is usable).
    pub kind: Option<NetKind>,
    /// Why nothing is usable, when so.
    pub why_none: String,
}

fn default_socket_ok(name: &str) -> bool {
    !(name.starts_with("docker") || name.starts_with("lo"))
}

/// Applies the network knobs to a system's ports.
pub fn select_nets(sys: &System, cfg: &TopoConfig) -> NetSelection {
    let nets = sys.nets();
    let ib: Vec<NodeId> = nets
        .iter()
        .copied()
        .filter(|&n| {
            sys.net(n).is_some_and(|i| {
                i.kind == NetKind::Ib
                    && cfg
                        .ib_hca
                        .as_ref()
                        .map_or(true, |f| f.accepts(&i.name, Some(i.port)))
            })
        })
        .collect();
    let sockets: Vec<NodeId> = nets
        .iter()
        .copied()
        .filter(|&n| sys.net(n).is_some_and(|i| i.kind == NetKind::Socket))
        .collect();
    let name = |n: NodeId| sys.net(n).map(|i| i.name.clone()).unwrap_or_default();
    let sock: Vec<NodeId> = match &cfg.socket_ifname {
        Some(f) => sockets
            .iter()
            .copied()
            .filter(|&n| DeviceFilter::accepts(f, &name(n), None))
            .collect(),
        None => {
            let ib_if: Vec<NodeId> = sockets
                .iter()
                .copied()
                .filter(|&n| name(n).starts_with("ib"))
                .collect();
            let other: Vec<NodeId> = sockets
                .iter()
                .copied()
                .filter(|&n| default_socket_ok(&name(n)))
                .collect();
            let lo: Vec<NodeId> = sockets
                .iter()
                .copied()
                .filter(|&n| name(n).starts_with("lo"))
                .collect();
            if !ib_if.is_empty() {
                ib_if
            } else if !other.is_empty() {
                other
            } else {
                lo
            }
        }
    };
    let (kind, usable) = match cfg.net {
        Some(NetSelect::Ib) => (NetKind::Ib, ib),
        Some(NetSelect::Socket) => (NetKind::Socket, sock),
        None if !ib.is_empty() => (NetKind::Ib, ib),
        None => (NetKind::Socket, sock),
    };
    let why_none = if usable.is_empty() {
        match cfg.net {
            Some(NetSelect::Ib) => {
                "NCCL_NET=IB and no InfiniBand device passes NCCL_IB_HCA".to_string()
            }
            _ if nets.is_empty() => "the system has no network ports".to_string(),
            _ => "no port passes NCCL_IB_HCA / NCCL_SOCKET_IFNAME".to_string(),
        }
    } else {
        String::new()
    };
    NetSelection {
        kind: if usable.is_empty() { None } else { Some(kind) },
        usable,
        why_none,
    }
}

/// The closeness key of port `net` seen from `from`: smaller is closer.
pub fn closeness(
    sys: &System,
    paths: &Paths,
    from: NodeId,
    net: NodeId,
) -> (PathType, i64, i64, u32) {
    let kind = paths.kind(from, net);
    let bw = paths.bw(from, net);
    let info = sys.net(net);
    (
        kind,
        -((bw * 1000.0).round() as i64),
        -(info.map(|i| i.speed_mbps as i64).unwrap_or(0)),
        info.map(|i| i.dev).unwrap_or(u32::MAX),
    )
}

/// Usable ports ordered from closest to farthest from `from` (a GPU or CPU node).
pub fn rank_nets(sys: &System, paths: &Paths, from: NodeId, usable: &[NodeId]) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = usable.to_vec();
    v.sort_by_key(|&n| closeness(sys, paths, from, n));
    v
}

/// The ports tied for closest to `from`.
pub fn closest_set(sys: &System, paths: &Paths, from: NodeId, usable: &[NodeId]) -> Vec<NodeId> {
    let ranked = rank_nets(sys, paths, from, usable);
    let Some(&first) = ranked.first() else {
        return Vec::new();
    };
    let key = |n| {
        let (k, bw, sp, _) = closeness(sys, paths, from, n);
        (k, bw, sp)
    };
    let best = key(first);
    ranked.into_iter().filter(|&n| key(n) == best).collect()
}

/// The backup port for `from` whose primary is `primary`: another usable port of the same
/// NIC first, else the next closest usable port. Never the primary.
pub fn backup_net(
    sys: &System,
    paths: &Paths,
    from: NodeId,
    primary: NodeId,
    usable: &[NodeId],
) -> Option<NodeId> {
    let nic = sys.nic_of_net(primary);
    let siblings: Vec<NodeId> = usable
        .iter()
        .copied()
        .filter(|&n| n != primary && nic.is_some() && sys.nic_of_net(n) == nic)
        .collect();
    if let Some(&s) = rank_nets(sys, paths, from, &siblings).first() {
        return Some(s);
    }
    // The next closest class; within it prefer the primary's NUMA node, then the device
    // that follows the primary cyclically, so that backups spread over the NICs.
    let others: Vec<NodeId> = usable.iter().copied().filter(|&n| n != primary).collect();
    let ranked = rank_nets(sys, paths, from, &others);
    let first = *ranked.first()?;
    let class = |n: NodeId| {
        let (k, bw, sp, _) = closeness(sys, paths, from, n);
        (k, bw, sp)
    };
    let best = class(first);
    let pdev = sys.net(primary).map(|i| i.dev).unwrap_or(0);
    let pnuma = sys.numa_of(primary);
    ranked
        .into_iter()
        .filter(|&n| class(n) == best)
        .min_by_key(|&n| {
            let dev = sys.net(n).map(|i| i.dev).unwrap_or(0);
            (
                sys.numa_of(n) != pnuma,
                dev.wrapping_sub(pdev).wrapping_sub(1),
            )
        })
}
