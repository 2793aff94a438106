//! The host's network interfaces and their addresses, as `getifaddrs` lists them.

use std::ffi::CStr;
use std::net::IpAddr;

/// One address of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub ip: IpAddr,
}

/// Every IPv4 and IPv6 address of every interface (empty if the list cannot be read).
pub fn list() -> Vec<IfAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `list`, which we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs built, not freed yet.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its real type;
        // we read the larger form only for the matching family.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    Some(IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ))
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        // SAFETY: ifa_name is the interface's NUL-terminated name, alive with the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
        if let Some(ip) = ip {
            out.push(IfAddr {
                name: name.to_string_lossy().into_owned(),
                ip,
            });
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(list) };
    out
}

/// The name of the interface that holds `ip`, if one does.
pub fn name_of(ip: IpAddr) -> Option<String> {
    list().into_iter().find(|a| a.ip == ip).map(|a| a.name)
}

/// An address on interface `name` of the same kind as `like`: `like` itself while the
/// interface holds it, else its first address of the same family and, for IPv6, the same
/// scope (a NIC's link-local address never stands in for its global one).
pub fn address_on(name: &str, like: IpAddr) -> Option<IpAddr> {
    pick(&list(), name, like)
}

fn pick(list: &[IfAddr], name: &str, like: IpAddr) -> Option<IpAddr> {
    let link_local =
        |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    let mut same = list.iter().filter(|a| {
        a.name == name && a.ip.is_ipv4() == like.is_ipv4() && link_local(&a.ip) == link_local(&like)
    });
    let first = same.clone().next().map(|a| a.ip);
    same.find(|a| a.ip == like).map(|a| a.ip).or(first)
}

/// The index of the interface that holds address `ip` (the NIC a socket bound to it uses),
/// if one does and the index fits the monitor's NIC numbers.
pub fn interface_index(ip: IpAddr) -> Option<u16> {
    let name = std::ffi::CString::new(name_of(ip)?).ok()?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    u16::try_from(idx).ok().filter(|&i| i != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback holds 127.0.0.1 under its own name, and that name gives it back.
    #[test]
    fn loopback_is_found_by_address_and_by_name() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let name = name_of(lo).expect("an interface holds 127.0.0.1");
        assert_eq!(address_on(&name, lo), Some(lo));
        assert_eq!(name_of("203.0.113.7".parse().unwrap()), None);
        assert_eq!(address_on("no-such-nic0", lo), None);
    }

    /// A renumbered NIC's new address is of the old one's kind: the same family, and for
    /// IPv6 a global address for a global one, never the link-local one listed first; an
    /// address the NIC still holds is kept even when others come first.
    #[test]
    fn a_nic_s_address_is_picked_by_family_and_scope() {
        let a = |name: &str, ip: &str| IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
        };
        let list = [
            a("nic0", "fe80::1"),
            a("nic0", "10.0.0.9"),
            a("nic0", "2001:db8::9"),
            a("nic0", "10.0.0.7"),
            a("nic1", "10.0.1.1"),
        ];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(pick(&list, "nic0", ip("10.0.0.1")), Some(ip("10.0.0.9")));
        assert_eq!(pick(&list, "nic0", ip("10.0.0.7")), Some(ip("10.0.0.7")));
        assert_eq!(
            pick(&list, "nic0", ip("2001:db8::1")),
            Some(ip("2001:db8::9"))
        );
        assert_eq!(pick(&list, "nic0", ip("fe80::2")), Some(ip("fe80::1")));
        assert_eq!(pick(&list, "nic2", ip("10.0.0.1")), None);
    }
}
