//! Element types and the arithmetic reductions understood by every backend.
//!
//! Values match `ncclDataType_t` so the C ABI converts with [`DataType::from_raw`].

use crate::minifloat::{BF16, E4M3, E5M2, F16};

/// An element type. Discriminants are `ncclDataType_t` values.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
    Float8E4M3 = 10,
    Float8E5M2 = 11,
}

impl DataType {
    /// Every type, in `ncclDataType_t` order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// The type for an `ncclDataType_t` value, `None` when out of range.
    pub fn from_raw(v: i32) -> Option<Self> {
        usize::try_from(v)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Floating-point types (Avg pre-multiplies by 1/n for these, post-divides otherwise).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8E4M3
                | DataType::Float8E5M2
        )
    }

    /// The name nccl-tests prints for this type.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8E4M3 => "f8e4m3",
            DataType::Float8E5M2 => "f8e5m2",
        }
    }
}

/// The elementwise arithmetic a reduction step applies. `Avg` and `PreMulSum` are built from
/// `Sum` plus a pre-multiplication or post-division (see `ccl_cuda::host::reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Prod,
    Max,
    Min,
}

/// The element of `dt` nearest to `v` (round to nearest even; fp8 saturates to the largest
/// finite value), as little-endian bytes in the first `dt.size()` bytes.
///
/// Integers: nearest integer (ties to even), clamped to the type's range; NaN gives 0.
/// Floating types: NaN gives the type's canonical NaN (positive, all payload bits set) except
/// for f64, which keeps `v`'s bits; an infinite `v` gives inf except for fp8,
/// which saturates.
pub fn from_f64(dt: DataType, v: f64) -> [u8; 8] {
    let mut out = [0u8; 8];
    let int = v.round_ties_even();
    // `as` from f64 to an integer saturates at the type's bounds and maps NaN to 0.
    let bytes: &[u8] = match dt {
        DataType::Int8 => &(int as i8).to_le_bytes(),
        DataType::Uint8 => &(int as u8).to_le_bytes(),
        DataType::Int32 => &(int as i32).to_le_bytes(),
        DataType::Uint32 => &(int as u32).to_le_bytes(),
        DataType::Int64 => &(int as i64).to_le_bytes(),
        DataType::Uint64 => &(int as u64).to_le_bytes(),
        DataType::Float32 => &canonical_f32(v as f32).to_le_bytes(),
        DataType::Float64 => &v.to_le_bytes(),
        DataType::Float16 => &F16.encode(v).to_le_bytes(),
        DataType::Bfloat16 => &BF16.encode(v).to_le_bytes(),
        DataType::Float8E4M3 => &[E4M3.encode(v) as u8],
        DataType::Float8E5M2 => &[E5M2.encode(v) as u8],
    };
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

/// The NaN NVIDIA GPUs produce for every single-precision operation with a NaN result.
pub const CANONICAL_NAN_F32: u32 = 0x7fff_ffff;

/// `x`, with any NaN replaced by [`CANONICAL_NAN_F32`], as the GPU's arithmetic gives it.
#[inline(always)]
pub fn canonical_f32(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(CANONICAL_NAN_F32)
    } else {
        x
    }
}
