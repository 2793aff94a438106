//! Every kernel source compiles with NVRTC for an H100 / H200 (`sm_90`): the reduction kernels
//! for every type and reduction, the low-latency all-reduce, exchange and point-to-point
//! kernels. Needs only NVRTC (no GPU, no driver): a kernel that does not compile would
//! otherwise first fail on a GPU machine, at its first launch. Skipped, saying so, where NVRTC
//! cannot be loaded (point `LD_LIBRARY_PATH` at a `libnvrtc.so.12` or `.13`, e.g. from the
//! `nvidia-cuda-nvrtc-cu12` wheel, to run it).

use ccl_cuda::cuda::nvrtc::Nvrtc;
use ccl_cuda::cuda::source::{kernel_name, kernel_source, KernelOp, ReduceKindKey};
use ccl_cuda::DataType;

#[test]
fn every_kernel_compiles_for_sm_90() {
    let nvrtc = match Nvrtc::get() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("skipping: no NVRTC here ({e})");
            return;
        }
    };
    let target = nvrtc.target((9, 0));
    let mut keys: Vec<(DataType, KernelOp)> = Vec::new();
    for dt in DataType::ALL {
        keys.extend(KernelOp::ALL.iter().map(|&op| (dt, op)));
        keys.extend(
            ReduceKindKey::ALL
                .iter()
                .map(|&k| (dt, KernelOp::LlAllReduce(k))),
        );
    }
    keys.push((DataType::Uint8, KernelOp::LlExchange));
    keys.push((DataType::Uint8, KernelOp::LlP2p));
    let failed: Vec<String> = keys
        .iter()
        .filter_map(|&(dt, op)| {
            let name = kernel_name(dt, op);
            nvrtc
                .compile(&kernel_source(dt, op), &name, &target)
                .err()
                .map(|e| format!("{name}: {e}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} kernels failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
