//! Launching a kernel: the arguments checked against the device and the element type, and
//! `cuLaunchKernel` on a stream.

use std::ffi::c_void;

use crate::cuda::error::{CudaError, Result};
use crate::cuda::stream::Stream;
use crate::cuda::sys::*;
use crate::dtype::DataType;

use super::load::Kernels;

impl Kernels {
    /// The stream is of this device and every pointer is aligned to its element.
    /// [`Self::check_args`] for a destination and several sources.
    pub(super) fn check_sources(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
    ) -> Result<()> {
        self.check_args(
            stream,
            dt,
            std::iter::once(("dst", dst)).chain(srcs.iter().map(|&p| ("source", p))),
        )
    }

    pub(super) fn check_args<'a>(
        &self,
        stream: &Stream,
        dt: DataType,
        ptrs: impl IntoIterator<Item = (&'a str, CUdeviceptr)>,
    ) -> Result<()> {
        if stream.context().device() != self.ctx.device() {
            return Err(CudaError::InvalidArgument(format!(
                "stream of device {} used with kernels of device {}",
                stream.context().ordinal(),
                self.ctx.ordinal()
            )));
        }
        let size = dt.size() as u64;
        for (what, p) in ptrs {
            if p % size != 0 {
                return Err(CudaError::InvalidArgument(format!(
                    "{what} = {p:#x} is not aligned to {} ({size} bytes)",
                    dt.name()
                )));
            }
        }
        Ok(())
    }

    /// `cuLaunchKernel` of `func` on `stream` with a 1-D grid.
    ///
    /// # Safety
    /// `func` is a kernel of this context and `params` point, in order, at values of exactly
    /// its parameter types that live until this returns (the driver copies them); the memory
    /// the kernel touches is valid until the stream has run it.
    pub(super) unsafe fn launch_raw(
        &self,
        func: CUfunction,
        stream: &Stream,
        blocks: u32,
        threads: u32,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let _g = self.ctx.scope()?;
        let drv = self.ctx.driver();
        // SAFETY: the caller's contract.
        let r = unsafe {
            (drv.fns.cuLaunchKernel)(
                func,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        drv.check("cuLaunchKernel", r)
    }
}
