//! Boundary pairs (s2n-quic style): each behaviour is shown on both sides of its threshold.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::time::Duration;

use ccl_transports::mpt::frame::{AckFrame, Echo};
use ccl_transports::mpt::sim::{ConnHandle, FabricConfig, Sim, SimAction};
use ccl_transports::mpt::{
    CcKind, Connection, Event, Frame, Instant, MptConfig, MptError, PathId, Transmit, QUIET_ROUNDS,
};

const CHUNK: u32 = 1000;

fn config(dup_ack_threshold: u32) -> MptConfig {
    MptConfig {
        chunk_size: CHUNK,
        num_paths: 4,
        dup_ack_threshold,
        cc: CcKind::None,
        // Every chunk acknowledged at once (the held acknowledgement has its own tests).
        ack_delay: Duration::ZERO,
        ..MptConfig::default()
    }
}

/// Everything `c` wants to send at `now`.
fn drain(c: &mut Connection, now: Instant) -> Vec<Transmit> {
    std::iter::from_fn(|| c.poll_transmit(now)).collect()
}

/// Hands frames to `dst` (payload contents are irrelevant here: zeros of the right length).
fn deliver(dst: &mut Connection, now: Instant, frames: &[Transmit]) {
    for t in frames {
        let payload = vec![0u8; t.payload.map_or(0, |p| p.len as usize)];
        dst.handle_frame(now, t.path, t.frame, &payload).unwrap();
    }
}

fn csn(t: &Transmit) -> Option<u8> {
    match t.frame {
        Frame::Data(d) => Some(d.header.csn()),
        _ => None,
    }
}

/// A sender and a receiver whose receive is posted and announced; `a` has sent every chunk
/// of one `chunks`-chunk message at t = 0.
fn setup(dup_ack_threshold: u32, chunks: u64) -> (Connection, Connection, Vec<Transmit>) {
    let mut a = Connection::new(config(dup_ack_threshold), 1, 2).unwrap();
    let mut b = Connection::new(config(dup_ack_threshold), 2, 1).unwrap();
    let t0 = Instant::ZERO;
    b.post_recv(t0, chunks * u64::from(CHUNK), 0).unwrap();
    let update = drain(&mut b, t0);
    deliver(&mut a, t0, &update);
    a.send(t0, chunks * u64::from(CHUNK), 0).unwrap();
    let data = drain(&mut a, t0);
    assert_eq!(data.len() as u64, chunks);
    (a, b, data)
}

/// Chunk 0 is lost, the `k` later chunks arrive and produce `k` duplicate acks.
fn dup_ack_case(threshold: u32, k: u64) -> (Connection, Option<Transmit>) {
    let (mut a, mut b, data) = setup(threshold, k + 1);
    let t1 = Instant::from_micros(10);
    deliver(&mut b, t1, &data[1..]);
    let acks = drain(&mut b, t1);
    assert_eq!(acks.len() as u64, k, "one ack per chunk");
    let t2 = Instant::from_micros(20);
    deliver(&mut a, t2, &acks);
    let next = a.poll_transmit(t2);
    (a, next)
}

#[test]
fn dup_ack_threshold_just_reached_triggers_fast_retransmit() {
    let (mut a, next) = dup_ack_case(4, 4);
    // All chunks left together at 0 and the acks took 20 us: the hole is not yet older
    // than a round trip plus a quarter (RACK), so a reorder timer is armed at 25 us, well
    // before the 500 us RTO.
    assert_eq!(next, None);
    let at = Instant::from_micros(25);
    assert_eq!(a.poll_timeout(), Some(at));
    a.handle_timeout(at);
    let rtx = a.poll_transmit(at).expect("fast retransmission");
    assert_eq!(csn(&rtx), Some(0));
    assert_eq!(a.stats().fast_retransmits, 1);
    assert_eq!(a.stats().chunks_retransmitted, 1);
    assert_eq!(a.stats().rto_events, 0);
}

#[test]
fn dup_ack_threshold_one_short_waits_for_rto() {
    let (mut a, next) = dup_ack_case(5, 4);
    assert_eq!(next, None, "no retransmission before the RTO");
    let rto_at = Instant::ZERO + a.config().rto;
    assert_eq!(a.poll_timeout(), Some(rto_at), "no reorder timer either");
    a.handle_timeout(rto_at);
    let t = a.poll_transmit(rto_at).expect("RTO retransmission");
    assert_eq!(csn(&t), Some(0));
    assert_eq!(a.stats().fast_retransmits, 0);
    assert_eq!(a.stats().rto_events, 1);
}

#[test]
fn rto_one_nanosecond_early_does_nothing() {
    let (mut a, mut b, data) = setup(32, 1);
    let rto = a.config().rto;
    assert_eq!(a.poll_timeout(), Some(Instant::ZERO + rto));
    let just_before = Instant::ZERO + rto - Duration::from_nanos(1);
    a.handle_timeout(just_before);
    assert_eq!(a.poll_transmit(just_before), None);
    assert_eq!(a.stats().rto_events, 0);
    // The ack arriving then completes the message; no timer remains.
    deliver(&mut b, just_before, &data);
    let acks = drain(&mut b, just_before);
    deliver(&mut a, just_before, &acks);
    assert!(matches!(a.poll_event(), Some(Event::SendComplete { .. })));
    assert_eq!(a.poll_timeout(), None);
    assert!(a.is_idle());
}

#[test]
fn rto_exactly_due_retransmits() {
    let (mut a, mut b, data) = setup(32, 1);
    let at = Instant::ZERO + a.config().rto;
    a.handle_timeout(at);
    let rtx = a.poll_transmit(at).expect("retransmission at the deadline");
    assert_eq!(csn(&rtx), Some(0));
    assert_ne!(rtx.path, data[0].path, "retransmitted on another path");
    assert_eq!(a.stats().rto_events, 1);
    // Backed off: the next deadline is two RTOs later.
    assert_eq!(a.poll_timeout(), Some(at + a.config().rto * 2));
    // The original arrives late, the retransmission is a duplicate at the receiver.
    deliver(&mut b, at, &data);
    deliver(&mut b, at, &[rtx]);
    assert_eq!(b.stats().chunks_received, 1);
    assert_eq!(b.stats().duplicate_chunks, 1);
    assert!(matches!(
        b.poll_event(),
        Some(Event::RecvComplete { len: 1000, .. })
    ));
    assert_eq!(b.poll_event(), None, "exactly once");
}

/// Data paths used by `n` messages of `len` bytes.
fn paths_used(len: usize, n: u64) -> std::collections::BTreeSet<u16> {
    let cfg = MptConfig {
        cc: CcKind::None,
        ..MptConfig::default()
    };
    let mut sim = Sim::new(5, 2, cfg.num_paths, FabricConfig::default()).unwrap();
    let (a, b) = sim.connect(0, 1, &cfg).unwrap();
    let used = std::rc::Rc::new(std::cell::RefCell::new(std::collections::BTreeSet::new()));
    let seen = used.clone();
    sim.set_transmit_observer(Box::new(move |h, _, t, _| {
        if h == a && t.payload.is_some() {
            seen.borrow_mut().insert(t.path.0);
        }
    }));
    for i in 0..n {
        sim.post_recv(b, len as u64, i).unwrap();
        sim.send(a, vec![i as u8; len], i).unwrap();
    }
    sim.run(Instant::from_micros(1_000_000)).unwrap();
    assert_eq!(sim.received(b).len() as u64, n);
    let out = used.borrow().clone();
    out
}

#[test]
fn message_one_byte_below_8k_stays_on_the_dedicated_path() {
    assert_eq!(paths_used(8191, 16), [0].into());
}

#[test]
fn message_of_exactly_8k_is_sprayed() {
    assert!(paths_used(8192, 16).len() > 4);
}

/// All paths go dark just after the only chunk left (so its ack is lost) and come back at
/// 7 ms. Timeouts fire at 0.5, 1.5, 3.5 and 7.5 ms after the send (500 us doubling);
/// meanwhile the paths, penalised, are probed (no data) every 2 ms at most, and the first
/// probe after 7 ms is answered with the cumulative acknowledgement of the chunk. The budget:
/// more than `max_rto_retries` timeouts over at least `fail_after` since the first.
fn outage(max_rto_retries: u32, fail_after: Duration) -> (Result<(), MptError>, Sim, u64) {
    let cfg = MptConfig {
        max_rto_retries,
        fail_after,
        cc: CcKind::None,
        num_paths: 4,
        // The timeouts below are the bare RTO's (a whole-message chunk's adds `ack_delay`).
        ack_delay: Duration::ZERO,
        ..MptConfig::default()
    };
    let fabric = FabricConfig {
        delay: Duration::from_micros(5),
        ..FabricConfig::default()
    };
    let mut sim = Sim::new(9, 2, 4, fabric).unwrap();
    let (a, b) = sim.connect(0, 1, &cfg).unwrap();
    sim.post_recv(b, 100, 0).unwrap();
    sim.send(a, vec![7; 100], 0).unwrap();
    for p in 0..4 {
        sim.schedule(
            Instant::from_micros(8),
            SimAction::SetPathDown {
                path: PathId(p),
                down: true,
            },
        );
        sim.schedule(
            Instant::from_micros(7_000),
            SimAction::SetPathDown {
                path: PathId(p),
                down: false,
            },
        );
    }
    let r = sim.run(Instant::from_micros(1_000_000));
    let rtos = sim.conn(a).unwrap().stats().rto_events;
    (r, sim, rtos)
}

#[test]
fn retry_budget_just_enough() {
    let (r, sim, rtos) = outage(3, Duration::ZERO);
    r.unwrap();
    assert_eq!(rtos, 3);
    // A probe leaves as the paths come back at 7 ms; its answer, 10 us later, acknowledges the
    // chunk (before the fourth timeout at 7.505 ms, which this budget would not survive).
    assert_eq!(sim.now(), Instant::from_micros(7_010));
    let st = sim.conn(ConnHandle::first()).unwrap().stats();
    assert_eq!(st.paths_revived, 1);
}

#[test]
fn retry_budget_one_too_small() {
    let (r, sim, rtos) = outage(2, Duration::ZERO);
    assert_eq!(r, Err(MptError::RetriesExhausted(2)));
    assert_eq!(rtos, 3);
    // The third timeout, 3.5 ms after the send, ends it: the paths are still dark.
    assert_eq!(sim.now(), Instant::from_micros(3_505));
}

/// The same count with a time floor: the third timeout comes 3 ms after the first, so a
/// floor of 3 ms ends the connection there, and one of 3.001 ms lets it live to the paths'
/// return (a peer stalled a few seconds is not a dead network).
#[test]
fn retry_budget_time_floor_just_reached() {
    let (r, sim, rtos) = outage(2, Duration::from_micros(3_000));
    assert_eq!(r, Err(MptError::RetriesExhausted(2)));
    assert_eq!((rtos, sim.now()), (3, Instant::from_micros(3_505)));
}

#[test]
fn retry_budget_time_floor_just_missed() {
    let (r, sim, rtos) = outage(2, Duration::from_micros(3_001));
    r.unwrap();
    assert_eq!((rtos, sim.now()), (3, Instant::from_micros(7_010)));
}

#[test]
fn window_limits_chunks_in_flight() {
    // A window of 8 chunks: 8 leave, the 9th waits for an acknowledgement.
    let cfg = MptConfig {
        window_chunks: 8,
        ..config(32)
    };
    let mut a = Connection::new(cfg.clone(), 1, 2).unwrap();
    let mut b = Connection::new(cfg, 2, 1).unwrap();
    let t0 = Instant::ZERO;
    b.post_recv(t0, 20_000, 0).unwrap();
    let up = drain(&mut b, t0);
    deliver(&mut a, t0, &up);
    a.send(t0, 20_000, 0).unwrap();
    let first = drain(&mut a, t0);
    assert_eq!(first.len(), 8);
    deliver(&mut b, t0, &first[..1]);
    let acks = drain(&mut b, t0);
    deliver(&mut a, t0, &acks);
    assert_eq!(
        drain(&mut a, t0).len(),
        1,
        "one acknowledged, one more may leave"
    );
}

#[test]
fn sixteen_messages_in_flight_and_not_seventeen() {
    let mut a = Connection::new(config(32), 1, 2).unwrap();
    for i in 0..16 {
        a.send(Instant::ZERO, 10, i).unwrap();
    }
    assert_eq!(
        a.send(Instant::ZERO, 10, 16),
        Err(MptError::SendQueueFull(16))
    );
    let mut b = Connection::new(config(32), 2, 1).unwrap();
    for i in 0..16 {
        b.post_recv(Instant::ZERO, 10, i).unwrap();
    }
    assert_eq!(
        b.post_recv(Instant::ZERO, 10, 16),
        Err(MptError::RecvQueueFull(16))
    );
}

#[test]
fn sender_waits_for_the_posted_receive_and_probes() {
    let mut a = Connection::new(config(32), 1, 2).unwrap();
    let mut b = Connection::new(config(32), 2, 1).unwrap();
    a.send(Instant::ZERO, 10, 0).unwrap();
    assert_eq!(
        drain(&mut a, Instant::ZERO),
        vec![],
        "no receive posted yet"
    );
    let probe_at = a.poll_timeout().expect("probe timer");
    assert_eq!(probe_at, Instant::ZERO + a.config().rto);
    b.post_recv(Instant::ZERO, 10, 0).unwrap();
    let lost_update = drain(&mut b, Instant::ZERO);
    assert_eq!(lost_update.len(), 1);
    // The announcement is lost; the probe recovers.
    a.handle_timeout(probe_at);
    let probe = drain(&mut a, probe_at);
    assert!(matches!(
        probe[..],
        [Transmit {
            frame: Frame::Probe(_),
            ..
        }]
    ));
    deliver(&mut b, probe_at, &probe);
    let answer = drain(&mut b, probe_at);
    deliver(&mut a, probe_at, &answer);
    let data = drain(&mut a, probe_at);
    assert_eq!(data.len(), 1);
    assert_eq!(a.stats().probes_sent, 1);
}

/// `posted` receives announced to a sender that then sends `sent` one-chunk messages, all
/// delivered; the receiver posts one more receive. Returns what the receiver sends then.
fn repost_after(posted: u64, sent: u64) -> Vec<Transmit> {
    let t0 = Instant::ZERO;
    let mut a = Connection::new(config(32), 1, 2).unwrap();
    let mut b = Connection::new(config(32), 2, 1).unwrap();
    for i in 0..posted {
        b.post_recv(t0, 10, i).unwrap();
    }
    let announce = drain(&mut b, t0);
    assert_eq!(announce.len(), 1, "the first receives are announced");
    deliver(&mut a, t0, &announce);
    for i in 0..sent {
        a.send(t0, 10, i).unwrap();
    }
    let data = drain(&mut a, t0);
    assert_eq!(data.len() as u64, sent.min(posted));
    deliver(&mut b, t0, &data);
    let acks = drain(&mut b, t0);
    assert_eq!(
        acks.len() as u64,
        sent.min(posted),
        "one acknowledgement per chunk"
    );
    b.post_recv(t0, 10, posted).unwrap();
    drain(&mut b, t0)
}

#[test]
fn repost_is_announced_at_once_when_the_sender_reached_the_announced_receives() {
    // The sender filled both announced receives (and waits with a third message): the new
    // receive is announced now, not at the next probe.
    assert_eq!(repost_after(2, 3).len(), 1);
    assert_eq!(repost_after(2, 2).len(), 1);
}

#[test]
fn repost_waits_for_the_next_acknowledgement_while_an_announced_receive_is_free() {
    // One announced receive is still unused: the sender is not waiting, and the
    // acknowledgement of its next message carries the new count.
    assert_eq!(repost_after(3, 2), vec![]);
}

#[test]
fn small_messages_cost_one_acknowledgement_each() {
    let t0 = Instant::ZERO;
    let mut a = Connection::new(config(32), 1, 2).unwrap();
    let mut b = Connection::new(config(32), 2, 1).unwrap();
    for i in 0..16 {
        b.post_recv(t0, 10, i).unwrap();
    }
    let announce = drain(&mut b, t0);
    deliver(&mut a, t0, &announce);
    for i in 0..100u64 {
        a.send(t0, 10, i).unwrap();
        let data = drain(&mut a, t0);
        assert_eq!(data.len(), 1, "message {i} leaves at once");
        deliver(&mut b, t0, &data);
        let ack = drain(&mut b, t0);
        deliver(&mut a, t0, &ack);
        // The receiver consumes the message and posts its receive again.
        while b.poll_event().is_some() {}
        b.post_recv(t0, 10, 16 + i).unwrap();
        let more = drain(&mut b, t0);
        deliver(&mut a, t0, &more);
        while a.poll_event().is_some() {}
    }
    assert_eq!(
        b.stats().acks_sent,
        1 + 100,
        "the first announcement, then one per chunk"
    );
}

/// A sender and a receiver with the default `ack_delay`, the receiver's receives announced.
fn delayed_ack_pair() -> (Connection, Connection) {
    let cfg = MptConfig {
        ack_delay: MptConfig::default().ack_delay,
        ..config(32)
    };
    let mut a = Connection::new(cfg.clone(), 1, 2).unwrap();
    let mut b = Connection::new(cfg, 2, 1).unwrap();
    for i in 0..16 {
        b.post_recv(Instant::ZERO, 100_000, i).unwrap();
    }
    let announce = drain(&mut b, Instant::ZERO);
    deliver(&mut a, Instant::ZERO, &announce);
    (a, b)
}

fn echo_of(t: &Transmit) -> Echo {
    match t.frame {
        Frame::Ack(AckFrame { echo: Some(e), .. }) => e,
        f => panic!("not an echoing acknowledgement: {f:?}"),
    }
}

#[test]
fn lone_small_message_is_acknowledged_exactly_at_ack_delay() {
    let (mut a, mut b) = delayed_ack_pair();
    let t0 = Instant::ZERO;
    let delay = b.config().ack_delay;
    assert_eq!(delay, Duration::from_micros(100));
    a.send(t0, 10, 0).unwrap();
    let data = drain(&mut a, t0);
    // The sender's timeout allows for the held acknowledgement.
    assert_eq!(a.poll_timeout(), Some(t0 + a.config().rto + delay));
    deliver(&mut b, t0, &data);
    assert_eq!(drain(&mut b, t0), vec![], "held");
    assert_eq!(b.poll_timeout(), Some(t0 + delay));
    let just_before = t0 + delay - Duration::from_nanos(1);
    assert_eq!(drain(&mut b, just_before), vec![], "one nanosecond early");
    let ack = drain(&mut b, t0 + delay);
    assert_eq!(ack.len(), 1);
    assert_eq!(echo_of(&ack[0]).held_us, 100);
    // The sender's round-trip sample leaves the held time out.
    deliver(&mut a, t0 + delay, &ack);
    assert_eq!(a.srtt(), Some(Duration::ZERO));
    while a.poll_event().is_some() {}
}

#[test]
fn second_small_message_is_acknowledged_at_once_for_both() {
    let (mut a, mut b) = delayed_ack_pair();
    let t0 = Instant::ZERO;
    let t1 = t0 + Duration::from_micros(30);
    a.send(t0, 10, 0).unwrap();
    let first = drain(&mut a, t0);
    deliver(&mut b, t0, &first);
    assert_eq!(drain(&mut b, t0), vec![]);
    a.send(t1, 10, 1).unwrap();
    let second = drain(&mut a, t1);
    deliver(&mut b, t1, &second);
    let ack = drain(&mut b, t1);
    assert_eq!(ack.len(), 1, "one acknowledgement for both");
    assert_eq!(
        echo_of(&ack[0]).held_us,
        0,
        "the second chunk's echo, not held"
    );
    // Nothing held any more: the one timer left is the peer watch of the receives still
    // posted, a quiet period after the peer was last heard from.
    let quiet = b.config().rto_max * QUIET_ROUNDS;
    assert_eq!(b.poll_timeout(), Some(t1 + quiet), "nothing held any more");
    deliver(&mut a, t1, &ack);
    let done: Vec<Event> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(done.len(), 2, "both sends complete: {done:?}");
    assert_eq!(b.stats().acks_sent, 2, "the announcement and this one");
}

#[test]
fn multi_chunk_messages_are_acknowledged_chunk_by_chunk() {
    let (mut a, mut b) = delayed_ack_pair();
    let t0 = Instant::ZERO;
    a.send(t0, 3 * u64::from(CHUNK), 0).unwrap();
    let data = drain(&mut a, t0);
    assert_eq!(data.len(), 3);
    deliver(&mut b, t0, &data);
    assert_eq!(drain(&mut b, t0).len(), 3);
}

#[test]
fn truncated_receive_is_reported() {
    let cfg = MptConfig {
        cc: CcKind::None,
        ..MptConfig::default()
    };
    let mut sim = Sim::new(3, 2, cfg.num_paths, FabricConfig::default()).unwrap();
    let (a, b) = sim.connect(0, 1, &cfg).unwrap();
    sim.post_recv(b, 50_000, 0).unwrap();
    sim.send(a, vec![1; 100_000], 0).unwrap();
    sim.run(Instant::from_micros(1_000_000)).unwrap();
    let m = &sim.received(b)[0];
    assert!(m.truncated);
    assert_eq!(m.data.len(), 50_000);
    assert!(
        m.data.iter().all(|&x| x == 1),
        "the part that fits is placed"
    );
}

#[test]
fn malformed_and_misaddressed_input_is_rejected_without_harm() {
    let mut a = Connection::new(config(32), 1, 2).unwrap();
    assert!(matches!(
        a.handle_datagram(Instant::ZERO, PathId(0), &[0xFF; 3]),
        Err(MptError::Malformed(_))
    ));
    assert!(matches!(
        a.handle_datagram(Instant::ZERO, PathId(9), &[0xFF; 3]),
        Err(MptError::Malformed(_))
    ));
    let mut buf = [0u8; 8];
    let n = Frame::Probe(ccl_transports::mpt::ProbeFrame { flow: 3 })
        .encode(&mut buf)
        .unwrap();
    assert_eq!(
        a.handle_datagram(Instant::ZERO, PathId(0), &buf[..n]),
        Err(MptError::WrongFlow {
            got: 3,
            expected: 1
        })
    );
    let n = Frame::Probe(ccl_transports::mpt::ProbeFrame { flow: 1 })
        .encode(&mut buf)
        .unwrap();
    assert_eq!(
        a.handle_datagram(Instant::ZERO, PathId(4), &buf[..n]),
        Err(MptError::PathOutOfRange { path: 4, paths: 4 })
    );
    assert_eq!(
        a.handle_datagram(Instant::ZERO, PathId(0), &buf[..n]),
        Ok(None)
    );
}

/// Delivers frames as a verbs datapath would: only the 32-bit immediate, no upper sequence bits.
fn deliver_imm_only(dst: &mut Connection, now: Instant, frames: &[Transmit]) {
    let narrowed: Vec<Transmit> = frames
        .iter()
        .map(|t| {
            let mut t = *t;
            if let Frame::Data(d) = &mut t.frame {
                d.seq_hi = None;
            }
            t
        })
        .collect();
    deliver(dst, now, &narrowed);
}

/// A stale copy of chunk 0 (a fabric duplicate) arrives after the receiver has taken 256
/// chunks. Returns (chunks accepted as new, duplicates dropped) at the receiver.
fn stale_copy_case(imm_only: bool, guard: Duration) -> (u64, u64) {
    let cfg = MptConfig {
        csn_reuse_guard: guard,
        ..config(32)
    };
    let mut a = Connection::new(cfg.clone(), 1, 2).unwrap();
    let mut b = Connection::new(cfg, 2, 1).unwrap();
    let give = |dst: &mut Connection, now, frames: &[Transmit]| {
        if imm_only {
            deliver_imm_only(dst, now, frames)
        } else {
            deliver(dst, now, frames)
        }
    };
    let t0 = Instant::ZERO;
    b.post_recv(t0, 300 * u64::from(CHUNK), 0).unwrap();
    let up = drain(&mut b, t0);
    deliver(&mut a, t0, &up);
    a.send(t0, 300 * u64::from(CHUNK), 0).unwrap();
    let first = drain(&mut a, t0);
    assert_eq!(first.len(), 128, "one window");
    let stale = first[0];
    let t1 = Instant::from_micros(1);
    give(&mut b, t1, &first);
    let acks = drain(&mut b, t1);
    let t2 = Instant::from_micros(2);
    deliver(&mut a, t2, &acks);
    let second = drain(&mut a, t2);
    give(&mut b, Instant::from_micros(3), &second);
    // The stale copy of chunk 0 shows up at 4 us.
    give(&mut b, Instant::from_micros(4), &[stale]);
    (b.stats().chunks_received, b.stats().duplicate_chunks)
}

/// Boundary pair for CSN disambiguation: with only the 8-bit CSN and no reuse guard, a stale
/// copy of chunk 0 arriving after chunk 255 passes for chunk 256 (and the real chunk 256
/// would later be dropped: corruption). The datagram prefix's upper sequence bits, or the
/// reuse guard (which holds chunk 128 back until chunk 0's copies are dead), prevent it.
#[test]
fn stale_copy_aliases_only_with_8_bit_csn_and_no_guard() {
    assert_eq!(
        stale_copy_case(true, Duration::ZERO),
        (257, 0),
        "taken for chunk 256"
    );
    assert_eq!(
        stale_copy_case(false, Duration::ZERO),
        (256, 1),
        "32-bit sequence: duplicate"
    );
    // Guard of 10 us: chunks 128.. wait until 10 us, so at 4 us the copy is plainly old.
    assert_eq!(stale_copy_case(true, Duration::from_micros(10)), (128, 1));
}

#[test]
fn csn_reuse_guard_holds_back_exactly_until_expiry() {
    let cfg = MptConfig {
        csn_reuse_guard: Duration::from_micros(10),
        ..config(32)
    };
    let mut a = Connection::new(cfg.clone(), 1, 2).unwrap();
    let mut b = Connection::new(cfg, 2, 1).unwrap();
    let t0 = Instant::ZERO;
    b.post_recv(t0, 300 * u64::from(CHUNK), 0).unwrap();
    let up = drain(&mut b, t0);
    deliver(&mut a, t0, &up);
    a.send(t0, 300 * u64::from(CHUNK), 0).unwrap();
    let first = drain(&mut a, t0);
    deliver(&mut b, t0, &first);
    let acks = drain(&mut b, t0);
    deliver(&mut a, t0, &acks);
    let guard_end = Instant::from_micros(10);
    assert_eq!(drain(&mut a, guard_end - Duration::from_nanos(1)).len(), 0);
    assert_eq!(a.poll_timeout(), Some(guard_end));
    assert_eq!(drain(&mut a, guard_end).len(), 128);
}
