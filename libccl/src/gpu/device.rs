//! CUDA as the GPU path sees it: whether it can be used, the calling thread's device, which
//! pointers are device memory, whether a group takes the GPU path, and the helpers its
//! modules share.

use std::sync::Arc;

use ccl_cuda::cuda::{self, Context, Stream};

use crate::core::Comm;
use crate::error::{Error, ErrorKind, Result};
use crate::params;
use crate::task::Task;

pub(crate) use ccl_cuda::cuda::helpers::{device_context, plain_event};

/// The callers' streams of a group, each once.
pub(crate) fn streams_of(ctx: &Arc<Context>, tasks: &[Task]) -> Vec<Stream> {
    // SAFETY: the callers pass their own live cudaStream_t values (NCCL's contract).
    unsafe { ccl_cuda::cuda::helpers::streams_from_raw(ctx, tasks.iter().map(|t| t.stream)) }
}

pub(crate) fn cuda_err(e: cuda::CudaError) -> Error {
    Error::new(ErrorKind::Cuda, e.to_string())
}

/// Whether CUDA can be used at all (driver present, a device, not `CCL_DEVICE=host`);
/// decided once per process, since every operation asks.
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        !params::CCL_DEVICE.get_str().eq_ignore_ascii_case("host")
            && cuda::Driver::get()
                .and_then(|d| d.device_count())
                .map(|n| n > 0)
                .unwrap_or(false)
    })
}

/// The device of the calling thread's current context (what `cudaSetDevice` chose), 0 if
/// none, -1 without CUDA.
pub fn current_device() -> i32 {
    if !available() {
        return -1;
    }
    cuda::current_device().ok().flatten().unwrap_or(0)
}

/// The PCI bus id of CUDA device `dev` (`None` for -1, without CUDA, or when the driver
/// cannot say).
pub(crate) fn pci_bus_id(dev: i32) -> Option<String> {
    if dev < 0 || !available() {
        return None;
    }
    let d = cuda::Driver::get().ok()?;
    d.device(dev).and_then(|h| d.pci_bus_id(h)).ok()
}

pub(crate) fn is_device_ptr(p: usize) -> bool {
    p != 0 && cuda::is_device_memory(p as u64).unwrap_or(false)
}

/// Does this group of operations touch device memory (and so take the GPU path)?
pub fn wants_gpu(comm: &Comm, tasks: &[Task]) -> Result<bool> {
    if comm.0.cuda_dev < 0 || !available() {
        return Ok(false);
    }
    if tasks
        .iter()
        .any(|t| is_device_ptr(t.send) || is_device_ptr(t.recv))
    {
        return Ok(true);
    }
    // Operations with no buffers at all (count 0, NULL pointers) on a communicator that
    // already works on the GPU stay in stream order there, instead of making the host wait for
    // the GPU to catch up.
    Ok(comm.0.gpu.is_some() && tasks.iter().all(|t| t.send == 0 && t.recv == 0))
}
