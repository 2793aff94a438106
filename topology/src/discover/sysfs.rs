//! Discovery from sysfs: NUMA nodes, PCI devices and their bridges, InfiniBand ports and
//! network interfaces. Everything is read below a root directory (normally `/`) so tests
//! can point it at a fake tree. Missing files and directories are not errors: a machine
//! without any of it yields one CPU and whatever interfaces it has.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::model::{
    class, CpuInfo, GpuInfo, NetInfo, NetKind, NicInfo, NodeId, NodeKind, PciInfo, System,
};
use crate::types::{BusId, DEFAULT_NET_SPEED_MBPS};

/// A GPU reported by the CUDA driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaGpu {
    /// CUDA device ordinal.
    pub dev: u32,
    /// PCI bus id.
    pub busid: BusId,
    /// Compute capability x 10.
    pub sm: u32,
}

fn read(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn read_hex(p: &Path) -> Option<u32> {
    let s = read(p)?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// Reader rooted at a directory.
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// Reads below `root` (`/` on a real machine).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// CPU description from /proc/cpuinfo (first processor).
    fn cpu_template(&self) -> CpuInfo {
        let mut c = CpuInfo {
            arch: Some(std::env::consts::ARCH.to_string()),
            ..CpuInfo::default()
        };
        if let Some(text) = read(&self.p("proc/cpuinfo")) {
            for line in text.lines() {
                let Some((k, v)) = line.split_once(':') else {
                    if line.trim().is_empty() && c.vendor.is_some() {
                        break;
                    }
                    continue;
                };
                let (k, v) = (k.trim(), v.trim());
                match k {
                    "vendor_id" if c.vendor.is_none() => c.vendor = Some(v.to_string()),
                    "cpu family" if c.family.is_none() => c.family = v.parse().ok(),
                    "model" if c.model.is_none() => c.model = v.parse().ok(),
                    _ => {}
                }
            }
        }
        c
    }

    /// NUMA nodes (id, cpumap).
    fn numa_nodes(&self) -> Vec<(u32, Option<String>)> {
        let dir = self.p("sys/devices/system/node");
        let mut v: Vec<(u32, Option<String>)> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                let id = name.strip_prefix("node")?.parse::<u32>().ok()?;
                Some((id, read(&e.path().join("cpumap"))))
            })
            .collect();
        v.sort();
        v
    }

    /// Real path of a PCI device's sysfs directory.
    fn pci_dir(&self, busid: BusId) -> Option<PathBuf> {
        let p = self.p(&format!("sys/bus/pci/devices/{busid}"));
        fs::canonicalize(&p)
            .ok()
            .or_else(|| p.exists().then_some(p))
    }

    fn pci_info(&self, dir: &Path, busid: BusId) -> PciInfo {
        let s = |f: &str| read(&dir.join(f));
        PciInfo {
            busid,
            class: s("class").map(|c| {
                format!(
                    "0x{:06x}",
                    u32::from_str_radix(c.trim_start_matches("0x"), 16).unwrap_or(0)
                )
            }),
            vendor: s("vendor"),
            device: s("device"),
            subsystem_vendor: s("subsystem_vendor"),
            subsystem_device: s("subsystem_device"),
            link_speed: s("max_link_speed").filter(|v| !v.contains("Unknown")),
            link_width: s("max_link_width")
                .and_then(|w| w.parse().ok())
                .filter(|w| *w > 0),
            extra: Vec::new(),
        }
    }

    /// The bus ids along a device's sysfs path, root port first, the device last.
    fn pci_chain(&self, dir: &Path) -> Vec<BusId> {
        dir.components()
            .filter_map(|c| c.as_os_str().to_str())
            .filter_map(|s| s.parse::<BusId>().ok())
            .collect()
    }

    fn numa_of(&self, dir: &Path) -> Option<u32> {
        read(&dir.join("numa_node"))
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .map(|n| n as u32)
    }

    /// All PCI devices (bus id, class, vendor).
    fn pci_devices(&self) -> Vec<(BusId, u32, u32)> {
        let mut v: Vec<(BusId, u32, u32)> = fs::read_dir(self.p("sys/bus/pci/devices"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let b = e.file_name().to_str()?.parse::<BusId>().ok()?;
                let c = read_hex(&e.path().join("class"))?;
                let vendor = read_hex(&e.path().join("vendor")).unwrap_or(0);
                Some((b, c, vendor))
            })
            .collect();
        v.sort();
        v
    }
}

/// Builds a system from sysfs plus the GPUs CUDA reported (when CUDA is absent, NVIDIA
/// display/3D controllers found in sysfs are listed in bus order).
pub fn discover(fs_root: &Path, cuda: &[CudaGpu]) -> System {
    let sf = Sysfs::new(fs_root);
    let mut b = Builder::new(&sf);
    for (numa, map) in sf.numa_nodes() {
        b.cpu(numa, map);
    }
    // GPUs.
    let mut gpus: Vec<CudaGpu> = cuda.to_vec();
    if gpus.is_empty() {
        let mut dev = 0;
        for (busid, cls, vendor) in sf.pci_devices() {
            if vendor == 0x10de
                && (cls >> 16) == 0x03
                && (cls >> 8 == class::GPU_3D >> 8 || cls >> 8 == class::GPU_VGA >> 8)
            {
                gpus.push(CudaGpu { dev, busid, sm: 0 });
                dev += 1;
            }
        }
    }
    for g in &gpus {
        b.gpu(g);
    }
    // InfiniBand ports.
    let ib_dir = sf.p("sys/class/infiniband");
    for dev in sorted_entries(&ib_dir) {
        let name = file_name(&dev);
        let pci = fs::canonicalize(dev.join("device")).ok();
        let guid = read(&dev.join("node_guid")).map(|g| format!("0x{}", g.replace(':', "")));
        let mut ports: Vec<(u32, PathBuf)> = fs::read_dir(dev.join("ports"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path())))
            .collect();
        ports.sort();
        for (port, pdir) in ports {
            let state = read(&pdir.join("state")).unwrap_or_default();
            if !state.contains("ACTIVE") {
                continue;
            }
            let speed = read(&pdir.join("rate"))
                .and_then(|r| {
                    r.split_whitespace()
                        .next()
                        .and_then(|x| x.parse::<f64>().ok())
                })
                .map(|gbps| (gbps * 1000.0) as u64)
                .unwrap_or(DEFAULT_NET_SPEED_MBPS);
            let net = NetInfo {
                name: name.clone(),
                dev: u32::MAX,
                speed_mbps: speed,
                port,
                kind: NetKind::Ib,
                guid: guid.clone(),
                latency: None,
                maxconn: None,
                gdr: None,
                coll: None,
                synthetic: false,
                extra: Vec::new(),
            };
            b.net(pci.as_deref(), net);
        }
    }
    // Network interfaces.
    for ifp in sorted_entries(&sf.p("sys/class/net"))
        .into_iter()
        .filter(|p| p.is_dir())
    {
        let name = file_name(&ifp);
        let state = read(&ifp.join("operstate")).unwrap_or_default();
        // Brought up but without a carrier yet (the kernel reports a new link up to a second
        // after `ip link set up`, and a cable may be out for a moment): still a port of this
        // host, as NCCL and the bootstrap count an interface that is up (IFF_UP).
        let admin_up = read_hex(&ifp.join("flags")).is_some_and(|f| f & 1 != 0);
        if !(state == "up" || state == "unknown" || admin_up) {
            continue;
        }
        let speed = read(&ifp.join("speed"))
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|s| *s > 0)
            .map(|s| s as u64)
            .unwrap_or(DEFAULT_NET_SPEED_MBPS);
        let real = fs::canonicalize(&ifp).ok();
        // The PCI device is the last bus id on the interface's real path.
        let pci = real.as_ref().and_then(|r| {
            let mut best: Option<PathBuf> = None;
            let mut acc = PathBuf::new();
            for c in r.components() {
                acc.push(c);
                if c.as_os_str()
                    .to_str()
                    .is_some_and(|s| s.parse::<BusId>().is_ok())
                {
                    best = Some(acc.clone());
                }
            }
            best
        });
        let net = NetInfo {
            name,
            dev: u32::MAX,
            speed_mbps: speed,
            port: 0,
            kind: NetKind::Socket,
            guid: None,
            latency: None,
            maxconn: None,
            gdr: None,
            coll: None,
            synthetic: false,
            extra: Vec::new(),
        };
        b.net(pci.as_deref(), net);
    }
    let mut sys = b.finish();
    crate::xml::assign_devs_and_names(&mut sys);
    sys.build_links();
    sys
}

struct Builder<'a> {
    sf: &'a Sysfs,
    sys: System,
    cpus: HashMap<u32, NodeId>,
    pci: HashMap<BusId, NodeId>,
    template: CpuInfo,
}

impl<'a> Builder<'a> {
    fn new(sf: &'a Sysfs) -> Self {
        Builder {
            template: sf.cpu_template(),
            sf,
            sys: System::new(),
            cpus: HashMap::new(),
            pci: HashMap::new(),
        }
    }

    fn cpu(&mut self, numa: u32, affinity: Option<String>) -> NodeId {
        if let Some(&id) = self.cpus.get(&numa) {
            return id;
        }
        let info = CpuInfo {
            numa,
            affinity,
            ..self.template.clone()
        };
        let id = self.sys.add_cpu(info);
        self.cpus.insert(numa, id);
        id
    }

    fn default_cpu(&mut self) -> NodeId {
        match self.cpus.keys().min().copied() {
            Some(n) => self.cpu(n, None),
            None => self.cpu(0, None),
        }
    }

    /// Creates (or finds) the bridges above a device; returns the parent for the device.
    fn parent_for(&mut self, dir: &Path) -> NodeId {
        let chain = self.sf.pci_chain(dir);
        let cpu = match self.sf.numa_of(dir) {
            Some(n) => {
                let known = self.cpus.contains_key(&n);
                if known {
                    self.cpu(n, None)
                } else {
                    self.default_cpu()
                }
            }
            None => self.default_cpu(),
        };
        let mut parent = cpu;
        let bridges = chain.len().saturating_sub(1);
        let mut prev_ids: Option<(Option<String>, Option<String>)> = None;
        let mut acc = dir.to_path_buf();
        // Directories of the bridges, from the device up.
        let mut dirs: Vec<PathBuf> = Vec::new();
        for _ in 0..bridges {
            if !acc.pop() {
                break;
            }
            while acc
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|s| s.parse::<BusId>().is_err())
            {
                if !acc.pop() {
                    break;
                }
            }
            dirs.push(acc.clone());
        }
        dirs.reverse();
        for (i, bdir) in dirs.iter().enumerate() {
            let Some(&busid) = chain.get(i) else { break };
            let info = self.sf.pci_info(bdir, busid);
            let ids = (info.vendor.clone(), info.device.clone());
            // A switch's downstream ports share the upstream port's ids: fold them into it.
            if prev_ids.as_ref() == Some(&ids) && ids.0.is_some() {
                continue;
            }
            prev_ids = Some(ids);
            parent = match self.pci.get(&busid) {
                Some(&id) => id,
                None => {
                    let id = self.sys.add_pci(parent, info);
                    self.pci.insert(busid, id);
                    id
                }
            };
        }
        parent
    }

    fn gpu(&mut self, g: &CudaGpu) {
        let Some(dir) = self.sf.pci_dir(g.busid) else {
            // Not in sysfs (container): attach to the first CPU.
            let cpu = self.default_cpu();
            self.sys
                .add_gpu(cpu, gpu_info(PciInfo::new(g.busid, Some("0x030200")), g));
            return;
        };
        let parent = self.parent_for(&dir);
        let info = self.sf.pci_info(&dir, g.busid);
        let id = self.sys.add_gpu(parent, gpu_info(info, g));
        self.pci.insert(g.busid, id);
    }

    fn net(&mut self, pci_dir: Option<&Path>, net: NetInfo) {
        let busid = pci_dir
            .and_then(|d| d.file_name())
            .and_then(|f| f.to_str())
            .and_then(|s| s.parse::<BusId>().ok());
        let nic = match (pci_dir, busid) {
            (Some(dir), Some(b)) => {
                let key = b.device_id();
                match self.pci.get(&key) {
                    Some(&id) if matches!(self.sys.kind(id), Some(NodeKind::Nic(_))) => id,
                    _ => {
                        let parent = self.parent_for(dir);
                        let info = self.sf.pci_info(dir, b);
                        let id = self.sys.add_nic(
                            parent,
                            NicInfo {
                                pci: Some(info),
                                extra: Vec::new(),
                            },
                        );
                        self.pci.insert(key, id);
                        id
                    }
                }
            }
            _ => {
                let cpu = self.default_cpu();
                self.sys.add_nic(
                    cpu,
                    NicInfo {
                        pci: None,
                        extra: Vec::new(),
                    },
                )
            }
        };
        self.sys.add_net(nic, net);
    }

    fn finish(mut self) -> System {
        if self.cpus.is_empty() {
            self.default_cpu();
        }
        self.sys
    }
}

fn gpu_info(pci: PciInfo, g: &CudaGpu) -> GpuInfo {
    GpuInfo {
        pci,
        dev: g.dev,
        sm: (g.sm > 0).then_some(g.sm),
        rank: None,
        gdr: None,
        nvlinks: Vec::new(),
        c2c: Vec::new(),
        extra: Vec::new(),
    }
}

/// The entries of `dir` (none if it cannot be read), sorted so discovery is deterministic.
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default()
}
