//! Runs the `ccl-topo` binary.
#![allow(clippy::unwrap_used, clippy::panic, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn topo(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/topologies")
        .join(name)
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ccl-topo"))
        .args(args)
        .env_remove("NCCL_TOPO_FILE")
        .env_remove("NCCL_TOPO_DUMP_FILE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn json_for_a_file_and_a_cluster() {
    let f = topo("dgx-h100-nvswitch.xml");
    let (ok, out, err) = run(&["--topo-file", f.to_str().unwrap(), "--json", "--nodes", "2"]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["hosts"], 2);
    assert_eq!(j["ranks"], 16);
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(j["gpus"][5]["nic"], "mlx5_5");
    assert_ne!(j["gpus"][5]["backup_nic"], j["gpus"][5]["nic"]);
    assert_eq!(j["nics"].as_array().unwrap().len(), 9);
    assert_eq!(j["nics"][0]["speed_gbps"], 400.0);
    let paths = j["paths"].as_array().unwrap();
    assert!(paths
        .iter()
        .any(|p| p["from"] == "gpu0" && p["to"] == "mlx5_0" && p["type"] == "PIX"));
    for r in j["rings"].as_array().unwrap() {
        let mut order: Vec<u64> = r["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        order.sort_unstable();
        assert_eq!(order, (0..16).collect::<Vec<_>>());
    }
    assert!(!j["trees"].as_array().unwrap().is_empty());
}

#[test]
fn text_and_dump_round_trip() {
    let dir = std::env::temp_dir().join(format!("ccl-topo-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.xml"), dir.join("b.xml"));
    let f = topo("dualport.xml");
    let (ok, out, err) = run(&[
        "--topo-file",
        f.to_str().unwrap(),
        "--dump-xml",
        a.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("gpu2 0000:41:00.0"), "{out}");
    assert!(out.contains("backup mlx5_2:2"), "{out}");
    let (ok, _, err) = run(&[
        "--topo-file",
        a.to_str().unwrap(),
        "--dump-xml",
        b.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_file_names_the_line() {
    let dir = std::env::temp_dir().join(format!("ccl-topo-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.xml");
    std::fs::write(&f, "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\" link_width=\"wide\"/>\n  </cpu>\n</system>\n").unwrap();
    let (ok, _, err) = run(&["--topo-file", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.xml:3:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn this_machine() {
    let (ok, out, err) = run(&["--json"]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!j["cpus"].as_array().unwrap().is_empty());
}
