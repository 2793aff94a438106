//! Binary floating-point formats narrower than `f32` (fp16, bf16, fp8 e4m3 / e5m2), decoded to
//! and rounded from `f64`.
//!
//! One parameterised codec covers all four formats so that every rounding decision (ties to
//! even, subnormals, overflow) is made by the same few lines and tested once per format.
//! Every value of these formats is exactly representable in `f64`, and a sum or product of two
//! of them is too (for bf16 sums `f64` rounds, but with 53 >= 2*8+2 bits of precision that
//! first rounding never changes the final round-to-nearest-even result), so "compute in `f64`
//! then [`MiniFloat::encode`]" is a correctly rounded operation in the narrow format.

/// A binary floating-point layout: 1 sign bit, `exp_bits` exponent bits, `man_bits` stored
/// mantissa bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniFloat {
    exp_bits: u32,
    man_bits: u32,
    /// IEEE special values: the all-ones exponent holds inf (mantissa 0) and NaN. When false
    /// (e4m3 "FN") that exponent holds ordinary numbers and only the all-ones pattern is NaN.
    ieee_specials: bool,
    /// Overflow (and infinite input) gives the largest finite value instead of inf; this is
    /// CUDA's `__NV_SATFINITE`, which NCCL's fp8 reductions use.
    saturate: bool,
}

pub const F16: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 10,
    ieee_specials: true,
    saturate: false,
};

pub const BF16: MiniFloat = MiniFloat {
    exp_bits: 8,
    man_bits: 7,
    ieee_specials: true,
    saturate: false,
};

pub const E4M3: MiniFloat = MiniFloat {
    exp_bits: 4,
    man_bits: 3,
    ieee_specials: false,
    saturate: true,
};

pub const E5M2: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 2,
    ieee_specials: true,
    saturate: true,
};

/// `2^k` for `k` in the normal `f64` exponent range, built from bits so it is exact.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    let biased = (k + 1023).clamp(1, 2046);
    f64::from_bits((biased as u64) << 52)
}

impl MiniFloat {
    #[inline(always)]
    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    #[inline(always)]
    fn exp_all_ones(self) -> u16 {
        (1 << self.exp_bits) - 1
    }

    #[inline(always)]
    fn man_mask(self) -> u16 {
        (1 << self.man_bits) - 1
    }

    #[inline(always)]
    fn sign_bit(self) -> u16 {
        1 << (self.exp_bits + self.man_bits)
    }

    /// The NaN every operation produces: positive, all exponent and mantissa bits set. This is
    /// the canonical NaN of CUDA's half (0x7fff), bf16 (0x7fff) and fp8 (0x7f) conversions.
    #[inline(always)]
    pub fn nan_bits(self) -> u16 {
        self.sign_bit() - 1
    }

    /// The encoding of +inf, or of the largest finite value where the format has no inf.
    #[inline(always)]
    fn inf_bits(self) -> u16 {
        if self.ieee_specials {
            self.exp_all_ones() << self.man_bits
        } else {
            self.max_finite_bits()
        }
    }

    /// The encoding of the largest finite value.
    #[inline(always)]
    pub fn max_finite_bits(self) -> u16 {
        if self.ieee_specials {
            self.inf_bits() - 1
        } else {
            self.nan_bits() - 1
        }
    }

    /// What a positive value too large for the format becomes.
    #[inline(always)]
    fn overflow_bits(self) -> u16 {
        if self.saturate {
            self.max_finite_bits()
        } else {
            self.inf_bits()
        }
    }

    /// The value of the largest finite encoding.
    #[inline(always)]
    fn max_finite(self) -> f64 {
        let max = self.max_finite_bits();
        let exp_field = i32::from(max >> self.man_bits);
        let significand = f64::from((max & self.man_mask()) | (1 << self.man_bits));
        significand * pow2(exp_field - self.bias() - self.man_bits as i32)
    }

    /// Magnitudes from here up round past the largest finite value: max + half an ulp. At
    /// exactly this tie, ties-to-even picks the next binade (inf) for IEEE formats; saturating
    /// formats give the largest finite value either way, so one threshold serves all four.
    #[inline(always)]
    fn overflow_threshold(self) -> f64 {
        let exp_field = i32::from(self.max_finite_bits() >> self.man_bits);
        self.max_finite() + pow2(exp_field - self.bias() - self.man_bits as i32 - 1)
    }

    /// The smallest normal value, `2^(1 - bias)`.
    #[inline(always)]
    fn min_normal(self) -> f64 {
        pow2(1 - self.bias())
    }

    /// The exact value of an encoding (bits above the format's width are ignored).
    #[inline(always)]
    pub fn decode(self, bits: u16) -> f64 {
        let sign = u64::from(bits & self.sign_bit() != 0) << 63;
        let exp_field = (bits >> self.man_bits) & self.exp_all_ones();
        let man = bits & self.man_mask();
        let is_top_exp = exp_field == self.exp_all_ones();
        if is_top_exp && (self.ieee_specials || man == self.man_mask()) {
            let magnitude = if self.ieee_specials && man == 0 {
                f64::INFINITY
            } else {
                f64::NAN
            };
            return f64::from_bits(magnitude.to_bits() | sign);
        }
        if exp_field == 0 {
            let magnitude = f64::from(man) * pow2(1 - self.bias() - self.man_bits as i32);
            return f64::from_bits(magnitude.to_bits() | sign);
        }
        // Normal: rebias the exponent and left-align the mantissa in f64's 52 bits.
        let f64_exp = (i32::from(exp_field) - self.bias() + 1023) as u64;
        f64::from_bits(sign | f64_exp << 52 | u64::from(man) << (52 - self.man_bits))
    }

    /// The encoding nearest to `v`, ties to even; overflow gives inf or, for saturating
    /// formats, the largest finite value. NaN gives [`MiniFloat::nan_bits`].
    #[inline(always)]
    pub fn encode(self, v: f64) -> u16 {
        let bits = v.to_bits();
        let sign = if bits >> 63 != 0 { self.sign_bit() } else { 0 };
        let a = f64::from_bits(bits & !(1 << 63));
        if a >= self.overflow_threshold() || a.is_nan() {
            return if a.is_nan() {
                self.nan_bits()
            } else {
                sign | self.overflow_bits()
            };
        }
        if a < self.min_normal() {
            // Subnormal: `a` in units of the smallest subnormal, rounded to an integer. The
            // scaling is exact, and adding and removing 2^52 leaves no fraction bits, so the
            // FPU's round-to-nearest-even does the one rounding (`f64::round_ties_even` is a
            // libm call on baseline x86-64). A result of 2^man_bits is the smallest normal's
            // encoding, which is exactly right.
            const ROUNDER: f64 = 4_503_599_627_370_496.0;
            let units = a * pow2(self.man_bits as i32 + self.bias() - 1);
            return sign | ((units + ROUNDER) - ROUNDER) as u16;
        }
        // Normal: round the 52-bit mantissa to `man_bits` bits in integer arithmetic (add just
        // under half of the dropped range, plus one if the kept part is odd, so ties go to
        // even). A carry out of the mantissa increments the exponent, which is correct, and
        // the threshold check above guarantees it cannot pass the largest finite value.
        let shift = 52 - self.man_bits;
        let a_bits = a.to_bits();
        let half_minus_one = (1u64 << (shift - 1)) - 1;
        let rounded = (a_bits + half_minus_one + ((a_bits >> shift) & 1)) >> shift;
        let rebias = ((1023 - self.bias()) as u64) << self.man_bits;
        sign | (rounded - rebias) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_encodings(fmt: MiniFloat) -> impl Iterator<Item = u16> {
        0..=(fmt.sign_bit() | fmt.nan_bits())
    }

    fn is_nan_encoding(fmt: MiniFloat, bits: u16) -> bool {
        fmt.decode(bits).is_nan()
    }

    #[test]
    fn special_encodings() {
        assert_eq!(F16.nan_bits(), 0x7fff);
        assert_eq!(F16.max_finite_bits(), 0x7bff);
        assert_eq!(F16.decode(0x7bff), 65504.0);
        assert_eq!(F16.decode(0x7c00), f64::INFINITY);
        assert_eq!(F16.decode(0xfc00), f64::NEG_INFINITY);
        assert_eq!(F16.decode(0x0001), 2f64.powi(-24));
        assert_eq!(BF16.nan_bits(), 0x7fff);
        assert_eq!(BF16.decode(0x7f7f), f64::from(f32::from_bits(0x7f7f_0000)));
        assert_eq!(BF16.decode(0x0001), 2f64.powi(-133));
        assert_eq!(E4M3.nan_bits(), 0x7f);
        assert_eq!(E4M3.max_finite_bits(), 0x7e);
        assert_eq!(E4M3.decode(0x7e), 448.0);
        assert_eq!(E4M3.decode(0x01), 2f64.powi(-9));
        assert_eq!(E4M3.decode(0x08), 2f64.powi(-6));
        assert!(E4M3.decode(0x7f).is_nan());
        assert!(E4M3.decode(0xff).is_nan());
        assert_eq!(E4M3.decode(0x78), 256.0);
        assert_eq!(E5M2.nan_bits(), 0x7f);
        assert_eq!(E5M2.max_finite_bits(), 0x7b);
        assert_eq!(E5M2.decode(0x7b), 57344.0);
        assert_eq!(E5M2.decode(0x7c), f64::INFINITY);
        assert_eq!(E5M2.decode(0xfc), f64::NEG_INFINITY);
        assert!(E5M2.decode(0x7d).is_nan());
        assert!(E5M2.decode(0x7e).is_nan());
        assert_eq!(E5M2.decode(0x01), 2f64.powi(-16));
    }

    #[test]
    fn nan_count_per_format() {
        let count = |fmt: MiniFloat| {
            all_encodings(fmt)
                .filter(|&b| is_nan_encoding(fmt, b))
                .count()
        };
        assert_eq!(count(E4M3), 2);
        assert_eq!(count(E5M2), 6);
        assert_eq!(count(F16), 2 * 1023);
        assert_eq!(count(BF16), 2 * 127);
    }

    #[test]
    fn every_encoding_round_trips() {
        for fmt in [F16, BF16, E4M3, E5M2] {
            for bits in all_encodings(fmt) {
                let v = fmt.decode(bits);
                if v.is_nan() {
                    assert_eq!(fmt.encode(v), fmt.nan_bits());
                } else if v.is_infinite() && fmt.saturate {
                    let max = fmt.max_finite_bits() | (bits & fmt.sign_bit());
                    assert_eq!(fmt.encode(v), max);
                } else {
                    assert_eq!(fmt.encode(v), bits, "{fmt:?} {bits:#x} {v}");
                }
            }
        }
    }

    #[test]
    fn decode_is_monotonic_and_matches_half_crate() {
        for bits in 0..=u16::MAX {
            let mine = F16.decode(bits);
            let theirs = half::f16::from_bits(bits).to_f64();
            assert!(
                mine == theirs || (mine.is_nan() && theirs.is_nan()),
                "{bits:#x}"
            );
            let mine = BF16.decode(bits);
            let theirs = half::bf16::from_bits(bits).to_f64();
            assert!(
                mine == theirs || (mine.is_nan() && theirs.is_nan()),
                "{bits:#x}"
            );
        }
        for fmt in [F16, BF16, E4M3, E5M2] {
            let positives: Vec<f64> = (0..fmt.sign_bit())
                .map(|b| fmt.decode(b))
                .filter(|v| !v.is_nan())
                .collect();
            assert!(positives.windows(2).all(|w| w[0] < w[1]), "{fmt:?}");
        }
    }

    /// Midpoints between neighbours round to the one with an even mantissa; points just off
    /// the midpoint round to the nearer one.
    #[test]
    fn midpoints_round_to_even() {
        for fmt in [F16, BF16, E4M3, E5M2] {
            let max = fmt.max_finite_bits();
            for lo in 0..max {
                let hi = lo + 1;
                let (vlo, vhi) = (fmt.decode(lo), fmt.decode(hi));
                let mid = (vlo + vhi) / 2.0;
                let even = if lo % 2 == 0 { lo } else { hi };
                assert_eq!(fmt.encode(mid), even, "{fmt:?} {lo:#x}");
                assert_eq!(fmt.encode(-mid), even | fmt.sign_bit(), "{fmt:?} {lo:#x}");
                let below = mid - (vhi - vlo) / 1024.0;
                let above = mid + (vhi - vlo) / 1024.0;
                assert_eq!(fmt.encode(below), lo);
                assert_eq!(fmt.encode(above), hi);
            }
        }
    }

    #[test]
    fn overflow_goes_to_inf_or_saturates() {
        // f16: values from max + half an ulp (a tie that rounds to the even "2^16") are inf.
        assert_eq!(F16.encode(65519.0), 0x7bff);
        assert_eq!(F16.encode(65520.0), 0x7c00);
        assert_eq!(F16.encode(-1e300), 0xfc00);
        assert_eq!(F16.encode(f64::INFINITY), 0x7c00);
        assert_eq!(BF16.encode(f64::MAX), 0x7f80);
        // e4m3: 464 is the tie between 448 and the NaN slot 480: saturates either way.
        assert_eq!(E4M3.encode(448.0), 0x7e);
        assert_eq!(E4M3.encode(463.9), 0x7e);
        assert_eq!(E4M3.encode(464.0), 0x7e);
        assert_eq!(E4M3.encode(480.0), 0x7e);
        assert_eq!(E4M3.encode(1e6), 0x7e);
        assert_eq!(E4M3.encode(f64::INFINITY), 0x7e);
        assert_eq!(E4M3.encode(f64::NEG_INFINITY), 0xfe);
        assert_eq!(E5M2.encode(61439.0), 0x7b);
        assert_eq!(E5M2.encode(61440.0), 0x7b);
        assert_eq!(E5M2.encode(f64::INFINITY), 0x7b);
        assert_eq!(E5M2.encode(-f64::MAX), 0xfb);
    }

    #[test]
    fn underflow_and_signed_zero() {
        for fmt in [F16, BF16, E4M3, E5M2] {
            let min_sub = fmt.decode(1);
            assert_eq!(fmt.encode(min_sub / 2.0), 0, "{fmt:?} tie to even zero");
            assert_eq!(fmt.encode(min_sub * 0.75), 1, "{fmt:?}");
            assert_eq!(fmt.encode(-min_sub / 2.0), fmt.sign_bit(), "{fmt:?}");
            assert_eq!(fmt.encode(min_sub * 1.5), 2, "{fmt:?} tie to even 2");
            assert_eq!(fmt.encode(-0.0), fmt.sign_bit());
            assert_eq!(fmt.encode(0.0), 0);
            assert_eq!(fmt.encode(f64::from_bits(1)), 0);
            assert_eq!(fmt.encode(-f64::from_bits(1)), fmt.sign_bit());
            // The largest subnormal rounds up into the smallest normal.
            let min_normal = fmt.decode(1 << fmt.man_bits);
            let max_sub = fmt.decode(fmt.man_mask());
            assert_eq!(fmt.encode((min_normal + max_sub) / 2.0), 1 << fmt.man_bits);
        }
    }

    #[test]
    fn nan_encodes_canonically() {
        for fmt in [F16, BF16, E4M3, E5M2] {
            assert_eq!(fmt.encode(f64::NAN), fmt.nan_bits());
            assert_eq!(fmt.encode(-f64::NAN), fmt.nan_bits());
        }
    }
}
