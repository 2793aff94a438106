//! Link and NIC health: whether a link (a queue pair or socket on one NIC) may carry a
//! connection's traffic, as a sans-IO state machine, and whether a NIC has any link left.
//!
//! A stalled link is not blamed on the timer alone: a link can be stalled only because the
//! peer's own upstream failed and it has nothing to send. So a chunk timeout makes the link
//! *suspect* and asks for a probe (the receiver re-sends its clear-to-send); a peer that
//! answers is alive and the link is cleared. Only an unanswered probe, or an error
//! completion, fails it. A failed link is probed with a backoff; once one probe is answered
//! it is *recovering*, and only after every probe for `hold_down` has been answered is it
//! trusted with traffic again, so a flapping link does not pull traffic back and forth.
//!
//! ```text
//! from        event                                               to
//! Ok          nothing back within chunk_timeout while expecting   Suspect, probe now
//! Suspect     probe answered within probe_timeout                 Ok (not blamed)
//! Suspect     any traffic arrives                                 Ok (not blamed)
//! Suspect     probe unanswered for probe_timeout                  Failed (the last link:
//!                                                                   probe again, Failed
//!                                                                   once suspect for
//!                                                                   last_link_grace)
//! any but     error completion, or the peer gave up on the link   Failed, probe a backoff on
//!   Failed
//! Failed      probe unanswered                                    Failed, longer backoff
//! Failed      probe answered                                      Recovering
//! Recovering  probe answered, hold_down since recovering began    Ok
//! Recovering  probe unanswered, or error completion               Failed, longer backoff
//! Failed,     the peer resumed traffic on it                      Ok
//!   Recovering
//! not Ok      reconnected (a fresh connection replaced the old)   same, probe now
//! ```
//!
//! The backoff is `probe_interval << min(consecutive failures - 1, max_backoff_shift)`.
//!
//! Every handler first applies the timeouts due at its `now`, so the result does not depend
//! on whether the caller called [`LinkHealth::handle_timeout`] first: an answer handed in at
//! or after its probe's deadline is late.
//!
//! The last link of a connection (the other one failed, or recovering and so carrying no
//! traffic) is failed less readily: an unanswered probe there ends the connection, and on a
//! loaded host a healthy peer can go unscheduled for longer than a probe timeout. So it is
//! probed again until it has been suspect for `last_link_grace`; any sign of life in
//! between clears it.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::event::{Counters, EventLog, Reason, Scope, State, Transition};
use crate::path::Timestamp;
pub use crate::state::{LinkState, NicState};

/// Timeouts and periods of link health; [`HealthConfig::default`] documents the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Longest wait for anything back on a link that owes traffic before it is suspect.
    pub chunk_timeout: Duration,
    /// Longest wait for a probe's answer.
    pub probe_timeout: Duration,
    /// Time between probes of a failed or recovering link (the backoff unit).
    pub probe_interval: Duration,
    /// How long a recovering link must answer every probe before it carries traffic again.
    pub hold_down: Duration,
    /// Cap on the backoff exponent of a link that keeps failing.
    pub max_backoff_shift: u32,
    /// How long the last usable link of a connection may stay suspect, probed again and
    /// again, before it is failed (and the connection with it).
    pub last_link_grace: Duration,
}

impl Default for HealthConfig {
    /// A silent link is declared failed `chunk_timeout + probe_timeout` = 150 ms after its
    /// last sign of life, leaving 50 ms of a 200 ms link-down-to-backup budget for the
    /// rollback exchange on the backup. 100 ms is far above a chunk's time on the wire (a
    /// 512 KiB chunk takes 40 us at 100 Gb/s), so congestion alone does not trip it, and
    /// the probe answers for a link that is merely slow. A failed link is probed every
    /// 100 ms, up to every 400 ms while it keeps failing, and must answer every probe for
    /// 400 ms before traffic returns to it: with a reconnection probed at once, traffic is
    /// back within about half a second of a link coming up (the target is 1 s), while a
    /// link that flaps faster than the hold-down never gets it back. The last link of a
    /// connection is failed only after 2 s without a sign of life.
    fn default() -> Self {
        HealthConfig {
            chunk_timeout: Duration::from_millis(100),
            probe_timeout: Duration::from_millis(50),
            probe_interval: Duration::from_millis(100),
            hold_down: Duration::from_millis(400),
            max_backoff_shift: 2,
            last_link_grace: Duration::from_secs(2),
        }
    }
}

impl HealthConfig {
    /// Rejects zero timeouts and periods, which would fail or revive links at once.
    pub fn validate(&self) -> Result<()> {
        let zero = [
            (self.chunk_timeout, "chunk_timeout is zero"),
            (self.probe_timeout, "probe_timeout is zero"),
            (self.probe_interval, "probe_interval is zero"),
        ];
        match zero.iter().find(|(d, _)| d.is_zero()) {
            Some((_, why)) => Err(Error::InvalidConfig(why)),
            None => Ok(()),
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let shift = failures
            .saturating_sub(1)
            .min(self.max_backoff_shift)
            .min(31);
        self.probe_interval.saturating_mul(1 << shift)
    }
}

/// A probe out on the link, awaiting its answer.
#[derive(Clone, Copy, Debug)]
struct Outstanding<I> {
    seq: u64,
    deadline: I,
}

/// The health of one link.
#[derive(Clone, Debug)]
pub struct LinkHealth<I> {
    id: u32,
    cfg: HealthConfig,
    state: LinkState,
    /// Something is owed back on the link (a chunk's ack, data for a clear-to-send).
    expecting: bool,
    /// When the owed traffic is late; armed only while Ok and expecting.
    deadline: Option<I>,
    probe: Option<Outstanding<I>>,
    /// When the next probe is to go out (none: no probe wanted).
    probe_due: Option<I>,
    failures: u32,
    recovering_since: Option<I>,
    /// When the link became suspect (while it is).
    suspect_since: Option<I>,
    /// The other link of the connection carries no traffic: see `last_link_grace`.
    last_resort: bool,
    next_seq: u64,
    log: EventLog<I>,
}

impl<I: Timestamp> LinkHealth<I> {
    /// A healthy link with caller-assigned `id` (the scope of its transition records).
    pub fn new(id: u32, cfg: HealthConfig) -> Self {
        LinkHealth {
            id,
            cfg,
            state: LinkState::Ok,
            expecting: false,
            deadline: None,
            probe: None,
            probe_due: None,
            failures: 0,
            recovering_since: None,
            suspect_since: None,
            last_resort: false,
            next_seq: 0,
            log: EventLog::default(),
        }
    }

    /// The link's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Where the link stands.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// Whether the link may carry traffic (Ok or Suspect: a suspect link is not yet blamed).
    pub fn is_usable(&self) -> bool {
        matches!(self.state, LinkState::Ok | LinkState::Suspect)
    }

    /// Consecutive failures since the link was last Ok (the backoff exponent).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Something is now owed back on the link (a chunk went out, a clear-to-send was
    /// posted): the chunk timer starts unless already running.
    pub fn handle_expect(&mut self, now: I) {
        self.handle_timeout(now);
        self.expecting = true;
        if self.state == LinkState::Ok && self.deadline.is_none() {
            self.deadline = Some(now + self.cfg.chunk_timeout);
        }
    }

    /// Traffic arrived on the link; `still_expecting` says whether more is owed, which
    /// restarts the chunk timer (a stall is measured from the last sign of life).
    pub fn handle_arrival(&mut self, now: I, still_expecting: bool) {
        self.handle_timeout(now);
        self.expecting = still_expecting;
        if self.state == LinkState::Suspect {
            self.probe = None;
            self.probe_due = None;
            self.set(now, LinkState::Ok, Reason::Progress);
        }
        self.rearm(now);
    }

    /// Traffic of another stream that shares the link arrived (one TCP connection carries
    /// both directions, and an answer owed here may queue behind the other direction's data):
    /// a sign of life that leaves what is owed on this link as it was.
    pub fn handle_alive(&mut self, now: I) {
        let owed = self.expecting;
        self.handle_arrival(now, owed);
    }

    /// Whether this is the connection's last usable link (the other is failed or
    /// recovering), which is then failed only after `last_link_grace` of unanswered probes.
    pub fn set_last_resort(&mut self, last: bool) {
        self.last_resort = last;
    }

    /// A fresh connection replaced the link's old one. A probe out went with the old one,
    /// so it is forgotten, and a link not Ok is probed now rather than at its backoff: the
    /// new connection working is the news a failed link waits for.
    pub fn handle_reconnected(&mut self, now: I) {
        self.handle_timeout(now);
        if self.state != LinkState::Ok {
            self.probe = None;
            self.probe_due = Some(now);
        }
    }

    /// Nothing is owed on the link any more (the connection moved off it).
    pub fn handle_idle(&mut self) {
        self.expecting = false;
        self.deadline = None;
    }

    /// The link reported an error completion: it fails at once.
    pub fn handle_error(&mut self, now: I) {
        self.handle_timeout(now);
        self.fail(now, Reason::ErrorCompletion);
    }

    /// The peer gave up on the link: fail it too, so it is probed before it is used again.
    pub fn handle_peer_failed(&mut self, now: I) {
        self.handle_timeout(now);
        self.fail(now, Reason::PeerReported);
    }

    /// The peer resumed traffic on the link, its own hold-down having ended: the peer's
    /// verdict is taken, so both ends use the link again without a second hold-down.
    pub fn handle_peer_resumed(&mut self, now: I) {
        self.handle_timeout(now);
        if matches!(self.state, LinkState::Failed | LinkState::Recovering) {
            self.make_ok(now, Reason::PeerResumed);
        }
    }

    /// The answer to probe `seq` arrived. Returns whether it was the probe outstanding
    /// (a stale or late answer proves nothing about the link now).
    pub fn handle_probe_answer(&mut self, now: I, seq: u64) -> bool {
        self.handle_timeout(now);
        if self.probe.map(|p| p.seq) != Some(seq) {
            return false;
        }
        self.probe = None;
        match self.state {
            LinkState::Suspect => self.make_ok(now, Reason::ProbeAnswered),
            LinkState::Failed => {
                self.recovering_since = Some(now);
                self.probe_due = Some(now + self.cfg.probe_interval);
                self.set(now, LinkState::Recovering, Reason::ProbeAnswered);
            }
            LinkState::Recovering => self.on_recovering_answer(now),
            LinkState::Ok => {}
        }
        true
    }

    fn on_recovering_answer(&mut self, now: I) {
        let held = self
            .recovering_since
            .is_some_and(|since| since + self.cfg.hold_down <= now);
        if held {
            self.make_ok(now, Reason::HoldDownElapsed);
        } else {
            self.probe_due = Some(now + self.cfg.probe_interval);
        }
    }

    /// Applies the chunk and probe timeouts due at `now`.
    pub fn handle_timeout(&mut self, now: I) {
        if let Some(p) = self.probe.filter(|p| p.deadline <= now) {
            self.probe = None;
            self.on_probe_lost(p.deadline);
        }
        if self.state == LinkState::Ok && self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
            self.probe_due = Some(now);
            self.set(now, LinkState::Suspect, Reason::ChunkTimeout);
        }
    }

    /// A probe went unanswered until `at`, its deadline (which is when the link is failed,
    /// however late the caller noticed).
    fn on_probe_lost(&mut self, at: I) {
        let grace = self
            .suspect_since
            .is_some_and(|since| at < since + self.cfg.last_link_grace);
        match self.state {
            LinkState::Suspect if self.last_resort && grace => self.probe_due = Some(at),
            LinkState::Suspect | LinkState::Recovering => self.fail(at, Reason::ProbeTimeout),
            LinkState::Failed => {
                self.failures = self.failures.saturating_add(1);
                self.probe_due = Some(at + self.cfg.backoff(self.failures));
            }
            LinkState::Ok => {}
        }
    }

    /// The probe to send now, if one is due and none is out: its sequence number, to be
    /// echoed in the answer. The probe's deadline starts now.
    pub fn poll_probe(&mut self, now: I) -> Option<u64> {
        self.handle_timeout(now);
        if self.probe.is_some() || self.probe_due.map_or(true, |due| due > now) {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.probe_due = None;
        self.probe = Some(Outstanding {
            seq,
            deadline: now + self.cfg.probe_timeout,
        });
        Some(seq)
    }

    /// The earliest time the link needs [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_probe`](Self::poll_probe) again.
    pub fn poll_timeout(&self) -> Option<I> {
        let probe_due = self.probe_due.filter(|_| self.probe.is_none());
        [self.deadline, self.probe.map(|p| p.deadline), probe_due]
            .into_iter()
            .flatten()
            .min()
    }

    /// The oldest transition not yet drained.
    pub fn poll_transition(&mut self) -> Option<Transition<I>> {
        self.log.poll()
    }

    /// Transitions made, per reason.
    pub fn counters(&self) -> &Counters {
        self.log.counters()
    }

    fn fail(&mut self, now: I, reason: Reason) {
        if self.state == LinkState::Failed {
            return;
        }
        self.failures = self.failures.saturating_add(1);
        self.deadline = None;
        self.probe = None;
        self.recovering_since = None;
        self.probe_due = Some(now + self.cfg.backoff(self.failures));
        self.set(now, LinkState::Failed, reason);
    }

    fn make_ok(&mut self, now: I, reason: Reason) {
        self.failures = 0;
        self.probe = None;
        self.probe_due = None;
        self.recovering_since = None;
        self.set(now, LinkState::Ok, reason);
        self.rearm(now);
    }

    fn rearm(&mut self, now: I) {
        let ok = self.state == LinkState::Ok && self.expecting;
        self.deadline = ok.then(|| now + self.cfg.chunk_timeout);
    }

    fn set(&mut self, now: I, to: LinkState, reason: Reason) {
        let from = self.state;
        self.state = to;
        self.suspect_since = (to == LinkState::Suspect).then_some(now);
        let scope = Scope::Link(self.id);
        self.log
            .record(now, scope, State::Link(from), State::Link(to), reason);
    }
}

/// The aggregate health of one NIC, fed the state of each link it carries.
#[derive(Clone, Debug)]
pub struct NicHealth<I> {
    id: u32,
    links: Vec<(u32, LinkState)>,
    state: NicState,
    log: EventLog<I>,
}

impl<I: Timestamp> NicHealth<I> {
    /// A NIC with caller-assigned `id` and no links yet.
    pub fn new(id: u32) -> Self {
        NicHealth {
            id,
            links: Vec::new(),
            state: NicState::Up,
            log: EventLog::default(),
        }
    }

    /// Where the NIC stands.
    pub fn state(&self) -> NicState {
        self.state
    }

    /// Link `link` on this NIC is now in `state` (a new link is added).
    pub fn handle_link_state(&mut self, now: I, link: u32, state: LinkState) {
        match self.links.iter_mut().find(|(id, _)| *id == link) {
            Some(entry) => entry.1 = state,
            None => self.links.push((link, state)),
        }
        let down = self
            .links
            .iter()
            .all(|(_, s)| matches!(s, LinkState::Failed | LinkState::Recovering));
        let (to, reason) = match down {
            true => (NicState::Down, Reason::AllLinksDown),
            false => (NicState::Up, Reason::LinkUp),
        };
        if to != self.state {
            let from = std::mem::replace(&mut self.state, to);
            let scope = Scope::Nic(self.id);
            self.log
                .record(now, scope, State::Nic(from), State::Nic(to), reason);
        }
    }

    /// Feeds a link transition in (the NIC of the link is the caller's to know).
    pub fn handle_transition(&mut self, t: &Transition<I>) {
        if let (Scope::Link(link), State::Link(state)) = (t.scope, t.to) {
            self.handle_link_state(t.at, link, state);
        }
    }

    /// The oldest transition not yet drained.
    pub fn poll_transition(&mut self) -> Option<Transition<I>> {
        self.log.poll()
    }

    /// Transitions made, per reason.
    pub fn counters(&self) -> &Counters {
        self.log.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn link() -> LinkHealth<Duration> {
        LinkHealth::new(7, HealthConfig::default())
    }

    /// A link made suspect at 100 ms with its probe sent then (seq 0).
    fn suspect_probed() -> LinkHealth<Duration> {
        let mut l = link();
        l.handle_expect(ms(0));
        l.handle_timeout(ms(100));
        assert_eq!(l.state(), LinkState::Suspect);
        assert_eq!(l.poll_probe(ms(100)), Some(0));
        l
    }

    #[test]
    fn idle_link_is_never_suspect() {
        let mut l = link();
        l.handle_timeout(ms(10_000));
        assert_eq!((l.state(), l.poll_timeout()), (LinkState::Ok, None));
    }

    #[test]
    fn error_completion_fails_at_once_and_schedules_a_probe() {
        let mut l = link();
        l.handle_error(ms(5));
        assert_eq!(l.state(), LinkState::Failed);
        assert_eq!(l.poll_timeout(), Some(ms(105)));
        assert_eq!(l.poll_probe(ms(104)), None);
        assert_eq!(l.poll_probe(ms(105)), Some(0));
        assert_eq!(l.counters().get(Reason::ErrorCompletion), 1);
    }

    #[test]
    fn the_other_directions_traffic_keeps_a_link_alive_and_owing() {
        let mut l = suspect_probed();
        l.handle_alive(ms(120));
        assert_eq!(l.state(), LinkState::Ok);
        // Still owed: the chunk timer restarts from the sign of life.
        assert_eq!(l.poll_timeout(), Some(ms(220)));
        // Owed nothing: the sign of life starts no timer.
        let mut idle = link();
        idle.handle_alive(ms(5));
        assert_eq!((idle.state(), idle.poll_timeout()), (LinkState::Ok, None));
    }

    #[test]
    fn suspect_link_that_delivers_is_not_blamed() {
        let mut l = suspect_probed();
        l.handle_arrival(ms(120), true);
        assert_eq!(l.state(), LinkState::Ok);
        assert_eq!(l.poll_timeout(), Some(ms(220)));
        assert!(
            !l.handle_probe_answer(ms(130), 0),
            "probe no longer outstanding"
        );
    }

    #[test]
    fn failed_link_backs_off_while_probes_go_unanswered() {
        let mut l = link();
        l.handle_error(ms(0));
        assert_eq!(l.poll_probe(ms(100)), Some(0));
        l.handle_timeout(ms(150));
        assert_eq!((l.failures(), l.poll_timeout()), (2, Some(ms(350))));
        assert_eq!(l.poll_probe(ms(350)), Some(1));
        l.handle_timeout(ms(400));
        assert_eq!(l.poll_timeout(), Some(ms(800)));
        // The backoff is capped at 400 ms (max_backoff_shift 2).
        assert_eq!(l.poll_probe(ms(800)), Some(2));
        l.handle_timeout(ms(850));
        assert_eq!((l.failures(), l.poll_timeout()), (4, Some(ms(1250))));
    }

    #[test]
    fn reconnected_failed_link_is_probed_at_once() {
        let mut l = link();
        l.handle_error(ms(0));
        assert_eq!(l.poll_probe(ms(100)), Some(0));
        l.handle_reconnected(ms(120));
        // The probe out went with the old connection: a new one goes now, not at 350 ms.
        assert_eq!(l.poll_probe(ms(120)), Some(1));
        assert!(!l.handle_probe_answer(ms(121), 0), "the old probe's answer");
        assert!(l.handle_probe_answer(ms(121), 1));
        assert_eq!(l.state(), LinkState::Recovering);
        // A healthy link is left alone.
        let mut ok = link();
        ok.handle_reconnected(ms(5));
        assert_eq!((ok.state(), ok.poll_probe(ms(5))), (LinkState::Ok, None));
    }

    #[test]
    fn last_link_is_probed_again_until_the_grace_ends() {
        let mut l = suspect_probed();
        l.set_last_resort(true);
        // Probe 0 lost at 150 ms: probed again, still suspect.
        l.handle_timeout(ms(150));
        assert_eq!(l.state(), LinkState::Suspect);
        assert_eq!(l.poll_probe(ms(150)), Some(1));
        // A sign of life clears it, and the grace starts over at the next suspicion.
        l.handle_alive(ms(160));
        assert_eq!(l.state(), LinkState::Ok);
        l.handle_timeout(ms(260));
        let mut seq = l.poll_probe(ms(260)).unwrap();
        let mut t = 310;
        while t < 260 + 2000 {
            l.handle_timeout(ms(t));
            assert_eq!(l.state(), LinkState::Suspect, "{t} ms");
            seq = l.poll_probe(ms(t)).unwrap();
            t += 50;
        }
        assert_eq!(seq, 41);
        // The probe lost at 2260 ms, the end of the grace, fails it.
        l.handle_timeout(ms(t));
        assert_eq!(l.state(), LinkState::Failed);
        assert_eq!(l.counters().get(Reason::ProbeTimeout), 1);
    }

    #[test]
    fn recovering_needs_the_whole_hold_down_then_is_ok() {
        let mut l = link();
        l.handle_error(ms(0));
        let mut t = 100;
        let seq = l.poll_probe(ms(t)).unwrap();
        assert!(l.handle_probe_answer(ms(t + 1), seq));
        assert_eq!(l.state(), LinkState::Recovering);
        let since = t + 1;
        while l.state() == LinkState::Recovering {
            t = l.poll_timeout().unwrap().as_millis() as u64;
            let seq = l.poll_probe(ms(t)).unwrap();
            l.handle_probe_answer(ms(t + 1), seq);
        }
        assert_eq!(l.state(), LinkState::Ok);
        let hold = HealthConfig::default().hold_down.as_millis() as u64;
        assert!(t + 1 >= since + hold && t + 1 < since + hold + 102);
        assert_eq!(l.failures(), 0);
    }

    #[test]
    fn recovering_link_that_fails_a_probe_is_failed_with_a_longer_backoff() {
        let mut l = link();
        l.handle_error(ms(0));
        let seq = l.poll_probe(ms(100)).unwrap();
        l.handle_probe_answer(ms(101), seq);
        l.poll_probe(ms(201)).unwrap();
        l.handle_timeout(ms(251));
        assert_eq!((l.state(), l.failures()), (LinkState::Failed, 2));
        assert_eq!(l.poll_timeout(), Some(ms(451)));
    }

    #[test]
    fn peer_verdicts_fail_and_revive() {
        let mut l = link();
        l.handle_peer_failed(ms(1));
        assert_eq!(l.state(), LinkState::Failed);
        l.handle_peer_resumed(ms(2));
        assert_eq!(l.state(), LinkState::Ok);
        assert_eq!(l.counters().get(Reason::PeerResumed), 1);
    }

    #[test]
    fn nic_is_down_only_when_every_link_is_failed() {
        let mut nic = NicHealth::new(1);
        nic.handle_link_state(ms(0), 10, LinkState::Ok);
        nic.handle_link_state(ms(0), 11, LinkState::Failed);
        assert_eq!(nic.state(), NicState::Up);
        nic.handle_link_state(ms(1), 10, LinkState::Recovering);
        assert_eq!(nic.state(), NicState::Down);
        let t = nic.poll_transition().unwrap();
        assert_eq!((t.scope, t.reason), (Scope::Nic(1), Reason::AllLinksDown));
        nic.handle_link_state(ms(2), 11, LinkState::Suspect);
        assert_eq!(nic.state(), NicState::Up);
        assert_eq!(nic.counters().total(), 2);
    }

    #[test]
    fn nic_follows_link_transitions() {
        let mut l = link();
        let mut nic = NicHealth::new(0);
        l.handle_error(ms(3));
        while let Some(t) = l.poll_transition() {
            nic.handle_transition(&t);
        }
        assert_eq!(nic.state(), NicState::Down);
    }

    #[test]
    fn zero_timeouts_are_rejected() {
        assert!(HealthConfig::default().validate().is_ok());
        let cfg = HealthConfig {
            probe_timeout: Duration::ZERO,
            ..HealthConfig::default()
        };
        assert_eq!(
            cfg.validate(),
            Err(Error::InvalidConfig("probe_timeout is zero"))
        );
    }
}
