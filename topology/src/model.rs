//! The system model: a tree of CPUs, PCI bridges and devices (as `NCCL_TOPO_FILE` lays it
//! out) plus the links derived from it (PCI, inter-socket, NVLink, C2C, NIC ports).

use std::collections::{BTreeMap, HashMap};

use crate::types::{
    nvlink_bw, pci_bw, BusId, LinkType, AMD_BW, ARM_BW, BDW_QPI_BW, ERP_QPI_BW, LOC_BW, P9_BW,
    PCI_BW, SKL_QPI_BW, SRP_QPI_BW, ZPI_BW,
};

/// Index of a node in [`System::nodes`].
pub type NodeId = usize;

/// Attributes we do not interpret, kept so that a dump writes them back.
pub type Extra = Vec<(String, String)>;

/// A NUMA node / CPU socket.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CpuInfo {
    /// NUMA node id.
    pub numa: u32,
    /// The file said `numaid="-1"` (no NUMA information); `numa` is then a stand-in id.
    pub numa_unknown: bool,
    /// CPU mask, as sysfs `cpumap` prints it.
    pub affinity: Option<String>,
    /// `x86_64`, `aarch64`, `ppc64`, ...
    pub arch: Option<String>,
    /// `GenuineIntel`, `AuthenticAMD`, ...
    pub vendor: Option<String>,
    /// CPU family (x86).
    pub family: Option<u32>,
    /// CPU model (x86).
    pub model: Option<u32>,
    /// Other attributes.
    pub extra: Extra,
}

impl CpuInfo {
    /// Bandwidth between this socket and another, GB/s, by architecture and vendor.
    pub fn inter_socket_bw(&self) -> f64 {
        let arch = self.arch.as_deref().unwrap_or("").to_ascii_lowercase();
        let vendor = self.vendor.as_deref().unwrap_or("");
        if arch.starts_with("ppc") {
            return P9_BW;
        }
        if arch.starts_with("arm") || arch.starts_with("aarch64") {
            return ARM_BW;
        }
        match vendor {
            "GenuineIntel" => match (self.family, self.model) {
                (Some(6), Some(0xcf)) => ERP_QPI_BW,
                (Some(6), Some(0x8f)) => SRP_QPI_BW,
                (Some(6), Some(m)) if m >= 0x55 => SKL_QPI_BW,
                _ => BDW_QPI_BW,
            },
            "AuthenticAMD" | "HygonGenuine" => AMD_BW,
            "CentaurHauls" | "  Shanghai  " => ZPI_BW,
            _ => BDW_QPI_BW,
        }
    }
}

/// PCI attributes of a bridge or device.
#[derive(Clone, Debug, PartialEq)]
pub struct PciInfo {
    /// Bus id.
    pub busid: BusId,
    /// Class code as written (`0x030200`).
    pub class: Option<String>,
    /// Vendor id.
    pub vendor: Option<String>,
    /// Device id.
    pub device: Option<String>,
    /// Subsystem vendor id.
    pub subsystem_vendor: Option<String>,
    /// Subsystem device id.
    pub subsystem_device: Option<String>,
    /// Link speed text (`16 GT/s`).
    pub link_speed: Option<String>,
    /// Link width (lanes).
    pub link_width: Option<u32>,
    /// Other attributes.
    pub extra: Extra,
}

impl PciInfo {
    /// A PCI record with only a bus id and class.
    pub fn new(busid: BusId, class: Option<&str>) -> Self {
        PciInfo {
            busid,
            class: class.map(str::to_string),
            vendor: None,
            device: None,
            subsystem_vendor: None,
            subsystem_device: None,
            link_speed: None,
            link_width: None,
            extra: Vec::new(),
        }
    }

    /// The class code as a number.
    pub fn class_code(&self) -> Option<u32> {
        let c = self.class.as_deref()?;
        let c = c.trim();
        let c = c
            .strip_prefix("0x")
            .or_else(|| c.strip_prefix("0X"))
            .unwrap_or(c);
        u32::from_str_radix(c, 16).ok()
    }

    /// Bandwidth of the link to the parent, GB/s.
    pub fn link_bw(&self) -> f64 {
        pci_bw(self.link_speed.as_deref(), self.link_width).unwrap_or(PCI_BW)
    }
}

/// Class-code helpers.
pub mod class {
    /// 3D controller (compute GPU).
    pub const GPU_3D: u32 = 0x030200;
    /// VGA controller.
    pub const GPU_VGA: u32 = 0x030000;
    /// InfiniBand controller.
    pub const NIC_IB: u32 = 0x020700;
    /// Ethernet controller.
    pub const NIC_ETH: u32 = 0x020000;
    /// PCI-to-PCI bridge.
    pub const BRIDGE: u32 = 0x060400;
    /// "Other bridge": NVSwitch as an NVLink target class.
    pub const NVSWITCH: u32 = 0x068000;

    /// Whether a class code is a GPU when no `<gpu>` element says so.
    pub fn is_gpu(c: u32) -> bool {
        c >> 8 == GPU_3D >> 8
    }
    /// Whether a class code is a network controller we treat as a NIC.
    pub fn is_nic(c: u32) -> bool {
        c >> 8 == NIC_IB >> 8 || c >> 8 == NIC_ETH >> 8
    }
}

/// One `<nvlink>` entry of a GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct NvLinkSpec {
    /// The bus id at the other end (a GPU, an NVSwitch, a CPU).
    pub target: BusId,
    /// Number of links.
    pub count: u32,
    /// Class of the target (`0x030200` GPU, `0x068000` NVSwitch).
    pub tclass: Option<String>,
    /// Other attributes.
    pub extra: Extra,
}

impl NvLinkSpec {
    /// Whether the target is an NVSwitch.
    pub fn to_nvswitch(&self) -> bool {
        self.tclass
            .as_deref()
            .and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok())
            == Some(class::NVSWITCH)
    }
}

/// A `<c2c>` entry of a GPU (GPU-CPU chip-to-chip link).
#[derive(Clone, Debug, PartialEq)]
pub struct C2cSpec {
    /// Number of links.
    pub count: u32,
    /// Bandwidth per link, GB/s.
    pub bw: f64,
    /// Other attributes.
    pub extra: Extra,
}

/// A GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    /// Its PCI function.
    pub pci: PciInfo,
    /// CUDA device index.
    pub dev: u32,
    /// Compute capability x 10 (90 for Hopper), when known.
    pub sm: Option<u32>,
    /// The rank NCCL dumped in the file (informational).
    pub rank: Option<u32>,
    /// GPUDirect RDMA support flag.
    pub gdr: Option<u32>,
    /// NVLinks.
    pub nvlinks: Vec<NvLinkSpec>,
    /// Chip-to-chip links.
    pub c2c: Vec<C2cSpec>,
    /// Other `<gpu>` attributes.
    pub extra: Extra,
}

/// A NIC (a PCI network device, or a virtual interface without PCI).
#[derive(Clone, Debug, PartialEq)]
pub struct NicInfo {
    /// PCI function, when the NIC sits on PCI.
    pub pci: Option<PciInfo>,
    /// Other `<nic>` attributes.
    pub extra: Extra,
}

/// Which software stack drives a network port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetKind {
    /// Verbs (InfiniBand or RoCE).
    Ib,
    /// Kernel sockets.
    Socket,
}

impl NetKind {
    /// `ib` or `socket`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetKind::Ib => "ib",
            NetKind::Socket => "socket",
        }
    }
}

/// A network port (NCCL's "net device").
#[derive(Clone, Debug, PartialEq)]
pub struct NetInfo {
    /// Device name (`mlx5_0`, `eth0`).
    pub name: String,
    /// Net device index.
    pub dev: u32,
    /// Speed, Mb/s.
    pub speed_mbps: u64,
    /// Port number (1-based for verbs, 0 for sockets).
    pub port: u32,
    /// Verbs or sockets.
    pub kind: NetKind,
    /// Port/node GUID.
    pub guid: Option<String>,
    /// Latency attribute as written.
    pub latency: Option<String>,
    /// Max connections attribute as written.
    pub maxconn: Option<String>,
    /// GPUDirect RDMA support flag.
    pub gdr: Option<String>,
    /// CollNet support flag.
    pub coll: Option<String>,
    /// Made up from a PCI-only description (name and speed guessed).
    pub synthetic: bool,
    /// Other attributes.
    pub extra: Extra,
}

impl NetInfo {
    /// Speed in GB/s (bytes).
    pub fn bw(&self) -> f64 {
        self.speed_mbps as f64 / 8000.0
    }
}

/// What a node is.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A NUMA node.
    Cpu(CpuInfo),
    /// A PCI bridge/switch, or a PCI device we do not use.
    Pci(PciInfo),
    /// A GPU.
    Gpu(GpuInfo),
    /// All NVSwitches of the system, merged into one node.
    NvSwitch,
    /// A NIC.
    Nic(NicInfo),
    /// A network port of a NIC.
    Net(NetInfo),
}

/// A node with its place in the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What it is.
    pub kind: NodeKind,
    /// Parent in the CPU/PCI tree (none for CPUs and the NVSwitch).
    pub parent: Option<NodeId>,
    /// Children in the tree, in file order.
    pub children: Vec<NodeId>,
}

/// A directed link (each physical link appears once in each direction).
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// Source node.
    pub from: NodeId,
    /// Destination node.
    pub to: NodeId,
    /// Link type.
    pub kind: LinkType,
    /// Bandwidth in this direction, GB/s.
    pub bw: f64,
}

/// A host's topology.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct System {
    /// All nodes.
    pub nodes: Vec<Node>,
    /// All directed links (derived by [`System::build_links`]).
    pub links: Vec<Link>,
    /// Outgoing links per node.
    pub adj: Vec<Vec<usize>>,
    /// Attributes of `<system>` other than `version`.
    pub extra: Extra,
}

impl System {
    /// An empty system.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, kind: NodeKind, parent: Option<NodeId>) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node {
            kind,
            parent,
            children: Vec::new(),
        });
        if let Some(p) = parent {
            if let Some(pn) = self.nodes.get_mut(p) {
                pn.children.push(id);
            }
        }
        id
    }

    /// Adds a CPU (NUMA node).
    pub fn add_cpu(&mut self, cpu: CpuInfo) -> NodeId {
        self.push(NodeKind::Cpu(cpu), None)
    }
    /// Adds a PCI bridge (or unused PCI device) under `parent`.
    pub fn add_pci(&mut self, parent: NodeId, pci: PciInfo) -> NodeId {
        self.push(NodeKind::Pci(pci), Some(parent))
    }
    /// Adds a GPU under `parent`.
    pub fn add_gpu(&mut self, parent: NodeId, gpu: GpuInfo) -> NodeId {
        self.push(NodeKind::Gpu(gpu), Some(parent))
    }
    /// Adds a NIC under `parent`.
    pub fn add_nic(&mut self, parent: NodeId, nic: NicInfo) -> NodeId {
        self.push(NodeKind::Nic(nic), Some(parent))
    }
    /// Adds a network port under a NIC.
    pub fn add_net(&mut self, nic: NodeId, net: NetInfo) -> NodeId {
        self.push(NodeKind::Net(net), Some(nic))
    }

    /// The node's kind, if the id exists.
    pub fn kind(&self, id: NodeId) -> Option<&NodeKind> {
        self.nodes.get(id).map(|n| &n.kind)
    }

    /// CPU nodes, by NUMA id.
    pub fn cpus(&self) -> Vec<NodeId> {
        let mut v: Vec<(u32, NodeId)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                NodeKind::Cpu(c) => Some((c.numa, i)),
                _ => None,
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// GPU nodes, by device index.
    pub fn gpus(&self) -> Vec<NodeId> {
        let mut v: Vec<(u32, NodeId)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                NodeKind::Gpu(g) => Some((g.dev, i)),
                _ => None,
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// Network port nodes, by device index.
    pub fn nets(&self) -> Vec<NodeId> {
        let mut v: Vec<(u32, NodeId)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                NodeKind::Net(g) => Some((g.dev, i)),
                _ => None,
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// The GPU record of a node.
    pub fn gpu(&self, id: NodeId) -> Option<&GpuInfo> {
        match self.kind(id) {
            Some(NodeKind::Gpu(g)) => Some(g),
            _ => None,
        }
    }

    /// The port record of a node.
    pub fn net(&self, id: NodeId) -> Option<&NetInfo> {
        match self.kind(id) {
            Some(NodeKind::Net(n)) => Some(n),
            _ => None,
        }
    }

    /// The CPU record of a node.
    pub fn cpu(&self, id: NodeId) -> Option<&CpuInfo> {
        match self.kind(id) {
            Some(NodeKind::Cpu(c)) => Some(c),
            _ => None,
        }
    }

    /// The GPU with this bus id (function ignored).
    pub fn gpu_by_busid(&self, busid: BusId) -> Option<NodeId> {
        self.nodes.iter().position(|n| match &n.kind {
            NodeKind::Gpu(g) => g.pci.busid.device_id() == busid.device_id(),
            _ => false,
        })
    }

    /// The GPU with this device index.
    pub fn gpu_by_dev(&self, dev: u32) -> Option<NodeId> {
        self.nodes.iter().position(|n| match &n.kind {
            NodeKind::Gpu(g) => g.dev == dev,
            _ => false,
        })
    }

    /// The port with this device index.
    pub fn net_by_dev(&self, dev: u32) -> Option<NodeId> {
        self.nodes.iter().position(|n| match &n.kind {
            NodeKind::Net(g) => g.dev == dev,
            _ => false,
        })
    }

    /// The CPU with this NUMA id.
    pub fn cpu_by_numa(&self, numa: u32) -> Option<NodeId> {
        self.nodes.iter().position(|n| match &n.kind {
            NodeKind::Cpu(c) => c.numa == numa,
            _ => false,
        })
    }

    /// The CPU at the root of a node's tree (the NVSwitch has none).
    pub fn local_cpu(&self, id: NodeId) -> Option<NodeId> {
        let mut cur = id;
        for _ in 0..self.nodes.len() {
            let n = self.nodes.get(cur)?;
            if matches!(n.kind, NodeKind::Cpu(_)) {
                return Some(cur);
            }
            cur = n.parent?;
        }
        None
    }

    /// The NUMA id of a node's CPU.
    pub fn numa_of(&self, id: NodeId) -> Option<u32> {
        self.local_cpu(id).and_then(|c| self.cpu(c)).map(|c| c.numa)
    }

    /// The NIC node of a port.
    pub fn nic_of_net(&self, net: NodeId) -> Option<NodeId> {
        self.nodes.get(net).and_then(|n| n.parent)
    }

    /// The PCI bus id of a node, when it has one.
    pub fn busid(&self, id: NodeId) -> Option<BusId> {
        match self.kind(id)? {
            NodeKind::Pci(p) => Some(p.busid),
            NodeKind::Gpu(g) => Some(g.pci.busid),
            NodeKind::Nic(n) => n.pci.as_ref().map(|p| p.busid),
            NodeKind::Net(_) => self.nic_of_net(id).and_then(|nic| self.busid(nic)),
            NodeKind::Cpu(_) | NodeKind::NvSwitch => None,
        }
    }

    /// A short display name: `gpu0`, `mlx5_0` (`mlx5_0:2` when two ports share a name),
    /// `cpu1`, `pci 0000:01:00.0`, `nvswitch`.
    pub fn name(&self, id: NodeId) -> String {
        match self.kind(id) {
            Some(NodeKind::Cpu(c)) => format!("cpu{}", c.numa),
            Some(NodeKind::Gpu(g)) => format!("gpu{}", g.dev),
            Some(NodeKind::Pci(p)) => format!("pci{}", p.busid),
            Some(NodeKind::NvSwitch) => "nvswitch".to_string(),
            Some(NodeKind::Nic(_)) => match self.busid(id) {
                Some(b) => format!("nic{b}"),
                None => format!("nic{id}"),
            },
            Some(NodeKind::Net(n)) => {
                let dup = self.nodes.iter().enumerate().any(|(j, m)| {
                    j != id && matches!(&m.kind, NodeKind::Net(o) if o.name == n.name)
                });
                if dup {
                    format!("{}:{}", n.name, n.port)
                } else {
                    n.name.clone()
                }
            }
            None => format!("node{id}"),
        }
    }

    fn nvswitch(&mut self) -> NodeId {
        if let Some(i) = self
            .nodes
            .iter()
            .position(|n| matches!(n.kind, NodeKind::NvSwitch))
        {
            return i;
        }
        self.push(NodeKind::NvSwitch, None)
    }

    fn connect(&mut self, from: NodeId, to: NodeId, kind: LinkType, bw: f64) {
        // Merge parallel links of one type (several NVLink entries to one target).
        if let Some(l) = self
            .links
            .iter_mut()
            .find(|l| l.from == from && l.to == to && l.kind == kind)
        {
            l.bw += bw;
            return;
        }
        self.links.push(Link { from, to, kind, bw });
    }

    /// Derives all links from the tree, the CPUs and the GPUs' NVLink/C2C entries.
    /// Call after any change to the nodes.
    pub fn build_links(&mut self) {
        self.links.clear();
        // PCI tree and NIC ports.
        for id in 0..self.nodes.len() {
            let Some(parent) = self.nodes.get(id).and_then(|n| n.parent) else {
                continue;
            };
            let (kind, bw) = match &self.nodes[id].kind {
                NodeKind::Pci(p) => (LinkType::Pci, p.link_bw()),
                NodeKind::Gpu(g) => (LinkType::Pci, g.pci.link_bw()),
                NodeKind::Nic(n) => (
                    LinkType::Pci,
                    n.pci.as_ref().map(PciInfo::link_bw).unwrap_or(LOC_BW),
                ),
                NodeKind::Net(n) => (LinkType::Net, n.bw()),
                NodeKind::Cpu(_) | NodeKind::NvSwitch => continue,
            };
            self.connect(id, parent, kind, bw);
            self.connect(parent, id, kind, bw);
        }
        // Between sockets.
        let cpus = self.cpus();
        for (i, &a) in cpus.iter().enumerate() {
            for &b in cpus.iter().skip(i + 1) {
                let bw = match (self.cpu(a), self.cpu(b)) {
                    (Some(x), Some(y)) => x.inter_socket_bw().min(y.inter_socket_bw()),
                    _ => BDW_QPI_BW,
                };
                self.connect(a, b, LinkType::Sys, bw);
                self.connect(b, a, LinkType::Sys, bw);
            }
        }
        // NVLink and C2C.
        let gpus = self.gpus();
        let mut by_bus: HashMap<BusId, NodeId> = HashMap::new();
        for &g in &gpus {
            if let Some(info) = self.gpu(g) {
                by_bus.insert(info.pci.busid.device_id(), g);
            }
        }
        let mut gpu_pairs: BTreeMap<(NodeId, NodeId), f64> = BTreeMap::new();
        for &g in &gpus {
            let Some(info) = self.gpu(g).cloned() else {
                continue;
            };
            let per_link = nvlink_bw(info.sm.unwrap_or(80));
            for nv in &info.nvlinks {
                let bw = f64::from(nv.count) * per_link;
                if nv.to_nvswitch() {
                    let s = self.nvswitch();
                    self.connect(g, s, LinkType::Nvl, bw);
                    self.connect(s, g, LinkType::Nvl, bw);
                } else if let Some(&peer) = by_bus.get(&nv.target.device_id()) {
                    if peer != g {
                        *gpu_pairs.entry((g, peer)).or_insert(0.0) += bw;
                    }
                }
            }
            if let Some(cpu) = self.local_cpu(g) {
                for c in &info.c2c {
                    let bw = f64::from(c.count) * c.bw;
                    self.connect(g, cpu, LinkType::C2c, bw);
                    self.connect(cpu, g, LinkType::C2c, bw);
                }
            }
        }
        // GPU-GPU NVLinks: each side lists its own; a one-sided listing counts both ways.
        let listed: Vec<((NodeId, NodeId), f64)> =
            gpu_pairs.iter().map(|(k, v)| (*k, *v)).collect();
        for ((a, b), bw) in listed {
            self.connect(a, b, LinkType::Nvl, bw);
            if !gpu_pairs.contains_key(&(b, a)) {
                self.connect(b, a, LinkType::Nvl, bw);
            }
        }
        self.adj = vec![Vec::new(); self.nodes.len()];
        for (i, l) in self.links.iter().enumerate() {
            if let Some(v) = self.adj.get_mut(l.from) {
                v.push(i);
            }
        }
    }

    /// Number of NVLinks from a GPU (to GPUs and NVSwitches).
    pub fn nvlink_count(&self, gpu: NodeId) -> u32 {
        self.gpu(gpu)
            .map(|g| g.nvlinks.iter().map(|n| n.count).sum())
            .unwrap_or(0)
    }
}
