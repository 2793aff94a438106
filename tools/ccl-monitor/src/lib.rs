//! The `ccl-monitor` tool's work: summaries and throughput plots of the JSON lines files the
//! monitor writes.

pub mod plot;
pub mod summary;

use std::path::PathBuf;

use ccl_monitor::export::json::read_lines;
use ccl_monitor::export::JsonLine;

/// Everything that goes wrong in the tool.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Monitor(#[from] ccl_monitor::Error),
    #[error("drawing: {0}")]
    Plot(String),
    #[error(transparent)]
    Png(#[from] ccl_plot::PngError),
    #[error("{}: the output must end in .png or .svg", .0.display())]
    Format(PathBuf),
}

/// The lines of several files (a file and its rotated predecessors), in time order.
pub fn load(files: &[PathBuf]) -> Result<Vec<JsonLine>, Error> {
    let mut lines = Vec::new();
    for f in files {
        lines.extend(read_lines(f)?);
    }
    lines.sort_by_key(|l| l.ts_ns);
    Ok(lines)
}
