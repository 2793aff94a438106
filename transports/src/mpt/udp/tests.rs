//! The datapath on loopback: polling, fragments and their joining, borrowed payloads,
//! paths over several local addresses.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use super::batch::{RxBatch, TxBatch};
use super::frag::{FragHdr, FRAG_TYPE};
use super::paths::{set_int, UdpPaths, SOL_UDP, UDP_GRO};
use super::poll::{FULL_POLL_EVERY, HOT_ROUNDS};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Two connected one-path endpoints on loopback; the sender behaves as if the path MTU
/// were 1500 (loopback's is 64 KiB), so large datagrams become datapath fragments.
fn pair(gro: bool) -> (UdpPaths, UdpPaths) {
    let mut a = UdpPaths::bind(LO, 1, 0.0, 1).unwrap();
    let mut b = UdpPaths::bind(LO, 1, 0.0, 2).unwrap();
    let (pa, pb) = (a.local_ports().unwrap(), b.local_ports().unwrap());
    a.connect(LO, &pb).unwrap();
    b.connect(LO, &pa).unwrap();
    a.mtu_payload = 1472;
    if !gro {
        for fd in b.fds() {
            set_int(fd, SOL_UDP, UDP_GRO, 0);
        }
    }
    (a, b)
}

fn datagram(len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ tag ^ (i >> 8) as u8)
        .collect()
}

/// Sends `dgs` in one batch and returns what arrives, in order.
fn exchange(a: &mut UdpPaths, b: &mut UdpPaths, dgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    exchange_split(a, b, dgs, |len| len)
}

/// As [`exchange`], with the first `head(len)` bytes of each datagram in the batch and
/// the rest committed as a borrowed payload.
fn exchange_split(
    a: &mut UdpPaths,
    b: &mut UdpPaths,
    dgs: &[Vec<u8>],
    head: impl Fn(usize) -> usize,
) -> Vec<Vec<u8>> {
    let mut tx = TxBatch::new();
    for d in dgs {
        let h = head(d.len()).min(d.len());
        tx.slot().unwrap()[..h].copy_from_slice(&d[..h]);
        // SAFETY: `dgs` outlives the batch, which is sent below.
        unsafe { tx.commit_with(0, h, &d[h..]) };
    }
    a.send_batch(&mut tx).unwrap();
    let mut rx = RxBatch::new();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < dgs.len() && Instant::now() < deadline {
        b.recv_batch(0, &mut rx).unwrap();
        got.extend((0..rx.len()).map(|i| rx.get(i).to_vec()));
    }
    got
}

/// Sends one datagram on `path` of `a`; the peer's path `path` receives it.
fn send_on(a: &mut UdpPaths, path: u16) {
    let mut tx = TxBatch::new();
    tx.slot().unwrap()[..8].copy_from_slice(&[path as u8; 8]);
    tx.commit(path, 8);
    a.send_batch(&mut tx).unwrap();
}

/// Calls `readable` until it reports `path` (then drains it); returns how many calls.
fn rounds_until_readable(b: &mut UdpPaths, path: u16) -> usize {
    let mut ready = [0u16; 8];
    let mut rx = RxBatch::new();
    for call in 1..=64 {
        let k = b.readable(&mut ready);
        if ready[..k].contains(&path) {
            while b.recv_batch(usize::from(path), &mut rx).unwrap() > 0 {}
            return call;
        }
    }
    usize::MAX
}

/// Paths that sent or received lately are polled every round, quiet ones every
/// FULL_POLL_EVERY rounds, and all of them after `poll_all_next`.
#[test]
fn quiet_paths_are_polled_every_few_rounds_busy_ones_every_round() {
    let mut a = UdpPaths::bind(LO, 8, 0.0, 1).unwrap();
    let mut b = UdpPaths::bind(LO, 8, 0.0, 2).unwrap();
    let (pa, pb) = (a.local_ports().unwrap(), b.local_ports().unwrap());
    a.connect(LO, &pb).unwrap();
    b.connect(LO, &pa).unwrap();
    // Loopback delivers within the send call.
    send_on(&mut a, 5);
    assert_eq!(
        rounds_until_readable(&mut b, 5),
        1,
        "the first poll is full"
    );
    for _ in 0..3 {
        send_on(&mut a, 5);
        assert_eq!(rounds_until_readable(&mut b, 5), 1, "a busy path");
    }
    // Path 2 is quiet: found at the next full poll at the latest.
    send_on(&mut a, 2);
    let n = rounds_until_readable(&mut b, 2);
    assert!((1..=FULL_POLL_EVERY as usize).contains(&n), "{n} rounds");
    // b sent on path 6: the answer there is polled for every round.
    send_on(&mut b, 6);
    send_on(&mut a, 6);
    assert_eq!(rounds_until_readable(&mut b, 6), 1, "a path just sent on");
    // Every path busy: every poll is full.
    for p in 0..8 {
        send_on(&mut a, p);
        assert!(rounds_until_readable(&mut b, p) <= FULL_POLL_EVERY as usize);
    }
    for p in 0..8 {
        send_on(&mut a, p);
        assert_eq!(rounds_until_readable(&mut b, p), 1, "path {p}");
    }
    // A quiet path again, announced by `poll_all_next`.
    for _ in 0..HOT_ROUNDS {
        b.readable(&mut [0u16; 8]);
    }
    send_on(&mut a, 3);
    b.poll_all_next();
    assert_eq!(rounds_until_readable(&mut b, 3), 1, "after poll_all_next");
}

#[test]
fn frag_header_round_trip_and_checks() {
    let h = FragHdr {
        index: 2,
        count: 3,
        stride: 1460,
        id: 0xDEAD_BEEF,
    };
    let mut dg = h.encode().to_vec();
    dg.extend_from_slice(&[7; 100]);
    assert_eq!(FragHdr::parse(&dg), Some((h, 2 * 1460)));
    // A middle fragment must carry exactly `stride` bytes.
    let mid = FragHdr { index: 1, ..h };
    let mut dg = mid.encode().to_vec();
    dg.extend_from_slice(&[7; 100]);
    assert_eq!(FragHdr::parse(&dg), None);
    assert_eq!(FragHdr::parse(&[FRAG_TYPE; 4]), None);
    let one = FragHdr {
        count: 1,
        index: 0,
        ..h
    };
    assert_eq!(FragHdr::parse(&one.encode()), None);
}

fn fragments_arrive_whole(gro: bool) {
    let (mut a, mut b) = pair(gro);
    let dgs = vec![
        datagram(32 * 1024 + 16, 1),
        datagram(44, 2),
        datagram(1472, 3),
        datagram(1473, 4),
        datagram(60_000, 5),
        datagram(44, 6),
        datagram(44, 7),
    ];
    let got = exchange(&mut a, &mut b, &dgs);
    assert_eq!(got, dgs);
    assert_eq!(a.stats().fragmented, 3);
    assert_eq!(b.stats().joined, 3);
    assert_eq!(b.stats().join_drops, 0);
    // On loopback a GSO send reaches a GRO socket in one piece, else in segments.
    assert_eq!(b.stats().gro_receives > 0, gro);
}

/// Paths bound over two addresses alternate between them, and each connects to the
/// peer path of the same index (on the peer's address of that index).
#[test]
fn paths_alternate_over_local_addresses() {
    let two = [LO, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))];
    let mut a = UdpPaths::bind_on(&two, 4, 0.0, 1).unwrap();
    let b = UdpPaths::bind_on(&two, 4, 0.0, 2).unwrap();
    let ips: Vec<IpAddr> = a.local_addrs().unwrap().iter().map(|x| x.ip()).collect();
    assert_eq!(ips, [two[0], two[1], two[0], two[1]]);
    let to = b.local_addrs().unwrap();
    a.connect_each(&to).unwrap();
    for (s, want) in a.socks.iter().zip(&to) {
        assert_eq!(s.peer_addr().unwrap(), *want);
    }
    assert!(a.connect_each(&to[..3]).is_err(), "path counts must match");
    assert!(UdpPaths::bind_on(&[], 4, 0.0, 1).is_err());
}

#[test]
fn fragments_arrive_whole_with_gro() {
    fragments_arrive_whole(true);
}

/// Datagrams whose payload is borrowed rather than copied into the batch (a chunk's bytes
/// sent from the send slab) arrive byte for byte, whether a datapath fragment or GSO
/// segment boundary falls in the batch part, on the seam, or in the payload.
#[test]
fn borrowed_payloads_arrive_whole_across_fragment_boundaries() {
    let (mut a, mut b) = pair(true);
    let dgs = vec![
        datagram(32 * 1024 + 16, 1),
        datagram(44, 2),
        datagram(44, 3),
        datagram(1472, 4),
        datagram(1473, 5),
        datagram(60_000, 6),
        datagram(1000, 7),
        datagram(1000, 8),
        datagram(1000, 9),
    ];
    for head in [0, 1, 12, 13, 1459, 1460, 1461, 3000] {
        let got = exchange_split(&mut a, &mut b, &dgs, |_| head);
        assert_eq!(got, dgs, "head {head}");
    }
    assert_eq!(b.stats().join_drops, 0);
}

#[test]
fn fragments_arrive_whole_without_gro() {
    fragments_arrive_whole(false);
}

#[test]
fn slow_join_handles_reordering_and_loss() {
    let (mut a, _b) = pair(true);
    let dg = datagram(5000, 9);
    let (stride, count) = a.frag_plan(dg.len()).unwrap();
    assert_eq!(count, dg.len().div_ceil(stride));
    let frag = |k: usize, id: u32| {
        let mut f = FragHdr {
            index: k as u8,
            count: count as u8,
            stride: stride as u16,
            id,
        }
        .encode()
        .to_vec();
        f.extend_from_slice(&dg[k * stride..((k + 1) * stride).min(dg.len())]);
        f
    };
    let mut rx = RxBatch::new();
    let feed = |a: &mut UdpPaths, rx: &mut RxBatch, f: Vec<u8>| {
        rx.buf[..f.len()].copy_from_slice(&f);
        a.join_one(0, rx, 0, f.len());
    };
    // Out of order: joined once the last one is in.
    for k in (0..count).rev() {
        feed(&mut a, &mut rx, frag(k, 1));
    }
    assert_eq!(rx.len(), 1);
    assert_eq!(rx.get(0), &dg[..]);
    // A datagram missing a fragment is given up when the next one starts.
    feed(&mut a, &mut rx, frag(0, 2));
    for k in 0..count {
        feed(&mut a, &mut rx, frag(k, 3));
    }
    assert_eq!(rx.len(), 2);
    assert_eq!(rx.get(1), &dg[..]);
    assert_eq!(a.stats().join_drops, 1);
}
