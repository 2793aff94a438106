//! The core allocates nothing per chunk once a connection is built: a whole transfer in the
//! steady state runs under a counting allocator and must count zero.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use ccl_transports::mpt::{CcKind, Connection, Instant, MptConfig, Transmit};

mod support;

/// Moves one message of `len` bytes from `a` to `b` over a lossless in-test wire with
/// pre-sized buffers (every 7th data frame is dropped when `lossy`, to exercise recovery).
fn transfer(
    a: &mut Connection,
    b: &mut Connection,
    now: &mut Instant,
    wire: &mut Vec<Transmit>,
    send: &[u8],
    recv: &mut [u8],
    lossy: bool,
) {
    b.post_recv(*now, recv.len() as u64, 0).unwrap();
    a.send(*now, send.len() as u64, 0).unwrap();
    let (mut got_send, mut got_recv) = (false, false);
    let mut n = 0u64;
    while !(got_send && got_recv) {
        wire.clear();
        while let Some(t) = a.poll_transmit(*now) {
            wire.push(t);
        }
        for t in wire.iter() {
            n += 1;
            if lossy && t.payload.is_some() && n % 7 == 0 {
                continue;
            }
            let payload = t.payload.map_or(&[][..], |p| {
                &send[p.offset as usize..p.offset as usize + p.len as usize]
            });
            if let Some(p) = b.handle_frame(*now, t.path, t.frame, payload).unwrap() {
                recv[p.offset as usize..p.offset as usize + p.payload.len()]
                    .copy_from_slice(p.payload);
            }
        }
        wire.clear();
        while let Some(t) = b.poll_transmit(*now) {
            wire.push(t);
        }
        for t in wire.iter() {
            a.handle_frame(*now, t.path, t.frame, &[]).unwrap();
        }
        while let Some(e) = a.poll_event() {
            got_send |= matches!(e, ccl_transports::mpt::Event::SendComplete { .. });
        }
        while let Some(e) = b.poll_event() {
            got_recv |= matches!(e, ccl_transports::mpt::Event::RecvComplete { .. });
        }
        *now = *now + std::time::Duration::from_micros(10);
        for c in [&mut *a, &mut *b] {
            if c.poll_timeout().is_some_and(|t| t <= *now) {
                c.handle_timeout(*now);
            }
        }
    }
}

#[test]
fn steady_state_allocates_nothing() {
    for cc in [CcKind::Cubic, CcKind::Swift, CcKind::Eqds, CcKind::None] {
        let cfg = MptConfig {
            cc,
            ..MptConfig::default()
        };
        let mut a = Connection::new(cfg.clone(), 1, 2).unwrap();
        let mut b = Connection::new(cfg, 2, 1).unwrap();
        let send: Vec<u8> = (0..8 << 20).map(|i| (i % 253) as u8).collect();
        let mut recv = vec![0u8; send.len()];
        let mut wire = Vec::with_capacity(4096);
        let mut now = Instant::ZERO;
        // Warm-up transfer: fills every queue to its working size.
        transfer(&mut a, &mut b, &mut now, &mut wire, &send, &mut recv, true);
        recv.fill(0);
        let ((), allocs) = support::allocations(true, || {
            transfer(&mut a, &mut b, &mut now, &mut wire, &send, &mut recv, true)
        });
        assert_eq!(allocs, 0, "{cc}: {allocs} allocations for 256 chunks");
        assert!(recv == send);
        assert!(a.stats().chunks_retransmitted > 0);
    }
}

#[test]
fn the_counter_counts() {
    let (v, allocs) =
        support::allocations(true, || Vec::<u64>::with_capacity(std::hint::black_box(16)));
    drop(v);
    assert!(allocs >= 1);
}
