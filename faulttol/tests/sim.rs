//! End-to-end: a sender and a receiver over a primary and a backup link, simulated with
//! seeded delay, jitter and loss, with the primary cut at every step of a transfer.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ccl_faulttol::{
    ConnState, HealthConfig, LinkRole, LinkState, NicHealth, NicState, Reason, Scope, State,
};
use common::{ms, run, us, End, Outage, OutageKind, Outcome, Scenario};

/// Every transfer delivers exactly the bytes sent, once each, in order.
fn assert_exact(sc: &Scenario, o: &Outcome, what: &str) {
    assert!(
        o.errors.is_empty(),
        "{what}: protocol errors {:?}",
        o.errors
    );
    assert_eq!(o.gaps, 0, "{what}: bytes delivered that never arrived");
    assert_eq!(
        o.delivered.len() as u64,
        sc.total(),
        "{what}: delivered length"
    );
    assert!(
        o.delivered == o.src,
        "{what}: delivered bytes differ from those sent"
    );
    assert!(
        o.completed_at.is_some(),
        "{what}: transfer did not complete"
    );
}

#[test]
fn clean_transfer_stays_on_the_primary() {
    for seed in 0..8 {
        let sc = Scenario::new(seed);
        let o = run(&sc);
        assert_exact(&sc, &o, "clean");
        assert!(o.sender_actions.is_empty() && o.receiver_actions.is_empty());
        assert!(o.taken.iter().all(|&(_, l, _)| l == LinkRole::Primary));
        let failed =
            |t: &&ccl_faulttol::Transition<Duration>| t.to == State::Link(LinkState::Failed);
        assert_eq!(
            o.transitions.iter().filter(failed).count(),
            0,
            "seed {seed}"
        );
    }
}

/// Distinct times of every message of a clean run before it completed: each chunk
/// boundary and each protocol message.
fn steps(sc: &Scenario) -> Vec<Duration> {
    let base = run(sc);
    assert_exact(sc, &base, "baseline");
    let end = base.completed_at.unwrap();
    let mut times: Vec<_> = base.sends.into_iter().filter(|&t| t <= end).collect();
    times.dedup();
    times
}

/// One cut of the primary at `at`, back `down` later: checks delivery, failover, the time
/// to traffic on the backup, and the switch back.
fn check_cut(sc: &Scenario, at: Duration, kind: OutageKind) {
    let down = ms(20);
    let mut sc = sc.clone();
    sc.outages[0] = Some(Outage {
        from: at,
        until: Some(at + down),
        kind,
    });
    let o = run(&sc);
    let what = format!("seed {} cut {kind:?} at {at:?}", sc.seed);
    assert_exact(&sc, &o, &what);
    let to_backup = o.switches(End::Sender, LinkRole::Backup);
    // Every cut up to the completion leaves something owed on the primary.
    let &moved = to_backup
        .first()
        .unwrap_or_else(|| panic!("{what}: no failover"));
    assert!(moved >= at, "{what}: failover before the cut");
    let bound = sc.cfg.chunk_timeout + sc.cfg.probe_timeout + sc.pace + ms(8);
    if let Some(&(t, _, _)) = o
        .taken
        .iter()
        .find(|(t, l, _)| *t >= at && *l == LinkRole::Backup)
    {
        assert!(
            t - at <= bound,
            "{what}: traffic on the backup {:?} after the cut",
            t - at
        );
    }
    let back = o.switches(End::Sender, LinkRole::Primary);
    assert!(
        back.iter().any(|&t| t >= at + down + sc.cfg.hold_down),
        "{what}: no switch back after the hold-down ({back:?})"
    );
    assert_eq!(o.sender_state, ConnState::OnPrimary, "{what}");
}

#[test]
fn cut_at_every_step_loses_nothing_and_duplicates_nothing() {
    let mut runs = 0;
    for seed in [1, 2, 3] {
        let sc = Scenario::new(seed);
        let times = steps(&sc);
        for (i, &t) in times.iter().enumerate() {
            // At the message, and halfway through its flight.
            for at in [t, t + sc.links[0].delay / 2] {
                let kind = match i % 2 {
                    0 => OutageKind::Silent,
                    _ => OutageKind::Errors,
                };
                check_cut(&sc, at, kind);
                runs += 1;
            }
        }
    }
    assert!(runs > 300, "only {runs} cuts");
}

#[test]
fn receiver_follows_the_sender_back_to_the_primary() {
    let mut sc = Scenario::new(7);
    sc.chunks = 120;
    sc.outages[0] = Some(Outage {
        from: ms(20),
        until: Some(ms(40)),
        kind: OutageKind::Silent,
    });
    let o = run(&sc);
    assert_exact(&sc, &o, "follow");
    let rx_back = o.switches(End::Receiver, LinkRole::Primary);
    assert!(!rx_back.is_empty(), "the receiver never followed");
    let last = o.taken.last().unwrap();
    assert_eq!(
        last.1,
        LinkRole::Primary,
        "the transfer did not end on the primary"
    );
    assert_eq!(o.receiver_state, ConnState::OnPrimary);
    assert!(
        o.counters.get(Reason::SwitchBack) >= 2,
        "both ends switch back"
    );
}

#[test]
fn default_config_moves_traffic_to_the_backup_within_200ms() {
    let mut sc = Scenario::new(11);
    sc.cfg = HealthConfig::default();
    sc.chunks = 400;
    sc.pace = ms(1);
    sc.window = 8;
    for l in &mut sc.links {
        l.delay = us(20);
        l.jitter = us(10);
        l.retransmit = us(200);
    }
    let cut = ms(50);
    for kind in [OutageKind::Silent, OutageKind::Errors] {
        sc.outages[0] = Some(Outage {
            from: cut,
            until: Some(cut + ms(300)),
            kind,
        });
        let o = run(&sc);
        assert_exact(&sc, &o, "default config");
        let (t, _, _) = *o
            .taken
            .iter()
            .find(|(t, l, _)| *t >= cut && *l == LinkRole::Backup)
            .unwrap();
        assert!(
            t - cut <= ms(200),
            "{kind:?}: {:?} to traffic on the backup",
            t - cut
        );
        assert!(
            !o.switches(End::Sender, LinkRole::Primary).is_empty(),
            "no switch back"
        );
    }
}

#[test]
fn both_links_cut_fails_both_ends_in_bounded_time() {
    for seed in 0..6 {
        for kind in [OutageKind::Silent, OutageKind::Errors] {
            let mut sc = Scenario::new(seed);
            let cut = ms(13) + us(seed * 310);
            let out = Outage {
                from: cut,
                until: None,
                kind,
            };
            sc.outages = [Some(out), Some(out)];
            let o = run(&sc);
            let what = format!("seed {seed} {kind:?}");
            assert!(o.errors.is_empty(), "{what}: {:?}", o.errors);
            assert_eq!(o.gaps, 0, "{what}");
            assert!(
                o.src.starts_with(&o.delivered),
                "{what}: delivered a wrong byte"
            );
            // The last link is failed only after its grace of re-sent probes.
            let bound = (sc.cfg.chunk_timeout + sc.cfg.probe_timeout) * 2
                + sc.cfg.last_link_grace
                + sc.pace
                + ms(5);
            for end in [End::Sender, End::Receiver] {
                let at = o
                    .failed_at(end)
                    .unwrap_or_else(|| panic!("{what}: {end:?} never failed"));
                assert!(
                    at - cut <= bound,
                    "{what}: {end:?} failed {:?} after the cut",
                    at - cut
                );
            }
            assert_eq!(
                (o.sender_state, o.receiver_state),
                (ConnState::Failed, ConnState::Failed)
            );
        }
    }
}

#[test]
fn innocent_link_stalled_by_a_failed_upstream_is_not_blamed() {
    let mut sc = Scenario::new(5);
    // The sender has nothing to send for 60 ms (its own upstream peer failed and
    // recovered), while the receiver has buffer posted and waits on the primary.
    sc.sender_start = ms(60);
    let o = run(&sc);
    assert_exact(&sc, &o, "innocent");
    assert!(
        o.counters.get(Reason::ChunkTimeout) >= 1,
        "the stall was not noticed"
    );
    assert!(
        o.counters.get(Reason::ProbeAnswered) >= 1,
        "no probe answered"
    );
    assert_eq!(o.counters.get(Reason::ProbeTimeout), 0);
    assert_eq!(o.counters.get(Reason::Failover), 0);
    assert!(o.sender_actions.is_empty() && o.receiver_actions.is_empty());
    let cleared = o.transitions.iter().any(|t| {
        matches!(t.scope, Scope::Link(20))
            && t.from == State::Link(LinkState::Suspect)
            && t.to == State::Link(LinkState::Ok)
    });
    assert!(
        cleared,
        "the receiver's primary was not cleared by the probe"
    );
}

#[test]
fn short_stall_is_ridden_out_and_long_one_fails_over() {
    let mut sc = Scenario::new(9);
    let stall = |len| Outage {
        from: ms(20),
        until: Some(ms(20) + len),
        kind: OutageKind::Stall,
    };
    sc.outages[0] = Some(stall(ms(4)));
    let o = run(&sc);
    assert_exact(&sc, &o, "short stall");
    assert_eq!(o.counters.get(Reason::ChunkTimeout), 0);
    sc.outages[0] = Some(stall(ms(60)));
    let o = run(&sc);
    assert_exact(&sc, &o, "long stall");
    assert!(
        !o.switches(End::Sender, LinkRole::Backup).is_empty(),
        "no failover"
    );
}

#[test]
fn every_transition_is_recorded_and_counted() {
    let mut sc = Scenario::new(3);
    sc.outages[0] = Some(Outage {
        from: ms(15),
        until: Some(ms(40)),
        kind: OutageKind::Errors,
    });
    let o = run(&sc);
    assert_exact(&sc, &o, "records");
    assert_eq!(o.counters.total(), o.transitions.len() as u64);
    for w in o.transitions.windows(2) {
        assert!(
            w[0].at <= w[1].at || w[0].scope != w[1].scope,
            "out of order: {w:?}"
        );
    }
    assert!(o.counters.get(Reason::ErrorCompletion) >= 1);
    assert!(o.counters.get(Reason::HoldDownElapsed) >= 1);
    // The sender's NIC of the primary carries only link 10: down while it is, up after.
    let mut nic = NicHealth::new(0);
    let mut seen = Vec::new();
    for t in o.transitions.iter().filter(|t| t.scope == Scope::Link(10)) {
        nic.handle_transition(t);
        seen.push(nic.state());
    }
    assert!(seen.contains(&NicState::Down), "{seen:?}");
    assert_eq!(nic.state(), NicState::Up);
}

#[test]
fn short_silent_loss_on_a_link_that_works_again_is_resynchronised() {
    let mut resyncs = 0;
    for seed in [4, 5] {
        let sc = Scenario::new(seed);
        for at in steps(&sc) {
            let mut sc = sc.clone();
            // Shorter than detection: the probe after it is answered.
            sc.outages[0] = Some(Outage {
                from: at,
                until: Some(at + ms(3)),
                kind: OutageKind::Silent,
            });
            let o = run(&sc);
            assert_exact(&sc, &o, &format!("seed {seed} 3 ms loss at {at:?}"));
            resyncs += o.counters.get(Reason::Resync);
        }
    }
    assert!(resyncs > 20, "only {resyncs} resyncs");
}

#[test]
fn backup_failing_under_chunks_left_after_a_switch_back_loses_nothing() {
    let mut sc = Scenario::new(8);
    sc.chunks = 120;
    // A slow backup, so chunks are still on it when traffic goes back to the primary.
    sc.links[1].delay = us(1800);
    sc.links[1].jitter = us(100);
    sc.outages[0] = Some(Outage {
        from: ms(20),
        until: Some(ms(40)),
        kind: OutageKind::Silent,
    });
    let back = run(&sc).switches(End::Sender, LinkRole::Primary)[0];
    // Cut the backup just as traffic leaves it, with chunks still on it.
    let mut resyncs = 0;
    for off in (0..2000).step_by(100) {
        sc.outages[1] = Some(Outage {
            from: back + us(off),
            until: None,
            kind: OutageKind::Silent,
        });
        let o = run(&sc);
        assert_exact(
            &sc,
            &o,
            &format!("backup cut {off} us after the switch back"),
        );
        assert_eq!(o.sender_state, ConnState::OnPrimary);
        resyncs += o.counters.get(Reason::Resync);
    }
    assert!(resyncs > 0, "the sender never resynchronised in place");
}

#[test]
fn backup_cut_at_every_step_of_a_failover_fails_cleanly() {
    let mut sc = Scenario::new(12);
    let primary = Outage {
        from: ms(20),
        until: None,
        kind: OutageKind::Errors,
    };
    sc.outages[0] = Some(primary);
    let o = run(&sc);
    assert_exact(&sc, &o, "primary cut for good");
    let end = o.completed_at.unwrap();
    let mut times: Vec<_> = o
        .sends
        .into_iter()
        .filter(|&t| t >= ms(20) && t <= end)
        .collect();
    times.dedup();
    assert!(times.len() > 50, "{} steps", times.len());
    // The last link is failed only after its grace of re-sent probes.
    let bound = (sc.cfg.chunk_timeout + sc.cfg.probe_timeout) * 2
        + sc.cfg.last_link_grace
        + sc.pace
        + ms(5);
    for at in times {
        for kind in [OutageKind::Silent, OutageKind::Errors] {
            let what = format!("backup cut {kind:?} at {at:?}");
            sc.outages[1] = Some(Outage {
                from: at,
                until: None,
                kind,
            });
            let o = run(&sc);
            assert!(o.errors.is_empty(), "{what}: {:?}", o.errors);
            assert_eq!(o.gaps, 0, "{what}");
            assert!(
                o.src.starts_with(&o.delivered),
                "{what}: delivered a wrong byte"
            );
            let rx_done = o.delivered.len() as u64 == sc.total();
            let ends = [
                (End::Sender, o.completed_at.is_some()),
                (End::Receiver, rx_done),
            ];
            for (end, finished) in ends {
                match o.failed_at(end) {
                    Some(t) => assert!(t - at <= bound, "{what}: {end:?} failed late"),
                    None => assert!(finished, "{what}: {end:?} neither finished nor failed"),
                }
            }
        }
    }
}
