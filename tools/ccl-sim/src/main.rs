//! `ccl-sim`: permutation traffic over a simulated leaf/spine fat-tree, driven by the real
//! multipath core. See the library docs for the model.

use std::process::ExitCode;
use std::time::Duration;

use ccl_sim::{run_permutation, Params, Report};
use ccl_transports::mpt::CcKind;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "ccl-sim",
    about = "Fat-tree simulation of the multipath transport core"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Every NIC sends `--bytes` to one other NIC (a seeded random permutation).
    Permutation {
        #[command(flatten)]
        fabric: FabricArgs,
        /// Chunk size (K/M = KiB/MiB, KB/MB = 1000-based).
        #[arg(long, default_value = "32K")]
        chunk: String,
        /// Congestion control: swift, cubic, eqds or none.
        #[arg(long, default_value = "swift")]
        cc: String,
        /// ECN marking threshold of switch ports, KiB (CUBIC reacts to marks).
        #[arg(long)]
        ecn_kb: Option<u64>,
    },
    /// The configurations of UCCL's Table 4 that map onto this core, as a markdown table.
    Table4 {
        #[command(flatten)]
        fabric: FabricArgs,
        /// ECN threshold for the UEC-like row, KiB.
        #[arg(long, default_value_t = 256)]
        ecn_kb: u64,
    },
}

#[derive(Args, Debug, Clone)]
struct FabricArgs {
    /// NICs (hosts).
    #[arg(long, default_value_t = 1024)]
    nics: usize,
    /// Host link rate, Gb/s.
    #[arg(long, default_value_t = 400)]
    gbps: u64,
    /// Bytes per flow (64MB = 64e6 as in UCCL; 64M = 64 MiB).
    #[arg(long, default_value = "64MB")]
    bytes: String,
    /// Paths per connection.
    #[arg(long, default_value_t = 256)]
    paths: u16,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hosts per leaf switch (default: 32, or all NICs if fewer).
    #[arg(long)]
    hosts_per_leaf: Option<usize>,
    /// Spine switches (default: hosts per leaf; leaf-spine links sized for full bisection).
    #[arg(long)]
    spines: Option<usize>,
    /// Propagation delay per hop, ns.
    #[arg(long, default_value_t = 1000)]
    hop_ns: u64,
    /// Switch port buffer (drop-tail), KiB.
    #[arg(long, default_value_t = 1024)]
    queue_kb: u64,
    /// Swift target delay, us.
    #[arg(long, default_value_t = 25)]
    swift_target_us: u64,
    /// EQDS outstanding credit per receiver, KiB.
    #[arg(long, default_value_t = 768)]
    eqds_kb: u64,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult: u64 = match suffix {
        "" | "B" => 1,
        "K" | "k" | "Ki" | "KiB" => 1 << 10,
        "M" | "Mi" | "MiB" => 1 << 20,
        "G" | "Gi" | "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(format!("bad size suffix in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

fn base_params(f: &FabricArgs) -> Result<Params, String> {
    let hpl = f.hosts_per_leaf.unwrap_or_else(|| f.nics.min(32));
    Ok(Params {
        nics: f.nics,
        hosts_per_leaf: hpl,
        spines: f.spines.unwrap_or(hpl),
        host_bps: f.gbps.saturating_mul(1_000_000_000),
        bytes: parse_size(&f.bytes)?,
        paths: f.paths,
        seed: f.seed,
        hop_delay_ns: f.hop_ns,
        queue_bytes: f.queue_kb * 1024,
        swift_target: Duration::from_micros(f.swift_target_us),
        eqds_outstanding: f.eqds_kb * 1024,
        ..Params::default()
    })
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn print_report(p: &Params, r: &Report, wall: Duration) {
    println!(
        "fabric: {} NICs, {} per leaf, {} spines, {} Gb/s, {} ns/hop, {} KiB port buffers{}",
        p.nics,
        p.hosts_per_leaf,
        p.spines,
        p.host_bps / 1_000_000_000,
        p.hop_delay_ns,
        p.queue_bytes / 1024,
        p.ecn_bytes
            .map_or(String::new(), |k| format!(", ECN at {} KiB", k / 1024)),
    );
    println!(
        "flows: {} x {} bytes, {} paths, {} B chunks, cc {}, seed {}",
        r.flows.len(),
        p.bytes,
        p.paths,
        p.chunk,
        p.cc,
        p.seed
    );
    println!("last flow completion : {:.3} ms", ms(r.last_ns));
    println!("ideal (bytes / rate) : {:.3} ms", ms(r.ideal_ns));
    println!(
        "ratio to ideal       : {:.3}",
        r.last_ns as f64 / r.ideal_ns.max(1) as f64
    );
    println!(
        "mean / p99 completion: {:.3} / {:.3} ms",
        ms(r.mean_ns),
        ms(r.p99_ns)
    );
    println!(
        "drops {}  ecn marks {}  retransmitted chunks {}  RTOs {}  data packets {}",
        r.drops, r.ecn_marks, r.retransmits, r.rto_events, r.data_packets
    );
    println!(
        "max port backlog {} KiB, events {}, wall {:.1} s",
        r.max_queue_bytes / 1024,
        r.events,
        wall.as_secs_f64()
    );
}

fn run() -> Result<(), String> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Permutation {
            fabric,
            chunk,
            cc,
            ecn_kb,
        } => {
            let mut p = base_params(&fabric)?;
            p.chunk = u32::try_from(parse_size(&chunk)?).map_err(|_| "chunk too large")?;
            p.cc = cc.parse::<CcKind>().map_err(|e| e.to_string())?;
            p.ecn_bytes = ecn_kb.map(|k| k * 1024);
            let start = std::time::Instant::now();
            let r = run_permutation(&p).map_err(|e| e.to_string())?;
            print_report(&p, &r, start.elapsed());
        }
        Cmd::Table4 { fabric, ecn_kb } => {
            let base = base_params(&fabric)?;
            let rows: [(&str, &str, u32, CcKind, Option<u64>); 3] = [
                (
                    "UEC-style 4 KB + ECN",
                    "4 KB + CUBIC, ECN marks as congestion",
                    4096,
                    CcKind::Cubic,
                    Some(ecn_kb * 1024),
                ),
                (
                    "UCCL 32 KB + RTT CC, sender-driven",
                    "32 KB + Swift",
                    32 * 1024,
                    CcKind::Swift,
                    None,
                ),
                (
                    "UCCL 32 KB, receiver-driven (EQDS)",
                    "32 KB + EQDS",
                    32 * 1024,
                    CcKind::Eqds,
                    None,
                ),
            ];
            let uccl = [1.45, 1.71, 1.47];
            let mut lines = Vec::new();
            let mut ideal = 0;
            for (i, (name, ours, chunk, cc, ecn)) in rows.iter().enumerate() {
                let p = Params {
                    chunk: *chunk,
                    cc: *cc,
                    ecn_bytes: *ecn,
                    ..base.clone()
                };
                let start = std::time::Instant::now();
                let r = run_permutation(&p).map_err(|e| format!("{name}: {e}"))?;
                let wall = start.elapsed();
                eprintln!("--- {name} ({ours})");
                print_report(&p, &r, wall);
                ideal = r.ideal_ns;
                lines.push(format!(
                    "| {name} | {ours} | {:.2} | {:.3} | {:.2} | {:.3} / {:.3} | {} | {} | {:.0} s |",
                    uccl[i],
                    ms(r.last_ns),
                    r.last_ns as f64 / r.ideal_ns.max(1) as f64,
                    ms(r.mean_ns),
                    ms(r.p99_ns),
                    r.drops,
                    r.retransmits,
                    wall.as_secs_f64()
                ));
            }
            println!(
                "\n{} NICs x {} bytes, {} paths, {} Gb/s, seed {}",
                base.nics,
                base.bytes,
                base.paths,
                base.host_bps / 1_000_000_000,
                base.seed
            );
            println!("| UCCL row | ours | UCCL (ms) | ccl-sim last (ms) | x ideal | mean / p99 (ms) | drops | rtx chunks | wall |");
            println!("|---|---|---|---|---|---|---|---|---|");
            println!(
                "| ideal | bytes / link rate | 1.28 | {:.3} | 1.00 | | | | |",
                ms(ideal)
            );
            for l in lines {
                println!("{l}");
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccl-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32K"), Ok(32768));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("4X").is_err());
    }
}
