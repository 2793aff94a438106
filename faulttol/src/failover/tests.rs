//! Unit tests of the sender and receiver ends.

use super::*;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A sender moved to the backup by the receiver's rollback at 1 ms, with credit for
/// 256 bytes of the 1024 posted.
fn sender_on_backup() -> SenderConn<Duration> {
    let mut s = SenderConn::new(1, (10, 11), HealthConfig::default(), 256).unwrap();
    s.post(ms(0), 1024);
    let rollback = Message::Rollback {
        epoch: 1,
        done: 0,
        posted: 256,
    };
    s.handle_message(ms(1), LinkRole::Backup, rollback).unwrap();
    assert_eq!(s.failover().state(), ConnState::OnBackup);
    assert_eq!(
        s.failover().link(LinkRole::Primary).state(),
        LinkState::Failed
    );
    s
}

#[test]
fn sender_switches_back_at_the_next_chunk_once_the_primary_holds() {
    let mut s = sender_on_backup();
    let first = s.poll_transmit(ms(1)).unwrap();
    assert!(matches!(
        first,
        (LinkRole::Backup, Message::Data { offset: 0, .. })
    ));
    s.poll_transmit(ms(1)).unwrap();
    let ack = Message::Ack {
        epoch: 1,
        done: 256,
    };
    s.handle_message(ms(2), LinkRole::Backup, ack).unwrap();
    // Probe the primary until it holds (the default hold-down is 1 s).
    let mut now = ms(1);
    while s.failover().link(LinkRole::Primary).state() != LinkState::Ok {
        now = s.poll_timeout().unwrap();
        s.handle_timeout(now);
        match s.poll_transmit(now) {
            Some((link, Message::Probe { seq })) => {
                let answer = Message::ProbeAnswer { seq };
                s.handle_message(now, link, answer).unwrap();
            }
            other => panic!("{other:?}"),
        }
    }
    let cts = Message::Cts { posted: 1024 };
    s.handle_message(now, LinkRole::Backup, cts).unwrap();
    let next = s.poll_transmit(now).unwrap();
    assert!(matches!(
        next,
        (LinkRole::Primary, Message::Data { offset: 256, .. })
    ));
    let switch = Action::Switch {
        to: LinkRole::Primary,
        resume_from: 256,
    };
    assert_eq!(
        s.poll_action(),
        Some(Action::Switch {
            to: LinkRole::Backup,
            resume_from: 0
        })
    );
    assert_eq!(s.poll_action(), Some(switch));
    assert_eq!(s.counters().get(Reason::SwitchBack), 1);
}

#[test]
fn receiver_follows_only_the_newest_chunk() {
    let mut r = ReceiverConn::new(1, (20, 21), HealthConfig::default()).unwrap();
    r.post(ms(0), 1024);
    r.handle_error(ms(1), LinkRole::Primary);
    assert_eq!(r.failover().active(), LinkRole::Backup);
    let data = |offset| Message::Data {
        epoch: 1,
        offset,
        len: 256,
    };
    assert_eq!(r.handle_message(ms(2), LinkRole::Backup, data(0)), Ok(true));
    // The sender switched back: chunk 1 on the primary overtakes nothing yet ...
    assert_eq!(
        r.handle_message(ms(3), LinkRole::Primary, data(512)),
        Ok(true)
    );
    assert_eq!(r.failover().active(), LinkRole::Primary);
    // ... and chunk 1 arriving late on the backup does not pull the receiver back.
    assert_eq!(
        r.handle_message(ms(4), LinkRole::Backup, data(256)),
        Ok(true)
    );
    assert_eq!(r.failover().active(), LinkRole::Primary);
    assert_eq!(r.ledger().received(), 768);
    let primary = r.failover().link(LinkRole::Primary);
    assert_eq!(
        primary.state(),
        LinkState::Ok,
        "the sender's verdict is taken"
    );
}

#[test]
fn recovering_primary_is_the_last_resort_when_the_backup_fails() {
    let mut r = ReceiverConn::new(1, (20, 21), HealthConfig::default()).unwrap();
    r.post(ms(0), 1024);
    r.handle_error(ms(1), LinkRole::Primary);
    while r.poll_transmit(ms(1)).is_some() {}
    // The primary answers its first probe: recovering, not yet trusted.
    let (link, probe) = r.poll_transmit(ms(101)).unwrap();
    let Message::Probe { seq } = probe else {
        panic!("{probe:?}")
    };
    r.handle_message(ms(102), link, Message::ProbeAnswer { seq })
        .unwrap();
    assert_eq!(
        r.failover().link(LinkRole::Primary).state(),
        LinkState::Recovering
    );
    r.handle_error(ms(103), LinkRole::Backup);
    assert_eq!(r.failover().state(), ConnState::OnPrimary);
    let rollback = std::iter::from_fn(|| r.poll_transmit(ms(103)))
        .find(|(_, m)| matches!(m, Message::Rollback { .. }));
    assert!(matches!(
        rollback,
        Some((LinkRole::Primary, Message::Rollback { epoch: 2, .. }))
    ));
}

#[test]
fn active_link_is_kept_for_the_grace_while_the_other_only_recovers() {
    let mut r = ReceiverConn::new(1, (20, 21), HealthConfig::default()).unwrap();
    r.post(ms(0), 1024);
    r.handle_error(ms(1), LinkRole::Backup);
    while r.poll_transmit(ms(1)).is_some() {}
    // The backup answers its first probe (recovering); the primary goes suspect.
    r.handle_timeout(ms(101));
    let mut answered = false;
    while let Some((link, m)) = r.poll_transmit(ms(101)) {
        if let (LinkRole::Backup, Message::Probe { seq }) = (link, m) {
            let answer = Message::ProbeAnswer { seq };
            r.handle_message(ms(102), link, answer).unwrap();
            answered = true;
        }
    }
    assert!(answered);
    let state = |r: &ReceiverConn<Duration>, l| r.failover().link(l).state();
    assert_eq!(state(&r, LinkRole::Backup), LinkState::Recovering);
    assert_eq!(state(&r, LinkRole::Primary), LinkState::Suspect);
    // The primary's probes go unanswered: while it is the only link that may carry
    // traffic it is probed again (several probe timeouts) rather than failed.
    let mut now = ms(102);
    while state(&r, LinkRole::Backup) == LinkState::Recovering {
        assert_eq!(r.failover().state(), ConnState::OnPrimary, "{now:?}");
        assert_eq!(state(&r, LinkRole::Primary), LinkState::Suspect, "{now:?}");
        now = r.poll_timeout().unwrap();
        r.handle_timeout(now);
        // The backup keeps answering; the primary stays silent.
        while let Some((link, m)) = r.poll_transmit(now) {
            if let (LinkRole::Backup, Message::Probe { seq }) = (link, m) {
                let answer = Message::ProbeAnswer { seq };
                r.handle_message(now, link, answer).unwrap();
            }
        }
    }
    assert!(now >= ms(102) + HealthConfig::default().hold_down);
    // The backup held: the primary's next lost probe fails it, and traffic moves.
    let held = now;
    while r.failover().state() == ConnState::OnPrimary {
        now = r.poll_timeout().unwrap();
        r.handle_timeout(now);
        while r.poll_transmit(now).is_some() {}
    }
    assert!(now - held <= HealthConfig::default().probe_timeout);
    assert_eq!(state(&r, LinkRole::Primary), LinkState::Failed);
    assert_eq!(r.failover().state(), ConnState::OnBackup);
}

#[test]
fn messages_for_the_other_end_are_rejected() {
    let mut s = SenderConn::<Duration>::new(1, (1, 2), HealthConfig::default(), 8).unwrap();
    let commit = Message::Commit {
        epoch: 0,
        offset: 0,
    };
    let err = s.handle_message(ms(0), LinkRole::Primary, commit);
    assert_eq!(err, Err(Error::WrongDirection("commit")));
    let mut r = ReceiverConn::<Duration>::new(1, (1, 2), HealthConfig::default()).unwrap();
    let ack = Message::Ack { epoch: 0, done: 0 };
    assert_eq!(
        r.handle_message(ms(0), LinkRole::Primary, ack),
        Err(Error::WrongDirection("ack"))
    );
}

#[test]
fn zero_timeouts_are_refused_at_construction() {
    let cfg = HealthConfig {
        chunk_timeout: Duration::ZERO,
        ..HealthConfig::default()
    };
    assert!(SenderConn::<Duration>::new(1, (1, 2), cfg, 8).is_err());
    assert!(SenderConn::<Duration>::new(1, (1, 2), HealthConfig::default(), 0).is_err());
}
