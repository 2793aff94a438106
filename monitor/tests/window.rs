//! The sliding-window analysis against exact expectations: throughput, baseline, anomaly,
//! recovery and stall thresholds with pairs of cases either side of each boundary, and
//! replays of batched acknowledgements (steady, and with a 4x drop for 300 ms).

use ccl_monitor::window::{Event, Key, WindowConfig, Windows};
use ccl_monitor::{CollId, Engine, Op, Unit, Work};
use proptest::prelude::*;

const COLL: CollId = CollId {
    comm: 0xc0ffee,
    op: Op::AllReduce,
    seq: 42,
};

fn work(ts_ns: u64, bytes: u64) -> Work {
    Work {
        ts_ns,
        bytes,
        peer: 3,
        path: 1,
        nic: 2,
        engine: Engine::Mpt,
        unit: Unit::Chunk,
        coll: COLL,
    }
}

/// A stream keeping one chunk in flight: each completion is followed at once by the next
/// post, and time is ticked after each.
struct Stream {
    w: Windows,
    t: u64,
    events: Vec<Event>,
}

impl Stream {
    fn new(cfg: WindowConfig) -> Self {
        let mut w = Windows::new(cfg);
        w.on_post(&work(0, 0));
        Stream {
            w,
            t: 0,
            events: Vec::new(),
        }
    }

    /// `n` completions of `bytes`, `interval` ns apart.
    fn run(&mut self, n: usize, bytes: u64, interval: u64) -> &mut Self {
        for _ in 0..n {
            self.t += interval;
            self.w.on_post(&work(self.t, bytes));
            self.w.on_complete(&work(self.t, bytes), &mut self.events);
            self.w.tick(self.t, &mut self.events);
        }
        self
    }

    /// The events of the peer key, by kind (every key sees the same stream here; NICs and
    /// paths, judged by their share of it, never drop).
    fn of(&self, kind: fn(&Event) -> bool) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.key() == Key::Peer(3) && kind(e))
            .copied()
            .collect()
    }

    fn tput(&self) -> f64 {
        self.w.snapshot()[1].tput_bps
    }
}

fn is_anomaly(e: &Event) -> bool {
    matches!(e, Event::Anomaly(_))
}
fn is_recovered(e: &Event) -> bool {
    matches!(e, Event::Recovered(_))
}
fn is_stall(e: &Event) -> bool {
    matches!(e, Event::Stall(_))
}
fn is_sample(e: &Event) -> bool {
    matches!(e, Event::Sample(_))
}

/// Window 8, drop 0.5 (recover 0.75), no minimum span, the baseline frozen at the first
/// full window (one estimate, never replaced).
fn frozen() -> WindowConfig {
    WindowConfig {
        baseline_len: 1,
        baseline_every_ns: u64::MAX,
        merge_ns: 0,
        resolution_ns: 10_000,
        ..WindowConfig::new(8, 0.5, 1_000_000).with_min_span(0)
    }
}

/// `window` completions, no minimum span, the median of the last 4 estimates (every window).
fn tracking(window: usize, stall_after_ns: u64) -> WindowConfig {
    WindowConfig {
        baseline_len: 4,
        baseline_every_ns: 0,
        merge_ns: 0,
        ..WindowConfig::new(window, 0.5, stall_after_ns).with_min_span(0)
    }
}

#[test]
fn window_throughput_is_bytes_after_the_oldest_over_the_span() {
    let mut s = Stream::new(frozen());
    // 1000 B every 1000 ns: 1 B/ns.
    s.run(20, 1000, 1000);
    assert_eq!(s.tput(), 1e9);
    // One 8000 B chunk after 1000 ns: the window holds 7 x 1000 B + 8000 B over 8000 ns.
    s.run(1, 8000, 1000);
    assert_eq!(s.tput(), 15_000.0 * 1e9 / 8000.0);
    let keys: Vec<Key> = s.w.snapshot().iter().map(|k| k.key).collect();
    assert_eq!(keys, [Key::Peer(3), Key::Path(1), Key::Nic(2)]);
}

/// Baseline 1e9 B/s, threshold 0.5e9: eight slow intervals of T ns give 1000/T B/ns.
#[test]
fn anomaly_threshold_boundary_pairs() {
    // (slow interval, anomalies)
    let table = [(1999, 0), (2000, 0), (2001, 1), (4000, 1)];
    for (slow, want) in table {
        let mut s = Stream::new(frozen());
        s.run(20, 1000, 1000);
        let switch = s.t;
        s.run(30, 1000, slow);
        let got = s.of(is_anomaly);
        assert_eq!(got.len(), want, "slow interval {slow}");
        if let Some(Event::Anomaly(a)) = got.first() {
            assert_eq!(a.baseline_bps, 1e9);
            assert!(a.tput_bps < 0.5e9);
            assert_eq!(
                (a.culprit.coll, a.culprit.peer, a.culprit.path),
                (COLL, 3, 1)
            );
            if slow == 2001 {
                // Only a window of eight slow intervals is below: 8000/16008 < 0.5.
                assert_eq!(a.ts_ns, switch + 8 * 2001);
            } else {
                // 8000 B over 5 x 1000 + 3 x 4000 ns = 0.47 B/ns: the third crosses (the
                // bound while waiting for it, 9000 B over 18000 ns, is not below).
                assert_eq!(a.ts_ns, switch + 3 * 4000);
            }
        }
    }
}

/// After an anomaly at a quarter of the baseline, recovery needs 0.75e9 B/s.
#[test]
fn recovery_threshold_boundary_pairs() {
    // (fast interval after the drop, recoveries)
    let table = [(1333, 1), (1334, 0), (1000, 1)];
    for (fast, want) in table {
        let mut s = Stream::new(frozen());
        s.run(20, 1000, 1000).run(20, 1000, 4000);
        assert_eq!(s.of(is_anomaly).len(), 1);
        let back = s.t;
        s.run(30, 1000, fast);
        let got = s.of(is_recovered);
        assert_eq!(got.len(), want, "fast interval {fast}");
        if let Some(Event::Recovered(r)) = got.first() {
            assert!(r.ts_ns > back && r.tput_bps >= 0.75e9, "{r:?}");
        }
        assert_eq!(s.of(is_anomaly).len(), 1, "no second anomaly");
    }
}

/// stall_after 1 ms: a gap of exactly 1 ms is not a stall, 1 ns more is.
#[test]
fn stall_boundary_pairs() {
    let table = [(999_999, 0), (1_000_000, 0), (1_000_001, 1), (5_000_000, 1)];
    for (gap, want) in table {
        let mut w = Windows::new(frozen());
        let mut out = Vec::new();
        w.on_post(&work(5000, 100));
        w.tick(5000 + gap, &mut out);
        if want == 1 {
            w.tick(5000 + gap + 1, &mut out);
        }
        let stalls: Vec<_> = out.iter().filter(|e| is_stall(e)).collect();
        assert_eq!(stalls.len(), want * 3, "gap {gap}: one per key, once");
        if let Some(Event::Stall(s)) = stalls.first() {
            assert_eq!((s.key, s.idle_ns, s.outstanding), (Key::Peer(3), gap, 1));
            assert_eq!(
                (s.culprit.coll, s.culprit.path, s.culprit.nic),
                (COLL, 1, 2)
            );
        }
    }
}

#[test]
fn no_stall_without_outstanding_work_and_again_after_progress() {
    let mut w = Windows::new(frozen());
    let mut out = Vec::new();
    w.on_post(&work(0, 100));
    w.on_complete(&work(10, 100), &mut out);
    w.tick(10_000_000, &mut out);
    assert!(!out.iter().any(is_stall), "idle is not stalled");
    w.on_post(&work(10_000_000, 100));
    w.tick(11_000_001, &mut out);
    w.on_complete(&work(11_000_002, 100), &mut out);
    w.on_post(&work(11_000_002, 100));
    w.tick(12_000_002, &mut out);
    w.tick(12_000_003, &mut out);
    let at: Vec<u64> = out
        .iter()
        .filter(|e| is_stall(e))
        .map(Event::ts_ns)
        .collect();
    assert_eq!(
        at,
        [11_000_001; 3]
            .into_iter()
            .chain([12_000_003; 3])
            .collect::<Vec<_>>()
    );
    assert_eq!(w.snapshot()[0].stalls, 2);
}

/// Samples: one per key per 10 us bucket, from the first completion with an interval.
#[test]
fn samples_at_most_one_per_ten_microseconds() {
    let mut s = Stream::new(frozen());
    s.run(10, 300, 3000);
    let at: Vec<u64> = s.of(is_sample).iter().map(Event::ts_ns).collect();
    assert_eq!(at, [6000, 12_000, 21_000, 30_000]);
    if let Some(Event::Sample(x)) = s.of(is_sample).last() {
        assert_eq!((x.bytes, x.completions, x.tput_bps), (3000, 10, 1e8));
    }
}

/// Time with nothing outstanding is not in the span: bursts separated by long pauses keep
/// their rate.
#[test]
fn idle_time_between_operations_is_not_slowness() {
    let mut w = Windows::new(tracking(8, 1_000_000));
    let mut out = Vec::new();
    let mut t = 0;
    for _op in 0..10 {
        t += 50_000_000;
        for _ in 0..5 {
            w.on_post(&work(t, 1000));
            t += 1000;
            w.on_complete(&work(t, 1000), &mut out);
            w.tick(t, &mut out);
        }
    }
    assert!(!out.iter().any(|e| is_anomaly(e) || is_stall(e)), "{out:?}");
    assert_eq!(w.snapshot()[0].tput_bps, 1e9);
    assert_eq!(w.snapshot()[0].baseline_bps, 1e9);
}

/// Two NICs (paths 0 and 1 on NICs 0 and 1), each serving 32 KiB chunks back to back (16
/// kept outstanding) at `rate(nic, t)` bytes per second, acknowledged the way the multipath
/// transport sees it: in rounds 20-150 us apart (pseudo-random), each round's chunks in one
/// to three groups a few microseconds apart; no round runs in `pause` (the host did not
/// schedule the engine). Runs until `end_ns`; returns every key's alerts.
fn batched_acks(
    cfg: WindowConfig,
    end_ns: u64,
    pause: std::ops::Range<u64>,
    rate: impl Fn(u16, u64) -> f64,
) -> Vec<Event> {
    batched_acks_of(32 << 10, cfg, end_ns, pause, rate)
}

/// [`batched_acks`] with chunks of `chunk` bytes.
fn batched_acks_of(
    chunk: u64,
    cfg: WindowConfig,
    end_ns: u64,
    pause: std::ops::Range<u64>,
    rate: impl Fn(u16, u64) -> f64,
) -> Vec<Event> {
    let on = |nic: u16, ts_ns: u64| Work {
        path: nic,
        nic,
        ..work(ts_ns, chunk)
    };
    let mut w = Windows::new(cfg);
    let mut out = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |lo: u64, hi: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        lo + seed % (hi - lo + 1)
    };
    for nic in 0..2 {
        for _ in 0..16 {
            w.on_post(&on(nic, 0));
        }
    }
    // When each NIC finishes its oldest chunk in flight.
    let mut due = [0, 1].map(|nic| chunk as f64 * 1e9 / rate(nic, 0));
    let mut round = 0;
    while round < end_ns {
        round += next(20_000, 150_000);
        if pause.contains(&round) {
            continue;
        }
        let mut t = round;
        // The round's acknowledgements in the order the chunks finished, either NIC.
        loop {
            let nic = u16::from(due[1] < due[0]);
            let d = &mut due[usize::from(nic)];
            if *d > round as f64 {
                break;
            }
            // A new group of acknowledgements now and then, within the round.
            if next(0, 3) == 0 {
                t += next(1_000, 3_000);
            }
            w.on_complete(&on(nic, t), &mut out);
            w.on_post(&on(nic, t));
            *d += chunk as f64 * 1e9 / rate(nic, *d as u64);
        }
        w.tick(t, &mut out);
    }
    out.retain(|e| !is_sample(e));
    out
}

const GBPS2: f64 = 2e9;

fn of_key(events: &[Event], key: Key) -> Vec<Event> {
    events.iter().filter(|e| e.key() == key).copied().collect()
}

#[test]
fn batched_acks_at_a_steady_rate_raise_nothing() {
    for window in [1, 8, 32] {
        let cfg = WindowConfig::new(window, 0.5, 100_000_000);
        let events = batched_acks(cfg, 1_000_000_000, 0..0, |_, _| GBPS2);
        assert_eq!(events, [], "window {window}");
    }
}

#[test]
fn batched_acks_baseline_stays_at_the_link_rate() {
    let mut w = Windows::new(WindowConfig::new(8, 0.5, 100_000_000));
    let mut out = Vec::new();
    // One chunk stays outstanding throughout, so all of it is busy time.
    w.on_post(&work(0, 32 << 10));
    for k in 1..=20_000u64 {
        let t = k / 8 * 131_072 + k % 8 * 1000;
        w.on_post(&work(t, 32 << 10));
        w.on_complete(&work(t, 32 << 10), &mut out);
        w.tick(t, &mut out);
    }
    // Eight 32 KiB chunks every 131072 ns: 2 GB/s, acknowledged 1 us apart. The NIC and
    // path carry all of the traffic: with nothing to compare them to, they have no baseline.
    let snap = w.snapshot();
    assert!(
        (snap[0].baseline_bps / GBPS2 - 1.0).abs() < 0.05,
        "{:?}",
        snap[0]
    );
    for k in snap {
        assert_eq!(k.anomalies, 0);
        assert!(
            matches!(k.key, Key::Peer(_)) || k.baseline_bps == 0.0,
            "{k:?}"
        );
    }
}

/// NIC 1 at a quarter of its rate from 500 ms to 800 ms: one anomaly within 1 ms of the
/// drop and one recovery within 1 ms of the end, on NIC 1 and its path, nothing on NIC 0;
/// the peer (5/8 of its rate) is not below half.
#[test]
fn batched_acks_with_a_quarter_rate_for_300_ms_alarm_once_and_recover_once() {
    let (on, off) = (500_000_000u64, 800_000_000u64);
    for window in [1, 8, 32] {
        let cfg = WindowConfig::new(window, 0.5, 100_000_000);
        let rate = |nic, t| {
            if nic == 1 && (on..off).contains(&t) {
                GBPS2 / 4.0
            } else {
                GBPS2
            }
        };
        let events = batched_acks(cfg, 1_000_000_000, 0..0, rate);
        for key in [Key::Nic(1), Key::Path(1)] {
            let got = of_key(&events, key);
            let [Event::Anomaly(a), Event::Recovered(r)] = got[..] else {
                panic!("window {window}, {key:?}: {got:?}");
            };
            assert!(
                a.ts_ns > on && a.ts_ns - on <= 1_000_000,
                "window {window}: {a:?}"
            );
            assert!(
                r.ts_ns > off && r.ts_ns - off <= 1_000_000,
                "window {window}: {r:?}"
            );
            assert!(a.tput_bps < 0.5 * a.baseline_bps && r.tput_bps >= 0.75 * r.baseline_bps);
            eprintln!(
                "window {window}, {key:?}: anomaly +{} us, recovery +{} us",
                (a.ts_ns - on) / 1000,
                (r.ts_ns - off) / 1000
            );
        }
        assert_eq!(events.len(), 4, "window {window}: {events:?}");
    }
}

/// The same drop with 128 KiB chunks: 15 a millisecond per NIC, under 4 once NIC 1 slows, so
/// a window of 32 completions reaches back 8 ms into the drop (it alarmed +2.97 ms after it);
/// its latest millisecond of busy time sees the drop as soon as a window of 1 does.
#[test]
fn large_chunks_a_quarter_rate_alarms_within_1_ms_at_every_window() {
    let (on, off) = (500_000_000u64, 800_000_000u64);
    for window in [1, 8, 32] {
        let cfg = WindowConfig::new(window, 0.5, 100_000_000);
        let steady = batched_acks_of(128 << 10, cfg, 1_000_000_000, 0..0, |_, _| GBPS2);
        assert_eq!(steady, [], "window {window}");
        let rate = |nic, t| {
            if nic == 1 && (on..off).contains(&t) {
                GBPS2 / 4.0
            } else {
                GBPS2
            }
        };
        let events = batched_acks_of(128 << 10, cfg, 1_000_000_000, 0..0, rate);
        for key in [Key::Nic(1), Key::Path(1)] {
            let got = of_key(&events, key);
            let [Event::Anomaly(a), Event::Recovered(r)] = got[..] else {
                panic!("window {window}, {key:?}: {got:?}");
            };
            assert!(
                a.ts_ns > on && a.ts_ns - on <= 1_000_000,
                "window {window}: {a:?}"
            );
            assert!(r.ts_ns > off, "window {window}: {r:?}");
            eprintln!(
                "128 KiB, window {window}, {key:?}: anomaly +{} us, recovery +{} us",
                (a.ts_ns - on) / 1000,
                (r.ts_ns - off) / 1000
            );
        }
        assert_eq!(events.len(), 4, "window {window}: {events:?}");
    }
    // Judged on its 32 completions alone, the window sees it 2 ms later.
    let cfg = WindowConfig {
        early: false,
        ..WindowConfig::new(32, 0.5, 100_000_000)
    };
    let rate = |nic, t| match nic == 1 && (on..off).contains(&t) {
        true => GBPS2 / 4.0,
        false => GBPS2,
    };
    let events = batched_acks_of(128 << 10, cfg, 1_000_000_000, 0..0, rate);
    let a = of_key(&events, Key::Nic(1))[0];
    assert!(
        matches!(a, Event::Anomaly(_)) && a.ts_ns() - on > 2_000_000,
        "{a:?}"
    );
}

/// The engine not scheduled for 2 ms (no acknowledgements on either NIC, then all at once):
/// the peer's rate fell, and it says so; neither NIC fell behind the other.
#[test]
fn a_host_pause_is_no_nics_fault() {
    for window in [1, 8, 32] {
        let cfg = WindowConfig::new(window, 0.5, 100_000_000);
        let events = batched_acks(cfg, 1_000_000_000, 500_000_000..502_000_000, |_, _| GBPS2);
        let peer = of_key(&events, Key::Peer(3));
        assert!(
            matches!(peer[..], [Event::Anomaly(_), Event::Recovered(_)]),
            "window {window}: {peer:?}"
        );
        assert_eq!(events.len(), 2, "window {window}: {events:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A constant rate never alarms, and the window reads that rate exactly.
    #[test]
    fn constant_rate_reads_exactly_and_never_alarms(
        bytes in 1u64..(1 << 20), interval in 100u64..100_000, window in 1usize..32,
        n in 4usize..100,
    ) {
        let mut s = Stream::new(tracking(window, 10_000_000));
        s.run(5 * (window + 1) + n, bytes, interval);
        let want = bytes as f64 * 1e9 / interval as f64;
        prop_assert!((s.tput() - want).abs() <= want * 1e-12);
        prop_assert!((s.w.snapshot()[0].baseline_bps - want).abs() <= want * 1e-12);
        prop_assert!(s.of(|e| !is_sample(e)).is_empty());
    }

    /// A drop to at most 0.4 of the rate alarms exactly once, within one window of slow
    /// completions, and recovers exactly once after the rate returns.
    #[test]
    fn drop_alarms_once_and_recovers_once(
        bytes in 1u64..(1 << 20), interval in 100u64..100_000, window in 1usize..=16,
        factor in 0.05f64..=0.4, extra in 0usize..40,
    ) {
        let slow = (interval as f64 / factor).ceil() as u64;
        let mut s = Stream::new(tracking(window, u64::MAX));
        s.run(2 * window + 4, bytes, interval);
        let switch = s.t;
        s.run(window + extra, bytes, slow);
        let back = s.t;
        s.run(2 * window, bytes, interval);
        let anomalies = s.of(is_anomaly);
        let recoveries = s.of(is_recovered);
        prop_assert_eq!(anomalies.len(), 1);
        prop_assert_eq!(recoveries.len(), 1);
        let at = anomalies[0].ts_ns();
        prop_assert!(at > switch && at <= switch + window as u64 * slow, "{} {}", at, switch);
        prop_assert!(recoveries[0].ts_ns() > back);
    }

    /// A single gap alarms as a stall iff it is longer than stall_after.
    #[test]
    fn stall_iff_gap_exceeds_stall_after(stall in 1u64..1_000_000_000, gap_frac in 0.0f64..2.0) {
        let gap = (stall as f64 * gap_frac) as u64;
        let mut w = Windows::new(WindowConfig::new(8, 0.5, stall));
        let mut out = Vec::new();
        w.on_post(&work(1000, 1));
        w.tick(1000 + gap, &mut out);
        prop_assert_eq!(out.iter().filter(|e| is_stall(e)).count(), if gap > stall { 3 } else { 0 });
    }
}
