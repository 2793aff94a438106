//! The kernels that wait on a flag word: a bare wait, and a wait, copy and signal in one.

use std::fmt::Write as _;

use super::prelude::COPY_STRIDED;

/// The flag wait: one thread polls the word (volatile: it is written over NVLink by a peer's
/// stream, or by the host) and sleeps between looks; a system-wide fence on the way out keeps
/// this stream's later reads behind the writes the flag announces.
pub(super) fn wait_flag_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{SPIN}
extern "C" __global__ void {name}(const u32* flag, u32 value) {{
  ccl_spin_until(flag, value);
}}
"#
    );
}

/// The flag poll both wait kernels use: volatile reads (a peer's stream writes the word over
/// NVLink, or the host does), a short sleep between looks, then a system-wide fence so the
/// caller's later reads come after the writes the flag announces.
const SPIN: &str = r#"
static __device__ inline void ccl_spin_until(const u32* flag, u32 value) {
  const volatile u32* f = (const volatile u32*)flag;
  while ((int)(*f - value) < 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(128);
#endif
  }
  __threadfence_system();
}
"#;

/// Wait, copy, signal: thread 0 of every block polls `arrive` as [`wait_flag_code`] does, each
/// block copies its part of `bytes` from `src` to `dst` (16 bytes a thread a step, four steps
/// in flight, when both are 16-byte aligned, else byte by byte), every thread fences its stores
/// system-wide, and after the barrier thread 0 writes `done_value` to `done` (a peer's stream
/// waits on it) -- in a grid of one block; a larger grid is given no `done` (null), and a
/// stream write after the kernel signals instead.
pub(super) fn wait_copy_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{COPY_STRIDED}
{SPIN}
extern "C" __global__ void {name}(const u32* arrive, u32 value, u8* dst, const u8* src, u64 bytes, u32* done, u32 done_value) {{
  if (threadIdx.x == 0) ccl_spin_until(arrive, value);
  __syncthreads();
  const u64 tid = threadIdx.x, step = blockDim.x;
  // This block's part, whole 16-byte vectors but the message's end.
  u64 per = (bytes + gridDim.x - 1) / gridDim.x;
  per = (per + 15) & ~15ull;
  const u64 b0 = (u64)blockIdx.x * per < bytes ? (u64)blockIdx.x * per : bytes;
  const u64 b1 = b0 + per < bytes ? b0 + per : bytes;
  ccl_copy_strided(dst + b0, src + b0, b1 - b0, tid, step);
  // Every thread's stores reach the system before the flag that announces them.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && done) {{
    *(volatile u32*)done = done_value;
  }}
}}
"#
    );
}

/// A mailbox slot of [`mail_copy_code`]: 64 words of host-mapped memory. Word
/// [`MAIL_TAG`] holds the tag of the send the slot serves (written last by the engine
/// thread), [`MAIL_DST`] the destination as this process maps it (0: copy nothing, the
/// communicator is going away), [`MAIL_BYTES`] the bytes to copy; from [`MAIL_SEEN`] on, one
/// word per block, where each block stores the tag once it has read the slot (then the slot
/// may serve another send).
pub const MAIL_SLOT_WORDS: usize = 64;
pub const MAIL_TAG: usize = 0;
pub const MAIL_DST: usize = 1;
pub const MAIL_BYTES: usize = 2;
pub const MAIL_SEEN: usize = 8;
/// A mailed reduction's slot ([`KernelOp::ReduceNMail`]: 64 words as a copy's): its tag at
/// [`MAIL_TAG`], its destination at [`MAIL_DST`], the sources in fold order from
/// [`MAIL_SRCS`] and the further destinations from [`MAIL_ALSO`] (up to
/// [`super::REDUCE_N_MAX`] each), and one "seen" word at [`MAIL_SEEN`], written by the last of
/// the kernel's blocks to read the slot.
///
/// [`KernelOp::ReduceNMail`]: super::KernelOp::ReduceNMail
pub const MAIL_SRCS: usize = 16;
pub const MAIL_ALSO: usize = MAIL_SRCS + super::REDUCE_N_MAX;
/// Most blocks a mail copy runs with (one "seen" word each).
pub const MAIL_MAX_BLOCKS: usize = MAIL_SLOT_WORDS - MAIL_SEEN;

/// The copy of a send whose destination was unknown when it was queued: thread 0 of every
/// block polls the slot's tag (volatile: the host writes it), takes the destination and
/// length, and marks the slot seen; then the grid copies, 16 bytes a thread a step and four
/// steps in flight when both ends are 16-byte aligned, and fences its stores system-wide
/// (a stream write after the kernel tells the receiver).
pub(super) fn mail_copy_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{COPY_STRIDED}
extern "C" __global__ void {name}(u64* slot, u64 tag, const u8* src, u64 max_bytes) {{
  __shared__ u64 s_dst, s_bytes;
  if (threadIdx.x == 0) {{
    volatile u64* v = (volatile u64*)slot;
    while (v[{MAIL_TAG}] != tag) {{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
      __nanosleep(256);
#endif
    }}
    __threadfence_system();
    s_dst = v[{MAIL_DST}];
    const u64 b = v[{MAIL_BYTES}];
    s_bytes = s_dst == 0 ? 0 : (b < max_bytes ? b : max_bytes);
    v[{MAIL_SEEN} + blockIdx.x] = tag;
  }}
  __syncthreads();
  u8* dst = (u8*)s_dst;
  const u64 bytes = s_bytes;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x, step = (u64)gridDim.x * blockDim.x;
  ccl_copy_strided(dst, src, bytes, tid, step);
  __threadfence_system();
}}
"#
    );
}
