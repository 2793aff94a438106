//! Basic value types: PCI bus ids, link and path types, bandwidth constants.

use std::fmt;
use std::str::FromStr;

use crate::error::TopoError;

/// Bandwidth of a "local" path (a node to itself), GB/s.
pub const LOC_BW: f64 = 5000.0;
/// Per-link NVLink bandwidth by GPU generation, GB/s.
pub const SM60_NVLINK_BW: f64 = 18.0;
/// Volta.
pub const SM70_NVLINK_BW: f64 = 20.0;
/// Ampere (A100).
pub const SM80_NVLINK_BW: f64 = 20.0;
/// Ampere consumer / A30 / A40.
pub const SM86_NVLINK_BW: f64 = 12.0;
/// Hopper.
pub const SM90_NVLINK_BW: f64 = 20.6;
/// Blackwell.
pub const SM100_NVLINK_BW: f64 = 40.1;
/// PCIe Gen3 x16, the fallback when a PCI link has no speed/width, GB/s.
pub const PCI_BW: f64 = 12.0;
/// Inter-socket bandwidths, GB/s.
pub const BDW_QPI_BW: f64 = 6.0;
/// Intel Skylake and later (UPI).
pub const SKL_QPI_BW: f64 = 10.0;
/// Intel Sapphire Rapids.
pub const SRP_QPI_BW: f64 = 22.0;
/// Intel Emerald Rapids.
pub const ERP_QPI_BW: f64 = 40.0;
/// AMD Infinity Fabric.
pub const AMD_BW: f64 = 16.0;
/// IBM POWER9.
pub const P9_BW: f64 = 32.0;
/// ARM sockets.
pub const ARM_BW: f64 = 6.0;
/// Zhaoxin.
pub const ZPI_BW: f64 = 6.0;
/// Default NIC speed when nothing says otherwise, Mb/s (a socket NIC without a speed).
pub const DEFAULT_NET_SPEED_MBPS: u64 = 10_000;

/// A PCI address `dddd:bb:dd.f`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BusId {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

impl BusId {
    /// The same device with function 0: all functions of one device share its PCI link.
    pub fn device_id(self) -> BusId {
        BusId {
            function: 0,
            ..self
        }
    }
}

impl fmt::Display for BusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for BusId {
    type Err = TopoError;

    /// Accepts `dddd:bb:dd.f`, CUDA's `dddddddd:bb:dd.f` and `bb:dd.f` (domain 0), any case.
    fn from_str(s: &str) -> Result<Self, TopoError> {
        let bad = || TopoError::BadBusId(s.to_string());
        let t = s.trim();
        let (head, func) = t.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = head.split(':').collect();
        let (dom, bus, dev) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return Err(bad()),
        };
        let domain = u32::from_str_radix(dom, 16).map_err(|_| bad())?;
        let bus = u8::from_str_radix(bus, 16).map_err(|_| bad())?;
        let device = u8::from_str_radix(dev, 16).map_err(|_| bad())?;
        let function = u8::from_str_radix(func, 16).map_err(|_| bad())?;
        // NCCL writes placeholders such as `fffffff:ff:ff.0` for NVSwitches, so the
        // device number is not limited to 0..32 here.
        if function >= 16 || dom.len() > 8 || dom.is_empty() {
            return Err(bad());
        }
        Ok(BusId {
            domain,
            bus,
            device,
            function,
        })
    }
}

/// The type of one link between two nodes (NCCL's link types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkType {
    /// A node to itself.
    Loc,
    /// NVLink (to a GPU or an NVSwitch).
    Nvl,
    /// Chip-to-chip link between a GPU and its CPU (Grace).
    C2c,
    /// PCIe.
    Pci,
    /// Between CPU sockets (QPI/UPI/Infinity Fabric).
    Sys,
    /// Between a NIC and its network port.
    Net,
}

impl LinkType {
    /// Short upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkType::Loc => "LOC",
            LinkType::Nvl => "NVL",
            LinkType::C2c => "C2C",
            LinkType::Pci => "PCI",
            LinkType::Sys => "SYS",
            LinkType::Net => "NET",
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of a path between two nodes, from closest to farthest (NCCL's path types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathType {
    /// Same node.
    Loc,
    /// Direct NVLink, or through NVSwitches.
    Nvl,
    /// NVLink through an intermediate GPU.
    Nvb,
    /// Chip-to-chip GPU-CPU link.
    C2c,
    /// At most one PCIe switch.
    Pix,
    /// Several PCIe switches, not through a CPU.
    Pxb,
    /// To a NIC through an NVLink peer GPU that sits near it (PCI x NVLink).
    Pxn,
    /// Through a PCIe host bridge (the CPU).
    Phb,
    /// Across CPU sockets.
    Sys,
    /// Across the network (different hosts).
    Net,
    /// Disconnected.
    Dis,
}

impl PathType {
    /// All path types, closest first.
    pub const ALL: [PathType; 11] = [
        PathType::Loc,
        PathType::Nvl,
        PathType::Nvb,
        PathType::C2c,
        PathType::Pix,
        PathType::Pxb,
        PathType::Pxn,
        PathType::Phb,
        PathType::Sys,
        PathType::Net,
        PathType::Dis,
    ];

    /// Short upper-case name, as `nvidia-smi topo -m` and NCCL print it.
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::C2c => "C2C",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
            PathType::Net => "NET",
            PathType::Dis => "DIS",
        }
    }

    /// Parses a name (any case) as `NCCL_P2P_LEVEL` accepts it, or a legacy integer
    /// (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS).
    pub fn parse_level(s: &str) -> Option<PathType> {
        let t = s.trim();
        if let Ok(n) = t.parse::<u32>() {
            return Some(match n {
                0 => PathType::Loc,
                1 => PathType::Pix,
                2 => PathType::Pxb,
                3 => PathType::Phb,
                _ => PathType::Sys,
            });
        }
        PathType::ALL
            .iter()
            .copied()
            .find(|p| p.as_str().eq_ignore_ascii_case(t))
    }
}

impl fmt::Display for PathType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-link NVLink bandwidth for a GPU of compute capability `sm` (e.g. 90), GB/s.
pub fn nvlink_bw(sm: u32) -> f64 {
    match sm {
        0..=59 => SM60_NVLINK_BW,
        60..=69 => SM60_NVLINK_BW,
        70..=79 => SM70_NVLINK_BW,
        86..=89 => SM86_NVLINK_BW,
        80..=85 => SM80_NVLINK_BW,
        90..=99 => SM90_NVLINK_BW,
        _ => SM100_NVLINK_BW,
    }
}

/// PCIe bandwidth of a link from its `link_speed` text ("16 GT/s", "32.0 GT/s PCIe") and
/// width, GB/s: per-lane rate in units of 100 Mb/s times width / 80 (Gen3 x16 = 12 GB/s).
/// Returns `None` when the speed is missing or unknown.
pub fn pci_bw(link_speed: Option<&str>, link_width: Option<u32>) -> Option<f64> {
    let speed = link_speed?;
    let gts: f64 = speed
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<f64>().ok())?;
    let per_lane = if gts < 3.0 {
        15.0
    } else if gts < 6.0 {
        30.0
    } else if gts < 12.0 {
        60.0
    } else if gts < 24.0 {
        120.0
    } else if gts < 48.0 {
        240.0
    } else {
        480.0
    };
    let width = match link_width {
        Some(0) | None => 16,
        Some(w) => w,
    };
    Some(f64::from(width) * per_lane / 80.0)
}

/// Rounds a bandwidth to two decimals for printing and comparing (avoids float noise).
pub fn round_bw(bw: f64) -> f64 {
    (bw * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busid_parse_forms() {
        let a: BusId = "0000:3b:00.0".parse().unwrap();
        let b: BusId = "00000000:3B:00.0".parse().unwrap();
        let c: BusId = "3b:00.0".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.to_string(), "0000:3b:00.0");
        let f: BusId = "ffff:ff:01.0".parse().unwrap();
        assert_eq!(f.to_string(), "ffff:ff:01.0");
        assert!("zz:00.0".parse::<BusId>().is_err());
        assert!("0000:00:00.g".parse::<BusId>().is_err());
        let nvs: BusId = "fffffff:ff:ff.0".parse().unwrap();
        assert_eq!(nvs.to_string(), "fffffff:ff:ff.0");
        assert!("0000:00:00".parse::<BusId>().is_err());
        assert!("".parse::<BusId>().is_err());
    }

    #[test]
    fn pci_bandwidths() {
        assert_eq!(pci_bw(Some("8 GT/s"), Some(16)), Some(12.0));
        assert_eq!(pci_bw(Some("16 GT/s"), Some(16)), Some(24.0));
        assert_eq!(pci_bw(Some("32.0 GT/s PCIe"), Some(16)), Some(48.0));
        assert_eq!(pci_bw(Some("Unknown"), Some(16)), None);
        assert_eq!(pci_bw(None, Some(16)), None);
    }

    #[test]
    fn p2p_levels() {
        assert_eq!(PathType::parse_level("nvl"), Some(PathType::Nvl));
        assert_eq!(PathType::parse_level("PHB"), Some(PathType::Phb));
        assert_eq!(PathType::parse_level("2"), Some(PathType::Pxb));
        assert_eq!(PathType::parse_level("9"), Some(PathType::Sys));
        assert_eq!(PathType::parse_level("bogus"), None);
        assert!(PathType::Pix < PathType::Pxb && PathType::Pxn < PathType::Phb);
    }
}
