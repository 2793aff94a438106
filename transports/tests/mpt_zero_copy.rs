//! The multipath link's borrowed sends (`zero_copy`): frames handed over with
//! `try_send_deferred` are never copied into send slots; the engines send and resend them from
//! the sender's memory until they are acknowledged, and `quiesce` copies whatever is still
//! unacknowledged into the slots so the sender may reuse its memory.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::time::{Duration, Instant};

use std::net::{IpAddr, Ipv4Addr};

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

mod frames;
use frames::{exchange_frames, frames_of_every_shape, link_pair, pattern, small_link};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn pair(engines: usize, drop_rate: f64) -> (MptLink, MptLink) {
    link_pair(MptLinkConfig {
        zero_copy: true,
        ..small_link(engines, drop_rate)
    })
}

/// Frames of every shape (split over the engines, whole on one, tiny), borrowed and copied in
/// turn, from both sides at once, one to four engines, with and without loss (so chunks are
/// resent from the sender's memory): all arrive intact and in order.
#[test]
fn borrowed_sends_arrive_intact_and_in_order() {
    for (engines, drop_rate) in [(1, 0.0), (1, 0.02), (2, 0.0), (3, 0.02), (4, 0.0)] {
        let (mut a, mut b) = pair(engines, drop_rate);
        let frames = frames_of_every_shape();
        exchange_frames(&mut a, &mut b, &frames, true);
        assert_eq!(a.messages_per_engine().len(), engines);
    }
}

/// `quiesce` right after borrowed sends (most of their chunks not even sent yet), then the
/// sender overwrites its buffers: the peer still receives the bytes as they were when sent.
/// Without the copy into the slots at `quiesce` the overwritten bytes would go out.
#[test]
fn quiesce_copies_unacknowledged_borrowed_frames() {
    for (engines, drop_rate) in [(1, 0.0), (3, 0.0), (2, 0.05)] {
        let (mut a, mut b) = pair(engines, drop_rate);
        let want: Vec<Vec<u8>> = (0..4).map(|i| pattern(1 << 20, 100 + i)).collect();
        let mut bufs = want.clone();
        for f in &bufs {
            // SAFETY: `bufs` is written only after `quiesce` below.
            assert!(unsafe { a.try_send_deferred(f) }.unwrap());
        }
        a.quiesce();
        for f in bufs.iter_mut() {
            f.fill(0xEE);
        }
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < 4 << 20 {
            assert!(Instant::now() < deadline, "stalled at {} bytes", got.len());
            a.flush().unwrap();
            while let Some(p) = b.peek().unwrap() {
                got.extend_from_slice(p);
                b.pop();
            }
        }
        assert!(
            got == want.concat(),
            "{engines} engines: the peer got changed bytes"
        );
        while a.has_pending() {
            assert!(Instant::now() < deadline, "never acknowledged");
            a.flush().unwrap();
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Sends `frame` (borrowed or copied) and drives the link until the send is complete or
/// `wait` has passed; returns whether it completed.
fn completes(a: &mut MptLink, frame: &[u8], borrowed: bool, wait: Duration) -> bool {
    let sent = if borrowed {
        // SAFETY: the caller keeps `frame` unchanged until the link is dropped (it is
        // dropped before the frame in every caller).
        unsafe { a.try_send_deferred(frame) }.unwrap()
    } else {
        a.try_send(frame).unwrap()
    };
    assert!(sent);
    let deadline = Instant::now() + wait;
    while a.has_pending() {
        if Instant::now() >= deadline {
            return false;
        }
        a.flush().unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    true
}

/// Whether the peer confirms everything sent within `wait`.
fn confirmed(a: &mut MptLink, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while a.unconfirmed() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    true
}

/// A copied frame completes once it has left, without its acknowledgement (its slot keeps it
/// for resending): with every datagram lost it still completes, and stays unconfirmed --
/// what a communicator being destroyed waits for. A borrowed frame completes only once
/// acknowledged: never, when every datagram is lost.
#[test]
fn copied_frames_complete_on_leaving_borrowed_ones_on_acknowledgement() {
    for engines in [1, 3] {
        for drop_rate in [0.0, 1.0] {
            let lossless = drop_rate == 0.0;
            let mut cfg = small_link(engines, 0.0);
            cfg.zero_copy = true;
            let rx = MptEndpoint::bind(LO, cfg.clone()).unwrap();
            cfg.drop_rate = drop_rate;
            cfg.seed ^= 1;
            let tx = MptEndpoint::bind(LO, cfg).unwrap();
            let (ht, hr) = (tx.hello().unwrap(), rx.hello().unwrap());
            let small = pattern(100, 7);
            let big = pattern(1 << 20, 8);
            let mut a = tx.connect(LO, &hr, None).unwrap();
            // Never polled: its engine threads receive and acknowledge.
            let _b = rx.connect(LO, &ht, None).unwrap();
            let what = format!("{engines} engines, drop {drop_rate}");
            assert!(
                completes(&mut a, &small, false, Duration::from_secs(10)),
                "{what}: copied"
            );
            assert_eq!(
                confirmed(&mut a, Duration::from_millis(300)),
                lossless,
                "{what}"
            );
            assert_eq!(
                completes(&mut a, &big, true, Duration::from_millis(300)),
                lossless,
                "{what}: borrowed"
            );
            if lossless {
                assert!(!a.unconfirmed(), "{what}");
            }
            drop(a);
        }
    }
}
