//! Path health: whether each path of a connection may carry data, and when a failed one is
//! tested again, as a sans-IO state machine (events and the current time in, decisions out).
//!
//! A path that loses a chunk is *penalised*: path choice keeps data off it while a healthy
//! path is left. It is not declared dead on a timer: after a backoff it gets a probe (a frame
//! without data, so a lost probe costs no retransmission), and an acknowledgement arriving on
//! it after that probe brings it back. Data it delivers brings it back too, but only data
//! sent after its newest loss: a late acknowledgement of a chunk sent before an outage
//! proves nothing about the path now.
//!
//! ```text
//! from        event                                               to
//! Healthy     chunk lost                                          Penalised, probe 2 RTO on
//! Penalised   chunk lost                                          Penalised, backoff from now
//! Penalised   probe due, nothing in flight on it (take_probe)     Probing, next one a backoff on
//! Probing     chunk lost, or probe due again and idle             Probing (backoff from now)
//! Probing     any acknowledgement arriving on the path            Healthy
//! Penalised,  delivery of a chunk sent after the newest loss      Healthy
//!   Probing
//! ```
//!
//! The backoff is `rto << min(consecutive losses, PROBE_MAX_SHIFT)`.
//!
//! Time is whatever monotonic instant the caller uses ([`Timestamp`]); nothing here reads a
//! clock.

use std::ops::Add;
use std::time::Duration;

/// A penalised path is probed `rto << min(consecutive losses, PROBE_MAX_SHIFT)` after its
/// latest loss or probe: 2 ms at most with a 500 us RTO, so a link that comes back is in use
/// again soon, while a dead one costs one lost probe, and no data, per backoff period.
pub const PROBE_MAX_SHIFT: u32 = 2;

/// A point in time as the caller counts it: any ordered instant that a `Duration` can be
/// added to (the multipath core's nanosecond `Instant`, a simulator's clock, or a plain
/// `Duration` since an epoch).
pub trait Timestamp: Copy + Ord + Add<Duration, Output = Self> {}

impl<T: Copy + Ord + Add<Duration, Output = T>> Timestamp for T {}

/// Where a path stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathStatus<I> {
    /// No loss since the path last delivered.
    Healthy,
    /// Lost `losses` chunks since it last delivered, not probed since: kept off data while
    /// a healthy path is left; probed at `probe_at`.
    Penalised {
        /// Consecutive losses.
        losses: u32,
        /// When it may carry its first probe.
        probe_at: I,
    },
    /// Probed since its losses began: any acknowledgement arriving on it revives it. While
    /// none does it is probed again at `probe_at`, and further losses lengthen the backoff.
    Probing {
        /// Consecutive losses.
        losses: u32,
        /// When it may carry its next probe.
        probe_at: I,
    },
}

/// The health of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathHealth<I> {
    status: PathStatus<I>,
    /// Send time of the newest chunk declared lost on the path; kept across revivals, since
    /// a late acknowledgement of an older chunk must not count as a delivery later either.
    last_loss_tx: Option<I>,
}

// By hand: a derive would require `I: Default`, which a new, healthy path does not need.
impl<I> Default for PathHealth<I> {
    fn default() -> Self {
        PathHealth {
            status: PathStatus::Healthy,
            last_loss_tx: None,
        }
    }
}

/// The backoff before a path with `losses` consecutive losses is probed.
fn backoff(rto: Duration, losses: u32) -> Duration {
    rto.saturating_mul(1 << losses.min(PROBE_MAX_SHIFT))
}

impl<I: Timestamp> PathHealth<I> {
    /// Where the path stands.
    pub fn status(&self) -> PathStatus<I> {
        self.status
    }

    /// No loss since the path last delivered.
    pub fn is_healthy(&self) -> bool {
        self.status == PathStatus::Healthy
    }

    /// Losses since the path last delivered (0 when healthy).
    pub fn consecutive_losses(&self) -> u32 {
        match self.status {
            PathStatus::Healthy => 0,
            PathStatus::Penalised { losses, .. } | PathStatus::Probing { losses, .. } => losses,
        }
    }

    /// When the path may carry its next probe (none when healthy).
    pub fn probe_at(&self) -> Option<I> {
        match self.status {
            PathStatus::Healthy => None,
            PathStatus::Penalised { probe_at, .. } | PathStatus::Probing { probe_at, .. } => {
                Some(probe_at)
            }
        }
    }

    /// A chunk sent on the path at `tx` was declared lost at `now`: one more consecutive
    /// loss, and the next probe one (longer) backoff from `now`. A probed path stays
    /// probed, so an answer to the probe already out still revives it. Returns whether the
    /// path was healthy until now.
    pub fn on_loss(&mut self, now: I, tx: I, rto: Duration) -> bool {
        self.last_loss_tx = Some(self.last_loss_tx.map_or(tx, |t| t.max(tx)));
        let was_healthy = self.is_healthy();
        let losses = self.consecutive_losses().saturating_add(1);
        let probe_at = now + backoff(rto, losses);
        self.status = match self.status {
            PathStatus::Probing { .. } => PathStatus::Probing { losses, probe_at },
            _ => PathStatus::Penalised { losses, probe_at },
        };
        was_healthy
    }

    /// The path delivered a chunk it alone carried, sent at `tx`. Returns whether that
    /// revived it (a chunk sent after its newest loss revives a penalised path).
    pub fn on_delivery(&mut self, tx: I) -> bool {
        if self.last_loss_tx.is_some_and(|t| tx <= t) {
            return false;
        }
        let was_penalised = !self.is_healthy();
        self.status = PathStatus::Healthy;
        was_penalised
    }

    /// An acknowledgement arrived on the path. Returns whether that revived it: a probed
    /// path works both ways again (the probe got there, the answer back).
    pub fn on_ack_received(&mut self) -> bool {
        if !matches!(self.status, PathStatus::Probing { .. }) {
            return false;
        }
        self.status = PathStatus::Healthy;
        true
    }

    /// The path's probe, if one is due at `now` and the path is `idle` (nothing in flight
    /// on it, which would answer for it anyway): it becomes probing, with the next probe
    /// one backoff on. Returns whether a probe is to go out.
    pub fn take_probe(&mut self, now: I, rto: Duration, idle: bool) -> bool {
        let losses = self.consecutive_losses();
        match self.probe_at() {
            Some(at) if at <= now && idle => {
                let probe_at = now + backoff(rto, losses);
                self.status = PathStatus::Probing { losses, probe_at };
                true
            }
            _ => false,
        }
    }

    /// When the path next needs looking at for a probe: its probe time, or one RTO from
    /// `now` when that has passed (a probe held back by chunks in flight); none when healthy.
    pub fn next_probe_check(&self, now: I, rto: Duration) -> Option<I> {
        let at = self.probe_at()?;
        Some(if at <= now { now + rto } else { at })
    }
}

/// The health of every path of one connection, keeping ready what path choice asks on every
/// chunk: how many paths are penalised, and the earliest time any probe may be due.
#[derive(Clone, Debug)]
pub struct PathsHealth<I> {
    paths: Vec<PathHealth<I>>,
    rto: Duration,
    /// Earliest probe check of any path, so the common case looks at one value, not all.
    next_probe: Option<I>,
    /// Paths not healthy.
    penalised: u16,
}

/// The earlier of two optional deadlines (`None`: no deadline).
fn earlier<I: Ord>(a: Option<I>, b: Option<I>) -> Option<I> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl<I: Timestamp> PathsHealth<I> {
    /// `n` healthy paths; `rto` is the probe backoff unit.
    pub fn new(n: u16, rto: Duration) -> Self {
        PathsHealth {
            paths: vec![PathHealth::default(); usize::from(n)],
            rto,
            next_probe: None,
            penalised: 0,
        }
    }

    /// The probe backoff unit.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Path `i`, if the connection has it.
    pub fn get(&self, i: usize) -> Option<&PathHealth<I>> {
        self.paths.get(i)
    }

    /// How many paths are not healthy.
    pub fn penalised(&self) -> u16 {
        self.penalised
    }

    /// Whether path `i` exists and is not healthy.
    pub fn is_penalised(&self, i: usize) -> bool {
        self.paths.get(i).is_some_and(|p| !p.is_healthy())
    }

    /// A chunk sent on path `i` at `tx` was declared lost at `now`.
    pub fn on_loss(&mut self, i: usize, now: I, tx: I) {
        let rto = self.rto;
        let Some(p) = self.paths.get_mut(i) else {
            return;
        };
        if p.on_loss(now, tx, rto) {
            self.penalised += 1;
        }
        self.next_probe = earlier(self.next_probe, p.probe_at());
    }

    /// Path `i` delivered a chunk it alone carried, sent at `tx`.
    pub fn on_delivery(&mut self, i: usize, tx: I) {
        if self.paths.get_mut(i).is_some_and(|p| p.on_delivery(tx)) {
            self.penalised = self.penalised.saturating_sub(1);
        }
    }

    /// An acknowledgement arrived on path `i`. Returns whether that revived it.
    pub fn on_ack_received(&mut self, i: usize) -> bool {
        let revived = self
            .paths
            .get_mut(i)
            .is_some_and(PathHealth::on_ack_received);
        if revived {
            self.penalised = self.penalised.saturating_sub(1);
        }
        revived
    }

    /// The first path (lowest index) whose probe is due at `now` and that is `idle`; it is
    /// marked probing. Also re-computes when to look again.
    pub fn take_probe(&mut self, now: I, idle: impl Fn(usize) -> bool) -> Option<usize> {
        if self.next_probe.map_or(true, |t| t > now) {
            return None;
        }
        let rto = self.rto;
        let mut found = None;
        let mut next = None;
        for (i, p) in self.paths.iter_mut().enumerate() {
            if found.is_none() && p.take_probe(now, rto, idle(i)) {
                found = Some(i);
            }
            next = earlier(next, p.next_probe_check(now, rto));
        }
        self.next_probe = next;
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTO: Duration = Duration::from_micros(500);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn penalised(losses: u32, probe_at: Duration) -> PathStatus<Duration> {
        PathStatus::Penalised { losses, probe_at }
    }

    fn probing(losses: u32, probe_at: Duration) -> PathStatus<Duration> {
        PathStatus::Probing { losses, probe_at }
    }

    #[test]
    fn healthy_to_penalised_on_loss_with_growing_capped_backoff() {
        let mut p = PathHealth::default();
        assert!(p.is_healthy());
        assert!(p.on_loss(us(10), us(5), RTO));
        assert_eq!(p.status(), penalised(1, us(1010)));
        assert!(!p.on_loss(us(20), us(6), RTO));
        assert_eq!(p.status(), penalised(2, us(2020)));
        // Capped at 4 RTOs.
        assert!(!p.on_loss(us(30), us(7), RTO));
        assert_eq!(p.status(), penalised(3, us(2030)));
        assert_eq!(p.consecutive_losses(), 3);
    }

    #[test]
    fn penalised_to_healthy_only_by_a_chunk_sent_after_the_newest_loss() {
        let mut p = PathHealth::default();
        p.on_loss(us(100), us(50), RTO);
        p.on_loss(us(100), us(40), RTO);
        // The newest loss is the chunk sent at 50, not the later-declared one sent at 40.
        assert!(!p.on_delivery(us(45)));
        assert!(!p.on_delivery(us(50)));
        assert_eq!(p.consecutive_losses(), 2);
        assert!(p.on_delivery(us(51)));
        assert!(p.is_healthy());
        assert_eq!(p.probe_at(), None);
        // Already healthy: a delivery changes nothing, and old chunks still prove nothing.
        assert!(!p.on_delivery(us(60)));
        p.on_loss(us(200), us(55), RTO);
        assert!(!p.on_delivery(us(50)));
    }

    #[test]
    fn penalised_to_probing_when_due_and_idle() {
        let mut p = PathHealth::default();
        p.on_loss(Duration::ZERO, Duration::ZERO, RTO);
        assert!(!p.take_probe(us(999), RTO, true), "not due");
        assert!(!p.take_probe(us(1000), RTO, false), "chunks in flight");
        assert_eq!(p.status(), penalised(1, us(1000)));
        assert!(p.take_probe(us(1000), RTO, true));
        assert_eq!(p.status(), probing(1, us(2000)));
        assert!(!p.take_probe(us(1001), RTO, true));
    }

    #[test]
    fn probing_stays_probing_on_loss_and_is_probed_again() {
        let mut p = PathHealth::default();
        p.on_loss(Duration::ZERO, Duration::ZERO, RTO);
        p.take_probe(us(1000), RTO, true);
        // The probe is lost: the backoff doubles, the path stays probed.
        assert!(!p.on_loss(us(1200), us(1000), RTO));
        assert_eq!(p.status(), probing(2, us(3200)));
        assert!(!p.take_probe(us(3199), RTO, true));
        assert!(p.take_probe(us(3200), RTO, true));
        assert_eq!(p.status(), probing(2, us(5200)));
    }

    #[test]
    fn probing_to_healthy_on_any_ack_received() {
        let mut p = PathHealth::default();
        p.on_loss(Duration::ZERO, Duration::ZERO, RTO);
        // Not probed yet: an ack arriving on it proves nothing.
        assert!(!p.on_ack_received());
        p.take_probe(us(1000), RTO, true);
        assert!(p.on_ack_received());
        assert!(p.is_healthy());
        assert!(!p.on_ack_received());
    }

    #[test]
    fn probing_to_healthy_on_delivery() {
        let mut p = PathHealth::default();
        p.on_loss(Duration::ZERO, Duration::ZERO, RTO);
        p.take_probe(us(1000), RTO, true);
        assert!(p.on_delivery(us(1000)));
        assert!(p.is_healthy());
    }

    #[test]
    fn next_probe_check_looks_again_an_rto_on_when_held_back() {
        let mut p = PathHealth::default();
        assert_eq!(p.next_probe_check(us(5), RTO), None);
        p.on_loss(Duration::ZERO, Duration::ZERO, RTO);
        assert_eq!(p.next_probe_check(us(5), RTO), Some(us(1000)));
        assert_eq!(p.next_probe_check(us(1500), RTO), Some(us(2000)));
    }

    #[test]
    fn set_counts_penalised_paths_across_transitions() {
        let mut s = PathsHealth::new(3, RTO);
        s.on_loss(1, Duration::ZERO, Duration::ZERO);
        s.on_loss(1, us(1), us(1));
        s.on_loss(2, Duration::ZERO, Duration::ZERO);
        s.on_loss(7, Duration::ZERO, Duration::ZERO); // no such path: ignored
        assert_eq!(s.penalised(), 2);
        assert!(s.is_penalised(1) && !s.is_penalised(0) && !s.is_penalised(7));
        s.on_delivery(2, us(2));
        assert_eq!(s.penalised(), 1);
        assert!(!s.on_ack_received(1), "not probed");
        assert_eq!(s.take_probe(us(2001), |_| true), Some(1));
        assert!(s.on_ack_received(1));
        assert_eq!(s.penalised(), 0);
    }

    #[test]
    fn set_probes_the_first_due_idle_path_once_per_backoff() {
        let mut s = PathsHealth::new(3, RTO);
        assert_eq!(s.take_probe(us(1_000_000), |_| true), None);
        s.on_loss(0, Duration::ZERO, Duration::ZERO);
        s.on_loss(2, Duration::ZERO, Duration::ZERO);
        assert_eq!(s.take_probe(us(999), |_| true), None);
        // Path 0 has chunks in flight: path 2 goes first.
        assert_eq!(s.take_probe(us(1000), |i| i != 0), Some(2));
        // Path 0 is looked at again one RTO on; path 2 one backoff on.
        assert_eq!(s.take_probe(us(1499), |_| true), None);
        assert_eq!(s.take_probe(us(1500), |_| true), Some(0));
        assert_eq!(s.take_probe(us(1500), |_| true), None);
        assert_eq!(s.take_probe(us(2000), |_| true), Some(2));
    }
}
