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
#[rustfmt::skip]
const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("INIT", &["ccl::comm", "ccl::core", "ccl::connect", "ccl::engine", "ccl::topo_plan", "ccl_cuda"]),
    ("BOOTSTRAP", &["ccl::bootstrap"]),
    ("ENV", &["ccl::params", "ccl::log", "ccl::env_notes"]),
    ("COLL", &["ccl::exec", "ccl::group", "ccl::route", "ccl::host", "ccl::pieces", "ccl::task",
               "ccl::graph", "ccl::gpu", "ccl::hier", "ccl_collectives"]),
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
mod tests;
