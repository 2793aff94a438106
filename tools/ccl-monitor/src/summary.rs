//! Per peer, NIC and path: bytes, window throughput, and what went wrong.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ccl_monitor::export::{JsonLine, LineKind};

/// One key's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub scope: String,
    pub id: u64,
    /// The latest cumulative byte count the samples report.
    pub bytes: u64,
    /// Mean and minimum of the sampled window throughputs (bytes/s); `None` without samples.
    pub mean_bps: Option<f64>,
    pub min_bps: Option<f64>,
    pub samples: u64,
    pub anomalies: u64,
    pub stalls: u64,
    pub transitions: u64,
    sum_bps: f64,
}

/// Peers first, then NICs, paths and communicators, each by id.
fn rank(scope: &str) -> u8 {
    match scope {
        "peer" => 0,
        "nic" => 1,
        "path" => 2,
        "comm" => 3,
        _ => 4,
    }
}

/// The figures of every key the lines mention.
pub fn summarize(lines: &[JsonLine]) -> Vec<Row> {
    let mut rows: BTreeMap<(u8, String, u64), Row> = BTreeMap::new();
    for l in lines {
        let Some(kind) = l.kind else { continue };
        let row = rows
            .entry((rank(&l.scope), l.scope.clone(), l.id))
            .or_insert_with(|| Row {
                scope: l.scope.clone(),
                id: l.id,
                ..Row::default()
            });
        match kind {
            LineKind::Sample => add_sample(row, l),
            LineKind::Anomaly => row.anomalies += 1,
            LineKind::Stall => row.stalls += 1,
            LineKind::Transition => row.transitions += 1,
            LineKind::Recovered => {}
        }
    }
    rows.into_values().collect()
}

fn add_sample(row: &mut Row, l: &JsonLine) {
    row.bytes = row.bytes.max(l.bytes.unwrap_or(0));
    let Some(t) = l.tput_bps else { return };
    row.samples += 1;
    row.sum_bps += t;
    row.mean_bps = Some(row.sum_bps / row.samples as f64);
    row.min_bps = Some(row.min_bps.map_or(t, |m| m.min(t)));
}

/// The rows as a table, throughput in GB/s.
pub fn render(rows: &[Row]) -> String {
    let gbps = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.3}", v / 1e9));
    let mut out = format!(
        "{:<5} {:>6} {:>16} {:>10} {:>10} {:>9} {:>6} {:>11}\n",
        "scope", "id", "bytes", "mean GB/s", "min GB/s", "anomalies", "stalls", "transitions"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<5} {:>6} {:>16} {:>10} {:>10} {:>9} {:>6} {:>11}",
            r.scope,
            r.id,
            r.bytes,
            gbps(r.mean_bps),
            gbps(r.min_bps),
            r.anomalies,
            r.stalls,
            r.transitions
        );
    }
    out
}
