//! The hello two ends of a link exchange: its magics and largest size, and reading the
//! peer's ([`parse_hello`]).

use std::net::IpAddr;

use super::config::{MAX_ENGINES, MAX_NICS};

/// Hello of a one-engine link (unchanged since before engines, so old peers still match).
pub(super) const HELLO_MAGIC: &[u8; 4] = b"MPT1";
/// Hello of a link of several engines: magic, engine count, largest frame, split size,
/// then one `MPT1` body (flow id, path count, ports) per engine.
pub(super) const HELLO_MAGIC_ENGINES: &[u8; 4] = b"MPTE";
/// Trailer of a hello whose paths sit on several local addresses: magic, count, then each
/// address (family 4 or 6, its bytes); path `i` of every engine is on address `i % count`.
pub(super) const HELLO_MAGIC_ADDRS: &[u8; 4] = b"MPTA";
/// Longest hello: magic, engine count, frame layout, per engine flow id, path count and 256
/// ports, and the address trailer.
pub(super) const MAX_HELLO: usize = 22 + MAX_ENGINES * (4 + 2 * 256) + 5 + MAX_NICS * 17;

/// What a hello says.
pub(super) struct PeerHello {
    /// Per engine: the peer's flow id and path ports.
    pub(super) engines: Vec<(u16, Vec<u16>)>,
    /// With several engines: the peer's largest frame and split size.
    pub(super) layout: Option<(u64, u64)>,
    /// The local addresses the peer spread its paths over (empty: all on its link address).
    pub(super) addrs: Vec<IpAddr>,
}

pub(super) fn parse_hello(h: &[u8]) -> std::result::Result<PeerHello, &'static str> {
    let be64 = |b: &[u8]| {
        let mut x = [0u8; 8];
        x.copy_from_slice(b);
        u64::from_be_bytes(x)
    };
    if h.len() < 4 {
        return Err("bad magic");
    }
    let (engines, layout, mut rest) = if &h[..4] == HELLO_MAGIC {
        (1, None, &h[4..])
    } else if &h[..4] == HELLO_MAGIC_ENGINES {
        if h.len() < 22 {
            return Err("bad length");
        }
        let n = usize::from(u16::from_be_bytes([h[4], h[5]]));
        (n, Some((be64(&h[6..14]), be64(&h[14..22]))), &h[22..])
    } else {
        return Err("bad magic");
    };
    if engines == 0 || engines > MAX_ENGINES {
        return Err("engine count outside 1..=16");
    }
    let mut out = Vec::with_capacity(engines);
    for _ in 0..engines {
        if rest.len() < 4 {
            return Err("bad length");
        }
        let fid = u16::from_be_bytes([rest[0], rest[1]]);
        let n = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let body = rest.get(4..4 + 2 * n).ok_or("bad length")?;
        let ports = body
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        out.push((fid, ports));
        rest = &rest[4 + 2 * n..];
    }
    let mut addrs = Vec::new();
    if !rest.is_empty() {
        if rest.len() < 5 || &rest[..4] != HELLO_MAGIC_ADDRS {
            return Err("bad length");
        }
        let k = usize::from(rest[4]);
        if k == 0 || k > MAX_NICS {
            return Err("address count outside 1..=8");
        }
        rest = &rest[5..];
        for _ in 0..k {
            // The address's bytes after its family byte.
            fn octets<const N: usize>(rest: &[u8]) -> std::result::Result<[u8; N], &'static str> {
                rest.get(1..=N)
                    .and_then(|b| b.try_into().ok())
                    .ok_or("bad length")
            }
            let (ip, len) = match rest.first() {
                Some(4) => (IpAddr::from(octets::<4>(rest)?), 5),
                Some(6) => (IpAddr::from(octets::<16>(rest)?), 17),
                _ => return Err("bad address family"),
            };
            addrs.push(ip);
            rest = &rest[len..];
        }
        if !rest.is_empty() {
            return Err("bad length");
        }
    }
    Ok(PeerHello {
        engines: out,
        layout,
        addrs,
    })
}
