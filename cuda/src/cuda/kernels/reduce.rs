//! The element-wise kernels: reduce two inputs or several sources, pre-multiply (and add),
//! divide by an integer.

use std::ffi::c_void;

use crate::cuda::error::{CudaError, Result};
use crate::cuda::source::{vec_elems, KernelOp, BLOCK_THREADS, REDUCE_N_MAX, UNROLL};
use crate::cuda::stream::Stream;
use crate::cuda::sys::*;
use crate::dtype::{DataType, ReduceKind};

use super::load::Kernels;

impl Kernels {
    /// Launches `(dt, op)` over `n` elements.
    ///
    /// # Safety
    /// As the public wrappers.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        stream: &Stream,
        dt: DataType,
        op: KernelOp,
        dst: CUdeviceptr,
        a: CUdeviceptr,
        b: Option<CUdeviceptr>,
        n: usize,
        raw: u64,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.check_args(
            stream,
            dt,
            [("dst", dst), ("a", a)]
                .into_iter()
                .chain(b.map(|b| ("b", b))),
        )?;
        let func = self.function(dt, op)?;
        let per_block = (BLOCK_THREADS as usize) * vec_elems(dt) * UNROLL;
        let blocks = n.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let mut dst = dst;
        let mut a = a;
        let mut b = b.unwrap_or(0);
        let mut n64 = n as u64;
        let mut raw = raw;
        let mut params: Vec<*mut c_void> =
            vec![(&mut dst as *mut u64).cast(), (&mut a as *mut u64).cast()];
        if op.is_binary() {
            params.push((&mut b as *mut u64).cast());
        }
        params.push((&mut n64 as *mut u64).cast());
        params.push((&mut raw as *mut u64).cast());
        // SAFETY: the parameters are exactly the kernel's (pointers as u64, n, raw) and live
        // until the call returns; the memory the kernel touches is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, BLOCK_THREADS, &mut params) }
    }

    /// `dst[i] = ((srcs[0][i] (op) srcs[1][i]) (op) srcs[2][i]) ...` for `n` elements of `dt`
    /// in one kernel ([`KernelOp::ReduceN`]), bit for bit a chain of [`Kernels::reduce`]
    /// launches in source order. Three to [`REDUCE_N_MAX`] sources.
    ///
    /// # Safety
    /// Every source (readable) and `dst` (writable) is a device-accessible range of `n`
    /// elements valid until the stream has run the kernel; `dst` is disjoint from every source
    /// or equal to it.
    pub unsafe fn reduce_n(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        srcs: &[CUdeviceptr],
        n: usize,
    ) -> Result<()> {
        if srcs.len() < 3 {
            return Err(CudaError::InvalidArgument(format!(
                "reduce_n takes 3 to {REDUCE_N_MAX} sources, not {}",
                srcs.len()
            )));
        }
        // SAFETY: the caller's contract, with no further destination.
        unsafe { self.reduce_n_to(stream, dt, op, &[dst], srcs, n) }
    }

    /// [`Kernels::reduce_n`] over two to [`REDUCE_N_MAX`] sources, the result written to every
    /// one of `dsts` (one to [`REDUCE_N_MAX`]): a direct all-reduce's slice into every rank's
    /// output at once.
    ///
    /// # Safety
    /// Every source (readable) and every destination (writable) is a device-accessible range
    /// of `n` elements valid until the stream has run the kernel; each destination is disjoint
    /// from every source or equal to one, and the destinations are disjoint.
    pub unsafe fn reduce_n_to(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dsts: &[CUdeviceptr],
        srcs: &[CUdeviceptr],
        n: usize,
    ) -> Result<()> {
        let k = srcs.len();
        let Some((&first, also)) = dsts.split_first() else {
            return Err(CudaError::InvalidArgument(
                "reduce_n_to without a destination".into(),
            ));
        };
        if !(2..=REDUCE_N_MAX).contains(&k) || dsts.len() > REDUCE_N_MAX {
            return Err(CudaError::InvalidArgument(format!(
                "reduce_n_to takes 2 to {REDUCE_N_MAX} sources and at most as many destinations, \
                 not {k} and {}",
                dsts.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        self.check_sources(stream, dt, first, srcs)?;
        self.check_args(stream, dt, also.iter().map(|&p| ("destination", p)))?;
        let func = self.function(dt, KernelOp::ReduceN(op.into(), k as u8))?;
        let mut arr = SourceArray::new(srcs);
        let mut also_arr = SourceArray::new(also);
        let unroll = (2 * UNROLL / k).max(1);
        let per_block = (BLOCK_THREADS as usize) * vec_elems(dt) * unroll;
        let blocks = n.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let mut dst = first;
        let mut n64 = n as u64;
        let mut raw = 0u64;
        let mut nalso = also.len() as u64;
        let mut params: Vec<*mut c_void> = vec![
            (&mut dst as *mut u64).cast(),
            (&mut arr as *mut SourceArray).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut raw as *mut u64).cast(),
            (&mut also_arr as *mut SourceArray).cast(),
            (&mut nalso as *mut u64).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (dst, the source array by value, n,
        // raw, the further destinations by value and their count) and live until the call
        // returns; the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, BLOCK_THREADS, &mut params) }
    }

    /// [`Kernels::reduce_n_to`] over `k` sources (2..=[`REDUCE_N_MAX`]) and `nalso` further
    /// destinations whose addresses are not known yet: the kernel waits until the mailbox slot
    /// at `slot` holds `tag`, then takes the destination, sources and further destinations
    /// from it ([`crate::cuda::source::MAIL_SRCS`]) or from its copy at `mirror`, which the
    /// first block to read the slot writes; the blocks count themselves in the mirror, and the
    /// last marks the slot seen.
    ///
    /// # Safety
    /// `slot` is a device-accessible, 8-byte aligned mailbox slot valid until the kernel has
    /// run, into which the host will write `tag` (or the kernel never ends) after addresses
    /// meeting [`Kernels::reduce_n_to`]'s contract for `n` elements (or a destination of 0);
    /// `mirror` is a slot of [`crate::cuda::source::MAIL_SLOT_WORDS`] words of device memory,
    /// zeroed before its first use, used by no other kernel while this one runs and not
    /// holding `tag` yet.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_n_mail(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        k: usize,
        nalso: usize,
        (slot, tag, mirror): (CUdeviceptr, u64, CUdeviceptr),
        n: usize,
    ) -> Result<()> {
        if !(2..=REDUCE_N_MAX).contains(&k) || nalso >= REDUCE_N_MAX {
            return Err(CudaError::InvalidArgument(format!(
                "reduce_n_mail takes 2 to {REDUCE_N_MAX} sources and fewer further \
                 destinations, not {k} and {nalso}"
            )));
        }
        self.check_args(stream, dt, std::iter::empty())?;
        let func = self.function(dt, KernelOp::ReduceNMail(op.into(), k as u8))?;
        let unroll = (2 * UNROLL / k).max(1);
        let per_block = (BLOCK_THREADS as usize) * vec_elems(dt) * unroll;
        // Even with nothing to reduce the kernel runs: its slot must be marked seen.
        let blocks = n.div_ceil(per_block).clamp(1, self.max_blocks as usize) as u32;
        let (mut slot, mut tag, mut mirror) = (slot, tag, mirror);
        let (mut n64, mut raw, mut nalso) = (n as u64, 0u64, nalso as u64);
        let mut params: [*mut c_void; 6] = [
            (&mut slot as *mut u64).cast(),
            (&mut tag as *mut u64).cast(),
            (&mut mirror as *mut u64).cast(),
            (&mut n64 as *mut u64).cast(),
            (&mut raw as *mut u64).cast(),
            (&mut nalso as *mut u64).cast(),
        ];
        // SAFETY: the parameters are exactly the kernel's (slot, tag, mirror, n, raw, nalso)
        // and live until the call returns; the memory is the caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, BLOCK_THREADS, &mut params) }
    }

    /// `dst[i] = a[i] (op) b[i]` for `n` elements of `dt`, queued on `stream`. Numerics are
    /// those of [`crate::host::reduce::reduce`], bit for bit.
    ///
    /// # Safety
    /// `a`, `b` (readable) and `dst` (writable) are device-accessible ranges of `n` elements
    /// that stay valid until the stream has run the kernel; `dst` is disjoint from or equal
    /// to each input.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        stream: &Stream,
        dt: DataType,
        op: ReduceKind,
        dst: CUdeviceptr,
        a: CUdeviceptr,
        b: CUdeviceptr,
        n: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::reduce(op), dst, a, Some(b), n, 0) }
    }

    /// `dst[i] = src[i] * scalar` where `scalar` holds one element of `dt` in its first
    /// bytes (little-endian), as [`crate::host::reduce::premul`].
    ///
    /// # Safety
    /// As [`Kernels::reduce`].
    pub unsafe fn premul(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        n: usize,
        scalar: [u8; 8],
    ) -> Result<()> {
        let raw = u64::from_le_bytes(scalar);
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::PreMul, dst, src, None, n, raw) }
    }

    /// `dst[i] = src[i] * scalar + acc[i]` rounded once, as
    /// [`crate::host::reduce::premul_add`].
    ///
    /// # Safety
    /// As [`Kernels::reduce`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn premul_add(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        acc: CUdeviceptr,
        n: usize,
        scalar: [u8; 8],
    ) -> Result<()> {
        let raw = u64::from_le_bytes(scalar);
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::PreMulAdd, dst, src, Some(acc), n, raw) }
    }

    /// `dst[i] /= divisor` in place, as [`crate::host::reduce::div_int`] (`divisor == 0`
    /// leaves `dst` unchanged).
    ///
    /// # Safety
    /// `dst` is a device-accessible range of `n` elements, valid until the kernel has run.
    pub unsafe fn div_int(
        &self,
        stream: &Stream,
        dt: DataType,
        dst: CUdeviceptr,
        n: usize,
        divisor: u64,
    ) -> Result<()> {
        if divisor == 0 {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch(stream, dt, KernelOp::DivInt, dst, dst, None, n, divisor) }
    }
}

/// The `ccl_srcs` parameter of the kernels over several sources, by value: [`REDUCE_N_MAX`]
/// pointers, the first ones used.
#[repr(C)]
pub(super) struct SourceArray([u64; REDUCE_N_MAX]);

impl SourceArray {
    pub(super) fn new(srcs: &[CUdeviceptr]) -> SourceArray {
        let mut a = SourceArray([0; REDUCE_N_MAX]);
        for (slot, &p) in a.0.iter_mut().zip(srcs) {
            *slot = p;
        }
        a
    }
}
