//! The collector thread takes the scheduling `CCL_MONITOR_SCHED` names: read back from the
//! kernel for each setting.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use ccl_monitor::{CollectorSched, Monitor, MonitorConfig};

/// The thread ids of this process's threads named `name`.
fn threads_named(name: &str) -> Vec<libc::pid_t> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            ids.push(entry.file_name().to_string_lossy().parse().unwrap());
        }
    }
    ids
}

/// The collector's (policy, nice value), once it has named itself and set them (it does both
/// as it starts).
fn collector_sched(policy_wanted: libc::c_int) -> (libc::c_int, libc::c_int) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ids = threads_named("ccl-monitor");
        assert!(ids.len() <= 1, "one collector thread: {ids:?}");
        if ids.is_empty() {
            assert!(Instant::now() < deadline, "no collector thread");
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        // SAFETY: sched_getscheduler and getpriority only read the scheduling state of the
        // thread with this id.
        let (policy, nice) = unsafe {
            (
                libc::sched_getscheduler(ids[0]),
                libc::getpriority(libc::PRIO_PROCESS, ids[0] as libc::id_t),
            )
        };
        if (policy == policy_wanted && nice == 10) || Instant::now() > deadline {
            return (policy, nice);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn collector_runs_as_configured() {
    let cases = [
        (CollectorSched::Nice, libc::SCHED_OTHER),
        (CollectorSched::Batch, libc::SCHED_BATCH),
        (CollectorSched::Idle, libc::SCHED_IDLE),
    ];
    for (sched, policy) in cases {
        let cfg = MonitorConfig {
            enabled: true,
            collector_sched: sched,
            ..MonitorConfig::default()
        };
        let mon = Monitor::new(&cfg).unwrap();
        assert_eq!(collector_sched(policy), (policy, 10), "{sched:?}");
        drop(mon);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !threads_named("ccl-monitor").is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
