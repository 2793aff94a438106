//! End-to-end runs of ccl-perf against `tests/mock_nccl.c`, a host-memory stand-in for
//! libnccl.so.2 built here with the system C compiler. Skipped (with a message) when no C
//! compiler is found; the MPI case is skipped without mpirun.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ccl-perf")
}

/// Builds the mock (and its variant without the 2.28 collectives) once per test process.
fn mock() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("ccl-perf-mock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mock_nccl.c");
    let full = dir.join("libnccl.so.2");
    let nonative = dir.join("libnccl_nonative.so");
    for (out, extra) in [(&full, None), (&nonative, Some("-DNO_NATIVE"))] {
        if out.exists() {
            continue;
        }
        let mut c = Command::new("cc");
        c.args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&src)
            .arg("-lm");
        if let Some(e) = extra {
            c.arg(e);
        }
        match c.status() {
            Ok(s) if s.success() => {}
            _ => {
                eprintln!("skipping: cannot build the mock libnccl with cc");
                return None;
            }
        }
    }
    Some((full, nonative))
}

fn run(lib: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args).arg("--nccl-lib").arg(lib);
    for k in [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "CCL_RANK",
        "CCL_NRANKS",
        "NCCL_COMM_ID",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c.output().expect("ccl-perf runs")
}

fn rows(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count()
}

#[test]
fn every_op_type_redop_root_and_rank_count() {
    let Some((full, nonative)) = mock() else {
        return;
    };
    let ops = [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
        "gather",
        "scatter",
    ];
    for lib in [&full, &nonative] {
        for g in ["1", "2", "3", "4"] {
            for op in ops {
                let args = [
                    op, "-b", "1", "-e", "4K", "-f", "8", "-d", "all", "-o", "all", "-r", "all",
                    "-g", g, "-n", "2", "-w", "1",
                ];
                let out = run(lib, &args, &[]);
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{op} -g {g} {}: {}\n{text}",
                    lib.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
                let n: usize = g.parse().unwrap_or(1);
                let roots = if matches!(op, "broadcast" | "reduce" | "gather" | "scatter") {
                    n
                } else {
                    1
                };
                let redops = if matches!(op, "all_reduce" | "reduce_scatter" | "reduce") {
                    6
                } else {
                    1
                };
                assert_eq!(rows(&out), 5 * 12 * redops * roots, "{op} -g {g}");
            }
        }
    }
}

#[test]
fn wrong_results_and_nccl_errors_fail_the_run() {
    let Some((full, _)) = mock() else { return };
    let out = run(
        &full,
        &["all_reduce", "-b", "64", "-e", "256", "-f", "4", "-g", "2"],
        &[("MOCK_NCCL_CORRUPT", "1")],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAILED"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wrong elements, first at index"), "{err}");

    let out = run(
        &full,
        &["all_gather", "-b", "64", "-e", "64", "-g", "2"],
        &[("MOCK_NCCL_FAIL", "ncclAllGather")],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ccl-perf: ncclAllGather failed: internal error (mock: injected failure in ncclAllGather)"),
        "{err}"
    );
    let out = run(
        &full,
        &["all_reduce", "-b", "64", "-e", "64"],
        &[("MOCK_NCCL_FAIL", "ncclCommInitRank")],
    );
    assert_eq!(out.status.code(), Some(2));
}

/// `CCL_DEVICE=host` tells libccl every buffer is host memory: ccl-perf then allocates host
/// buffers by default and refuses `--mem device` (GPU buffers read as host memory fault).
#[test]
fn the_host_backend_setting_means_host_buffers() {
    let Some((full, _)) = mock() else { return };
    let host = [("CCL_DEVICE", "host")];
    let out = run(
        &full,
        &["all_reduce", "-b", "64", "-e", "64", "-g", "2"],
        &host,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("host memory"));
    let out = run(
        &full,
        &["all_reduce", "-b", "64", "-e", "64", "--mem", "device"],
        &host,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CCL_DEVICE=host"), "{err}");
}

#[test]
fn output_layout_and_json() {
    let Some((full, _)) = mock() else { return };
    let json = std::env::temp_dir().join(format!("ccl-perf-{}.json", std::process::id()));
    let json_s = json.to_string_lossy().to_string();
    let out = run(
        &full,
        &[
            "all_gather",
            "-b",
            "1K",
            "-e",
            "4K",
            "-f",
            "2",
            "-g",
            "4",
            "--json",
            &json_s,
        ],
        &[],
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "# NCCL version 2.28.9");
    assert!(lines.iter().any(|l| l.starts_with(
        "# nThread 1 nGpus 4 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
    )));
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("#  Rank ")).count(),
        4
    );
    let data: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert_eq!(data.len(), 3);
    let cols: Vec<&str> = data[0].split_whitespace().collect();
    assert_eq!(&cols[..5], &["1024", "64", "float", "none", "-1"]);
    assert_eq!(cols.len(), 13);
    // busbw = algbw * 3/4 for 4 ranks (to print precision).
    let (alg, bus): (f64, f64) = (
        cols[6].parse().unwrap_or(0.0),
        cols[7].parse().unwrap_or(-1.0),
    );
    assert!((alg * 0.75 - bus).abs() <= 0.011, "{alg} {bus}");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("# Avg bus bandwidth    : ")));
    assert_eq!(lines.last().copied(), Some("#"));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
            .unwrap_or_default();
    assert_eq!(doc["rows"].as_array().map(Vec::len), Some(3));
    assert_eq!(doc["rows"][2]["size"], 4096);
    assert_eq!(doc["rows"][2]["count"], 256);
    assert_eq!(doc["summary"]["ok"], true);
    assert_eq!(doc["nranks"], 4);
    let _ = std::fs::remove_file(json);
}

#[test]
fn manual_launch_three_processes() {
    let Some((full, _)) = mock() else { return };
    let id = format!("127.0.0.1:{}", 40000 + std::process::id() % 20000);
    let mut kids = Vec::new();
    for r in 0..3 {
        let mut c = Command::new(bin());
        c.args([
            "reduce_scatter",
            "-b",
            "96",
            "-e",
            "6K",
            "-f",
            "8",
            "-d",
            "all",
            "-o",
            "all",
            "-n",
            "2",
        ])
        .arg("--nccl-lib")
        .arg(&full)
        .env("CCL_RANK", r.to_string())
        .env("CCL_NRANKS", "3")
        .env("NCCL_COMM_ID", &id)
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        kids.push(c.spawn().expect("spawn"));
    }
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().expect("wait"))
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(rows(&outs[0]), 3 * 12 * 6);
    assert_eq!(rows(&outs[1]), 0);
}

#[test]
fn mpirun_two_processes_two_ranks_each() {
    let Some((full, _)) = mock() else { return };
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("skipping: no mpirun");
        return;
    }
    let dir = full.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "2",
            "-x",
            "LD_LIBRARY_PATH",
        ])
        .arg(bin())
        .args([
            "sendrecv", "-b", "8", "-e", "64K", "-f", "8", "-d", "all", "-g", "2", "-n", "2",
        ])
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("mpirun runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("launch mpi, 2 processes, 4 ranks"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("#  Rank ")).count(),
        4
    );
    assert_eq!(rows(&out), 5 * 12);
}
