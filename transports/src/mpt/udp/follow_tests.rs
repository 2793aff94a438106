//! The rule a loose path follows, and loose, adopting and rebound path sockets on loopback.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::mpt::frame::{DataFrame, Frame, ProbeFrame};
use crate::mpt::header::ChunkHeader;

use super::super::batch::{RxBatch, TxBatch};
use super::super::frag::{FragHdr, FRAG_HDR};
use super::super::paths::UdpPaths;
use super::{verdict, Verdict};

const FID: u16 = 0x2A5;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

fn probe(flow: u16) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    Frame::Probe(ProbeFrame { flow }).encode(&mut b).unwrap();
    b
}

fn data(flow: u16, payload: usize) -> Vec<u8> {
    let mut b = vec![0u8; 16 + payload];
    Frame::Data(DataFrame {
        header: ChunkHeader::new(true, 3, 1, flow).unwrap(),
        seq_hi: Some(0),
        offset: 0,
        len: payload as u32,
    })
    .encode(&mut b)
    .unwrap();
    b
}

/// From the known peer anything is taken; from elsewhere only a frame for this connection
/// (a probe, a data chunk, the first fragment of a chunk), never one for another flow, a
/// fragment that carries no header, or bytes that are no frame.
#[test]
fn a_loose_path_adopts_a_new_sender_only_for_its_own_flow() {
    let peer: SocketAddr = "127.0.0.2:4000".parse().unwrap();
    let moved: SocketAddr = "127.0.0.3:4000".parse().unwrap();
    let v = |src, head: &[u8]| verdict(Some(peer), src, head, FID);
    assert_eq!(v(peer, &probe(FID)), Verdict::Known);
    assert_eq!(v(peer, &probe(FID + 1)), Verdict::Known);
    assert_eq!(v(peer, b"junk"), Verdict::Known);
    assert_eq!(v(moved, &probe(FID)), Verdict::Adopt);
    assert_eq!(v(moved, &data(FID, 100)[..64]), Verdict::Adopt);
    assert_eq!(v(moved, &probe(FID + 1)), Verdict::Drop);
    assert_eq!(v(moved, &data(FID ^ 1, 100)[..64]), Verdict::Drop);
    assert_eq!(v(moved, b"junk"), Verdict::Drop);
    assert_eq!(v(moved, &[]), Verdict::Drop);
    // A probe cut short is no frame.
    assert_eq!(v(moved, &probe(FID)[..6]), Verdict::Drop);
    let frag = |index: u8, inner: &[u8]| {
        let h = FragHdr {
            index,
            count: 2,
            stride: 1400,
            id: 9,
        };
        [&h.encode()[..], inner].concat()
    };
    assert_eq!(v(moved, &frag(0, &data(FID, 40))), Verdict::Adopt);
    assert_eq!(v(moved, &frag(0, &data(FID + 2, 40))), Verdict::Drop);
    assert_eq!(v(moved, &frag(1, &data(FID, 40))), Verdict::Drop);
    assert_eq!(frag(1, &[]).len(), FRAG_HDR);
    // A path that never connected knows no peer: only its own flow is taken.
    assert_eq!(verdict(None, moved, &probe(FID), FID), Verdict::Adopt);
    assert_eq!(verdict(None, moved, &probe(7), FID), Verdict::Drop);
}

/// Two connected two-path endpoints, path 0 on 127.0.0.1 and path 1 on 127.0.0.2.
fn pair() -> (UdpPaths, UdpPaths) {
    let ips = [ip(1), ip(2)];
    let mut a = UdpPaths::bind_on(&ips, 2, 0.0, 1).unwrap();
    let mut b = UdpPaths::bind_on(&ips, 2, 0.0, 2).unwrap();
    let (la, lb) = (a.local_addrs().unwrap(), b.local_addrs().unwrap());
    a.connect_each(&lb).unwrap();
    b.connect_each(&la).unwrap();
    (a, b)
}

fn send(u: &mut UdpPaths, path: u16, dg: &[u8]) {
    let mut tx = TxBatch::new();
    tx.slot().unwrap()[..dg.len()].copy_from_slice(dg);
    tx.commit(path, dg.len());
    u.send_batch(&mut tx).unwrap();
}

/// What path `path` of `u` receives within `wait` (admitting first if it is loose).
fn receive(u: &mut UdpPaths, path: usize, wait: Duration) -> Vec<Vec<u8>> {
    let mut rx = RxBatch::new();
    let mut got = Vec::new();
    let end = Instant::now() + wait;
    while Instant::now() < end {
        if u.admit(path, FID).unwrap() {
            u.recv_batch(path, &mut rx).unwrap();
            got.extend((0..rx.len()).map(|i| rx.get(i).to_vec()));
        }
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

/// A connected (healthy) path takes nothing from a stranger, even for its own flow, and
/// keeps its peer. Loose, it keeps its port, still sends to its old peer, drops a
/// stranger's frame for another flow, and takes one for its own from a new address: the
/// datagram is received and the path answers there, connected again.
#[test]
fn only_a_loose_path_follows_its_peer_to_a_new_address() {
    let (mut a, mut b) = pair();
    let stranger = UdpSocket::bind((ip(3), 0)).unwrap();
    let b0 = b.local_addrs().unwrap()[0];
    let a0 = a.local_addrs().unwrap()[0];
    stranger.send_to(&probe(FID), b0).unwrap();
    assert!(receive(&mut b, 0, Duration::from_millis(50)).is_empty());
    assert_eq!(b.peer(0), Some(a0));
    assert!(!b.is_loose(0));

    b.loosen(0).unwrap();
    assert!(b.is_loose(0));
    assert_eq!(
        b.local_addrs().unwrap()[0],
        b0,
        "a loose path keeps its port"
    );
    send(&mut b, 0, b"to the old peer");
    assert_eq!(
        receive(&mut a, 0, Duration::from_secs(2)),
        [b"to the old peer"]
    );

    stranger.send_to(&probe(FID + 1), b0).unwrap();
    stranger.send_to(&probe(FID), b0).unwrap();
    assert_eq!(receive(&mut b, 0, Duration::from_secs(2)), [probe(FID)]);
    assert_eq!(b.stats().strangers, 1);
    assert_eq!(b.stats().loosened, 1);
    assert_eq!(b.stats().peers_moved, 1);
    let moved = stranger.local_addr().unwrap();
    assert_eq!(b.peer(0), Some(moved));
    assert!(!b.is_loose(0));
    send(&mut b, 0, b"to the new address");
    stranger
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = stranger.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"to the new address"[..], b0));
    // Connected again: the old peer is filtered out now.
    send(&mut a, 0, &probe(FID));
    assert!(receive(&mut b, 0, Duration::from_millis(50)).is_empty());
    // Path 1 never moved.
    assert_eq!(b.peer(1), Some(a.local_addrs().unwrap()[1]));
}

/// A path rebound on a new local address keeps its descriptor number and (when free) its
/// port, and reaches the same peer path from there; the peer's loose path follows, from
/// the known address back to the new one. A rebind that cannot bind changes nothing.
#[test]
fn a_rebound_path_reaches_its_peer_from_the_new_address() {
    let (mut a, mut b) = pair();
    let fd = a.fds()[1];
    let old = a.local_addrs().unwrap()[1];
    // An address no interface holds (the NIC's new one, not up yet): nothing changes.
    assert!(a.rebind(1, "192.0.2.1".parse().unwrap()).is_err());
    assert_eq!(a.local_addrs().unwrap()[1], old);
    assert_eq!(a.peer(1), Some(b.local_addrs().unwrap()[1]));
    assert!(!a.is_loose(1));
    let at = a.rebind(1, ip(3)).unwrap();
    assert_eq!(at, SocketAddr::new(ip(3), old.port()));
    assert_eq!(a.local_addrs().unwrap()[1], at);
    assert_eq!(a.fds()[1], fd);
    assert_eq!(a.fds()[1], a.socks[1].as_raw_fd());
    b.loosen(1).unwrap();
    send(&mut a, 1, &probe(FID));
    assert_eq!(receive(&mut b, 1, Duration::from_secs(2)), [probe(FID)]);
    assert_eq!(b.peer(1), Some(at));
    send(&mut b, 1, b"back");
    assert_eq!(receive(&mut a, 1, Duration::from_secs(2)), [b"back"]);
}
