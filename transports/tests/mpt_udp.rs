//! The mpt UDP datapath on loopback: two `MptLink`s in one process exchange frames of
//! 0 B .. 4 MiB both ways, intact and in order, with and without injected loss.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ccl_transports::mpt::CcKind;
use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn pair(cfg: MptLinkConfig) -> (MptLink, MptLink) {
    let mut ca = cfg.clone();
    ca.seed ^= 1;
    let a = MptEndpoint::bind(LO, ca).unwrap();
    let b = MptEndpoint::bind(LO, cfg).unwrap();
    let (ha, hb) = (a.hello().unwrap(), b.hello().unwrap());
    (
        a.connect(LO, &hb, None).unwrap(),
        b.connect(LO, &ha, None).unwrap(),
    )
}

fn pattern(len: usize, salt: u64) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `sizes` from each side to the other at once, checking every frame on arrival.
fn exchange(a: &mut MptLink, b: &mut MptLink, sizes: &[usize]) {
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u64))
        .collect();
    let mut sent = [0usize; 2];
    let mut got = [0usize; 2];
    let deadline = Instant::now() + Duration::from_secs(120);
    while got != [frames.len(); 2] || a.has_pending() || b.has_pending() {
        assert!(
            Instant::now() < deadline,
            "stalled: sent {sent:?} got {got:?}"
        );
        for side in 0..2 {
            let (tx, rx): (&mut MptLink, &mut MptLink) = if side == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while sent[side] < frames.len() && tx.try_send(&frames[sent[side]]).unwrap() {
                sent[side] += 1;
            }
            tx.flush().unwrap();
            while let Some(f) = rx.peek().unwrap() {
                let want = &frames[got[side]];
                assert_eq!(f.len(), want.len(), "frame {} length", got[side]);
                assert!(f == &want[..], "frame {} content", got[side]);
                rx.pop();
                got[side] += 1;
            }
        }
    }
}

fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 7, 100, 8191, 8192, 32 * 1024, 32 * 1024 + 1, 300_000];
    v.extend([1 << 20, (4 << 20) - 3, 4 << 20]);
    v.extend((0..24).map(|i| (i * 37_311) % (1 << 20)));
    v
}

fn cfg(drop_rate: f64, paths: u16) -> MptLinkConfig {
    MptLinkConfig {
        paths,
        max_frame: 4 << 20,
        slots: 4,
        drop_rate,
        ..MptLinkConfig::default()
    }
}

#[test]
fn frames_cross_intact_without_loss() {
    let (mut a, mut b) = pair(cfg(0.0, 8));
    exchange(&mut a, &mut b, &sizes());
    assert_eq!(a.injected_drops(), 0);
}

#[test]
fn frames_cross_intact_with_one_percent_loss() {
    let (mut a, mut b) = pair(cfg(0.01, 8));
    exchange(&mut a, &mut b, &sizes());
    assert!(a.injected_drops() + b.injected_drops() > 0);
    assert!(a.retransmits() + b.retransmits() > 0);
}

#[test]
fn frames_cross_intact_with_five_percent_loss_one_path_swift() {
    let mut c = cfg(0.05, 1);
    c.cc = CcKind::Swift;
    c.max_frame = 1 << 20;
    let (mut a, mut b) = pair(c);
    let s: Vec<usize> = sizes().into_iter().filter(|&n| n <= 1 << 20).collect();
    exchange(&mut a, &mut b, &s);
}

#[test]
fn many_small_frames_and_full_link_backpressure() {
    let mut c = cfg(0.0, 4);
    c.max_frame = 64 * 1024;
    c.slots = 16;
    let (mut a, mut b) = pair(c);
    // Fill one direction without draining: the link must refuse beyond `slots` messages.
    let mut n = 0;
    while a.try_send(&[n as u8; 100]).unwrap() {
        n += 1;
        assert!(n <= 16, "link accepted more than its slots");
    }
    assert!(n >= 1);
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < n {
        assert!(Instant::now() < deadline);
        if let Some(f) = b.peek().unwrap() {
            assert_eq!(f, &[got as u8; 100][..]);
            b.pop();
            got += 1;
        }
    }
    let s: Vec<usize> = (0..500).map(|i| i % 300).collect();
    exchange(&mut a, &mut b, &s);
}

#[test]
fn over_tcp_hello() {
    let l = TcpListener::bind((LO, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        MptLink::over_tcp(s, cfg(0.0, 3)).unwrap()
    });
    let mut a = MptLink::over_tcp(TcpStream::connect(addr).unwrap(), cfg(0.0, 3)).unwrap();
    let mut b = t.join().unwrap();
    assert_eq!(a.kind(), "mpt");
    exchange(&mut a, &mut b, &[0, 5, 70_000, 1 << 20]);
}

#[test]
fn mismatched_path_counts_are_refused() {
    let l = TcpListener::bind((LO, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        MptLink::over_tcp(s, cfg(0.0, 2)).is_err()
    });
    let r = MptLink::over_tcp(TcpStream::connect(addr).unwrap(), cfg(0.0, 3));
    assert!(r.is_err());
    assert!(t.join().unwrap());
}
