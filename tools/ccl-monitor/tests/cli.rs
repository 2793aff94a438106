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
scope     id            bytes  mean GB/s   min GB/s anomalies stalls transitions
peer       1             3000      1.500      1.000         0      0           0
nic        0             1000      2.000      2.000         0      1           1
path       0             6000      2.000      1.000         1      0           0
path       1             8000      4.000      4.000         0      0           0
comm     171                0          -          -         0      0           1
";
    assert_eq!(out, want);
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
    let reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1200, 600));

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
}

#[test]
fn plot_refuses_other_formats() {
    let (ok, _, err) = run(&["plot", fixture().to_str().unwrap(), "--out", "/tmp/x.jpg"]);
    assert!(!ok);
    assert!(err.contains("must end in .png or .svg"), "{err}");
}
