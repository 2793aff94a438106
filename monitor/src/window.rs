//! Sliding-window throughput, baselines, anomalies and stalls: sans-IO, time comes in with the
//! records (or [`Windows::tick`]) and events go out into a caller's `Vec`.
//!
//! Throughput is the bytes of the last W completions over the *busy* time since the
//! completion before them, the window reaching further back until it spans a minimum time:
//! time when the key had no work outstanding is not counted, so a pause between two
//! collectives does not look like a slow network, and acknowledgements that arrive in a batch
//! are neither a burst nor (the first of them) a stall. Completions with the same timestamp
//! are one observation, judged once time has moved past it. The baseline is the median of
//! recent healthy windows, so spikes do not drag it up.

use std::collections::VecDeque;

use crate::select::{median, partition_from_back};

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
    /// Completions per window (at least 1): a window is the last `window` completions' bytes
    /// over the busy time since the completion before them.
    pub window: usize,
    /// A window also reaches back until it spans at least this much busy time, so that a
    /// batch of acknowledgements microseconds apart is not read as a burst of bandwidth.
    pub min_span_ns: u64,
    /// An anomaly starts when throughput falls below `drop` x baseline.
    pub drop: f64,
    /// ... and ends when it is back to at least `recover` x baseline.
    pub recover: f64,
    /// The baseline is the median of this many healthy window estimates; nothing is judged
    /// until that many were taken.
    pub baseline_len: usize,
    /// At most one baseline estimate per this much busy time, so the median covers
    /// `baseline_len` x this, not a few overlapping windows.
    pub baseline_every_ns: u64,
    /// Completions within this long of the previous one join its observation: one round of
    /// acknowledgements, however the engine threads stamp it, is judged once, whole.
    pub merge_ns: u64,
    /// No completion for longer than this with work outstanding is a stall.
    pub stall_after_ns: u64,
    /// At most one throughput sample per key per this many nanoseconds (100 us from
    /// [`WindowConfig::new`]; the monitor sets `CCL_MONITOR_SAMPLE_US`, 1 ms by default: each
    /// is a line of the JSON file).
    pub resolution_ns: u64,
    /// Whether a window whose `window` completions reach back further than the minimum span
    /// is also judged on its latest minimum span: a drop then shows as soon as at window 1,
    /// and so do dips of about the span that the completions would have smoothed.
    pub early: bool,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig::new(8, 0.5, 100_000_000)
    }
}

/// The minimum span of a window unless configured: long enough that rounds of
/// acknowledgements up to 150 us apart neither read as bursts nor as drops (the replays in
/// tests/window.rs) and that the NICs' shares on the 2-core CPU machine, which swing by 2x
/// over a few hundred microseconds, do not alarm; short enough that a 4x drop shows within
/// 1 ms (0.82 ms in the replay).
pub const DEFAULT_MIN_SPAN_NS: u64 = 1_000_000;

/// Completions this close count as one observation unless configured: wider than the
/// spread of one round's stamps, narrower than a chunk's time on a fast path.
pub const DEFAULT_MERGE_NS: u64 = 20_000;

impl WindowConfig {
    /// The defaults for everything but the three user settings; recovery is halfway from the
    /// drop threshold back to the baseline, so a rate hovering at the threshold does not flap.
    pub fn new(window: usize, drop: f64, stall_after_ns: u64) -> Self {
        WindowConfig {
            window: window.max(1),
            min_span_ns: DEFAULT_MIN_SPAN_NS,
            drop,
            recover: drop + (1.0 - drop) / 2.0,
            baseline_len: 16,
            baseline_every_ns: DEFAULT_MIN_SPAN_NS,
            merge_ns: DEFAULT_MERGE_NS,
            stall_after_ns,
            resolution_ns: 100_000,
            early: true,
        }
    }

    /// The same with another minimum span (baseline estimates taken once per span).
    pub fn with_min_span(self, min_span_ns: u64) -> Self {
        WindowConfig {
            min_span_ns,
            baseline_every_ns: min_span_ns.max(self.resolution_ns),
            ..self
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
    /// The operation of the latest completion.
    pub coll: CollId,
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

/// Completions that share a busy-time stamp (one progress round's acknowledgements), as one
/// observation.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Busy-time stamps of the observation's last and first completions.
    stamp: u64,
    first: u64,
    /// Wall time of its last completion, and the key's bytes up to and including it.
    wall: u64,
    cum: u64,
    bytes: u64,
    count: u64,
}

/// Entries a window may hold while reaching back for its minimum span; beyond this it is
/// judged on what it has.
const MAX_HISTORY: usize = 8192;

#[derive(Debug)]
struct KeyState {
    /// The window: the entry before the last `window` completions (its bytes do not count),
    /// then those, reaching further back while the span is below the minimum.
    ring: VecDeque<Entry>,
    /// Bytes and completions of the entries after the front.
    sum_bytes: u64,
    sum_count: u64,
    outstanding: u64,
    /// Busy time accumulated before the current busy period.
    busy_ns: u64,
    /// Start of the current busy period.
    busy_since: Option<u64>,
    last_ts: u64,
    last_progress: u64,
    /// The total only: its last progress before the current round (completions within
    /// `merge_ns`).
    prev_progress: u64,
    /// The latest completion, not judged yet: it is judged once time moves past it, so the
    /// completions of one round count together.
    pending: Option<Work>,
    /// When the pending observation's first completion came (it spans at most `merge_ns`).
    pending_since: u64,
    /// Recent healthy estimates (in the key's unit, and in bytes per second), oldest
    /// first, and the busy time the next may be taken at.
    healthy: VecDeque<(f64, f64)>,
    next_healthy_at: u64,
    /// Healthy estimates (with the busy time their window ended) waiting for a later window
    /// that starts after them to be healthy too: the first windows of a slide downwards still
    /// read healthy, and must not pull the baseline along.
    probation: VecDeque<(u64, f64, f64)>,
    /// Peers: bytes per second; NICs and paths: their bytes per byte of the others' (see
    /// [`relative`]).
    baseline: Option<f64>,
    /// The median of the same windows' rates in bytes per second: a NIC recovers only when
    /// back to its rate as well as its share (when the others have nothing left to do, a
    /// slow NIC finishing alone is not behind them, but it is still slow).
    rate_baseline: Option<f64>,
    /// Bytes per second per unit of the baseline, as of the latest judgement.
    scale: f64,
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
    fn new(w: &Work) -> Self {
        KeyState {
            ring: VecDeque::new(),
            sum_bytes: 0,
            sum_count: 0,
            outstanding: 0,
            busy_ns: 0,
            busy_since: None,
            last_ts: w.ts_ns,
            last_progress: w.ts_ns,
            prev_progress: w.ts_ns,
            pending: None,
            pending_since: 0,
            healthy: VecDeque::new(),
            next_healthy_at: 0,
            probation: VecDeque::new(),
            baseline: None,
            rate_baseline: None,
            scale: 1.0,
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

    /// The wall time at which the busy clock reads `stamp` (`stamp` in the current busy
    /// period or at its start).
    fn wall_at(&self, stamp: u64) -> Option<u64> {
        let since = self.busy_since?;
        Some(since + stamp.saturating_sub(self.busy_ns))
    }

    fn post(&mut self, w: &Work, n: u32) {
        let ts = w.ts_ns.max(self.last_ts);
        if self.outstanding == 0 {
            self.busy_since = Some(ts);
            self.last_progress = ts;
        }
        self.outstanding += u64::from(n);
        self.last_ts = ts;
        self.last_work = Culprit::of(w);
    }

    /// Records the completion in the window (merged with an entry of the same stamp).
    fn complete(&mut self, w: &Work, n: u32, cfg: &WindowConfig) {
        let ts = w.ts_ns.max(self.last_ts);
        if self.busy_since.is_none() {
            // The post was not seen (the monitor started mid-operation): count the time since
            // the last record as busy rather than dividing by zero.
            self.busy_since = Some(self.last_ts);
        }
        let stamp = self.busy_at(ts);
        self.outstanding = self.outstanding.saturating_sub(u64::from(n));
        if self.outstanding == 0 {
            self.busy_ns = stamp;
            self.busy_since = None;
        }
        self.push(
            Entry {
                stamp,
                first: stamp,
                wall: ts,
                cum: self.bytes + w.bytes,
                bytes: w.bytes,
                count: u64::from(n),
            },
            cfg,
        );
        self.last_ts = ts;
        self.last_progress = ts;
        self.stalled = false;
        self.bytes += w.bytes;
        self.completions += u64::from(n);
    }

    fn push(&mut self, e: Entry, cfg: &WindowConfig) {
        let len = self.ring.len();
        match self.ring.back_mut() {
            Some(b) if e.stamp <= b.first.saturating_add(cfg.merge_ns) && len > 1 => {
                b.stamp = b.stamp.max(e.stamp);
                b.wall = b.wall.max(e.wall);
                b.cum = e.cum;
                b.bytes += e.bytes;
                b.count += e.count;
            }
            Some(_) => self.ring.push_back(e),
            None => {
                // The first entry only opens the window.
                self.ring.push_back(Entry {
                    bytes: 0,
                    count: 0,
                    ..e
                });
                return;
            }
        }
        self.sum_bytes += e.bytes;
        self.sum_count += e.count;
        // Drop the front while what remains is still a whole window.
        while let (Some(second), Some(back)) = (self.ring.get(1), self.ring.back()) {
            let whole = self.sum_count - second.count >= cfg.window as u64
                && back.stamp - second.stamp >= cfg.min_span_ns;
            if !whole && self.ring.len() <= MAX_HISTORY {
                break;
            }
            self.sum_bytes -= second.bytes;
            self.sum_count -= second.count;
            self.ring.pop_front();
        }
    }

    /// Whether the window holds `window` completions over at least the minimum span.
    fn full(&self, cfg: &WindowConfig) -> bool {
        let span = self.span().unwrap_or(0);
        self.sum_count >= cfg.window as u64
            && (span >= cfg.min_span_ns || self.ring.len() >= MAX_HISTORY)
    }

    fn span(&self) -> Option<u64> {
        let (first, last) = (self.ring.front()?, self.ring.back()?);
        last.stamp.checked_sub(first.stamp).filter(|&s| s > 0)
    }

    /// The key's bytes completed in the wall-time interval `(from, to]`, as far as the
    /// window reaches back (`None` if `from` is before it).
    fn bytes_between(&self, from: u64, to: u64) -> Option<u64> {
        let front = self.ring.front()?;
        if from < front.wall {
            return None;
        }
        // Walls only grow, and the times asked about are mostly the latest few milliseconds.
        let upto = |t: u64| match partition_from_back(&self.ring, |e| e.wall <= t) {
            0 => front.cum - front.bytes,
            i => self.ring[i - 1].cum,
        };
        Some(upto(to).saturating_sub(upto(from)))
    }

    /// When the window's `window` completions reach back further than the minimum span: its
    /// latest minimum span of busy time, as (bytes, busy ns, wall time of its start). A drop
    /// fills that part first; with slow completions (large chunks, or a drop that made them
    /// so) it is what lets a window of 8 see a drop as soon as a window of 1 does.
    fn recent(&self, cfg: &WindowConfig) -> Option<(u64, u64, u64)> {
        let (back, second) = (self.ring.back()?, self.ring.get(1)?);
        if !cfg.early || cfg.min_span_ns == 0 || back.stamp - second.stamp < cfg.min_span_ns {
            return None;
        }
        let cut = back.stamp - cfg.min_span_ns;
        // The latest entry at least the span before the last (the second is one).
        let i = self.ring.partition_point(|e| e.stamp <= cut);
        let front = self.ring.get(i.checked_sub(1)?)?;
        let span = back.stamp.checked_sub(front.stamp).filter(|&s| s > 0)?;
        Some((back.cum - front.cum, span, front.wall))
    }

    /// Bytes per second over the window.
    fn window_tput(&self) -> Option<f64> {
        Some(self.sum_bytes as f64 * 1e9 / self.span()? as f64)
    }

    /// A healthy window: confirms the estimates its window lies wholly after, and takes its
    /// own on probation (at most one per `baseline_every_ns`).
    fn learn(&mut self, cfg: &WindowConfig, v: f64, tput: f64) {
        let (Some(front), Some(back)) = (self.ring.front(), self.ring.back()) else {
            return;
        };
        let (front, back) = (front.stamp, back.stamp);
        while let Some(&(_, v, t)) = self.probation.front().filter(|p| p.0 <= front) {
            self.probation.pop_front();
            self.confirm(cfg, v, t);
        }
        if back >= self.next_healthy_at {
            self.next_healthy_at = back.saturating_add(cfg.baseline_every_ns);
            self.probation.push_back((back, v, tput));
        }
    }

    /// Takes an estimate into the baselines: the medians of the last `baseline_len`.
    fn confirm(&mut self, cfg: &WindowConfig, v: f64, tput: f64) {
        let len = cfg.baseline_len.max(1);
        self.healthy.push_back((v, tput));
        if self.healthy.len() > len {
            self.healthy.pop_front();
        }
        if self.healthy.len() >= len {
            self.baseline = median(self.healthy.iter().map(|h| h.0));
            self.rate_baseline = median(self.healthy.iter().map(|h| h.1));
        }
    }

    /// Whether a window of `v` (the key's unit) and `tput` is back from an anomaly.
    fn recovered(&self, cfg: &WindowConfig, v: f64, tput: f64) -> bool {
        let back = |x: f64, b: Option<f64>| b.is_some_and(|b| x >= cfg.recover * b);
        back(v, self.baseline) && back(tput, self.rate_baseline)
    }

    fn stats(&self, key: Key) -> KeyStats {
        KeyStats {
            key,
            tput_bps: self.tput,
            baseline_bps: self.baseline.map_or(0.0, |b| b * self.scale),
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

/// Every key's state, in key order: a handful of keys (a peer, its paths and NICs), looked
/// up three times a record, where a B-tree's search of the enum keys was a sixth of the
/// windows' instructions (`monitor/examples/window_cost.rs` under callgrind); each key is
/// kept beside its order as one integer.
#[derive(Debug, Default)]
struct KeyMap(Vec<(u64, Key, KeyState)>);

/// `key`'s place in `Key`'s order (kind, then number) as one integer.
fn order(key: Key) -> u64 {
    match key {
        Key::Peer(p) => u64::from(p),
        Key::Path(p) => 1 << 32 | u64::from(p),
        Key::Nic(n) => 2 << 32 | u64::from(n),
    }
}

impl KeyMap {
    fn get_or_insert(&mut self, key: Key, w: &Work) -> &mut KeyState {
        let o = order(key);
        let i = match self.0.binary_search_by_key(&o, |e| e.0) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (o, key, KeyState::new(w)));
                i
            }
        };
        &mut self.0[i].2
    }

    fn iter(&self) -> impl Iterator<Item = (&Key, &KeyState)> {
        self.0.iter().map(|(_, k, st)| (k, st))
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut KeyState)> {
        self.0.iter_mut().map(|(_, k, st)| (&*k, st))
    }
}

/// The windows of every key.
#[derive(Debug)]
pub struct Windows {
    cfg: WindowConfig,
    keys: KeyMap,
    /// Every completion of every key: what NICs and paths are judged against.
    total: Option<KeyState>,
    /// NICs and paths now anomalous: while one is, the others' shares rise, and must not
    /// become their norm (it would make them look slow once it recovers).
    anomalous_shares: usize,
}

/// What a key's throughput is measured in: peers in bytes per second, NICs and paths
/// against the rest of the traffic (the rate of every other key together, over about the
/// same time). A host whose threads were not scheduled for a while slows every NIC at
/// once; judged so, that is no NIC's fault, while a NIC that falls behind its siblings is.
fn relative(key: Key) -> bool {
    !matches!(key, Key::Peer(_))
}

impl Windows {
    pub fn new(cfg: WindowConfig) -> Self {
        Windows {
            cfg,
            keys: KeyMap::default(),
            total: None,
            anomalous_shares: 0,
        }
    }

    pub fn config(&self) -> &WindowConfig {
        &self.cfg
    }

    fn keys_of(w: &Work) -> [Key; 3] {
        [Key::Peer(w.peer), Key::Path(w.path), Key::Nic(w.nic)]
    }

    fn state(&mut self, key: Key, w: &Work) -> &mut KeyState {
        self.keys.get_or_insert(key, w)
    }

    /// A work request was posted on the keys it names.
    pub fn on_post(&mut self, w: &Work) {
        self.on_post_n(w, 1);
    }

    /// `n` work requests were posted, `w.bytes` their total.
    pub fn on_post_n(&mut self, w: &Work, n: u32) {
        for key in Self::keys_of(w) {
            self.state(key, w).post(w, n);
        }
        self.total
            .get_or_insert_with(|| KeyState::new(w))
            .post(w, n);
    }

    /// A work request completed: judges the key's previous completion if this one is later,
    /// and whether the time since the last progress already means a drop, then adds it.
    pub fn on_complete(&mut self, w: &Work, out: &mut Vec<Event>) {
        self.on_complete_n(w, 1, out);
    }

    /// `n` work requests completed at once, `w.bytes` their total.
    pub fn on_complete_n(&mut self, w: &Work, n: u32, out: &mut Vec<Event>) {
        let cfg = self.cfg;
        // The keys are judged against the total as of before this completion, which is when
        // their pending completions happened.
        for key in Self::keys_of(w) {
            let Windows {
                keys,
                total,
                anomalous_shares,
                ..
            } = self;
            let st = keys.get_or_insert(key, w);
            let (was, learn) = (st.anomalous, !relative(key) || *anomalous_shares == 0);
            if st.pending.is_some() && w.ts_ns > st.pending_since.saturating_add(cfg.merge_ns) {
                settle(&cfg, key, st, total.as_ref(), learn, out);
            }
            gap(&cfg, key, st, w.ts_ns, total.as_ref(), out);
            count_shares(anomalous_shares, key, was, st.anomalous);
            st.complete(w, n, &cfg);
            if st.pending.is_none() {
                st.pending_since = w.ts_ns;
            }
            st.pending = Some(*w);
        }
        let t = self.total.get_or_insert_with(|| KeyState::new(w));
        if w.ts_ns > t.last_progress.saturating_add(cfg.merge_ns) {
            t.prev_progress = t.last_progress;
        }
        t.complete(w, n, &total_config(&cfg));
    }

    /// Time has reached `now_ns`: judges completions up to it, and reports keys whose
    /// throughput fell below the threshold or that stalled while waiting for a completion.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Event>) {
        let cfg = self.cfg;
        let Windows {
            keys,
            total,
            anomalous_shares,
            ..
        } = self;
        for (&key, st) in keys.iter_mut() {
            let (was, learn) = (st.anomalous, !relative(key) || *anomalous_shares == 0);
            if st.pending.is_some() && now_ns >= st.pending_since.saturating_add(cfg.merge_ns) {
                settle(&cfg, key, st, total.as_ref(), learn, out);
            }
            gap(&cfg, key, st, now_ns, total.as_ref(), out);
            count_shares(anomalous_shares, key, was, st.anomalous);
            let idle = now_ns.saturating_sub(st.last_progress);
            if st.outstanding == 0 || st.stalled || idle <= cfg.stall_after_ns {
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

    /// Judges every observation still open (at the end: no later completion or tick will).
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let cfg = self.cfg;
        let Windows {
            keys,
            total,
            anomalous_shares,
            ..
        } = self;
        for (&key, st) in keys.iter_mut() {
            let (was, learn) = (st.anomalous, !relative(key) || *anomalous_shares == 0);
            settle(&cfg, key, st, total.as_ref(), learn, out);
            count_shares(anomalous_shares, key, was, st.anomalous);
        }
    }

    /// Every key's current state, in key order.
    pub fn snapshot(&self) -> Vec<KeyStats> {
        self.keys.iter().map(|(&k, st)| st.stats(k)).collect()
    }
}

/// The total keeps completions apart (another key's window may end inside a round) and
/// reaches back far enough to cover any key's
/// window (a NIC's window of `window` completions spans longer than the total's).
fn total_config(cfg: &WindowConfig) -> WindowConfig {
    WindowConfig {
        window: cfg.window.saturating_mul(16),
        min_span_ns: cfg.min_span_ns.saturating_mul(16),
        merge_ns: 0,
        ..*cfg
    }
}

/// A NIC's or path's bytes over its window against what every other key completed in the
/// same wall-time interval, and the latter (`None` without a total reaching that far back,
/// or when nothing else moved: a key carrying everything is left to its peer key).
fn share(total: Option<&KeyState>, st: &KeyState, bytes: f64, to: u64) -> Option<(f64, f64)> {
    let from = st.ring.front()?.wall;
    share_between(total, from, to, st.sum_bytes, bytes)
}

/// [`share`] over `(from, to]`, in which the key itself completed `own` bytes.
fn share_between(
    total: Option<&KeyState>,
    from: u64,
    to: u64,
    own: u64,
    bytes: f64,
) -> Option<(f64, f64)> {
    let all = total?.bytes_between(from, to)?;
    let others = all.saturating_sub(own) as f64;
    (others > 0.0).then(|| (bytes / others, others))
}

/// The window's [`KeyState::recent`] part in the key's unit, and in bytes per second.
fn recent_value(
    cfg: &WindowConfig,
    key: Key,
    st: &KeyState,
    total: Option<&KeyState>,
) -> Option<(f64, f64)> {
    let (bytes, span, from) = st.recent(cfg)?;
    let tput = bytes as f64 * 1e9 / span as f64;
    if !relative(key) {
        return Some((tput, tput));
    }
    let to = st.ring.back()?.wall;
    let (v, _) = share_between(total, from, to, bytes, bytes as f64)?;
    Some((v, tput))
}

/// Keeps the count of anomalous NICs and paths as `key` goes from `was` to `now`.
fn count_shares(n: &mut usize, key: Key, was: bool, now: bool) {
    if relative(key) && was != now {
        *n = if now { *n + 1 } else { n.saturating_sub(1) };
    }
}

/// The window's bytes with the observation under way credited at the window's mean: without
/// it a window stretched to the next observation would read a steady rate low by a factor
/// n / (n + 1) for n observations (rounds of acknowledgements) in the window.
fn open_bytes(st: &KeyState) -> f64 {
    let n = st.ring.len().saturating_sub(1).max(1);
    st.sum_bytes as f64 * (1.0 + 1.0 / n as f64)
}

fn alert(key: Key, ts_ns: u64, tput: f64, b: f64, culprit: Culprit) -> Alert {
    Alert {
        ts_ns,
        key,
        tput_bps: tput,
        baseline_bps: b,
        culprit,
    }
}

/// Judges the window as of the pending completion: throughput, anomaly or recovery, the
/// baseline (peers in bytes per second, NICs and paths as their bytes over the others'
/// in the same interval; fed only if `learn`). The window spans busy time only, so an idle
/// key cannot look slow.
fn settle(
    cfg: &WindowConfig,
    key: Key,
    st: &mut KeyState,
    total: Option<&KeyState>,
    learn: bool,
    out: &mut Vec<Event>,
) {
    let Some(w) = st.pending.take() else {
        return;
    };
    let Some(tput) = st.window_tput() else {
        return;
    };
    st.tput = tput;
    let unit = if relative(key) {
        match share(
            total,
            st,
            st.sum_bytes as f64,
            st.ring.back().map_or(0, |e| e.wall),
        ) {
            Some((v, _)) if v > 0.0 => tput / v,
            _ => {
                sample(cfg, key, st, &w, out);
                return;
            }
        }
    } else {
        1.0
    };
    st.scale = unit;
    let v = tput / unit;
    if st.full(cfg) {
        let culprit = Culprit::of(&w);
        // The window closes at its `window` completions or its minimum span, whichever a
        // drop reaches first: it is below if either part is, and back once both are.
        let recent = recent_value(cfg, key, st, total);
        let (low, low_tput) = match recent {
            Some((rv, rt)) if rv < v => (rv, rt),
            _ => (v, tput),
        };
        let back = recent.map_or(true, |(rv, rt)| st.recovered(cfg, rv, rt));
        match st.baseline {
            Some(b) if !st.anomalous && low < cfg.drop * b => {
                st.anomalous = true;
                st.probation.clear();
                st.anomalies += 1;
                let a = alert(key, w.ts_ns, low_tput, b * unit, culprit);
                out.push(Event::Anomaly(a));
            }
            Some(b) if st.anomalous && back && st.recovered(cfg, v, tput) => {
                st.anomalous = false;
                out.push(Event::Recovered(alert(
                    key,
                    w.ts_ns,
                    tput,
                    b * unit,
                    culprit,
                )));
            }
            _ => {}
        }
        // Only healthy windows feed the baseline, so a slow spell does not become the norm;
        // the median keeps a few windows over a batch of acknowledgements from moving it.
        if learn && !st.anomalous && st.baseline.map_or(true, |b| low >= cfg.recover * b) {
            st.learn(cfg, v, tput);
        }
    }
    sample(cfg, key, st, &w, out);
}

/// With work outstanding and no completion since, the window stretched to `now` is a bound
/// on throughput: below the threshold it is an anomaly, stamped when the bound crossed it.
/// A NIC or path is stretched only to the total's latest completion, and judged against
/// the total's rate then: it is behind only if others delivered while it waited (while
/// nothing completes anywhere, the engine is not running, and the peer key says so).
fn gap(
    cfg: &WindowConfig,
    key: Key,
    st: &mut KeyState,
    now: u64,
    total: Option<&KeyState>,
    out: &mut Vec<Event>,
) {
    let (Some(b), Some(front)) = (st.baseline, st.ring.front()) else {
        return;
    };
    if st.anomalous || st.outstanding == 0 || st.pending.is_some() || !st.full(cfg) {
        return;
    }
    let bytes = open_bytes(st);
    if relative(key) {
        let Some(t) = total else {
            return;
        };
        // Others' completions of the round now arriving are not ahead of this key's, which
        // may be about to arrive in it.
        let others_at = if now <= t.last_progress.saturating_add(cfg.merge_ns) {
            t.prev_progress
        } else {
            t.last_progress
        };
        let Some((v, others)) = share(Some(t), st, bytes, others_at.min(now)) else {
            return;
        };
        if v >= cfg.drop * b {
            return;
        }
        st.anomalous = true;
        st.probation.clear();
        st.anomalies += 1;
        let span = st.busy_at(others_at).saturating_sub(front.stamp).max(1);
        let tput = bytes * 1e9 / span as f64;
        let base = b * others * 1e9 / span as f64;
        out.push(Event::Anomaly(alert(
            key,
            others_at.min(now),
            tput,
            base,
            st.last_work,
        )));
        return;
    }
    let span = st.busy_at(now).saturating_sub(front.stamp);
    let threshold = cfg.drop * b;
    if span == 0 || threshold <= 0.0 || bytes * 1e9 >= threshold * span as f64 {
        return;
    }
    let cross = front.stamp + (bytes * 1e9 / threshold).ceil() as u64;
    let at = st.wall_at(cross).unwrap_or(now).min(now);
    st.anomalous = true;
    st.probation.clear();
    st.anomalies += 1;
    let tput = bytes * 1e9 / span as f64;
    out.push(Event::Anomaly(alert(key, at, tput, b, st.last_work)));
}

fn sample(cfg: &WindowConfig, key: Key, st: &mut KeyState, w: &Work, out: &mut Vec<Event>) {
    let ts = w.ts_ns;
    let bucket = ts / cfg.resolution_ns.max(1);
    if st.sample_bucket == Some(bucket) {
        return;
    }
    st.sample_bucket = Some(bucket);
    out.push(Event::Sample(Sample {
        ts_ns: ts,
        key,
        tput_bps: st.tput,
        baseline_bps: st.baseline.map_or(0.0, |b| b * st.scale),
        bytes: st.bytes,
        completions: st.completions,
        coll: w.coll,
    }));
}

/// A placeholder identity for tests and tools that have no collective to name.
pub const NO_COLL: CollId = CollId {
    comm: 0,
    op: Op::Other,
    seq: 0,
};

#[cfg(test)]
mod tests;
