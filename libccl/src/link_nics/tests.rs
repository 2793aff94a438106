//! The NIC order of links: the plan's primaries per host and per GPU.

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
    cfg.socket_ifname = Some(ccl_topology::DeviceFilter::parse("X", "=nic0,nic1", false).unwrap());
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

/// Two DGX-like hosts of eight GPUs, each GPU with a NIC on its own PCIe switch (the
/// project's `dgx-h100-nvswitch.xml`, its NICs taken as socket interfaces rail0..rail7),
/// one rank per GPU, GPUs given to ranks in reverse (as `CUDA_VISIBLE_DEVICES` may): each
/// rank's links prefer the NIC beside its GPU, then another; told the host alone, the
/// ranks would go by rank order instead.
#[test]
fn each_gpu_links_by_the_nic_beside_it() {
    use crate::bootstrap::RankInfo as Card;
    use crate::topo_plan::{plan_on, Placement};
    let xml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/topologies/dgx-h100-nvswitch.xml"),
    )
    .unwrap()
    .replace("<net name=\"mlx5_", "<net transport=\"socket\" name=\"rail");
    let sys = ccl_topology::xml::parse_str(&xml, "dgx").unwrap();
    let mut gpus: Vec<(u32, String)> = sys
        .gpus()
        .into_iter()
        .filter_map(|g| sys.gpu(g).map(|i| (i.dev, i.pci.busid.to_string())))
        .collect();
    gpus.sort();
    assert_eq!(gpus.len(), 8);
    let card = |rank: usize, host: u64, bus: Option<String>| Card {
        rank,
        addr: "127.0.0.1:1".parse().unwrap(),
        host_id: host,
        hostname: format!("h{host}"),
        pid: 1,
        gpu_bus: bus,
    };
    let table: Vec<Card> = (0..16)
        .map(|r| card(r, [7u64, 9][r / 8], Some(gpus[7 - r % 8].1.to_uppercase())))
        .collect();
    let rails: Vec<String> = (0..8).map(|k| format!("rail{k}")).collect();
    let cfg = ccl_topology::TopoConfig {
        net: Some(ccl_topology::NetSelect::Socket),
        socket_ifname: Some(
            ccl_topology::DeviceFilter::parse("X", &format!("={}", rails.join(",")), false)
                .unwrap(),
        ),
        ..Default::default()
    };
    let p = plan_on(&table, &sys, &cfg, Placement::Gpu).unwrap();
    for r in 0..16 {
        let (primary, backup) = plan_nic_names(&p, r);
        assert_eq!(
            primary.as_deref(),
            Some(format!("rail{}", 7 - r % 8).as_str()),
            "rank {r}"
        );
        let backup = backup.unwrap_or_else(|| panic!("rank {r} has no backup"));
        assert!(
            rails.contains(&backup) && Some(&backup) != primary.as_ref(),
            "rank {r}: {backup}"
        );
        let order = preferred_order(&rails, primary.as_deref(), Some(&backup));
        assert_eq!(order[0], 7 - r % 8);
    }
    // Told the host alone, the ranks spread in rank order: rank 0 on rail0, not rail7.
    let p = plan_on(&table, &sys, &cfg, Placement::Host).unwrap();
    assert_eq!(plan_nic_names(&p, 0).0.as_deref(), Some("rail0"));
    // Two ranks of host 7 on one GPU: that host's ranks go by host, the other keeps GPUs.
    let mut shared = table.clone();
    shared[1].gpu_bus = shared[0].gpu_bus.clone();
    let p = plan_on(&shared, &sys, &cfg, Placement::Gpu).unwrap();
    assert_eq!(plan_nic_names(&p, 0).0.as_deref(), Some("rail0"));
    assert_eq!(plan_nic_names(&p, 8).0.as_deref(), Some("rail7"));
    // A bus id this system lacks (another host's layout) or none: placed by host.
    shared[8].gpu_bus = Some("0000:ee:00.0".into());
    shared[9].gpu_bus = None;
    assert!(plan_on(&shared, &sys, &cfg, Placement::Gpu).is_ok());
}
