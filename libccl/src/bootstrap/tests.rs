use super::*;

#[test]
fn unique_id_round_trips_and_rejects_garbage() {
    let a: SocketAddr = "10.1.2.3:4567".parse().unwrap();
    let id = UniqueId::encode(a, 0xdead_beef);
    assert_eq!(id.decode().unwrap(), (a, 0xdead_beef));
    let v6: SocketAddr = "[fd00::1]:99".parse().unwrap();
    assert_eq!(UniqueId::encode(v6, 1).decode().unwrap(), (v6, 1));
    let mut bad = id;
    bad.0[0] = b'X';
    assert_eq!(bad.decode().unwrap_err().kind, ErrorKind::InvalidArgument);
    let mut bad = id;
    bad.0[100] = 1;
    assert_eq!(bad.decode().unwrap_err().kind, ErrorKind::InvalidArgument);
    assert!(UniqueId([0x5a; 128]).decode().is_err());
}

#[test]
fn ifname_spec_syntax() {
    assert!(ifname_matches("eth", "eth0"));
    // NCCL_SOCKET_IFNAME naming several NICs spreads mpt paths over them (IPv4 first,
    // sorted by name, loopback and down ones left out); one NIC, or none: no spreading.
    let ifa = |name: &str, ip: &str, up: bool| IfAddr {
        name: name.into(),
        ip: ip.parse().unwrap(),
        up,
        loopback: name == "lo",
    };
    let all = [
        ifa("eth3", "fd00::3", true),
        ifa("eth1", "fd00::2", true),
        ifa("eth1", "10.0.1.1", true),
        ifa("eth0", "10.0.0.1", true),
        ifa("eth2", "10.0.2.1", false),
        ifa("lo", "127.0.0.1", true),
    ];
    let ips = |v: &[&str]| {
        v.iter()
            .map(|s| s.parse::<IpAddr>().unwrap())
            .collect::<Vec<_>>()
    };
    let nics_matching = |spec: &str, all: &[IfAddr], max: usize| -> Vec<IpAddr> {
        nics_matching(spec, all, max)
            .into_iter()
            .map(|(_, ip)| ip)
            .collect()
    };
    assert_eq!(
        nics_matching("eth", &all, 8),
        ips(&["10.0.0.1", "10.0.1.1"])
    );
    assert_eq!(nics_matching("eth", &all, 1), ips(&["10.0.0.1"]));
    // IPv6-only NICs count only when no NIC has IPv4 (eth3 above stayed out).
    let v6 = [ifa("ib1", "fd00::11", true), ifa("ib0", "fd00::10", true)];
    assert_eq!(nics_matching("ib", &v6, 8), ips(&["fd00::10", "fd00::11"]));
    assert_eq!(nics_matching("eth0", &all, 8), ips(&[]));
    assert_eq!(nics_matching("lo,eth0", &all, 8), ips(&[]));
    assert_eq!(
        nics_matching("=eth1,eth0", &all, 8),
        ips(&["10.0.0.1", "10.0.1.1"])
    );
    assert!(!ifname_matches("eth", "lo"));
    assert!(ifname_matches("^docker,lo", "eth0"));
    assert!(!ifname_matches("^docker,lo", "docker0"));
    assert!(ifname_matches("=eth0", "eth0"));
    assert!(!ifname_matches("=eth0", "eth01"));
    assert!(!ifname_matches("^=eth0", "eth0"));
    assert!(ifname_matches("^=eth0", "eth01"));
    assert!(ifname_matches("veth,eth", "veth1"));
}
