//! The multipath link's borrowed sends (`zero_copy`): frames handed over with
//! `try_send_deferred` are never copied into send slots; the engines send and resend them from
//! the sender's memory until they are acknowledged, and `quiesce` copies whatever is still
//! unacknowledged into the slots so the sender may reuse its memory.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::time::{Duration, Instant};

use ccl_transports::mpt_link::{MptLink, MptLinkConfig};
use ccl_transports::Link;

mod frames;
use frames::{exchange_frames, frames_of_every_shape, link_pair, pattern, small_link};

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
