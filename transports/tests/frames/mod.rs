//! Test frame contents and the two-way exchange shared by the link tests (apart from
//! `support`, which installs a counting allocator in the binaries that include it).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ccl_transports::mpt_link::{MptEndpoint, MptLink, MptLinkConfig};
use ccl_transports::{Link, PIECE_ALIGN};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Small links for the send-path tests: `engines` engines of 4 paths, 1 MiB frames, 4
/// messages in flight, `drop_rate` injected loss.
#[allow(dead_code)] // a shared test module: not every test binary uses every helper
pub fn small_link(engines: usize, drop_rate: f64) -> MptLinkConfig {
    MptLinkConfig {
        engines,
        paths: 4,
        max_frame: 1 << 20,
        slots: 4,
        drop_rate,
        ..MptLinkConfig::default()
    }
}

/// Two connected links over loopback with settings `cfg` (the first side's seed differs, so
/// the sides drop different datagrams).
pub fn link_pair(cfg: MptLinkConfig) -> (MptLink, MptLink) {
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

/// `len` pseudo-random bytes from `salt` (xorshift): different frames differ everywhere, so a
/// misplaced or mixed-up piece shows.
pub fn pattern(len: usize, salt: u64) -> Vec<u8> {
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

/// Sends `frames` from each side to the other at once until every frame arrived intact, in
/// order, exactly once, and nothing is pending (a frame may arrive in pieces: every piece but
/// its last a multiple of `PIECE_ALIGN`). `deferred`: every frame but each third goes with
/// `try_send_deferred` (the others with `try_send`); else all with `try_send`.
pub fn exchange_frames(a: &mut MptLink, b: &mut MptLink, frames: &[Vec<u8>], deferred: bool) {
    let mut sent = [0usize; 2];
    let mut got = [0usize; 2];
    let mut partial: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
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
                let ok = if deferred && sent[side] % 3 != 2 {
                    // SAFETY: `frames` outlives the loop, which ends only once nothing is
                    // pending, and is not written meanwhile.
                    unsafe { tx.try_send_deferred(f) }.unwrap()
                } else {
                    tx.try_send(f).unwrap()
                };
                if !ok {
                    break;
                }
                sent[side] += 1;
            }
            tx.flush().unwrap();
            while let Some(f) = rx.peek().unwrap() {
                assert!(
                    got[side] < frames.len(),
                    "side {side}: a frame beyond the last"
                );
                let want = &frames[got[side]];
                let part = &mut partial[side];
                let piece = f.len();
                part.extend_from_slice(f);
                assert!(part.len() <= want.len(), "frame {} too long", got[side]);
                rx.pop();
                if part.len() < want.len() {
                    assert_eq!(piece % PIECE_ALIGN, 0, "frame {} piece length", got[side]);
                    continue;
                }
                assert!(part[..] == want[..], "frame {} content", got[side]);
                part.clear();
                got[side] += 1;
            }
        }
    }
    // Exactly once: nothing further arrives after the last frame, even given time.
    std::thread::sleep(Duration::from_millis(20));
    assert!(a.peek().unwrap().is_none(), "a: a frame after the last");
    assert!(b.peek().unwrap().is_none(), "b: a frame after the last");
}

/// 40 frames of 1 MiB links' every shape (split over several engines, whole on one, tiny),
/// each of its own pattern.
#[allow(dead_code)] // a shared test module: not every test binary uses every helper
pub fn frames_of_every_shape() -> Vec<Vec<u8>> {
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
    (0..40)
        .map(|i| pattern(sizes[i % sizes.len()], i as u64))
        .collect()
}
