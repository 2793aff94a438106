//! The log filter and line format, through a subscriber per case.

use super::*;
use std::sync::{Arc, Mutex};

/// What a subscriber with the filter for `subsys` at `level` prints of one message from
/// each target.
fn shown(subsys: &str, level: &str, targets: &[&str]) -> String {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(directives(
            subsys, level,
        )))
        .event_format(NcclFormat { host: "h".into() })
        .with_writer(move || out.clone())
        .finish();
    tracing::subscriber::with_default(sub, || {
        for &t in targets {
            // The macros need a literal target: one arm per target these tests use.
            match t {
                "ccl::bootstrap" => tracing::info!(target: "ccl::bootstrap", "info from {t}"),
                "ccl_transports::mpt" => {
                    tracing::info!(target: "ccl_transports::mpt", "info from {t}")
                }
                "ccl_transports::shm" => {
                    tracing::info!(target: "ccl_transports::shm", "info from {t}")
                }
                "ccl_p2p::health" => tracing::info!(target: "ccl_p2p::health", "info from {t}"),
                "ccl::error" => tracing::info!(target: "ccl::error", "info from {t}"),
                "nccl" => tracing::warn!(target: "nccl", "warning from {t}"),
                "ccl_p2p::warned" => {
                    tracing::warn!(target: "ccl_p2p::warned", "warning from {t}")
                }
                "ccl_monitor::fields" => {
                    tracing::info!(target: "ccl_monitor::fields", cpu_us = 7, "info from {t}")
                }
                _ => unreachable!("no arm for {t}"),
            }
        }
    });
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    text
}

const ALL: &[&str] = &[
    "ccl::bootstrap",
    "ccl_transports::mpt",
    "ccl_transports::shm",
    "ccl_p2p::health",
    "ccl::error",
    "nccl",
    "ccl_p2p::warned",
];

fn from(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.split(" from ").nth(1))
        .collect()
}

#[test]
fn unset_or_all_shows_every_subsystem() {
    for subsys in ["", "ALL", " all "] {
        assert_eq!(from(&shown(subsys, "info", ALL)), ALL, "{subsys:?}");
    }
}

#[test]
fn a_list_shows_its_subsystems_info_and_everyones_warnings() {
    let got = shown("INIT,NET", "info", ALL);
    assert_eq!(
        from(&got),
        ["ccl_transports::mpt", "nccl", "ccl_p2p::warned"],
        "{got}"
    );
}

#[test]
fn a_caret_shows_all_but_the_listed() {
    let got = shown("^NET,P2P", "info", ALL);
    assert_eq!(
        from(&got),
        [
            "ccl::bootstrap",
            "ccl_transports::shm",
            "ccl::error",
            "nccl",
            "ccl_p2p::warned"
        ],
        "{got}"
    );
}

#[test]
fn lines_read_as_nccls() {
    let got = shown("", "info", &["nccl", "ccl::bootstrap"]);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines.len(), 2, "{got}");
    let pid = std::process::id();
    for (line, level) in lines.iter().zip(["WARN", "INFO"]) {
        let mut f = line.split(' ');
        let time = f.next().unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{line}");
        let who = f.next().unwrap();
        assert!(who.starts_with(&format!("h:{pid}:")), "{line}");
        assert_eq!((f.next(), f.next()), (Some("NCCL"), Some(level)), "{line}");
    }
}

#[test]
fn fields_are_plain_text() {
    // Scripts read `cpu_us=N` from the monitor's last line, and no colour codes belong
    // in a job's log.
    let got = shown("", "info", &["ccl_monitor::fields"]);
    assert!(got.contains("cpu_us=7"), "{got:?}");
    assert!(!got.contains('\x1b'), "{got:?}");
}

#[test]
fn api_errors_show_at_warn() {
    // The C API's crate is `nccl`, outside the `ccl` prefix: its warnings once went
    // nowhere.
    assert_eq!(from(&shown("", "warn", ALL)), ["nccl", "ccl_p2p::warned"]);
}
