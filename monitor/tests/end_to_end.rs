//! The whole monitor: a producer thread emits two synthetic transfers (peers 1 and 2, each
//! on its own path and NIC) in time order; peer 1's rate falls to a quarter for 300 ms of
//! simulated time. The monitor must flag the drop on peer 1, its path and NIC within 1 ms
//! of its start, report the recovery after it, say nothing of peer 2 (whose share of the
//! traffic rose), and write it all to its JSON file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use ccl_monitor::export::json::read_lines;
use ccl_monitor::export::{JsonLine, LineKind};
use ccl_monitor::window::Event;
use ccl_monitor::{
    CollId, Engine, Key, Monitor, MonitorConfig, Op, Options, Publisher, Scope, Subscriber,
    TimeBase, Transition, Unit, Work,
};

const MS: u64 = 1_000_000;
const CHUNK: u64 = 1 << 20;
/// 1 MiB at 25 GB/s.
const INTERVAL: u64 = 41_943;
const DROP_START: u64 = 200 * MS;
const DROP_END: u64 = 500 * MS;
const END: u64 = 700 * MS;

/// Two connections' transfers, in time order: each keeps one chunk in flight, the next
/// posted as one completes; intervals jitter by up to 3%, and peer 1's (path 0, NIC 0) are
/// four times longer during the drop; peer 2 is on path 1, NIC 1. `started` runs after the
/// first posts. Returns the chunks each completed.
fn transfer(p: &Publisher, started: impl FnOnce()) -> [u64; 2] {
    let w = |i: usize, ts_ns, seq| Work {
        ts_ns,
        bytes: CHUNK,
        peer: i as u32 + 1,
        path: i as u16,
        nic: i as u16,
        engine: Engine::Mpt,
        unit: Unit::Chunk,
        coll: CollId {
            comm: 0xabc,
            op: Op::AllReduce,
            seq,
        },
    };
    let (mut t, mut n) = ([0u64; 2], [0u64; 2]);
    p.post(&w(0, 0, 0));
    p.post(&w(1, 0, 0));
    started();
    let mut told = false;
    loop {
        // The connection whose chunk completes first.
        let i = usize::from(t[1] < t[0]);
        if t[i] >= END {
            break;
        }
        let jitter = INTERVAL * ((n[i] * 7919 + i as u64) % 7) / 100;
        let slow = i == 0 && (DROP_START..DROP_END).contains(&t[i]);
        t[i] += (INTERVAL - 3 * INTERVAL / 100 + jitter) * if slow { 4 } else { 1 };
        if slow && !told {
            told = true;
            p.transition(&Transition {
                ts_ns: DROP_START,
                scope: Scope::Nic(0),
                from: "healthy",
                to: "degraded",
                reason: "synthetic",
            });
        }
        n[i] += 1;
        p.post(&w(i, t[i], n[i] / 64));
        p.complete(&w(i, t[i], n[i] / 64));
    }
    n
}

/// Keeps the analysis events, as a subscriber of the monitor would.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Event>>>);

impl Subscriber for Seen {
    fn on_window(&self, e: &Event) {
        if !matches!(e, Event::Sample(_)) {
            self.0.lock().unwrap().push(*e);
        }
    }
}

/// Threads named by the monitor, once the count settles on `want` (a new thread names
/// itself only after it starts) or after a second.
fn monitor_threads_settle(want: usize) -> usize {
    let mut n = monitor_threads();
    for _ in 0..100 {
        if n == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        n = monitor_threads();
    }
    n
}

fn monitor_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("ccl-monitor"))
        .count()
}

fn lines_of(path: &Path, kind: LineKind, scope: &str, id: u64) -> Vec<JsonLine> {
    read_lines(path)
        .unwrap()
        .into_iter()
        .filter(|l| l.kind == Some(kind) && l.scope == scope && l.id == id)
        .collect()
}

#[test]
fn quarter_rate_for_300ms_is_flagged_within_1ms_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("monitor.jsonl");
    let cfg = MonitorConfig {
        enabled: true,
        file: Some(file.clone()),
        port: Some(0),
        ring_capacity: 1 << 16,
        ..MonitorConfig::default()
    };
    let seen = Seen::default();
    let opts = Options {
        time_base: TimeBase::Records,
        subscribers: vec![Box::new(seen.clone())],
        ..Options::default()
    };
    let mon = Monitor::with_options(&cfg, opts).unwrap();
    assert_eq!(
        monitor_threads_settle(2),
        2,
        "collector and metrics endpoint"
    );
    let chunks = std::thread::scope(|s| {
        s.spawn(|| transfer(&mon.publisher(), || mon.flush().unwrap()))
            .join()
            .unwrap()
    });
    mon.flush().unwrap();
    check_snapshot(&mon, &chunks);
    check_events(&seen.0.lock().unwrap());
    mon.shutdown().unwrap();
    assert_eq!(monitor_threads(), 0, "no thread outlives the monitor");
    check_file(&file);
}

fn check_snapshot(mon: &Monitor, chunks: &[u64]) {
    let snap = mon.snapshot();
    assert_eq!((snap.dropped, snap.transitions), (0, 1));
    for (i, key) in [
        (0, Key::Peer(1)),
        (0, Key::Path(0)),
        (0, Key::Nic(0)),
        (1, Key::Peer(2)),
        (1, Key::Path(1)),
        (1, Key::Nic(1)),
    ] {
        let k = snap.key(key).unwrap();
        assert_eq!(k.bytes, chunks[i] * CHUNK, "{key:?}");
        assert_eq!((k.completions, k.outstanding), (chunks[i], 1), "{key:?}");
        let anomalies = if i == 0 { 1 } else { 0 };
        assert_eq!(
            (k.anomalies, k.stalls, k.anomalous),
            (anomalies, 0, false),
            "{key:?}"
        );
        let nominal = CHUNK as f64 * 1e9 / INTERVAL as f64;
        assert!(
            (k.baseline_bps / nominal - 1.0).abs() < 0.05,
            "{key:?} {k:?}"
        );
    }
}

fn check_events(events: &[Event]) {
    assert!(
        events
            .iter()
            .all(|e| !matches!(e.key(), Key::Peer(2) | Key::Path(1) | Key::Nic(1))),
        "{events:?}"
    );
    for key in [Key::Peer(1), Key::Path(0), Key::Nic(0)] {
        let of_key: Vec<&Event> = events.iter().filter(|e| e.key() == key).collect();
        assert_eq!(of_key.len(), 2, "{key:?}: {of_key:?}");
        let (Event::Anomaly(a), Event::Recovered(r)) = (of_key[0], of_key[1]) else {
            panic!("{key:?}: {of_key:?}");
        };
        assert!(
            (DROP_START..DROP_START + MS).contains(&a.ts_ns),
            "{key:?} {a:?}"
        );
        assert!(a.tput_bps < 0.5 * a.baseline_bps);
        assert_eq!(
            (a.culprit.coll.comm, a.culprit.coll.op),
            (0xabc, Op::AllReduce)
        );
        assert!(
            (DROP_END..DROP_END + MS).contains(&r.ts_ns),
            "{key:?} {r:?}"
        );
    }
}

fn check_file(file: &Path) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.lines().all(|l| l.starts_with("{\"ts_ns\":")),
        "every record has ts_ns first"
    );
    let anomalies = lines_of(file, LineKind::Anomaly, "path", 0);
    assert_eq!(anomalies.len(), 1);
    let a = &anomalies[0];
    assert!((DROP_START..DROP_START + MS).contains(&a.ts_ns), "{a:?}");
    assert_eq!(
        (a.peer, a.path, a.nic, a.op),
        (Some(1), Some(0), Some(0), Some(Op::AllReduce))
    );
    let rec = lines_of(file, LineKind::Recovered, "path", 0);
    assert_eq!(rec.len(), 1);
    assert!((DROP_END..DROP_END + MS).contains(&rec[0].ts_ns));
    let tr = lines_of(file, LineKind::Transition, "nic", 0);
    assert_eq!(tr.len(), 1);
    assert_eq!(
        (tr[0].from.as_deref(), tr[0].to.as_deref()),
        (Some("healthy"), Some("degraded"))
    );
    // The time series: 10 us resolution, time-ordered per key. While slow, path 0 carries a
    // quarter of what path 1 does, where it used to carry as much: its baseline is path 1's
    // rate, its rate a quarter of that.
    let samples = lines_of(file, LineKind::Sample, "path", 0);
    assert!(samples
        .windows(2)
        .all(|w| w[1].ts_ns / 10_000 > w[0].ts_ns / 10_000));
    let mid = samples.iter().find(|s| s.ts_ns > 350 * MS).unwrap();
    let ratio = mid.tput_bps.unwrap() / mid.baseline_bps.unwrap();
    assert!((0.2..0.3).contains(&ratio), "{mid:?}");
}

#[test]
fn disabled_monitor_is_inert() {
    let mon = Monitor::new(&MonitorConfig::default()).unwrap();
    let p = mon.publisher();
    assert!(!mon.is_enabled() && !p.is_on());
    assert_eq!(p.now_ns(), 0);
    p.post(&Work {
        ts_ns: 1,
        bytes: 1,
        peer: 0,
        path: 0,
        nic: 0,
        engine: Engine::Host,
        unit: Unit::Copy,
        coll: CollId {
            comm: 0,
            op: Op::Other,
            seq: 0,
        },
    });
    mon.flush().unwrap();
    assert_eq!(mon.snapshot(), ccl_monitor::Snapshot::default());
    assert_eq!(mon.metrics_addr(), None);
}

/// The collector runs at nice 10: it must not take the cores from the threads moving data.
#[cfg(target_os = "linux")]
#[test]
fn the_collector_runs_at_a_lower_priority() {
    let m = Monitor::new(&MonitorConfig {
        enabled: true,
        ..MonitorConfig::default()
    })
    .unwrap();
    m.flush().unwrap();
    let nice = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim() == "ccl-monitor").then_some(())?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the parenthesised name: state is the 3rd field, nice the 19th.
            let rest = &stat[stat.rfind(')')? + 2..];
            rest.split(' ').nth(16)?.parse::<i32>().ok()
        })
        .collect::<Vec<_>>();
    assert!(nice.contains(&10), "{nice:?}");
}
