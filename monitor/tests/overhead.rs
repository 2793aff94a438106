//! What the monitor costs the threads that emit into it, and its collector's idle CPU.
//! Timing depends on the machine, so these are ignored by default; run them with
//! `cargo test -p ccl-monitor --release --test overhead -- --ignored --nocapture
//! --test-threads=1` (one at a time, so the idle test sees only its own collector).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccl_monitor::{CollId, Engine, Monitor, MonitorConfig, Op, Publisher, Unit, Work};

fn work(ts_ns: u64) -> Work {
    Work {
        ts_ns,
        bytes: 1 << 20,
        peer: 1,
        path: 0,
        nic: 0,
        engine: Engine::Mpt,
        unit: Unit::Chunk,
        coll: CollId {
            comm: 1,
            op: Op::AllReduce,
            seq: 0,
        },
    }
}

/// Nanoseconds per stamped post + complete pair.
fn per_pair(p: &Publisher, n: u64) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        let w = work(p.now_ns());
        p.post(black_box(&w));
        p.complete(black_box(&w));
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

#[test]
#[ignore = "timing; run in release with --ignored"]
fn cost_per_work_request() {
    let off = Monitor::new(&MonitorConfig::default()).unwrap();
    let on = Monitor::new(&MonitorConfig {
        enabled: true,
        ring_capacity: 1 << 16,
        ..MonitorConfig::default()
    })
    .unwrap();
    let (p_off, p_on) = (off.publisher(), on.publisher());
    // Batches small enough for the collector to keep up, so nothing is dropped.
    let mut on_ns = Vec::new();
    for _ in 0..50 {
        on_ns.push(per_pair(&p_on, 10_000));
        std::thread::sleep(Duration::from_millis(5));
    }
    on_ns.sort_by(f64::total_cmp);
    let off_ns = per_pair(&p_off, 1_000_000);
    let clock = ccl_monitor::Clock::global();
    let t0 = Instant::now();
    let sum: u64 = (0..1_000_000)
        .map(|_| black_box(clock.now_ns()))
        .fold(0, u64::wrapping_add);
    let clock_ns = t0.elapsed().as_nanos() as f64 / 1e6;
    black_box(sum);
    on.flush().unwrap();
    let snap = on.snapshot();
    println!(
        "post+complete with clock reads: on {:.1} ns (median of 50 x 10k), off {:.2} ns; \
         one clock read {clock_ns:.1} ns; clock is TSC: {}; dropped {}",
        on_ns[25],
        off_ns,
        ccl_monitor::Clock::global().is_tsc(),
        snap.dropped
    );
    assert!(on_ns[25] < 1000.0 && off_ns < 10.0);
}

/// The /proc folder of this process's thread named `name`.
fn find_thread(name: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .filter_map(|t| Some(t.ok()?.path()))
        .find(|d| std::fs::read_to_string(d.join("comm")).is_ok_and(|c| c.trim() == name))
}

/// User plus system time of a thread (in clock ticks of 10 ms).
fn thread_cpu(dir: &std::path::Path) -> Option<Duration> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

#[test]
#[ignore = "timing; run in release with --ignored"]
fn idle_collector_cpu() {
    let mon = Monitor::new(&MonitorConfig {
        enabled: true,
        ..MonitorConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let dir = find_thread("ccl-monitor").unwrap();
    let before = thread_cpu(&dir).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let used = thread_cpu(&dir).unwrap() - before;
    println!("idle collector: {used:?} of CPU in 2 s");
    assert!(used < Duration::from_millis(100), "{used:?}");
    drop(mon);
}

/// The collector's CPU time for a steady multipath-like load: five paths on two NICs, each
/// posting and completing a 64 KiB chunk every 250 us (40,000 records a second, what one
/// rank of `tests/bench/monitor_overhead.sh` at 1 MiB emits), for 2 s, with the JSON file on.
#[test]
#[ignore = "timing; run in release with --ignored"]
fn collector_cpu_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let mon = Monitor::new(&MonitorConfig {
        enabled: true,
        file: Some(dir.path().join("m.jsonl")),
        ..MonitorConfig::default()
    })
    .unwrap();
    let p = mon.publisher();
    std::thread::sleep(Duration::from_millis(50));
    // schedstat's first field: nanoseconds on a CPU (stat's ticks are too coarse here), of
    // every collector thread: the one that worked is this monitor's.
    let on_cpu = || -> Vec<(std::path::PathBuf, u64)> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| Some(t.ok()?.path()))
            .filter(|d| {
                std::fs::read_to_string(d.join("comm")).is_ok_and(|c| c.trim() == "ccl-monitor")
            })
            .filter_map(|d| {
                let s = std::fs::read_to_string(d.join("schedstat")).ok()?;
                Some((d, s.split(' ').next()?.parse().ok()?))
            })
            .collect()
    };
    let before = on_cpu();
    let t0 = Instant::now();
    let mut ticks = 0u64;
    while t0.elapsed() < Duration::from_secs(2) {
        let now = p.now_ns();
        for path in 0..5u16 {
            let w = Work {
                path,
                nic: path % 2,
                bytes: 64 << 10,
                coll: CollId {
                    comm: 1,
                    op: Op::AllReduce,
                    seq: ticks / 16,
                },
                ..work(now)
            };
            p.post(&w);
            if ticks > 0 {
                p.complete(&w);
            }
        }
        ticks += 1;
        let next = t0 + Duration::from_micros(250) * ticks as u32;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    mon.flush().unwrap();
    let after = on_cpu();
    let used = after
        .iter()
        .filter_map(|(d, ns)| Some(ns - before.iter().find(|(b, _)| b == d)?.1))
        .max()
        .map(Duration::from_nanos)
        .unwrap();
    let snap = mon.snapshot();
    let bytes = std::fs::metadata(dir.path().join("m.jsonl")).unwrap().len();
    println!(
        "collector under load: {used:?} of CPU for {} records in 2 s ({} dropped), {bytes} bytes of JSON",
        snap.records, snap.dropped
    );
    assert_eq!(snap.dropped, 0);
}
