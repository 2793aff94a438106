//! ccl-perf: an nccl-tests style benchmark that drives any `libnccl.so.2` (libccl or NVIDIA's
//! NCCL) through the nccl.h API only, loaded at run time. See `ccl-perf --help`.

mod bench;
mod cli;
mod coll;
mod dtype;
mod gen;
mod mem;
mod mpi;
mod nccl;
mod report;

use std::process::ExitCode;

use clap::Parser;

/// An error with its message ready to print.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Exit status: wrong results.
const EXIT_WRONG: u8 = 1;
/// Exit status: an nccl / MPI / CUDA error or bad arguments.
const EXIT_ERROR: u8 = 2;

fn run(cli: &cli::Cli, mpi: Option<&mpi::Mpi>, kind: bench::LaunchKind) -> Result<u64> {
    let settings = cli.settings()?;
    let mut b = bench::Bench::setup(cli, settings, kind, mpi)?;
    let (doc, wrong) = b.run().inspect_err(|_| b.abort_all())?;
    if let (Some(path), true) = (&cli.json, b.is_printer()) {
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error(format!("cannot encode JSON: {e}")))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| Error(format!("cannot write {}: {e}", path.display())))?;
    }
    b.teardown()?;
    Ok(wrong)
}

/// `ccl-perf --env [--nccl-lib PATH]`: every parameter the loaded library knows, with its
/// value and meaning, through the NCCL 2.30 parameter API (`ncclParamDumpAll`).
fn print_env() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let lib_name = args
        .iter()
        .position(|a| a == "--nccl-lib")
        .and_then(|i| args.get(i + 1))
        .map_or("libnccl.so.2", String::as_str);
    // SAFETY: loading the NCCL library runs its initialisers, trusted like any dependency.
    let lib = match unsafe { libloading::Library::new(lib_name) } {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ccl-perf: cannot load {lib_name}: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    // SAFETY: `void ncclParamDumpAll(void)` as nccl.h (2.30) declares it.
    match unsafe { lib.get::<unsafe extern "C" fn()>(b"ncclParamDumpAll\0") } {
        Ok(dump) => {
            // SAFETY: no arguments; the library prints to stdout.
            unsafe { dump() };
            ExitCode::SUCCESS
        }
        Err(_) => {
            eprintln!("ccl-perf: {lib_name} has no parameter API (ncclParamDumpAll, NCCL >= 2.30)");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--env") {
        return print_env();
    }
    let cli = cli::Cli::parse();
    // Several ranks in this process may share a GPU (more -g ranks than GPUs), and then their
    // streams share its hardware queues, where one stream's wait for a peer can hold up the
    // work that would release it (libccl, four ranks on one GPU, 8 MiB average all-reduce:
    // hung at the default 8 queues, done at 32). Set before anything starts CUDA or threads;
    // one rank per GPU runs the same either way.
    if cli.ngpus > 1 && std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    }
    let kind = match bench::detect_launch() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("ccl-perf: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let mpi = if kind == bench::LaunchKind::Mpi {
        match mpi::Mpi::init(&cli.mpi_lib) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("ccl-perf: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    } else {
        None
    };
    let code = match run(&cli, mpi.as_ref(), kind) {
        Ok(0) => 0,
        Ok(wrong) => {
            eprintln!("ccl-perf: {wrong} wrong elements");
            EXIT_WRONG
        }
        Err(e) => {
            eprintln!("ccl-perf: {e}");
            if let Some(m) = &mpi {
                // Peers may be blocked in a collective: end the whole job.
                m.abort(i32::from(EXIT_ERROR));
            }
            EXIT_ERROR
        }
    };
    if let Some(m) = &mpi {
        if let Err(e) = m.finalize() {
            eprintln!("ccl-perf: {e}");
        }
    }
    ExitCode::from(code)
}
