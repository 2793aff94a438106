//! Narrow float formats: fp16, bf16 and fp8 ([`Format`]), and the CUDA decoder and encoder
//! generated for each.

use std::fmt::Write as _;

use crate::dtype::DataType;

/// A narrow binary float format (1 sign bit, `e` exponent bits, `m` mantissa bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Format {
    pub tag: &'static str,
    pub e: u32,
    pub m: u32,
    /// The all-ones exponent holds inf and NaN (false: e4m3, where only S.1111.111 is NaN).
    pub ieee: bool,
    /// Overflow and inf give the largest finite value.
    pub saturate: bool,
}

pub(crate) const F16: Format = Format {
    tag: "f16",
    e: 5,
    m: 10,
    ieee: true,
    saturate: false,
};
pub(crate) const BF16: Format = Format {
    tag: "bf16",
    e: 8,
    m: 7,
    ieee: true,
    saturate: false,
};
pub(crate) const E4M3: Format = Format {
    tag: "e4m3",
    e: 4,
    m: 3,
    ieee: false,
    saturate: true,
};
pub(crate) const E5M2: Format = Format {
    tag: "e5m2",
    e: 5,
    m: 2,
    ieee: true,
    saturate: true,
};

/// The `f32` bit pattern of `2^k` (normal range).
fn pow2_bits(k: i32) -> u32 {
    ((k + 127) as u32) << 23
}

impl Format {
    pub fn bias(self) -> i32 {
        (1 << (self.e - 1)) - 1
    }
    pub fn sign_bit(self) -> u32 {
        1 << (self.e + self.m)
    }
    pub fn exp_mask(self) -> u32 {
        (1 << self.e) - 1
    }
    pub fn man_mask(self) -> u32 {
        (1 << self.m) - 1
    }
    pub fn nan_bits(self) -> u32 {
        self.sign_bit() - 1
    }
    pub fn max_finite_bits(self) -> u32 {
        if self.ieee {
            (self.exp_mask() << self.m) - 1
        } else {
            self.nan_bits() - 1
        }
    }
    pub fn overflow_bits(self) -> u32 {
        if self.saturate || !self.ieee {
            self.max_finite_bits()
        } else {
            self.exp_mask() << self.m
        }
    }
    /// `f32` bits of the smallest magnitude that rounds past the largest finite value.
    pub fn overflow_threshold_bits(self) -> u32 {
        let max = self.max_finite_bits();
        let exp_field = (max >> self.m) as i32;
        let sig = f64::from((max & self.man_mask()) | (1 << self.m));
        let ulp_exp = exp_field - self.bias() - self.m as i32;
        let value = sig * 2f64.powi(ulp_exp) + 2f64.powi(ulp_exp - 1);
        (value as f32).to_bits()
    }
    /// `f32` bits of the smallest normal value.
    pub fn min_normal_bits(self) -> u32 {
        pow2_bits(1 - self.bias())
    }
    /// `f32` bits of `1 / (smallest subnormal)`.
    pub fn sub_scale_bits(self) -> u32 {
        pow2_bits(self.m as i32 + self.bias() - 1)
    }
    /// `f32` bits of the smallest subnormal.
    pub fn min_sub_bits(self) -> u32 {
        pow2_bits(1 - self.bias() - self.m as i32)
    }
    /// Exponent rebias of the encoding, pre-shifted: `(127 - bias) << m`.
    pub fn rebias(self) -> u32 {
        ((127 - self.bias()) as u32) << self.m
    }
    /// The format shares `f32`'s exponent range (bf16): no subnormal special case.
    pub fn same_range_as_f32(self) -> bool {
        self.e == 8
    }
}

pub(super) fn format_of(dt: DataType) -> Option<Format> {
    match dt {
        DataType::Float16 => Some(F16),
        DataType::Bfloat16 => Some(BF16),
        DataType::Float8E4M3 => Some(E4M3),
        DataType::Float8E5M2 => Some(E5M2),
        _ => None,
    }
}

/// Decoder and encoder of a narrow format: `float dec_<tag>(u32)`, `u32 enc_<tag>(float)`.
pub(super) fn format_code(f: Format, out: &mut String) {
    let t = f.tag;
    let shift = 23 - f.m;
    // Decoder.
    if f.same_range_as_f32() {
        let _ = writeln!(
            out,
            "static __device__ inline float dec_{t}(u32 h) {{ return u2f(h << 16); }}"
        );
    } else {
        let _ = writeln!(out, "static __device__ inline float dec_{t}(u32 h) {{");
        let _ = writeln!(
            out,
            "  const u32 sign = (h & {:#x}u) << {};",
            f.sign_bit(),
            31 - f.e - f.m
        );
        let _ = writeln!(
            out,
            "  const u32 e = (h >> {}) & {:#x}u, m = h & {:#x}u;",
            f.m,
            f.exp_mask(),
            f.man_mask()
        );
        if f.ieee {
            let _ = writeln!(
                out,
                "  if (e == {:#x}u) return u2f(sign | 0x7f800000u | (m << {shift}));",
                f.exp_mask()
            );
        } else {
            let _ = writeln!(
                out,
                "  if (e == {:#x}u && m == {:#x}u) return u2f(0x7fffffffu);",
                f.exp_mask(),
                f.man_mask()
            );
        }
        let _ = writeln!(
            out,
            "  if (e == 0u) return u2f(sign | f2u(mul_f((float)m, u2f({:#010x}u))));",
            f.min_sub_bits()
        );
        let _ = writeln!(
            out,
            "  return u2f(sign | ((e + {}u) << 23) | (m << {shift}));",
            127 - f.bias()
        );
        let _ = writeln!(out, "}}");
    }
    // Encoder: round to nearest even.
    let _ = writeln!(out, "static __device__ inline u32 enc_{t}(float f) {{");
    let _ = writeln!(out, "  const u32 u = f2u(f);");
    let _ = writeln!(out, "  const u32 sign = (u >> 31) << {};", f.e + f.m);
    let _ = writeln!(out, "  const u32 a = u & 0x7fffffffu;");
    let _ = writeln!(out, "  if (a > 0x7f800000u) return {:#x}u;", f.nan_bits());
    let _ = writeln!(
        out,
        "  if (a >= {:#010x}u) return sign | {:#x}u;",
        f.overflow_threshold_bits(),
        f.overflow_bits()
    );
    if !f.same_range_as_f32() {
        let _ = writeln!(out, "  if (a < {:#010x}u) {{", f.min_normal_bits());
        let _ = writeln!(
            out,
            "    return sign | rni_u32(mul_f(u2f(a), u2f({:#010x}u)));",
            f.sub_scale_bits()
        );
        let _ = writeln!(out, "  }}");
    }
    let _ = writeln!(
        out,
        "  const u32 r = (a + {:#x}u + ((a >> {shift}) & 1u)) >> {shift};",
        (1u32 << (shift - 1)) - 1
    );
    let _ = writeln!(out, "  return sign | (r - {:#x}u);", f.rebias());
    let _ = writeln!(out, "}}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::minifloat;

    fn host_fmt(f: Format) -> minifloat::MiniFloat {
        match f.tag {
            "f16" => minifloat::F16,
            "bf16" => minifloat::BF16,
            "e4m3" => minifloat::E4M3,
            _ => minifloat::E5M2,
        }
    }

    /// The generated decoder, executed in Rust.
    fn emulate_decode(f: Format, h: u32) -> f32 {
        if f.same_range_as_f32() {
            return f32::from_bits(h << 16);
        }
        let sign = (h & f.sign_bit()) << (31 - f.e - f.m);
        let e = (h >> f.m) & f.exp_mask();
        let m = h & f.man_mask();
        let shift = 23 - f.m;
        if f.ieee && e == f.exp_mask() {
            return f32::from_bits(sign | 0x7f80_0000 | (m << shift));
        }
        if !f.ieee && e == f.exp_mask() && m == f.man_mask() {
            return f32::from_bits(0x7fff_ffff);
        }
        if e == 0 {
            return f32::from_bits(sign | (m as f32 * f32::from_bits(f.min_sub_bits())).to_bits());
        }
        f32::from_bits(sign | ((e + (127 - f.bias()) as u32) << 23) | (m << shift))
    }

    /// The generated encoder, executed in Rust.
    fn emulate_encode(f: Format, x: f32) -> u32 {
        let u = x.to_bits();
        let sign = (u >> 31) << (f.e + f.m);
        let a = u & 0x7fff_ffff;
        if a > 0x7f80_0000 {
            return f.nan_bits();
        }
        if a >= f.overflow_threshold_bits() {
            return sign | f.overflow_bits();
        }
        let shift = 23 - f.m;
        if !f.same_range_as_f32() && a < f.min_normal_bits() {
            let s = f32::from_bits(a) * f32::from_bits(f.sub_scale_bits());
            return sign | s.round_ties_even() as u32;
        }
        let r = (a + ((1 << (shift - 1)) - 1) + ((a >> shift) & 1)) >> shift;
        sign | (r - f.rebias())
    }

    #[test]
    fn decoder_matches_host_for_every_encoding() {
        for f in [F16, BF16, E4M3, E5M2] {
            let h = host_fmt(f);
            for bits in 0..(2 * f.sign_bit()) {
                let mine = f64::from(emulate_decode(f, bits));
                let host = h.decode(bits as u16);
                assert!(
                    mine.to_bits() == host.to_bits() || (mine.is_nan() && host.is_nan()),
                    "{} {bits:#x}: {mine} vs {host}",
                    f.tag
                );
            }
        }
    }

    #[test]
    fn encoder_matches_host_on_midpoints_and_a_sweep() {
        for f in [F16, BF16, E4M3, E5M2] {
            let h = host_fmt(f);
            let check = |x: f32| {
                let mine = emulate_encode(f, x);
                let host = u32::from(h.encode(f64::from(x)));
                assert_eq!(mine, host, "{} {x:e} ({:#x})", f.tag, x.to_bits());
            };
            // Every midpoint between neighbours, and the floats on either side of it.
            for lo in 0..f.max_finite_bits() + 1 {
                for sign in [0, f.sign_bit()] {
                    let a = f64::from(emulate_decode(f, lo | sign));
                    let b = f64::from(emulate_decode(f, (lo + 1) | sign));
                    if a.is_nan() || b.is_nan() {
                        continue;
                    }
                    let mid = ((a + b) / 2.0) as f32;
                    for x in [
                        mid,
                        f32::from_bits(mid.to_bits() + 1),
                        f32::from_bits(mid.to_bits().wrapping_sub(1)),
                        a as f32,
                    ] {
                        check(x);
                    }
                }
            }
            // A sweep over all f32 bit patterns.
            let mut bits = 0u32;
            while let Some(next) = bits.checked_add(65_521) {
                check(f32::from_bits(bits));
                bits = next;
            }
            for x in [
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                f32::MAX,
                f32::MIN_POSITIVE,
                f32::from_bits(1),
            ] {
                check(x);
            }
        }
    }

    #[test]
    fn format_constants() {
        assert_eq!(f32::from_bits(F16.overflow_threshold_bits()), 65520.0);
        assert_eq!(f32::from_bits(E4M3.overflow_threshold_bits()), 464.0);
        assert_eq!(f32::from_bits(E5M2.overflow_threshold_bits()), 61440.0);
        assert_eq!(BF16.overflow_threshold_bits(), 0x7f7f_8000);
        assert_eq!(E4M3.overflow_bits(), 0x7e);
        assert_eq!(E5M2.overflow_bits(), 0x7b);
        assert_eq!(F16.overflow_bits(), 0x7c00);
        assert_eq!(BF16.overflow_bits(), 0x7f80);
    }
}
