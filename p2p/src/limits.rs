//! Whether this GPU's clocks are held at its power or thermal limit, sampled sparingly.
//!
//! At the limit the GPU's compute runs on whatever power is left, so data movement that adds
//! bandwidth at a cost in power is a bad trade there: the host path (a share of large direct
//! transfers through pinned host memory over PCIe) lifted send/receive beside a bf16 GEMM
//! loop from 361 to 390 GB/s but cost the GEMM 7.0 -> 8.3-8.5% of its speed (measured
//! 2026-11-23 with `tests/gpu/device_overlap_ab.sh`). The decision logic here takes time and
//! samples as arguments (no NVML, no clock), so it is tested without a GPU.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Samples at most every `every`; reports "limited" from a limited sample until `hold` after
/// the last one (the power controller flips the cap's bit within milliseconds while a
/// compute loop runs, and a transfer decided on one unlucky sample would pay for it).
#[derive(Debug)]
pub(crate) struct LimitWatch {
    every: Duration,
    hold: Duration,
    state: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    sampled: Option<Instant>,
    limited: Option<Instant>,
}

impl LimitWatch {
    pub fn new(every: Duration, hold: Duration) -> LimitWatch {
        LimitWatch {
            every,
            hold,
            state: Mutex::new(Seen::default()),
        }
    }

    /// Whether the GPU counts as limited at `now`; `sample` reads the limiters (None: unknown,
    /// which counts as not limited) and runs only when the last sample is `every` old.
    pub fn limited(&self, now: Instant, sample: impl FnOnce() -> Option<bool>) -> bool {
        let mut s = self.state.lock();
        let due = match s.sampled {
            Some(t) => now.saturating_duration_since(t) >= self.every,
            None => true,
        };
        if due {
            s.sampled = Some(now);
            if sample() == Some(true) {
                s.limited = Some(now);
            }
        }
        s.limited
            .is_some_and(|t| now.saturating_duration_since(t) < self.hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn samples_at_most_once_per_interval() {
        let w = LimitWatch::new(10 * MS, 100 * MS);
        let t0 = Instant::now();
        let mut calls = 0;
        for k in 0..20u32 {
            w.limited(t0 + k * MS, || {
                calls += 1;
                Some(false)
            });
        }
        // 0..19 ms: samples at 0 and 10 ms only.
        assert_eq!(calls, 2);
    }

    #[test]
    fn a_limited_sample_holds_just_until_the_hold_runs_out() {
        let w = LimitWatch::new(10 * MS, 100 * MS);
        let t0 = Instant::now();
        assert!(w.limited(t0, || Some(true)));
        // Later samples say "not limited": the hold keeps the answer for 100 ms after t0.
        assert!(w.limited(t0 + 50 * MS, || Some(false)));
        assert!(w.limited(t0 + 99 * MS, || Some(false)));
        assert!(!w.limited(t0 + 100 * MS, || Some(false)));
    }

    #[test]
    fn unknown_or_unlimited_samples_never_count_as_limited() {
        let w = LimitWatch::new(MS, 100 * MS);
        let t0 = Instant::now();
        for k in 0..5u32 {
            assert!(!w.limited(t0 + k * 2 * MS, || None));
            assert!(!w.limited(t0 + (k * 2 + 1) * MS, || Some(false)));
        }
    }

    #[test]
    fn a_new_limited_sample_extends_the_hold() {
        let w = LimitWatch::new(10 * MS, 100 * MS);
        let t0 = Instant::now();
        assert!(w.limited(t0, || Some(true)));
        assert!(w.limited(t0 + 60 * MS, || Some(true)));
        assert!(w.limited(t0 + 150 * MS, || Some(false)));
        assert!(!w.limited(t0 + 160 * MS, || Some(false)));
    }
}
