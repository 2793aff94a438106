//! Every kernel source compiles with NVRTC for an H100 / H200 (`sm_90`): the reduction kernels
//! for every type and reduction, the low-latency all-reduce, exchange and point-to-point
//! kernels, the wait, copy and mail kernels, the captured groups' kernels, the one-pass
//! reductions of 3 and most sources. Needs only NVRTC (no GPU, no driver): a kernel that does not compile would
//! otherwise first fail on a GPU machine, at its first launch. Skipped, saying so, where NVRTC
//! cannot be loaded (point `LD_LIBRARY_PATH` at a `libnvrtc.so.12` or `.13`, e.g. from the
//! `nvidia-cuda-nvrtc-cu12` wheel, to run it).

use ccl_cuda::cuda::nvrtc::Nvrtc;
use ccl_cuda::cuda::source::{kernel_name, kernel_source, KernelOp, ReduceKindKey, REDUCE_N_MAX};
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
    for dt in DataType::ALL {
        let k = REDUCE_N_MAX as u8;
        keys.push((dt, KernelOp::ReduceN(ReduceKindKey::Sum, 3)));
        keys.push((dt, KernelOp::ReduceN(ReduceKindKey::Max, k)));
        keys.push((dt, KernelOp::ReduceNMail(ReduceKindKey::Sum, 2)));
        keys.push((dt, KernelOp::ReduceNMail(ReduceKindKey::Min, k)));
        keys.push((dt, KernelOp::GraphAllReduce(ReduceKindKey::Sum, 2)));
        keys.push((dt, KernelOp::GraphAllReduce(ReduceKindKey::Min, k)));
    }
    for op in [
        KernelOp::LlExchange,
        KernelOp::LlP2p,
        KernelOp::WaitFlag,
        KernelOp::WaitCopy,
        KernelOp::MailCopy,
        KernelOp::GraphCopies,
        KernelOp::GraphHandshake,
    ] {
        keys.push((DataType::Uint8, op));
    }
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
