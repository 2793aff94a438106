//! A cheap monotonic nanosecond clock for timestamping every work request.
//!
//! Reading `Instant` costs a vDSO call (tens of nanoseconds); the monitor reads the clock
//! twice per work request, so on x86_64 with an invariant TSC it reads the TSC instead and
//! scales it by a factor measured against `Instant` once at start.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the TSC is measured against `Instant` at start. Long enough that the 30-odd
/// nanoseconds either read may be off by leave the factor within about 1e-5.
const CALIBRATION: Duration = Duration::from_millis(4);

/// Fraction bits of the fixed-point nanoseconds-per-tick factor.
const SHIFT: u32 = 32;

/// A monotonic clock counting nanoseconds from its creation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    source: Source,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Instant,
    /// Nanoseconds are `(tsc - tsc0) * mult >> SHIFT`.
    Tsc {
        tsc0: u64,
        mult: u64,
    },
}

impl Clock {
    /// The TSC where it is usable, `Instant` otherwise. Spends [`CALIBRATION`] measuring.
    pub fn new() -> Clock {
        if tsc_usable() {
            if let Some(c) = Self::calibrated(CALIBRATION) {
                return c;
            }
            tracing::debug!("TSC calibration failed; the monitor reads Instant");
        }
        Self::instant_based()
    }

    /// A clock reading `Instant` only.
    pub fn instant_based() -> Clock {
        Clock {
            origin: Instant::now(),
            source: Source::Instant,
        }
    }

    /// The process-wide clock, created (and calibrated) on first use.
    pub fn global() -> &'static Clock {
        static GLOBAL: OnceLock<Clock> = OnceLock::new();
        GLOBAL.get_or_init(Clock::new)
    }

    /// Whether this clock reads the TSC.
    pub fn is_tsc(&self) -> bool {
        matches!(self.source, Source::Tsc { .. })
    }

    /// Nanoseconds since this clock was created.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self.source {
            Source::Instant => duration_ns(self.origin.elapsed()),
            Source::Tsc { tsc0, mult } => scale(read_tsc().wrapping_sub(tsc0), mult),
        }
    }

    fn calibrated(span: Duration) -> Option<Clock> {
        let origin = Instant::now();
        let tsc0 = read_tsc();
        // Only the readings at either end count, so the thread sleeps between them: a spin
        // cost every monitored process 4 ms of CPU at start (1% of a short benchmark's).
        std::thread::sleep(span);
        let ns = duration_ns(origin.elapsed());
        let ticks = read_tsc().checked_sub(tsc0)?;
        let mult = u64::try_from((u128::from(ns) << SHIFT) / u128::from(ticks.max(1))).ok()?;
        (mult > 0 && ticks > 0).then_some(Clock {
            origin,
            source: Source::Tsc { tsc0, mult },
        })
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[inline]
fn scale(ticks: u64, mult: u64) -> u64 {
    ((u128::from(ticks) * u128::from(mult)) >> SHIFT) as u64
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU, reads no memory and has no preconditions;
    // it is only `unsafe` because all intrinsics are.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn read_tsc() -> u64 {
    0
}

/// The TSC counts at a constant rate across frequency changes and sleep states only when the
/// kernel reports both flags; without them a TSC reading is not a time.
fn tsc_usable() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| tsc_invariant(&s))
            .unwrap_or(false)
}

/// Whether the first `flags` line of a `/proc/cpuinfo` text has `constant_tsc` and
/// `nonstop_tsc`.
pub fn tsc_invariant(cpuinfo: &str) -> bool {
    let Some(flags) = cpuinfo.lines().find(|l| l.starts_with("flags")) else {
        return false;
    };
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariant_needs_both_flags_on_the_flags_line() {
        let cases = [
            ("flags\t: fpu constant_tsc nonstop_tsc sse\n", true),
            ("flags\t: fpu constant_tsc sse\n", false),
            ("flags\t: fpu nonstop_tsc\n", false),
            ("model name: constant_tsc nonstop_tsc\n", false),
            ("flags\t: fpu constant_tsc_x nonstop_tsc\n", false),
            ("", false),
        ];
        for (text, want) in cases {
            assert_eq!(tsc_invariant(text), want, "{text:?}");
        }
    }

    #[test]
    fn scale_is_fixed_point_nanoseconds_per_tick() {
        // 0.5 ns per tick.
        assert_eq!(scale(1000, 1 << 31), 500);
        // 1/3 ns per tick rounds down.
        assert_eq!(scale(10, (1u64 << 32) / 3), 3);
        assert_eq!(scale(0, u64::MAX), 0);
    }

    #[test]
    fn readings_never_go_backwards() {
        for clock in [Clock::new(), Clock::instant_based()] {
            let mut last = clock.now_ns();
            for _ in 0..10_000 {
                let now = clock.now_ns();
                assert!(now >= last, "{now} < {last}");
                last = now;
            }
        }
    }

    /// Over a sleep the clock agrees with `Instant` within 2% plus scheduling noise.
    #[test]
    fn agrees_with_instant_over_a_sleep() {
        let clock = Clock::new();
        let (t0, c0) = (Instant::now(), clock.now_ns());
        std::thread::sleep(Duration::from_millis(30));
        let (c1, wall) = (clock.now_ns(), duration_ns(t0.elapsed()));
        let diff = (c1 - c0).abs_diff(wall);
        assert!(
            diff < wall / 50 + 200_000,
            "clock {} ns, wall {wall} ns",
            c1 - c0
        );
    }
}
