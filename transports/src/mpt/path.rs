//! Per-path statistics and power-of-two-choices path sampling. Whether a path is penalised
//! or due a probe is its health, kept by [`ccl_faulttol::path`].

use std::time::Duration;

use ccl_faulttol::path::PathsHealth;

use super::rng::Rng;
use super::time::Instant;

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
    /// last, good value) is avoided until a chunk on it is acknowledged again. Such a path
    /// still gets one probe per backoff period, whose answer brings it back once it heals.
    pub effective_rtt: Duration,
    /// Chunks sent on the path and neither acknowledged nor declared lost.
    pub inflight_chunks: u32,
    /// Losses attributed to the path since its last acknowledged chunk.
    pub consecutive_losses: u32,
    /// Chunks ever sent on the path (including retransmissions).
    pub chunks_sent: u64,
    /// Chunks whose latest copy was sent on the path, acknowledged.
    pub chunks_acked: u64,
    /// Chunks sent on the path and declared lost.
    pub chunks_lost: u64,
}

impl PathView {
    /// The default power-of-two-choices metric: `effective_rtt * (1 + inflight_chunks)`, the
    /// time a new chunk would take if the chunks already on the path were queued ahead of it.
    /// Comparing RTT alone herds chunks onto whichever path measured fastest last (its RTT
    /// samples lag the queue that builds on it); scaling by what is in flight spreads them.
    /// Unmeasured paths score zero and get explored first.
    pub fn score(&self) -> Duration {
        self.effective_rtt
            .saturating_mul(self.inflight_chunks.saturating_add(1))
    }
}

/// What path choice counts per path; its health is [`ccl_faulttol::path`]'s.
#[derive(Clone, Copy, Debug, Default)]
struct PathStats {
    srtt: Option<Duration>,
    /// When `srtt` last took a sample, or the path last got a chunk to refresh it.
    sampled_at: Option<Instant>,
    /// The path was stale when it got a chunk: its next sample replaces `srtt` (history that
    /// old says nothing of the path now).
    restart: bool,
    inflight: u32,
    sent: u64,
    acked: u64,
    lost: u64,
}

/// All paths of one connection.
#[derive(Debug)]
pub(crate) struct Paths {
    stats: Vec<PathStats>,
    health: PathsHealth<Instant>,
    /// Each path's NIC, for the log ([`super::MptConfig::path_nics`]).
    nics: Vec<Option<u16>>,
    /// Paths brought back into use (after losses) that have not yet delivered a chunk sent
    /// since: the first such delivery is logged, as the moment data flows on the path again
    /// (a revival by probe answers carries no data).
    awaiting_data: Vec<Option<Instant>>,
    /// No path's round-trip time goes stale before this ([`Self::take_stale`]).
    refresh_due: Option<Instant>,
}

/// How a path is named in the log: `path 3`, or `path 3 on NIC 1` when its NIC is known.
struct PathName(u16, Option<u16>);

impl std::fmt::Display for PathName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(nic) => write!(f, "path {} on NIC {nic}", self.0),
            None => write!(f, "path {}", self.0),
        }
    }
}

impl Paths {
    pub(crate) fn new(n: u16, rto: Duration, path_nics: &[u16]) -> Self {
        let nics = (0..usize::from(n))
            .map(|i| match path_nics.len() {
                0 => None,
                len => path_nics.get(i % len).copied(),
            })
            .collect();
        Paths {
            stats: vec![PathStats::default(); usize::from(n)],
            health: PathsHealth::new(n, rto),
            nics,
            awaiting_data: vec![None; usize::from(n)],
            refresh_due: None,
        }
    }

    fn name(&self, id: PathId) -> PathName {
        PathName(id.0, self.nics.get(id.index()).copied().flatten())
    }

    /// `id` is back in use at `now`: its next delivered chunk sent from then on is logged.
    fn back_in_use(&mut self, id: PathId, now: Instant) {
        if let Some(a) = self.awaiting_data.get_mut(id.index()) {
            *a = Some(now);
        }
    }

    /// A chunk of `bytes` sent on `id` at `tx` was acknowledged: the first since the path
    /// came back into use is logged with its size.
    fn first_data(&mut self, id: PathId, tx: Instant, bytes: u32) {
        let Some(a) = self.awaiting_data.get_mut(id.index()) else {
            return;
        };
        if a.is_some_and(|since| tx >= since) {
            *a = None;
            tracing::info!(
                "mpt {}: data flows again, {bytes} bytes delivered",
                self.name(id)
            );
        }
    }

    /// Whether `p` lost chunks since it last delivered one (a dead NIC's paths, say): new
    /// chunks avoid it while a path without losses is left, and it only carries probes.
    pub(crate) fn is_penalised(&self, p: PathId) -> bool {
        self.health.is_penalised(p.index())
    }

    pub(crate) fn len(&self) -> u16 {
        self.stats.len() as u16
    }

    pub(crate) fn contains(&self, p: PathId) -> bool {
        p.index() < self.stats.len()
    }

    pub(crate) fn view(&self, id: PathId) -> PathView {
        let s = self.stats.get(id.index()).copied().unwrap_or_default();
        let losses = self
            .health
            .get(id.index())
            .map_or(0, |h| h.consecutive_losses());
        let mut effective = s.srtt.unwrap_or(Duration::ZERO);
        if losses > 0 {
            let shift = losses.min(16);
            effective = effective.max(self.health.rto()).saturating_mul(1 << shift);
        }
        PathView {
            id,
            srtt: s.srtt,
            effective_rtt: effective,
            inflight_chunks: s.inflight,
            consecutive_losses: losses,
            chunks_sent: s.sent,
            chunks_acked: s.acked,
            chunks_lost: s.lost,
        }
    }

    fn stats(&mut self, id: PathId) -> Option<&mut PathStats> {
        self.stats.get_mut(id.index())
    }

    pub(crate) fn on_sent(&mut self, id: PathId) {
        if let Some(s) = self.stats(id) {
            s.inflight += 1;
            s.sent += 1;
        }
    }

    /// A chunk of `bytes` sent on `id` at `tx` was acknowledged. `unambiguous`: the chunk
    /// was sent once, so this path delivered it (an acknowledged retransmission may have
    /// arrived by an earlier copy on another path, which says nothing about this one).
    pub(crate) fn on_acked(&mut self, id: PathId, tx: Instant, unambiguous: bool, bytes: u32) {
        if let Some(s) = self.stats(id) {
            s.inflight = s.inflight.saturating_sub(1);
            s.acked += 1;
        }
        if unambiguous {
            self.delivered(id, tx);
            self.first_data(id, tx, bytes);
        }
    }

    /// Credits a delivery; a path that had losses is healthy again (logged, with the time
    /// the subscriber stamps, so a NIC's return can be read off the log).
    fn delivered(&mut self, id: PathId, tx: Instant) {
        let was = self.is_penalised(id);
        self.health.on_delivery(id.index(), tx);
        if was && !self.is_penalised(id) {
            tracing::info!("mpt {}: delivers again, back in use", self.name(id));
            // That delivery was data: [`Self::first_data`] logs it.
            self.back_in_use(id, tx);
        }
    }

    /// A chunk sent on `id` at `tx` was declared lost at `now`.
    pub(crate) fn on_lost(&mut self, id: PathId, now: Instant, tx: Instant) {
        if let Some(s) = self.stats(id) {
            s.inflight = s.inflight.saturating_sub(1);
            s.lost += 1;
        }
        let was = self.is_penalised(id);
        self.health.on_loss(id.index(), now, tx);
        if !was && self.is_penalised(id) {
            tracing::info!("mpt {}: chunk lost, penalised", self.name(id));
            self.back_in_use_cleared(id);
        }
    }

    /// A chunk sent at `tx` and declared lost was acknowledged after all (a spurious loss);
    /// it is no longer in flight, so only the delivery is credited.
    pub(crate) fn on_late_ack(&mut self, id: PathId, tx: Instant, unambiguous: bool) {
        if let Some(s) = self.stats(id) {
            s.acked += 1;
        }
        if unambiguous {
            self.delivered(id, tx);
        }
    }

    /// A path that lost chunks waits for a revival before its deliveries count as data
    /// flowing again.
    fn back_in_use_cleared(&mut self, id: PathId) {
        if let Some(a) = self.awaiting_data.get_mut(id.index()) {
            *a = None;
        }
    }

    /// An acknowledgement arrived on `id` at `now`: if the path is penalised and was probed,
    /// it works again -- back into use with its loss count cleared. Returns whether it
    /// revived.
    pub(crate) fn revive_if_probed(&mut self, id: PathId, now: Instant) -> bool {
        let revived = self.health.on_ack_received(id.index());
        if revived {
            tracing::info!("mpt {}: probe answered, back in use", self.name(id));
            self.back_in_use(id, now);
        }
        revived
    }

    /// A penalised path whose backoff has expired and that has nothing in flight: it gets
    /// the next probe, and its backoff is re-armed until an answer revives it.
    pub(crate) fn take_probe(&mut self, now: Instant) -> Option<PathId> {
        let stats = &self.stats;
        let idle = |i: usize| stats.get(i).is_some_and(|s| s.inflight == 0);
        let probe = self.health.take_probe(now, idle).map(|i| PathId(i as u16));
        if let Some(p) = probe {
            tracing::debug!("mpt {}: probed", self.name(p));
        }
        probe
    }

    pub(crate) fn on_rtt(&mut self, id: PathId, now: Instant, sample: Duration) {
        if let Some(s) = self.stats(id) {
            s.srtt = Some(match s.srtt {
                Some(old) if !s.restart => (old * 7 + sample) / 8,
                _ => sample,
            });
            s.sampled_at = Some(now);
            s.restart = false;
        }
    }

    /// A measured path without losses and with nothing in flight whose round-trip time is
    /// older than `refresh`: it should carry the next chunk, so that its time is measured
    /// again. The chooser sends new chunks only where the time is short, so a path whose
    /// time was once long (a sample taken while the host was busy) would otherwise never
    /// carry a chunk again; with two paths it is never even outscored. One chunk per path
    /// per `refresh` at most (taking it counts as a sample); none while `refresh` is zero,
    /// and never `avoid` (a retransmission's first path).
    pub(crate) fn take_stale(
        &mut self,
        now: Instant,
        refresh: Duration,
        avoid: Option<PathId>,
    ) -> Option<PathId> {
        if refresh.is_zero() || self.refresh_due.is_some_and(|due| now < due) {
            return None;
        }
        let mut due: Option<Instant> = None;
        let mut stale = None;
        for (i, s) in self.stats.iter_mut().enumerate() {
            let Some(at) = s.sampled_at else { continue };
            let avoided = avoid == Some(PathId(i as u16));
            let usable = !self.health.is_penalised(i) && !avoided;
            if stale.is_none() && usable && s.inflight == 0 && now >= at + refresh {
                s.sampled_at = Some(now);
                s.restart = true;
                stale = Some(PathId(i as u16));
            }
            // A stale path that cannot take a chunk yet is looked at again soon, not at
            // every chunk while it stays penalised or busy; one avoided by this call only, at
            // the next.
            let next = match s.sampled_at {
                Some(t) if now < t + refresh => t + refresh,
                _ if avoided => now,
                _ => now + refresh / 16,
            };
            due = Some(due.map_or(next, |d| d.min(next)));
        }
        self.refresh_due = due;
        stale
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
        let (a, b) = (PathId(skip(i) as u16), PathId(skip(j) as u16));
        let penalised = self.health.penalised();
        if penalised == 0 {
            return (a, b);
        }
        // Penalised picks are drawn again among the paths without losses, while any is left
        // (a dead NIC's half of the paths would otherwise get every chunk whose two samples
        // both landed on it -- a quarter of them -- each lost and resent after a timeout).
        let avoided_penalised = avoid.is_some_and(|p| self.is_penalised(p));
        let healthy = eligible.saturating_sub(u64::from(penalised) - u64::from(avoided_penalised));
        if healthy == 0 {
            return (a, b);
        }
        let mut redraw = |p: PathId| {
            let mut p = p;
            let mut tries = 0;
            while self.is_penalised(p) && tries < 64 {
                p = PathId(skip(rng.below(eligible)) as u16);
                tries += 1;
            }
            p
        };
        (redraw(a), redraw(b))
    }

    /// The path with the lowest score (ties: lowest id).
    pub(crate) fn best(&self) -> PathId {
        (0..self.len())
            .map(|i| self.view(PathId(i)))
            .min_by_key(|v| (v.score(), v.id))
            .map(|v| v.id)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Penalised paths (lost a chunk, none delivered since) are never sampled while a path
    /// without losses is left -- and are again once every path is penalised, or once one
    /// delivers again; `avoid` still holds.
    #[test]
    fn sampling_keeps_off_penalised_paths_while_others_remain() {
        let rto = Duration::from_micros(500);
        let mut paths = Paths::new(8, rto, &[]);
        let mut rng = Rng::new(5);
        let t = Instant::from_micros(10);
        for p in [1u16, 3, 5, 7] {
            paths.on_sent(PathId(p));
            paths.on_lost(PathId(p), t, t);
        }
        assert!(paths.is_penalised(PathId(3)) && !paths.is_penalised(PathId(2)));
        for _ in 0..2000 {
            let (a, b) = paths.sample_two(&mut rng, Some(PathId(0)));
            for x in [a, b] {
                assert!(x.0 % 2 == 0 && x != PathId(0), "{x:?}");
            }
        }
        // Path 3 delivers a chunk sent after its loss: it is sampled again.
        paths.on_sent(PathId(3));
        paths.on_acked(PathId(3), Instant::from_micros(20), true, 1);
        assert!(!paths.is_penalised(PathId(3)));
        let mut three = false;
        for _ in 0..2000 {
            let (a, b) = paths.sample_two(&mut rng, None);
            three |= a == PathId(3) || b == PathId(3);
            assert!(!paths.is_penalised(a) && !paths.is_penalised(b));
        }
        assert!(three);
        // Every path penalised: sampling goes on over all of them.
        for p in [0u16, 2, 3, 4, 6] {
            paths.on_sent(PathId(p));
            paths.on_lost(
                PathId(p),
                Instant::from_micros(30),
                Instant::from_micros(30),
            );
        }
        let mut seen = [false; 8];
        for _ in 0..2000 {
            let (a, b) = paths.sample_two(&mut rng, None);
            seen[a.index()] = true;
            seen[b.index()] = true;
        }
        assert!(seen.iter().all(|&x| x), "{seen:?}");
    }

    #[test]
    fn sampling_is_distinct_and_avoids() {
        let paths = Paths::new(4, Duration::from_micros(500), &[]);
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
        let one = Paths::new(1, Duration::from_micros(500), &[]);
        assert_eq!(
            one.sample_two(&mut rng, Some(PathId(0))),
            (PathId(0), PathId(0))
        );
        let two = Paths::new(2, Duration::from_micros(500), &[]);
        assert_eq!(
            two.sample_two(&mut rng, Some(PathId(0))),
            (PathId(1), PathId(1))
        );
    }

    #[test]
    fn losses_penalise_until_acked() {
        let mut paths = Paths::new(3, Duration::from_micros(500), &[]);
        paths.on_rtt(PathId(0), Instant::ZERO, Duration::from_micros(10));
        paths.on_rtt(PathId(1), Instant::ZERO, Duration::from_micros(20));
        paths.on_rtt(PathId(2), Instant::ZERO, Duration::from_micros(30));
        assert_eq!(paths.best(), PathId(0));
        paths.on_sent(PathId(0));
        paths.on_lost(PathId(0), Instant::ZERO, Instant::ZERO);
        assert_eq!(
            paths.view(PathId(0)).effective_rtt,
            Duration::from_micros(1000)
        );
        assert_eq!(paths.best(), PathId(1));
        paths.on_sent(PathId(0));
        // A late ack of a chunk sent no later than the loss proves nothing...
        paths.on_acked(PathId(0), Instant::ZERO, true, 1);
        assert_eq!(paths.best(), PathId(1));
        // ...one sent after it does.
        paths.on_sent(PathId(0));
        paths.on_acked(PathId(0), Instant::from_micros(1), true, 1);
        assert_eq!(paths.best(), PathId(0));
        paths.on_rtt(PathId(0), Instant::ZERO, Duration::from_micros(18));
        assert_eq!(paths.view(PathId(0)).srtt, Some(Duration::from_micros(11)));
    }

    /// A path whose one sample was long (7 ms against 30 us) gets a chunk once per refresh
    /// period while it is idle and healthy, and that chunk's sample replaces the old time;
    /// busy, penalised or never-measured paths and a zero period take none.
    #[test]
    fn a_path_with_a_stale_long_round_trip_is_measured_again() {
        let refresh = Duration::from_millis(100);
        let ms = |m: u64| Instant::from_micros(m * 1000);
        let mut paths = Paths::new(3, Duration::from_micros(500), &[]);
        paths.on_rtt(PathId(0), ms(0), Duration::from_micros(30));
        paths.on_rtt(PathId(1), ms(0), Duration::from_millis(7));
        assert_eq!(paths.take_stale(ms(50), refresh, None), None);
        paths.on_rtt(PathId(0), ms(99), Duration::from_micros(30));
        assert_eq!(paths.take_stale(ms(100), refresh, None), Some(PathId(1)));
        assert_eq!(
            paths.take_stale(ms(101), refresh, None),
            None,
            "one per period"
        );
        assert_eq!(paths.take_stale(ms(100), Duration::ZERO, None), None);
        // Busy: path 1 waits for its chunk's answer; path 0 (stale by now) goes instead.
        paths.on_sent(PathId(1));
        assert_eq!(paths.take_stale(ms(200), refresh, None), Some(PathId(0)));
        assert_eq!(paths.take_stale(ms(250), refresh, None), None);
        // Penalised: only probes test it.
        paths.on_lost(PathId(1), ms(250), ms(100));
        assert_eq!(paths.take_stale(ms(400), refresh, None), Some(PathId(0)));
        assert_eq!(paths.take_stale(ms(450), refresh, None), None);
        paths.on_sent(PathId(1));
        paths.on_acked(PathId(1), ms(460), true, 1);
        assert!(!paths.is_penalised(PathId(1)));
        // A retransmission avoiding path 1 does not use up its turn.
        let avoid = Some(PathId(1));
        assert_eq!(paths.take_stale(ms(460), refresh, avoid), None);
        assert_eq!(paths.take_stale(ms(460), refresh, None), Some(PathId(1)));
        // The refreshed chunk's sample replaces the stale time; later ones average with it.
        paths.on_rtt(PathId(1), ms(461), Duration::from_micros(40));
        assert_eq!(paths.view(PathId(1)).srtt, Some(Duration::from_micros(40)));
        paths.on_rtt(PathId(1), ms(462), Duration::from_micros(48));
        assert_eq!(paths.view(PathId(1)).srtt, Some(Duration::from_micros(41)));
        assert_eq!(paths.view(PathId(2)).srtt, None, "path 2 never measured");
    }

    #[test]
    fn dead_path_is_probed_with_backoff() {
        let rto = Duration::from_micros(500);
        let mut paths = Paths::new(2, rto, &[]);
        paths.on_sent(PathId(1));
        paths.on_lost(PathId(1), Instant::ZERO, Instant::ZERO);
        // One loss: probe after 2 RTOs, then not again while the probe is unresolved.
        assert_eq!(paths.take_probe(Instant::from_micros(999)), None);
        assert_eq!(
            paths.take_probe(Instant::from_micros(1000)),
            Some(PathId(1))
        );
        assert_eq!(paths.take_probe(Instant::from_micros(1001)), None);
        // The probe is lost too: the backoff doubles (capped at 4 RTOs).
        paths.on_sent(PathId(1));
        paths.on_lost(
            PathId(1),
            Instant::from_micros(1200),
            Instant::from_micros(1000),
        );
        assert_eq!(paths.take_probe(Instant::from_micros(3199)), None);
        assert_eq!(
            paths.take_probe(Instant::from_micros(3200)),
            Some(PathId(1))
        );
        // A probe that gets through heals the path.
        paths.on_sent(PathId(1));
        paths.on_acked(PathId(1), Instant::from_micros(3200), true, 1);
        assert_eq!(paths.view(PathId(1)).consecutive_losses, 0);
        assert_eq!(paths.take_probe(Instant::from_micros(99_999)), None);
    }

    /// After a revival by a probe answer (no data), the first chunk sent from then on and
    /// acknowledged is the moment data flows again; a chunk sent before the revival (still
    /// in flight through the outage) is not, nor is a retransmission, nor anything after.
    #[test]
    fn data_flows_again_with_the_first_chunk_sent_after_a_revival() {
        let rto = Duration::from_micros(500);
        let mut paths = Paths::new(4, rto, &[0, 1]);
        assert_eq!(paths.name(PathId(3)).to_string(), "path 3 on NIC 1");
        assert_eq!(
            Paths::new(2, rto, &[]).name(PathId(1)).to_string(),
            "path 1"
        );
        let t = Instant::from_micros;
        paths.on_sent(PathId(1));
        paths.on_lost(PathId(1), t(100), t(0));
        assert_eq!(paths.awaiting_data[1], None);
        assert_eq!(paths.take_probe(t(1100)), Some(PathId(1)));
        assert!(paths.revive_if_probed(PathId(1), t(1200)));
        assert_eq!(paths.awaiting_data[1], Some(t(1200)));
        // Sent at 50, before the revival: not yet.
        paths.on_acked(PathId(1), t(50), true, 1000);
        assert_eq!(paths.awaiting_data[1], Some(t(1200)));
        // A retransmission sent after it: ambiguous, not yet.
        paths.on_sent(PathId(1));
        paths.on_acked(PathId(1), t(1300), false, 1000);
        assert_eq!(paths.awaiting_data[1], Some(t(1200)));
        paths.on_sent(PathId(1));
        paths.on_acked(PathId(1), t(1300), true, 1000);
        assert_eq!(paths.awaiting_data[1], None);
        // A path revived by a delivery (data) is marked at that chunk's send time.
        paths.on_sent(PathId(2));
        paths.on_lost(PathId(2), t(2000), t(1900));
        paths.on_sent(PathId(2));
        paths.delivered(PathId(2), t(2100));
        assert_eq!(paths.awaiting_data[2], Some(t(2100)));
    }
}
