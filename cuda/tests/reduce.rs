//! Host reductions checked against references written independently of the library: integer
//! arithmetic in 128 bits, float Max/Min by case analysis, and narrow-float rounding by
//! nearest-neighbour search over a table of every value of the format (decoded by the `half`
//! crate for fp16/bf16 and by the spec's formula for fp8).
//!
//! Every reduction is run six ways (disjoint, dst == a, dst == b; aligned, and every buffer
//! misaligned by one byte) and the six results must be byte-identical.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use ccl_cuda::host::reduce::{div_int, from_f64, premul, reduce, to_f64};
use ccl_cuda::{DataType, ReduceKind};

const OPS: [ReduceKind; 4] = [
    ReduceKind::Sum,
    ReduceKind::Prod,
    ReduceKind::Max,
    ReduceKind::Min,
];

// ---------------------------------------------------------------------------------------------
// Buffers with controlled alignment.

/// A byte buffer starting `offset` bytes past a 16-byte-aligned address.
struct Buf {
    storage: Vec<u128>,
    offset: usize,
    len: usize,
}

impl Buf {
    fn new(bytes: &[u8], offset: usize) -> Self {
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

    fn ptr(&mut self) -> *mut u8 {
        // SAFETY: offset is inside the storage.
        unsafe { (self.storage.as_mut_ptr() as *mut u8).add(self.offset) }
    }

    fn bytes(&self) -> Vec<u8> {
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
fn reduce_all_ways(dt: DataType, op: ReduceKind, a: &[u8], b: &[u8]) -> Vec<u8> {
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
fn all_pairs(values: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
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
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
}

// ---------------------------------------------------------------------------------------------
// Integers.

fn int_info(dt: DataType) -> (usize, bool) {
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

fn int_from_bytes(dt: DataType, bytes: &[u8]) -> i128 {
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

fn int_to_bytes(dt: DataType, v: i128) -> Vec<u8> {
    let (size, _) = int_info(dt);
    v.to_le_bytes()[..size].to_vec()
}

fn int_reference(dt: DataType, op: ReduceKind, x: i128, y: i128) -> Vec<u8> {
    let r = match op {
        ReduceKind::Sum => x.wrapping_add(y),
        ReduceKind::Prod => (x as u128).wrapping_mul(y as u128) as i128,
        ReduceKind::Max => x.max(y),
        ReduceKind::Min => x.min(y),
    };
    int_to_bytes(dt, r)
}

fn int_edge_values(dt: DataType) -> Vec<Vec<u8>> {
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

#[test]
fn integers_every_op_on_edge_values() {
    for dt in [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
    ] {
        let (a, b) = all_pairs(&int_edge_values(dt));
        let size = dt.size();
        for op in OPS {
            let got = reduce_all_ways(dt, op, &a, &b);
            for i in 0..a.len() / size {
                let x = int_from_bytes(dt, &a[i * size..]);
                let y = int_from_bytes(dt, &b[i * size..]);
                assert_eq!(
                    &got[i * size..(i + 1) * size],
                    &int_reference(dt, op, x, y)[..],
                    "{dt:?} {op:?} {x} {y}"
                );
            }
        }
    }
}

#[test]
fn integer_spot_values() {
    let one = |dt: DataType, op: ReduceKind, x: i128, y: i128| -> i128 {
        let got = reduce_all_ways(dt, op, &int_to_bytes(dt, x), &int_to_bytes(dt, y));
        int_from_bytes(dt, &got)
    };
    assert_eq!(one(DataType::Int8, ReduceKind::Sum, 127, 1), -128);
    assert_eq!(one(DataType::Uint8, ReduceKind::Sum, 255, 1), 0);
    assert_eq!(
        one(DataType::Int32, ReduceKind::Prod, i32::MIN.into(), -1),
        i32::MIN.into()
    );
    assert_eq!(one(DataType::Int32, ReduceKind::Max, -1, 1), 1);
    assert_eq!(
        one(DataType::Uint32, ReduceKind::Max, u32::MAX.into(), 1),
        u32::MAX.into()
    );
    assert_eq!(
        one(
            DataType::Int64,
            ReduceKind::Min,
            i64::MIN.into(),
            i64::MAX.into()
        ),
        i64::MIN.into()
    );
    assert_eq!(
        one(DataType::Uint64, ReduceKind::Min, u64::MAX.into(), 0),
        0
    );
    assert_eq!(one(DataType::Uint64, ReduceKind::Prod, 1 << 32, 1 << 32), 0);
    assert_eq!(
        one(
            DataType::Int64,
            ReduceKind::Sum,
            i64::MAX.into(),
            i64::MAX.into()
        ),
        -2
    );
}

// ---------------------------------------------------------------------------------------------
// f32 / f64.

/// CUDA fmax/fmin on f64 values: NaN loses, +0 beats -0 for max and loses for min.
fn minmax_reference(op: ReduceKind, x: f64, y: f64) -> f64 {
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

fn f32_edge_values() -> Vec<f32> {
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

fn f64_edge_values() -> Vec<f64> {
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

#[test]
fn f32_every_op_on_edge_values() {
    let vals: Vec<Vec<u8>> = f32_edge_values()
        .iter()
        .map(|v| v.to_le_bytes().to_vec())
        .collect();
    let (a, b) = all_pairs(&vals);
    for op in OPS {
        let got = reduce_all_ways(DataType::Float32, op, &a, &b);
        for i in 0..a.len() / 4 {
            let x = f32::from_le_bytes(a[i * 4..i * 4 + 4].try_into().unwrap());
            let y = f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
            let r = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
            let want = match op {
                ReduceKind::Sum => x + y,
                ReduceKind::Prod => x * y,
                _ => minmax_reference(op, x.into(), y.into()) as f32,
            };
            if want.is_nan() {
                assert_eq!(
                    r.to_bits(),
                    0x7fff_ffff,
                    "{op:?} {x} {y}: GPU canonical NaN"
                );
            } else {
                assert_eq!(r.to_bits(), want.to_bits(), "{op:?} {x:e} {y:e}");
            }
        }
    }
}

#[test]
fn f64_every_op_on_edge_values() {
    let vals: Vec<Vec<u8>> = f64_edge_values()
        .iter()
        .map(|v| v.to_le_bytes().to_vec())
        .collect();
    let (a, b) = all_pairs(&vals);
    for op in OPS {
        let got = reduce_all_ways(DataType::Float64, op, &a, &b);
        for i in 0..a.len() / 8 {
            let x = f64::from_le_bytes(a[i * 8..i * 8 + 8].try_into().unwrap());
            let y = f64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            let r = f64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            let want = match op {
                ReduceKind::Sum => x + y,
                ReduceKind::Prod => x * y,
                _ => minmax_reference(op, x, y),
            };
            if want.is_nan() {
                assert!(r.is_nan(), "{op:?} {x} {y}");
            } else {
                assert_eq!(r.to_bits(), want.to_bits(), "{op:?} {x:e} {y:e}");
            }
        }
    }
}

#[test]
fn float_spot_values() {
    let f32_op = |op: ReduceKind, x: f32, y: f32| -> f32 {
        let got = reduce_all_ways(DataType::Float32, op, &x.to_le_bytes(), &y.to_le_bytes());
        f32::from_le_bytes(got.try_into().unwrap())
    };
    assert_eq!(f32_op(ReduceKind::Max, f32::NAN, 2.0), 2.0);
    assert_eq!(f32_op(ReduceKind::Min, 2.0, f32::NAN), 2.0);
    assert_eq!(f32_op(ReduceKind::Max, -0.0, 0.0).to_bits(), 0);
    assert_eq!(f32_op(ReduceKind::Max, 0.0, -0.0).to_bits(), 0);
    assert_eq!(f32_op(ReduceKind::Min, 0.0, -0.0).to_bits(), 0x8000_0000);
    assert_eq!(f32_op(ReduceKind::Sum, -0.0, -0.0).to_bits(), 0x8000_0000);
    assert_eq!(f32_op(ReduceKind::Sum, -0.0, 0.0).to_bits(), 0);
    assert_eq!(
        f32_op(ReduceKind::Sum, f32::INFINITY, f32::NEG_INFINITY).to_bits(),
        0x7fff_ffff
    );
    assert_eq!(f32_op(ReduceKind::Sum, f32::MAX, f32::MAX), f32::INFINITY);
    assert_eq!(f32_op(ReduceKind::Sum, 16_777_216.0, 1.0), 16_777_216.0);
    assert_eq!(f32_op(ReduceKind::Sum, 16_777_218.0, 1.0), 16_777_220.0);
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16 / fp8 against a nearest-neighbour reference.

/// Every finite non-negative value of a narrow format with its encoding, ascending, plus what
/// the format does past its largest value.
struct Format {
    dt: DataType,
    positives: Vec<(f64, u16)>,
    sign_bit: u16,
    nan_bits: u16,
    /// `Some(inf encoding)` for IEEE overflow; `None` for fp8, which saturates.
    inf_bits: Option<u16>,
}

/// fp8 values by the OCP spec's formula, written independently of the library's codec.
fn fp8_value(bits: u8, exp_bits: u32, man_bits: u32, ieee: bool) -> f64 {
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

fn decode_ref(dt: DataType, bits: u16) -> f64 {
    match dt {
        DataType::Float16 => half::f16::from_bits(bits).to_f64(),
        DataType::Bfloat16 => half::bf16::from_bits(bits).to_f64(),
        DataType::Float8E4M3 => fp8_value(bits as u8, 4, 3, false),
        DataType::Float8E5M2 => fp8_value(bits as u8, 5, 2, true),
        _ => unreachable!(),
    }
}

impl Format {
    fn new(dt: DataType) -> Self {
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

    fn decode(&self, bits: u16) -> f64 {
        decode_ref(self.dt, bits)
    }

    /// The encoding nearest to `x`: ties to the even encoding, IEEE overflow from
    /// max + half an ulp, fp8 saturation.
    fn nearest(&self, x: f64) -> u16 {
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

    fn reference(&self, op: ReduceKind, x: u16, y: u16) -> u16 {
        let (p, q) = (self.decode(x), self.decode(y));
        self.nearest(match op {
            ReduceKind::Sum => p + q,
            ReduceKind::Prod => p * q,
            _ => minmax_reference(op, p, q),
        })
    }

    fn to_bytes(&self, bits: u16) -> Vec<u8> {
        bits.to_le_bytes()[..self.dt.size()].to_vec()
    }

    fn bits_of(&self, bytes: &[u8]) -> u16 {
        if self.dt.size() == 1 {
            u16::from(bytes[0])
        } else {
            u16::from_le_bytes([bytes[0], bytes[1]])
        }
    }

    fn check_pairs(&self, xs: &[u16]) {
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

#[test]
fn fp8_every_op_on_every_pair() {
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let all: Vec<u16> = (0..=255).collect();
        Format::new(dt).check_pairs(&all);
    }
}

fn f16_edge_bits() -> Vec<u16> {
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

fn bf16_edge_bits() -> Vec<u16> {
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

#[test]
fn f16_and_bf16_every_op_on_edge_pairs() {
    Format::new(DataType::Float16).check_pairs(&f16_edge_bits());
    Format::new(DataType::Bfloat16).check_pairs(&bf16_edge_bits());
}

#[test]
fn half_spot_values() {
    let f16_sum = |x: f64, y: f64| -> f64 {
        let (xa, yb) = (
            from_f64(DataType::Float16, x),
            from_f64(DataType::Float16, y),
        );
        let got = reduce_all_ways(DataType::Float16, ReduceKind::Sum, &xa[..2], &yb[..2]);
        to_f64(DataType::Float16, &got)
    };
    // 2048 + 1 is a tie between 2048 and 2050: even mantissa wins; 2050 + 1 goes up to 2052.
    assert_eq!(f16_sum(2048.0, 1.0), 2048.0);
    assert_eq!(f16_sum(2050.0, 1.0), 2052.0);
    // Past the largest finite value, max + half an ulp (65520) is the tie that goes to inf.
    assert_eq!(f16_sum(65504.0, 8.0), 65504.0);
    assert_eq!(f16_sum(65504.0, 16.0), f64::INFINITY);
    // Subnormal + subnormal is exact.
    let tiny = 2f64.powi(-24);
    assert_eq!(f16_sum(tiny, tiny), 2.0 * tiny);
    assert!(f16_sum(f64::INFINITY, f64::NEG_INFINITY).is_nan());
    let e5m2 = |op: ReduceKind, x: f64, y: f64| -> f64 {
        let (xa, yb) = (
            from_f64(DataType::Float8E5M2, x),
            from_f64(DataType::Float8E5M2, y),
        );
        to_f64(
            DataType::Float8E5M2,
            &reduce_all_ways(DataType::Float8E5M2, op, &xa[..1], &yb[..1]),
        )
    };
    assert_eq!(e5m2(ReduceKind::Sum, 57344.0, 57344.0), 57344.0);
    assert_eq!(e5m2(ReduceKind::Prod, -57344.0, 2.0), -57344.0);
    // An infinity in e5m2 goes through the saturating conversion like any result.
    let inf = [0x7c_u8];
    let one = [from_f64(DataType::Float8E5M2, 1.0)[0]];
    let got = reduce_all_ways(DataType::Float8E5M2, ReduceKind::Max, &inf, &one);
    assert_eq!(got, vec![0x7b]);
    let e4m3 = |op: ReduceKind, x: f64, y: f64| -> f64 {
        let (xa, yb) = (
            from_f64(DataType::Float8E4M3, x),
            from_f64(DataType::Float8E4M3, y),
        );
        to_f64(
            DataType::Float8E4M3,
            &reduce_all_ways(DataType::Float8E4M3, op, &xa[..1], &yb[..1]),
        )
    };
    assert_eq!(e4m3(ReduceKind::Sum, 448.0, 448.0), 448.0);
    assert_eq!(e4m3(ReduceKind::Sum, -448.0, -16.0), -448.0);
    // 1 + 1/16 ties between 1 and 1.125: stays 1; 1.125 + 1/16 goes up to 1.25.
    assert_eq!(e4m3(ReduceKind::Sum, 1.0, 0.0625), 1.0);
    assert_eq!(e4m3(ReduceKind::Sum, 1.125, 0.0625), 1.25);
    assert_eq!(e4m3(ReduceKind::Prod, 2f64.powi(-9), 0.5), 0.0);
    assert_eq!(e4m3(ReduceKind::Prod, 2f64.powi(-9), 0.75), 2f64.powi(-9));
}

// ---------------------------------------------------------------------------------------------
// Conversions.

#[test]
fn fp8_conversions_exhaustive() {
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let fmt = Format::new(dt);
        for bits in 0..=255u8 {
            let v = to_f64(dt, &[bits]);
            let want = fmt.decode(u16::from(bits));
            assert!(
                v == want || (v.is_nan() && want.is_nan()),
                "{dt:?} {bits:#x}"
            );
            assert_eq!(
                v.is_sign_negative(),
                bits & 0x80 != 0 || v.is_nan() && v.is_sign_negative()
            );
            let back = from_f64(dt, v)[0];
            if v.is_nan() {
                assert_eq!(back, 0x7f, "{dt:?} NaN is canonical");
            } else if v.is_infinite() {
                assert_eq!(
                    back,
                    if v > 0.0 { 0x7b } else { 0xfb },
                    "{dt:?} saturates inf"
                );
            } else {
                assert_eq!(back, bits, "{dt:?} {bits:#x} round-trips");
            }
        }
        // Every midpoint and near-midpoint between neighbours, both signs, against the
        // nearest-neighbour reference.
        for w in fmt.positives.windows(2) {
            let (lo, hi) = (w[0].0, w[1].0);
            for x in [
                (lo + hi) / 2.0,
                lo + (hi - lo) * 0.49,
                lo + (hi - lo) * 0.51,
            ] {
                for s in [x, -x] {
                    assert_eq!(u16::from(from_f64(dt, s)[0]), fmt.nearest(s), "{dt:?} {s}");
                }
            }
        }
        for x in [
            1e9,
            500.0,
            464.0,
            465.0,
            61440.0,
            1e-20,
            -1e-20,
            -0.0,
            f64::MAX,
        ] {
            assert_eq!(u16::from(from_f64(dt, x)[0]), fmt.nearest(x), "{dt:?} {x}");
        }
    }
    assert_eq!(from_f64(DataType::Float8E4M3, 1e9)[0], 0x7e);
    assert_eq!(from_f64(DataType::Float8E4M3, -1e9)[0], 0xfe);
    assert_eq!(from_f64(DataType::Float8E4M3, 464.0)[0], 0x7e);
    assert_eq!(from_f64(DataType::Float8E5M2, 1e9)[0], 0x7b);
    assert_eq!(from_f64(DataType::Float8E4M3, -0.0)[0], 0x80);
    assert_eq!(from_f64(DataType::Float8E4M3, 2f64.powi(-10))[0], 0x00);
    assert_eq!(
        from_f64(DataType::Float8E4M3, 2f64.powi(-10) * 1.01)[0],
        0x01
    );
    assert_eq!(from_f64(DataType::Float8E5M2, 2f64.powi(-17))[0], 0x00);
    assert_eq!(
        from_f64(DataType::Float8E5M2, 3.0 * 2f64.powi(-17))[0],
        0x02
    );
}

#[test]
fn half_and_bf16_conversions_match_nearest_reference() {
    for dt in [DataType::Float16, DataType::Bfloat16] {
        let fmt = Format::new(dt);
        for bits in 0..=u16::MAX {
            let v = to_f64(dt, &bits.to_le_bytes());
            let want = fmt.decode(bits);
            assert!(v == want || (v.is_nan() && want.is_nan()));
            let back = u16::from_le_bytes(from_f64(dt, v)[..2].try_into().unwrap());
            if v.is_nan() {
                assert_eq!(back, 0x7fff);
            } else {
                assert_eq!(back, bits);
            }
        }
        for w in fmt.positives.windows(2) {
            let (lo, hi) = (w[0].0, w[1].0);
            let mid = (lo + hi) / 2.0;
            for x in [mid, -mid, mid.next_up(), mid.next_down()] {
                let got = u16::from_le_bytes(from_f64(dt, x)[..2].try_into().unwrap());
                assert_eq!(got, fmt.nearest(x), "{dt:?} {x:e}");
            }
        }
    }
}

#[test]
fn integer_and_wide_float_conversions() {
    assert_eq!(from_f64(DataType::Int8, 300.0)[0], 127);
    assert_eq!(from_f64(DataType::Int8, -300.0)[0], 0x80);
    assert_eq!(from_f64(DataType::Int8, 2.5)[0], 2);
    assert_eq!(from_f64(DataType::Int8, 3.5)[0], 4);
    assert_eq!(from_f64(DataType::Int8, -2.5)[0] as i8, -2);
    assert_eq!(from_f64(DataType::Uint8, -1.0)[0], 0);
    assert_eq!(from_f64(DataType::Uint8, f64::NAN)[0], 0);
    assert_eq!(
        to_f64(DataType::Int32, &from_f64(DataType::Int32, -123456.0)),
        -123456.0
    );
    assert_eq!(
        to_f64(DataType::Uint32, &from_f64(DataType::Uint32, 4e9)),
        4e9
    );
    assert_eq!(from_f64(DataType::Int64, -1.0), [0xff; 8]);
    assert_eq!(from_f64(DataType::Uint64, 1e30), [0xff; 8]);
    assert_eq!(to_f64(DataType::Uint64, &[0xff; 8]), 18446744073709551615.0);
    assert_eq!(to_f64(DataType::Int64, &[0xff; 8]), -1.0);
    assert_eq!(
        to_f64(DataType::Float32, &from_f64(DataType::Float32, 0.1)),
        f64::from(0.1f32)
    );
    assert_eq!(
        &from_f64(DataType::Float32, f64::NAN)[..4],
        &0x7fff_ffffu32.to_le_bytes()
    );
    assert_eq!(
        to_f64(DataType::Float64, &from_f64(DataType::Float64, 0.1)),
        0.1
    );
    assert!(to_f64(DataType::Float64, &[0; 4]).is_nan(), "short input");
    for dt in DataType::ALL {
        assert_eq!(to_f64(dt, &from_f64(dt, 3.0)), 3.0, "{dt:?}");
        assert_eq!(to_f64(dt, &from_f64(dt, 0.0)), 0.0, "{dt:?}");
        assert!(
            from_f64(dt, 1.0)[dt.size()..].iter().all(|&b| b == 0),
            "{dt:?} padding"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// premul and div_int.

fn premul_all_ways(dt: DataType, src: &[u8], scalar: &[u8]) -> Vec<u8> {
    let n = src.len() / dt.size();
    let mut results = Vec::new();
    for offset in [0, 1] {
        let mut s = Buf::new(src, offset);
        let mut d = Buf::new(&vec![0x5a; src.len()], offset);
        let mut k = Buf::new(scalar, offset + 2);
        // SAFETY: buffers hold `n` elements; dst is disjoint from or equal to src; the scalar holds one element.
        unsafe { premul(dt, d.ptr(), s.ptr(), n, k.ptr()) };
        results.push(d.bytes());
        let p = s.ptr();
        // SAFETY: buffers hold `n` elements; dst is disjoint from or equal to src; the scalar holds one element.
        unsafe { premul(dt, p, p, n, k.ptr()) };
        results.push(s.bytes());
    }
    for r in &results {
        assert_eq!(r, &results[0], "{dt:?} premul ways differ");
    }
    results.swap_remove(0)
}

#[test]
fn premul_integers_wrap() {
    for dt in [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
    ] {
        let vals = int_edge_values(dt);
        let src: Vec<u8> = vals.concat();
        for k in &vals {
            let got = premul_all_ways(dt, &src, k);
            let kv = int_from_bytes(dt, k);
            for (i, v) in vals.iter().enumerate() {
                let want = int_reference(dt, ReduceKind::Prod, int_from_bytes(dt, v), kv);
                assert_eq!(
                    &got[i * dt.size()..(i + 1) * dt.size()],
                    &want[..],
                    "{dt:?}"
                );
            }
        }
    }
}

#[test]
fn premul_floats_round_once() {
    // Narrow formats: every fp8 value times every fp8 scalar; f16/bf16 edge values.
    for (dt, xs) in [
        (DataType::Float8E4M3, (0..=255).collect::<Vec<u16>>()),
        (DataType::Float8E5M2, (0..=255).collect()),
        (DataType::Float16, f16_edge_bits()),
        (DataType::Bfloat16, bf16_edge_bits()),
    ] {
        let fmt = Format::new(dt);
        let src: Vec<u8> = xs.iter().flat_map(|&x| fmt.to_bytes(x)).collect();
        for &k in &xs {
            let got = premul_all_ways(dt, &src, &fmt.to_bytes(k));
            for (i, &x) in xs.iter().enumerate() {
                let r = fmt.bits_of(&got[i * dt.size()..]);
                assert_eq!(
                    r,
                    fmt.reference(ReduceKind::Prod, x, k),
                    "{dt:?} {x:#x} * {k:#x}"
                );
            }
        }
    }
    let f32s = f32_edge_values();
    let src: Vec<u8> = f32s.iter().flat_map(|v| v.to_le_bytes()).collect();
    for k in &f32s {
        let got = premul_all_ways(DataType::Float32, &src, &k.to_le_bytes());
        for (i, x) in f32s.iter().enumerate() {
            let r = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
            let want = x * k;
            if want.is_nan() {
                assert_eq!(r.to_bits(), 0x7fff_ffff);
            } else {
                assert_eq!(r.to_bits(), want.to_bits());
            }
        }
    }
    let f64s = f64_edge_values();
    let src: Vec<u8> = f64s.iter().flat_map(|v| v.to_le_bytes()).collect();
    for k in &f64s {
        let got = premul_all_ways(DataType::Float64, &src, &k.to_le_bytes());
        for (i, x) in f64s.iter().enumerate() {
            let r = f64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            let want = x * k;
            assert!(r.to_bits() == want.to_bits() || (r.is_nan() && want.is_nan()));
        }
    }
    // Avg of 3 ranks in f16: scalar 1/3 rounds to 0x3555.
    let third = from_f64(DataType::Float16, 1.0 / 3.0);
    assert_eq!(u16::from_le_bytes([third[0], third[1]]), 0x3555);
    let src = from_f64(DataType::Float16, 3.0);
    let got = premul_all_ways(DataType::Float16, &src[..2], &third[..2]);
    assert_eq!(to_f64(DataType::Float16, &got), 1.0);
}

fn div_all_ways(dt: DataType, src: &[u8], n: u64) -> Vec<u8> {
    let count = src.len() / dt.size();
    let mut results = Vec::new();
    for offset in [0, 1, 3] {
        let mut b = Buf::new(src, offset);
        // SAFETY: the buffer holds `count` elements of `dt` at its offset.
        unsafe { div_int(dt, b.ptr(), count, n) };
        results.push(b.bytes());
    }
    for r in &results {
        assert_eq!(r, &results[0]);
    }
    results.swap_remove(0)
}

#[test]
fn div_int_truncates_toward_zero() {
    for dt in [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
    ] {
        let vals = int_edge_values(dt);
        let src: Vec<u8> = vals.concat();
        for n in [
            1u64,
            2,
            3,
            7,
            8,
            100,
            127,
            128,
            255,
            256,
            1 << 31,
            1 << 32,
            1 << 63,
            u64::MAX,
        ] {
            let got = div_all_ways(dt, &src, n);
            for (i, v) in vals.iter().enumerate() {
                // i128 division truncates toward zero.
                let want = int_to_bytes(dt, int_from_bytes(dt, v) / i128::from(n));
                assert_eq!(
                    &got[i * dt.size()..(i + 1) * dt.size()],
                    &want[..],
                    "{dt:?} / {n}"
                );
            }
        }
        // n == 0 leaves the data alone.
        assert_eq!(div_all_ways(dt, &src, 0), src);
    }
    let i32s: Vec<u8> = [-7i32, 7, -1, -8, i32::MIN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let got = div_all_ways(DataType::Int32, &i32s, 2);
    let got: Vec<i32> = got
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![-3, 3, 0, -4, i32::MIN / 2]);
    assert_eq!(div_all_ways(DataType::Int8, &[0x80], 128), vec![0xff]);
    assert_eq!(
        div_all_ways(DataType::Int64, &i64::MIN.to_le_bytes(), 1 << 63),
        (-1i64).to_le_bytes()
    );
    // Floating types divide with one rounding.
    let f = from_f64(DataType::Float16, 1.0);
    assert_eq!(
        to_f64(
            DataType::Float16,
            &div_all_ways(DataType::Float16, &f[..2], 3)
        ),
        half::f16::from_f64(1.0 / 3.0).to_f64()
    );
    let f = 1.0f32.to_le_bytes();
    assert_eq!(
        div_all_ways(DataType::Float32, &f, 3),
        (1.0f32 / 3.0).to_le_bytes()
    );
}

// ---------------------------------------------------------------------------------------------
// Counts and pointers.

#[test]
fn count_zero_touches_nothing() {
    for dt in DataType::ALL {
        for op in OPS {
            // SAFETY: count 0: the functions return before touching any pointer.
            unsafe {
                reduce(
                    dt,
                    op,
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    std::ptr::null(),
                    0,
                )
            };
        }
        // SAFETY: count 0, as above.
        unsafe {
            premul(
                dt,
                std::ptr::null_mut(),
                std::ptr::null(),
                0,
                std::ptr::null(),
            )
        };
        // SAFETY: count 0: the functions return before touching any pointer.
        unsafe { div_int(dt, std::ptr::null_mut(), 0, 3) };
        let mut guard = vec![0x11u8; 16];
        let p = guard.as_mut_ptr();
        // SAFETY: count 0 with valid pointers: nothing may be read or written.
        unsafe { reduce(dt, ReduceKind::Sum, p, p, p, 0) };
        assert_eq!(guard, vec![0x11; 16]);
    }
}

#[test]
fn odd_counts_and_tails_for_every_type() {
    let mut rng = Lcg(99);
    for dt in DataType::ALL {
        for count in [1usize, 2, 3, 5, 7, 15, 17, 31, 33, 63, 65, 1001] {
            let a: Vec<u8> = (0..count * dt.size()).map(|_| rng.next() as u8).collect();
            let b: Vec<u8> = (0..count * dt.size()).map(|_| rng.next() as u8).collect();
            for op in OPS {
                let whole = reduce_all_ways(dt, op, &a, &b);
                // Element by element gives the same bytes: no cross-element state or tail bug.
                for i in 0..count {
                    let s = dt.size();
                    let one =
                        reduce_all_ways(dt, op, &a[i * s..(i + 1) * s], &b[i * s..(i + 1) * s]);
                    assert_eq!(
                        &whole[i * s..(i + 1) * s],
                        &one[..],
                        "{dt:?} {op:?} n={count} i={i}"
                    );
                }
                // Only `count` elements are written.
                let mut d = vec![0xeeu8; a.len() + 8];
                // SAFETY: a and b hold `count` elements, d more; all three are disjoint.
                unsafe { reduce(dt, op, d.as_mut_ptr(), a.as_ptr(), b.as_ptr(), count) };
                assert_eq!(&d[a.len()..], &[0xee; 8]);
            }
        }
    }
}

#[test]
fn self_reduction_dst_a_b_all_equal() {
    let vals: Vec<u8> = [1.5f32, -2.0, f32::NAN, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for offset in [0, 1] {
        let mut buf = Buf::new(&vals, offset);
        let p = buf.ptr();
        // SAFETY: one buffer of 4 f32 used as dst, a and b at once (exact aliasing).
        unsafe { reduce(DataType::Float32, ReduceKind::Sum, p, p, p, 4) };
        let got: Vec<u32> = buf
            .bytes()
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![3.0f32.to_bits(), (-4.0f32).to_bits(), 0x7fff_ffff, 0]
        );
    }
    let mut buf = Buf::new(&[0x7f, 0x80, 0x01], 0);
    let p = buf.ptr();
    // SAFETY: one buffer of 3 i8 used as dst, a and b at once.
    unsafe { reduce(DataType::Int8, ReduceKind::Sum, p, p, p, 3) };
    assert_eq!(buf.bytes(), vec![0xfe, 0x00, 0x02]);
}
