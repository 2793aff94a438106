//! Host reductions checked against references written independently of the library: integer
//! arithmetic in 128 bits, float Max/Min by case analysis, and narrow-float rounding by
//! nearest-neighbour search over a table of every value of the format (decoded by the `half`
//! crate for fp16/bf16 and by the spec's formula for fp8).
//!
//! Every reduction is run six ways (disjoint, dst == a, dst == b; aligned, and every buffer
//! misaligned by one byte) and the six results must be byte-identical.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use ccl_cuda::host::reduce::{div_int, from_f64, premul, reduce, to_f64};
use ccl_cuda::{DataType, ReduceKind};
use common::*;

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

#[test]
fn fp8_every_op_on_every_pair() {
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let all: Vec<u16> = (0..=255).collect();
        Format::new(dt).check_pairs(&all);
    }
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
