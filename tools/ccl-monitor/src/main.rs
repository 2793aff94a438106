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
    /// transitions.
    Summary {
        /// A monitor file, and optionally its rotated predecessors.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Throughput timeline per path, anomalies and transitions marked.
    Plot {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output image: PATH.png or PATH.svg.
        #[arg(long)]
        out: PathBuf,
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
    },
}

fn run(cli: Cli) -> Result<(), ccl_monitor_tool::Error> {
    match cli.cmd {
        Cmd::Summary { files } => {
            let rows = ccl_monitor_tool::summary::summarize(&ccl_monitor_tool::load(&files)?);
            print!("{}", ccl_monitor_tool::summary::render(&rows));
        }
        Cmd::Plot { files, out } => {
            let lines = ccl_monitor_tool::load(&files)?;
            ccl_monitor_tool::plot::plot(&lines, &out)?;
            tracing::info!(out = %out.display(), "plot written");
        }
        Cmd::Panels { files, label, out } => {
            let mut sets = Vec::new();
            for (i, f) in files.iter().enumerate() {
                let name = label.get(i).cloned().unwrap_or_else(|| f.display().to_string());
                sets.push((name, ccl_monitor_tool::load(std::slice::from_ref(f))?));
            }
            ccl_monitor_tool::plot::plot_panels(&sets, &out)?;
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
