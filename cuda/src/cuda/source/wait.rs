//! The kernels that wait on a flag word: a bare wait, and a wait, copy and signal in one.

use std::fmt::Write as _;

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

/// Wait, copy, signal in one block: thread 0 polls `arrive` as [`wait_flag_code`] does, the
/// block copies `bytes` from `src` to `dst` (16 bytes a thread a step when both are 16-byte
/// aligned, else byte by byte), every thread fences its stores system-wide, and after the
/// barrier thread 0 writes `done_value` to `done` (a peer's stream waits on it).
pub(super) fn wait_copy_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
struct alignas(16) ccl_v16 {{ u32 x, y, z, w; }};

{SPIN}
extern "C" __global__ void {name}(const u32* arrive, u32 value, u8* dst, const u8* src, u64 bytes, u32* done, u32 done_value) {{
  if (threadIdx.x == 0) ccl_spin_until(arrive, value);
  __syncthreads();
  const u64 tid = threadIdx.x, step = blockDim.x;
  u64 head = 0;
  if ((((u64)dst | (u64)src) & 15) == 0) {{
    const u64 nv = bytes / 16;
    const ccl_v16* s16 = (const ccl_v16*)src;
    ccl_v16* d16 = (ccl_v16*)dst;
    for (u64 i = tid; i < nv; i += step) d16[i] = s16[i];
    head = nv * 16;
  }}
  for (u64 i = head + tid; i < bytes; i += step) dst[i] = src[i];
  // Every thread's stores reach the system before the flag that announces them.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {{
    *(volatile u32*)done = done_value;
  }}
}}
"#
    );
}
