//! The kernels that wait on a flag word instead of a stream wait: a bare wait, and a wait,
//! copy and signal in one.

use std::ffi::c_void;

use crate::cuda::error::Result;
use crate::cuda::source::KernelOp;
use crate::cuda::stream::Stream;
use crate::cuda::sys::*;
use crate::dtype::DataType;

use super::load::Kernels;

impl Kernels {
    /// Queues a one-thread kernel on `stream` that returns once the word at `flag` reaches
    /// `value` (cyclic `>=`): the stream waits as with a stream wait operation, other
    /// streams sharing its hardware queue do not ([`KernelOp::WaitFlag`]).
    ///
    /// # Safety
    /// `flag` is a 4-byte aligned device-accessible word valid until the kernel has run, and
    /// something will write `value` (or later) to it, or the kernel never ends.
    pub unsafe fn wait_flag(&self, stream: &Stream, flag: CUdeviceptr, value: u32) -> Result<()> {
        let func = self.function(DataType::Uint8, KernelOp::WaitFlag)?;
        let (mut flag, mut value) = (flag, value);
        let mut params: [*mut c_void; 2] = [
            (&mut flag as *mut CUdeviceptr).cast(),
            (&mut value as *mut u32).cast(),
        ];
        // SAFETY: the parameters match the kernel's signature; the word is the caller's
        // contract.
        unsafe { self.launch_raw(func, stream, 1, 1, &mut params) }
    }
}

/// Bytes one block of the wait-copy kernel takes: a block moves 64 KiB in about a
/// microsecond, so a send of up to that keeps the signal inside its one launch.
pub const WAIT_COPY_BLOCK_BYTES: u64 = 64 << 10;

/// Most blocks of the wait-copy kernel.
pub const WAIT_COPY_MAX_BLOCKS: u32 = 32;

/// The wait-copy kernel's grid for `bytes`.
pub fn wait_copy_blocks(bytes: u64) -> u32 {
    bytes
        .div_ceil(WAIT_COPY_BLOCK_BYTES)
        .clamp(1, WAIT_COPY_MAX_BLOCKS as u64) as u32
}

impl Kernels {
    /// Queues [`KernelOp::WaitCopy`] on `stream`: once the word at `arrive` reaches `value`
    /// (cyclic `>=`), the kernel copies `bytes` from `src` to `dst` and then `done_value` is
    /// written to the word at `done`: inside the kernel when one block copies (up to
    /// [`WAIT_COPY_BLOCK_BYTES`]), else by a stream write after it (a block per that many
    /// bytes, at most [`WAIT_COPY_MAX_BLOCKS`]; the grid's blocks cannot tell which ends last).
    ///
    /// # Safety
    /// `arrive` and `done` are 4-byte aligned device-accessible words and `src` / `dst`
    /// device-accessible ranges of `bytes` that do not overlap, all valid until the kernel
    /// has run; something will write `value` (or later) to `arrive`, or the kernel never ends.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn wait_copy(
        &self,
        stream: &Stream,
        arrive: CUdeviceptr,
        value: u32,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: u64,
        done: CUdeviceptr,
        done_value: u32,
    ) -> Result<()> {
        let func = self.function(DataType::Uint8, KernelOp::WaitCopy)?;
        let blocks = wait_copy_blocks(bytes);
        let signal_after = blocks > 1;
        let in_kernel_done = if signal_after { 0 } else { done };
        let (mut arrive, mut value, mut dst, mut src, mut bytes, mut done_ptr, mut done_value) =
            (arrive, value, dst, src, bytes, in_kernel_done, done_value);
        let mut params: [*mut c_void; 7] = [
            (&mut arrive as *mut CUdeviceptr).cast(),
            (&mut value as *mut u32).cast(),
            (&mut dst as *mut CUdeviceptr).cast(),
            (&mut src as *mut CUdeviceptr).cast(),
            (&mut bytes as *mut u64).cast(),
            (&mut done_ptr as *mut CUdeviceptr).cast(),
            (&mut done_value as *mut u32).cast(),
        ];
        // SAFETY: the parameters match the kernel's signature; the ranges and words are the
        // caller's contract.
        unsafe { self.launch_raw(func, stream, blocks, 512, &mut params) }?;
        if signal_after {
            // SAFETY: `done` is the caller's word (see above); the write follows the kernel in
            // stream order, after its fenced stores.
            unsafe { stream.write_value32(done, done_value) }?;
        }
        Ok(())
    }
}

impl Kernels {
    /// Queues [`KernelOp::MailCopy`] on `stream` with `blocks` blocks of `threads`: once the
    /// mailbox slot at `slot` holds `tag`, the grid copies from `src` to the destination the
    /// slot names, at most `max_bytes` (see [`crate::cuda::source::MAIL_SLOT_WORDS`]).
    ///
    /// # Safety
    /// `slot` is a device-accessible, 8-byte aligned mailbox slot valid until the kernel has
    /// run, into which the host will write `tag` (or the kernel never ends) after a
    /// destination of at least the bytes it names, valid and disjoint from `src` until the
    /// stream passes, and `src` a device-accessible range of `max_bytes`; `blocks` is at most
    /// [`crate::cuda::source::MAIL_MAX_BLOCKS`].
    pub unsafe fn mail_copy(
        &self,
        stream: &Stream,
        slot: CUdeviceptr,
        tag: u64,
        src: CUdeviceptr,
        max_bytes: u64,
        (blocks, threads): (u32, u32),
    ) -> Result<()> {
        let func = self.function(DataType::Uint8, KernelOp::MailCopy)?;
        let (mut slot, mut tag, mut src, mut max_bytes) = (slot, tag, src, max_bytes);
        let mut params: [*mut c_void; 4] = [
            (&mut slot as *mut CUdeviceptr).cast(),
            (&mut tag as *mut u64).cast(),
            (&mut src as *mut CUdeviceptr).cast(),
            (&mut max_bytes as *mut u64).cast(),
        ];
        let blocks = blocks.clamp(1, crate::cuda::source::MAIL_MAX_BLOCKS as u32);
        // SAFETY: the parameters match the kernel's signature; the slot, ranges and block
        // count are the caller's contract (the count clamped to the slot's "seen" words).
        unsafe { self.launch_raw(func, stream, blocks, threads, &mut params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block per 64 KiB, at least one (the signal then stays in the kernel), at most 32.
    #[test]
    fn a_wait_copy_takes_a_block_per_64_kib() {
        let grids: Vec<u32> = [0, 1, 64 << 10, (64 << 10) + 1, 1 << 20, 1 << 30]
            .iter()
            .map(|&b| wait_copy_blocks(b))
            .collect();
        assert_eq!(grids, [1, 1, 1, 2, 16, WAIT_COPY_MAX_BLOCKS]);
    }
}
