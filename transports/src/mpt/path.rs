//! Per-path state and power-of-two-choices path sampling.

use std::time::Duration;

use super::rng::Rng;

/// Index of a path of a connection (`0..num_paths`). On UDP: a source port; on verbs: a QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u16);

impl PathId {
    /// The path as an index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// What the path selector (and the `on_select_path` hook) knows about a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathView {
    /// The path.
    pub id: PathId,
    /// Smoothed round-trip time (EWMA, gain 1/8), `None` before the first sample.
    pub srtt: Option<Duration>,
    /// The round-trip time used for choosing: `srtt` (zero while unmeasured, so unexplored
    /// paths get tried), raised to at least the RTO and doubled per consecutive loss
    /// attributed to the path, so a blackholed path (whose `srtt` would otherwise stay at its
    /// last, good value) is avoided until a chunk on it is acknowledged again.
    pub effective_rtt: Duration,
    /// Chunks sent on the path and neither acknowledged nor declared lost.
    pub inflight_chunks: u32,
    /// Losses attributed to the path since its last acknowledged chunk.
    pub consecutive_losses: u32,
    /// Chunks ever sent on the path (including retransmissions).
    pub chunks_sent: u64,
    /// Chunks sent on the path and acknowledged.
    pub chunks_acked: u64,
    /// Chunks sent on the path and declared lost.
    pub chunks_lost: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct PathState {
    srtt: Option<Duration>,
    inflight: u32,
    consecutive_losses: u32,
    sent: u64,
    acked: u64,
    lost: u64,
}

/// All paths of one connection.
#[derive(Debug)]
pub(crate) struct Paths {
    states: Vec<PathState>,
    rto: Duration,
}

impl Paths {
    pub(crate) fn new(n: u16, rto: Duration) -> Self {
        Paths { states: vec![PathState::default(); usize::from(n)], rto }
    }

    pub(crate) fn len(&self) -> u16 {
        self.states.len() as u16
    }

    pub(crate) fn contains(&self, p: PathId) -> bool {
        p.index() < self.states.len()
    }

    pub(crate) fn view(&self, id: PathId) -> PathView {
        let s = self.states.get(id.index()).copied().unwrap_or_default();
        let mut effective = s.srtt.unwrap_or(Duration::ZERO);
        if s.consecutive_losses > 0 {
            let shift = s.consecutive_losses.min(16);
            effective = effective.max(self.rto).saturating_mul(1 << shift);
        }
        PathView {
            id,
            srtt: s.srtt,
            effective_rtt: effective,
            inflight_chunks: s.inflight,
            consecutive_losses: s.consecutive_losses,
            chunks_sent: s.sent,
            chunks_acked: s.acked,
            chunks_lost: s.lost,
        }
    }

    fn state(&mut self, id: PathId) -> Option<&mut PathState> {
        self.states.get_mut(id.index())
    }

    pub(crate) fn on_sent(&mut self, id: PathId) {
        if let Some(s) = self.state(id) {
            s.inflight += 1;
            s.sent += 1;
        }
    }

    /// A chunk sent on `id` was acknowledged (the path works in the forward direction).
    pub(crate) fn on_acked(&mut self, id: PathId) {
        if let Some(s) = self.state(id) {
            s.inflight = s.inflight.saturating_sub(1);
            s.acked += 1;
            s.consecutive_losses = 0;
        }
    }

    /// A chunk sent on `id` was declared lost.
    pub(crate) fn on_lost(&mut self, id: PathId) {
        if let Some(s) = self.state(id) {
            s.inflight = s.inflight.saturating_sub(1);
            s.lost += 1;
            s.consecutive_losses = s.consecutive_losses.saturating_add(1);
        }
    }

    /// A chunk declared lost was acknowledged after all (a spurious loss); it is no longer
    /// in flight, so only the delivery is credited.
    pub(crate) fn on_late_ack(&mut self, id: PathId) {
        if let Some(s) = self.state(id) {
            s.acked += 1;
            s.consecutive_losses = 0;
        }
    }

    pub(crate) fn on_rtt(&mut self, id: PathId, sample: Duration) {
        if let Some(s) = self.state(id) {
            s.srtt = Some(match s.srtt {
                None => sample,
                Some(old) => (old * 7 + sample) / 8,
            });
        }
    }

    /// Two distinct random paths (the same one twice only when fewer than two are
    /// eligible), never `avoid` unless it is the only path.
    pub(crate) fn sample_two(&self, rng: &mut Rng, avoid: Option<PathId>) -> (PathId, PathId) {
        let n = u64::from(self.len());
        let avoid = avoid.filter(|a| n > 1 && self.contains(*a));
        let eligible = if avoid.is_some() { n - 1 } else { n };
        let skip = |x: u64| match avoid {
            Some(a) if x >= u64::from(a.0) => x + 1,
            _ => x,
        };
        let i = rng.below(eligible);
        let j = if eligible > 1 {
            let j = rng.below(eligible - 1);
            if j >= i {
                j + 1
            } else {
                j
            }
        } else {
            i
        };
        (PathId(skip(i) as u16), PathId(skip(j) as u16))
    }

    /// The path with the lowest effective RTT (ties: fewest in flight, then lowest id).
    pub(crate) fn best(&self) -> PathId {
        (0..self.len())
            .map(|i| self.view(PathId(i)))
            .min_by_key(|v| (v.effective_rtt, v.inflight_chunks, v.id))
            .map(|v| v.id)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_distinct_and_avoids() {
        let paths = Paths::new(4, Duration::from_micros(500));
        let mut rng = Rng::new(3);
        let mut seen = [0u32; 4];
        for _ in 0..2000 {
            let (a, b) = paths.sample_two(&mut rng, Some(PathId(2)));
            assert_ne!(a, b);
            assert_ne!(a, PathId(2));
            assert_ne!(b, PathId(2));
            seen[a.index()] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0 && seen[3] > 0 && seen[2] == 0);
        let one = Paths::new(1, Duration::from_micros(500));
        assert_eq!(one.sample_two(&mut rng, Some(PathId(0))), (PathId(0), PathId(0)));
        let two = Paths::new(2, Duration::from_micros(500));
        assert_eq!(two.sample_two(&mut rng, Some(PathId(0))), (PathId(1), PathId(1)));
    }

    #[test]
    fn losses_penalise_until_acked() {
        let mut paths = Paths::new(3, Duration::from_micros(500));
        paths.on_rtt(PathId(0), Duration::from_micros(10));
        paths.on_rtt(PathId(1), Duration::from_micros(20));
        paths.on_rtt(PathId(2), Duration::from_micros(30));
        assert_eq!(paths.best(), PathId(0));
        paths.on_sent(PathId(0));
        paths.on_lost(PathId(0));
        assert_eq!(paths.view(PathId(0)).effective_rtt, Duration::from_micros(1000));
        assert_eq!(paths.best(), PathId(1));
        paths.on_sent(PathId(0));
        paths.on_acked(PathId(0));
        assert_eq!(paths.best(), PathId(0));
        paths.on_rtt(PathId(0), Duration::from_micros(18));
        assert_eq!(paths.view(PathId(0)).srtt, Some(Duration::from_micros(11)));
    }
}
