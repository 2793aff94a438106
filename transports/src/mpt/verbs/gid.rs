//! GID choice for RoCE/InfiniBand ports, and its re-resolution after a port comes back.
//!
//! A RoCE port's GID table holds, per netdev address, one entry per RoCE version, e.g.
//! (mlx5, `show_gids`):
//!
//! ```text
//! index  gid                                      type        ndev
//! 0      fe80::ba59:9fff:fe12:3456                RoCE v1     eth0
//! 1      fe80::ba59:9fff:fe12:3456                RoCE v2     eth0
//! 2      ::ffff:10.0.0.1                          RoCE v1     eth0
//! 3      ::ffff:10.0.0.1                          RoCE v2     eth0
//! ```
//!
//! Index 0 is always there and always link-local: it works inside one L2 segment and then
//! silently fails across routers, which is how UCCL users lost days. The rule here, in
//! priority order:
//! 1. `NCCL_IB_GID_INDEX` (non-negative) wins, if that slot is populated;
//! 2. skip empty slots, multicast, and entries whose netdev is down;
//! 3. never link-local (`fe80::/10`) unless nothing else is left;
//! 4. RoCE v2 (routable UDP encapsulation) before v1/IB;
//! 5. an IPv4-mapped address (`::ffff:a.b.c.d`) before a global IPv6 one
//!    (`NCCL_IB_ADDR_FAMILY=AF_INET6` reverses this, as in NCCL);
//! 6. the lowest index.
//!
//! InfiniBand ports only have `fe80::/64`-prefixed GIDs under the default subnet prefix; the
//! rule then falls through to them, which is right for IB (routing is by LID).
//!
//! After a port flaps, addresses are re-added and may land at other indices (or not be
//! back yet, leaving only link-local entries): [`reresolve`] re-runs the choice on the
//! fresh table and says whether the GID changed, in which case the queue pairs must be
//! re-established (ERR -> RESET -> ... with the new `sgid_index`, and the peer told).

use std::path::Path;

use super::VerbsError;

/// GID type (sysfs `gid_attrs/types/<i>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand (a port whose link layer is IB).
    Ib,
    /// RoCE v1 (Ethernet L2, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
}

/// State of the netdev an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetdevState {
    /// Up (or "unknown", which some drivers report for working links).
    Up,
    /// Down: the entry is about to disappear.
    Down,
    /// No netdev (InfiniBand).
    None,
}

/// One row of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// Table index (the `sgid_index` to use).
    pub index: u32,
    /// The GID, network order.
    pub gid: [u8; 16],
    /// Its type.
    pub kind: GidType,
    /// State of its netdev.
    pub netdev: NetdevState,
}

/// Selection knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidPolicy {
    /// `NCCL_IB_GID_INDEX`: a fixed index (negative or unset = automatic).
    pub index: Option<u32>,
    /// `NCCL_IB_ADDR_FAMILY`: `AF_INET` (default) prefers IPv4-mapped, `AF_INET6` global IPv6.
    pub prefer_ipv4: bool,
}

impl Default for GidPolicy {
    fn default() -> Self {
        GidPolicy {
            index: None,
            prefer_ipv4: true,
        }
    }
}

impl GidPolicy {
    /// From the process environment.
    pub fn from_env() -> Result<GidPolicy, VerbsError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// From `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<GidPolicy, VerbsError> {
        let mut p = GidPolicy::default();
        if let Some(raw) = lookup("NCCL_IB_GID_INDEX") {
            let v: i64 = raw.trim().parse().map_err(|_| VerbsError::InvalidParam {
                name: "NCCL_IB_GID_INDEX",
                value: raw.clone(),
            })?;
            p.index = u32::try_from(v).ok();
        }
        if let Some(raw) = lookup("NCCL_IB_ADDR_FAMILY") {
            p.prefer_ipv4 = match raw.trim() {
                "AF_INET" => true,
                "AF_INET6" => false,
                _ => {
                    return Err(VerbsError::InvalidParam {
                        name: "NCCL_IB_ADDR_FAMILY",
                        value: raw,
                    })
                }
            };
        }
        Ok(p)
    }
}

/// The class of address a GID holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrClass {
    /// All zeros: an empty slot.
    Empty,
    /// `fe80::/10`.
    LinkLocal,
    /// `::ffff:a.b.c.d`.
    Ipv4Mapped,
    /// `ff00::/8`.
    Multicast,
    /// Anything else (global or unique-local IPv6).
    GlobalV6,
}

/// Classifies a GID's address.
pub fn classify(gid: &[u8; 16]) -> AddrClass {
    if gid.iter().all(|&b| b == 0) {
        AddrClass::Empty
    } else if gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 {
        AddrClass::LinkLocal
    } else if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        AddrClass::Ipv4Mapped
    } else if gid[0] == 0xff {
        AddrClass::Multicast
    } else {
        AddrClass::GlobalV6
    }
}

/// The chosen GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidChoice {
    /// Table index.
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// Its type.
    pub kind: GidType,
    /// The choice is link-local (only because nothing else was usable): worth a warning,
    /// it will not cross a router.
    pub link_local: bool,
}

impl GidChoice {
    fn of(e: &GidEntry) -> GidChoice {
        GidChoice {
            index: e.index,
            gid: e.gid,
            kind: e.kind,
            link_local: classify(&e.gid) == AddrClass::LinkLocal,
        }
    }
}

/// Picks the GID to use from a port's table (see the module docs for the rule).
pub fn choose(table: &[GidEntry], policy: &GidPolicy) -> Result<GidChoice, VerbsError> {
    if let Some(want) = policy.index {
        return table
            .iter()
            .find(|e| e.index == want && classify(&e.gid) != AddrClass::Empty)
            .map(GidChoice::of)
            .ok_or(VerbsError::GidIndexNotFound(want));
    }
    table
        .iter()
        .filter(|e| e.netdev != NetdevState::Down)
        .filter_map(|e| {
            let class = classify(&e.gid);
            let family = match (class, policy.prefer_ipv4) {
                (AddrClass::Empty | AddrClass::Multicast, _) => return None,
                (AddrClass::Ipv4Mapped, true) | (AddrClass::GlobalV6, false) => 0u8,
                (AddrClass::Ipv4Mapped, false) | (AddrClass::GlobalV6, true) => 1,
                (AddrClass::LinkLocal, _) => 2,
            };
            let version = match e.kind {
                GidType::RoceV2 => 0u8,
                GidType::RoceV1 | GidType::Ib => 1,
            };
            Some(((class == AddrClass::LinkLocal, version, family, e.index), e))
        })
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, e)| GidChoice::of(e))
        .ok_or(VerbsError::NoUsableGid)
}

/// Result of re-running the choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reresolved {
    /// The new choice.
    pub choice: GidChoice,
    /// It differs (index or address) from the previous one: reconnect with it.
    pub changed: bool,
}

/// Re-runs [`choose`] on a fresh table (after a port-up event) and compares with `previous`.
pub fn reresolve(
    previous: Option<&GidChoice>,
    table: &[GidEntry],
    policy: &GidPolicy,
) -> Result<Reresolved, VerbsError> {
    let choice = choose(table, policy)?;
    let changed = previous.map_or(true, |p| p.index != choice.index || p.gid != choice.gid);
    Ok(Reresolved { choice, changed })
}

/// Parses sysfs's GID text (`fe80:0000:0000:0000:ba59:9fff:fe12:3456`).
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut groups = text.trim().split(':');
    for pair in out.chunks_exact_mut(2) {
        let g = groups.next()?;
        if g.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        pair.copy_from_slice(&v.to_be_bytes());
    }
    groups.next().is_none().then_some(out)
}

/// Reads a port's GID table from sysfs: `ib_root` is normally `/sys/class/infiniband` and
/// `net_root` `/sys/class/net`. Layout (kernel >= 4.9):
/// `<ib_root>/<dev>/ports/<port>/gids/<i>` (the GID), `.../gid_attrs/types/<i>`
/// (`"IB/RoCE v1"` or `"RoCE v2"`; unreadable for empty slots) and `.../gid_attrs/ndevs/<i>`
/// (netdev name, absent on IB), with the netdev's `<net_root>/<ndev>/operstate`.
/// Empty slots are left out.
pub fn read_sysfs_table(
    ib_root: &Path,
    net_root: &Path,
    device: &str,
    port: u8,
) -> Result<Vec<GidEntry>, VerbsError> {
    let port_dir = ib_root.join(device).join("ports").join(port.to_string());
    let gids = port_dir.join("gids");
    let rd = std::fs::read_dir(&gids)
        .map_err(|e| VerbsError::Sysfs(format!("{}: {e}", gids.display())))?;
    let mut table = Vec::new();
    for ent in rd.flatten() {
        let Some(index) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(ent.path()) else {
            continue;
        };
        let gid = parse_gid(&text)
            .ok_or_else(|| VerbsError::Sysfs(format!("bad GID {text:?} at index {index}")))?;
        if classify(&gid) == AddrClass::Empty {
            continue;
        }
        let attr = |what: &str| {
            std::fs::read_to_string(
                port_dir
                    .join("gid_attrs")
                    .join(what)
                    .join(index.to_string()),
            )
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
        };
        let ndev = attr("ndevs");
        let kind = match attr("types").as_deref() {
            Some(t) if t.eq_ignore_ascii_case("RoCE v2") => GidType::RoceV2,
            Some(_) if ndev.is_some() => GidType::RoceV1,
            _ => GidType::Ib,
        };
        let netdev = match &ndev {
            None => NetdevState::None,
            Some(n) => match std::fs::read_to_string(net_root.join(n).join("operstate")) {
                Ok(s) if matches!(s.trim(), "down" | "lowerlayerdown" | "notpresent") => {
                    NetdevState::Down
                }
                Ok(_) => NetdevState::Up,
                Err(_) => NetdevState::Down,
            },
        };
        table.push(GidEntry {
            index,
            gid,
            kind,
            netdev,
        });
    }
    table.sort_by_key(|e| e.index);
    Ok(table)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn g(text: &str) -> [u8; 16] {
        let ip: std::net::Ipv6Addr = text.parse().unwrap();
        ip.octets()
    }

    fn e(index: u32, gid: &str, kind: GidType, netdev: NetdevState) -> GidEntry {
        GidEntry {
            index,
            gid: g(gid),
            kind,
            netdev,
        }
    }

    use GidType::*;
    use NetdevState::{Down, Up};

    /// A typical mlx5 RoCE port: link-local v1/v2, then IPv4 v1/v2.
    fn mlx5_table() -> Vec<GidEntry> {
        vec![
            e(0, "fe80::ba59:9fff:fe12:3456", RoceV1, Up),
            e(1, "fe80::ba59:9fff:fe12:3456", RoceV2, Up),
            e(2, "::ffff:10.0.0.1", RoceV1, Up),
            e(3, "::ffff:10.0.0.1", RoceV2, Up),
        ]
    }

    #[test]
    fn prefers_rocev2_ipv4_over_link_local() {
        let c = choose(&mlx5_table(), &GidPolicy::default()).unwrap();
        assert_eq!(c.index, 3);
        assert_eq!(c.kind, RoceV2);
        assert!(!c.link_local);
    }

    #[test]
    fn link_local_trap_only_when_nothing_else() {
        // Port just came back; DHCP has not re-added the IPv4 address yet.
        let t = &mlx5_table()[..2];
        let c = choose(t, &GidPolicy::default()).unwrap();
        assert_eq!(c.index, 1, "RoCE v2 link-local as a last resort");
        assert!(c.link_local);
        // A routable v1 beats a link-local v2.
        let t = vec![
            e(0, "fe80::1", RoceV1, Up),
            e(1, "fe80::1", RoceV2, Up),
            e(2, "2001:db8::5", RoceV1, Up),
        ];
        assert_eq!(choose(&t, &GidPolicy::default()).unwrap().index, 2);
    }

    #[test]
    fn ipv6_global_and_address_family() {
        let mut t = mlx5_table();
        t.push(e(4, "fe80::ba59:9fff:fe12:3456", RoceV1, Up));
        t.push(e(5, "2001:db8:1::7", RoceV2, Up));
        assert_eq!(choose(&t, &GidPolicy::default()).unwrap().index, 3);
        let v6 = GidPolicy {
            prefer_ipv4: false,
            ..GidPolicy::default()
        };
        assert_eq!(choose(&t, &v6).unwrap().index, 5);
        // Without IPv4, global IPv6 v2 wins even with AF_INET preferred.
        let t = vec![e(0, "fe80::1", RoceV2, Up), e(1, "fd00::1", RoceV2, Up)];
        assert_eq!(choose(&t, &GidPolicy::default()).unwrap().index, 1);
    }

    #[test]
    fn down_netdevs_empty_and_multicast_are_skipped() {
        // Two netdevs (VLANs): the one with the IPv4 address is down.
        let t = vec![
            e(0, "fe80::1", RoceV2, Up),
            e(1, "::ffff:192.168.1.9", RoceV2, Down),
            e(2, "::", RoceV2, Up),
            e(3, "ff02::1", RoceV2, Up),
            e(4, "::ffff:172.16.0.4", RoceV1, Up),
        ];
        assert_eq!(choose(&t, &GidPolicy::default()).unwrap().index, 4);
        let all_down = vec![e(0, "::ffff:10.0.0.1", RoceV2, Down)];
        assert_eq!(
            choose(&all_down, &GidPolicy::default()),
            Err(VerbsError::NoUsableGid)
        );
        assert_eq!(
            choose(&[], &GidPolicy::default()),
            Err(VerbsError::NoUsableGid)
        );
    }

    #[test]
    fn infiniband_port_uses_its_default_prefix_gid() {
        let t = vec![e(0, "fe80::2:c903:a:b1c2", Ib, NetdevState::None)];
        let c = choose(&t, &GidPolicy::default()).unwrap();
        assert_eq!(c.index, 0);
    }

    #[test]
    fn nccl_ib_gid_index_is_honoured() {
        let env = |k: &str| (k == "NCCL_IB_GID_INDEX").then(|| "1".to_string());
        let p = GidPolicy::from_lookup(&env).unwrap();
        assert_eq!(choose(&mlx5_table(), &p).unwrap().index, 1);
        let p =
            GidPolicy::from_lookup(&|k| (k == "NCCL_IB_GID_INDEX").then(|| "-1".into())).unwrap();
        assert_eq!(p.index, None);
        let p = GidPolicy {
            index: Some(9),
            ..GidPolicy::default()
        };
        assert_eq!(
            choose(&mlx5_table(), &p),
            Err(VerbsError::GidIndexNotFound(9))
        );
        assert!(
            GidPolicy::from_lookup(&|k| (k == "NCCL_IB_ADDR_FAMILY").then(|| "x".into())).is_err()
        );
    }

    #[test]
    fn reresolve_after_port_flap_reports_changes() {
        let policy = GidPolicy::default();
        let first = reresolve(None, &mlx5_table(), &policy).unwrap();
        assert!(first.changed);
        let same = reresolve(Some(&first.choice), &mlx5_table(), &policy).unwrap();
        assert!(!same.changed);
        // Port down/up: link-local entries first, the IPv4 address not back yet.
        let flapped = &mlx5_table()[..2];
        let r = reresolve(Some(&first.choice), flapped, &policy).unwrap();
        assert!(r.changed && r.choice.link_local);
        // The address comes back at other indices (another address was added first).
        let back = vec![
            e(0, "fe80::ba59:9fff:fe12:3456", RoceV1, Up),
            e(1, "fe80::ba59:9fff:fe12:3456", RoceV2, Up),
            e(2, "::ffff:10.0.0.77", RoceV1, Up),
            e(3, "::ffff:10.0.0.77", RoceV2, Up),
            e(4, "::ffff:10.0.0.1", RoceV1, Up),
            e(5, "::ffff:10.0.0.1", RoceV2, Up),
        ];
        let r = reresolve(Some(&first.choice), &back, &policy).unwrap();
        assert!(r.changed, "index 3 now holds another address");
        assert_eq!(r.choice.gid, g("::ffff:10.0.0.77"));
    }

    #[test]
    fn parses_sysfs_gid_text() {
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:ba59:9fff:fe12:3456\n"),
            Some(g("fe80::ba59:9fff:fe12:3456"))
        );
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001:0000"),
            None
        );
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("ccl-verbs-gid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let port = root.join("ib/mlx5_0/ports/1");
        let w = |p: std::path::PathBuf, s: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        let gids = [
            "fe80:0000:0000:0000:ba59:9fff:fe12:3456",
            "fe80:0000:0000:0000:ba59:9fff:fe12:3456",
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
            "0000:0000:0000:0000:0000:0000:0000:0000",
        ];
        for (i, text) in gids.iter().enumerate() {
            w(port.join(format!("gids/{i}")), &format!("{text}\n"));
            if i < 4 {
                let t = if i % 2 == 0 {
                    "IB/RoCE v1\n"
                } else {
                    "RoCE v2\n"
                };
                w(port.join(format!("gid_attrs/types/{i}")), t);
                w(port.join(format!("gid_attrs/ndevs/{i}")), "eth0\n");
            }
        }
        w(root.join("net/eth0/operstate"), "up\n");
        let t = read_sysfs_table(&root.join("ib"), &root.join("net"), "mlx5_0", 1).unwrap();
        assert_eq!(t.len(), 4, "the empty slot is left out");
        assert_eq!(t[3].kind, RoceV2);
        assert_eq!(t[2].kind, RoceV1);
        assert_eq!(t[0].netdev, Up);
        assert_eq!(choose(&t, &GidPolicy::default()).unwrap().index, 3);
        w(root.join("net/eth0/operstate"), "down\n");
        let t = read_sysfs_table(&root.join("ib"), &root.join("net"), "mlx5_0", 1).unwrap();
        assert_eq!(
            choose(&t, &GidPolicy::default()),
            Err(VerbsError::NoUsableGid)
        );
        assert!(read_sysfs_table(&root.join("ib"), &root.join("net"), "mlx5_9", 1).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
