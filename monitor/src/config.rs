//! The monitor's settings: a plain struct the caller fills (libccl from its parameter
//! registry); [`MonitorConfig::from_lookup`] parses the `CCL_MONITOR*` strings it is given.

use std::path::PathBuf;
use std::time::Duration;

use crate::window::WindowConfig;
use crate::Error;

/// Settings of a [`crate::Monitor`].
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// `CCL_MONITOR`: whether anything is recorded at all (default off).
    pub enabled: bool,
    /// `CCL_MONITOR_WINDOW`: completions per throughput window (default 8; 1 is each
    /// completion over the busy time since the previous one).
    pub window: usize,
    /// `CCL_MONITOR_SPAN_US`: the least busy time a window spans (default 1000 us; 0: none).
    pub min_span: Duration,
    /// `CCL_MONITOR_DROP`: anomaly threshold as a fraction of the baseline (default 0.5).
    pub drop: f64,
    /// `CCL_MONITOR_FILE`: JSON lines output, rotated by size (default none).
    pub file: Option<PathBuf>,
    /// `CCL_MONITOR_PORT`: Prometheus endpoint on 127.0.0.1 (default none; 0 picks a port).
    pub port: Option<u16>,
    /// `CCL_MONITOR_STALL_US`: no completion for this long with work outstanding is a stall
    /// (default 100 ms).
    pub stall_after: Duration,
    /// `CCL_MONITOR_FILE_BYTES`: size at which the JSON file rotates (default 64 MiB).
    pub file_max_bytes: u64,
    /// `CCL_MONITOR_FILE_KEEP`: rotated files kept, `file.1` newest (default 4).
    pub file_keep: usize,
    /// Records each producing thread's ring holds (default 16384).
    pub ring_capacity: usize,
    /// `CCL_MONITOR_POLL_US`: how often the collector drains the rings while records come
    /// (default 10 ms). Events carry the time they happened; they are reported up to this
    /// much later. Shorter costs more: each pass wakes a thread that competes with the
    /// engines for the cores; longer did not show as cheaper (100 ms: host-backend sendrecv
    /// busbw on / off 0.906 against 0.990 at 10 ms in one call, within the runs' spread:
    /// docs/device-runs/2026-11-30-x2-f83ccce/monab/).
    pub poll: Duration,
    /// `CCL_MONITOR_EARLY`: a window of completions that reach back further than the span
    /// is also judged on its latest span (default on: a drop shows within about the span
    /// at any window; off: the completions smooth short dips as well).
    pub early: bool,
    /// `CCL_MONITOR_SAMPLE_US`: at most one throughput sample per key per this long in the
    /// JSON file (default 1 ms; 10 us to 1 s). Alerts carry their exact times whatever it
    /// is; finer costs more (100 us wrote ten times the lines).
    pub sample: Duration,
    /// `CCL_MONITOR_SCHED`: how the collector thread yields to the transport's threads
    /// (default batch: on a busy host its passes cost sendrecv less busbw than at nice 10).
    pub collector_sched: CollectorSched,
}

/// How the collector thread yields its cores to the threads that move data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectorSched {
    /// Nice 10: woken for a pass, it may still preempt a transport thread at once.
    Nice,
    /// `SCHED_BATCH` at nice 10: the same share, but a wake-up never preempts a running
    /// thread; it waits for a free core or the scheduler's tick.
    Batch,
    /// `SCHED_IDLE`: only on a core no other thread wants (under full load its rings can
    /// fill and drop records, which it counts).
    Idle,
}

impl CollectorSched {
    fn parse(v: &str) -> Result<Self, Error> {
        match v.trim().to_ascii_lowercase().as_str() {
            "nice" => Ok(CollectorSched::Nice),
            "batch" => Ok(CollectorSched::Batch),
            "idle" => Ok(CollectorSched::Idle),
            _ => Err(bad("CCL_MONITOR_SCHED", v, "expected nice, batch or idle")),
        }
    }
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            enabled: false,
            window: 8,
            min_span: Duration::from_nanos(crate::window::DEFAULT_MIN_SPAN_NS),
            drop: 0.5,
            file: None,
            port: None,
            stall_after: Duration::from_millis(100),
            file_max_bytes: 64 << 20,
            file_keep: 4,
            ring_capacity: 16 << 10,
            poll: Duration::from_millis(10),
            early: true,
            sample: Duration::from_millis(1),
            collector_sched: CollectorSched::Batch,
        }
    }
}

fn bad(name: &'static str, value: &str, reason: &'static str) -> Error {
    Error::Config {
        name,
        value: value.to_owned(),
        reason,
    }
}

fn parse_bool(name: &'static str, v: &str) -> Result<bool, Error> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" | "" => Ok(false),
        _ => Err(bad(name, v, "expected 0/1, true/false, on/off or yes/no")),
    }
}

fn parse_int<T: std::str::FromStr>(name: &'static str, v: &str) -> Result<T, Error> {
    v.trim()
        .parse()
        .map_err(|_| bad(name, v, "expected a non-negative integer in range"))
}

impl MonitorConfig {
    /// Builds the settings from `lookup(name)` for each `CCL_MONITOR*` name; names it returns
    /// `None` for keep their defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut c = MonitorConfig::default();
        if let Some(v) = lookup("CCL_MONITOR") {
            c.enabled = parse_bool("CCL_MONITOR", &v)?;
        }
        if let Some(v) = lookup("CCL_MONITOR_WINDOW") {
            c.window = parse_int("CCL_MONITOR_WINDOW", &v)?;
            if !(1..=4096).contains(&c.window) {
                return Err(bad("CCL_MONITOR_WINDOW", &v, "must be 1 to 4096"));
            }
        }
        if let Some(v) = lookup("CCL_MONITOR_DROP") {
            c.drop = v
                .trim()
                .parse()
                .map_err(|_| bad("CCL_MONITOR_DROP", &v, "expected a number"))?;
            if !(c.drop > 0.0 && c.drop < 1.0) {
                return Err(bad("CCL_MONITOR_DROP", &v, "must be above 0 and below 1"));
            }
        }
        if let Some(v) = lookup("CCL_MONITOR_FILE") {
            c.file = (!v.trim().is_empty()).then(|| PathBuf::from(v.trim()));
        }
        if let Some(v) = lookup("CCL_MONITOR_PORT") {
            c.port = Some(parse_int("CCL_MONITOR_PORT", &v)?);
        }
        if let Some(v) = lookup("CCL_MONITOR_EARLY") {
            c.early = parse_bool("CCL_MONITOR_EARLY", &v)?;
        }
        if let Some(v) = lookup("CCL_MONITOR_SCHED") {
            c.collector_sched = CollectorSched::parse(&v)?;
        }
        c.parse_sizes(&lookup)?;
        Ok(c)
    }

    fn parse_sizes(&mut self, lookup: &impl Fn(&str) -> Option<String>) -> Result<(), Error> {
        if let Some(v) = lookup("CCL_MONITOR_STALL_US") {
            let us: u64 = parse_int("CCL_MONITOR_STALL_US", &v)?;
            if us == 0 {
                return Err(bad("CCL_MONITOR_STALL_US", &v, "must be positive"));
            }
            self.stall_after = Duration::from_micros(us);
        }
        if let Some(v) = lookup("CCL_MONITOR_SPAN_US") {
            let us: u64 = parse_int("CCL_MONITOR_SPAN_US", &v)?;
            if us > 1_000_000 {
                return Err(bad("CCL_MONITOR_SPAN_US", &v, "must be at most 1000000"));
            }
            self.min_span = Duration::from_micros(us);
        }
        if let Some(v) = lookup("CCL_MONITOR_POLL_US") {
            let us: u64 = parse_int("CCL_MONITOR_POLL_US", &v)?;
            if !(100..=1_000_000).contains(&us) {
                return Err(bad("CCL_MONITOR_POLL_US", &v, "must be 100 to 1000000"));
            }
            self.poll = Duration::from_micros(us);
        }
        if let Some(v) = lookup("CCL_MONITOR_SAMPLE_US") {
            let us: u64 = parse_int("CCL_MONITOR_SAMPLE_US", &v)?;
            if !(10..=1_000_000).contains(&us) {
                return Err(bad("CCL_MONITOR_SAMPLE_US", &v, "must be 10 to 1000000"));
            }
            self.sample = Duration::from_micros(us);
        }
        if let Some(v) = lookup("CCL_MONITOR_FILE_BYTES") {
            self.file_max_bytes = parse_int("CCL_MONITOR_FILE_BYTES", &v)?;
            if self.file_max_bytes < 4096 {
                return Err(bad("CCL_MONITOR_FILE_BYTES", &v, "must be at least 4096"));
            }
        }
        if let Some(v) = lookup("CCL_MONITOR_FILE_KEEP") {
            self.file_keep = parse_int("CCL_MONITOR_FILE_KEEP", &v)?;
        }
        Ok(())
    }

    /// The analysis settings these imply.
    pub fn window_config(&self) -> WindowConfig {
        let stall = u64::try_from(self.stall_after.as_nanos()).unwrap_or(u64::MAX);
        let span = u64::try_from(self.min_span.as_nanos()).unwrap_or(u64::MAX);
        WindowConfig {
            early: self.early,
            resolution_ns: u64::try_from(self.sample.as_nanos()).unwrap_or(u64::MAX),
            ..WindowConfig::new(self.window, self.drop, stall).with_min_span(span)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<MonitorConfig, Error> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        MonitorConfig::from_lookup(|n| m.get(n).cloned())
    }

    #[test]
    fn nothing_given_is_the_default() {
        let c = from(&[]).unwrap();
        assert_eq!(c, MonitorConfig::default());
        assert!(!c.enabled);
        assert_eq!((c.window, c.drop, c.port), (8, 0.5, None));
    }

    #[test]
    fn every_setting_parses() {
        let c = from(&[
            ("CCL_MONITOR", "1"),
            ("CCL_MONITOR_WINDOW", "16"),
            ("CCL_MONITOR_DROP", "0.25"),
            ("CCL_MONITOR_FILE", "/tmp/m.jsonl"),
            ("CCL_MONITOR_PORT", "9400"),
            ("CCL_MONITOR_STALL_US", "2500"),
            ("CCL_MONITOR_SPAN_US", "100"),
            ("CCL_MONITOR_POLL_US", "2000"),
            ("CCL_MONITOR_FILE_BYTES", "1048576"),
            ("CCL_MONITOR_FILE_KEEP", "2"),
            ("CCL_MONITOR_EARLY", "0"),
            ("CCL_MONITOR_SAMPLE_US", "250"),
            ("CCL_MONITOR_SCHED", "Idle"),
        ])
        .unwrap();
        assert_eq!(c.collector_sched, CollectorSched::Idle);
        assert_eq!(
            MonitorConfig::default().collector_sched,
            CollectorSched::Batch
        );
        assert!(c.enabled);
        assert_eq!((c.window, c.drop, c.port), (16, 0.25, Some(9400)));
        assert_eq!(c.file, Some(PathBuf::from("/tmp/m.jsonl")));
        assert_eq!(c.stall_after, Duration::from_micros(2500));
        assert_eq!((c.file_max_bytes, c.file_keep), (1 << 20, 2));
        assert_eq!(c.poll, Duration::from_millis(2));
        let w = c.window_config();
        assert_eq!((w.window, w.drop, w.recover), (16, 0.25, 0.625));
        assert_eq!(w.stall_after_ns, 2_500_000);
        assert_eq!((w.min_span_ns, w.baseline_every_ns), (100_000, 100_000));
        assert!(!c.early && !w.early && MonitorConfig::default().window_config().early);
        assert_eq!(w.resolution_ns, 250_000);
    }

    #[test]
    fn bad_values_name_the_setting_and_the_value() {
        let cases = [
            ("CCL_MONITOR", "maybe"),
            ("CCL_MONITOR_WINDOW", "0"),
            ("CCL_MONITOR_WINDOW", "eight"),
            ("CCL_MONITOR_DROP", "1.0"),
            ("CCL_MONITOR_DROP", "0"),
            ("CCL_MONITOR_DROP", "NaN"),
            ("CCL_MONITOR_PORT", "70000"),
            ("CCL_MONITOR_STALL_US", "0"),
            ("CCL_MONITOR_SPAN_US", "2000000"),
            ("CCL_MONITOR_POLL_US", "50"),
            ("CCL_MONITOR_FILE_BYTES", "10"),
            ("CCL_MONITOR_EARLY", "soon"),
            ("CCL_MONITOR_SAMPLE_US", "5"),
            ("CCL_MONITOR_SCHED", "fifo"),
        ];
        for (name, value) in cases {
            let err = from(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value), "{err}");
        }
    }

    #[test]
    fn empty_file_means_no_file() {
        assert_eq!(from(&[("CCL_MONITOR_FILE", " ")]).unwrap().file, None);
    }
}
