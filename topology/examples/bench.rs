//! Search timings: `cargo run --release -p ccl-topology --example bench`.
//!
//! Prints, for each synthetic topology, the median and worst time of a full plan (paths,
//! ring search, NIC choice, rings/trees over ranks) for 1 host and for 128 hosts.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ccl_topology::report::plan_cluster;
use ccl_topology::{xml, TopoConfig};

fn time(runs: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/topologies");
    let cfg = TopoConfig::default();
    println!(
        "{:<24} {:>6} {:>7} {:>12} {:>12}",
        "topology", "hosts", "ranks", "median", "max"
    );
    for name in [
        "dgx-h100-nvswitch.xml",
        "pcie-8gpu.xml",
        "dualport.xml",
        "nvlink-pair.xml",
    ] {
        let sys = match xml::read_file(&dir.join(name)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        for hosts in [1usize, 128] {
            let mut ranks = 0;
            let runs = if hosts == 1 { 50 } else { 10 };
            let (med, max) = time(runs, || {
                if let Ok(p) = plan_cluster(&sys, hosts, &cfg) {
                    ranks = p.nranks;
                }
            });
            println!(
                "{:<24} {:>6} {:>7} {:>10.2}ms {:>10.2}ms",
                name,
                hosts,
                ranks,
                med.as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3
            );
        }
    }
}
