//! `premul_add` (`dst = src * scalar + acc`, one rounding) against exact references: integer
//! arithmetic on scaled values for fp16 and fp8, glibc's correctly rounded `fmaf` for f32,
//! wrapping integers, and values NCCL 2.28 produced on two H200 GPUs.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::fp8_value;

use ccl_cuda::host::reduce::{from_f64, premul, premul_add, to_f64};
use ccl_cuda::DataType;

/// Runs `premul_add` disjoint, with dst == src, with dst == acc, and with every buffer
/// misaligned by one byte; the results must agree. Returns the result.
fn premul_add_all_ways(dt: DataType, src: &[u8], acc: &[u8], scalar: &[u8]) -> Vec<u8> {
    let n = src.len() / dt.size();
    let mut results = Vec::new();
    for offset in [0usize, 1] {
        let pad = |v: &[u8]| {
            let mut b = vec![0u8; v.len() + 16];
            // u8 vectors are only byte-aligned; shift to a known 8-byte alignment first.
            let base = b.as_ptr().align_offset(8);
            b[base + offset..base + offset + v.len()].copy_from_slice(v);
            (b, base + offset)
        };
        let (mut s, so) = pad(src);
        let (mut a, ao) = pad(acc);
        let (mut d, dof) = pad(&vec![0x5a; src.len()]);
        let (mut k, ko) = pad(scalar);
        // SAFETY: each buffer holds n elements (the scalar one) at its offset; disjoint.
        unsafe {
            premul_add(
                dt,
                d.as_mut_ptr().add(dof),
                s.as_ptr().add(so),
                a.as_ptr().add(ao),
                n,
                k.as_mut_ptr().add(ko),
            )
        };
        results.push(d[dof..dof + src.len()].to_vec());
        let (mut s2, so2) = pad(src);
        let p = s2.as_mut_ptr().wrapping_add(so2);
        // SAFETY: dst == src exactly; acc disjoint.
        unsafe { premul_add(dt, p, p, a.as_ptr().add(ao), n, k.as_ptr().add(ko)) };
        results.push(s2[so2..so2 + src.len()].to_vec());
        let p = a.as_mut_ptr().wrapping_add(ao);
        // SAFETY: dst == acc exactly; src disjoint.
        unsafe { premul_add(dt, p, s.as_mut_ptr().add(so), p, n, k.as_ptr().add(ko)) };
        results.push(a[ao..ao + src.len()].to_vec());
    }
    for r in &results {
        assert_eq!(r, &results[0], "{dt:?}: premul_add ways differ");
    }
    results.swap_remove(0)
}

/// A narrow format whose every finite value is an integer multiple of `2^-q`, with its
/// positive values as such integers (sorted), for exact rounding of `x * s + acc`.
struct Exact {
    dt: DataType,
    q: i32,
    /// (value * 2^q, encoding), ascending, from +0 to the largest finite value.
    positives: Vec<(i128, u16)>,
    sign_bit: u16,
    saturates: bool,
}

impl Exact {
    fn new(dt: DataType) -> Self {
        let (q, sign_bit, saturates) = match dt {
            DataType::Float16 => (24, 0x8000u16, false),
            DataType::Float8E4M3 => (9, 0x80, true),
            DataType::Float8E5M2 => (16, 0x80, true),
            _ => unreachable!(),
        };
        let mut positives: Vec<(i128, u16)> = (0..sign_bit)
            .map(|b| (Self::value(dt, b), b))
            .filter(|(v, _)| v.is_finite())
            .map(|(v, b)| ((v * 2f64.powi(q)) as i128, b))
            .collect();
        positives.sort();
        Exact {
            dt,
            q,
            positives,
            sign_bit,
            saturates,
        }
    }

    fn value(dt: DataType, bits: u16) -> f64 {
        match dt {
            DataType::Float16 => half::f16::from_bits(bits).to_f64(),
            DataType::Float8E4M3 => fp8_value(bits as u8, 4, 3, false),
            DataType::Float8E5M2 => fp8_value(bits as u8, 5, 2, true),
            _ => unreachable!(),
        }
    }

    fn scaled(&self, bits: u16) -> i128 {
        (Self::value(self.dt, bits) * 2f64.powi(self.q)) as i128
    }

    /// The encoding nearest to `n * 2^(-2q)` (nonzero), ties to even.
    fn round(&self, n: i128) -> u16 {
        let sign = if n < 0 { self.sign_bit } else { 0 };
        let a = n.unsigned_abs() as i128;
        let one = 1i128 << self.q; // table values are scaled by 2^q, `a` by 2^(2q)
        let (max, max_bits) = *self.positives.last().unwrap();
        let ulp_top = max - self.positives[self.positives.len() - 2].0;
        let magnitude = if a > max * one {
            if self.saturates || 2 * a < (2 * max + ulp_top) * one {
                max_bits
            } else {
                // IEEE inf: the encoding right above the largest finite value.
                max_bits + 1
            }
        } else {
            let idx = self.positives.partition_point(|(v, _)| v * one <= a);
            let (lo, lo_bits) = self.positives[idx - 1];
            if lo * one == a {
                lo_bits
            } else {
                let (hi, hi_bits) = self.positives[idx];
                let (dlo, dhi) = (a - lo * one, hi * one - a);
                if dlo < dhi || (dlo == dhi && lo_bits % 2 == 0) {
                    lo_bits
                } else {
                    hi_bits
                }
            }
        };
        sign | magnitude
    }

    /// The correctly rounded `x * s + acc`, with IEEE rules for zeros and specials.
    fn fma(&self, x: u16, s: u16, acc: u16) -> u16 {
        let (xv, sv, av) = (
            Self::value(self.dt, x),
            Self::value(self.dt, s),
            Self::value(self.dt, acc),
        );
        if !(xv.is_finite() && sv.is_finite() && av.is_finite()) {
            // Specials: f64 propagates inf/NaN exactly; round the result like any value.
            let r = xv.mul_add(sv, av);
            let b = from_f64(self.dt, r);
            return if self.dt.size() == 1 {
                u16::from(b[0])
            } else {
                u16::from_le_bytes([b[0], b[1]])
            };
        }
        let sign_of = |bits: u16| if bits & self.sign_bit != 0 { -1i128 } else { 1 };
        let xs = sign_of(x) * self.scaled(x & !self.sign_bit);
        let ss = sign_of(s) * self.scaled(s & !self.sign_bit);
        let as_ = sign_of(acc) * self.scaled(acc & !self.sign_bit);
        let exact = xs * ss + as_ * (1i128 << self.q);
        if exact == 0 {
            // An exact zero: -0 only when both addends are zeros of negative sign.
            let prod_negative = (x ^ s) & self.sign_bit != 0;
            let acc_negative = acc & self.sign_bit != 0;
            let both_zero = xs * ss == 0 && as_ == 0;
            return if both_zero && prod_negative && acc_negative {
                self.sign_bit
            } else {
                0
            };
        }
        self.round(exact)
    }
}

fn bytes_of(dt: DataType, bits: u16) -> Vec<u8> {
    bits.to_le_bytes()[..dt.size()].to_vec()
}

fn bits_of(dt: DataType, bytes: &[u8]) -> u16 {
    if dt.size() == 1 {
        u16::from(bytes[0])
    } else {
        u16::from_le_bytes([bytes[0], bytes[1]])
    }
}

fn check_exact(dt: DataType, values: &[u16], scalars: &[u16]) {
    let exact = Exact::new(dt);
    let mut src = Vec::new();
    let mut acc = Vec::new();
    for &x in values {
        for &a in values {
            src.extend(bytes_of(dt, x));
            acc.extend(bytes_of(dt, a));
        }
    }
    for &s in scalars {
        let got = premul_add_all_ways(dt, &src, &acc, &bytes_of(dt, s));
        for i in 0..src.len() / dt.size() {
            let x = bits_of(dt, &src[i * dt.size()..]);
            let a = bits_of(dt, &acc[i * dt.size()..]);
            let r = bits_of(dt, &got[i * dt.size()..]);
            let want = exact.fma(x, s, a);
            let nan = |b: u16| to_f64(dt, &bytes_of(dt, b)).is_nan();
            assert!(
                r == want || (nan(r) && nan(want)),
                "{dt:?}: {x:#x} * {s:#x} + {a:#x} = {r:#x}, want {want:#x}"
            );
        }
    }
}

#[test]
fn fp8_fma_every_value_pair_against_exact() {
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let all: Vec<u16> = (0..=255).collect();
        let scalars: Vec<u16> = [0.5, 0.3, -1.75, 3.0, 1.0 / 3.0, 0.0, 1e-3]
            .iter()
            .map(|&v| u16::from(from_f64(dt, v)[0]))
            .collect();
        check_exact(dt, &all, &scalars);
    }
}

#[test]
fn f16_fma_edge_values_against_exact() {
    let mut values = vec![
        0x0000u16, 0x8000, 0x0001, 0x8001, 0x0003, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0xbc00, 0x3800,
        0x3555, 0x6800, 0x6801, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x1400, 0x5bff, 0xc001,
        0x3e00, 0x0200,
    ];
    let mut seed = 0x1234_5678_u64;
    for _ in 0..24 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        values.push((seed >> 40) as u16);
    }
    let scalars: Vec<u16> = [0.5, 0.3, 1.0 / 3.0, -2.0, 1.0, 65504.0, 1e-7, 0.6669921875]
        .iter()
        .map(|&v| {
            u16::from_le_bytes([
                from_f64(DataType::Float16, v)[0],
                from_f64(DataType::Float16, v)[1],
            ])
        })
        .collect();
    check_exact(DataType::Float16, &values, &scalars);
}

#[test]
fn f32_fma_matches_libm_fmaf() {
    let mut values: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.3,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(3),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + f32::EPSILON,
        16_777_216.0,
        -16_777_217.0,
        1e-30,
        3e38,
    ];
    let mut seed = 99u64;
    for _ in 0..30 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        values.push(f32::from_bits((seed >> 32) as u32));
    }
    let mut src = Vec::new();
    let mut acc = Vec::new();
    for x in &values {
        for a in &values {
            src.extend(x.to_le_bytes());
            acc.extend(a.to_le_bytes());
        }
    }
    for &s in &[0.5f32, 0.3, -3.0, 1.0 / 3.0, f32::MIN_POSITIVE, 7e37] {
        let got = premul_add_all_ways(DataType::Float32, &src, &acc, &s.to_le_bytes());
        for (i, r) in got.chunks(4).enumerate() {
            let x = f32::from_le_bytes(src[i * 4..i * 4 + 4].try_into().unwrap());
            let a = f32::from_le_bytes(acc[i * 4..i * 4 + 4].try_into().unwrap());
            let r = f32::from_le_bytes(r.try_into().unwrap());
            let want = x.mul_add(s, a);
            if want.is_nan() {
                assert_eq!(r.to_bits(), 0x7fff_ffff);
            } else {
                assert_eq!(r.to_bits(), want.to_bits(), "{x:e} * {s:e} + {a:e}");
            }
        }
    }
}

#[test]
fn integers_and_f64() {
    let src: Vec<u8> = [i32::MAX, -3, 7]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let acc: Vec<u8> = [1i32, 10, i32::MIN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let got = premul_add_all_ways(DataType::Int32, &src, &acc, &2i32.to_le_bytes());
    let got: Vec<i32> = got
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![-1, 4, i32::MIN + 14]);
    let got = premul_add_all_ways(DataType::Uint8, &[200, 3], &[100, 1], &[2]);
    assert_eq!(got, vec![244, 7]);
    let src: Vec<u8> = [0.1f64, f64::MAX]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let acc: Vec<u8> = [-0.03f64, -f64::MAX * 0.3]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let got = premul_add_all_ways(DataType::Float64, &src, &acc, &0.3f64.to_le_bytes());
    let got: Vec<f64> = got
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            0.1f64.mul_add(0.3, -0.03),
            f64::MAX.mul_add(0.3, -f64::MAX * 0.3)
        ]
    );
    assert_ne!(got[1], 0.0, "fused: the product's rounding error survives");
}

/// Results NCCL 2.28.9 gave for two-rank Avg / PreMulSum on H200 GPUs: rank 0's input `x`
/// fused into the multiply-add with rank 1's pre-multiplied input.
#[test]
fn nccl_observed_values() {
    let nccl_step = |dt: DataType, x: &[u8], y: &[u8], scalar: &[u8]| -> Vec<u8> {
        let mut y_scaled = vec![0u8; y.len()];
        // SAFETY: one element each; disjoint.
        unsafe { premul(dt, y_scaled.as_mut_ptr(), y.as_ptr(), 1, scalar.as_ptr()) };
        premul_add_all_ways(dt, x, &y_scaled, scalar)
    };
    let half = |v: f64| from_f64(DataType::Float16, v)[..2].to_vec();
    // f16 Avg of the two smallest subnormals: (1 + 2) / 2 ulp ties to 2, not 0 + 1.
    let got = nccl_step(DataType::Float16, &[0x01, 0x00], &[0x02, 0x00], &half(0.5));
    assert_eq!(got, vec![0x02, 0x00]);
    // f16 Avg of -1 ulp and 0 is -0.
    let got = nccl_step(DataType::Float16, &[0x01, 0x80], &[0x00, 0x00], &half(0.5));
    assert_eq!(got, vec![0x00, 0x80]);
    // f16 PreMulSum by 0.3 (0x34cd): 1.0009765625 * s + round(-1 * s) = 0x0ccd.
    let got = nccl_step(
        DataType::Float16,
        &[0x01, 0x3c],
        &[0x00, 0xbc],
        &[0xcd, 0x34],
    );
    assert_eq!(got, vec![0xcd, 0x0c]);
    // f32 PreMulSum by 0.3f of MAX and -MAX: the product's rounding error, 0x724ccccc.
    let got = nccl_step(
        DataType::Float32,
        &f32::MAX.to_le_bytes(),
        &f32::MIN.to_le_bytes(),
        &0.3f32.to_le_bytes(),
    );
    assert_eq!(got, 0x724c_ccccu32.to_le_bytes().to_vec());
    // bf16 Avg: 0x007f + 0x0002 (subnormals) -> 0x0040.
    let got = nccl_step(
        DataType::Bfloat16,
        &[0x7f, 0x00],
        &[0x02, 0x00],
        &[0x00, 0x3f],
    );
    assert_eq!(got, vec![0x40, 0x00]);
}

/// A bf16 product that is exactly a midpoint (259 * 2^80 lies between 258 and 260 * 2^80)
/// plus an addend far below f64's precision at that size: plain f64 arithmetic loses the
/// addend and ties to even (260); the exact result is just below the midpoint (258).
#[test]
fn bf16_fma_near_midpoint_is_not_double_rounded() {
    let bf = |v: f64| from_f64(DataType::Bfloat16, v)[..2].to_vec();
    let x = bf(7.0 * 2f64.powi(40));
    let s = bf(37.0 * 2f64.powi(40));
    for (acc, want) in [
        (-(2f64.powi(-100)), 258.0 * 2f64.powi(80)),
        (2f64.powi(-100), 260.0 * 2f64.powi(80)),
        (0.0, 260.0 * 2f64.powi(80)),
    ] {
        let got = premul_add_all_ways(DataType::Bfloat16, &x, &bf(acc), &s);
        assert_eq!(to_f64(DataType::Bfloat16, &got), want, "acc {acc:e}");
    }
}
