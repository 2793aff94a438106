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

/// The first address of `ip`'s family (IPv4 when `v4`) on interface `name`, if it has one.
pub fn address_on(name: &str, v4: bool) -> Option<IpAddr> {
    list()
        .into_iter()
        .find(|a| a.name == name && a.ip.is_ipv4() == v4)
        .map(|a| a.ip)
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
        assert_eq!(address_on(&name, true), Some(lo));
        assert_eq!(name_of("203.0.113.7".parse().unwrap()), None);
        assert_eq!(address_on("no-such-nic0", true), None);
    }
}
