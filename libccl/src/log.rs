//! Logging: `NCCL_DEBUG` levels mapped onto `tracing`, installed once per process.

use std::sync::Once;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::params;

static INIT: Once = Once::new();

/// Installs the subscriber the first time libccl is used. `NCCL_DEBUG=VERSION` prints the
/// version banner only; WARN, INFO, TRACE map to the tracing levels of the same names.
pub fn init() {
    INIT.call_once(|| {
        let level = params::NCCL_DEBUG.get_str().to_ascii_uppercase();
        let filter = match level.as_str() {
            "TRACE" => "trace",
            "INFO" => "info",
            "WARN" => "warn",
            "VERSION" | "" => "error",
            _ => "warn",
        };
        if level == "VERSION" || level == "INFO" || level == "TRACE" {
            eprintln!(
                "libccl version {} (NCCL API {})",
                crate::VERSION_STRING,
                crate::NCCL_VERSION_CODE
            );
        }
        let subsys = params::NCCL_DEBUG_SUBSYS.get_str();
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let builder = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(directives(
                &subsys, filter,
            )))
            .event_format(NcclFormat { host: host.clone() });
        let file = params::NCCL_DEBUG_FILE.raw().and_then(|p| {
            let p = p
                .replace("%h", &host)
                .replace("%p", &std::process::id().to_string());
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        // A second subscriber (the host program installed its own) is fine: keep theirs.
        let _ = match file {
            Some(f) => builder.with_writer(std::sync::Mutex::new(f)).try_init(),
            None => builder.with_writer(std::io::stderr).try_init(),
        };
    });
}

/// Lines as NCCL writes them (`host:pid:tid NCCL WARN text`, which is what people grep job
/// logs for), after an RFC 3339 time (NCCL's timestamp comes first too, and the namespace
/// benchmarks read it). NCCL's `[device]` is left out: a message does not know it.
struct NcclFormat {
    host: String,
}

impl<S, N> FormatEvent<S, N> for NcclFormat
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        SystemTime.format_time(&mut w)?;
        // NCCL has no error level: its errors are warnings.
        let level = match *event.metadata().level() {
            tracing::Level::ERROR | tracing::Level::WARN => "WARN",
            tracing::Level::INFO => "INFO",
            _ => "TRACE",
        };
        let tid = nix::unistd::gettid();
        write!(
            w,
            " {}:{}:{tid} NCCL {level} ",
            self.host,
            std::process::id()
        )?;
        // Through a writer of its own, which has no colour codes (the subscriber's may).
        let mut text = String::new();
        ctx.field_format()
            .format_fields(Writer::new(&mut text), event)?;
        writeln!(w, "{text}")
    }
}

/// NCCL's debug subsystems and the modules whose messages belong to each. A message's tracing
/// target is its module's path, and a filter directive covers every target that begins with
/// it (`ccl` covers `ccl_p2p` too), the longest matching one deciding.
const SUBSYSTEMS: &[(&str, &[&str])] = &[
    (
        "INIT",
        &[
            "ccl::comm",
            "ccl::core",
            "ccl::connect",
            "ccl::engine",
            "ccl::topo_plan",
            "ccl_cuda",
        ],
    ),
    ("BOOTSTRAP", &["ccl::bootstrap"]),
    ("ENV", &["ccl::params", "ccl::log"]),
    (
        "COLL",
        &[
            "ccl::exec",
            "ccl::group",
            "ccl::route",
            "ccl::host",
            "ccl::pieces",
            "ccl::task",
            "ccl::graph",
            "ccl::gpu",
            "ccl::hier",
            "ccl_collectives",
        ],
    ),
    ("P2P", &["ccl_p2p", "ccl::ipc"]),
    ("SHM", &["ccl_transports::shm"]),
    ("NET", &["ccl_transports", "ccl_faulttol", "ccl::link_nics"]),
    ("GRAPH", &["ccl_topology"]),
    ("TUNING", &["ccl_p2p::tuning"]),
    ("PROXY", &["ccl::gpu::proxy"]),
    ("ALLOC", &["ccl::gpu::alloc"]),
    ("REG", &["ccl_p2p::registration"]),
    ("PROFILE", &["ccl::profiler", "ccl::monitor", "ccl_monitor"]),
    // The C API's own crate (`nccl`): the text of every error a call returns.
    ("CALL", &["nccl"]),
];

/// The filter for `NCCL_DEBUG_SUBSYS` (a comma list of [`SUBSYSTEMS`] names; `^` first: all
/// but those; empty or ALL: all) at `level`. Warnings and errors show whatever the list, as
/// in NCCL; the list only chooses whose info and trace messages do.
fn directives(subsys: &str, level: &str) -> String {
    let spec = subsys.trim();
    let invert = spec.starts_with('^');
    let names: Vec<String> = spec
        .trim_start_matches('^')
        .split(',')
        .map(|n| n.trim().to_ascii_uppercase())
        .filter(|n| !n.is_empty())
        .collect();
    let all = names.is_empty() || (!invert && names.iter().any(|n| n == "ALL"));
    if all || !matches!(level, "info" | "trace") {
        return format!("ccl={level},nccl={level}");
    }
    let pick = |on: bool| if on { level } else { "warn" };
    // Modules in no subsystem follow the list's sense: shown with "^X", hidden with "X".
    let mut d = vec![format!("ccl={}", pick(invert))];
    for (name, modules) in SUBSYSTEMS {
        let on = names.iter().any(|n| n == name) != invert;
        d.extend(modules.iter().map(|m| format!("{m}={}", pick(on))));
    }
    d.join(",")
}

#[cfg(test)]
mod tests {
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
}
