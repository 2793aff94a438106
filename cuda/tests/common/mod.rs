//! The references the host-reduction tests compare against, written independently of the
//! library: integer arithmetic in 128 bits, float Max/Min by case analysis, narrow-float
//! rounding by nearest-neighbour search over every value of the format, and the buffers that
//! run each reduction six ways (disjoint, dst == a, dst == b; aligned and misaligned).

#![allow(dead_code)] // each test file uses its own part
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use ccl_cuda::host::reduce::reduce;
use ccl_cuda::{DataType, ReduceKind};

pub const OPS: [ReduceKind; 4] = [
    ReduceKind::Sum,
    ReduceKind::Prod,
    ReduceKind::Max,
    ReduceKind::Min,
];

// ---------------------------------------------------------------------------------------------
// Buffers with controlled alignment.

/// A byte buffer starting `offset` bytes past a 16-byte-aligned address.
pub struct Buf {
    pub storage: Vec<u128>,
    pub offset: usize,
    pub len: usize,
}

impl Buf {
    pub fn new(bytes: &[u8], offset: usize) -> Self {
        let mut buf = Buf {
            storage: vec![0u128; (bytes.len() + offset) / 16 + 2],
            offset,
            len: bytes.len(),
        };
        let p = buf.ptr();
        // SAFETY: the storage holds at least offset + len bytes and does not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        buf
    }

    pub fn ptr(&mut self) -> *mut u8 {
        // SAFETY: offset is inside the storage.
        unsafe { (self.storage.as_mut_ptr() as *mut u8).add(self.offset) }
    }

    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: offset + len bytes are inside the storage.
        unsafe {
            std::slice::from_raw_parts(
                (self.storage.as_ptr() as *const u8).add(self.offset),
                self.len,
            )
            .to_vec()
        }
    }
}

/// `reduce` run six ways (disjoint, dst == a, dst == b; each aligned and misaligned by one
/// byte); panics unless they agree byte for byte. Returns the result.
pub fn reduce_all_ways(dt: DataType, op: ReduceKind, a: &[u8], b: &[u8]) -> Vec<u8> {
    assert_eq!(a.len(), b.len());
    let n = a.len() / dt.size();
    let mut results = Vec::new();
    for offset in [0, 1] {
        // Disjoint.
        let (mut ba, mut bb, mut bd) = (
            Buf::new(a, offset),
            Buf::new(b, offset),
            Buf::new(&vec![0xa5; a.len()], offset),
        );
        // SAFETY: each buffer holds `n` elements of `dt`; dst is a fresh buffer or exactly a/b.
        unsafe { reduce(dt, op, bd.ptr(), ba.ptr(), bb.ptr(), n) };
        results.push(("disjoint", offset, bd.bytes()));
        // dst == a.
        let p = ba.ptr();
        // SAFETY: each buffer holds `n` elements of `dt`; dst is a fresh buffer or exactly a/b.
        unsafe { reduce(dt, op, p, p, bb.ptr(), n) };
        results.push(("dst==a", offset, ba.bytes()));
        // dst == b.
        let mut ba = Buf::new(a, offset);
        let p = bb.ptr();
        // SAFETY: each buffer holds `n` elements of `dt`; dst is a fresh buffer or exactly a/b.
        unsafe { reduce(dt, op, p, ba.ptr(), p, n) };
        results.push(("dst==b", offset, bb.bytes()));
    }
    let first = results[0].2.clone();
    for (how, offset, r) in &results {
        assert_eq!(&first, r, "{dt:?} {op:?}: {how} at offset {offset} differs");
    }
    first
}

/// Every ordered pair of `values` (each `size` bytes) laid out as two arrays.
pub fn all_pairs(values: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for x in values {
        for y in values {
            a.extend_from_slice(x);
            b.extend_from_slice(y);
        }
    }
    (a, b)
}

/// A small deterministic generator so failures reproduce.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
}

// ---------------------------------------------------------------------------------------------
// Integers.

pub fn int_info(dt: DataType) -> (usize, bool) {
    match dt {
        DataType::Int8 => (1, true),
        DataType::Uint8 => (1, false),
        DataType::Int32 => (4, true),
        DataType::Uint32 => (4, false),
        DataType::Int64 => (8, true),
        DataType::Uint64 => (8, false),
        _ => unreachable!(),
    }
}

pub fn int_from_bytes(dt: DataType, bytes: &[u8]) -> i128 {
    let (size, signed) = int_info(dt);
    let mut v: u128 = 0;
    for (i, &byte) in bytes[..size].iter().enumerate() {
        v |= u128::from(byte) << (8 * i);
    }
    let bits = 8 * size as u32;
    if signed && v >> (bits - 1) & 1 == 1 {
        (v as i128) - (1i128 << bits)
    } else {
        v as i128
    }
}

pub fn int_to_bytes(dt: DataType, v: i128) -> Vec<u8> {
    let (size, _) = int_info(dt);
    v.to_le_bytes()[..size].to_vec()
}

pub fn int_reference(dt: DataType, op: ReduceKind, x: i128, y: i128) -> Vec<u8> {
    let r = match op {
        ReduceKind::Sum => x.wrapping_add(y),
        ReduceKind::Prod => (x as u128).wrapping_mul(y as u128) as i128,
        ReduceKind::Max => x.max(y),
        ReduceKind::Min => x.min(y),
    };
    int_to_bytes(dt, r)
}

pub fn int_edge_values(dt: DataType) -> Vec<Vec<u8>> {
    let (size, signed) = int_info(dt);
    let bits = 8 * size as u32;
    let (min, max): (i128, i128) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    let mut vals = vec![
        0,
        1,
        2,
        3,
        7,
        min,
        min + 1,
        max,
        max - 1,
        max / 2,
        max / 2 + 1,
    ];
    if signed {
        vals.extend([-1, -2, -3, -7, min / 2]);
    }
    let mut rng = Lcg(size as u64 * 31 + u64::from(signed));
    for _ in 0..8 {
        vals.push(int_from_bytes(dt, &rng.next().to_le_bytes()));
    }
    vals.into_iter().map(|v| int_to_bytes(dt, v)).collect()
}

// ---------------------------------------------------------------------------------------------
// f32 / f64.

/// CUDA fmax/fmin on f64 values: NaN loses, +0 beats -0 for max and loses for min.
pub fn minmax_reference(op: ReduceKind, x: f64, y: f64) -> f64 {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => f64::NAN,
        (true, false) => y,
        (false, true) => x,
        (false, false) => {
            if x == 0.0 && y == 0.0 {
                let both_negative = x.is_sign_negative() && y.is_sign_negative();
                let any_negative = x.is_sign_negative() || y.is_sign_negative();
                let negative = if op == ReduceKind::Max {
                    both_negative
                } else {
                    any_negative
                };
                if negative {
                    -0.0
                } else {
                    0.0
                }
            } else if (op == ReduceKind::Max) == (x > y) {
                x
            } else {
                y
            }
        }
    }
}

pub fn f32_edge_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        -2.5,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7fc0_0001),
        f32::from_bits(0xffc0_0000),
        1.0 + f32::EPSILON,
        16_777_216.0,
        1e-30,
        1e38,
    ];
    let mut rng = Lcg(32);
    for _ in 0..6 {
        v.push(f32::from_bits(rng.next() as u32));
    }
    v
}

pub fn f64_edge_values() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        3.0,
        -2.5,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        f64::from_bits(1),
        -f64::from_bits(1),
        f64::MAX,
        f64::MIN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::from_bits(0xfff8_0000_0000_0001),
        1.0 + f64::EPSILON,
        9_007_199_254_740_992.0,
        1e-300,
        1e300,
    ];
    let mut rng = Lcg(64);
    for _ in 0..6 {
        v.push(f64::from_bits(rng.next()));
    }
    v
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16 / fp8 against a nearest-neighbour reference.

/// Every finite non-negative value of a narrow format with its encoding, ascending, plus what
/// the format does past its largest value.
pub struct Format {
    pub dt: DataType,
    pub positives: Vec<(f64, u16)>,
    pub sign_bit: u16,
    pub nan_bits: u16,
    /// `Some(inf encoding)` for IEEE overflow; `None` for fp8, which saturates.
    pub inf_bits: Option<u16>,
}

/// fp8 values by the OCP spec's formula, written independently of the library's codec.
pub fn fp8_value(bits: u8, exp_bits: u32, man_bits: u32, ieee: bool) -> f64 {
    let bias = (1 << (exp_bits - 1)) - 1;
    let e = i32::from(bits >> man_bits) & ((1 << exp_bits) - 1);
    let m = f64::from(bits & ((1 << man_bits) - 1));
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let all_ones_exp = e == (1 << exp_bits) - 1;
    if ieee && all_ones_exp {
        return if m == 0.0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if !ieee && all_ones_exp && m == f64::from((1u8 << man_bits) - 1) {
        return f64::NAN;
    }
    let frac = m / f64::from(1u32 << man_bits);
    if e == 0 {
        sign * frac * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + frac) * 2f64.powi(e - bias)
    }
}

pub fn decode_ref(dt: DataType, bits: u16) -> f64 {
    match dt {
        DataType::Float16 => half::f16::from_bits(bits).to_f64(),
        DataType::Bfloat16 => half::bf16::from_bits(bits).to_f64(),
        DataType::Float8E4M3 => fp8_value(bits as u8, 4, 3, false),
        DataType::Float8E5M2 => fp8_value(bits as u8, 5, 2, true),
        _ => unreachable!(),
    }
}

impl Format {
    pub fn new(dt: DataType) -> Self {
        let (sign_bit, inf_bits) = match dt {
            DataType::Float16 => (0x8000, Some(0x7c00)),
            DataType::Bfloat16 => (0x8000, Some(0x7f80)),
            DataType::Float8E4M3 | DataType::Float8E5M2 => (0x80, None),
            _ => unreachable!(),
        };
        let mut positives: Vec<(f64, u16)> = (0..sign_bit)
            .map(|b| (decode_ref(dt, b), b))
            .filter(|(v, _)| v.is_finite())
            .collect();
        positives.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
        Format {
            dt,
            positives,
            sign_bit,
            nan_bits: sign_bit - 1,
            inf_bits,
        }
    }

    pub fn decode(&self, bits: u16) -> f64 {
        decode_ref(self.dt, bits)
    }

    /// The encoding nearest to `x`: ties to the even encoding, IEEE overflow from
    /// max + half an ulp, fp8 saturation.
    pub fn nearest(&self, x: f64) -> u16 {
        if x.is_nan() {
            return self.nan_bits;
        }
        let sign = if x.is_sign_negative() {
            self.sign_bit
        } else {
            0
        };
        let a = x.abs();
        let (max, max_bits) = *self.positives.last().unwrap();
        let magnitude = if a > max {
            match self.inf_bits {
                None => max_bits,
                Some(inf) => {
                    let ulp = max - self.positives[self.positives.len() - 2].0;
                    if a >= max + ulp / 2.0 {
                        inf
                    } else {
                        max_bits
                    }
                }
            }
        } else {
            let idx = self.positives.partition_point(|(v, _)| *v <= a);
            let (lo, lo_bits) = self.positives[idx - 1];
            if lo == a {
                lo_bits
            } else {
                let (hi, hi_bits) = self.positives[idx];
                let (dlo, dhi) = (a - lo, hi - a);
                if dlo < dhi || (dlo == dhi && lo_bits % 2 == 0) {
                    lo_bits
                } else {
                    hi_bits
                }
            }
        };
        sign | magnitude
    }

    pub fn reference(&self, op: ReduceKind, x: u16, y: u16) -> u16 {
        let (p, q) = (self.decode(x), self.decode(y));
        self.nearest(match op {
            ReduceKind::Sum => p + q,
            ReduceKind::Prod => p * q,
            _ => minmax_reference(op, p, q),
        })
    }

    pub fn to_bytes(&self, bits: u16) -> Vec<u8> {
        bits.to_le_bytes()[..self.dt.size()].to_vec()
    }

    pub fn bits_of(&self, bytes: &[u8]) -> u16 {
        if self.dt.size() == 1 {
            u16::from(bytes[0])
        } else {
            u16::from_le_bytes([bytes[0], bytes[1]])
        }
    }

    pub fn check_pairs(&self, xs: &[u16]) {
        let vals: Vec<Vec<u8>> = xs.iter().map(|&x| self.to_bytes(x)).collect();
        let (a, b) = all_pairs(&vals);
        let size = self.dt.size();
        for op in OPS {
            let got = reduce_all_ways(self.dt, op, &a, &b);
            for i in 0..a.len() / size {
                let x = self.bits_of(&a[i * size..]);
                let y = self.bits_of(&b[i * size..]);
                let r = self.bits_of(&got[i * size..]);
                let want = self.reference(op, x, y);
                assert_eq!(
                    r,
                    want,
                    "{:?} {op:?} {x:#x} ({}) {y:#x} ({}) -> got {r:#x} ({}) want {want:#x} ({})",
                    self.dt,
                    self.decode(x),
                    self.decode(y),
                    self.decode(r),
                    self.decode(want)
                );
            }
        }
    }
}

pub fn f16_edge_bits() -> Vec<u16> {
    let mut v = vec![
        0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x03ff, 0x83ff, 0x0400, 0x0401, 0x3c00,
        0x3c01, 0xbc00, 0x3800, 0x4000, 0x3555, 0x6800, 0x6801, 0x1400, 0x7bff, 0xfbff, 0x7bfe,
        0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x5bff, 0x0200, 0x2000, 0x5800,
    ];
    let mut rng = Lcg(16);
    for _ in 0..10 {
        v.push(rng.next() as u16);
    }
    v
}

pub fn bf16_edge_bits() -> Vec<u16> {
    let mut v = vec![
        0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x007f, 0x807f, 0x0080, 0x0081, 0x3f80,
        0x3f81, 0xbf80, 0x3f00, 0x4000, 0x3eab, 0x4b80, 0x4b81, 0x7f7f, 0xff7f, 0x7f7e, 0x7f80,
        0xff80, 0x7fc0, 0xffc1, 0x0040, 0x3380, 0x4380, 0x0100, 0x7f00,
    ];
    let mut rng = Lcg(17);
    for _ in 0..10 {
        v.push(rng.next() as u16);
    }
    v
}
