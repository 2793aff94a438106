//! A link whose NIC is renumbered while its paths are down, on loopback: the NIC's lookup is
//! injected ([`MptEndpoint::follow_nics`]), and the cut puts the path's socket on an address
//! that no interface holds (as the renumbered NIC's old one).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mpt::PathId;
use crate::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use crate::socket_failover::PrimaryNic;
use crate::Link;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Frame `i` of a batch tagged `tag`: a length and bytes of its own.
fn frame(tag: u64, i: usize) -> Vec<u8> {
    let len = 1000 + (i * 7919) % 60_000;
    (0..len)
        .map(|k| (k as u64 ^ tag.wrapping_mul(31) ^ (i as u64) << 3) as u8)
        .collect()
}

/// Sends `n` frames each way at once and checks every one on arrival, exactly and in order.
fn swap(a: &mut MptLink, b: &mut MptLink, n: usize, tag: u64) {
    let (fa, fb): (Vec<_>, Vec<_>) = (0..n).map(|i| (frame(tag, i), frame(!tag, i))).unzip();
    let (mut sa, mut sb, mut ra, mut rb) = (0, 0, 0, 0);
    let t0 = Instant::now();
    while ra < n || rb < n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "tag {tag}: a got {ra}, b got {rb} of {n}"
        );
        if sa < n && a.try_send(&fa[sa]).unwrap() {
            sa += 1;
        }
        if sb < n && b.try_send(&fb[sb]).unwrap() {
            sb += 1;
        }
        a.flush().unwrap();
        b.flush().unwrap();
        if let Some(f) = b.peek().unwrap() {
            assert!(f == &fa[rb][..], "tag {tag}: b's frame {rb} differs");
            b.pop();
            rb += 1;
        }
        if let Some(f) = a.peek().unwrap() {
            assert!(f == &fb[ra][..], "tag {tag}: a's frame {ra} differs");
            a.pop();
            ra += 1;
        }
    }
}

/// Path 1 of `l`: its local address, its peer's, its chunks acknowledged, whether it failed.
fn path1(
    l: &MptLink,
) -> (
    std::net::SocketAddr,
    Option<std::net::SocketAddr>,
    u64,
    bool,
) {
    let g = l.engines[0].shared.lock();
    let v = g.conn.path(PathId(1));
    (
        g.udp.local_addrs().unwrap()[1],
        g.udp.peer(1),
        v.chunks_acked,
        v.consecutive_losses > 0,
    )
}

/// Two paths, path 0 on 127.0.0.1 and path 1 on 127.0.0.2 on both sides. a's second NIC
/// "moves" to 127.0.0.3 while healthy: nothing happens. Then a's path 1 is cut: a finds its
/// NIC at the new address and rebinds the path there, b's path 1 (failed, loose) takes a's
/// probe from the new address, and the path carries exact frames again both ways, while
/// path 0 never moved.
#[test]
fn a_path_follows_its_nic_renumbered_while_down_and_carries_data_again() {
    let cfg = MptLinkConfig {
        paths: 2,
        max_frame: 64 * 1024,
        slots: 4,
        chunk_size: 8 * 1024,
        local_ips: vec![ip(1), ip(2)],
        ..MptLinkConfig::default()
    };
    let nic1 = Arc::new(Mutex::new(ip(2)));
    let mut ea = MptEndpoint::bind(ip(1), cfg.clone()).unwrap();
    let look = Arc::clone(&nic1);
    ea.follow_nics(vec![
        PrimaryNic::from_fn(|| Some(ip(1))),
        PrimaryNic::from_fn(move || Some(*look.lock().unwrap())),
    ]);
    let eb = MptEndpoint::bind(ip(1), cfg).unwrap();
    let (ha, hb) = (ea.hello().unwrap(), eb.hello().unwrap());
    let mut a = ea.connect(ip(1), &hb, None).unwrap();
    let mut b = eb.connect(ip(1), &ha, None).unwrap();
    swap(&mut a, &mut b, 40, 1);
    let a1 = path1(&a).0;
    assert_eq!((a1.ip(), path1(&b).1), (ip(2), Some(a1)));
    let b0 = b.engines[0].shared.lock().udp.peer(0);

    // Renumbered while healthy: looked at for 300 ms of traffic, nothing moves.
    *nic1.lock().unwrap() = ip(3);
    let t0 = Instant::now();
    let mut tag = 10;
    while t0.elapsed() < Duration::from_millis(300) {
        swap(&mut a, &mut b, 8, tag);
        tag += 1;
    }
    assert_eq!(path1(&a).0, a1, "a healthy path stays where it is");

    a.engines[0].shared.lock().udp.cut(1);
    // Until a's path 1 is on the new address, b follows it there, and it delivers again.
    let t0 = Instant::now();
    let acked = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "a: {:?}, b: {:?}",
            path1(&a),
            path1(&b)
        );
        swap(&mut a, &mut b, 4, tag);
        tag += 1;
        let (la, _, acked, failed) = path1(&a);
        let (_, bp, _, bfailed) = path1(&b);
        if la.ip() == ip(3) && bp == Some(la) && !failed && !bfailed {
            break acked;
        }
    };
    // Data goes over the moved path, exact, both ways.
    let t0 = Instant::now();
    while path1(&a).2 < acked + 20 || path1(&b).2 < 20 {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", path1(&a));
        swap(&mut a, &mut b, 8, tag);
        tag += 1;
    }
    let gb = b.engines[0].shared.lock();
    assert!(gb.udp.stats().peers_moved >= 1, "{:?}", gb.udp.stats());
    assert_eq!(gb.udp.peer(0), b0, "path 0 never moved");
    assert!(!gb.udp.is_loose(0) && !gb.udp.is_loose(1));
}
