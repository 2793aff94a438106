//! The multipath link reports to the throughput monitor once one is attached: a post per
//! chunk it transmits, a completion per chunk acknowledged (or lost), under the peer, path
//! and NIC keys; with none attached it reports nothing.

#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use ccl_monitor::{Key, Monitor, MonitorConfig};
use ccl_transports::{Link, LinkMonitor};

mod frames;
use frames::{exchange_frames, link_pair, pattern, small_link};

fn monitor() -> Monitor {
    Monitor::new(&MonitorConfig {
        enabled: true,
        ..MonitorConfig::default()
    })
    .unwrap()
}

#[test]
fn chunks_are_posted_and_completed_under_peer_path_and_nic() {
    for (engines, drop_rate) in [(1, 0.0), (2, 0.02)] {
        let m = monitor();
        let (mut a, mut b) = link_pair(small_link(engines, drop_rate));
        a.attach_monitor(&LinkMonitor {
            publisher: m.publisher(),
            peer: 1,
            comm: 7,
        });
        let frames: Vec<Vec<u8>> = (0..8).map(|i| pattern(200_000, i)).collect();
        exchange_frames(&mut a, &mut b, &frames, false);
        // Acknowledgements of the last frames may still be on their way (the engine threads
        // take them while both links live), and an engine thread's records reach the
        // collector when it next drains that thread's ring: wait until nothing is open.
        let sent: u64 = frames.iter().map(|f| f.len() as u64).sum();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let peer = loop {
            m.flush().unwrap();
            let peer = m.snapshot().key(Key::Peer(1)).copied();
            match peer {
                Some(p) if p.outstanding == 0 && p.bytes >= sent * 9 / 10 => break p,
                _ if std::time::Instant::now() > deadline => panic!("still open: {peer:?}"),
                _ => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        let snap = m.snapshot();
        drop(a);
        drop(b);
        // Every byte sent was acknowledged: a chunk declared lost completes with no bytes and
        // its resend carries them, several engines add a part header per part. A chunk
        // declared lost and then acknowledged after all (a spurious timeout, not rare on a
        // loaded CI host) reports its bytes on that path, and its resend, if one went, on its
        // own: such bytes count twice, as they crossed twice.
        assert!(
            peer.bytes >= sent * 9 / 10,
            "{} of {sent} bytes",
            peer.bytes
        );
        assert!(
            peer.bytes <= sent * 11 / 10,
            "{} of {sent} bytes",
            peer.bytes
        );
        assert_eq!(peer.outstanding, 0, "every chunk posted completed");
        assert!(snap.keys.iter().any(|k| matches!(k.key, Key::Path(_))));
        assert!(snap.key(Key::Nic(0)).is_some());
    }
}

#[test]
fn a_link_without_a_monitor_reports_nothing() {
    let m = monitor();
    let (mut a, mut b) = link_pair(small_link(1, 0.0));
    exchange_frames(&mut a, &mut b, &[pattern(100_000, 1)], false);
    m.flush().unwrap();
    assert_eq!(m.snapshot().records, 0);
}

/// (comm, op, seq, records, bytes) of one operation.
type OpSeen = (u64, ccl_monitor::Op, u64, u64, u64);

/// The operations of the completions a monitor saw.
#[derive(Clone, Default)]
struct Ops(std::sync::Arc<std::sync::Mutex<Vec<OpSeen>>>);

impl ccl_monitor::Subscriber for Ops {
    fn on_complete(&self, w: &ccl_monitor::Work) {
        let mut v = self.0.lock().unwrap();
        let id = (w.coll.comm, w.coll.op, w.coll.seq);
        match v.iter_mut().find(|e| (e.0, e.1, e.2) == id) {
            Some(e) => {
                e.3 += 1;
                e.4 += w.bytes;
            }
            None => v.push((id.0, id.1, id.2, 1, w.bytes)),
        }
    }
}

#[test]
fn chunks_carry_the_operation_they_were_sent_for() {
    use ccl_monitor::Op;
    let ops = Ops::default();
    let m = Monitor::with_options(
        &MonitorConfig {
            enabled: true,
            ..MonitorConfig::default()
        },
        ccl_monitor::Options {
            subscribers: vec![Box::new(ops.clone())],
            ..ccl_monitor::Options::default()
        },
    )
    .unwrap();
    let (mut a, mut b) = link_pair(small_link(1, 0.0));
    a.attach_monitor(&LinkMonitor {
        publisher: m.publisher(),
        peer: 1,
        comm: 7,
    });
    a.begin_op(Op::AllReduce, 5);
    exchange_frames(&mut a, &mut b, &[pattern(200_000, 1)], false);
    a.begin_op(Op::Send, 6);
    exchange_frames(&mut a, &mut b, &[pattern(100_000, 2)], false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        m.flush().unwrap();
        let open = m.snapshot().key(Key::Peer(1)).map_or(1, |k| k.outstanding);
        if open == 0 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // No loss is injected, but a rank held off its core past the 500 us timeout resends
    // (a loaded 2-core CI machine did): a resend's bytes count again, on its own path.
    let resent = a.retransmits();
    drop((a, b));
    let mut seen = ops.0.lock().unwrap().clone();
    seen.sort_by_key(|e| e.2);
    let ids: Vec<_> = seen.iter().map(|e| (e.0, e.1, e.2)).collect();
    assert_eq!(ids, [(7, Op::AllReduce, 5), (7, Op::Send, 6)]);
    // Each frame's bytes under its own operation (and no chunk of one under the other).
    let bytes = (seen[0].4, seen[1].4);
    if resent == 0 {
        assert_eq!(bytes, (200_000, 100_000), "{seen:?}");
    } else {
        assert!(bytes.0 >= 200_000 && bytes.1 >= 100_000, "{seen:?}");
        assert!(
            bytes.0 + bytes.1 <= 300_000 + resent * 32 * 1024,
            "{seen:?}, {resent} resent"
        );
    }
}
