//! Conversions between the element types and f64, and the scalar kernels (premul, integer
//! division), checked against the same independent references as `reduce.rs`: exhaustively
//! for fp8, against nearest-neighbour rounding for fp16/bf16, and six ways per call.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use ccl_cuda::host::reduce::{div_int, from_f64, premul, to_f64};
use ccl_cuda::{DataType, ReduceKind};
use common::*;

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
