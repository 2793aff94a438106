//! Ratio tables and plots of NVIDIA nccl-tests logs (the files `tests/gpu/nccl_tests_ab.sh`
//! leaves: `OP.LIB.REP.log` in one folder): for every op and message size, a library's speed
//! against a baseline measured in the same device call, as the baseline's time over the
//! library's (out of place; the best of each library's repetitions), which is the busbw ratio
//! wherever busbw is defined and stays meaningful at 8 bytes where it is not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod plot;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("no nccl-tests logs of library {lib} in {dir}")]
    NoLogs { lib: String, dir: PathBuf },
    #[error("plot: {0}")]
    Plot(String),
    #[error(transparent)]
    Png(#[from] ccl_plot::PngError),
    #[error("{0}: not a .png or .svg file")]
    Format(PathBuf),
}

/// One result row of a log: size in bytes, out-of-place time in microseconds, and the wrong
/// counts of both placements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub size: u64,
    pub time_us: f64,
    pub wrong: u64,
}

/// The result rows of one nccl-tests log (lines of the results table; a wrong count of
/// "N/A", as without -c, counts as 0).
pub fn parse_rows(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|line| {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() < 13 || !t[0].bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let wrong = |s: &str| s.parse::<f64>().map_or(0, |w| w as u64);
            Some(Row {
                size: t[0].parse().ok()?,
                time_us: t[t.len() - 8].parse().ok()?,
                wrong: wrong(t[t.len() - 5]) + wrong(t[t.len() - 1]),
            })
        })
        .collect()
}

/// Per op, per size: the best (smallest) time over a library's repetitions, and its wrong
/// results summed.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Runs {
    pub best: BTreeMap<String, BTreeMap<u64, f64>>,
    pub wrong: u64,
}

/// Reads every `OP.LIB.REP.log` of library `lib` in `dir`.
pub fn read_lib(dir: &Path, lib: &str) -> Result<Runs, Error> {
    let mut runs = Runs::default();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Io(dir.to_owned(), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() != 4 || parts[1] != lib || parts[3] != "log" {
            continue;
        }
        let text = std::fs::read(entry.path()).map_err(|e| Error::Io(entry.path(), e))?;
        let sizes = runs.best.entry(parts[0].to_owned()).or_default();
        for r in parse_rows(&String::from_utf8_lossy(&text)) {
            let t = sizes.entry(r.size).or_insert(f64::INFINITY);
            *t = t.min(r.time_us);
            runs.wrong += r.wrong;
        }
    }
    if runs.best.is_empty() {
        return Err(Error::NoLogs {
            lib: lib.to_owned(),
            dir: dir.to_owned(),
        });
    }
    Ok(runs)
}

/// Per op, per size both libraries measured: baseline time over library time.
pub type Ratios = BTreeMap<String, Vec<(u64, f64)>>;

pub fn ratios(base: &Runs, lib: &Runs) -> Ratios {
    let mut out = Ratios::new();
    for (op, sizes) in &lib.best {
        let Some(b) = base.best.get(op) else { continue };
        let v: Vec<(u64, f64)> = sizes
            .iter()
            .filter_map(|(s, &t)| Some((*s, b.get(s)? / t)))
            .filter(|(s, r)| *s > 0 && r.is_finite())
            .collect();
        if !v.is_empty() {
            out.insert(op.clone(), v);
        }
    }
    out
}

/// A size as nccl-tests users say it: 8 B, 64 KiB, 2 MiB, 1 GiB.
pub fn size_name(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The markdown table: a row per size, a column per op, then each op's median and lowest
/// ratio, and the wrong results of both libraries.
pub fn table(r: &Ratios, names: (&str, &str), wrong: (u64, u64)) -> String {
    let ops: Vec<&String> = r.keys().collect();
    let mut sizes: Vec<u64> = r.values().flatten().map(|&(s, _)| s).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut s = format!(
        "{} / {} (time ratio, out of place; above 1: {} faster)\n\n| size |",
        names.1, names.0, names.1
    );
    for op in &ops {
        s.push_str(&format!(" {op} |"));
    }
    s.push_str(&format!("\n|---|{}\n", "---|".repeat(ops.len())));
    let cell = |op: &str, size: u64| {
        r[op]
            .iter()
            .find(|(x, _)| *x == size)
            .map_or("-".to_owned(), |(_, v)| format!("{v:.2}"))
    };
    for &size in &sizes {
        s.push_str(&format!("| {} |", size_name(size)));
        for op in &ops {
            s.push_str(&format!(" {} |", cell(op, size)));
        }
        s.push('\n');
    }
    for (label, f) in [
        ("median", median as fn(&mut [f64]) -> f64),
        ("lowest", |v: &mut [f64]| {
            v.iter().copied().fold(f64::INFINITY, f64::min)
        }),
    ] {
        s.push_str(&format!("| **{label}** |"));
        for op in &ops {
            let mut v: Vec<f64> = r[op.as_str()].iter().map(|&(_, x)| x).collect();
            s.push_str(&format!(" {:.2} |", f(&mut v)));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "\n#wrong over every size and repetition: {} {}, {} {}\n",
        names.0, wrong.0, names.1, wrong.1
    ));
    s
}

/// The speed targets of nccl-tests against NCCL that the ratios are judged by: every size at
/// least `floor` (run-to-run noise), the median over sizes at least `median` (if any), and for
/// the ops whose large transfers copy engines should win, at least `large` at each of
/// `large_sizes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    pub floor: f64,
    pub median: Option<f64>,
    pub large: f64,
    pub large_sizes: Vec<u64>,
    pub large_ops: Vec<String>,
}

impl Default for Targets {
    /// The project's targets for nccl-tests' nine ops (`-b 8 -e 1G -f 2`).
    fn default() -> Self {
        Targets {
            floor: 0.95,
            median: Some(1.05),
            large: 1.15,
            large_sizes: vec![128 << 20, 1 << 30],
            large_ops: [
                "all_gather",
                "alltoall",
                "broadcast",
                "sendrecv",
                "gather",
                "scatter",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl Targets {
    /// The target of the same runs captured in CUDA graphs (`-G 5`): every size at least 0.95,
    /// nothing more.
    pub fn graphs() -> Self {
        Targets {
            median: None,
            large_ops: Vec::new(),
            ..Targets::default()
        }
    }

    /// The target of host time per call (`-C 1`, where nccl-tests' time is the time to issue
    /// one operation): at most the baseline's at every size, a ratio of at least 1.
    pub fn host() -> Self {
        Targets {
            floor: 1.0,
            ..Targets::graphs()
        }
    }
}

/// One line per op and target, `PASS` or `MISS` with what missed it (the sizes below the
/// floor, the median, the large sizes' ratios; a large size the logs lack misses), then the
/// count of misses.
pub fn verdict(r: &Ratios, t: &Targets) -> String {
    let mut lines = Vec::new();
    for (op, v) in r {
        let low: Vec<String> = v
            .iter()
            .filter(|&&(_, x)| x < t.floor)
            .map(|&(s, x)| format!("{} {x:.3}", size_name(s)))
            .collect();
        lines.push(judged(op, &format!("every size >= {:.2}", t.floor), &low));
        if let Some(target) = t.median {
            let mut xs: Vec<f64> = v.iter().map(|&(_, x)| x).collect();
            let m = median(&mut xs);
            let miss = (m < target).then(|| format!("{m:.3}"));
            lines.push(judged(
                op,
                &format!("median >= {target:.2}"),
                &Vec::from_iter(miss),
            ));
        }
        if t.large_ops.iter().any(|o| o == op) {
            let short: Vec<String> = t
                .large_sizes
                .iter()
                .filter_map(|&s| match v.iter().find(|&&(x, _)| x == s) {
                    Some(&(_, x)) if x >= t.large => None,
                    Some(&(_, x)) => Some(format!("{} {x:.3}", size_name(s))),
                    None => Some(format!("{} not measured", size_name(s))),
                })
                .collect();
            let at: Vec<String> = t.large_sizes.iter().map(|&s| size_name(s)).collect();
            lines.push(judged(
                op,
                &format!(">= {:.2} at {}", t.large, at.join(", ")),
                &short,
            ));
        }
    }
    let misses = lines.iter().filter(|l| l.contains("MISS")).count();
    format!(
        "{}\n{misses} of {} targets missed\n",
        lines.join("\n"),
        lines.len()
    )
}

fn judged(op: &str, target: &str, missed: &[String]) -> String {
    if missed.is_empty() {
        format!("PASS {op}: {target}")
    } else {
        format!("MISS {op}: {target}: {}", missed.join(", "))
    }
}
