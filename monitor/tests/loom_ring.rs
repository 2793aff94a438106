//! The ring under loom's model checker: every interleaving of one producer and one consumer.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ccl-monitor --release --test loom_ring`.
#![cfg(loom)]

use ccl_monitor::ring;

/// Three pushes into a ring of two against concurrent pops: what is popped is in order and
/// without duplicates, and popped plus dropped plus left accounts for every push.
#[test]
fn spsc_ring_loses_nothing_uncounted() {
    loom::model(|| {
        let (mut p, mut c) = ring::channel::<u32>(2);
        let producer = loom::thread::spawn(move || {
            let kept: Vec<u32> = (1..=3).filter(|&v| p.push(v)).collect();
            (kept, p)
        });
        let mut got = Vec::new();
        for _ in 0..2 {
            if let Some(v) = c.pop() {
                got.push(v);
            }
        }
        let (kept, _p) = producer.join().unwrap();
        while let Some(v) = c.pop() {
            got.push(v);
        }
        assert_eq!(got, kept);
        assert_eq!(got.len() as u64 + c.dropped(), 3);
    });
}

/// Wrap-around: the consumer frees slots while the producer refills them.
#[test]
fn spsc_ring_wraps_safely() {
    loom::model(|| {
        let (mut p, mut c) = ring::channel::<u32>(2);
        let producer = loom::thread::spawn(move || {
            for v in 0..4 {
                while !p.push(v) {
                    loom::thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 4 {
            match c.pop() {
                Some(v) => got.push(v),
                None => loom::thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [0, 1, 2, 3]);
    });
}
