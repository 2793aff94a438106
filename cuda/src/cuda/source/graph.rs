//! The kernels captured into CUDA graphs: a small all-reduce and a small group of copies,
//! each one block between handshakes with the peers.

use std::fmt::Write as _;

#[cfg(doc)]
use super::op::KernelOp;
use super::prelude::COPY_STRIDED;
use super::reduce::REDUCE_N_MAX;

/// Threads of the one block of a [`KernelOp::GraphAllReduce`] kernel.
pub const GRAPH_AR_THREADS: u32 = 1024;

/// Elements each thread of a [`KernelOp::GraphAllReduce`] kernel holds in registers when the
/// all-reduce is in place (its result waits there until every peer has read this rank's input).
pub const GRAPH_AR_HELD: usize = 16;

/// Most elements a [`KernelOp::GraphAllReduce`] kernel takes.
pub const GRAPH_AR_MAX_ELEMS: usize = GRAPH_AR_THREADS as usize * GRAPH_AR_HELD;

/// The body of a [`KernelOp::GraphAllReduce`] kernel over `k` ranks. One block: thread 0 sets
/// `rin[j]` (this rank's word at each peer) and waits until each `lin[j]` (each peer's word
/// here) is 1, resetting it; the block reduces, element `i` by thread `i % threads`, the
/// sources folded in rank order; thread 0 then does the same on `rdone` / `ldone`. Out of place
/// the results go straight to `dst`; in place they wait in registers (`GRAPH_AR_HELD` a
/// thread) until the second handshake, since the peers read this input until then. Every
/// word is reset right after its wait, before this rank sets any later word, and a peer sets
/// it again only after seeing this rank's "done", so replays back to back cannot lose a write.
pub(super) fn graph_all_reduce_code(name: &str, k: u8, out: &mut String) {
    let _ = write!(
        out,
        r#"
#define K {k}
#define HELD {held}
struct ccl_srcs {{ const T* p[{max}]; }};
{GRAPH_HANDSHAKE}
extern "C" __global__ void {name}(T* dst, ccl_srcs s, u64 n, u64 raw, ccl_gwords w, u32 np, u32 inplace) {{
  const P p = ccl_param(raw);
  const u32 tid = threadIdx.x, step = blockDim.x;
  if (tid == 0) ccl_graph_handshake(w.rin, w.lin, np);
  __syncthreads();
  T held[HELD];
  if (!inplace) {{
    for (u64 i = tid; i < n; i += step) {{
      T r = s.p[0][i];
#pragma unroll
      for (int m = 1; m < K; ++m) r = ccl_apply(r, s.p[m][i], p);
      dst[i] = r;
    }}
  }} else {{
#pragma unroll
    for (int h = 0; h < HELD; ++h) {{
      const u64 i = tid + (u64)h * step;
      if (i < n) {{
        T r = s.p[0][i];
#pragma unroll
        for (int m = 1; m < K; ++m) r = ccl_apply(r, s.p[m][i], p);
        held[h] = r;
      }}
    }}
  }}
  __syncthreads();
  if (tid == 0) ccl_graph_handshake(w.rdone, w.ldone, np);
  __syncthreads();
  if (inplace) {{
#pragma unroll
    for (int h = 0; h < HELD; ++h) {{
      const u64 i = tid + (u64)h * step;
      if (i < n) dst[i] = held[h];
    }}
  }}
}}
"#,
        held = GRAPH_AR_HELD,
        max = REDUCE_N_MAX,
    );
}

/// The words and the handshake of the captured-group kernels: thread 0 sets this rank's word
/// at every peer, then per peer waits until the peer's word here is 1 and resets it, with
/// system-wide fences around (what the block read or wrote before is done; what it does
/// after comes after the peers' signals).
const GRAPH_HANDSHAKE: &str = r#"
struct ccl_gwords { u32* rin[8]; u32* lin[8]; u32* rdone[8]; u32* ldone[8]; };

static __device__ inline void ccl_graph_handshake(u32* const* remote, u32* const* local, u32 np) {
  __threadfence_system();
  for (u32 j = 0; j < np; ++j) *(volatile u32*)remote[j] = 1u;
  for (u32 j = 0; j < np; ++j) {
    volatile u32* f = (volatile u32*)local[j];
    while (*f != 1u) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
      __nanosleep(32);
#endif
    }
    *f = 0u;
  }
  __threadfence_system();
}
"#;

/// The body of [`KernelOp::GraphHandshake`]: one thread, the handshake on `w`'s "inputs"
/// words (the parts of a captured group name each handshake's words there).
pub(super) fn graph_handshake_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{GRAPH_HANDSHAKE}
extern "C" __global__ void {name}(ccl_gwords w, u32 np) {{
  if (threadIdx.x == 0) ccl_graph_handshake(w.rin, w.lin, np);
}}
"#
    );
}

/// Most copies of a [`KernelOp::GraphCopies`] kernel (passed by value).
pub const GRAPH_COPIES_MAX: usize = 16;

/// The body of [`KernelOp::GraphCopies`]: one block of [`GRAPH_AR_THREADS`]; the handshake on
/// the "inputs ready" words, the first `nfirst` copies in turn with the whole block (16-byte
/// vectors when both ends are 16-byte aligned, else bytes), with `halfway` the handshake on the
/// "halfway" words (`h`'s first two arrays) and the other copies (a receive parked in scratch
/// memory moves into place there), then the handshake on the "done" words. With `wide` 1, no
/// handshake at all (the parts queue theirs as kernels around it) and any number of blocks,
/// every thread of the grid striding over each copy. With `wide` 2 (no halfway), any number of
/// blocks and the handshakes too: block 0 does the "inputs" handshake and sets `go`, which the
/// other blocks wait for; every block copies its stride; the last block to count itself in
/// `arrived` does the "done" handshake. Blocks wait only for block 0 (the first dispatched),
/// which waits for no other block.
pub(super) fn graph_copies_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{GRAPH_HANDSHAKE}
{COPY_STRIDED}
struct ccl_gcopies {{ u64 dst[{max}]; u64 src[{max}]; u64 bytes[{max}]; }};

static __device__ inline void ccl_copies(const ccl_gcopies& c, u32 from, u32 to, u64 tid, u64 step) {{
  for (u32 m = from; m < to; ++m) ccl_copy_strided((u8*)c.dst[m], (const u8*)c.src[m], c.bytes[m], tid, step);
}}

static __device__ inline void ccl_block_copies(const ccl_gcopies& c, u32 from, u32 to) {{
  ccl_copies(c, from, to, threadIdx.x, blockDim.x);
  __syncthreads();
}}

static __device__ inline void ccl_grid_copies(const ccl_gcopies& c, u32 ncopies) {{
  ccl_copies(c, 0, ncopies, (u64)blockIdx.x * blockDim.x + threadIdx.x, (u64)gridDim.x * blockDim.x);
}}

// Every block's copies, then the "done" handshake by the block that finishes last, which
// also resets `go` and `arrived` for the next replay (it starts after this kernel ends).
static __device__ inline void ccl_spread_copies(const ccl_gcopies& c, u32 ncopies, const ccl_gwords& w, u32 np, u32* go, u32* arrived) {{
  if (threadIdx.x == 0) {{
    if (blockIdx.x == 0) {{
      ccl_graph_handshake(w.rin, w.lin, np);
      *(volatile u32*)go = 1u;
    }} else {{
      while (*(volatile u32*)go == 0u) ccl_backoff();
      __threadfence();
    }}
  }}
  __syncthreads();
  ccl_grid_copies(c, ncopies);
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(arrived, 1u) == gridDim.x - 1) {{
    *(volatile u32*)go = 0u;
    *(volatile u32*)arrived = 0u;
    ccl_graph_handshake(w.rdone, w.ldone, np);
  }}
}}

extern "C" __global__ void {name}(ccl_gcopies c, u32 ncopies, u32 nfirst, ccl_gwords w, ccl_gwords h, u32 np, u32 halfway, u32 wide, u32* go, u32* arrived) {{
  if (wide == 1) {{
    ccl_grid_copies(c, ncopies);
    return;
  }}
  if (wide == 2) {{
    ccl_spread_copies(c, ncopies, w, np, go, arrived);
    return;
  }}
  if (threadIdx.x == 0) ccl_graph_handshake(w.rin, w.lin, np);
  __syncthreads();
  ccl_block_copies(c, 0, nfirst);
  if (halfway) {{
    if (threadIdx.x == 0) ccl_graph_handshake(h.rin, h.lin, np);
    __syncthreads();
  }}
  ccl_block_copies(c, nfirst, ncopies);
  if (threadIdx.x == 0) ccl_graph_handshake(w.rdone, w.ldone, np);
}}
"#,
        max = GRAPH_COPIES_MAX,
    );
}
