//! The multipath link's deferred sends (`async_copy`): outgoing frames copied into their send
//! slots on the copy threads while the sender goes on, queued in order once copied. Its own
//! test binary, since the copy threads are process-wide.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use ccl_transports::mpt_link::{MptLink, MptLinkConfig};
use ccl_transports::Link;

mod frames;
use frames::{exchange_frames, frames_of_every_shape, link_pair, pattern, small_link};

fn pair(engines: usize, drop_rate: f64) -> (MptLink, MptLink) {
    ccl_transports::par::configure(2, 4096);
    link_pair(MptLinkConfig {
        async_copy: true,
        ..small_link(engines, drop_rate)
    })
}

/// Frames of every shape (split over the engines, whole on one, tiny) sent deferred and plain
/// in turn from both sides at once arrive intact and in order, with and without loss; the
/// sender's buffers are left alone until the link has nothing pending.
#[test]
fn deferred_sends_arrive_intact_and_in_order() {
    for (engines, drop_rate) in [(2, 0.0), (3, 0.01), (4, 0.0)] {
        let (mut a, mut b) = pair(engines, drop_rate);
        let frames = frames_of_every_shape();
        exchange_frames(&mut a, &mut b, &frames, true);
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
