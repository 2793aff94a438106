//! `ccl-monitor`: read the monitor's JSON lines files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ccl-monitor",
    about = "Summaries and plots of libccl monitor files"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Per peer, NIC and path: bytes, mean and min window throughput, anomalies, stalls,
    /// transitions, and the anomalies that lasted.
    Summary {
        /// A monitor file, and optionally its rotated predecessors.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// An anomaly lasted when this many milliseconds passed before its recovery (or the
        /// file's end).
        #[arg(long, default_value_t = 5.0)]
        lasting_ms: f64,
    },
    /// Throughput timeline per path (or NIC, peer), anomalies and transitions marked.
    Plot {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output image: PATH.png or PATH.svg.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        view: ViewArgs,
    },
    /// One plot per file, side by side (one run analysed with several windows, say).
    Panels {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// A caption per file, in order (SVG only).
        #[arg(long)]
        label: Vec<String>,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        view: ViewArgs,
    },
}

/// What of a file a plot shows.
#[derive(clap::Args)]
struct ViewArgs {
    /// Keys drawn: path (the default, with every transition marked), nic or peer (with that
    /// scope's alerts and transitions marked).
    #[arg(long, value_parser = ["path", "nic", "peer"])]
    scope: Option<String>,
    /// Average the samples over buckets of this many milliseconds (0: every sample).
    #[arg(long, default_value_t = 0.0)]
    bucket_ms: f64,
    /// Draw from this time on (ms, the file's clock).
    #[arg(long)]
    from_ms: Option<f64>,
    /// Draw up to this time (ms).
    #[arg(long)]
    to_ms: Option<f64>,
}

impl ViewArgs {
    fn view(&self) -> ccl_monitor_tool::plot::View {
        ccl_monitor_tool::plot::View {
            scope: self.scope.clone(),
            bucket_ms: self.bucket_ms.max(0.0),
            from_ms: self.from_ms.unwrap_or(f64::NEG_INFINITY),
            to_ms: self.to_ms.unwrap_or(f64::INFINITY),
        }
    }
}

fn run(cli: Cli) -> Result<(), ccl_monitor_tool::Error> {
    match cli.cmd {
        Cmd::Summary { files, lasting_ms } => {
            let lines = ccl_monitor_tool::load(&files)?;
            let lasting_ns = (lasting_ms.max(0.0) * 1e6) as u64;
            let rows = ccl_monitor_tool::summary::summarize(&lines, lasting_ns);
            let header = format!(">={lasting_ms}ms");
            let mut text = ccl_monitor_tool::summary::render(&rows, &header);
            let colls = ccl_monitor_tool::summary::collectives(&lines);
            if !colls.is_empty() {
                text.push('\n');
                text.push_str(&ccl_monitor_tool::summary::render_collectives(&colls));
            }
            // A reader that stops early (`| head`) is no error of ours.
            use std::io::Write as _;
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
        Cmd::Plot { files, out, view } => {
            let lines = ccl_monitor_tool::load(&files)?;
            ccl_monitor_tool::plot::plot_view(&lines, &view.view(), &out)?;
            tracing::info!(out = %out.display(), "plot written");
        }
        Cmd::Panels {
            files,
            label,
            out,
            view,
        } => {
            let mut sets = Vec::new();
            for (i, f) in files.iter().enumerate() {
                let name = label
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| f.display().to_string());
                sets.push((name, ccl_monitor_tool::load(std::slice::from_ref(f))?));
            }
            ccl_monitor_tool::plot::plot_panels(&sets, &view.view(), &out)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccl-monitor: {e}");
            ExitCode::FAILURE
        }
    }
}
