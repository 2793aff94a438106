//! Boundary pairs: just under and just over each timeout, on one link and on a connection.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ccl_faulttol::{
    Action, ConnState, HealthConfig, LinkHealth, LinkRole, LinkState, Message, Reason,
    ReceiverConn, SenderConn, State,
};

const NS: Duration = Duration::from_nanos(1);
const T0: Duration = Duration::from_secs(1);

fn cfg() -> HealthConfig {
    HealthConfig::default()
}

fn expecting_link() -> LinkHealth<Duration> {
    let mut l = LinkHealth::new(1, cfg());
    l.handle_expect(T0);
    l
}

/// A link made suspect at `T0 + chunk_timeout`, its probe (seq 0) sent then.
fn suspect_link() -> LinkHealth<Duration> {
    let mut l = expecting_link();
    let at = T0 + cfg().chunk_timeout;
    l.handle_timeout(at);
    assert_eq!(l.poll_probe(at), Some(0));
    l
}

#[test]
fn stall_just_under_the_chunk_timeout_is_not_detected() {
    let mut l = expecting_link();
    let at = T0 + cfg().chunk_timeout - NS;
    l.handle_timeout(at);
    l.handle_arrival(at, true);
    assert_eq!(l.state(), LinkState::Ok);
    assert_eq!(l.counters().total(), 0);
    // Measured from the last sign of life: the next deadline is a whole timeout on.
    assert_eq!(l.poll_timeout(), Some(at + cfg().chunk_timeout));
}

#[test]
fn stall_just_over_the_chunk_timeout_is_detected_and_probed() {
    let mut l = expecting_link();
    let at = T0 + cfg().chunk_timeout + NS;
    l.handle_arrival(at, true);
    let t = l.poll_transition().unwrap();
    assert_eq!(
        (t.to, t.reason),
        (State::Link(LinkState::Suspect), Reason::ChunkTimeout)
    );
    // The late traffic itself clears the link: it was slow, not broken.
    let t = l.poll_transition().unwrap();
    assert_eq!(
        (t.to, t.reason),
        (State::Link(LinkState::Ok), Reason::Progress)
    );
    let mut l = expecting_link();
    l.handle_timeout(at);
    assert_eq!(l.state(), LinkState::Suspect);
    assert_eq!(l.poll_probe(at), Some(0));
}

#[test]
fn probe_answered_just_before_its_timeout_clears_the_link() {
    let mut l = suspect_link();
    let at = T0 + cfg().chunk_timeout + cfg().probe_timeout - NS;
    assert!(l.handle_probe_answer(at, 0));
    assert_eq!((l.state(), l.failures()), (LinkState::Ok, 0));
    assert_eq!(l.counters().get(Reason::ProbeAnswered), 1);
    assert_eq!(l.counters().get(Reason::ProbeTimeout), 0);
}

#[test]
fn probe_answered_just_after_its_timeout_fails_the_link() {
    let mut l = suspect_link();
    let deadline = T0 + cfg().chunk_timeout + cfg().probe_timeout;
    assert!(!l.handle_probe_answer(deadline + NS, 0), "a late answer");
    assert_eq!(l.state(), LinkState::Failed);
    let failed = std::iter::from_fn(|| l.poll_transition()).last().unwrap();
    assert_eq!((failed.at, failed.reason), (deadline, Reason::ProbeTimeout));
}

/// A link failed at `T0`, recovering since its first probe was answered at `since`, with
/// a probe out at `since + 9 probe intervals` and every earlier one answered at once. The
/// hold-down ends 40 ms after that probe went out, within its probe timeout.
fn recovering_link() -> (LinkHealth<Duration>, Duration, u64) {
    let cfg = HealthConfig {
        hold_down: Duration::from_millis(940),
        ..cfg()
    };
    let mut l = LinkHealth::new(1, cfg);
    l.handle_error(T0);
    let since = T0 + cfg.probe_interval;
    for seq in 0..10 {
        let at = since + cfg.probe_interval * seq as u32;
        assert_eq!(l.poll_probe(at), Some(seq));
        if seq < 9 {
            assert!(l.handle_probe_answer(at, seq));
            assert_eq!(l.state(), LinkState::Recovering);
        }
    }
    (l, since + cfg.hold_down, 9)
}

#[test]
fn answer_just_short_of_the_hold_down_keeps_recovering() {
    let (mut l, end, seq) = recovering_link();
    assert!(l.handle_probe_answer(end - NS, seq));
    assert_eq!(l.state(), LinkState::Recovering);
    assert_eq!(l.counters().get(Reason::HoldDownElapsed), 0);
}

#[test]
fn answer_at_the_end_of_the_hold_down_brings_the_link_back() {
    let (mut l, end, seq) = recovering_link();
    assert!(l.handle_probe_answer(end, seq));
    assert_eq!((l.state(), l.failures()), (LinkState::Ok, 0));
    assert_eq!(l.counters().get(Reason::HoldDownElapsed), 1);
}

/// A sender with one chunk of 256 bytes in flight on the primary since `T0`.
fn sender_in_flight() -> SenderConn<Duration> {
    let mut s = SenderConn::new(1, (10, 11), cfg(), 256).unwrap();
    s.post(T0, 256);
    s.handle_message(T0, LinkRole::Primary, Message::Cts { posted: 256 })
        .unwrap();
    let data = s.poll_transmit(T0).unwrap();
    assert!(matches!(data, (LinkRole::Primary, Message::Data { .. })));
    assert!(matches!(
        s.poll_transmit(T0),
        Some((_, Message::Commit { .. }))
    ));
    s
}

#[test]
fn ack_just_under_the_chunk_timeout_needs_no_probe() {
    let mut s = sender_in_flight();
    let at = T0 + cfg().chunk_timeout - NS;
    let ack = Message::Ack {
        epoch: 0,
        done: 256,
    };
    s.handle_message(at, LinkRole::Primary, ack).unwrap();
    assert_eq!(s.poll_transmit(at), None);
    assert!(s.is_complete());
    assert_eq!(s.counters().total(), 0);
}

#[test]
fn ack_missing_just_over_the_chunk_timeout_sends_a_probe() {
    let mut s = sender_in_flight();
    let at = T0 + cfg().chunk_timeout + NS;
    s.handle_timeout(at);
    let probe = s.poll_transmit(at);
    assert_eq!(probe, Some((LinkRole::Primary, Message::Probe { seq: 0 })));
    assert_eq!(
        s.failover().state(),
        ConnState::OnPrimary,
        "suspect is not blamed yet"
    );
}

#[test]
fn unanswered_probe_moves_the_sender_to_the_backup_via_a_rollback() {
    let mut s = sender_in_flight();
    let suspect = T0 + cfg().chunk_timeout;
    s.handle_timeout(suspect);
    s.poll_transmit(suspect).unwrap();
    let failed = suspect + cfg().probe_timeout;
    s.handle_timeout(failed);
    let request = Message::RollbackRequest { epoch: 1 };
    assert_eq!(s.poll_transmit(failed), Some((LinkRole::Backup, request)));
    assert_eq!(s.failover().state(), ConnState::RollingBack);
    let rollback = Message::Rollback {
        epoch: 1,
        done: 0,
        posted: 256,
    };
    s.handle_message(failed + NS, LinkRole::Backup, rollback)
        .unwrap();
    let switch = Action::Switch {
        to: LinkRole::Backup,
        resume_from: 0,
    };
    assert_eq!(s.poll_action(), Some(switch));
    let resent = s.poll_transmit(failed + NS).unwrap();
    let data = Message::Data {
        epoch: 1,
        offset: 0,
        len: 256,
    };
    assert_eq!(resent, (LinkRole::Backup, data));
}

#[test]
fn innocent_link_answering_its_probes_is_never_blamed() {
    let mut r = ReceiverConn::new(1, (20, 21), cfg()).unwrap();
    r.post(T0, 1024);
    assert!(matches!(
        r.poll_transmit(T0),
        Some((_, Message::Cts { .. }))
    ));
    let mut now = T0;
    for round in 0..10 {
        now = r.poll_timeout().unwrap();
        r.handle_timeout(now);
        let (link, probe) = r.poll_transmit(now).unwrap();
        let Message::Probe { seq } = probe else {
            panic!("round {round}: {probe:?}")
        };
        // The re-sent clear-to-send goes with the probe.
        assert!(matches!(
            r.poll_transmit(now),
            Some((_, Message::Cts { posted: 1024 }))
        ));
        let answer = Message::ProbeAnswer { seq };
        now += cfg().probe_timeout - NS;
        r.handle_message(now, link, answer).unwrap();
    }
    assert!(now > T0 + cfg().chunk_timeout * 10);
    assert_eq!(r.poll_action(), None);
    assert_eq!(r.failover().link(LinkRole::Primary).state(), LinkState::Ok);
    assert_eq!(r.counters().get(Reason::ProbeAnswered), 10);
}

/// Both links silent: the primary fails after a chunk and a probe timeout; the backup, the
/// last link, after a chunk timeout and the last-link grace of re-sent probes (the default
/// grace is a whole number of probe timeouts, so the last probe is lost right at its end).
#[test]
fn both_links_silent_fail_the_connection_after_the_last_link_grace() {
    let mut s = sender_in_flight();
    let mut failed = None;
    while let Some(at) = s.poll_timeout() {
        s.handle_timeout(at);
        while s.poll_transmit(at).is_some() {}
        if let Some(Action::Failed) = s.poll_action() {
            failed = Some(at);
            break;
        }
    }
    let c = cfg();
    assert!((c.last_link_grace.as_nanos() % c.probe_timeout.as_nanos()) == 0);
    let bound = c.chunk_timeout * 2 + c.probe_timeout + c.last_link_grace;
    assert_eq!(failed, Some(T0 + bound));
    assert_eq!(s.failover().state(), ConnState::Failed);
    assert_eq!(
        s.poll_timeout(),
        None,
        "a failed connection is torn down, not probed"
    );
}

#[test]
fn error_completions_on_both_links_fail_at_once() {
    let mut r = ReceiverConn::new(1, (20, 21), cfg()).unwrap();
    r.post(T0, 256);
    r.handle_error(T0, LinkRole::Primary);
    let rollback = r.poll_transmit(T0).unwrap();
    assert!(matches!(rollback, (_, Message::Cts { .. })));
    let rollback = r.poll_transmit(T0).unwrap();
    assert!(matches!(
        rollback,
        (LinkRole::Backup, Message::Rollback { epoch: 1, .. })
    ));
    r.handle_error(T0 + NS, LinkRole::Backup);
    let actions: Vec<_> = std::iter::from_fn(|| r.poll_action()).collect();
    assert_eq!(actions.last(), Some(&Action::Failed));
    assert_eq!(r.failover().state(), ConnState::Failed);
}

/// A last link (the other failed) suspect since `T0`, a probe lost every probe timeout:
/// returns it with the probe out whose deadline is `T0 + last_link_grace + offset`.
fn last_link_probed_until(offset: Duration) -> LinkHealth<Duration> {
    let c = HealthConfig {
        last_link_grace: cfg().last_link_grace + offset,
        ..cfg()
    };
    let mut l = LinkHealth::new(1, c);
    l.set_last_resort(true);
    l.handle_expect(T0 - c.chunk_timeout);
    l.handle_timeout(T0);
    let mut at = T0;
    while at + c.probe_timeout < T0 + cfg().last_link_grace {
        assert!(l.poll_probe(at).is_some());
        at += c.probe_timeout;
        l.handle_timeout(at);
        assert_eq!(l.state(), LinkState::Suspect);
    }
    assert!(l.poll_probe(at).is_some());
    l
}

#[test]
fn last_link_probe_lost_just_before_the_grace_ends_is_probed_again() {
    // The grace ends a nanosecond after the probe's deadline.
    let mut l = last_link_probed_until(NS);
    l.handle_timeout(T0 + cfg().last_link_grace);
    assert_eq!(l.state(), LinkState::Suspect);
    assert!(l.poll_probe(T0 + cfg().last_link_grace).is_some());
}

#[test]
fn last_link_probe_lost_at_the_end_of_the_grace_fails_it() {
    let mut l = last_link_probed_until(Duration::ZERO);
    l.handle_timeout(T0 + cfg().last_link_grace);
    assert_eq!(l.state(), LinkState::Failed);
    assert_eq!(l.counters().get(Reason::ProbeTimeout), 1);
}
