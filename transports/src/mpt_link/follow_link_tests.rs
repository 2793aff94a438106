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

/// Sends `n` frames from `a` to `b`, and as many back when `back`, at once, and checks every
/// one on arrival, exactly and in order.
fn swap(a: &mut MptLink, b: &mut MptLink, n: usize, tag: u64, back: bool) {
    let (fa, fb): (Vec<_>, Vec<_>) = (0..n).map(|i| (frame(tag, i), frame(!tag, i))).unzip();
    let nb = if back { n } else { 0 };
    let (mut sa, mut sb, mut ra, mut rb) = (0, 0, 0, 0);
    let t0 = Instant::now();
    while ra < nb || rb < n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "tag {tag}: a got {ra}, b got {rb} of {n}"
        );
        if sa < n && a.try_send(&fa[sa]).unwrap() {
            sa += 1;
        }
        if sb < nb && b.try_send(&fb[sb]).unwrap() {
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

/// Two paths, path 0 on 127.0.0.1 and path 1 on 127.0.0.2 on both sides; frames go from a
/// to b, and back when `back`. The mover's (a's when `a_moves`, else b's) path 1 is cut and
/// its second NIC comes back at 127.0.0.3: the mover finds it there and rebinds the path, the
/// other side's path 1 (failed or quiet, loose) takes the mover's probes from the new
/// address, and the path carries exact frames again, while path 0 never moved.
fn follows_a_renumbered_nic(a_moves: bool, back: bool) {
    // One at a time: each runs two engines against time limits, and three at once on a
    // two-core machine left the data check waiting on a path the loaded sender avoided.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = MptLinkConfig {
        paths: 2,
        max_frame: 64 * 1024,
        slots: 4,
        chunk_size: 8 * 1024,
        local_ips: vec![ip(1), ip(2)],
        ..MptLinkConfig::default()
    };
    let nic1 = Arc::new(Mutex::new(ip(2)));
    let look = Arc::clone(&nic1);
    let lookups = vec![
        PrimaryNic::from_fn(|| Some(ip(1))),
        PrimaryNic::from_fn(move || Some(*look.lock().unwrap())),
    ];
    let mut ea = MptEndpoint::bind(ip(1), cfg.clone()).unwrap();
    let mut eb = MptEndpoint::bind(ip(1), cfg).unwrap();
    if a_moves { &mut ea } else { &mut eb }.follow_nics(lookups);
    let (ha, hb) = (ea.hello().unwrap(), eb.hello().unwrap());
    let mut a = ea.connect(ip(1), &hb, None).unwrap();
    let mut b = eb.connect(ip(1), &ha, None).unwrap();
    let mover = |a: &MptLink, b: &MptLink| path1(if a_moves { a } else { b });
    let other = |a: &MptLink, b: &MptLink| path1(if a_moves { b } else { a });
    swap(&mut a, &mut b, 40, 1, back);
    let m1 = mover(&a, &b).0;
    assert_eq!((m1.ip(), other(&a, &b).1), (ip(2), Some(m1)));
    let b0 = b.engines[0].shared.lock().udp.peer(0);

    // The NIC comes back with another address as the path is cut. (That a healthy path never
    // moves is the sans-IO tests' part: on a loaded machine a path of this link can go quiet
    // or lose chunks long enough to count as down, and then it is right to look.)
    *nic1.lock().unwrap() = ip(3);
    let mut tag = 10;
    if a_moves { &a } else { &b }.engines[0]
        .shared
        .lock()
        .udp
        .cut(1);
    // Until the mover's path 1 is on the new address, the other side follows it there, and
    // a's path 1 delivers again.
    let t0 = Instant::now();
    let acked = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "a: {:?}, b: {:?}",
            path1(&a),
            path1(&b)
        );
        swap(&mut a, &mut b, 4, tag, back);
        tag += 1;
        let (at, ..) = mover(&a, &b);
        let (_, followed, ..) = other(&a, &b);
        if at.ip() == ip(3) && followed == Some(at) && !path1(&a).3 && !path1(&b).3 {
            break (path1(&a).2, path1(&b).2);
        }
    };
    // Data goes over the moved path, exact.
    let t0 = Instant::now();
    // (A few chunks: the sender keeps most chunks on the path whose round trip measured
    // better, and on a loaded machine that can be path 0 for a long while.)
    while path1(&a).2 < acked.0 + 4 || (back && path1(&b).2 < acked.1 + 4) {
        if t0.elapsed() > Duration::from_secs(20) {
            let g = a.engines[0].shared.lock();
            panic!(
                "a's paths: {:?}",
                (g.conn.path(PathId(0)), g.conn.path(PathId(1)))
            );
        }
        swap(&mut a, &mut b, 8, tag, back);
        tag += 1;
    }
    let o = if a_moves { &b } else { &a }.engines[0].shared.lock();
    assert!(o.udp.stats().peers_moved >= 1, "{:?}", o.udp.stats());
    assert!(!o.udp.is_loose(0) && !o.udp.is_loose(1));
    drop(o);
    assert_eq!(
        b.engines[0].shared.lock().udp.peer(0),
        b0,
        "path 0 never moved"
    );
}

/// Both ways; a moves.
#[test]
fn a_path_follows_its_nic_renumbered_while_down_and_carries_data_again() {
    follows_a_renumbered_nic(true, true);
}

/// Frames one way, a to b: the sender moves, and the receiver's path, which loses nothing
/// of its own, goes quiet, turns loose and follows.
#[test]
fn a_receiver_follows_a_sender_renumbered_while_down() {
    follows_a_renumbered_nic(true, false);
}

/// Frames one way, a to b: the receiver moves (its path only goes quiet) and announces the
/// rebound path with probes, which the sender's loose path follows.
#[test]
fn a_sender_follows_a_receiver_renumbered_while_down() {
    follows_a_renumbered_nic(false, false);
}
