//! Sliding-window throughput, baselines, anomalies and stalls: sans-IO, time comes in with the
//! records (or [`Windows::tick`]) and events go out into a caller's `Vec`.
//!
//! Throughput is the bytes of the last W completions over the *busy* time they span: time
//! when the key had no work outstanding is not counted, so a pause between two collectives
//! does not look like a slow network.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::event::{CollId, Op, Work};

/// What a window is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    Peer(u32),
    Path(u16),
    Nic(u16),
}

impl Key {
    /// The kind of key, as exported.
    pub fn scope(&self) -> &'static str {
        match self {
            Key::Peer(_) => "peer",
            Key::Path(_) => "path",
            Key::Nic(_) => "nic",
        }
    }

    /// The key's number within its kind.
    pub fn id(&self) -> u64 {
        match *self {
            Key::Peer(p) => u64::from(p),
            Key::Path(p) | Key::Nic(p) => u64::from(p),
        }
    }
}

/// Tuning of the analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowConfig {
    /// Completions per window (at least 2: one interval).
    pub window: usize,
    /// An anomaly starts when throughput falls below `drop` x baseline.
    pub drop: f64,
    /// ... and ends when it is back to at least `recover` x baseline.
    pub recover: f64,
    /// Weight of a healthy window in the baseline (0 freezes the first full window's value).
    pub baseline_alpha: f64,
    /// No completion for longer than this with work outstanding is a stall.
    pub stall_after_ns: u64,
    /// At most one throughput sample per key per this many nanoseconds.
    pub resolution_ns: u64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig::new(8, 0.5, 100_000_000)
    }
}

impl WindowConfig {
    /// The defaults for everything but the three user settings; recovery is halfway from the
    /// drop threshold back to the baseline, so a rate hovering at the threshold does not flap.
    pub fn new(window: usize, drop: f64, stall_after_ns: u64) -> Self {
        WindowConfig {
            window: window.max(2),
            drop,
            recover: drop + (1.0 - drop) / 2.0,
            baseline_alpha: 0.125,
            stall_after_ns,
            resolution_ns: 10_000,
        }
    }
}

/// Who was doing what when an alert fired.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Culprit {
    pub coll: CollId,
    pub peer: u32,
    pub path: u16,
    pub nic: u16,
}

impl Culprit {
    fn of(w: &Work) -> Self {
        Culprit {
            coll: w.coll,
            peer: w.peer,
            path: w.path,
            nic: w.nic,
        }
    }
}

/// One point of a key's throughput time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub ts_ns: u64,
    pub key: Key,
    /// Bytes per second over the window.
    pub tput_bps: f64,
    pub baseline_bps: f64,
    /// Bytes and completions so far on this key.
    pub bytes: u64,
    pub completions: u64,
}

/// Throughput fell below (or came back above) its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub ts_ns: u64,
    pub key: Key,
    pub tput_bps: f64,
    pub baseline_bps: f64,
    pub culprit: Culprit,
}

/// Nothing completed on a key for too long while work was outstanding.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub ts_ns: u64,
    pub key: Key,
    /// Time since the last progress (a completion, or the post that made the key busy).
    pub idle_ns: u64,
    pub outstanding: u64,
    /// The most recently posted work on the key.
    pub culprit: Culprit,
}

/// What the analysis reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Event {
    Sample(Sample),
    Anomaly(Alert),
    Recovered(Alert),
    Stall(Stall),
}

impl Event {
    pub fn ts_ns(&self) -> u64 {
        match self {
            Event::Sample(s) => s.ts_ns,
            Event::Anomaly(a) | Event::Recovered(a) => a.ts_ns,
            Event::Stall(s) => s.ts_ns,
        }
    }

    pub fn key(&self) -> Key {
        match self {
            Event::Sample(s) => s.key,
            Event::Anomaly(a) | Event::Recovered(a) => a.key,
            Event::Stall(s) => s.key,
        }
    }
}

/// A key's state, as [`Windows::snapshot`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KeyStats {
    pub key: Key,
    /// Throughput of the latest window (0 until one has two completions).
    pub tput_bps: f64,
    /// 0 until the first full window.
    pub baseline_bps: f64,
    pub bytes: u64,
    pub completions: u64,
    pub outstanding: u64,
    pub anomalies: u64,
    pub stalls: u64,
    pub anomalous: bool,
    pub stalled: bool,
}

#[derive(Debug)]
struct KeyState {
    /// (busy-time stamp, bytes) of the last W completions.
    ring: VecDeque<(u64, u64)>,
    outstanding: u64,
    /// Busy time accumulated before the current busy period.
    busy_ns: u64,
    /// Start of the current busy period.
    busy_since: Option<u64>,
    last_ts: u64,
    last_progress: u64,
    baseline: Option<f64>,
    tput: f64,
    anomalous: bool,
    stalled: bool,
    bytes: u64,
    completions: u64,
    anomalies: u64,
    stalls: u64,
    sample_bucket: Option<u64>,
    last_work: Culprit,
}

impl KeyState {
    fn new(w: &Work, window: usize) -> Self {
        KeyState {
            ring: VecDeque::with_capacity(window + 1),
            outstanding: 0,
            busy_ns: 0,
            busy_since: None,
            last_ts: w.ts_ns,
            last_progress: w.ts_ns,
            baseline: None,
            tput: 0.0,
            anomalous: false,
            stalled: false,
            bytes: 0,
            completions: 0,
            anomalies: 0,
            stalls: 0,
            sample_bucket: None,
            last_work: Culprit::of(w),
        }
    }

    fn busy_at(&self, ts: u64) -> u64 {
        match self.busy_since {
            Some(s) => self.busy_ns + ts.saturating_sub(s),
            None => self.busy_ns,
        }
    }

    fn post(&mut self, w: &Work) {
        let ts = w.ts_ns.max(self.last_ts);
        if self.outstanding == 0 {
            self.busy_since = Some(ts);
            self.last_progress = ts;
        }
        self.outstanding += 1;
        self.last_ts = ts;
        self.last_work = Culprit::of(w);
    }

    /// Records the completion in the window; returns its busy-time stamp.
    fn complete(&mut self, w: &Work, window: usize) {
        let ts = w.ts_ns.max(self.last_ts);
        if self.busy_since.is_none() {
            // The post was not seen (the monitor started mid-operation): count the time since
            // the last record as busy rather than dividing by zero.
            self.busy_since = Some(self.last_ts);
        }
        let stamp = self.busy_at(ts);
        self.outstanding = self.outstanding.saturating_sub(1);
        if self.outstanding == 0 {
            self.busy_ns = stamp;
            self.busy_since = None;
        }
        self.ring.push_back((stamp, w.bytes));
        if self.ring.len() > window {
            self.ring.pop_front();
        }
        self.last_ts = ts;
        self.last_progress = ts;
        self.stalled = false;
        self.bytes += w.bytes;
        self.completions += 1;
    }

    /// Bytes per second over the window: the bytes completed after the oldest entry over the
    /// busy time since it.
    fn window_tput(&self) -> Option<f64> {
        let (first, last) = (self.ring.front()?, self.ring.back()?);
        let span = last.0.checked_sub(first.0).filter(|&s| s > 0)?;
        let bytes: u64 = self.ring.iter().skip(1).map(|e| e.1).sum();
        Some(bytes as f64 * 1e9 / span as f64)
    }

    fn stats(&self, key: Key) -> KeyStats {
        KeyStats {
            key,
            tput_bps: self.tput,
            baseline_bps: self.baseline.unwrap_or(0.0),
            bytes: self.bytes,
            completions: self.completions,
            outstanding: self.outstanding,
            anomalies: self.anomalies,
            stalls: self.stalls,
            anomalous: self.anomalous,
            stalled: self.stalled,
        }
    }
}

/// The windows of every key.
#[derive(Debug)]
pub struct Windows {
    cfg: WindowConfig,
    keys: BTreeMap<Key, KeyState>,
}

impl Windows {
    pub fn new(cfg: WindowConfig) -> Self {
        Windows {
            cfg,
            keys: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &WindowConfig {
        &self.cfg
    }

    fn keys_of(w: &Work) -> [Key; 3] {
        [Key::Peer(w.peer), Key::Path(w.path), Key::Nic(w.nic)]
    }

    fn state(&mut self, key: Key, w: &Work) -> &mut KeyState {
        let window = self.cfg.window;
        self.keys
            .entry(key)
            .or_insert_with(|| KeyState::new(w, window))
    }

    /// A work request was posted on the keys it names.
    pub fn on_post(&mut self, w: &Work) {
        for key in Self::keys_of(w) {
            self.state(key, w).post(w);
        }
    }

    /// A work request completed: updates its keys' windows and reports what changed.
    pub fn on_complete(&mut self, w: &Work, out: &mut Vec<Event>) {
        let cfg = self.cfg;
        for key in Self::keys_of(w) {
            let st = self.state(key, w);
            st.complete(w, cfg.window);
            judge(&cfg, key, st, w, out);
        }
    }

    /// Time has reached `now_ns`: reports keys that stalled.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Event>) {
        let limit = self.cfg.stall_after_ns;
        for (&key, st) in &mut self.keys {
            let idle = now_ns.saturating_sub(st.last_progress);
            if st.outstanding == 0 || st.stalled || idle <= limit {
                continue;
            }
            st.stalled = true;
            st.stalls += 1;
            out.push(Event::Stall(Stall {
                ts_ns: now_ns,
                key,
                idle_ns: idle,
                outstanding: st.outstanding,
                culprit: st.last_work,
            }));
        }
    }

    /// Every key's current state, in key order.
    pub fn snapshot(&self) -> Vec<KeyStats> {
        self.keys.iter().map(|(&k, st)| st.stats(k)).collect()
    }
}

/// Updates throughput, baseline and anomaly state after a completion. The window spans busy
/// time only, so every window judged here measured time with work outstanding: an idle key
/// cannot look slow.
fn judge(cfg: &WindowConfig, key: Key, st: &mut KeyState, w: &Work, out: &mut Vec<Event>) {
    let Some(tput) = st.window_tput() else {
        return;
    };
    st.tput = tput;
    if st.ring.len() >= cfg.window {
        let alert = |b: f64| Alert {
            ts_ns: w.ts_ns,
            key,
            tput_bps: tput,
            baseline_bps: b,
            culprit: Culprit::of(w),
        };
        match st.baseline {
            None => st.baseline = Some(tput),
            Some(b) if !st.anomalous && tput < cfg.drop * b => {
                st.anomalous = true;
                st.anomalies += 1;
                out.push(Event::Anomaly(alert(b)));
            }
            Some(b) if st.anomalous && tput >= cfg.recover * b => {
                st.anomalous = false;
                out.push(Event::Recovered(alert(b)));
            }
            Some(_) => {}
        }
        // Only healthy windows move the baseline, so a slow spell does not become the norm.
        if let Some(b) = st
            .baseline
            .filter(|&b| !st.anomalous && tput >= cfg.recover * b)
        {
            st.baseline = Some(b + cfg.baseline_alpha * (tput - b));
        }
    }
    sample(cfg, key, st, w.ts_ns, out);
}

fn sample(cfg: &WindowConfig, key: Key, st: &mut KeyState, ts: u64, out: &mut Vec<Event>) {
    let bucket = ts / cfg.resolution_ns.max(1);
    if st.sample_bucket == Some(bucket) {
        return;
    }
    st.sample_bucket = Some(bucket);
    out.push(Event::Sample(Sample {
        ts_ns: ts,
        key,
        tput_bps: st.tput,
        baseline_bps: st.baseline.unwrap_or(0.0),
        bytes: st.bytes,
        completions: st.completions,
    }));
}

/// A placeholder identity for tests and tools that have no collective to name.
pub const NO_COLL: CollId = CollId {
    comm: 0,
    op: Op::Other,
    seq: 0,
};
