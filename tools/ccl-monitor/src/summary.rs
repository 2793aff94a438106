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
    /// Anomalies that lasted at least the summary's threshold (to their recovery, or to the
    /// file's end): at 1 ms of judgement a key dips below half its baseline for a moment
    /// hundreds of times a run (a peer's acknowledgements late by a millisecond), which an
    /// operator reads apart from a drop that holds.
    pub lasting: u64,
    pub stalls: u64,
    pub transitions: u64,
    sum_bps: f64,
    /// When the anomaly still open began.
    open_since: Option<u64>,
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

/// The figures of every key the lines mention; an anomaly counts as lasting when it held for
/// at least `lasting_ns`.
pub fn summarize(lines: &[JsonLine], lasting_ns: u64) -> Vec<Row> {
    let mut rows: BTreeMap<(u8, String, u64), Row> = BTreeMap::new();
    let end = lines.iter().map(|l| l.ts_ns).max().unwrap_or(0);
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
            LineKind::Anomaly => {
                row.anomalies += 1;
                row.open_since = Some(l.ts_ns);
            }
            LineKind::Stall => row.stalls += 1,
            LineKind::Transition => row.transitions += 1,
            LineKind::Recovered => close(row, l.ts_ns, lasting_ns),
        }
    }
    rows.into_values()
        .map(|mut r| {
            close(&mut r, end, lasting_ns);
            r
        })
        .collect()
}

/// Ends the key's open anomaly at `ts_ns`, counting it when it lasted.
fn close(row: &mut Row, ts_ns: u64, lasting_ns: u64) {
    if let Some(from) = row.open_since.take() {
        row.lasting += u64::from(ts_ns.saturating_sub(from) >= lasting_ns);
    }
}

fn add_sample(row: &mut Row, l: &JsonLine) {
    row.bytes = row.bytes.max(l.bytes.unwrap_or(0));
    let Some(t) = l.tput_bps else { return };
    row.samples += 1;
    row.sum_bps += t;
    row.mean_bps = Some(row.sum_bps / row.samples as f64);
    row.min_bps = Some(row.min_bps.map_or(t, |m| m.min(t)));
}

/// The rows as a table, throughput in GB/s; `lasting` names the threshold of the lasting
/// anomalies' column.
pub fn render(rows: &[Row], lasting: &str) -> String {
    let gbps = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.3}", v / 1e9));
    let mut out = format!(
        "{:<5} {:>6} {:>16} {:>10} {:>10} {:>9} {:>6} {:>11} {:>9}\n",
        "scope",
        "id",
        "bytes",
        "mean GB/s",
        "min GB/s",
        "anomalies",
        "stalls",
        "transitions",
        lasting
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<5} {:>6} {:>16} {:>10} {:>10} {:>9} {:>6} {:>11} {:>9}",
            r.scope,
            r.id,
            r.bytes,
            gbps(r.mean_bps),
            gbps(r.min_bps),
            r.anomalies,
            r.stalls,
            r.transitions,
            r.lasting
        );
    }
    out
}

/// One communicator's operations of one kind, as the lines name them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollRow {
    pub comm: u64,
    /// As the file spells it (`all_reduce`, `send`...).
    pub op: String,
    /// Distinct sequence numbers seen, and the lowest and highest.
    pub ops: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub anomalies: u64,
    pub stalls: u64,
    /// The sequence numbers that had an anomaly or a stall, in order.
    pub alerted: Vec<u64>,
}

/// The operations the lines name (samples, alerts and stalls carry them), by communicator
/// and kind.
pub fn collectives(lines: &[JsonLine]) -> Vec<CollRow> {
    let mut seen: BTreeMap<(u64, String), (CollRow, std::collections::BTreeSet<u64>)> =
        BTreeMap::new();
    for l in lines {
        let (Some(comm), Some(op), Some(seq)) = (l.comm, l.op, l.seq) else {
            continue;
        };
        let name = serde_json::to_value(op)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let (row, seqs) = seen.entry((comm, name.clone())).or_insert_with(|| {
            let row = CollRow {
                comm,
                op: name,
                first_seq: seq,
                last_seq: seq,
                ..CollRow::default()
            };
            (row, Default::default())
        });
        seqs.insert(seq);
        row.first_seq = row.first_seq.min(seq);
        row.last_seq = row.last_seq.max(seq);
        let alert = match l.kind {
            Some(LineKind::Anomaly) => {
                row.anomalies += 1;
                true
            }
            Some(LineKind::Stall) => {
                row.stalls += 1;
                true
            }
            _ => false,
        };
        if alert && !row.alerted.contains(&seq) {
            row.alerted.push(seq);
        }
    }
    seen.into_values()
        .map(|(mut row, seqs)| {
            row.ops = seqs.len() as u64;
            row.alerted.sort_unstable();
            row
        })
        .collect()
}

/// The operations as a table; at most 10 alerted sequence numbers are listed per row.
pub fn render_collectives(rows: &[CollRow]) -> String {
    let mut out = format!(
        "{:<18} {:<14} {:>6} {:>15} {:>9} {:>6}  alerted seq\n",
        "comm", "op", "ops", "seq", "anomalies", "stalls"
    );
    for r in rows {
        let mut alerted: Vec<String> = r.alerted.iter().take(10).map(u64::to_string).collect();
        if r.alerted.len() > 10 {
            alerted.push(format!("(+{})", r.alerted.len() - 10));
        }
        let _ = writeln!(
            out,
            "{:<18} {:<14} {:>6} {:>15} {:>9} {:>6}  {}",
            format!("{:#x}", r.comm),
            r.op,
            r.ops,
            format!("{}-{}", r.first_seq, r.last_seq),
            r.anomalies,
            r.stalls,
            if alerted.is_empty() {
                "-".to_owned()
            } else {
                alerted.join(",")
            }
        );
    }
    out
}
