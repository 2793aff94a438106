//! Discovery over a fake sysfs tree, and merging a topology file with what was found.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use ccl_topology::discover::{self, CudaGpu};
use ccl_topology::report::plan_cluster;
use ccl_topology::*;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn pci(root: &Path, path: &str, class: &str, vendor: &str, device: &str, numa: i32) {
    let busid = path.rsplit('/').next().unwrap();
    let dir = format!("sys/devices/{path}");
    put(root, &format!("{dir}/class"), class);
    put(root, &format!("{dir}/vendor"), vendor);
    put(root, &format!("{dir}/device"), device);
    put(root, &format!("{dir}/numa_node"), &numa.to_string());
    put(root, &format!("{dir}/max_link_speed"), "32.0 GT/s PCIe");
    put(root, &format!("{dir}/max_link_width"), "16");
    fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
    symlink(
        root.join(&dir),
        root.join(format!("sys/bus/pci/devices/{busid}")),
    )
    .unwrap();
}

/// Two sockets; on socket 0 a PCIe switch (upstream port + two downstream ports) holding a
/// GPU and a dual-function HCA; on socket 1 a GPU on a root port; a virtio NIC; lo; ifb0
/// (down).
fn fake_machine(tag: &str) -> Tree {
    let root = std::env::temp_dir().join(format!("ccl-topo-fake-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let r = root.as_path();
    put(r, "sys/devices/system/node/node0/cpumap", "0000ffff");
    put(r, "sys/devices/system/node/node1/cpumap", "ffff0000");
    put(
        r,
        "proc/cpuinfo",
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\nprocessor\t: 1\n",
    );
    let rp = "pci0000:00/0000:00:01.0";
    pci(r, rp, "0x060400", "0x8086", "0x0001", 0);
    let usp = format!("{rp}/0000:01:00.0");
    pci(r, &usp, "0x060400", "0x1000", "0xc030", 0);
    pci(
        r,
        &format!("{usp}/0000:02:00.0"),
        "0x060400",
        "0x1000",
        "0xc030",
        0,
    );
    pci(
        r,
        &format!("{usp}/0000:02:01.0"),
        "0x060400",
        "0x1000",
        "0xc030",
        0,
    );
    pci(
        r,
        &format!("{usp}/0000:02:00.0/0000:03:00.0"),
        "0x030200",
        "0x10de",
        "0x2330",
        0,
    );
    let hca = format!("{usp}/0000:02:01.0/0000:04:00.0");
    let hca1 = format!("{usp}/0000:02:01.0/0000:04:00.1");
    pci(r, &hca, "0x020700", "0x15b3", "0x1021", 0);
    pci(r, &hca1, "0x020700", "0x15b3", "0x1021", 0);
    pci(
        r,
        "pci0000:80/0000:80:01.0",
        "0x060400",
        "0x8086",
        "0x0001",
        1,
    );
    pci(
        r,
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        "0x030200",
        "0x10de",
        "0x2330",
        1,
    );
    pci(
        r,
        "pci0000:00/0000:00:03.0",
        "0x020000",
        "0x1af4",
        "0x1041",
        -1,
    );
    for (name, dev) in [("mlx5_0", &hca), ("mlx5_1", &hca1)] {
        let d = format!("sys/class/infiniband/{name}");
        put(r, &format!("{d}/node_guid"), "b83f:d203:0001:0000");
        put(r, &format!("{d}/ports/1/state"), "4: ACTIVE");
        put(r, &format!("{d}/ports/1/rate"), "400 Gb/sec (4X NDR)");
        symlink(
            r.join(format!("sys/devices/{dev}")),
            r.join(format!("{d}/device")),
        )
        .unwrap();
    }
    // A down port is left out.
    put(r, "sys/class/infiniband/mlx5_1/ports/2/state", "1: DOWN");
    let eth = "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0";
    put(r, &format!("{eth}/operstate"), "up");
    put(r, &format!("{eth}/speed"), "-1");
    put(r, "sys/devices/virtual/net/lo/operstate", "unknown");
    put(r, "sys/devices/virtual/net/ifb0/operstate", "down");
    fs::create_dir_all(r.join("sys/class/net")).unwrap();
    symlink(r.join(eth), r.join("sys/class/net/eth0")).unwrap();
    symlink(
        r.join("sys/devices/virtual/net/lo"),
        r.join("sys/class/net/lo"),
    )
    .unwrap();
    symlink(
        r.join("sys/devices/virtual/net/ifb0"),
        r.join("sys/class/net/ifb0"),
    )
    .unwrap();
    Tree(root)
}

fn net_named(sys: &System, name: &str) -> NodeId {
    sys.nets()
        .into_iter()
        .find(|&n| sys.net(n).unwrap().name == name)
        .unwrap_or_else(|| panic!("no port {name}"))
}

#[test]
fn fake_sysfs_tree() {
    let t = fake_machine("a");
    let sys = discover::sysfs::discover(&t.0, &[]);
    assert_eq!(sys.cpus().len(), 2);
    let cpu = sys.cpu(sys.cpus()[0]).unwrap();
    assert_eq!(cpu.vendor.as_deref(), Some("GenuineIntel"));
    assert_eq!((cpu.family, cpu.model), (Some(6), Some(143)));
    assert_eq!(cpu.affinity.as_deref(), Some("0000ffff"));
    // GPUs from sysfs when CUDA is absent, in bus order.
    let g = sys.gpus();
    assert_eq!(g.len(), 2);
    assert_eq!(sys.gpu(g[0]).unwrap().pci.busid.to_string(), "0000:03:00.0");
    assert_eq!(sys.numa_of(g[1]), Some(1));
    // Ports: two IB (one HCA, two functions), eth0 on PCI, lo without; ifb0 is down.
    let names: Vec<String> = sys
        .nets()
        .iter()
        .map(|&n| sys.net(n).unwrap().name.clone())
        .collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "eth0", "lo"]);
    let m0 = net_named(&sys, "mlx5_0");
    let m1 = net_named(&sys, "mlx5_1");
    assert_eq!(
        sys.nic_of_net(m0),
        sys.nic_of_net(m1),
        "functions of one HCA share a NIC"
    );
    assert_eq!(sys.net(m0).unwrap().speed_mbps, 400_000);
    assert_eq!(sys.net(m0).unwrap().kind, NetKind::Ib);
    let eth0 = net_named(&sys, "eth0");
    assert_eq!(sys.busid(eth0).unwrap().to_string(), "0000:00:03.0");
    assert_eq!(sys.net(eth0).unwrap().speed_mbps, 10_000);
    assert_eq!(sys.busid(net_named(&sys, "lo")), None);
    // The switch's downstream ports fold into it: GPU0 and the HCA are PIX.
    let p = Paths::compute(&sys, PathOptions::default());
    assert_eq!(p.kind(g[0], m0), PathType::Pix);
    assert_eq!(p.kind(g[1], m0), PathType::Sys);
    assert_eq!(p.kind(g[0], g[1]), PathType::Sys);
    // Sapphire Rapids inter-socket bandwidth.
    assert_eq!(p.bw(g[0], g[1]), 22.0);
    // The plan: GPU0's backup is the HCA's other port.
    let plan = plan_cluster(&sys, 2, &TopoConfig::default()).unwrap();
    let m1dev = sys.net(m1).unwrap().dev;
    assert_eq!(plan.backup_nic[0], Some(m1dev));
    // Dump and read back.
    let a = xml::to_string(&sys);
    assert_eq!(a, xml::to_string(&xml::parse_str(&a, "dump").unwrap()));
}

#[test]
fn cuda_devices_take_their_indexes_and_sm() {
    let t = fake_machine("b");
    let cuda = [
        CudaGpu {
            dev: 0,
            busid: "0000:81:00.0".parse().unwrap(),
            sm: 90,
        },
        CudaGpu {
            dev: 1,
            busid: "0000:03:00.0".parse().unwrap(),
            sm: 90,
        },
    ];
    let sys = discover::sysfs::discover(&t.0, &cuda);
    let g0 = sys.gpu_by_dev(0).unwrap();
    assert_eq!(sys.gpu(g0).unwrap().pci.busid.to_string(), "0000:81:00.0");
    assert_eq!(sys.gpu(g0).unwrap().sm, Some(90));
    assert_eq!(sys.numa_of(g0), Some(1));
}

#[test]
fn merge_file_with_discovery() {
    let t = fake_machine("c");
    let cuda = [CudaGpu {
        dev: 0,
        busid: "0000:03:00.0".parse().unwrap(),
        sm: 90,
    }];
    let found = discover::sysfs::discover(&t.0, &cuda);
    // A skeleton that knows the GPU and the HCA (under its own virtual switch) and a GPU
    // this process does not see.
    let file = xml::parse_str(
        r#"<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="ffff:ff:01.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:03:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:04:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"/>
    </pci>
    <pci busid="0000:05:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
  </cpu>
</system>"#,
        "skeleton",
    )
    .unwrap();
    let m = discover::merge(&file, &found);
    // The file's layout stays: GPU and HCA under the virtual switch.
    let g = m.gpu_by_busid("0000:03:00.0".parse().unwrap()).unwrap();
    let info = m.gpu(g).unwrap();
    assert_eq!((info.dev, info.sm), (0, Some(90)));
    let parent = m.nodes[g].parent.unwrap();
    assert_eq!(m.busid(parent).unwrap().to_string(), "ffff:ff:01.0");
    // The GPU discovery did not see gets the next index.
    let other = m.gpu_by_busid("0000:05:00.0".parse().unwrap()).unwrap();
    assert_eq!(m.gpu(other).unwrap().dev, 1);
    // The guessed port of the HCA is replaced by the two discovered ones, under the file's
    // HCA node.
    let m0 = net_named(&m, "mlx5_0");
    let m1 = net_named(&m, "mlx5_1");
    assert_eq!(m.nic_of_net(m0), m.nic_of_net(m1));
    assert_eq!(m.nodes[m.nic_of_net(m0).unwrap()].parent, Some(parent));
    assert!(m.nets().iter().all(|&n| !m.net(n).unwrap().synthetic));
    // Devices the file lacks are added: the socket-1 GPU is not (CUDA did not list it),
    // eth0 and lo are.
    net_named(&m, "eth0");
    net_named(&m, "lo");
    assert_eq!(m.gpus().len(), 2);
    let p = Paths::compute(&m, PathOptions::default());
    assert_eq!(p.kind(g, m0), PathType::Pix);
    let a = xml::to_string(&m);
    assert_eq!(a, xml::to_string(&xml::parse_str(&a, "merged").unwrap()));
}

#[test]
fn topo_file_and_dump_file_through_the_config() {
    let dir = std::env::temp_dir().join(format!("ccl-topo-cfg-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let f = dir.join("in.xml");
    fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/topologies/pcie-8gpu.xml"),
        &f,
    )
    .unwrap();
    let cfg = TopoConfig {
        topo_file: Some(f.clone()),
        topo_dump_file: Some(dir.join("out.xml")),
        ..TopoConfig::default()
    };
    let sys = discover::system(&cfg).unwrap();
    assert_eq!(sys.gpus().len(), 8);
    let dumped = xml::read_file(&dir.join("out.xml")).unwrap();
    assert_eq!(xml::to_string(&dumped), xml::to_string(&sys));
    let bad = TopoConfig {
        topo_file: Some(dir.join("missing.xml")),
        ..TopoConfig::default()
    };
    assert!(discover::system(&bad)
        .unwrap_err()
        .to_string()
        .contains("missing.xml"));
    let _ = fs::remove_dir_all(&dir);
}

/// An interface that is up but has no carrier yet (`lowerlayerdown`, as a veth whose peer is
/// not up yet, or any port in the second after `ip link set up` before the kernel's link
/// watcher runs) is a port of the host; one that is down (`IFF_UP` clear) is not.
#[test]
fn an_interface_up_without_a_carrier_is_a_port() {
    let root = std::env::temp_dir().join(format!("ccl-topo-carrier-{}", std::process::id()));
    let _t = Tree(root.clone());
    for (name, state, flags) in [
        ("nic0", "up", "0x1003"),
        ("nic1", "lowerlayerdown", "0x1003"),
        ("nic2", "down", "0x1002"),
    ] {
        put(&root, &format!("sys/class/net/{name}/operstate"), state);
        put(&root, &format!("sys/class/net/{name}/flags"), flags);
    }
    let sys = discover::sysfs::discover(&root, &[]);
    let names: Vec<String> = sys
        .nets()
        .iter()
        .map(|&n| sys.net(n).unwrap().name.clone())
        .collect();
    assert_eq!(names, ["nic0", "nic1"]);
}
