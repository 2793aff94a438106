//! The multipath link's borrowed sends (`zero_copy`): frames handed over with
//! `try_send_deferred` are never copied into send slots; the engines send and resend them from
//! the sender's memory until they are acknowledged, and `quiesce` copies whatever is still
//! unacknowledged into the slots so the sender may reuse its memory.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

mod frames;
use frames::pattern;

fn pair(engines: usize, drop_rate: f64) -> (MptLink, MptLink) {
    let cfg = MptLinkConfig {
        engines,
        paths: 4,
        max_frame: 1 << 20,
        slots: 4,
        drop_rate,
        zero_copy: true,
        ..MptLinkConfig::default()
    };
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

/// Runs both directions until every frame of `frames` arrived at the other side, in order and
/// equal to `want`; every third frame is sent copied, the others borrowed.
fn exchange(a: &mut MptLink, b: &mut MptLink, frames: &[Vec<u8>], want: &[Vec<u8>]) {
    let mut sent = [0usize; 2];
    let mut got = [0usize; 2];
    let mut partial = [Vec::new(), Vec::new()];
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
            while sent[side] < frames.len() {
                let f = &frames[sent[side]];
                let ok = if sent[side] % 3 == 2 {
                    tx.try_send(f).unwrap()
                } else {
                    // SAFETY: `frames` outlives the loop, which ends only once nothing is
                    // pending, and is not written meanwhile.
                    unsafe { tx.try_send_deferred(f) }.unwrap()
                };
                if !ok {
                    break;
                }
                sent[side] += 1;
            }
            tx.flush().unwrap();
            while let Some(p) = rx.peek().unwrap() {
                partial[side].extend_from_slice(p);
                rx.pop();
                let w = &want[got[side]];
                assert!(
                    partial[side].len() <= w.len(),
                    "frame {} too long",
                    got[side]
                );
                if partial[side].len() == w.len() {
                    assert!(partial[side] == *w, "frame {} differs", got[side]);
                    partial[side].clear();
                    got[side] += 1;
                }
            }
        }
    }
}

/// Frames of every shape (split over the engines, whole on one, tiny), borrowed and copied in
/// turn, from both sides at once, one to four engines, with and without loss (so chunks are
/// resent from the sender's memory): all arrive intact and in order.
#[test]
fn borrowed_sends_arrive_intact_and_in_order() {
    for (engines, drop_rate) in [(1, 0.0), (1, 0.02), (2, 0.0), (3, 0.02), (4, 0.0)] {
        let (mut a, mut b) = pair(engines, drop_rate);
        let sizes = [
            1 << 20,
            (1 << 20) - 7,
            300_000,
            262_144,
            1,
            64,
            700_001,
            5000,
        ];
        let frames: Vec<Vec<u8>> = (0..40)
            .map(|i| pattern(sizes[i % sizes.len()], i as u64))
            .collect();
        exchange(&mut a, &mut b, &frames, &frames);
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
