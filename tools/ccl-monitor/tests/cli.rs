//! The `ccl-monitor` binary on a small fixture: exact summary figures, and plots that are
//! real PNG and SVG files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.jsonl")
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ccl-monitor"))
        .args(args)
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

#[test]
fn summary_of_the_fixture() {
    let (ok, out, err) = run(&["summary", fixture().to_str().unwrap()]);
    assert!(ok, "{err}");
    let want = "\
scope     id            bytes  mean GB/s   min GB/s anomalies stalls transitions     >=5ms
peer       1             3000      1.500      1.000         0      0           0         0
nic        0             1000      2.000      2.000         0      1           1         0
path       0             6000      2.000      1.000         1      0           0         0
path       1             8000      4.000      4.000         0      0           0         0
comm     171                0          -          -         0      0           1         0

comm               op                ops             seq anomalies stalls  alerted seq
0x1                all_reduce          2             2-3         1      1  2,3
";
    assert_eq!(out, want);
}

/// An anomaly lasted when its recovery came at least `--lasting-ms` after it: the fixture's
/// path 0 recovers 20 us after its anomaly.
#[test]
fn summary_counts_the_anomalies_that_lasted() {
    let path0_lasting = |ms: &str| {
        let (ok, out, err) = run(&["summary", "--lasting-ms", ms, fixture().to_str().unwrap()]);
        assert!(ok, "{err}");
        let row: Vec<String> = out
            .lines()
            .find(|l| l.starts_with("path       0"))
            .expect(&out)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert!(out.starts_with("scope"), "{out}");
        (row[7].clone(), row[8].clone())
    };
    assert_eq!(path0_lasting("0.02"), ("0".into(), "1".into()));
    assert_eq!(path0_lasting("0.021"), ("0".into(), "0".into()));
}

#[test]
fn summary_of_a_missing_file_fails_naming_it() {
    let (ok, _, err) = run(&["summary", "/nonexistent/monitor.jsonl"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/monitor.jsonl"), "{err}");
}

#[test]
fn plot_writes_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let png_path = dir.path().join("t.png");
    let (ok, _, err) = run(&[
        "plot",
        fixture().to_str().unwrap(),
        "--out",
        png_path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let bytes = std::fs::read(&png_path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1200, 600));
    // The caption is drawn in the top band, which holds nothing else: dark pixels there are
    // its letters (a PNG without a font had none).
    let mut rgb = vec![0u8; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut rgb).unwrap();
    let dark = rgb[..40 * 1200 * 3]
        .chunks(3)
        .filter(|p| p.iter().all(|&c| c < 100))
        .count();
    assert!(dark > 100, "caption drawn in the PNG: {dark} dark pixels");

    let svg_path = dir.path().join("t.svg");
    let (ok, _, err) = run(&[
        "plot",
        fixture().to_str().unwrap(),
        "--out",
        svg_path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(svg.contains("path 0") && svg.contains("path 1") && svg.contains("time (ms)"));
    assert!(svg.contains("<polyline"), "a throughput line is drawn");
    assert!(
        svg.contains("anomaly") && svg.contains("recovery") && svg.contains("transition"),
        "the legend names the marker lines"
    );
}

#[test]
fn plot_refuses_other_formats() {
    let (ok, _, err) = run(&["plot", fixture().to_str().unwrap(), "--out", "/tmp/x.jpg"]);
    assert!(!ok);
    assert!(err.contains("must end in .png or .svg"), "{err}");
}

/// A file the monitor itself wrote: one path whose rate halves and returns (threshold 0.6).
fn monitor_file(dir: &Path) -> PathBuf {
    use ccl_monitor::{CollId, Engine, Monitor, MonitorConfig, Op, Options, TimeBase, Unit, Work};
    let file = dir.join("m.jsonl");
    let cfg = MonitorConfig {
        enabled: true,
        drop: 0.6,
        file: Some(file.clone()),
        // Windows of 8 frames (80 us): the run is too short for the default span's baseline.
        min_span: std::time::Duration::ZERO,
        ..MonitorConfig::default()
    };
    let opts = Options {
        time_base: TimeBase::Records,
        ..Options::default()
    };
    let mon = Monitor::with_options(&cfg, opts).unwrap();
    let p = mon.publisher();
    let w = |ts_ns| Work {
        ts_ns,
        bytes: 10_000,
        peer: 4,
        path: 2,
        nic: 1,
        engine: Engine::Socket,
        unit: Unit::Frame,
        coll: CollId {
            comm: 9,
            op: Op::ReduceScatter,
            seq: 1,
        },
    };
    let mut t = 0;
    p.post(&w(t));
    for i in 0..300 {
        // 10 us per frame (1 GB/s), 20 us for frames 100..200.
        t += if (100..200).contains(&i) {
            20_000
        } else {
            10_000
        };
        p.post(&w(t));
        p.complete(&w(t));
    }
    mon.shutdown().unwrap();
    file
}

#[test]
fn summary_and_plot_of_a_file_the_monitor_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let file = monitor_file(dir.path());
    let (ok, out, err) = run(&["summary", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // 300 frames of 10 kB; windows read 1 GB/s, 0.5 GB/s at the slowest; one anomaly, on
    // the peer (its only NIC and path carry all of its traffic: they are not behind any
    // other).
    for (scope, anomalies) in [
        (["peer", "4"], "1"),
        (["nic", "1"], "0"),
        (["path", "2"], "0"),
    ] {
        let row = rows
            .iter()
            .find(|r| r.get(..2) == Some(&scope[..]))
            .expect(&out);
        assert_eq!(row[2], "3000000", "{out}");
        assert_eq!(
            (row[4], row[5], row[6], row[7]),
            ("0.500", anomalies, "0", "0"),
            "{out}"
        );
    }
    let png_path = dir.path().join("m.png");
    let (ok, _, err) = run(&[
        "plot",
        file.to_str().unwrap(),
        "--out",
        png_path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        &std::fs::read(&png_path).unwrap()[..8],
        b"\x89PNG\r\n\x1a\n"
    );
}
