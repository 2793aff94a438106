//! Host reductions for every element type (INTERFACE PLACEHOLDER: being implemented).
//!
//! All functions work on raw pointers because the buffers are user memory that may alias:
//! `dst` may be the very same pointer as an input, never a partial overlap.

use crate::dtype::{DataType, ReduceKind};

/// `dst[i] = a[i] (op) b[i]` for `count` elements of `dt`.
///
/// # Safety
/// `a` and `b` are valid for `count` reads of `dt`, `dst` for `count` writes; `dst` is either
/// disjoint from an input or exactly equal to it.
pub unsafe fn reduce(
    _dt: DataType,
    _op: ReduceKind,
    _dst: *mut u8,
    _a: *const u8,
    _b: *const u8,
    _count: usize,
) {
}

/// `dst[i] = src[i] * scalar` where `scalar` points at one element of `dt` (PreMulSum, and Avg
/// on floating types with scalar 1/n).
///
/// # Safety
/// As [`reduce`]; `scalar` is valid for one read of `dt`.
pub unsafe fn premul(
    _dt: DataType,
    _dst: *mut u8,
    _src: *const u8,
    _count: usize,
    _scalar: *const u8,
) {
}

/// `dst[i] = dst[i] / n` with integer division truncating toward zero (Avg on integer types).
///
/// # Safety
/// `dst` is valid for `count` reads and writes of `dt`.
pub unsafe fn div_int(_dt: DataType, _dst: *mut u8, _count: usize, _n: u64) {}

/// The element of `dt` nearest to `v` (round to nearest even; fp8 saturates to the largest
/// finite value), as little-endian bytes in the first `dt.size()` bytes.
pub fn from_f64(_dt: DataType, _v: f64) -> [u8; 8] {
    [0; 8]
}

/// The value of the element of `dt` held in the first `dt.size()` bytes of `bytes`.
pub fn to_f64(_dt: DataType, _bytes: &[u8]) -> f64 {
    0.0
}
