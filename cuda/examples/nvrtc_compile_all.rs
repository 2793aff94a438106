//! Compiles every kernel source libccl generates with NVRTC, for a given architecture, with no
//! GPU needed: NVRTC is a library. Catches a source NVRTC rejects before a device run does.
//!
//!     CCL_NVRTC_LIBRARY=/path/to/libnvrtc.so.13 cargo run --release -p ccl-cuda \
//!         --example nvrtc_compile_all [compute capability, default 90]

use ccl_cuda::cuda::source::{kernel_name, kernel_source, KernelOp, ReduceKindKey};
use ccl_cuda::cuda::Nvrtc;
use ccl_cuda::DataType;

fn main() -> std::process::ExitCode {
    let nvrtc = match Nvrtc::get() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("no NVRTC: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let cc: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(90);
    let target = nvrtc.target((cc / 10, cc % 10));
    println!(
        "NVRTC {:?} at {}, target {}",
        nvrtc.version(),
        nvrtc.path(),
        target.arch
    );
    let lls = ReduceKindKey::ALL.map(KernelOp::LlAllReduce);
    let mut jobs: Vec<(DataType, KernelOp)> = Vec::new();
    for dt in DataType::ALL {
        for op in KernelOp::ALL.into_iter().chain(lls) {
            jobs.push((dt, op));
        }
    }
    for op in [
        KernelOp::LlExchange,
        KernelOp::WaitFlag,
        KernelOp::WaitCopy,
        KernelOp::LlP2p,
    ] {
        jobs.push((DataType::Uint8, op));
    }
    let mut failed = 0;
    for (dt, op) in &jobs {
        let name = kernel_name(*dt, *op);
        match nvrtc.compile(&kernel_source(*dt, *op), &name, &target) {
            Ok(_) => {}
            Err(e) => {
                failed += 1;
                eprintln!("FAIL {name}: {e}");
            }
        }
    }
    println!("{} kernels compiled, {failed} failed", jobs.len() - failed);
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
