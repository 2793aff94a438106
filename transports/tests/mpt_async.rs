//! The multipath link's deferred sends (`async_copy`): outgoing frames copied into their send
//! slots on the copy threads while the sender goes on, queued in order once copied. Its own
//! test binary, since the copy threads are process-wide.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::Link;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

mod frames;
use frames::pattern;

fn pair(engines: usize, drop_rate: f64) -> (MptLink, MptLink) {
    ccl_transports::par::configure(2, 4096);
    let cfg = MptLinkConfig {
        engines,
        paths: 4,
        max_frame: 1 << 20,
        slots: 4,
        drop_rate,
        async_copy: true,
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

/// Frames of every shape (split over the engines, whole on one, tiny) sent deferred and plain
/// in turn from both sides at once arrive intact and in order, with and without loss; the
/// sender's buffers are left alone until the link has nothing pending.
#[test]
fn deferred_sends_arrive_intact_and_in_order() {
    for (engines, drop_rate) in [(2, 0.0), (3, 0.01), (4, 0.0)] {
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
                    (&mut a, &mut b)
                } else {
                    (&mut b, &mut a)
                };
                while sent[side] < frames.len() {
                    let f = &frames[sent[side]];
                    let ok = if sent[side] % 3 == 2 {
                        tx.try_send(f).unwrap()
                    } else {
                        // SAFETY: `frames` outlives the loop, which ends only once nothing
                        // is pending, and is never written.
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
                    let want = &frames[got[side]];
                    assert!(
                        partial[side].len() <= want.len(),
                        "frame {} too long",
                        got[side]
                    );
                    if partial[side].len() == want.len() {
                        assert!(partial[side] == *want, "frame {} differs", got[side]);
                        partial[side].clear();
                        got[side] += 1;
                    }
                }
            }
        }
    }
}

/// A link dropped (or quiesced) with copies still running waits for them: the frames' bytes
/// are read and the slots written only while both exist.
#[test]
fn quiesce_and_drop_wait_for_running_copies() {
    let (mut a, b) = pair(2, 0.0);
    let frames: Vec<Vec<u8>> = (0..4).map(|i| pattern(1 << 20, i)).collect();
    for f in &frames {
        // SAFETY: `frames` outlives `a` (dropped below, which waits for the copies).
        assert!(unsafe { a.try_send_deferred(f) }.unwrap());
    }
    a.quiesce();
    drop(a);
    drop(b);
    drop(frames);
}
