//! `ncclMemAlloc` and `ncclMemFree` with a GPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ccl_cuda::cuda::{self, Context};
use parking_lot::Mutex;

use super::device::{available, cuda_err, is_device_ptr};
use crate::error::Result;
use crate::params;

/// `ncclMemAlloc` with a GPU: device memory on the calling thread's current device (or
/// device 0). As NCCL does, CUDA VMM memory ([`cuda::VmmAllocation`], registered in
/// [`cuda::vmm`] so that peers can map it through its file descriptor) readable and writable by
/// every GPU of the process that has P2P to it; `cuMemAlloc` memory (legacy CUDA IPC) with
/// `NCCL_CUMEM_ENABLE=0` or where VMM fails. `None` without CUDA: the caller uses host memory.
pub fn mem_alloc(bytes: usize) -> Result<Option<usize>> {
    if !available() {
        return Ok(None);
    }
    let drv = cuda::Driver::get().map_err(cuda_err)?;
    let dev = cuda::current_device().ok().flatten().unwrap_or(0);
    // The device's primary context stays retained for the life of the process: releasing the
    // last reference would destroy it, and every allocation with it.
    static RETAINED: std::sync::OnceLock<Mutex<Vec<Arc<Context>>>> = std::sync::OnceLock::new();
    let ctx = {
        let mut held = RETAINED.get_or_init(Default::default).lock();
        match held.iter().find(|c| c.ordinal() == dev) {
            Some(c) => c.clone(),
            None => {
                let c = Context::new(dev).map_err(cuda_err)?;
                held.push(c.clone());
                c
            }
        }
    };
    if params::NCCL_CUMEM_ENABLE.get_bool() {
        match vmm_alloc(&ctx, bytes) {
            Ok(ptr) => {
                static TOLD: AtomicBool = AtomicBool::new(false);
                if !TOLD.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "ncclMemAlloc: CUDA VMM memory on device {dev}, shared with peers by file descriptor"
                    );
                }
                return Ok(Some(ptr));
            }
            Err(e) => {
                // Once at info: a device or driver without VMM fails every time.
                static TOLD: AtomicBool = AtomicBool::new(false);
                let msg = format!(
                    "ncclMemAlloc: no CUDA VMM memory for {bytes} bytes on device {dev} ({e}); \
                     using cuMemAlloc"
                );
                if TOLD.swap(true, Ordering::Relaxed) {
                    tracing::debug!("{msg}");
                } else {
                    tracing::info!("{msg}");
                }
            }
        }
    }
    let _current = ctx.scope().map_err(cuda_err)?;
    let mut ptr: cuda::sys::CUdeviceptr = 0;
    // SAFETY: writes one CUdeviceptr; `ctx` is current on this thread for the call.
    let r = unsafe { (drv.fns.cuMemAlloc)(&mut ptr, bytes.max(1)) };
    drv.check("cuMemAlloc_v2", r).map_err(cuda_err)?;
    Ok(Some(ptr as usize))
}

fn vmm_alloc(ctx: &Arc<Context>, bytes: usize) -> cuda::Result<usize> {
    let alloc = cuda::VmmAllocation::new(ctx, bytes)?;
    // Other GPUs of this process (one process driving several devices) reach the memory only
    // once granted; cuCtxEnablePeerAccess does not cover VMM memory.
    alloc.grant_peers()?;
    let info = cuda::vmm::register(alloc)?;
    tracing::debug!(
        "ncclMemAlloc: VMM {:#x}+{} on device {} (id {})",
        info.base,
        info.len,
        info.device,
        info.alloc_id
    );
    Ok(info.base as usize)
}

/// `ncclMemFree`: frees device memory from [`mem_alloc`]; `Ok(false)` when `ptr` is not
/// device memory (the caller frees host memory).
pub fn mem_free(ptr: usize) -> Result<bool> {
    if !available() {
        return Ok(false);
    }
    if let Some(alloc) = cuda::vmm::take(ptr as cuda::sys::CUdeviceptr) {
        alloc.free().map_err(cuda_err)?;
        return Ok(true);
    }
    if !is_device_ptr(ptr) {
        return Ok(false);
    }
    let drv = cuda::Driver::get().map_err(cuda_err)?;
    // SAFETY: `ptr` is a device allocation (checked above) the caller gives up.
    let r = unsafe { (drv.fns.cuMemFree)(ptr as cuda::sys::CUdeviceptr) };
    drv.check("cuMemFree_v2", r).map_err(cuda_err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_alloc_is_vmm_memory_and_mem_free_releases_it() {
        if !available() {
            assert_eq!(mem_alloc(1000).ok().flatten(), None);
            assert!(!mem_free(0x1000).unwrap_or(true));
            return;
        }
        let p = mem_alloc(1000).unwrap().unwrap();
        match cuda::vmm::lookup(p as u64 + 999) {
            Some(info) => {
                assert_eq!(info.base, p as u64);
                assert!(info.len >= 1000);
            }
            // NCCL_CUMEM_ENABLE=0, or a device without VMM: cuMemAlloc memory.
            None => eprintln!("ncclMemAlloc fell back to cuMemAlloc"),
        }
        assert!(is_device_ptr(p));
        assert!(mem_free(p).unwrap());
        assert_eq!(cuda::vmm::lookup(p as u64), None);
    }
}
