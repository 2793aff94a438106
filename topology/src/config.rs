//! Environment knobs, read once into a plain struct so the search itself never touches the
//! process environment.

use std::path::PathBuf;

use crate::error::{Result, TopoError};
use crate::types::PathType;

/// The environment variables [`TopoConfig::from_env`] reads (for the report of what a process
/// sets, `NCCL_DEBUG=INFO`).
pub const ENV_VARS: &[&str] = &[
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NVB_DISABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_CROSS_NIC",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
];

/// Which network the ranks use between hosts (`NCCL_NET`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetSelect {
    /// InfiniBand / RoCE verbs devices.
    Ib,
    /// TCP sockets over network interfaces.
    Socket,
}

/// `NCCL_CROSS_NIC`: may a ring enter a host on one NIC and leave it on another?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossNic {
    /// 0: never; each channel uses the same NIC (rail) on every host.
    Never,
    /// 1: allowed whenever the leaving GPU has a closer NIC.
    Allow,
    /// 2 (default): same NIC unless the leaving GPU reaches it only through the CPU.
    Auto,
}

/// One entry of a device list such as `mlx5_0:1` or `eth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceMatch {
    /// Name or name prefix.
    pub name: String,
    /// Port number, if the entry names one.
    pub port: Option<u32>,
}

/// A device list with NCCL's syntax: comma separated names, `^` in front excludes the
/// listed devices instead of selecting them, `=` in front (after any `^`) asks for exact
/// names instead of prefixes. Entries may carry `:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFilter {
    /// `^`: the list names devices to leave out.
    pub exclude: bool,
    /// `=`: names match exactly, not as prefixes.
    pub exact: bool,
    /// The entries.
    pub entries: Vec<DeviceMatch>,
}

impl DeviceFilter {
    /// Parses `[^][=]name[:port][,name[:port]...]`. `allow_port` says whether `:port` is
    /// meaningful (IB HCAs) or part of the name (interface names never contain ':' in
    /// practice, but aliases like `eth0:1` do, so for interfaces it stays in the name).
    pub fn parse(var: &str, value: &str, allow_port: bool) -> Result<Self> {
        let mut s = value.trim();
        let mut exclude = false;
        let mut exact = false;
        if let Some(r) = s.strip_prefix('^') {
            exclude = true;
            s = r;
        }
        if let Some(r) = s.strip_prefix('=') {
            exact = true;
            s = r;
        }
        let mut entries = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (name, port) = match item.rsplit_once(':') {
                Some((n, p)) if allow_port => {
                    let port = p.parse::<u32>().map_err(|_| TopoError::Config {
                        var: var.to_string(),
                        value: value.to_string(),
                        msg: format!("bad port {p:?} in {item:?}"),
                    })?;
                    (n.to_string(), Some(port))
                }
                _ => (item.to_string(), None),
            };
            entries.push(DeviceMatch { name, port });
        }
        if entries.is_empty() {
            return Err(TopoError::Config {
                var: var.to_string(),
                value: value.to_string(),
                msg: "empty device list".to_string(),
            });
        }
        Ok(DeviceFilter {
            exclude,
            exact,
            entries,
        })
    }

    /// Whether a device (and port) passes the filter.
    pub fn accepts(&self, name: &str, port: Option<u32>) -> bool {
        let hit = self.entries.iter().any(|e| {
            let name_ok = if self.exact {
                name == e.name
            } else {
                name.starts_with(&e.name)
            };
            let port_ok = match (e.port, port) {
                (Some(want), Some(have)) => want == have,
                (Some(_), None) => false,
                (None, _) => true,
            };
            name_ok && port_ok
        });
        hit != self.exclude
    }
}

/// The environment knobs the topology search honours. Build it with
/// [`TopoConfig::from_env`] in the library, or fill the fields directly in tests.
#[derive(Clone, Debug, PartialEq)]
pub struct TopoConfig {
    /// `NCCL_P2P_LEVEL`: the farthest path type over which GPUs use P2P (default PXB).
    pub p2p_level: Option<PathType>,
    /// `NCCL_P2P_DISABLE=1`.
    pub p2p_disable: bool,
    /// `NCCL_SHM_DISABLE=1`.
    pub shm_disable: bool,
    /// `NCCL_NET`: `IB` or `Socket`; none means IB when an IB device is usable, else Socket.
    pub net: Option<NetSelect>,
    /// `NCCL_IB_HCA`.
    pub ib_hca: Option<DeviceFilter>,
    /// `NCCL_SOCKET_IFNAME`.
    pub socket_ifname: Option<DeviceFilter>,
    /// `NCCL_CROSS_NIC` (default 2).
    pub cross_nic: CrossNic,
    /// `NCCL_MIN_NCHANNELS`.
    pub min_channels: Option<usize>,
    /// `NCCL_MAX_NCHANNELS`.
    pub max_channels: Option<usize>,
    /// `NCCL_TOPO_FILE`.
    pub topo_file: Option<PathBuf>,
    /// `NCCL_TOPO_DUMP_FILE`.
    pub topo_dump_file: Option<PathBuf>,
    /// `NCCL_NVB_DISABLE=1`: no NVLink paths through an intermediate GPU.
    pub nvb_disable: bool,
    /// `NCCL_PXN_DISABLE=1`: no GPU->NIC paths through an NVLink peer.
    pub pxn_disable: bool,
}

impl Default for TopoConfig {
    fn default() -> Self {
        TopoConfig {
            p2p_level: None,
            p2p_disable: false,
            shm_disable: false,
            net: None,
            ib_hca: None,
            socket_ifname: None,
            cross_nic: CrossNic::Auto,
            min_channels: None,
            max_channels: None,
            topo_file: None,
            topo_dump_file: None,
            nvb_disable: false,
            pxn_disable: false,
        }
    }
}

/// The most channels a search produces (NCCL's limit).
pub const MAX_CHANNELS: usize = 64;

impl TopoConfig {
    /// Reads the knobs from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the knobs through `get` (a variable name to its value), so tests can pass a map.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut c = TopoConfig::default();
        let val = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        if let Some(v) = val("NCCL_P2P_LEVEL") {
            c.p2p_level = Some(PathType::parse_level(&v).ok_or_else(|| TopoError::Config {
                var: "NCCL_P2P_LEVEL".into(),
                value: v.clone(),
                msg: "expected LOC, NVL, NVB, C2C, PIX, PXB, PHB, SYS or 0..5".into(),
            })?);
        }
        c.p2p_disable = parse_bool("NCCL_P2P_DISABLE", val("NCCL_P2P_DISABLE"))?;
        c.shm_disable = parse_bool("NCCL_SHM_DISABLE", val("NCCL_SHM_DISABLE"))?;
        c.nvb_disable = parse_bool("NCCL_NVB_DISABLE", val("NCCL_NVB_DISABLE"))?;
        c.pxn_disable = parse_bool("NCCL_PXN_DISABLE", val("NCCL_PXN_DISABLE"))?;
        if let Some(v) = val("NCCL_NET") {
            let t = v.trim();
            c.net = Some(if t.eq_ignore_ascii_case("ib") {
                NetSelect::Ib
            } else if t.eq_ignore_ascii_case("socket") {
                NetSelect::Socket
            } else {
                return Err(TopoError::Config {
                    var: "NCCL_NET".into(),
                    value: v.clone(),
                    msg: "supported networks are IB and Socket".into(),
                });
            });
        }
        if let Some(v) = val("NCCL_IB_HCA") {
            c.ib_hca = Some(DeviceFilter::parse("NCCL_IB_HCA", &v, true)?);
        }
        if let Some(v) = val("NCCL_SOCKET_IFNAME") {
            c.socket_ifname = Some(DeviceFilter::parse("NCCL_SOCKET_IFNAME", &v, false)?);
        }
        if let Some(v) = val("NCCL_CROSS_NIC") {
            c.cross_nic = match v.trim() {
                "0" => CrossNic::Never,
                "1" => CrossNic::Allow,
                "2" => CrossNic::Auto,
                _ => {
                    return Err(TopoError::Config {
                        var: "NCCL_CROSS_NIC".into(),
                        value: v.clone(),
                        msg: "expected 0, 1 or 2".into(),
                    })
                }
            };
        }
        c.min_channels = parse_count("NCCL_MIN_NCHANNELS", val("NCCL_MIN_NCHANNELS"))?;
        c.max_channels = parse_count("NCCL_MAX_NCHANNELS", val("NCCL_MAX_NCHANNELS"))?;
        c.topo_file = val("NCCL_TOPO_FILE").map(PathBuf::from);
        c.topo_dump_file = val("NCCL_TOPO_DUMP_FILE").map(PathBuf::from);
        Ok(c)
    }

    /// The P2P level in force: none when P2P is disabled.
    pub fn effective_p2p_level(&self) -> Option<PathType> {
        if self.p2p_disable {
            return None;
        }
        Some(self.p2p_level.unwrap_or(PathType::Pxb))
    }

    /// Clamps a channel count to `[min, max]` and to [`MAX_CHANNELS`].
    pub fn clamp_channels(&self, n: usize) -> usize {
        let max = self
            .max_channels
            .unwrap_or(MAX_CHANNELS)
            .clamp(1, MAX_CHANNELS);
        let min = self.min_channels.unwrap_or(1).clamp(1, max);
        n.clamp(min, max)
    }
}

fn parse_bool(var: &str, v: Option<String>) -> Result<bool> {
    match v.as_deref().map(str::trim) {
        None => Ok(false),
        Some(s) => match s.parse::<i64>() {
            Ok(n) => Ok(n != 0),
            Err(_) => Err(TopoError::Config {
                var: var.to_string(),
                value: s.to_string(),
                msg: "expected an integer (0 or 1)".into(),
            }),
        },
    }
}

fn parse_count(var: &str, v: Option<String>) -> Result<Option<usize>> {
    match v.as_deref().map(str::trim) {
        None => Ok(None),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(TopoError::Config {
                var: var.to_string(),
                value: s.to_string(),
                msg: "expected a positive integer".into(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// [`ENV_VARS`] names exactly what the configuration asks for.
    #[test]
    fn env_vars_lists_every_variable_read() {
        let asked = std::cell::RefCell::new(Vec::new());
        TopoConfig::from_lookup(|k| {
            asked.borrow_mut().push(k.to_string());
            None
        })
        .unwrap();
        let mut asked = asked.into_inner();
        asked.sort();
        asked.dedup();
        let mut listed: Vec<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(asked, listed);
    }

    fn cfg(pairs: &[(&str, &str)]) -> Result<TopoConfig> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TopoConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c, TopoConfig::default());
        assert_eq!(c.effective_p2p_level(), Some(PathType::Pxb));
        assert_eq!(c.clamp_channels(100), MAX_CHANNELS);
    }

    #[test]
    fn knobs() {
        let c = cfg(&[
            ("NCCL_P2P_LEVEL", "NVL"),
            ("NCCL_SHM_DISABLE", "1"),
            ("NCCL_NET", "socket"),
            ("NCCL_CROSS_NIC", "0"),
            ("NCCL_MIN_NCHANNELS", "4"),
            ("NCCL_MAX_NCHANNELS", "8"),
            ("NCCL_TOPO_FILE", "/x.xml"),
        ])
        .unwrap();
        assert_eq!(c.p2p_level, Some(PathType::Nvl));
        assert!(c.shm_disable);
        assert_eq!(c.net, Some(NetSelect::Socket));
        assert_eq!(c.cross_nic, CrossNic::Never);
        assert_eq!(c.clamp_channels(1), 4);
        assert_eq!(c.clamp_channels(20), 8);
        assert_eq!(c.topo_file, Some(PathBuf::from("/x.xml")));
        let d = cfg(&[("NCCL_P2P_DISABLE", "1")]).unwrap();
        assert_eq!(d.effective_p2p_level(), None);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = cfg(&[("NCCL_CROSS_NIC", "7")]).unwrap_err().to_string();
        assert!(e.contains("NCCL_CROSS_NIC"), "{e}");
        let e = cfg(&[("NCCL_NET", "Libfabric")]).unwrap_err().to_string();
        assert!(e.contains("NCCL_NET"), "{e}");
        assert!(cfg(&[("NCCL_P2P_LEVEL", "far")]).is_err());
        assert!(cfg(&[("NCCL_MAX_NCHANNELS", "0")]).is_err());
        assert!(cfg(&[("NCCL_IB_HCA", "mlx5_0:x")]).is_err());
    }

    #[test]
    fn device_filters() {
        let f = DeviceFilter::parse("V", "eth", false).unwrap();
        assert!(f.accepts("eth0", None) && !f.accepts("ib0", None));
        let f = DeviceFilter::parse("V", "^docker,lo", false).unwrap();
        assert!(f.accepts("eth0", None) && !f.accepts("lo", None));
        assert!(!f.accepts("docker0", None));
        let f = DeviceFilter::parse("V", "=eth0", false).unwrap();
        assert!(f.accepts("eth0", None) && !f.accepts("eth01", None));
        let f = DeviceFilter::parse("V", "^=eth0", false).unwrap();
        assert!(!f.accepts("eth0", None) && f.accepts("eth01", None));
        let f = DeviceFilter::parse("V", "mlx5_0:1,mlx5_1", true).unwrap();
        assert!(f.accepts("mlx5_0", Some(1)));
        assert!(!f.accepts("mlx5_0", Some(2)));
        assert!(f.accepts("mlx5_1", Some(2)));
        assert!(f.accepts("mlx5_10", Some(1)), "prefix match");
        let f = DeviceFilter::parse("V", "=mlx5_1", true).unwrap();
        assert!(!f.accepts("mlx5_10", Some(1)));
    }
}
