//! The throughput monitor's place in libccl: its settings from the parameter registry, and
//! the one monitor of the process, which its communicators share.
//!
//! One per process rather than per communicator: the file and the metrics port are the
//! process's (two communicators could not both write `CCL_MONITOR_FILE` or bind its port), and
//! each monitor runs a collector thread, which a rank with a hierarchy (three communicators)
//! would pay three times on a host with few cores. Communicators hold it through an `Arc`; it
//! stops (flushing its file) when the last one is destroyed.

use std::sync::{Arc, Weak};

use ccl_monitor::{Monitor, MonitorConfig};
use ccl_transports::{Link, LinkMonitor};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::params;

/// The registry's monitor parameters.
const PARAMS: [params::Param; 13] = [
    params::CCL_MONITOR,
    params::CCL_MONITOR_WINDOW,
    params::CCL_MONITOR_DROP,
    params::CCL_MONITOR_FILE,
    params::CCL_MONITOR_PORT,
    params::CCL_MONITOR_STALL_US,
    params::CCL_MONITOR_SPAN_US,
    params::CCL_MONITOR_POLL_US,
    params::CCL_MONITOR_FILE_BYTES,
    params::CCL_MONITOR_FILE_KEEP,
    params::CCL_MONITOR_EARLY,
    params::CCL_MONITOR_SAMPLE_US,
    params::CCL_MONITOR_SCHED,
];

/// The monitor's settings, from the registry: the one place they are read.
pub fn config() -> Result<MonitorConfig> {
    let mut cfg = MonitorConfig::from_lookup(|name| {
        PARAMS
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.get_str())
            .filter(|v| !v.trim().is_empty())
    })
    .map_err(|e| Error::invalid_argument(e.to_string()))?;
    // Every process of a job reads the same setting: each writes its own file.
    cfg.file = cfg.file.map(|f| {
        let f = f
            .to_string_lossy()
            .replace("%p", &std::process::id().to_string());
        f.into()
    });
    Ok(cfg)
}

/// The process's monitor, while some communicator holds it.
static PROCESS: Mutex<Weak<Monitor>> = Mutex::new(Weak::new());

/// The process's monitor (started now if no communicator holds one), or `None` when
/// `CCL_MONITOR` is off.
pub fn acquire() -> Result<Option<Arc<Monitor>>> {
    let mut cfg = config()?;
    if !cfg.enabled {
        return Ok(None);
    }
    let mut slot = PROCESS.lock();
    if let Some(m) = slot.upgrade() {
        return Ok(Some(m));
    }
    let m = match Monitor::new(&cfg) {
        // Several processes of a host read the same CCL_MONITOR_PORT: the first gets it, the
        // others record without an endpoint rather than fail init.
        Err(ccl_monitor::Error::Bind(e)) => {
            tracing::warn!("CCL_MONITOR_PORT={:?}: {e}; no metrics endpoint", cfg.port);
            cfg.port = None;
            Monitor::new(&cfg)
        }
        m => m,
    };
    let m = Arc::new(m.map_err(|e| Error::system(format!("monitor: {e}")))?);
    *slot = Arc::downgrade(&m);
    tracing::info!(
        file = ?cfg.file,
        port = ?cfg.port,
        "throughput monitor on; its clock's 0 is CLOCK_MONOTONIC {} ns",
        clock_origin(&m)
    );
    Ok(Some(m))
}

/// The process monitor's state as JSON (`cclMonitorSnapshot`): `{"enabled":..}` and the
/// fields of [`ccl_monitor::Snapshot`]; with no monitor running, `enabled` is false and the
/// rest empty.
pub fn snapshot_json() -> Result<String> {
    #[derive(serde::Serialize)]
    struct Out {
        enabled: bool,
        #[serde(flatten)]
        snapshot: ccl_monitor::Snapshot,
    }
    let monitor = PROCESS.lock().upgrade();
    let out = Out {
        enabled: monitor.as_ref().is_some_and(|m| m.is_enabled()),
        snapshot: monitor.map(|m| m.snapshot()).unwrap_or_default(),
    };
    serde_json::to_string(&out).map_err(|e| Error::internal(format!("monitor snapshot: {e}")))
}

/// The `CLOCK_MONOTONIC` reading (ns) at which the monitor's clock read 0: adding it to a
/// record's `ts_ns` puts the record on the clock scripts and other processes read.
fn clock_origin(m: &Monitor) -> u64 {
    let p = m.publisher();
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    let mono = u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000
        + u64::try_from(t.tv_nsec).unwrap_or(0);
    mono.saturating_sub(p.now_ns())
}

/// Has every link of a communicator (`links[j]` to rank `j`) report to `monitor`.
pub fn attach(monitor: &Monitor, links: &mut [Option<Box<dyn Link>>], comm: u64) {
    let publisher = monitor.publisher();
    for (peer, link) in links.iter_mut().enumerate() {
        if let Some(l) = link {
            l.attach_monitor(&LinkMonitor {
                publisher: publisher.clone(),
                peer: peer as u32,
                comm,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_without_a_monitor_is_empty() {
        if PROCESS.lock().upgrade().is_none() {
            let v: serde_json::Value = serde_json::from_str(&snapshot_json().unwrap()).unwrap();
            assert_eq!(v["enabled"], false);
            assert_eq!(v["keys"], serde_json::json!([]));
            assert_eq!(
                (v["records"].as_u64(), v["dropped"].as_u64()),
                (Some(0), Some(0))
            );
        }
    }

    #[test]
    fn defaults_are_off_and_match_the_crate() {
        let cfg = config().unwrap();
        if std::env::var_os("CCL_MONITOR").is_none() {
            assert_eq!(cfg, MonitorConfig::default());
        }
    }

    #[test]
    fn registry_defaults_parse_as_the_crate_defaults() {
        let cfg = MonitorConfig::from_lookup(|n| {
            PARAMS
                .iter()
                .find(|p| p.name == n)
                .map(|p| p.default.to_string())
                .filter(|v| !v.is_empty())
        })
        .unwrap();
        assert_eq!(cfg, MonitorConfig::default());
    }
}
