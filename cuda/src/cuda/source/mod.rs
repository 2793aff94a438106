//! CUDA C++ source of the reduction kernels, generated per (type, operation).
//!
//! The source includes no header (NVRTC's header availability varies between installs):
//! bit casts, conversions and rounding-mode arithmetic are inline PTX, and fp16 / bf16 / fp8
//! conversions are written out with integer bit manipulation. The numerics reproduce
//! [`crate::host::reduce`] bit for bit:
//!
//! * a single `+`, `*`, max or min of two fp16/bf16/fp8 values is computed in `float` and
//!   rounded once to the narrow type (ties to even; fp8 saturating; NaN canonical). `float`
//!   has at least 2p+2 bits for every narrow p, so the float rounding never changes the final
//!   result: this equals the exactly rounded operation the host computes in `f64`;
//! * operations whose exact result is wider (the fused `x * s + acc`, division by an integer)
//!   are done in `double`, rounded to `float` with round-to-odd, then to the narrow type:
//!   round-to-odd with 2 spare bits makes the second rounding exact;
//! * `f32` results that are NaN are the canonical `0x7fffffff`; Max/Min follow CUDA
//!   `fmaxf`/`fminf` with `max(-0, +0) = +0`, spelled out as the host does;
//! * integers wrap (arithmetic on the unsigned type of the same width).
//!
//! Kernels are compiled with `--fmad=false --ftz=false --prec-div=true` (see
//! [`super::nvrtc::Nvrtc::compile`]).

use std::fmt::Write as _;

use crate::dtype::{DataType, ReduceKind};

/// What a kernel computes, for an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelOp {
    /// `dst[i] = a[i] (op) b[i]`.
    Reduce(ReduceKindKey),
    /// `dst[i] = ((s0[i] (op) s1[i]) (op) s2[i]) ...` over `k` sources (3..=[`REDUCE_N_MAX`]),
    /// rounded after every step exactly as a chain of [`KernelOp::Reduce`] launches, but in
    /// one pass: every source is read at once (over NVLink, from every peer at once) and
    /// the destination written once. Not in [`KernelOp::ALL`]: one kernel per `k`, compiled
    /// when a communicator of `k` ranks needs it (see [`reduce_n_body_code`]).
    ReduceN(ReduceKindKey, u8),
    /// A small all-reduce captured into a CUDA graph, whole in one block of
    /// [`GRAPH_AR_THREADS`] threads over `k` ranks' inputs (2..=[`REDUCE_N_MAX`]): it sets its
    /// "inputs ready" word at every peer and waits for theirs, reduces every element reading
    /// every input, sets its "done reading" word at every peer and waits for theirs, each word
    /// reset after its wait (see [`graph_all_reduce_code`]). Not in [`KernelOp::ALL`].
    GraphAllReduce(ReduceKindKey, u8),
    /// A small group of copies captured into a CUDA graph, in one block: the handshake of
    /// [`KernelOp::GraphAllReduce`], up to [`GRAPH_COPIES_MAX`] copies, the second handshake
    /// (see [`graph_copies_code`]; compiled under `Uint8`).
    GraphCopies,
    /// `dst[i] = src[i] * scalar`.
    PreMul,
    /// `dst[i] = src[i] * scalar + acc[i]`, rounded once.
    PreMulAdd,
    /// `dst[i] = dst[i] / n` (integer division truncating toward zero; floats divide).
    DivInt,
    /// One-shot all-reduce of a small message over the ranks' low-latency areas (one block;
    /// see [`ll_body_code`]). Not in [`KernelOp::ALL`]: it has its own launcher.
    LlAllReduce(ReduceKindKey),
    /// Small transfers between all ranks over the low-latency areas, no arithmetic (see
    /// [`ll_exchange_code`]); one kernel for every type (compiled under `Uint8`).
    LlExchange,
    /// One thread waiting until a flag word reaches a value (cyclic `>=`), as a stream wait
    /// would, but without holding the hardware queue: where streams share one queue
    /// (`CUDA_DEVICE_MAX_CONNECTIONS=1`) a waiting stream operation stops every stream's
    /// work behind it, a running kernel does not (see [`wait_flag_code`]; compiled under
    /// `Uint8`).
    WaitFlag,
    /// A direct transfer's copy as one kernel: wait until a flag reaches a value, copy the
    /// bytes, then set another flag -- the wait, the copy and the signal never leave a
    /// command queued behind a waiting one on the hardware queue (see [`wait_copy_code`];
    /// one block; compiled under `Uint8`).
    WaitCopy,
    /// A group's small sends and receives as one kernel of two blocks over the ranks'
    /// low-latency areas: per (sender, receiver) pair a ring of [`LL_P2P_SLOTS`] slots with a
    /// flag each and a credit word back, so a send needs no rendezvous with its receive (see
    /// [`ll_p2p_code`]; compiled under `Uint8`).
    LlP2p,
}

/// [`ReduceKind`] with an order, so that kernel keys sort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceKindKey {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceKindKey {
    /// Every arithmetic reduction.
    pub const ALL: [ReduceKindKey; 4] = [
        ReduceKindKey::Sum,
        ReduceKindKey::Prod,
        ReduceKindKey::Max,
        ReduceKindKey::Min,
    ];
}

impl From<ReduceKind> for ReduceKindKey {
    fn from(k: ReduceKind) -> Self {
        match k {
            ReduceKind::Sum => ReduceKindKey::Sum,
            ReduceKind::Prod => ReduceKindKey::Prod,
            ReduceKind::Max => ReduceKindKey::Max,
            ReduceKind::Min => ReduceKindKey::Min,
        }
    }
}

impl KernelOp {
    /// Every kernel kind.
    pub const ALL: [KernelOp; 7] = [
        KernelOp::Reduce(ReduceKindKey::Sum),
        KernelOp::Reduce(ReduceKindKey::Prod),
        KernelOp::Reduce(ReduceKindKey::Max),
        KernelOp::Reduce(ReduceKindKey::Min),
        KernelOp::PreMul,
        KernelOp::PreMulAdd,
        KernelOp::DivInt,
    ];

    /// The kernel for a reduction.
    pub fn reduce(k: ReduceKind) -> Self {
        KernelOp::Reduce(k.into())
    }

    fn tag(self) -> &'static str {
        match self {
            KernelOp::Reduce(ReduceKindKey::Sum) => "reduce_sum",
            KernelOp::Reduce(ReduceKindKey::Prod) => "reduce_prod",
            KernelOp::Reduce(ReduceKindKey::Max) => "reduce_max",
            KernelOp::Reduce(ReduceKindKey::Min) => "reduce_min",
            KernelOp::PreMul => "premul",
            KernelOp::PreMulAdd => "premul_add",
            KernelOp::DivInt => "div_int",
            KernelOp::LlAllReduce(ReduceKindKey::Sum) => "ll_allreduce_sum",
            KernelOp::LlAllReduce(ReduceKindKey::Prod) => "ll_allreduce_prod",
            KernelOp::LlAllReduce(ReduceKindKey::Max) => "ll_allreduce_max",
            KernelOp::LlAllReduce(ReduceKindKey::Min) => "ll_allreduce_min",
            KernelOp::LlExchange => "ll_exchange",
            KernelOp::WaitFlag => "wait_flag",
            KernelOp::WaitCopy => "wait_copy",
            KernelOp::LlP2p => "ll_p2p",
            KernelOp::ReduceN(ReduceKindKey::Sum, _) => "reduce_n_sum",
            KernelOp::ReduceN(ReduceKindKey::Prod, _) => "reduce_n_prod",
            KernelOp::ReduceN(ReduceKindKey::Max, _) => "reduce_n_max",
            KernelOp::ReduceN(ReduceKindKey::Min, _) => "reduce_n_min",
            KernelOp::GraphAllReduce(ReduceKindKey::Sum, _) => "graph_allreduce_sum",
            KernelOp::GraphAllReduce(ReduceKindKey::Prod, _) => "graph_allreduce_prod",
            KernelOp::GraphAllReduce(ReduceKindKey::Max, _) => "graph_allreduce_max",
            KernelOp::GraphAllReduce(ReduceKindKey::Min, _) => "graph_allreduce_min",
            KernelOp::GraphCopies => "graph_copies",
        }
    }

    /// The element-wise operation the kernel applies.
    fn element_op(self) -> KernelOp {
        match self {
            KernelOp::LlAllReduce(k) | KernelOp::ReduceN(k, _) | KernelOp::GraphAllReduce(k, _) => {
                KernelOp::Reduce(k)
            }
            op => op,
        }
    }

    /// Two inputs (`a`, `b`) rather than one.
    pub fn is_binary(self) -> bool {
        matches!(self, KernelOp::Reduce(_) | KernelOp::PreMulAdd)
    }
}

/// Short type tag used in kernel names.
pub fn dtype_tag(dt: DataType) -> &'static str {
    match dt {
        DataType::Int8 => "i8",
        DataType::Uint8 => "u8",
        DataType::Int32 => "i32",
        DataType::Uint32 => "u32",
        DataType::Int64 => "i64",
        DataType::Uint64 => "u64",
        DataType::Float16 => "f16",
        DataType::Float32 => "f32",
        DataType::Float64 => "f64",
        DataType::Bfloat16 => "bf16",
        DataType::Float8E4M3 => "e4m3",
        DataType::Float8E5M2 => "e5m2",
    }
}

/// The `extern "C"` name of a kernel, e.g. `ccl_reduce_sum_bf16`.
pub fn kernel_name(dt: DataType, op: KernelOp) -> String {
    match op {
        KernelOp::ReduceN(_, k) | KernelOp::GraphAllReduce(_, k) => {
            format!("ccl_{}{k}_{}", op.tag(), dtype_tag(dt))
        }
        _ => format!("ccl_{}_{}", op.tag(), dtype_tag(dt)),
    }
}

/// Elements per 16-byte vector.
pub fn vec_elems(dt: DataType) -> usize {
    16 / dt.size()
}

/// Independent 16-byte vectors each thread keeps in flight per loop iteration.
pub const UNROLL: usize = 4;

/// Threads per block of every kernel.
pub const BLOCK_THREADS: u32 = 256;

// ---------------------------------------------------------------------------------------------
// Narrow float formats.

/// A narrow binary float format (1 sign bit, `e` exponent bits, `m` mantissa bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Format {
    pub tag: &'static str,
    pub e: u32,
    pub m: u32,
    /// The all-ones exponent holds inf and NaN (false: e4m3, where only S.1111.111 is NaN).
    pub ieee: bool,
    /// Overflow and inf give the largest finite value.
    pub saturate: bool,
}

pub(crate) const F16: Format = Format {
    tag: "f16",
    e: 5,
    m: 10,
    ieee: true,
    saturate: false,
};
pub(crate) const BF16: Format = Format {
    tag: "bf16",
    e: 8,
    m: 7,
    ieee: true,
    saturate: false,
};
pub(crate) const E4M3: Format = Format {
    tag: "e4m3",
    e: 4,
    m: 3,
    ieee: false,
    saturate: true,
};
pub(crate) const E5M2: Format = Format {
    tag: "e5m2",
    e: 5,
    m: 2,
    ieee: true,
    saturate: true,
};

/// The `f32` bit pattern of `2^k` (normal range).
fn pow2_bits(k: i32) -> u32 {
    ((k + 127) as u32) << 23
}

impl Format {
    pub fn bias(self) -> i32 {
        (1 << (self.e - 1)) - 1
    }
    pub fn sign_bit(self) -> u32 {
        1 << (self.e + self.m)
    }
    pub fn exp_mask(self) -> u32 {
        (1 << self.e) - 1
    }
    pub fn man_mask(self) -> u32 {
        (1 << self.m) - 1
    }
    pub fn nan_bits(self) -> u32 {
        self.sign_bit() - 1
    }
    pub fn max_finite_bits(self) -> u32 {
        if self.ieee {
            (self.exp_mask() << self.m) - 1
        } else {
            self.nan_bits() - 1
        }
    }
    pub fn overflow_bits(self) -> u32 {
        if self.saturate || !self.ieee {
            self.max_finite_bits()
        } else {
            self.exp_mask() << self.m
        }
    }
    /// `f32` bits of the smallest magnitude that rounds past the largest finite value.
    pub fn overflow_threshold_bits(self) -> u32 {
        let max = self.max_finite_bits();
        let exp_field = (max >> self.m) as i32;
        let sig = f64::from((max & self.man_mask()) | (1 << self.m));
        let ulp_exp = exp_field - self.bias() - self.m as i32;
        let value = sig * 2f64.powi(ulp_exp) + 2f64.powi(ulp_exp - 1);
        (value as f32).to_bits()
    }
    /// `f32` bits of the smallest normal value.
    pub fn min_normal_bits(self) -> u32 {
        pow2_bits(1 - self.bias())
    }
    /// `f32` bits of `1 / (smallest subnormal)`.
    pub fn sub_scale_bits(self) -> u32 {
        pow2_bits(self.m as i32 + self.bias() - 1)
    }
    /// `f32` bits of the smallest subnormal.
    pub fn min_sub_bits(self) -> u32 {
        pow2_bits(1 - self.bias() - self.m as i32)
    }
    /// Exponent rebias of the encoding, pre-shifted: `(127 - bias) << m`.
    pub fn rebias(self) -> u32 {
        ((127 - self.bias()) as u32) << self.m
    }
    /// The format shares `f32`'s exponent range (bf16): no subnormal special case.
    pub fn same_range_as_f32(self) -> bool {
        self.e == 8
    }
}

fn format_of(dt: DataType) -> Option<Format> {
    match dt {
        DataType::Float16 => Some(F16),
        DataType::Bfloat16 => Some(BF16),
        DataType::Float8E4M3 => Some(E4M3),
        DataType::Float8E5M2 => Some(E5M2),
        _ => None,
    }
}

/// Decoder and encoder of a narrow format: `float dec_<tag>(u32)`, `u32 enc_<tag>(float)`.
fn format_code(f: Format, out: &mut String) {
    let t = f.tag;
    let shift = 23 - f.m;
    // Decoder.
    if f.same_range_as_f32() {
        let _ = writeln!(
            out,
            "static __device__ inline float dec_{t}(u32 h) {{ return u2f(h << 16); }}"
        );
    } else {
        let _ = writeln!(out, "static __device__ inline float dec_{t}(u32 h) {{");
        let _ = writeln!(
            out,
            "  const u32 sign = (h & {:#x}u) << {};",
            f.sign_bit(),
            31 - f.e - f.m
        );
        let _ = writeln!(
            out,
            "  const u32 e = (h >> {}) & {:#x}u, m = h & {:#x}u;",
            f.m,
            f.exp_mask(),
            f.man_mask()
        );
        if f.ieee {
            let _ = writeln!(
                out,
                "  if (e == {:#x}u) return u2f(sign | 0x7f800000u | (m << {shift}));",
                f.exp_mask()
            );
        } else {
            let _ = writeln!(
                out,
                "  if (e == {:#x}u && m == {:#x}u) return u2f(0x7fffffffu);",
                f.exp_mask(),
                f.man_mask()
            );
        }
        let _ = writeln!(
            out,
            "  if (e == 0u) return u2f(sign | f2u(mul_f((float)m, u2f({:#010x}u))));",
            f.min_sub_bits()
        );
        let _ = writeln!(
            out,
            "  return u2f(sign | ((e + {}u) << 23) | (m << {shift}));",
            127 - f.bias()
        );
        let _ = writeln!(out, "}}");
    }
    // Encoder: round to nearest even.
    let _ = writeln!(out, "static __device__ inline u32 enc_{t}(float f) {{");
    let _ = writeln!(out, "  const u32 u = f2u(f);");
    let _ = writeln!(out, "  const u32 sign = (u >> 31) << {};", f.e + f.m);
    let _ = writeln!(out, "  const u32 a = u & 0x7fffffffu;");
    let _ = writeln!(out, "  if (a > 0x7f800000u) return {:#x}u;", f.nan_bits());
    let _ = writeln!(
        out,
        "  if (a >= {:#010x}u) return sign | {:#x}u;",
        f.overflow_threshold_bits(),
        f.overflow_bits()
    );
    if !f.same_range_as_f32() {
        let _ = writeln!(out, "  if (a < {:#010x}u) {{", f.min_normal_bits());
        let _ = writeln!(
            out,
            "    return sign | rni_u32(mul_f(u2f(a), u2f({:#010x}u)));",
            f.sub_scale_bits()
        );
        let _ = writeln!(out, "  }}");
    }
    let _ = writeln!(
        out,
        "  const u32 r = (a + {:#x}u + ((a >> {shift}) & 1u)) >> {shift};",
        (1u32 << (shift - 1)) - 1
    );
    let _ = writeln!(out, "  return sign | (r - {:#x}u);", f.rebias());
    let _ = writeln!(out, "}}");
}

/// Header of every kernel source.
const HEADER: &str =
    "// Generated by libccl (ccl_cuda::cuda::source). No headers: see the module docs.\n";

/// The primitive operations, as inline PTX: bit casts and arithmetic with an explicit
/// rounding mode. [`kernel_source_with`] can replace them (to run the generated code on the
/// host in tests); everything else in a kernel's source is plain C++.
pub const DEVICE_PRIMITIVES: &str = r#"typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

static __device__ inline u32 f2u(float f) { u32 u; asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f)); return u; }
static __device__ inline float u2f(u32 u) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u)); return f; }
static __device__ inline u64 d2u(double d) { u64 u; asm("mov.b64 %0, %1;" : "=l"(u) : "d"(d)); return u; }
static __device__ inline double u2d(u64 u) { double d; asm("mov.b64 %0, %1;" : "=d"(d) : "l"(u)); return d; }
static __device__ inline float add_f(float x, float y) { float r; asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y)); return r; }
static __device__ inline float mul_f(float x, float y) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y)); return r; }
static __device__ inline float fma_f(float x, float y, float z) { float r; asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(x), "f"(y), "f"(z)); return r; }
static __device__ inline double add_d(double x, double y) { double r; asm("add.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y)); return r; }
static __device__ inline double sub_d(double x, double y) { double r; asm("sub.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y)); return r; }
static __device__ inline double mul_d(double x, double y) { double r; asm("mul.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y)); return r; }
static __device__ inline double div_d(double x, double y) { double r; asm("div.rn.f64 %0, %1, %2;" : "=d"(r) : "d"(x), "d"(y)); return r; }
static __device__ inline double fma_d(double x, double y, double z) { double r; asm("fma.rn.f64 %0, %1, %2, %3;" : "=d"(r) : "d"(x), "d"(y), "d"(z)); return r; }
static __device__ inline double f2d(float x) { double r; asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x)); return r; }
static __device__ inline float d2f(double x) { float r; asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x)); return r; }
static __device__ inline float d2f_rz(double x) { float r; asm("cvt.rz.f32.f64 %0, %1;" : "=f"(r) : "d"(x)); return r; }
static __device__ inline double u64_to_d(u64 x) { double r; asm("cvt.rn.f64.u64 %0, %1;" : "=d"(r) : "l"(x)); return r; }
static __device__ inline u32 rni_u32(float x) { u32 r; asm("cvt.rni.u32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
static __device__ inline void ccl_ld16(const void* p, u32* v) { asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "l"(p)); }
static __device__ inline void ccl_ld16_fresh(const void* p, u32* v) { asm volatile("ld.global.cv.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "l"(p)); }
static __device__ inline void ccl_st16(void* p, const u32* v) { asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]) : "memory"); }
static __device__ inline void ccl_backoff() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __nanosleep(64);
#endif
}
"#;

/// Helpers built on the primitives (plain C++).
const COMMON: &str = r#"
static __device__ inline bool nan_f(float x) { return (f2u(x) & 0x7fffffffu) > 0x7f800000u; }
static __device__ inline bool nan_d(double x) { return (d2u(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
static __device__ inline float canon_f(float x) { return nan_f(x) ? u2f(0x7fffffffu) : x; }

// CUDA fmaxf/fminf as the host spells them: a NaN operand loses, max(-0,+0) = +0.
static __device__ inline float fmax_f(float a, float b) {
  if (a > b || nan_f(b)) return canon_f(a);
  if (b > a || nan_f(a)) return b;
  return u2f(f2u(a) & f2u(b));
}
static __device__ inline float fmin_f(float a, float b) {
  if (a < b || nan_f(b)) return canon_f(a);
  if (b < a || nan_f(a)) return b;
  return u2f(f2u(a) | f2u(b));
}
static __device__ inline double fmax_d(double a, double b) {
  if (a > b || nan_d(b)) return a;
  if (b > a || nan_d(a)) return b;
  return u2d(d2u(a) & d2u(b));
}
static __device__ inline double fmin_d(double a, double b) {
  if (a < b || nan_d(b)) return a;
  if (b < a || nan_d(a)) return b;
  return u2d(d2u(a) | d2u(b));
}

// p + q rounded to odd (exact, or the neighbour with an odd last bit): a later rounding to
// nearest at 2+ fewer bits is then the correctly rounded p + q.
static __device__ inline double add_odd_d(double p, double q) {
  const double s = add_d(p, q);
  if (nan_d(s) || (d2u(s) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull) return s;
  const double qp = sub_d(s, p);
  const double err = add_d(sub_d(p, sub_d(s, qp)), sub_d(q, qp));
  if (err == 0.0 || (d2u(s) & 1ull)) return s;
  const bool up = (err > 0.0) == (s > 0.0);
  return u2d(up ? d2u(s) + 1ull : d2u(s) - 1ull);
}

// double -> float rounded to odd (exact, or truncated with the last bit set).
static __device__ inline float d2f_odd(double d) {
  float f = d2f_rz(d);
  if (!nan_d(d) && f2d(f) != d) f = u2f(f2u(f) | 1u);
  return f;
}

struct alignas(16) ccl_u4 { u32 x, y, z, w; };
"#;

/// C type of an element's storage.
fn storage(dt: DataType) -> &'static str {
    match dt {
        DataType::Int8 => "i8",
        DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => "u8",
        DataType::Int32 => "i32",
        DataType::Uint32 => "u32",
        DataType::Int64 => "i64",
        DataType::Uint64 => "u64",
        DataType::Float16 | DataType::Bfloat16 => "u16",
        DataType::Float32 => "float",
        DataType::Float64 => "double",
    }
}

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

/// `typedef P`, `ccl_param` and `ccl_apply` for (dt, op). Long because it is the one table of
/// generated CUDA per operation, read top to bottom as the code it emits.
fn op_code(dt: DataType, op: KernelOp, out: &mut String) {
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let bin = op.is_binary();
    let apply_sig = if bin {
        "static __device__ inline T ccl_apply(T x, T y, P p)"
    } else {
        "static __device__ inline T ccl_apply(T x, P p)"
    };
    if let Some(f) = format_of(dt) {
        let t = f.tag;
        let (param_ty, param) = match op {
            KernelOp::DivInt => ("u64", "raw".to_string()),
            _ => (
                "float",
                format!(
                    "dec_{t}((u32)(raw & {:#x}ull))",
                    (1u64 << (8 * dt.size())) - 1
                ),
            ),
        };
        line(format!("typedef {param_ty} P;"));
        line(format!(
            "static __device__ inline P ccl_param(u64 raw) {{ return {param}; }}"
        ));
        let body = match op {
            KernelOp::Reduce(ReduceKindKey::Sum) | KernelOp::LlAllReduce(ReduceKindKey::Sum) => {
                format!("enc_{t}(add_f(dec_{t}(x), dec_{t}(y)))")
            }
            KernelOp::Reduce(ReduceKindKey::Prod) | KernelOp::LlAllReduce(ReduceKindKey::Prod) => {
                format!("enc_{t}(mul_f(dec_{t}(x), dec_{t}(y)))")
            }
            KernelOp::Reduce(ReduceKindKey::Max) | KernelOp::LlAllReduce(ReduceKindKey::Max) => {
                format!("enc_{t}(fmax_f(dec_{t}(x), dec_{t}(y)))")
            }
            KernelOp::Reduce(ReduceKindKey::Min) | KernelOp::LlAllReduce(ReduceKindKey::Min) => {
                format!("enc_{t}(fmin_f(dec_{t}(x), dec_{t}(y)))")
            }
            KernelOp::PreMul
            | KernelOp::LlExchange
            | KernelOp::WaitFlag
            | KernelOp::WaitCopy
            | KernelOp::LlP2p
            | KernelOp::ReduceN(..)
            | KernelOp::GraphAllReduce(..)
            | KernelOp::GraphCopies => {
                format!("enc_{t}(mul_f(dec_{t}(x), p))")
            }
            KernelOp::PreMulAdd => format!(
                "enc_{t}(d2f_odd(add_odd_d(mul_d(f2d(dec_{t}(x)), f2d(p)), f2d(dec_{t}(y)))))"
            ),
            KernelOp::DivInt => format!("enc_{t}(d2f_odd(div_d(f2d(dec_{t}(x)), u64_to_d(p))))"),
        };
        line(format!("{apply_sig} {{ return (T){body}; }}"));
        return;
    }
    match dt {
        DataType::Float32 => {
            let (param_ty, param) = match op {
                KernelOp::DivInt => ("u64", "raw"),
                _ => ("float", "u2f((u32)raw)"),
            };
            line(format!("typedef {param_ty} P;"));
            line(format!(
                "static __device__ inline P ccl_param(u64 raw) {{ return {param}; }}"
            ));
            let body = match op {
                KernelOp::Reduce(ReduceKindKey::Sum) | KernelOp::LlAllReduce(ReduceKindKey::Sum) => "return canon_f(add_f(x, y));",
                KernelOp::Reduce(ReduceKindKey::Prod) | KernelOp::LlAllReduce(ReduceKindKey::Prod) => "return canon_f(mul_f(x, y));",
                KernelOp::Reduce(ReduceKindKey::Max) | KernelOp::LlAllReduce(ReduceKindKey::Max) => "return fmax_f(x, y);",
                KernelOp::Reduce(ReduceKindKey::Min) | KernelOp::LlAllReduce(ReduceKindKey::Min) => "return fmin_f(x, y);",
                KernelOp::PreMul | KernelOp::LlExchange | KernelOp::WaitFlag | KernelOp::WaitCopy | KernelOp::LlP2p | KernelOp::ReduceN(..) | KernelOp::GraphAllReduce(..) | KernelOp::GraphCopies => "return canon_f(mul_f(x, p));",
                KernelOp::PreMulAdd => "return canon_f(fma_f(x, p, y));",
                // The host converts to double and back: a NaN comes out quieted, payload kept.
                KernelOp::DivInt => {
                    "if (nan_f(x)) return u2f(f2u(x) | 0x400000u); return d2f(div_d(f2d(x), u64_to_d(p)));"
                }
            };
            line(format!("{apply_sig} {{ {body} }}"));
        }
        DataType::Float64 => {
            let (param_ty, param) = match op {
                KernelOp::DivInt => ("u64", "raw"),
                _ => ("double", "u2d(raw)"),
            };
            line(format!("typedef {param_ty} P;"));
            line(format!(
                "static __device__ inline P ccl_param(u64 raw) {{ return {param}; }}"
            ));
            let body = match op {
                KernelOp::Reduce(ReduceKindKey::Sum) | KernelOp::LlAllReduce(ReduceKindKey::Sum) => "return add_d(x, y);",
                KernelOp::Reduce(ReduceKindKey::Prod) | KernelOp::LlAllReduce(ReduceKindKey::Prod) => "return mul_d(x, y);",
                KernelOp::Reduce(ReduceKindKey::Max) | KernelOp::LlAllReduce(ReduceKindKey::Max) => "return fmax_d(x, y);",
                KernelOp::Reduce(ReduceKindKey::Min) | KernelOp::LlAllReduce(ReduceKindKey::Min) => "return fmin_d(x, y);",
                KernelOp::PreMul | KernelOp::LlExchange | KernelOp::WaitFlag | KernelOp::WaitCopy | KernelOp::LlP2p | KernelOp::ReduceN(..) | KernelOp::GraphAllReduce(..) | KernelOp::GraphCopies => "return mul_d(x, p);",
                KernelOp::PreMulAdd => "return fma_d(x, p, y);",
                KernelOp::DivInt => {
                    "if (nan_d(x)) return u2d(d2u(x) | 0x8000000000000ull); return div_d(x, u64_to_d(p));"
                }
            };
            line(format!("{apply_sig} {{ {body} }}"));
        }
        _ => {
            // Integers.
            let u = unsigned_of(dt);
            let (param_ty, param) = match op {
                KernelOp::DivInt => ("u64", "raw".to_string()),
                _ => ("T", "(T)raw".to_string()),
            };
            line(format!("typedef {param_ty} P;"));
            line(format!(
                "static __device__ inline P ccl_param(u64 raw) {{ return {param}; }}"
            ));
            let body = match op {
                KernelOp::Reduce(ReduceKindKey::Sum)
                | KernelOp::LlAllReduce(ReduceKindKey::Sum) => {
                    format!("return (T)({u})((u64)({u})x + (u64)({u})y);")
                }
                KernelOp::Reduce(ReduceKindKey::Prod)
                | KernelOp::LlAllReduce(ReduceKindKey::Prod) => {
                    format!("return (T)({u})((u64)({u})x * (u64)({u})y);")
                }
                KernelOp::Reduce(ReduceKindKey::Max)
                | KernelOp::LlAllReduce(ReduceKindKey::Max) => "return x > y ? x : y;".to_string(),
                KernelOp::Reduce(ReduceKindKey::Min)
                | KernelOp::LlAllReduce(ReduceKindKey::Min) => "return x < y ? x : y;".to_string(),
                KernelOp::PreMul
                | KernelOp::LlExchange
                | KernelOp::WaitFlag
                | KernelOp::WaitCopy
                | KernelOp::LlP2p
                | KernelOp::ReduceN(..)
                | KernelOp::GraphAllReduce(..)
                | KernelOp::GraphCopies => {
                    format!("return (T)({u})((u64)({u})x * (u64)({u})p);")
                }
                KernelOp::PreMulAdd => {
                    format!("return (T)({u})((u64)({u})x * (u64)({u})p + (u64)({u})y);")
                }
                KernelOp::DivInt => {
                    if is_signed_int(dt) {
                        "if (p <= 0x7fffffffffffffffull) return (T)((i64)x / (i64)p); \
                         return (T)(((i64)x == (-0x7fffffffffffffffll - 1) && p == 0x8000000000000000ull) ? -1 : 0);"
                            .to_string()
                    } else {
                        "return (T)((u64)x / p);".to_string()
                    }
                }
            };
            line(format!("{apply_sig} {{ {body} }}"));
        }
    }
}

/// The grid-stride kernel body around `ccl_apply`: a scalar head up to 16-byte alignment,
/// then 16-byte vectors (`UNROLL` in flight per thread), then a scalar tail. Vectors are used
/// when every pointer has the same offset modulo 16; otherwise the whole range is scalar.
fn body_code(name: &str, bin: bool, out: &mut String) {
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

/// The complete source of one kernel (one NVRTC program).
pub fn kernel_source(dt: DataType, op: KernelOp) -> String {
    kernel_source_with(dt, op, DEVICE_PRIMITIVES)
}

/// [`kernel_source`] with other definitions of the primitives (the typedefs and functions
/// of [`DEVICE_PRIMITIVES`]); tests use host C++ ones to run the kernels on the CPU.
pub fn kernel_source_with(dt: DataType, op: KernelOp, primitives: &str) -> String {
    let mut s = String::with_capacity(8192);
    s.push_str(HEADER);
    s.push_str(primitives);
    if op == KernelOp::LlExchange {
        s.push_str("struct alignas(16) ccl_u4 { u32 x, y, z, w; };\n");
        ll_exchange_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::WaitFlag {
        wait_flag_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::WaitCopy {
        wait_copy_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::LlP2p {
        ll_p2p_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::GraphCopies {
        graph_copies_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    s.push_str(COMMON);
    typed_prelude(dt, &mut s);
    typed_kernel(dt, op, &mut s);
    s
}

/// What every kernel over elements of `dt` starts with: the element type and, for the
/// small floating-point formats, their decoding and encoding.
fn typed_prelude(dt: DataType, out: &mut String) {
    let _ = writeln!(out, "\ntypedef {} T;", storage(dt));
    if let Some(f) = format_of(dt) {
        format_code(f, out);
    }
}

/// One kernel over elements of `dt`: its element operation and its body.
fn typed_kernel(dt: DataType, op: KernelOp, out: &mut String) {
    op_code(dt, op.element_op(), out);
    match op {
        KernelOp::LlAllReduce(_) => ll_body_code(&kernel_name(dt, op), out),
        KernelOp::ReduceN(_, k) => reduce_n_body_code(&kernel_name(dt, op), k, out),
        KernelOp::GraphAllReduce(_, k) => graph_all_reduce_code(&kernel_name(dt, op), k, out),
        _ => body_code(&kernel_name(dt, op), op.is_binary(), out),
    }
}

/// Whether `op` is a kernel over typed elements, which [`batch_source`] can compile together
/// with others of its type; the rest (no arithmetic) are one program each.
pub fn batchable(op: KernelOp) -> bool {
    !matches!(
        op,
        KernelOp::LlExchange
            | KernelOp::WaitFlag
            | KernelOp::WaitCopy
            | KernelOp::LlP2p
            | KernelOp::GraphCopies
    )
}

/// One NVRTC program of every kernel of `ops` (each [`batchable`]) over elements of `dt`:
/// NVRTC's cost is mostly per program, and it scales poorly over threads of one process, so
/// the kernels loaded ahead compile as one program per type. Each kernel's element operation
/// and helpers sit in a namespace of their own (they share names), its macros are undefined
/// after it, and its `extern "C"` name is [`kernel_name`]'s, as in [`kernel_source`].
pub fn batch_source(dt: DataType, ops: &[KernelOp]) -> String {
    batch_source_with(dt, ops, DEVICE_PRIMITIVES)
}

/// [`batch_source`] with other definitions of the primitives (see [`kernel_source_with`]).
pub fn batch_source_with(dt: DataType, ops: &[KernelOp], primitives: &str) -> String {
    let mut s = String::with_capacity(8192 * (ops.len() + 1));
    s.push_str(HEADER);
    s.push_str(primitives);
    s.push_str(COMMON);
    typed_prelude(dt, &mut s);
    for (i, &op) in ops.iter().enumerate() {
        let _ = writeln!(s, "\nnamespace ccl_kernel_{i} {{");
        typed_kernel(dt, op, &mut s);
        s.push_str("\n} // namespace\n");
        for m in KERNEL_MACROS {
            let _ = writeln!(s, "#undef {m}");
        }
    }
    s
}

/// Macros the kernel bodies define (undefined between the kernels of a [`batch_source`]).
const KERNEL_MACROS: [&str; 7] = [
    "UNROLL", "VN", "K", "HELD", "UNROLL_N", "LL_MAXB", "LL_MAXR",
];

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
fn graph_all_reduce_code(name: &str, k: u8, out: &mut String) {
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

/// Most copies of a [`KernelOp::GraphCopies`] kernel (passed by value).
pub const GRAPH_COPIES_MAX: usize = 16;

/// The body of [`KernelOp::GraphCopies`]: one block of [`GRAPH_AR_THREADS`]; the handshake on
/// the "inputs ready" words, the first `nfirst` copies in turn with the whole block (16-byte
/// vectors when both ends are 16-byte aligned, else bytes), with `halfway` the handshake on the
/// "halfway" words (`h`'s first two arrays) and the other copies (a receive parked in scratch
/// memory moves into place there), then the handshake on the "done" words.
fn graph_copies_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
{GRAPH_HANDSHAKE}
struct alignas(16) ccl_v16 {{ u32 x, y, z, w; }};
struct ccl_gcopies {{ u64 dst[{max}]; u64 src[{max}]; u64 bytes[{max}]; }};

static __device__ inline void ccl_block_copies(const ccl_gcopies& c, u32 from, u32 to) {{
  const u64 tid = threadIdx.x, step = blockDim.x;
  for (u32 m = from; m < to; ++m) {{
    u8* dst = (u8*)c.dst[m];
    const u8* src = (const u8*)c.src[m];
    const u64 bytes = c.bytes[m];
    u64 head = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {{
      const u64 nv = bytes / 16;
      for (u64 i = tid; i < nv; i += step) ((ccl_v16*)dst)[i] = ((const ccl_v16*)src)[i];
      head = nv * 16;
    }}
    for (u64 i = head + tid; i < bytes; i += step) dst[i] = src[i];
  }}
  __syncthreads();
}}

extern "C" __global__ void {name}(ccl_gcopies c, u32 ncopies, u32 nfirst, ccl_gwords w, ccl_gwords h, u32 np, u32 halfway) {{
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

/// Most sources of a [`KernelOp::ReduceN`] kernel (the pointer array passed by value).
pub const REDUCE_N_MAX: usize = 8;

/// The body of a [`KernelOp::ReduceN`] kernel over `k` sources: the grid-stride loop of
/// [`body_code`], but each thread first loads its vectors of every source (so reads from all
/// of them are in flight together), then folds them in source order. Fewer vectors per source
/// are kept in flight as `k` grows, so registers stay near the binary kernel's.
fn reduce_n_body_code(name: &str, k: u8, out: &mut String) {
    let unroll = (2 * UNROLL / k as usize).max(1);
    let _ = write!(
        out,
        r#"
#define K {k}
#define UNROLL_N {unroll}
#define VN (16 / sizeof(T))
union ccl_vec {{ ccl_u4 u; T e[VN]; }};
struct ccl_srcs {{ const T* p[{max}]; }};

extern "C" __global__ void {name}(T* dst, ccl_srcs s, u64 n, u64 raw) {{
  const P p = ccl_param(raw);
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  u64 start = 0;
  const u64 mis = (u64)dst & 15;
  bool same = true;
#pragma unroll
  for (int m = 0; m < K; ++m) same = same && (((u64)s.p[m] & 15) == mis);
  if (same) {{
    u64 head = ((16 - mis) & 15) / sizeof(T);
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += stride) {{
      T r = s.p[0][i];
#pragma unroll
      for (int m = 1; m < K; ++m) r = ccl_apply(r, s.p[m][i], p);
      dst[i] = r;
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
  }}
}}
"#,
        max = REDUCE_N_MAX
    );
}

/// Threads per block of a low-latency kernel.
pub const LL_THREADS: u32 = 512;

/// Most blocks of a low-latency kernel; each block owns a contiguous part of the message and
/// its own flag and acknowledgement words, so blocks never wait for each other.
pub const LL_MAX_BLOCKS: usize = 32;

/// Slots per (sender, receiver) pair of the point-to-point region: a sender runs at most this
/// many small sends ahead of its receiver's receives.
pub const LL_P2P_SLOTS: usize = 8;

/// Largest send or receive the point-to-point kernel carries (one slot).
pub const LL_P2P_BYTES: usize = 4096;

/// Most sends, and most receives, one point-to-point kernel launch carries (its parameter).
pub const LL_P2P_MAX_OPS: usize = 32;

/// Byte offset of the point-to-point region in a low-latency area: after a flag word per
/// (sender, block) and an acknowledgement word per (peer, block), each on its own 64-byte
/// line. The region is fixed-size, so every rank finds it at the same offset whatever its
/// `ll_max`.
pub fn ll_p2p_offset(nranks: usize) -> usize {
    (2 * nranks * LL_MAX_BLOCKS * 64).div_ceil(256) * 256
}

/// Bytes of the point-to-point region's words, from [`ll_p2p_offset`]: a line per (sender,
/// slot) holding the slot's sequence number and byte count, a credit line per receiver (the
/// last sequence number it consumed from this rank), and this rank's ticket line (how many
/// of its sends have read their source, for in-place receives).
pub fn ll_p2p_words_bytes(nranks: usize) -> usize {
    (64 * (nranks * LL_P2P_SLOTS + nranks + 1)).div_ceil(256) * 256
}

/// Byte offset of the data regions in a low-latency area: after the words and the
/// point-to-point region (its words, then a slot of [`LL_P2P_BYTES`] per (sender, slot)).
pub fn ll_data_offset(nranks: usize) -> usize {
    ll_p2p_offset(nranks) + ll_p2p_words_bytes(nranks) + nranks * LL_P2P_SLOTS * LL_P2P_BYTES
}

/// Bytes of one rank's low-latency area: the words, then two buffers (by operation parity)
/// of `ll_max` bytes per sender.
pub fn ll_area_bytes(nranks: usize, ll_max: usize) -> usize {
    ll_data_offset(nranks) + nranks * 2 * ll_max
}

/// Most ranks a low-latency exchange serves (its transfer table is a kernel parameter).
pub const LL_EXCHANGE_MAX_RANKS: usize = 8;

/// The flag, acknowledgement and buffer discipline both low-latency kernels share (launched
/// with [`LL_MAX_BLOCKS`] blocks every time, idle ones included: each block waits for the
/// acknowledgement its own block index got two operations back, so every index must take part
/// every time). Block `blk` owns bytes `[b0, b1)` of each message, a multiple of 16 bytes so
/// vector copies and element boundaries line up.
fn ll_protocol_code(out: &mut String) {
    let _ = write!(
        out,
        r#"
#define LL_MAXB {LL_MAX_BLOCKS}

static __device__ inline void ccl_ll_range(u64 bytes, u32 blk, u64* b0, u64* b1) {{
  u64 per = (bytes + LL_MAXB - 1) / LL_MAXB;
  per = (per + 15) & ~15ull;
  *b0 = (u64)blk * per < bytes ? (u64)blk * per : bytes;
  *b1 = *b0 + per < bytes ? *b0 + per : bytes;
}}

/* Copies bytes [b0, b1) of `from` to the same offsets of `to`, 16 bytes at a time when both
   are aligned. */
static __device__ inline void ccl_ll_copy(u8* to, const u8* from, u64 b0, u64 b1, u32 tid, u32 nthreads) {{
  if (((((u64)to) | ((u64)from)) & 15) == 0) {{
    const u64 v0 = b0 / 16, v1 = b1 / 16;
    for (u64 i = v0 + tid; i < v1; i += nthreads) ((ccl_u4*)to)[i] = ((const ccl_u4*)from)[i];
    for (u64 i = v1 * 16 + tid; i < b1; i += nthreads) to[i] = from[i];
  }} else {{
    for (u64 i = b0 + tid; i < b1; i += nthreads) to[i] = from[i];
  }}
}}

/* Before overwriting a peer's buffer (parity of seq): wait for its acknowledgement of the
   operation two back, which used the same buffer. */
static __device__ inline void ccl_ll_wait_acks(u8* mine, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid) {{
  if (tid < nranks && tid != rank) {{
    volatile u32* ack = (volatile u32*)(mine + 64ull * ((u64)nranks * LL_MAXB + (u64)tid * LL_MAXB + blk));
    while ((int)(*ack - (seq - 2u)) < 0) {{ }}
  }}
  __syncthreads();
}}

/* After this block's pushes: make them visible, raise its flag at every peer, wait for every
   peer's flag of the same block here. */
static __device__ inline void ccl_ll_signal_and_wait(const u64* areas, u8* mine, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid) {{
  __threadfence_system();
  __syncthreads();
  if (tid < nranks && tid != rank) {{
    *(volatile u32*)((u8*)areas[tid] + 64ull * ((u64)rank * LL_MAXB + blk)) = seq;
    volatile u32* flag = (volatile u32*)(mine + 64ull * ((u64)tid * LL_MAXB + blk));
    while ((int)(*flag - seq) < 0) {{ }}
  }}
  __syncthreads();
  __threadfence();
}}

/* After this block has read what the peers pushed: tell them their buffer is free. */
static __device__ inline void ccl_ll_ack(const u64* areas, u32 nranks, u32 rank, u32 seq, u32 blk, u32 tid) {{
  __syncthreads();
  if (tid < nranks && tid != rank) {{
    __threadfence_system();
    *(volatile u32*)((u8*)areas[tid] + 64ull * ((u64)nranks * LL_MAXB + (u64)rank * LL_MAXB + blk)) = seq;
  }}
}}
"#
    );
}

/// The low-latency exchange: per peer `q`, push `sbytes[q]` from `src[q]` into `q`'s area and
/// copy the `rbytes[q]` that `q` pushed here to `dst[q]`; `q == rank` is a local copy. Same
/// flag, acknowledgement and buffer discipline as the all-reduce (every block of every rank
/// signals every peer each time, data or not), so the two kernels share one sequence.
/// The flag wait: one thread polls the word (volatile: it is written over NVLink by a peer's
/// stream, or by the host) and sleeps between looks; a system-wide fence on the way out keeps
/// this stream's later reads behind the writes the flag announces.
fn wait_flag_code(name: &str, out: &mut String) {
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
fn wait_copy_code(name: &str, out: &mut String) {
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

/// The point-to-point kernel: block 0 runs the sends in order, block 1 the receives in order,
/// side by side so that neither waits behind the other (a send waits only for a credit, which
/// the peer's receive block returns whatever its send block is doing). A send waits until its
/// slot's previous use was consumed, copies into the receiver's slot, fences, writes the byte
/// count and then the sequence number, and advances this rank's ticket. A receive waits for
/// its slot's sequence number (and, where its buffer overlaps sends of the same launch, for
/// the ticket of the last of them: an in-place exchange reads before it writes), copies out
/// with loads that skip L1 (the peer wrote the slot over NVLink), and returns the credit.
/// Bytes received are the sender's count clipped to the receive; a receive whose size differs
/// from its send's also writes 1 + the sender's rank to `err` (host-mapped memory the host
/// reports from) if nothing is there yet.
fn ll_p2p_code(name: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"
#define P2P_SLOTS {LL_P2P_SLOTS}u
#define P2P_BYTES {LL_P2P_BYTES}ull
#define P2P_OPS {LL_P2P_MAX_OPS}
struct ccl_p2p {{
  u64 src[P2P_OPS]; u64 sbytes[P2P_OPS]; u64 dst[P2P_OPS]; u64 rbytes[P2P_OPS];
  u32 speer[P2P_OPS]; u32 sseq[P2P_OPS]; u32 rpeer[P2P_OPS]; u32 rseq[P2P_OPS]; u32 rafter[P2P_OPS];
  u32 nsend; u32 nrecv;
}};

static __device__ inline void ccl_p2p_spin(const volatile u32* w, u32 value) {{
  while ((int)(*w - value) < 0) ccl_backoff();
}}

/* Block-wide copy; loads bypass L1 when `fresh` (memory a peer wrote during this kernel). */
static __device__ inline void ccl_p2p_copy(u8* to, const u8* from, u64 bytes, bool fresh) {{
  const u64 tid = threadIdx.x, step = blockDim.x;
  u64 head = 0;
  if (((((u64)to) | ((u64)from)) & 15) == 0) {{
    const u64 nv = bytes / 16;
    for (u64 i = tid; i < nv; i += step) {{
      u32 v[4];
      if (fresh) ccl_ld16_fresh(from + 16 * i, v);
      else ccl_ld16(from + 16 * i, v);
      ccl_st16(to + 16 * i, v);
    }}
    head = nv * 16;
  }}
  for (u64 i = head + tid; i < bytes; i += step) to[i] = fresh ? ((const volatile u8*)from)[i] : from[i];
}}

extern "C" __global__ void {name}(ccl_p2p x, const u64* areas, u32 rank, u32 nranks, u64 off, u32 ticket_base, u32* err) {{
  u8* mine = (u8*)areas[rank];
  const u64 words = (64ull * (nranks * P2P_SLOTS + nranks + 1) + 255) / 256 * 256;
  volatile u32* ticket = (volatile u32*)(mine + off + 64ull * (nranks * P2P_SLOTS + nranks));
  __shared__ u32 got;
  if (blockIdx.x == 0) {{
    for (u32 i = 0; i < x.nsend; ++i) {{
      const u32 q = x.speer[i], seq = x.sseq[i], slot = seq % P2P_SLOTS;
      u8* peer = (u8*)areas[q];
      if (threadIdx.x == 0) ccl_p2p_spin((const volatile u32*)(mine + off + 64ull * (nranks * P2P_SLOTS + q)), seq - P2P_SLOTS);
      __syncthreads();
      ccl_p2p_copy(peer + off + words + ((u64)rank * P2P_SLOTS + slot) * P2P_BYTES, (const u8*)x.src[i], x.sbytes[i], false);
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) {{
        volatile u32* line = (volatile u32*)(peer + off + 64ull * ((u64)rank * P2P_SLOTS + slot));
        line[1] = (u32)x.sbytes[i];
        __threadfence_system();
        line[0] = seq;
        *ticket = ticket_base + i + 1;
      }}
    }}
  }} else {{
    for (u32 j = 0; j < x.nrecv; ++j) {{
      const u32 q = x.rpeer[j], seq = x.rseq[j], slot = seq % P2P_SLOTS;
      if (threadIdx.x == 0) {{
        volatile u32* line = (volatile u32*)(mine + off + 64ull * ((u64)q * P2P_SLOTS + slot));
        ccl_p2p_spin(line, seq);
        if (x.rafter[j] > 0) ccl_p2p_spin(ticket, ticket_base + x.rafter[j]);
        __threadfence_system();
        got = line[1];
      }}
      __syncthreads();
      const u64 n = (u64)got < x.rbytes[j] ? (u64)got : x.rbytes[j];
      if (threadIdx.x == 0 && (u64)got != x.rbytes[j] && *(volatile u32*)err == 0) *(volatile u32*)err = q + 1;
      ccl_p2p_copy((u8*)x.dst[j], mine + off + words + ((u64)q * P2P_SLOTS + slot) * P2P_BYTES, n, true);
      __syncthreads();
      if (threadIdx.x == 0) {{
        __threadfence_system();
        *(volatile u32*)((u8*)areas[q] + off + 64ull * (nranks * P2P_SLOTS + rank)) = seq;
      }}
    }}
  }}
}}
"#
    );
}

fn ll_exchange_code(name: &str, out: &mut String) {
    ll_protocol_code(out);
    let _ = write!(
        out,
        r#"
#define LL_MAXR {LL_EXCHANGE_MAX_RANKS}
struct ccl_xfer {{ u64 src[LL_MAXR]; u64 dst[LL_MAXR]; u64 sbytes[LL_MAXR]; u64 rbytes[LL_MAXR]; }};

static __device__ inline void ccl_copy_part(u8* to, const u8* from, u64 bytes, u32 blk, u32 tid, u32 nthreads) {{
  u64 b0, b1;
  ccl_ll_range(bytes, blk, &b0, &b1);
  ccl_ll_copy(to, from, b0, b1, tid, nthreads);
}}

extern "C" __global__ void {name}(ccl_xfer x, const u64* areas, u32 nranks, u32 rank, u32 seq, u64 llmax, u64 data_off) {{
  const u32 par = seq & 1u;
  const u32 blk = blockIdx.x;
  const u32 tid = threadIdx.x;
  u8* mine = (u8*)areas[rank];
  ccl_ll_wait_acks(mine, nranks, rank, seq, blk, tid);
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank) {{
      if (x.src[q] != x.dst[q]) ccl_copy_part((u8*)x.dst[q], (const u8*)x.src[q], x.sbytes[q], blk, tid, blockDim.x);
    }} else if (x.sbytes[q] > 0) {{
      u8* to = (u8*)areas[q] + data_off + ((u64)rank * 2 + par) * llmax;
      ccl_copy_part(to, (const u8*)x.src[q], x.sbytes[q], blk, tid, blockDim.x);
    }}
  }}
  ccl_ll_signal_and_wait(areas, mine, nranks, rank, seq, blk, tid);
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank || x.rbytes[q] == 0) continue;
    const u8* from = mine + data_off + ((u64)q * 2 + par) * llmax;
    ccl_copy_part((u8*)x.dst[q], from, x.rbytes[q], blk, tid, blockDim.x);
  }}
  ccl_ll_ack(areas, nranks, rank, seq, blk, tid);
}}
"#
    );
}

/// The low-latency all-reduce (and reduce-scatter: peer `q` gets the input at
/// `q * push_stride`, this rank's own part is at `own_off`; both 0 for all-reduce): each block
/// pushes its part of the input into every peer's area with plain stores, fences, raises its
/// flag there, waits for the same block's flag of every peer in its own area, and reduces all
/// inputs in rank order (so every rank computes the same bits); see [`ll_protocol_code`].
fn ll_body_code(name: &str, out: &mut String) {
    ll_protocol_code(out);
    let _ = write!(
        out,
        r#"
static __device__ inline T ccl_ld_volatile(const T* p) {{ return *(const volatile T*)p; }}

extern "C" __global__ void {name}(T* dst, const T* src, u64 n, const u64* areas, u32 nranks, u32 rank, u32 seq, u64 llmax, u64 data_off, u64 push_stride, u64 own_off) {{
  const P p = ccl_param(0);
  const u32 par = seq & 1u;
  const u32 blk = blockIdx.x;
  const u32 tid = threadIdx.x;
  u64 b0, b1;
  ccl_ll_range(n * sizeof(T), blk, &b0, &b1);
  u8* mine = (u8*)areas[rank];
  ccl_ll_wait_acks(mine, nranks, rank, seq, blk, tid);
  const T* own = (const T*)((const u8*)src + own_off);
  for (u32 q = 0; q < nranks; ++q) {{
    if (q == rank) continue;
    u8* to = (u8*)areas[q] + data_off + ((u64)rank * 2 + par) * llmax;
    ccl_ll_copy(to, (const u8*)src + (u64)q * push_stride, b0, b1, tid, blockDim.x);
  }}
  ccl_ll_signal_and_wait(areas, mine, nranks, rank, seq, blk, tid);
  const u64 e0 = b0 / sizeof(T), e1 = b1 / sizeof(T);
  for (u64 i = e0 + tid; i < e1; i += blockDim.x) {{
    T acc = rank == 0 ? own[i] : ccl_ld_volatile((const T*)(mine + data_off + (0ull * 2 + par) * llmax) + i);
    for (u32 q = 1; q < nranks; ++q) {{
      const T x = q == rank ? own[i] : ccl_ld_volatile((const T*)(mine + data_off + ((u64)q * 2 + par) * llmax) + i);
      acc = ccl_apply(acc, x, p);
    }}
    dst[i] = acc;
  }}
  ccl_ll_ack(areas, nranks, rank, seq, blk, tid);
}}
"#
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::minifloat;

    #[test]
    fn source_is_deterministic_and_names_every_kernel() {
        let mut names = std::collections::HashSet::new();
        for dt in DataType::ALL {
            for op in KernelOp::ALL {
                let a = kernel_source(dt, op);
                let b = kernel_source(dt, op);
                assert_eq!(a, b);
                let name = kernel_name(dt, op);
                assert!(
                    a.contains(&format!("extern \"C\" __global__ void {name}(")),
                    "{name}"
                );
                assert!(!a.contains("#include"), "{name}");
                assert!(names.insert(name));
                // Braces balance (a cheap syntax sanity check of the generator).
                let open = a.matches('{').count();
                let close = a.matches('}').count();
                assert_eq!(open, close, "{dt:?} {op:?}");
            }
        }
        assert_eq!(names.len(), 12 * 7);
        assert_eq!(
            kernel_name(DataType::Bfloat16, KernelOp::reduce(ReduceKind::Sum)),
            "ccl_reduce_sum_bf16"
        );
    }

    fn host_fmt(f: Format) -> minifloat::MiniFloat {
        match f.tag {
            "f16" => minifloat::F16,
            "bf16" => minifloat::BF16,
            "e4m3" => minifloat::E4M3,
            _ => minifloat::E5M2,
        }
    }

    /// The generated decoder, executed in Rust.
    fn emulate_decode(f: Format, h: u32) -> f32 {
        if f.same_range_as_f32() {
            return f32::from_bits(h << 16);
        }
        let sign = (h & f.sign_bit()) << (31 - f.e - f.m);
        let e = (h >> f.m) & f.exp_mask();
        let m = h & f.man_mask();
        let shift = 23 - f.m;
        if f.ieee && e == f.exp_mask() {
            return f32::from_bits(sign | 0x7f80_0000 | (m << shift));
        }
        if !f.ieee && e == f.exp_mask() && m == f.man_mask() {
            return f32::from_bits(0x7fff_ffff);
        }
        if e == 0 {
            return f32::from_bits(sign | (m as f32 * f32::from_bits(f.min_sub_bits())).to_bits());
        }
        f32::from_bits(sign | ((e + (127 - f.bias()) as u32) << 23) | (m << shift))
    }

    /// The generated encoder, executed in Rust.
    fn emulate_encode(f: Format, x: f32) -> u32 {
        let u = x.to_bits();
        let sign = (u >> 31) << (f.e + f.m);
        let a = u & 0x7fff_ffff;
        if a > 0x7f80_0000 {
            return f.nan_bits();
        }
        if a >= f.overflow_threshold_bits() {
            return sign | f.overflow_bits();
        }
        let shift = 23 - f.m;
        if !f.same_range_as_f32() && a < f.min_normal_bits() {
            let s = f32::from_bits(a) * f32::from_bits(f.sub_scale_bits());
            return sign | s.round_ties_even() as u32;
        }
        let r = (a + ((1 << (shift - 1)) - 1) + ((a >> shift) & 1)) >> shift;
        sign | (r - f.rebias())
    }

    #[test]
    fn decoder_matches_host_for_every_encoding() {
        for f in [F16, BF16, E4M3, E5M2] {
            let h = host_fmt(f);
            for bits in 0..(2 * f.sign_bit()) {
                let mine = f64::from(emulate_decode(f, bits));
                let host = h.decode(bits as u16);
                assert!(
                    mine.to_bits() == host.to_bits() || (mine.is_nan() && host.is_nan()),
                    "{} {bits:#x}: {mine} vs {host}",
                    f.tag
                );
            }
        }
    }

    #[test]
    fn encoder_matches_host_on_midpoints_and_a_sweep() {
        for f in [F16, BF16, E4M3, E5M2] {
            let h = host_fmt(f);
            let check = |x: f32| {
                let mine = emulate_encode(f, x);
                let host = u32::from(h.encode(f64::from(x)));
                assert_eq!(mine, host, "{} {x:e} ({:#x})", f.tag, x.to_bits());
            };
            // Every midpoint between neighbours, and the floats on either side of it.
            for lo in 0..f.max_finite_bits() + 1 {
                for sign in [0, f.sign_bit()] {
                    let a = f64::from(emulate_decode(f, lo | sign));
                    let b = f64::from(emulate_decode(f, (lo + 1) | sign));
                    if a.is_nan() || b.is_nan() {
                        continue;
                    }
                    let mid = ((a + b) / 2.0) as f32;
                    for x in [
                        mid,
                        f32::from_bits(mid.to_bits() + 1),
                        f32::from_bits(mid.to_bits().wrapping_sub(1)),
                        a as f32,
                    ] {
                        check(x);
                    }
                }
            }
            // A sweep over all f32 bit patterns.
            let mut bits = 0u32;
            while let Some(next) = bits.checked_add(65_521) {
                check(f32::from_bits(bits));
                bits = next;
            }
            for x in [
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                f32::MAX,
                f32::MIN_POSITIVE,
                f32::from_bits(1),
            ] {
                check(x);
            }
        }
    }

    #[test]
    fn format_constants() {
        assert_eq!(f32::from_bits(F16.overflow_threshold_bits()), 65520.0);
        assert_eq!(f32::from_bits(E4M3.overflow_threshold_bits()), 464.0);
        assert_eq!(f32::from_bits(E5M2.overflow_threshold_bits()), 61440.0);
        assert_eq!(BF16.overflow_threshold_bits(), 0x7f7f_8000);
        assert_eq!(E4M3.overflow_bits(), 0x7e);
        assert_eq!(E5M2.overflow_bits(), 0x7b);
        assert_eq!(F16.overflow_bits(), 0x7c00);
        assert_eq!(BF16.overflow_bits(), 0x7f80);
    }
}

#[cfg(test)]
mod dump {
    /// `CCL_DUMP_KERNELS=DIR cargo test -p ccl-cuda dump_sources` writes every kernel's
    /// source to DIR (for inspecting or compiling them offline).
    #[test]
    fn dump_sources() {
        let Some(dir) = std::env::var_os("CCL_DUMP_KERNELS") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for dt in crate::dtype::DataType::ALL {
            for op in super::KernelOp::ALL {
                let name = super::kernel_name(dt, op);
                std::fs::write(dir.join(format!("{name}.cu")), super::kernel_source(dt, op))
                    .unwrap();
            }
        }
    }
}
