//! A u32 flag in pinned host memory that streams wait on and write, and the host reads and
//! writes with atomics: the stream-ordering primitive of DESIGN.md invariant 2.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::Context;
use super::error::{CudaError, Result};
use super::memory::PinnedBuffer;
use super::stream::{Stream, WaitCond};
use super::sys::CUdeviceptr;

/// One u32 on its own 64-byte line of pinned, device-mapped host memory.
#[derive(Debug)]
pub struct Flag {
    buf: PinnedBuffer,
}

impl Flag {
    /// A flag holding 0.
    pub fn new(ctx: &Arc<Context>) -> Result<Flag> {
        Ok(Flag {
            buf: PinnedBuffer::new(ctx, 64)?,
        })
    }

    fn atomic(&self) -> &AtomicU32 {
        // SAFETY: the buffer is at least 64 bytes, page-aligned (so 4-byte aligned), lives
        // as long as `self`, and is only ever accessed atomically (host) or by aligned
        // 32-bit stream memory operations (device).
        unsafe { AtomicU32::from_ptr(self.buf.as_ptr().cast()) }
    }

    /// The current value (acquire: what the device wrote before it is visible after).
    pub fn load(&self) -> u32 {
        self.atomic().load(Ordering::Acquire)
    }

    /// Sets the value (release: host writes before it are visible to a waiting stream).
    pub fn store(&self, v: u32) {
        self.atomic().store(v, Ordering::Release)
    }

    /// The device address, for stream memory operations and kernels.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.buf.device_ptr()
    }

    /// Queues on `stream` a wait until the flag satisfies `cond` against `value`.
    ///
    /// # Safety
    /// The flag outlives the wait, and something satisfies it eventually (see DESIGN.md
    /// invariant 3: queue no unbounded run of waits ahead of the work that releases them).
    pub unsafe fn stream_wait(&self, stream: &Stream, value: u32, cond: WaitCond) -> Result<()> {
        // SAFETY: the address is this flag's, aligned; lifetime by the caller's contract.
        unsafe { stream.wait_value32(self.device_ptr(), value, cond) }
    }

    /// Queues on `stream` a write of `value` once earlier work is done.
    ///
    /// # Safety
    /// The flag outlives the write.
    pub unsafe fn stream_write(&self, stream: &Stream, value: u32) -> Result<()> {
        // SAFETY: as in `stream_wait`.
        unsafe { stream.write_value32(self.device_ptr(), value) }
    }

    /// Spins on the host until `pred(value)` holds, for at most `timeout`.
    pub fn wait_host(&self, timeout: Duration, pred: impl Fn(u32) -> bool) -> Result<u32> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let v = self.load();
            if pred(v) {
                return Ok(v);
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 && start.elapsed() > timeout {
                return Err(CudaError::Timeout(format!(
                    "flag still {v} after {timeout:?}"
                )));
            }
            std::hint::spin_loop();
        }
    }
}
