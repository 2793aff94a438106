//! Arbitrary (seeded) message sequences, as a faulty or malicious peer might send: the
//! machines report violations as errors, never panic, and keep their invariants.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ccl_faulttol::{LinkRole, Message, ReceiverConn, SenderConn};
use common::{test_config, us, Rng};

fn arbitrary(rng: &mut Rng) -> (LinkRole, Message) {
    let link = match rng.next_u64() % 2 {
        0 => LinkRole::Primary,
        _ => LinkRole::Backup,
    };
    let small = |rng: &mut Rng| rng.next_u64() % 2048;
    let epoch = (rng.next_u64() % 4) as u32;
    let msg = match rng.next_u64() % 8 {
        0 => Message::Cts { posted: small(rng) },
        1 => Message::Data {
            epoch,
            offset: small(rng) / 256 * 256,
            len: 256,
        },
        2 => Message::Commit {
            epoch,
            offset: small(rng) / 256 * 256,
        },
        3 => Message::Ack {
            epoch,
            done: small(rng),
        },
        4 => Message::RollbackRequest { epoch },
        5 => Message::Rollback {
            epoch,
            done: small(rng),
            posted: small(rng),
        },
        6 => Message::Probe {
            seq: small(rng) % 8,
        },
        _ => Message::ProbeAnswer {
            seq: small(rng) % 8,
        },
    };
    (link, msg)
}

#[test]
fn arbitrary_messages_never_break_the_ledgers() {
    for seed in 0..200 {
        let mut rng = Rng::new(seed);
        let mut s = SenderConn::new(1, (1, 2), test_config(), 256).unwrap();
        let mut r = ReceiverConn::new(1, (3, 4), test_config()).unwrap();
        s.post(Duration::ZERO, 1024);
        r.post(Duration::ZERO, 1024);
        let mut now = Duration::ZERO;
        for _ in 0..300 {
            now += us(rng.next_u64() % 3000);
            let (link, msg) = arbitrary(&mut rng);
            let _ = s.handle_message(now, link, msg);
            let _ = r.handle_message(now, link, msg);
            s.handle_timeout(now);
            r.handle_timeout(now);
            while s.poll_transmit(now).is_some() {}
            while r.poll_transmit(now).is_some() {}
            let l = s.ledger();
            assert!(l.acked() <= l.transmitted(), "seed {seed}");
            assert!(l.transmitted() <= l.posted().min(l.credit()), "seed {seed}");
            let l = r.ledger();
            assert!(
                l.done() <= l.received() && l.received() <= l.posted(),
                "seed {seed}"
            );
        }
    }
}
