//! Snapshot and invariant tests over the synthetic topologies in `tests/topologies/` and the
//! real (Azure) files in `../shared/topologies/`, alone and as 2/16/128-host clusters.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Instant;

use ccl_topology::report::{json_report, plan_cluster, text_report};
use ccl_topology::*;
use common::{all, check_plan, load};

fn cfg(pairs: &[(&str, &str)]) -> TopoConfig {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    TopoConfig::from_lookup(|k| m.get(k).cloned()).unwrap()
}

fn stem(name: &str) -> &str {
    name.trim_end_matches(".xml")
}

#[test]
fn single_node_snapshots() {
    for (name, sys) in all() {
        let plan = plan_cluster(&sys, 1, &TopoConfig::default()).unwrap();
        check_plan(&plan);
        insta::assert_snapshot!(format!("{}-1node", stem(name)), text_report(&plan, 16));
    }
}

#[test]
fn two_node_snapshots() {
    for (name, sys) in all() {
        let plan = plan_cluster(&sys, 2, &TopoConfig::default()).unwrap();
        check_plan(&plan);
        let mut s = text_report(&plan, 32);
        // The system part is the same as the single-node snapshot.
        if let Some(i) = s.find("channels:") {
            s = s.split_off(i);
        }
        insta::assert_snapshot!(format!("{}-2nodes", stem(name)), s);
    }
}

#[test]
fn large_clusters_hold_the_invariants() {
    for (name, sys) in all() {
        for hosts in [16, 128] {
            let t = Instant::now();
            let plan = plan_cluster(&sys, hosts, &TopoConfig::default()).unwrap();
            let dt = t.elapsed();
            check_plan(&plan);
            assert_eq!(plan.hosts.len(), hosts);
            assert!(dt.as_secs_f64() < 10.0, "{name} x{hosts}: {dt:?}");
        }
    }
}

fn cluster_summary(name: &str, sys: &System) -> String {
    let mut out = String::new();
    for hosts in [16, 128] {
        let plan = plan_cluster(sys, hosts, &TopoConfig::default()).unwrap();
        let ch = &plan.channels[0];
        let head: Vec<String> = ch.ring.iter().take(12).map(|r| r.to_string()).collect();
        out.push_str(&format!(
            "{name} x{hosts}: {} ranks, {} channels, intra {} GB/s, inter {} GB/s, ring0 {} ..., tree0 root {} tree1 root {}\n",
            plan.nranks,
            plan.channels.len(),
            types::round_bw(ch.bw_intra),
            types::round_bw(ch.bw_inter.unwrap_or(0.0)),
            head.join(" "),
            plan.channels[0].tree.root,
            plan.channels.get(1).map(|c| c.tree.root).unwrap_or(0),
        ));
    }
    out
}

/// Synthetic files always; the shared real files in their own snapshot, only where this
/// checkout has `../shared` (CI does), so a checkout without it still passes.
#[test]
fn cluster_summaries() {
    let mut synthetic = String::new();
    let mut shared = String::new();
    for (name, sys) in all() {
        let part = cluster_summary(name, &sys);
        if common::SYNTHETIC.contains(&name) {
            synthetic.push_str(&part);
        } else {
            shared.push_str(&part);
        }
    }
    insta::assert_snapshot!("cluster-summaries-synthetic", synthetic);
    if common::shared_dir().is_some() {
        insta::assert_snapshot!("cluster-summaries-shared", shared);
    }
}

#[test]
fn json_has_the_documented_fields() {
    let sys = load("dgx-h100-nvswitch.xml").unwrap();
    let plan = plan_cluster(&sys, 1, &TopoConfig::default()).unwrap();
    let j = json_report(&plan);
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    for k in ["dev", "busid", "numa", "nic", "backup_nic"] {
        assert!(!j["gpus"][0][k].is_null(), "gpus[].{k}");
    }
    assert_eq!(j["gpus"][0]["nic"], "mlx5_0");
    for k in ["name", "dev", "busid", "speed_gbps", "port"] {
        assert!(!j["nics"][0][k].is_null(), "nics[].{k}");
    }
    // Every GPU-GPU and GPU-NIC pair.
    assert_eq!(j["paths"].as_array().unwrap().len(), 8 * 7 + 8 * 9);
    assert_eq!(j["paths"][0]["from"], "gpu0");
    assert_eq!(j["paths"][0]["type"], "NVL");
    assert!(j["rings"][0]["order"].as_array().unwrap().len() == 8);
    assert!(j["rings"][0]["bw_gbps"].as_f64().unwrap() > 0.0);
    assert!(!j["trees"].as_array().unwrap().is_empty());
    insta::assert_snapshot!(
        "nvlink-pair-json",
        serde_json::to_string_pretty(&json_report(
            &plan_cluster(&load("nvlink-pair.xml").unwrap(), 1, &TopoConfig::default()).unwrap()
        ))
        .unwrap()
    );
}

#[test]
fn xml_round_trip() {
    for (name, sys) in all() {
        let a = xml::to_string(&sys);
        let b = xml::to_string(&xml::parse_str(&a, name).unwrap());
        assert_eq!(a, b, "{name}: dump -> read -> dump differs");
        // And the re-read system is the same model.
        let again = xml::parse_str(&b, name).unwrap();
        assert_eq!(again.gpus().len(), sys.gpus().len());
        assert_eq!(again.nets().len(), sys.nets().len());
        assert_eq!(again.links.len(), sys.links.len());
    }
    let dgx = load("dgx-h100-nvswitch.xml").unwrap();
    insta::assert_snapshot!(
        "dualport-dump",
        xml::to_string(&load("dualport.xml").unwrap())
    );
    assert!(xml::to_string(&dgx)
        .contains("<nvlink target=\"0000:05:00.0\" count=\"5\" tclass=\"0x068000\"/>"));
}

#[test]
fn skeletons_are_recognised() {
    let Some(v4) = load("ndv4-topo.xml") else {
        return;
    };
    assert_eq!(v4.gpus().len(), 8);
    assert_eq!(v4.nets().len(), 8);
    assert_eq!(v4.cpus().len(), 4);
    let Some(v5) = load("ndv5-topo.xml") else {
        return;
    };
    let p = Paths::compute(&v5, PathOptions::default());
    // Each GPU shares a switch with one NIC: PIX, and that NIC is its primary.
    let plan = plan_cluster(&v5, 1, &TopoConfig::default()).unwrap();
    for (r, &g) in v5.gpus().iter().enumerate() {
        let nic = v5.net_by_dev(plan.primary_nic[r].unwrap()).unwrap();
        assert_eq!(p.kind(g, nic), PathType::Pix);
        assert_eq!(v5.net(nic).unwrap().speed_mbps, 400_000);
    }
}

#[test]
fn transports_follow_the_knobs() {
    let pcie = load("pcie-8gpu.xml").unwrap();
    let plan = plan_cluster(&pcie, 1, &TopoConfig::default()).unwrap();
    assert_eq!(plan.transport(0, 0).unwrap().transport, Transport::Loc);
    let t = plan.transport(0, 1).unwrap();
    assert_eq!(t.transport, Transport::P2p(PathType::Pix));
    assert_eq!(t.reason.to_string(), "path PIX within P2P level PXB");
    let t = plan.transport(0, 2).unwrap();
    assert_eq!(t.transport, Transport::Shm);
    assert_eq!(
        t.reason.to_string(),
        "same host, path PHB is beyond the P2P level PXB"
    );
    let plan = plan_cluster(&pcie, 1, &cfg(&[("NCCL_P2P_LEVEL", "SYS")])).unwrap();
    assert_eq!(
        plan.transport(0, 7).unwrap().transport,
        Transport::P2p(PathType::Sys)
    );
    let plan = plan_cluster(&pcie, 1, &cfg(&[("NCCL_P2P_LEVEL", "NVL")])).unwrap();
    assert_eq!(plan.transport(0, 1).unwrap().transport, Transport::Shm);
    let plan = plan_cluster(&pcie, 1, &cfg(&[("NCCL_P2P_DISABLE", "1")])).unwrap();
    let t = plan.transport(0, 1).unwrap();
    assert_eq!(t.transport, Transport::Shm);
    assert_eq!(t.reason, TransportReason::SharedMemory(NoP2p::Disabled));
    let plan = plan_cluster(
        &pcie,
        1,
        &cfg(&[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")]),
    )
    .unwrap();
    assert_eq!(plan.transport(0, 1).unwrap().transport, Transport::Net);
    check_plan(&plan);

    let dgx = load("dgx-h100-nvswitch.xml").unwrap();
    let plan = plan_cluster(&dgx, 2, &TopoConfig::default()).unwrap();
    assert_eq!(
        plan.transport(0, 5).unwrap().transport,
        Transport::P2p(PathType::Nvl)
    );
    let t = plan.transport(0, 8).unwrap();
    assert_eq!(
        (t.transport, t.reason),
        (Transport::Net, TransportReason::DifferentHosts)
    );
}

#[test]
fn network_knobs() {
    let dgx = load("dgx-h100-nvswitch.xml").unwrap();
    // Sockets only: everyone uses eno1.
    let plan = plan_cluster(&dgx, 2, &cfg(&[("NCCL_NET", "Socket")])).unwrap();
    check_plan(&plan);
    let eno1 = dgx.net(dgx.net_by_dev(8).unwrap()).unwrap();
    assert_eq!(eno1.name, "eno1");
    assert!(plan.primary_nic.iter().all(|&n| n == Some(8)));
    // Excluding mlx5_0: GPU0 goes to another NIC through an NVLink peer (PXN).
    let plan = plan_cluster(&dgx, 2, &cfg(&[("NCCL_IB_HCA", "^=mlx5_0")])).unwrap();
    check_plan(&plan);
    assert!(!plan.hosts[0].nets.contains(&0));
    assert_ne!(plan.primary_nic[0], Some(0));
    // Selecting two HCAs by prefix.
    let plan = plan_cluster(&dgx, 2, &cfg(&[("NCCL_IB_HCA", "=mlx5_1,mlx5_2")])).unwrap();
    assert_eq!(plan.hosts[0].nets, vec![1, 2]);
    check_plan(&plan);

    let dual = load("dualport.xml").unwrap();
    let plan = plan_cluster(&dual, 2, &cfg(&[("NCCL_IB_HCA", "mlx5_2:2")])).unwrap();
    assert_eq!(plan.hosts[0].nets, vec![3]);
    assert!(plan.backup_nic.iter().all(Option::is_none));
    check_plan(&plan);

    let pair = load("nvlink-pair.xml").unwrap();
    let plan = plan_cluster(&pair, 2, &TopoConfig::default()).unwrap();
    assert_eq!(plan.hosts[0].nets, vec![0], "lo is left out by default");
    let plan = plan_cluster(&pair, 2, &cfg(&[("NCCL_SOCKET_IFNAME", "lo")])).unwrap();
    assert_eq!(plan.hosts[0].nets, vec![1]);
    let plan = plan_cluster(&pair, 2, &cfg(&[("NCCL_SOCKET_IFNAME", "^=eth0")])).unwrap();
    assert_eq!(plan.hosts[0].nets, vec![1]);
    let e = plan_cluster(&pair, 2, &cfg(&[("NCCL_NET", "IB")])).unwrap_err();
    assert!(matches!(e, TopoError::NoNetwork { .. }), "{e}");
    // One host needs no network.
    assert!(plan_cluster(&pair, 1, &cfg(&[("NCCL_NET", "IB")])).is_ok());
}

#[test]
fn cross_nic() {
    for name in ["pcie-8gpu.xml", "dgx-h100-nvswitch.xml", "dualport.xml"] {
        let sys = load(name).unwrap();
        let plan = plan_cluster(&sys, 4, &cfg(&[("NCCL_CROSS_NIC", "0")])).unwrap();
        check_plan(&plan);
        for ch in &plan.channels {
            // The NIC a host is entered on is the one it is left on, and the same on
            // every host (one rail per channel).
            let mut rail = None;
            for h in &plan.hosts {
                let seg: Vec<usize> = ch
                    .ring
                    .iter()
                    .copied()
                    .filter(|r| h.ranks.contains(r))
                    .collect();
                let (first, last) = (seg[0], seg[seg.len() - 1]);
                assert_eq!(ch.nic[first], ch.nic[last], "{name}");
                if let Some(x) = rail {
                    assert_eq!(ch.nic[first], x);
                }
                rail = Some(ch.nic[first]);
            }
        }
        let allow = plan_cluster(&sys, 4, &cfg(&[("NCCL_CROSS_NIC", "1")])).unwrap();
        check_plan(&allow);
    }
}

#[test]
fn channel_limits() {
    let dgx = load("dgx-h100-nvswitch.xml").unwrap();
    let plan = plan_cluster(&dgx, 1, &cfg(&[("NCCL_MAX_NCHANNELS", "4")])).unwrap();
    assert_eq!(plan.channels.len(), 4);
    check_plan(&plan);
    let pcie = load("pcie-8gpu.xml").unwrap();
    let plan = plan_cluster(&pcie, 1, &cfg(&[("NCCL_MIN_NCHANNELS", "6")])).unwrap();
    assert_eq!(plan.channels.len(), 6);
    check_plan(&plan);
    let plan = plan_cluster(
        &pcie,
        3,
        &cfg(&[("NCCL_MIN_NCHANNELS", "32"), ("NCCL_MAX_NCHANNELS", "32")]),
    )
    .unwrap();
    assert_eq!(plan.channels.len(), 32);
    check_plan(&plan);
}

#[test]
fn host_backend_groups_by_host_and_numa() {
    // A GPU-less machine with two NUMA nodes and one NIC.
    let x = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="AuthenticAMD">
    <pci busid="0000:00:03.0" class="0x020000"><nic><net name="eth0" dev="0" speed="25000" port="0"/></nic></pci>
    <nic><net name="lo" dev="1" port="0"/></nic>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="AuthenticAMD"/>
</system>"#;
    let sys = xml::parse_str(x, "host").unwrap();
    // 3 hosts x 4 ranks, interleaved: rank r on host r % 3, NUMA (r / 3) % 2.
    let ranks: Vec<RankInfo> = (0..12)
        .map(|r| RankInfo {
            host: 100 + (r % 3) as u64,
            gpu: None,
            numa: Some(((r / 3) % 2) as u32),
        })
        .collect();
    let plan = plan(&ranks, &HostSystems::uniform(sys), &TopoConfig::default()).unwrap();
    check_plan(&plan);
    assert_eq!(plan.hosts.len(), 3);
    for ch in &plan.channels {
        // Within each host segment, NUMA nodes are contiguous (one change at most).
        for h in &plan.hosts {
            let seg: Vec<usize> = ch
                .ring
                .iter()
                .copied()
                .filter(|r| h.ranks.contains(r))
                .collect();
            let numa: Vec<u32> = seg.iter().map(|&r| ranks[r].numa.unwrap()).collect();
            let changes = numa.windows(2).filter(|w| w[0] != w[1]).count()
                + usize::from(numa.first() != numa.last());
            assert!(changes <= 2, "{numa:?}");
        }
    }
    assert_eq!(plan.transport(0, 3).unwrap().transport, Transport::Shm);
    assert_eq!(plan.transport(0, 1).unwrap().transport, Transport::Net);
    assert!(plan.primary_nic.iter().all(|&n| n == Some(0)));
    insta::assert_snapshot!("host-backend", text_report(&plan, 12));
}

#[test]
fn rank_errors() {
    let pair = load("nvlink-pair.xml").unwrap();
    let systems = HostSystems::uniform(pair);
    assert!(plan(&[], &systems, &TopoConfig::default()).is_err());
    let bad = RankInfo {
        host: 1,
        gpu: Some("0000:77:00.0".parse().unwrap()),
        numa: None,
    };
    let e = plan(&[bad], &systems, &TopoConfig::default()).unwrap_err();
    assert!(e.to_string().contains("0000:77:00.0"), "{e}");
    let g: BusId = "0000:19:00.0".parse().unwrap();
    let r = RankInfo {
        host: 1,
        gpu: Some(g),
        numa: None,
    };
    let e = plan(&[r.clone(), r], &systems, &TopoConfig::default()).unwrap_err();
    assert!(e.to_string().contains("same GPU"), "{e}");
    // CUDA's 8-digit domain form finds the GPU too.
    let r = RankInfo {
        host: 1,
        gpu: Some("00000000:3B:00.0".parse().unwrap()),
        numa: None,
    };
    assert!(plan(&[r], &systems, &TopoConfig::default()).is_ok());
}

#[test]
fn subset_of_gpus() {
    // A communicator over 4 of the 8 GPUs of each of 2 hosts.
    let dgx = load("dgx-h100-nvswitch.xml").unwrap();
    let gpus = dgx.gpus();
    let ranks: Vec<RankInfo> = (0..8)
        .map(|r| RankInfo {
            host: (r / 4) as u64,
            gpu: dgx.gpu(gpus[(r % 4) * 2]).map(|g| g.pci.busid),
            numa: None,
        })
        .collect();
    let plan = plan(&ranks, &HostSystems::uniform(dgx), &TopoConfig::default()).unwrap();
    check_plan(&plan);
    assert_eq!(plan.channels[0].ring.len(), 8);
}

#[test]
fn reads_nccls_own_dump_and_matches_its_search() {
    // NCCL 2.28.9 on the 2 x H200 machine dumped this and chose 12 ring channels at
    // 30 GB/s (pattern 4, NVL) for it.
    let sys = xml::read_file(&common::synthetic_dir().join("h200-nccl-dump.xml")).unwrap();
    assert_eq!(sys.gpus().len(), 2);
    let cpu = sys.cpu(sys.cpus()[0]).unwrap();
    assert!(cpu.numa_unknown);
    let plan = plan_cluster(&sys, 1, &TopoConfig::default()).unwrap();
    check_plan(&plan);
    assert_eq!(
        plan.transport(0, 1).unwrap().transport,
        Transport::P2p(PathType::Nvl)
    );
    assert_eq!(plan.channels.len(), 12);
    assert_eq!(plan.channels[0].bw_intra, 30.0);
    let a = xml::to_string(&sys);
    assert!(a.contains("numaid=\"-1\""));
    assert!(a.contains("target=\"fffffff:ff:ff.0\""));
    assert_eq!(a, xml::to_string(&xml::parse_str(&a, "again").unwrap()));
}
