//! `ccl-report DIR --base nccl --lib new [--plot ratio.png] [--plot ratio.svg] [--verdict
//! [--graphs | --host]]`: the ratio table of nccl-tests logs (markdown on stdout), its plot, and how it
//! meets the targets.

use std::path::PathBuf;
use std::process::ExitCode;

use ccl_report::{plot, ratios, read_lib, table, verdict, Error, Targets};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Ratio tables and plots of NVIDIA nccl-tests logs (OP.LIB.REP.log files)")]
struct Args {
    /// Folder of the logs (as tests/gpu/nccl_tests_ab.sh leaves them).
    dir: PathBuf,
    /// The baseline library's name in the file names.
    #[arg(long, default_value = "nccl")]
    base: String,
    /// The library measured against it.
    #[arg(long, default_value = "new")]
    lib: String,
    /// Plot files to write (.png, .svg); may be given more than once.
    #[arg(long)]
    plot: Vec<PathBuf>,
    /// Also judge the ratios by the speed targets (every size >= 0.95, median >= 1.05, >= 1.15
    /// at 128 MiB and 1 GiB for the six data-movement ops): a PASS or MISS line per op and target.
    #[arg(long)]
    verdict: bool,
    /// With --verdict: the logs are of CUDA graphs (-G 5), judged by every size >= 0.95 alone.
    #[arg(long)]
    graphs: bool,
    /// With --verdict: the logs are of host time per call (-C 1), judged by every size >= 1
    /// (no more host time than the baseline's).
    #[arg(long, conflicts_with = "graphs")]
    host: bool,
    /// The plots' caption.
    #[arg(long, default_value = "libccl against NVIDIA NCCL")]
    caption: String,
}

fn run(a: &Args) -> Result<(), Error> {
    let (base, lib) = (read_lib(&a.dir, &a.base)?, read_lib(&a.dir, &a.lib)?);
    let r = ratios(&base, &lib);
    print!("{}", table(&r, (&a.base, &a.lib), (base.wrong, lib.wrong)));
    let colours: Vec<String> = r
        .keys()
        .zip(plot::OP_COLORS.iter().cycle())
        .map(|(op, (c, _))| format!("{op} {c}"))
        .collect();
    println!("\nPlot colours: {}.", colours.join(", "));
    if a.verdict {
        let t = match (a.graphs, a.host) {
            (true, _) => Targets::graphs(),
            (_, true) => Targets::host(),
            _ => Targets::default(),
        };
        print!("\n{}", verdict(&r, &t));
    }
    for out in &a.plot {
        plot::plot(&r, &a.caption, out)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccl-report: {e}");
            ExitCode::FAILURE
        }
    }
}
