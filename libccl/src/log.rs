//! Logging: `NCCL_DEBUG` levels mapped onto `tracing`, installed once per process.

use std::sync::Once;

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
        let builder = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
                "ccl={filter},ccl_transports={filter},ccl_faulttol={filter}"
            )))
            .with_target(false);
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
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
            Some(f) => builder
                .with_writer(std::sync::Mutex::new(f))
                .with_ansi(false)
                .try_init(),
            None => builder.with_writer(std::io::stderr).try_init(),
        };
    });
}
