//! The reductions: the element operation of every (type, operation) (`ccl_apply`), the
//! grid-stride kernel body around it, and the body over several sources at once.

use std::fmt::Write as _;

use crate::dtype::DataType;

use super::format::format_of;
use super::op::{KernelOp, ReduceKindKey, UNROLL};
use super::wait::{MAIL_ALSO, MAIL_DST, MAIL_SEEN, MAIL_SRCS, MAIL_TAG};

/// Unsigned type of the same width (wrapping arithmetic).
fn unsigned_of(dt: DataType) -> &'static str {
    match dt {
        DataType::Int8 | DataType::Uint8 => "u8",
        DataType::Int32 | DataType::Uint32 => "u32",
        _ => "u64",
    }
}

fn is_signed_int(dt: DataType) -> bool {
    matches!(dt, DataType::Int8 | DataType::Int32 | DataType::Int64)
}

/// What `ccl_apply` computes for an operation (every kernel without a reduction of its own
/// takes the premultiply, which it never calls).
#[derive(Clone, Copy)]
enum Apply {
    Sum,
    Prod,
    Max,
    Min,
    PreMul,
    PreMulAdd,
    DivInt,
}

fn apply_of(op: KernelOp) -> Apply {
    match op {
        KernelOp::Reduce(k) | KernelOp::LlAllReduce(k) => match k {
            ReduceKindKey::Sum => Apply::Sum,
            ReduceKindKey::Prod => Apply::Prod,
            ReduceKindKey::Max => Apply::Max,
            ReduceKindKey::Min => Apply::Min,
        },
        KernelOp::PreMul
        | KernelOp::LlExchange
        | KernelOp::WaitFlag
        | KernelOp::WaitCopy
        | KernelOp::MailCopy
        | KernelOp::LlP2p
        | KernelOp::ReduceN(..)
        | KernelOp::ReduceNMail(..)
        | KernelOp::GraphAllReduce(..)
        | KernelOp::GraphCopies
        | KernelOp::GraphHandshake => Apply::PreMul,
        KernelOp::PreMulAdd => Apply::PreMulAdd,
        KernelOp::DivInt => Apply::DivInt,
    }
}

/// `typedef P`, `ccl_param` and `ccl_apply` for (dt, op).
pub(super) fn op_code(dt: DataType, op: KernelOp, out: &mut String) {
    let a = apply_of(op);
    let (param_ty, param, body) = match (format_of(dt), dt) {
        (Some(f), _) => minifloat_op(f.tag, dt, a),
        (None, DataType::Float32) => float32_op(a),
        (None, DataType::Float64) => float64_op(a),
        (None, _) => integer_op(dt, a),
    };
    let apply_sig = if op.is_binary() {
        "static __device__ inline T ccl_apply(T x, T y, P p)"
    } else {
        "static __device__ inline T ccl_apply(T x, P p)"
    };
    let _ = writeln!(out, "typedef {param_ty} P;");
    let _ = writeln!(
        out,
        "static __device__ inline P ccl_param(u64 raw) {{ return {param}; }}"
    );
    let _ = writeln!(out, "{apply_sig} {{ {body} }}");
}

/// The parameter's type, its decoding from the raw 64 bits, and `ccl_apply`'s body: the
/// 8- and 16-bit floats compute in float (an integer divisor stays raw).
fn minifloat_op(t: &str, dt: DataType, a: Apply) -> (&'static str, String, String) {
    let (param_ty, param) = match a {
        Apply::DivInt => ("u64", "raw".to_string()),
        _ => (
            "float",
            format!(
                "dec_{t}((u32)(raw & {:#x}ull))",
                (1u64 << (8 * dt.size())) - 1
            ),
        ),
    };
    let e = match a {
        Apply::Sum => format!("enc_{t}(add_f(dec_{t}(x), dec_{t}(y)))"),
        Apply::Prod => format!("enc_{t}(mul_f(dec_{t}(x), dec_{t}(y)))"),
        Apply::Max => format!("enc_{t}(fmax_f(dec_{t}(x), dec_{t}(y)))"),
        Apply::Min => format!("enc_{t}(fmin_f(dec_{t}(x), dec_{t}(y)))"),
        Apply::PreMul => format!("enc_{t}(mul_f(dec_{t}(x), p))"),
        Apply::PreMulAdd => {
            format!("enc_{t}(d2f_odd(add_odd_d(mul_d(f2d(dec_{t}(x)), f2d(p)), f2d(dec_{t}(y)))))")
        }
        Apply::DivInt => format!("enc_{t}(d2f_odd(div_d(f2d(dec_{t}(x)), u64_to_d(p))))"),
    };
    (param_ty, param, format!("return (T){e};"))
}

fn float32_op(a: Apply) -> (&'static str, String, String) {
    let (param_ty, param) = match a {
        Apply::DivInt => ("u64", "raw"),
        _ => ("float", "u2f((u32)raw)"),
    };
    let body = match a {
        Apply::Sum => "return canon_f(add_f(x, y));",
        Apply::Prod => "return canon_f(mul_f(x, y));",
        Apply::Max => "return fmax_f(x, y);",
        Apply::Min => "return fmin_f(x, y);",
        Apply::PreMul => "return canon_f(mul_f(x, p));",
        Apply::PreMulAdd => "return canon_f(fma_f(x, p, y));",
        // The host converts to double and back: a NaN comes out quieted, payload kept.
        Apply::DivInt => {
            "if (nan_f(x)) return u2f(f2u(x) | 0x400000u); return d2f(div_d(f2d(x), u64_to_d(p)));"
        }
    };
    (param_ty, param.to_string(), body.to_string())
}

fn float64_op(a: Apply) -> (&'static str, String, String) {
    let (param_ty, param) = match a {
        Apply::DivInt => ("u64", "raw"),
        _ => ("double", "u2d(raw)"),
    };
    let body = match a {
        Apply::Sum => "return add_d(x, y);",
        Apply::Prod => "return mul_d(x, y);",
        Apply::Max => "return fmax_d(x, y);",
        Apply::Min => "return fmin_d(x, y);",
        Apply::PreMul => "return mul_d(x, p);",
        Apply::PreMulAdd => "return fma_d(x, p, y);",
        Apply::DivInt => {
            "if (nan_d(x)) return u2d(d2u(x) | 0x8000000000000ull); return div_d(x, u64_to_d(p));"
        }
    };
    (param_ty, param.to_string(), body.to_string())
}

/// Integers wrap as their unsigned type of the same width.
fn integer_op(dt: DataType, a: Apply) -> (&'static str, String, String) {
    let u = unsigned_of(dt);
    let (param_ty, param) = match a {
        Apply::DivInt => ("u64", "raw"),
        _ => ("T", "(T)raw"),
    };
    let body = match a {
        Apply::Sum => format!("return (T)({u})((u64)({u})x + (u64)({u})y);"),
        Apply::Prod => format!("return (T)({u})((u64)({u})x * (u64)({u})y);"),
        Apply::Max => "return x > y ? x : y;".to_string(),
        Apply::Min => "return x < y ? x : y;".to_string(),
        Apply::PreMul => format!("return (T)({u})((u64)({u})x * (u64)({u})p);"),
        Apply::PreMulAdd => format!("return (T)({u})((u64)({u})x * (u64)({u})p + (u64)({u})y);"),
        Apply::DivInt if is_signed_int(dt) => {
            "if (p <= 0x7fffffffffffffffull) return (T)((i64)x / (i64)p); \
             return (T)(((i64)x == (-0x7fffffffffffffffll - 1) && p == 0x8000000000000000ull) ? -1 : 0);"
                .to_string()
        }
        Apply::DivInt => "return (T)((u64)x / p);".to_string(),
    };
    (param_ty, param.to_string(), body)
}

/// The grid-stride kernel body around `ccl_apply`: a scalar head up to 16-byte alignment,
/// then 16-byte vectors (`UNROLL` in flight per thread), then a scalar tail. Vectors are used
/// when every pointer has the same offset modulo 16; otherwise the whole range is scalar.
pub(super) fn body_code(name: &str, bin: bool, out: &mut String) {
    let (params, same_align, load_head, load_vec_decl, load_vec, apply_vec, apply_scalar) = if bin {
        (
            "T* dst, const T* a, const T* b, u64 n, u64 raw",
            "((u64)a & 15) == mis && ((u64)b & 15) == mis",
            "const ccl_u4* va = (const ccl_u4*)(a + head); const ccl_u4* vb = (const ccl_u4*)(b + head);",
            "ccl_vec x[UNROLL], y[UNROLL];",
            "x[k].u = va[i]; y[k].u = vb[i];",
            "r.e[j] = ccl_apply(x[k].e[j], y[k].e[j], p);",
            "dst[i] = ccl_apply(a[i], b[i], p);",
        )
    } else {
        (
            "T* dst, const T* a, u64 n, u64 raw",
            "((u64)a & 15) == mis",
            "const ccl_u4* va = (const ccl_u4*)(a + head);",
            "ccl_vec x[UNROLL];",
            "x[k].u = va[i];",
            "r.e[j] = ccl_apply(x[k].e[j], p);",
            "dst[i] = ccl_apply(a[i], p);",
        )
    };
    let _ = write!(
        out,
        r#"
#define UNROLL {UNROLL}
#define VN (16 / sizeof(T))
union ccl_vec {{ ccl_u4 u; T e[VN]; }};

extern "C" __global__ void {name}({params}) {{
  const P p = ccl_param(raw);
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  u64 start = 0;
  const u64 mis = (u64)dst & 15;
  if ({same_align}) {{
    u64 head = ((16 - mis) & 15) / sizeof(T);
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += stride) {{ {apply_scalar} }}
    const u64 nv = (n - head) / VN;
    {load_head}
    ccl_u4* vd = (ccl_u4*)(dst + head);
    for (u64 base = tid; base < nv; base += stride * UNROLL) {{
      {load_vec_decl}
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) {{
        const u64 i = base + (u64)k * stride;
        if (i < nv) {{ {load_vec} }}
      }}
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) {{
        const u64 i = base + (u64)k * stride;
        if (i < nv) {{
          ccl_vec r;
#pragma unroll
          for (int j = 0; j < (int)VN; ++j) {{ {apply_vec} }}
          vd[i] = r.u;
        }}
      }}
    }}
    start = head + nv * VN;
  }}
  for (u64 i = start + tid; i < n; i += stride) {{ {apply_scalar} }}
}}
"#
    );
}

/// Most sources of a [`KernelOp::ReduceN`] kernel (the pointer array passed by value).
pub const REDUCE_N_MAX: usize = 8;

/// The body of a [`KernelOp::ReduceN`] kernel over `k` sources: the grid-stride loop of
/// [`body_code`], but each thread first loads its vectors of every source (so reads from all
/// of them are in flight together), then folds them in source order. Fewer vectors per source
/// are kept in flight as `k` grows, so registers stay near the binary kernel's. The result
/// goes to `dst` and to the first `nalso` of `also` (a direct all-reduce's slice written into
/// every peer's output over NVLink); each thread reads its elements of every source before it
/// writes them anywhere, so a destination may be one of the sources (in place).
pub(super) fn reduce_n_body_code(name: &str, k: u8, out: &mut String) {
    reduce_n_run_code(k, out);
    let _ = write!(
        out,
        r#"
extern "C" __global__ void {name}(T* dst, ccl_srcs s, u64 n, u64 raw, ccl_dsts also, u64 nalso) {{
  ccl_reduce_n_run(dst, s, n, ccl_param(raw), also, (int)nalso);
}}
"#
    );
}

/// The mailed form of [`reduce_n_body_code`] ([`KernelOp::ReduceNMail`]): queued before the
/// peers' buffers are known, it learns every address from a mailbox slot in host-mapped
/// memory that the engine's mail thread fills once every rank has posted. Reads of host
/// memory from the GPU are slow and queue behind each other (a grid of 512 blocks each
/// reading the slot's 18 words took 4 ms, 32 blocks 0.3 ms; one H200, 2026-12-01), so the
/// first block to find the slot filled copies it into the slot's mirror in device memory
/// (`mirror`, the same word layout) and the others read the mirror: thread 0 of each block
/// polls the mirror's tag, block 0 also the slot's, every other block the slot's only once in
/// 4096 looks (so that none depends on block 0 being resident, while the many blocks' reads
/// of host memory do not slow the GPU's other work: four ranks on one H200 ran 2 MiB
/// all-reduces in 0.48 ms with every block looking once in 64, 2026-12-01). The blocks count themselves in the mirror's
/// [`MAIL_SEEN`] word; the last resets the count and marks the host slot seen, so the slot may
/// serve another reduction. A destination of 0 means "reduce nothing" (the communicator is
/// going away). The peers learn of the kernel's stores from a stream write after it, as for
/// [`reduce_n_body_code`].
pub(super) fn reduce_n_mail_code(name: &str, k: u8, out: &mut String) {
    reduce_n_run_code(k, out);
    let _ = write!(
        out,
        r#"
extern "C" __global__ void {name}(u64* slot, u64 tag, u64* mirror, u64 n, u64 raw, u64 nalso) {{
  __shared__ T* s_dst;
  __shared__ ccl_srcs s_srcs;
  __shared__ ccl_dsts s_also;
  if (threadIdx.x == 0) {{
    volatile u64* v = (volatile u64*)slot;
    volatile u64* m = (volatile u64*)mirror;
    volatile u64* from = m;
    for (unsigned spin = 0;; ++spin) {{
      if (m[{tag_at}] == tag) {{
        __threadfence();
        break;
      }}
      if ((blockIdx.x == 0 || (spin & 4095) == 4095) && v[{tag_at}] == tag) {{
        __threadfence_system();
        from = v;
        break;
      }}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
      __nanosleep(128);
#endif
    }}
    s_dst = (T*)from[{dst_at}];
    for (int i = 0; i < {max}; ++i) s_srcs.p[i] = (const T*)from[{srcs_at} + i];
    for (int a = 0; a < {max}; ++a) s_also.p[a] = (T*)from[{also_at} + a];
    if (from == v) {{
      m[{dst_at}] = (u64)s_dst;
      for (int i = 0; i < {max}; ++i) m[{srcs_at} + i] = (u64)s_srcs.p[i];
      for (int a = 0; a < {max}; ++a) m[{also_at} + a] = (u64)s_also.p[a];
      __threadfence();
      m[{tag_at}] = tag;
    }}
    __threadfence();
    unsigned int* arrived = (unsigned int*)(mirror + {seen_at});
    if (atomicAdd(arrived, 1u) + 1u == gridDim.x) {{
      atomicExch(arrived, 0u);
      __threadfence_system();
      v[{seen_at}] = tag;
    }}
  }}
  __syncthreads();
  T* dst = s_dst;
  if (dst == 0) return;
  const ccl_srcs s = s_srcs;
  const ccl_dsts also = s_also;
  ccl_reduce_n_run(dst, s, n, ccl_param(raw), also, (int)nalso);
}}
"#,
        max = REDUCE_N_MAX,
        tag_at = MAIL_TAG,
        dst_at = MAIL_DST,
        seen_at = MAIL_SEEN,
        srcs_at = MAIL_SRCS,
        also_at = MAIL_ALSO,
    );
}

/// The grid-stride reduction both [`reduce_n_body_code`] and [`reduce_n_mail_code`] run.
fn reduce_n_run_code(k: u8, out: &mut String) {
    let unroll = (2 * UNROLL / k as usize).max(1);
    let _ = write!(
        out,
        r#"
#define K {k}
#define UNROLL_N {unroll}
#define VN (16 / sizeof(T))
union ccl_vec {{ ccl_u4 u; T e[VN]; }};
struct ccl_srcs {{ const T* p[{max}]; }};
struct ccl_dsts {{ T* p[{max}]; }};

static __device__ __forceinline__ void ccl_reduce_n_run(T* dst, const ccl_srcs& s, u64 n, const P p, const ccl_dsts& also, int na) {{
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  u64 start = 0;
  const u64 mis = (u64)dst & 15;
  bool same = true;
#pragma unroll
  for (int m = 0; m < K; ++m) same = same && (((u64)s.p[m] & 15) == mis);
#pragma unroll
  for (int a = 0; a < {max}; ++a) same = same && (a >= na || ((u64)also.p[a] & 15) == mis);
  if (same) {{
    u64 head = ((16 - mis) & 15) / sizeof(T);
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += stride) {{
      T r = s.p[0][i];
#pragma unroll
      for (int m = 1; m < K; ++m) r = ccl_apply(r, s.p[m][i], p);
      dst[i] = r;
#pragma unroll
      for (int a = 0; a < {max}; ++a) if (a < na) also.p[a][i] = r;
    }}
    const u64 nv = (n - head) / VN;
    ccl_u4* vd = (ccl_u4*)(dst + head);
    for (u64 base = tid; base < nv; base += stride * UNROLL_N) {{
      ccl_vec x[K][UNROLL_N];
#pragma unroll
      for (int m = 0; m < K; ++m) {{
        const ccl_u4* vs = (const ccl_u4*)(s.p[m] + head);
#pragma unroll
        for (int u = 0; u < UNROLL_N; ++u) {{
          const u64 i = base + (u64)u * stride;
          if (i < nv) x[m][u].u = vs[i];
        }}
      }}
#pragma unroll
      for (int u = 0; u < UNROLL_N; ++u) {{
        const u64 i = base + (u64)u * stride;
        if (i < nv) {{
          ccl_vec r = x[0][u];
#pragma unroll
          for (int m = 1; m < K; ++m) {{
#pragma unroll
            for (int j = 0; j < (int)VN; ++j) r.e[j] = ccl_apply(r.e[j], x[m][u].e[j], p);
          }}
          vd[i] = r.u;
#pragma unroll
          for (int a = 0; a < {max}; ++a) if (a < na) ((ccl_u4*)(also.p[a] + head))[i] = r.u;
        }}
      }}
    }}
    start = head + nv * VN;
  }}
  for (u64 i = start + tid; i < n; i += stride) {{
    T r = s.p[0][i];
#pragma unroll
    for (int m = 1; m < K; ++m) r = ccl_apply(r, s.p[m][i], p);
    dst[i] = r;
#pragma unroll
    for (int a = 0; a < {max}; ++a) if (a < na) also.p[a][i] = r;
  }}
}}
"#,
        max = REDUCE_N_MAX
    );
}
