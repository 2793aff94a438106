//! Time as the core sees it: an opaque monotonic instant handed in by the caller.
//!
//! The core never reads a clock. Datapaths pass `Instant`s derived from their own clock
//! (`std::time::Instant`, a NIC timestamp, or the simulator's virtual clock), which is what
//! makes the simulation deterministic.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by the caller.
///
/// Only differences between instants of the same caller mean anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The caller's epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros.saturating_mul(1_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Converts a `std::time::Instant` against a caller-held base, for real datapaths.
    pub fn from_std(base: std::time::Instant, t: std::time::Instant) -> Self {
        Instant(duration_nanos(t.saturating_duration_since(base)))
    }
}

/// Duration as whole nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(rhs)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(duration_nanos(rhs)))
    }
}

/// The earlier of two optional deadlines (`None` = no deadline).
pub(crate) fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_micros(5);
        assert_eq!((t + Duration::from_micros(3)).as_nanos(), 8_000);
        assert_eq!((t - Duration::from_secs(1)), Instant::ZERO);
        assert_eq!(Instant::ZERO.saturating_duration_since(t), Duration::ZERO);
        assert_eq!(min_deadline(Some(t), None), Some(t));
        assert_eq!(
            min_deadline(Some(t), Some(Instant::ZERO)),
            Some(Instant::ZERO)
        );
    }
}
