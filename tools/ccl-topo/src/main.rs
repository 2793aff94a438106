//! `ccl-topo`: prints the system topology and the ring/tree search result for this machine
//! (or for an `NCCL_TOPO_FILE`-format file), optionally as a cluster of several copies.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ccl_topology::discover;
use ccl_topology::report::{json_report, plan_cluster, text_report};
use ccl_topology::{xml, TopoConfig};
use clap::Parser;

/// Prints the topology libccl sees and the channels it would build.
#[derive(Parser, Debug)]
#[command(name = "ccl-topo", version)]
struct Args {
    /// Read this topology file instead of discovering the machine (NCCL_TOPO_FILE format;
    /// used as is, not merged with discovery).
    #[arg(long, value_name = "FILE")]
    topo_file: Option<PathBuf>,
    /// Search this many copies of the system as a cluster (one rank per GPU, or per NUMA
    /// node without GPUs; rank = host * ranks_per_host + index).
    #[arg(long, default_value_t = 1, value_name = "M")]
    nodes: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Write the system as topology XML to FILE.
    #[arg(long, value_name = "FILE")]
    dump_xml: Option<PathBuf>,
    /// Ranks shown per ring line in the text output.
    #[arg(long, default_value_t = 32)]
    show: usize,
}

fn run(args: &Args) -> Result<(), String> {
    let cfg = TopoConfig::from_env().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let (sys, notes) = match &args.topo_file {
        Some(f) => (xml::read_file(f).map_err(|e| e.to_string())?, None),
        None => {
            let (sys, notes) = discover::system_with_notes(&cfg).map_err(|e| e.to_string())?;
            (sys, Some(notes))
        }
    };
    let t_sys = t0.elapsed();
    if let Some(n) = &notes {
        if let Some(e) = &n.cuda {
            eprintln!("ccl-topo: no GPUs from CUDA ({e})");
        }
        if let Some(e) = &n.nvml {
            eprintln!("ccl-topo: no NVLinks from NVML ({e})");
        }
    }
    if let Some(f) = &args.dump_xml {
        xml::write_file(&sys, f).map_err(|e| e.to_string())?;
    }
    let t1 = Instant::now();
    let plan = plan_cluster(&sys, args.nodes.max(1), &cfg).map_err(|e| e.to_string())?;
    let t_search = t1.elapsed();
    if args.json {
        let mut j = json_report(&plan);
        if let Some(o) = j.as_object_mut() {
            o.insert(
                "timing_ms".into(),
                serde_json::json!({
                    "system": t_sys.as_secs_f64() * 1e3,
                    "search": t_search.as_secs_f64() * 1e3,
                }),
            );
        }
        let mut s = serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?;
        s.push('\n');
        out(&s)
    } else {
        let mut s = text_report(&plan, args.show);
        s.push_str(&format!(
            "time: system {:.1} ms, search {:.1} ms\n",
            t_sys.as_secs_f64() * 1e3,
            t_search.as_secs_f64() * 1e3
        ));
        out(&s)
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn out(s: &str) -> Result<(), String> {
    let mut so = std::io::stdout().lock();
    match so.write_all(s.as_bytes()).and_then(|_| so.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccl-topo: {e}");
            ExitCode::FAILURE
        }
    }
}
