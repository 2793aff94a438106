//! Host reductions for every element type.
//!
//! All functions work on raw pointers because the buffers are user memory that may alias:
//! `dst` may be the very same pointer as an input, never a partial overlap.
//!
//! The results match what NCCL computes on NVIDIA GPUs:
//! * integers wrap (two's complement) on Sum/Prod; Max/Min compare signed or unsigned;
//! * `f32`/`f64` use native IEEE arithmetic; Max/Min follow CUDA `fmaxf`/`fminf` (a NaN
//!   operand yields the other operand; `max(-0, +0) = +0`, `min(-0, +0) = -0`); `f32` NaN
//!   results are the canonical `0x7fffffff` that NVIDIA GPUs produce (payloads are not
//!   propagated), `f64` NaN results are the first NaN operand's, quieted (x86's scalar rule, fixed so that
//!   no operand order the compiler picks changes them);
//! * fp16, bf16 and fp8 compute each operation exactly in `f64` and round once to the type
//!   with round-to-nearest-even (what `__hadd`/`__hmul` do natively); fp8 results saturate to
//!   the largest finite value (CUDA `__NV_SATFINITE`, which NCCL's fp8 conversions use), so an
//!   e5m2 infinity becomes ±57344 after any operation; every NaN result is the canonical
//!   positive NaN of the type (0x7fff / 0x7f).
//!
//! Checked against NCCL 2.28.9 on two H200 GPUs (`cuda/gpu-check/`): Sum, Prod, Max and Min
//! agreed bit for bit on every element for int8/uint8/int32/int64, f16, bf16, f32, f64 and
//! both fp8 types (all 65536 fp8 pairs, 263044 f16/bf16 pairs, edge values and random bits),
//! except f64 Max/Min of two NaNs, where the payload differs. Float Avg/PreMulSum fold with a
//! fused multiply-add: see [`premul_add`].
//!
//! Sum of `f32`/`f64`/`i32`/`i64` (and the other native types) runs over typed slices so the
//! compiler vectorises it; the shared-memory allreduce spends its time here.

use std::mem::align_of;

use crate::dtype::{DataType, ReduceKind};
use crate::host::minifloat::{BF16, E4M3, E5M2, F16};
use ccl_collectives::dtype::canonical_f32;
pub use ccl_collectives::dtype::from_f64;
pub use ccl_collectives::task::premul_scalar;

/// `dst[i] = a[i] (op) b[i]` for `count` elements of `dt`.
///
/// # Safety
/// `a` and `b` are valid for `count` reads of `dt`, `dst` for `count` writes; `dst` is either
/// disjoint from an input or exactly equal to it.
pub unsafe fn reduce(
    dt: DataType,
    op: ReduceKind,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    if count == 0 {
        return;
    }
    // SAFETY: (all arms) the caller's contract is exactly the contract of `reduce_native` /
    // `reduce_mini` for the element type matching `dt`.
    unsafe {
        match dt {
            DataType::Int8 => reduce_native::<i8>(op, dst, a, b, count),
            DataType::Uint8 => reduce_native::<u8>(op, dst, a, b, count),
            DataType::Int32 => reduce_native::<i32>(op, dst, a, b, count),
            DataType::Uint32 => reduce_native::<u32>(op, dst, a, b, count),
            DataType::Int64 => reduce_native::<i64>(op, dst, a, b, count),
            DataType::Uint64 => reduce_native::<u64>(op, dst, a, b, count),
            DataType::Float32 => reduce_native::<f32>(op, dst, a, b, count),
            DataType::Float64 => reduce_native::<f64>(op, dst, a, b, count),
            DataType::Float16 => reduce_mini::<Half>(op, dst, a, b, count),
            DataType::Bfloat16 => reduce_mini::<Bf16>(op, dst, a, b, count),
            DataType::Float8E4M3 => reduce_mini::<Fp8E4M3>(op, dst, a, b, count),
            DataType::Float8E5M2 => reduce_mini::<Fp8E5M2>(op, dst, a, b, count),
        }
    }
}

/// `dst[i] = src[i] * scalar` where `scalar` points at one element of `dt` (PreMulSum, and Avg
/// on floating types with scalar 1/n).
///
/// The product is rounded once. To match NCCL bit for bit, use this for the first
/// contribution only and fold later ones in with [`premul_add`].
///
/// # Safety
/// As [`reduce`]; `scalar` is valid for one read of `dt`.
pub unsafe fn premul(dt: DataType, dst: *mut u8, src: *const u8, count: usize, scalar: *const u8) {
    if count == 0 {
        return;
    }
    // SAFETY: (all arms) `scalar` is valid for one read of `dt`, which is one `T` of the arm;
    // `read_unaligned` because the scalar is a user pointer. The buffer contract is the
    // caller's, passed on unchanged.
    unsafe {
        match dt {
            DataType::Int8 => premul_native::<i8>(dst, src, count, scalar),
            DataType::Uint8 => premul_native::<u8>(dst, src, count, scalar),
            DataType::Int32 => premul_native::<i32>(dst, src, count, scalar),
            DataType::Uint32 => premul_native::<u32>(dst, src, count, scalar),
            DataType::Int64 => premul_native::<i64>(dst, src, count, scalar),
            DataType::Uint64 => premul_native::<u64>(dst, src, count, scalar),
            DataType::Float32 => premul_native::<f32>(dst, src, count, scalar),
            DataType::Float64 => premul_native::<f64>(dst, src, count, scalar),
            DataType::Float16 => premul_mini::<Half>(dst, src, count, scalar),
            DataType::Bfloat16 => premul_mini::<Bf16>(dst, src, count, scalar),
            DataType::Float8E4M3 => premul_mini::<Fp8E4M3>(dst, src, count, scalar),
            DataType::Float8E5M2 => premul_mini::<Fp8E5M2>(dst, src, count, scalar),
        }
    }
}

/// `dst[i] = src[i] * scalar + acc[i]` with a single rounding (a fused multiply-add); `scalar`
/// points at one element of `dt`.
///
/// This is how NCCL's PreMulSum and floating-point Avg kernels fold a fresh input into a
/// partial sum that is already pre-multiplied: on two H200s with NCCL 2.28 the results were
/// `fma(x, s, round(y * s))`, not `round(x * s) + round(y * s)`, for f16, bf16, f32 and f64.
/// A schedule that applies [`premul`] to the first contribution and `premul_add` to every
/// later one reproduces NCCL bit for bit when it combines contributions in NCCL's order.
/// Integers wrap; fp8 saturates; f32 NaN results are canonical as in [`reduce`]. For fp8 the
/// match with NCCL is not complete: NCCL's fp8 Avg agreed with this model on all but 10 of
/// 131072 element pairs, which it rounded as `round(x*s) + round(y*s)` instead.
///
/// # Safety
/// `src` and `acc` are valid for `count` reads of `dt`, `dst` for `count` writes; `dst` is
/// either disjoint from an input or exactly equal to it; `scalar` is valid for one read.
pub unsafe fn premul_add(
    dt: DataType,
    dst: *mut u8,
    src: *const u8,
    acc: *const u8,
    count: usize,
    scalar: *const u8,
) {
    if count == 0 {
        return;
    }
    // SAFETY: (all arms) the caller's contract for the arm's element type, passed on.
    unsafe {
        match dt {
            DataType::Int8 => premul_add_native::<i8>(dst, src, acc, count, scalar),
            DataType::Uint8 => premul_add_native::<u8>(dst, src, acc, count, scalar),
            DataType::Int32 => premul_add_native::<i32>(dst, src, acc, count, scalar),
            DataType::Uint32 => premul_add_native::<u32>(dst, src, acc, count, scalar),
            DataType::Int64 => premul_add_native::<i64>(dst, src, acc, count, scalar),
            DataType::Uint64 => premul_add_native::<u64>(dst, src, acc, count, scalar),
            DataType::Float32 => premul_add_native::<f32>(dst, src, acc, count, scalar),
            DataType::Float64 => premul_add_native::<f64>(dst, src, acc, count, scalar),
            DataType::Float16 => premul_add_mini::<Half>(dst, src, acc, count, scalar),
            DataType::Bfloat16 => premul_add_mini::<Bf16>(dst, src, acc, count, scalar),
            DataType::Float8E4M3 => premul_add_mini::<Fp8E4M3>(dst, src, acc, count, scalar),
            DataType::Float8E5M2 => premul_add_mini::<Fp8E5M2>(dst, src, acc, count, scalar),
        }
    }
}

/// `dst[i] = dst[i] / n` with integer division truncating toward zero (Avg on integer types).
///
/// Signed types divide as signed (`-7 / 2 = -3`). Floating types, which NCCL averages by
/// pre-multiplying instead, are divided with one rounding so a stray call still averages.
/// `n == 0` leaves `dst` unchanged rather than faulting: there is no result to give.
///
/// # Safety
/// `dst` is valid for `count` reads and writes of `dt`.
pub unsafe fn div_int(dt: DataType, dst: *mut u8, count: usize, n: u64) {
    if count == 0 || n == 0 {
        return;
    }
    // A divisor beyond the signed range exceeds every magnitude except i64::MIN's, which
    // only n == 2^63 divides (to -1); i128 covers both without a special case.
    let signed_divisor = i128::from(n);
    let src = dst as *const u8;
    // SAFETY: (all arms) `dst` is valid for `count` reads and writes of the arm's `T`, and
    // `map_elems` with `src == dst` is the in-place case it supports.
    unsafe {
        match dt {
            DataType::Int8 => {
                map_elems::<i8>(dst, src, count, |x| (i128::from(x) / signed_divisor) as i8)
            }
            DataType::Uint8 => map_elems::<u8>(dst, src, count, |x| (u64::from(x) / n) as u8),
            DataType::Int32 => {
                if let Ok(d) = i32::try_from(n) {
                    map_elems::<i32>(dst, src, count, |x| x / d);
                } else {
                    // |x| <= 2^31 <= n: every quotient truncates to zero except i32::MIN / 2^31.
                    map_elems::<i32>(dst, src, count, |x| (i128::from(x) / signed_divisor) as i32);
                }
            }
            DataType::Uint32 => map_elems::<u32>(dst, src, count, |x| (u64::from(x) / n) as u32),
            DataType::Int64 => {
                if let Ok(d) = i64::try_from(n) {
                    // d >= 1, so i64::MIN / d cannot overflow.
                    map_elems::<i64>(dst, src, count, |x| x / d);
                } else {
                    map_elems::<i64>(dst, src, count, |x| (i128::from(x) / signed_divisor) as i64);
                }
            }
            DataType::Uint64 => map_elems::<u64>(dst, src, count, |x| x / n),
            DataType::Float32 => {
                let d = n as f64;
                map_elems::<f32>(dst, src, count, |x| (f64::from(x) / d) as f32);
            }
            DataType::Float64 => {
                let d = n as f64;
                map_elems::<f64>(dst, src, count, |x| x / d);
            }
            DataType::Float16 => div_mini::<Half>(dst, count, n),
            DataType::Bfloat16 => div_mini::<Bf16>(dst, count, n),
            DataType::Float8E4M3 => div_mini::<Fp8E4M3>(dst, count, n),
            DataType::Float8E5M2 => div_mini::<Fp8E5M2>(dst, count, n),
        }
    }
}

/// The value of the element of `dt` held in the first `dt.size()` bytes of `bytes`.
///
/// Returns NaN when `bytes` is shorter than one element. 64-bit integers beyond 2^53 round
/// to the nearest `f64`.
pub fn to_f64(dt: DataType, bytes: &[u8]) -> f64 {
    let Some(raw) = bytes.get(..dt.size()) else {
        return f64::NAN;
    };
    let mut b = [0u8; 8];
    b[..raw.len()].copy_from_slice(raw);
    let [b0, b1, b2, b3, ..] = b;
    let b2x = [b0, b1];
    let b4x = [b0, b1, b2, b3];
    match dt {
        DataType::Int8 => f64::from(b0 as i8),
        DataType::Uint8 => f64::from(b0),
        DataType::Int32 => f64::from(i32::from_le_bytes(b4x)),
        DataType::Uint32 => f64::from(u32::from_le_bytes(b4x)),
        DataType::Int64 => i64::from_le_bytes(b) as f64,
        DataType::Uint64 => u64::from_le_bytes(b) as f64,
        DataType::Float32 => f64::from(f32::from_le_bytes(b4x)),
        DataType::Float64 => f64::from_le_bytes(b),
        DataType::Float16 => F16.decode(u16::from_le_bytes(b2x)),
        DataType::Bfloat16 => BF16.decode(u16::from_le_bytes(b2x)),
        DataType::Float8E4M3 => E4M3.decode(u16::from(b0)),
        DataType::Float8E5M2 => E5M2.decode(u16::from(b0)),
    }
}

/// A type the host adds and multiplies natively.
trait NativeElem: Copy {
    fn sum(a: Self, b: Self) -> Self;
    fn prod(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    /// `x * s + acc` rounded once.
    fn mul_add(x: Self, s: Self, acc: Self) -> Self;
}

macro_rules! native_int {
    ($($t:ty),*) => {$(
        impl NativeElem for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
            #[inline(always)]
            fn mul_add(x: Self, s: Self, acc: Self) -> Self {
                x.wrapping_mul(s).wrapping_add(acc)
            }
        }
    )*};
}

native_int!(i8, u8, i32, u32, i64, u64);

// Max/Min spell out the zero-sign rule because Rust's `f32::max` leaves `max(-0, +0)`
// unspecified; for equal operands the sign bits are combined (AND for max, OR for min),
// which is a no-op unless they are zeros of opposite sign.
impl NativeElem for f32 {
    #[inline(always)]
    fn sum(a: Self, b: Self) -> Self {
        canonical_f32(a + b)
    }
    #[inline(always)]
    fn prod(a: Self, b: Self) -> Self {
        canonical_f32(a * b)
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        if a > b || b.is_nan() {
            canonical_f32(a)
        } else if b > a || a.is_nan() {
            b
        } else {
            f32::from_bits(a.to_bits() & b.to_bits())
        }
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        if a < b || b.is_nan() {
            canonical_f32(a)
        } else if b < a || a.is_nan() {
            b
        } else {
            f32::from_bits(a.to_bits() | b.to_bits())
        }
    }
    #[inline(always)]
    fn mul_add(x: Self, s: Self, acc: Self) -> Self {
        // The product of two f32 is exact in f64, so only the sum needs care.
        canonical_f32(sum_round_to_odd(f64::from(x) * f64::from(s), f64::from(acc)) as f32)
    }
}

impl NativeElem for f64 {
    #[inline(always)]
    fn sum(a: Self, b: Self) -> Self {
        nan_of_first(a, b, a + b)
    }
    #[inline(always)]
    fn prod(a: Self, b: Self) -> Self {
        nan_of_first(a, b, a * b)
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        fmax_f64(a, b)
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        fmin_f64(a, b)
    }
    #[inline(always)]
    fn mul_add(x: Self, s: Self, acc: Self) -> Self {
        // libm's fma: correctly rounded (a hardware FMA where the CPU has one).
        x.mul_add(s, acc)
    }
}

/// `p + q` in round-to-odd: the exact sum if representable, otherwise whichever of its two
/// f64 neighbours has an odd last mantissa bit. Rounding that result once more to nearest
/// even at 2 or more bits less precision (f32, f16, bf16, fp8 all have at most 24) gives the
/// correctly rounded exact sum, which plain `p + q` followed by a second rounding does not:
/// the first rounding can land exactly on a midpoint of the narrow format.
#[inline(always)]
fn sum_round_to_odd(p: f64, q: f64) -> f64 {
    let sum = p + q;
    if !sum.is_finite() {
        return sum;
    }
    // Knuth's TwoSum: `err` is exactly (p + q) - sum.
    let q_part = sum - p;
    let err = (p - (sum - q_part)) + (q - q_part);
    if err == 0.0 || sum.to_bits() & 1 == 1 {
        return sum;
    }
    // An inexact sum is never zero (tiny sums are exact), so `sum` has a sign; step its
    // magnitude one ulp toward the exact value, which lands on the odd neighbour.
    let toward_larger_magnitude = (err > 0.0) == (sum > 0.0);
    let bits = sum.to_bits();
    f64::from_bits(if toward_larger_magnitude {
        bits + 1
    } else {
        bits - 1
    })
}

/// `r` (= `a` op `b`), except that a NaN result is `a`'s NaN (quieted) when `a` is one, else
/// `b`'s: what x86's scalar `addsd`/`mulsd` give, made explicit because the compiler may
/// swap the operands of a commutative operation (it did, in release builds, once `dst` was
/// the same buffer as `a`), and then in-place and out-of-place reductions disagreed on the
/// payload. A NaN from two numbers (inf - inf) stays the FPU's default NaN.
#[inline(always)]
fn nan_of_first(a: f64, b: f64, r: f64) -> f64 {
    const QUIET: u64 = 1 << 51;
    // Selects, no branches: the loop stays vectorised.
    let (a_nan, b_nan) = (a.is_nan(), b.is_nan());
    let operand = if a_nan { a } else { b };
    let nan = f64::from_bits(operand.to_bits() | QUIET);
    if a_nan | b_nan {
        nan
    } else {
        r
    }
}

/// CUDA `fmax` on doubles: NaN loses to a number, `+0` beats `-0`.
#[inline(always)]
fn fmax_f64(a: f64, b: f64) -> f64 {
    if a > b || b.is_nan() {
        a
    } else if b > a || a.is_nan() {
        b
    } else {
        f64::from_bits(a.to_bits() & b.to_bits())
    }
}

/// CUDA `fmin` on doubles: NaN loses to a number, `-0` beats `+0`.
#[inline(always)]
fn fmin_f64(a: f64, b: f64) -> f64 {
    if a < b || b.is_nan() {
        a
    } else if b < a || a.is_nan() {
        b
    } else {
        f64::from_bits(a.to_bits() | b.to_bits())
    }
}

/// # Safety
/// As [`reduce`], with `T` the element type of `dt`.
#[inline(always)]
unsafe fn reduce_native<T: NativeElem>(
    op: ReduceKind,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    // SAFETY: (all arms) the caller's contract for `T`, passed on.
    unsafe {
        match op {
            ReduceKind::Sum => zip_elems::<T>(dst, a, b, count, T::sum),
            ReduceKind::Prod => zip_elems::<T>(dst, a, b, count, T::prod),
            ReduceKind::Max => zip_elems::<T>(dst, a, b, count, T::max),
            ReduceKind::Min => zip_elems::<T>(dst, a, b, count, T::min),
        }
    }
}

/// A narrow float format as a type, so that each format's loop is compiled with its layout
/// as constants (a runtime `MiniFloat` value left every shift and mask unfolded).
trait MiniFormat {
    /// The storage of one element.
    type Bits: Copy;
    fn decode(bits: Self::Bits) -> f64;
    fn encode(v: f64) -> Self::Bits;
}

macro_rules! mini_format {
    ($name:ident, $bits:ty, $fmt:expr) => {
        struct $name;
        impl MiniFormat for $name {
            type Bits = $bits;
            #[inline(always)]
            fn decode(bits: $bits) -> f64 {
                $fmt.decode(u16::from(bits))
            }
            #[inline(always)]
            fn encode(v: f64) -> $bits {
                // Encodings of a format never exceed its storage width.
                $fmt.encode(v) as $bits
            }
        }
    };
}

mini_format!(Half, u16, F16);
mini_format!(Bf16, u16, BF16);
mini_format!(Fp8E4M3, u8, E4M3);
mini_format!(Fp8E5M2, u8, E5M2);

// Each operation is a named `#[inline(always)]` function rather than a closure: LLVM kept the
// closures out of line, a call per element.

#[inline(always)]
fn mini_sum<M: MiniFormat>(x: M::Bits, y: M::Bits) -> M::Bits {
    M::encode(M::decode(x) + M::decode(y))
}

#[inline(always)]
fn mini_prod<M: MiniFormat>(x: M::Bits, y: M::Bits) -> M::Bits {
    M::encode(M::decode(x) * M::decode(y))
}

#[inline(always)]
fn mini_max<M: MiniFormat>(x: M::Bits, y: M::Bits) -> M::Bits {
    M::encode(fmax_f64(M::decode(x), M::decode(y)))
}

#[inline(always)]
fn mini_min<M: MiniFormat>(x: M::Bits, y: M::Bits) -> M::Bits {
    M::encode(fmin_f64(M::decode(x), M::decode(y)))
}

/// # Safety
/// As [`reduce`], with `M` the format of `dt`.
#[inline(always)]
unsafe fn reduce_mini<M: MiniFormat>(
    op: ReduceKind,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    // SAFETY: (all arms) the caller's contract for `M::Bits`, passed on.
    unsafe {
        match op {
            ReduceKind::Sum => zip_elems(dst, a, b, count, mini_sum::<M>),
            ReduceKind::Prod => zip_elems(dst, a, b, count, mini_prod::<M>),
            ReduceKind::Max => zip_elems(dst, a, b, count, mini_max::<M>),
            ReduceKind::Min => zip_elems(dst, a, b, count, mini_min::<M>),
        }
    }
}

/// # Safety
/// As [`premul`], with `M` the format of `dt`.
unsafe fn premul_mini<M: MiniFormat>(
    dst: *mut u8,
    src: *const u8,
    count: usize,
    scalar: *const u8,
) {
    // SAFETY: `scalar` is valid for one (possibly unaligned) element; the buffers follow the
    // caller's contract.
    unsafe {
        let s = M::decode((scalar as *const M::Bits).read_unaligned());
        map_elems::<M::Bits>(dst, src, count, move |x| M::encode(M::decode(x) * s));
    }
}

/// # Safety
/// `dst` is valid for `count` reads and writes of `M::Bits`.
unsafe fn div_mini<M: MiniFormat>(dst: *mut u8, count: usize, n: u64) {
    let d = n as f64;
    // SAFETY: in place over memory the caller vouches for.
    unsafe { map_elems::<M::Bits>(dst, dst, count, |x| M::encode(M::decode(x) / d)) };
}

/// # Safety
/// As [`premul`], with `T` the element type.
unsafe fn premul_native<T: NativeElem>(
    dst: *mut u8,
    src: *const u8,
    count: usize,
    scalar: *const u8,
) {
    // SAFETY: `scalar` is valid for one (possibly unaligned) read of `T`; the buffers follow
    // the caller's contract.
    unsafe {
        let s = (scalar as *const T).read_unaligned();
        map_elems::<T>(dst, src, count, move |x| T::prod(x, s));
    }
}

/// # Safety
/// As [`premul_add`], with `T` the element type.
unsafe fn premul_add_native<T: NativeElem>(
    dst: *mut u8,
    src: *const u8,
    acc: *const u8,
    count: usize,
    scalar: *const u8,
) {
    // SAFETY: `scalar` is valid for one (possibly unaligned) read of `T`; the buffers follow
    // the caller's contract, which is `zip_elems`'s.
    unsafe {
        let s = (scalar as *const T).read_unaligned();
        zip_elems::<T>(dst, src, acc, count, move |x, a| T::mul_add(x, s, a));
    }
}

/// # Safety
/// As [`premul_add`], with `M` the format of `dt`.
unsafe fn premul_add_mini<M: MiniFormat>(
    dst: *mut u8,
    src: *const u8,
    acc: *const u8,
    count: usize,
    scalar: *const u8,
) {
    // SAFETY: as `premul_add_native`.
    unsafe {
        let s = M::decode((scalar as *const M::Bits).read_unaligned());
        // Products of two narrow values are exact in f64; the sum is rounded to odd so that
        // the one rounding to the format is correct.
        zip_elems::<M::Bits>(dst, src, acc, count, move |x, a| {
            M::encode(sum_round_to_odd(M::decode(x) * s, M::decode(a)))
        });
    }
}

fn is_aligned<T>(p: *const u8) -> bool {
    (p as usize) % align_of::<T>() == 0
}

/// `dst[i] = f(a[i], b[i])`.
///
/// When all pointers are aligned for `T` the loop runs over slices, which is what lets the
/// compiler vectorise it; the in-place cases build exactly one `&mut` slice (over `dst`) and a
/// shared slice over the other input only, so no shared and mutable borrow cover the same
/// memory. Misaligned buffers take an element-by-element unaligned path.
///
/// # Safety
/// `a` and `b` are valid for `count` reads of `T`, `dst` for `count` writes; `dst` is disjoint
/// from each input or exactly equal to it. `T` is a plain number type (every bit pattern is a
/// valid value).
#[inline(always)]
unsafe fn zip_elems<T: Copy>(
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
    f: impl Fn(T, T) -> T,
) {
    if !(is_aligned::<T>(dst) && is_aligned::<T>(a) && is_aligned::<T>(b)) {
        for i in 0..count {
            // SAFETY: i < count, so each access is inside the caller-vouched ranges; the
            // unaligned forms make no alignment assumption. Element i of the inputs is read
            // before element i of dst is written, so exact aliasing is harmless.
            unsafe {
                let x = (a as *const T).add(i).read_unaligned();
                let y = (b as *const T).add(i).read_unaligned();
                (dst as *mut T).add(i).write_unaligned(f(x, y));
            }
        }
        return;
    }
    let (d, pa, pb) = (dst as *mut T, a as *const T, b as *const T);
    let dst_is_a = std::ptr::eq(d, pa);
    let dst_is_b = std::ptr::eq(d, pb);
    // SAFETY: (all branches) the pointers are aligned and valid for `count` elements. In each
    // branch the only mutable slice is over `dst`, and every shared slice is over an input
    // that, by the caller's contract, is disjoint from `dst` in that branch (an input equal to
    // `dst` is read through the mutable slice instead).
    unsafe {
        if dst_is_a && dst_is_b {
            let out = std::slice::from_raw_parts_mut(d, count);
            for x in out.iter_mut() {
                *x = f(*x, *x);
            }
        } else if dst_is_a {
            let out = std::slice::from_raw_parts_mut(d, count);
            let ys = std::slice::from_raw_parts(pb, count);
            for (x, &y) in out.iter_mut().zip(ys) {
                *x = f(*x, y);
            }
        } else if dst_is_b {
            let out = std::slice::from_raw_parts_mut(d, count);
            let xs = std::slice::from_raw_parts(pa, count);
            for (y, &x) in out.iter_mut().zip(xs) {
                *y = f(x, *y);
            }
        } else {
            let out = std::slice::from_raw_parts_mut(d, count);
            let xs = std::slice::from_raw_parts(pa, count);
            let ys = std::slice::from_raw_parts(pb, count);
            for ((o, &x), &y) in out.iter_mut().zip(xs).zip(ys) {
                *o = f(x, y);
            }
        }
    }
}

/// `dst[i] = f(src[i])`; `dst` may equal `src`. Same structure as [`zip_elems`].
///
/// # Safety
/// `src` is valid for `count` reads of `T`, `dst` for `count` writes; they are disjoint or
/// equal. `T` is a plain number type.
#[inline(always)]
unsafe fn map_elems<T: Copy>(dst: *mut u8, src: *const u8, count: usize, f: impl Fn(T) -> T) {
    if !(is_aligned::<T>(dst) && is_aligned::<T>(src)) {
        for i in 0..count {
            // SAFETY: i < count stays inside the vouched ranges; unaligned accesses; element
            // i is read before it is written.
            unsafe {
                let x = (src as *const T).add(i).read_unaligned();
                (dst as *mut T).add(i).write_unaligned(f(x));
            }
        }
        return;
    }
    let (d, s) = (dst as *mut T, src as *const T);
    // SAFETY: aligned and valid for `count` elements; when `dst == src` only the mutable
    // slice exists, otherwise the two ranges are disjoint by contract.
    unsafe {
        let out = std::slice::from_raw_parts_mut(d, count);
        if std::ptr::eq(d, s) {
            for x in out.iter_mut() {
                *x = f(*x);
            }
        } else {
            let xs = std::slice::from_raw_parts(s, count);
            for (o, &x) in out.iter_mut().zip(xs) {
                *o = f(x);
            }
        }
    }
}
