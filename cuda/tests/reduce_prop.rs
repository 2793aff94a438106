//! Property tests: fp16/bf16 reductions equal "compute in f64, round once with `from_f64`",
//! for random bit patterns (every class: NaN, inf, subnormal, zero) and random lengths,
//! aligned and misaligned, disjoint and in place.

use ccl_cuda::host::reduce::{from_f64, reduce, to_f64};
use ccl_cuda::{DataType, ReduceKind};
use proptest::prelude::*;

fn op_strategy() -> impl Strategy<Value = ReduceKind> {
    prop_oneof![
        Just(ReduceKind::Sum),
        Just(ReduceKind::Prod),
        Just(ReduceKind::Max),
        Just(ReduceKind::Min),
    ]
}

fn apply_f64(op: ReduceKind, x: f64, y: f64) -> f64 {
    match op {
        ReduceKind::Sum => x + y,
        ReduceKind::Prod => x * y,
        ReduceKind::Max | ReduceKind::Min => {
            if x.is_nan() {
                y
            } else if y.is_nan() {
                x
            } else if x == 0.0 && y == 0.0 {
                let negative = if op == ReduceKind::Max {
                    x.is_sign_negative() && y.is_sign_negative()
                } else {
                    x.is_sign_negative() || y.is_sign_negative()
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

fn reference(dt: DataType, op: ReduceKind, x: u16, y: u16) -> u16 {
    let r = apply_f64(
        op,
        to_f64(dt, &x.to_le_bytes()),
        to_f64(dt, &y.to_le_bytes()),
    );
    let b = from_f64(dt, r);
    u16::from_le_bytes([b[0], b[1]])
}

/// Bit patterns biased toward the interesting classes as well as uniformly random ones.
fn bits_strategy() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => any::<u16>(),
        1 => 0u16..0x0400,          // f16 subnormals / small bf16
        1 => (0u16..0x0080).prop_map(|m| m | 0x8000), // bf16 subnormals, negative
        1 => 0x7b00u16..=0x7fff,                    // near f16 max, inf, NaN
        1 => (0x7f00u16..=0x7fff).prop_map(|m| m | 0x8000),
    ]
}

fn check(dt: DataType, op: ReduceKind, xs: &[u16], ys: &[u16], offset: usize, in_place: u8) {
    let n = xs.len();
    let a_bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let b_bytes: Vec<u8> = ys.iter().flat_map(|y| y.to_le_bytes()).collect();
    let mut a = vec![0u8; a_bytes.len() + offset];
    let mut b = vec![0u8; b_bytes.len() + offset];
    let mut d = vec![0u8; a_bytes.len() + offset];
    a[offset..].copy_from_slice(&a_bytes);
    b[offset..].copy_from_slice(&b_bytes);
    let result = match in_place {
        0 => {
            // SAFETY: three disjoint buffers of n elements.
            unsafe {
                reduce(
                    dt,
                    op,
                    d.as_mut_ptr().add(offset),
                    a.as_ptr().add(offset),
                    b.as_ptr().add(offset),
                    n,
                )
            };
            d
        }
        1 => {
            // SAFETY: offset < a.len() unless n == 0, where it equals the length (one past).
            let p = unsafe { a.as_mut_ptr().add(offset) };
            // SAFETY: dst == a, b disjoint.
            unsafe { reduce(dt, op, p, p, b.as_ptr().add(offset), n) };
            a
        }
        _ => {
            // SAFETY: as above, within or one past the end of b.
            let p = unsafe { b.as_mut_ptr().add(offset) };
            // SAFETY: dst == b, a disjoint.
            unsafe { reduce(dt, op, p, a.as_ptr().add(offset), p, n) };
            b
        }
    };
    for i in 0..n {
        let got = u16::from_le_bytes([result[offset + 2 * i], result[offset + 2 * i + 1]]);
        let want = reference(dt, op, xs[i], ys[i]);
        assert_eq!(got, want, "{dt:?} {op:?} {:#x} {:#x}", xs[i], ys[i]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn f16_matches_f64_reference(
        op in op_strategy(),
        pairs in prop::collection::vec((bits_strategy(), bits_strategy()), 0..80),
        offset in 0usize..3,
        in_place in 0u8..3,
    ) {
        let (xs, ys): (Vec<u16>, Vec<u16>) = pairs.into_iter().unzip();
        check(DataType::Float16, op, &xs, &ys, offset, in_place);
    }

    #[test]
    fn bf16_matches_f64_reference(
        op in op_strategy(),
        pairs in prop::collection::vec((bits_strategy(), bits_strategy()), 0..80),
        offset in 0usize..3,
        in_place in 0u8..3,
    ) {
        let (xs, ys): (Vec<u16>, Vec<u16>) = pairs.into_iter().unzip();
        check(DataType::Bfloat16, op, &xs, &ys, offset, in_place);
    }

    /// Random finite f32 values rounded to f16 agree with the `half` crate's f32 conversion,
    /// which sees every mantissa bit of an f32 (an independent rounding implementation).
    #[test]
    fn f16_and_bf16_rounding_matches_half_crate_from_f32(bits in any::<u32>()) {
        let v = f32::from_bits(bits);
        prop_assume!(!v.is_nan());
        let mine = from_f64(DataType::Float16, f64::from(v));
        prop_assert_eq!(u16::from_le_bytes([mine[0], mine[1]]), half::f16::from_f32(v).to_bits());
        let mine = from_f64(DataType::Bfloat16, f64::from(v));
        prop_assert_eq!(u16::from_le_bytes([mine[0], mine[1]]), half::bf16::from_f32(v).to_bits());
    }
}
