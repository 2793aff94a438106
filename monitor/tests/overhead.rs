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
