//! Element types as `ncclDataType_t` knows them, and exact host-side conversion between `f64`
//! and each type's little-endian bytes (round to nearest, ties to even).
//!
//! The 8- and 16-bit floating formats share one generic encoder ([`MiniFloat`]); the unit tests
//! check it against the `half` crate for binary16 and bfloat16 and against the fp8 tables.

/// An element type; the discriminant is the `ncclDataType_t` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Half,
    Float,
    Double,
    Bfloat16,
    F8E4M3,
    F8E5M2,
}

/// A small binary floating format: `exp_bits` exponent bits, `man_bits` stored mantissa bits.
/// `ieee` formats have infinities and reserve the top exponent; the fp8 e4m3 ("FN") format has
/// no infinity and a single NaN mantissa (all ones) in its top exponent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniFloat {
    pub exp_bits: u32,
    pub man_bits: u32,
    pub ieee: bool,
    /// Overflow saturates to the largest finite value (CUDA's `__NV_SATFINITE` for fp8)
    /// instead of becoming infinity (IEEE binary16 / bfloat16).
    pub saturate: bool,
}

pub const F16: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 10,
    ieee: true,
    saturate: false,
};
pub const BF16: MiniFloat = MiniFloat {
    exp_bits: 8,
    man_bits: 7,
    ieee: true,
    saturate: false,
};
pub const E4M3: MiniFloat = MiniFloat {
    exp_bits: 4,
    man_bits: 3,
    ieee: false,
    saturate: true,
};
pub const E5M2: MiniFloat = MiniFloat {
    exp_bits: 5,
    man_bits: 2,
    ieee: true,
    saturate: true,
};

impl MiniFloat {
    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    fn exp_mask(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    fn sign_bit(self) -> u32 {
        1 << (self.exp_bits + self.man_bits)
    }

    /// The bit pattern of the largest finite value.
    pub fn max_finite_bits(self) -> u32 {
        if self.ieee {
            ((self.exp_mask() - 1) << self.man_bits) | ((1 << self.man_bits) - 1)
        } else {
            // Top exponent is usable except for the all-ones mantissa (NaN).
            (self.exp_mask() << self.man_bits) | ((1 << self.man_bits) - 2)
        }
    }

    fn nan_bits(self) -> u32 {
        if self.ieee {
            (self.exp_mask() << self.man_bits) | (1 << (self.man_bits - 1))
        } else {
            (self.exp_mask() << self.man_bits) | ((1 << self.man_bits) - 1)
        }
    }

    /// The nearest value to `v`, ties to even, as a bit pattern.
    pub fn encode(self, v: f64) -> u32 {
        if v.is_nan() {
            return self.nan_bits();
        }
        let sign = if v.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let a = v.abs();
        let overflow = || {
            if self.saturate || !self.ieee {
                sign | self.max_finite_bits()
            } else {
                sign | (self.exp_mask() << self.man_bits)
            }
        };
        if a.is_infinite() {
            return overflow();
        }
        if a == 0.0 {
            return sign;
        }
        let m = self.man_bits as i32;
        let min_exp = 1 - self.bias();
        // Binary exponent of a: a = 1.f * 2^e (f64 subnormals are far below every format here).
        let e_raw = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let e = e_raw.max(min_exp);
        // Units of the last place at exponent e; the scaling is exact in f64. 2^(m - e) is
        // built from its bits (m - e stays within f64's normal exponents for every format
        // here): `powi` took a seventh of a `-d all` check's time.
        let scale = f64::from_bits(((m - e + 1023) as u64) << 52);
        let q = a * scale;
        if q >= (1u64 << 62) as f64 {
            return overflow();
        }
        let r = q.round_ties_even() as u64;
        let bits = if e_raw < min_exp {
            // Subnormal: r <= 2^m; r == 2^m lands exactly on the smallest normal encoding.
            r as u32
        } else {
            let (e, r) = if r == 1u64 << (m + 1) {
                (e + 1, r >> 1)
            } else {
                (e, r)
            };
            let biased = e + self.bias();
            if biased > self.exp_mask() as i32 {
                return overflow();
            }
            ((biased as u32) << self.man_bits) | (r as u32 - (1 << self.man_bits))
        };
        let max = self.max_finite_bits();
        if bits > max {
            return overflow();
        }
        sign | bits
    }

    /// The value of a bit pattern.
    pub fn decode(self, bits: u32) -> f64 {
        let neg = bits & self.sign_bit() != 0;
        let exp = (bits >> self.man_bits) & self.exp_mask();
        let man = bits & ((1 << self.man_bits) - 1);
        let m = self.man_bits as i32;
        let mag = if exp == self.exp_mask() && self.ieee {
            if man == 0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        } else if !self.ieee && exp == self.exp_mask() && man == (1 << self.man_bits) - 1 {
            f64::NAN
        } else if exp == 0 {
            man as f64 * 2f64.powi(1 - self.bias() - m)
        } else {
            (man as f64 + (1u64 << m) as f64) * 2f64.powi(exp as i32 - self.bias() - m)
        };
        if neg {
            -mag
        } else {
            mag
        }
    }
}

/// The kind of arithmetic a type does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Signed,
    Unsigned,
    Float,
}

impl Dtype {
    pub const ALL: [Dtype; 12] = [
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Half,
        Dtype::Float,
        Dtype::Double,
        Dtype::Bfloat16,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
    ];

    /// The `ncclDataType_t` value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The name nccl-tests prints.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Half => "half",
            Dtype::Float => "float",
            Dtype::Double => "double",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::F8E4M3 => "f8e4m3",
            Dtype::F8E5M2 => "f8e5m2",
        }
    }

    /// Parses a name (nccl-tests names plus the usual aliases).
    pub fn parse(s: &str) -> Option<Dtype> {
        let t = match s.to_ascii_lowercase().as_str() {
            "int8" | "char" => Dtype::Int8,
            "uint8" => Dtype::Uint8,
            "int32" | "int" => Dtype::Int32,
            "uint32" => Dtype::Uint32,
            "int64" => Dtype::Int64,
            "uint64" => Dtype::Uint64,
            "half" | "float16" | "fp16" => Dtype::Half,
            "float" | "float32" | "fp32" => Dtype::Float,
            "double" | "float64" | "fp64" => Dtype::Double,
            "bfloat16" | "bf16" => Dtype::Bfloat16,
            "f8e4m3" | "fp8e4m3" | "float8e4m3" => Dtype::F8E4M3,
            "f8e5m2" | "fp8e5m2" | "float8e5m2" => Dtype::F8E5M2,
            _ => return None,
        };
        Some(t)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::Int8 | Dtype::Uint8 | Dtype::F8E4M3 | Dtype::F8E5M2 => 1,
            Dtype::Half | Dtype::Bfloat16 => 2,
            Dtype::Int32 | Dtype::Uint32 | Dtype::Float => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Double => 8,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Dtype::Int8 | Dtype::Int32 | Dtype::Int64 => Kind::Signed,
            Dtype::Uint8 | Dtype::Uint32 | Dtype::Uint64 => Kind::Unsigned,
            _ => Kind::Float,
        }
    }

    /// Significand bits including the implicit one (floating types only).
    pub fn precision(self) -> Option<u32> {
        match self {
            Dtype::Half => Some(11),
            Dtype::Float => Some(24),
            Dtype::Double => Some(53),
            Dtype::Bfloat16 => Some(8),
            Dtype::F8E4M3 => Some(4),
            Dtype::F8E5M2 => Some(3),
            _ => None,
        }
    }

    fn mini(self) -> Option<MiniFloat> {
        match self {
            Dtype::Half => Some(F16),
            Dtype::Bfloat16 => Some(BF16),
            Dtype::F8E4M3 => Some(E4M3),
            Dtype::F8E5M2 => Some(E5M2),
            _ => None,
        }
    }

    /// Writes the element nearest to `v` into `out[..self.size()]` (little endian).
    /// Integer types take `v` truncated toward zero and wrapped to the type's width.
    pub fn encode(self, v: f64, out: &mut [u8]) {
        let n = self.size();
        let bytes: [u8; 8] = match self {
            Dtype::Float => u64::from((v as f32).to_bits()).to_le_bytes(),
            Dtype::Double => v.to_bits().to_le_bytes(),
            Dtype::Int8 | Dtype::Int32 | Dtype::Int64 => (v as i64).to_le_bytes(),
            Dtype::Uint8 | Dtype::Uint32 | Dtype::Uint64 => {
                if v < 0.0 {
                    (v as i64).to_le_bytes()
                } else {
                    (v as u64).to_le_bytes()
                }
            }
            _ => match self.mini() {
                Some(f) => u64::from(f.encode(v)).to_le_bytes(),
                None => [0; 8],
            },
        };
        out[..n].copy_from_slice(&bytes[..n]);
    }

    /// The value held in `b[..self.size()]`.
    pub fn decode(self, b: &[u8]) -> f64 {
        let mut raw = [0u8; 8];
        let n = self.size();
        raw[..n].copy_from_slice(&b[..n]);
        let u = u64::from_le_bytes(raw);
        match self {
            Dtype::Int8 => f64::from(u as u8 as i8),
            Dtype::Uint8 => f64::from(u as u8),
            Dtype::Int32 => f64::from(u as u32 as i32),
            Dtype::Uint32 => f64::from(u as u32),
            Dtype::Int64 => (u as i64) as f64,
            Dtype::Uint64 => u as f64,
            Dtype::Float => f64::from(f32::from_bits(u as u32)),
            Dtype::Double => f64::from_bits(u),
            _ => match self.mini() {
                Some(f) => f.decode(u as u32),
                None => f64::NAN,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn f16_decode_matches_half_for_every_pattern() {
        for bits in 0..=u16::MAX {
            let ours = F16.decode(u32::from(bits));
            let theirs = f16::from_bits(bits).to_f64();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{bits:#x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#x}");
            }
        }
    }

    #[test]
    fn bf16_decode_matches_half_for_every_pattern() {
        for bits in 0..=u16::MAX {
            let ours = BF16.decode(u32::from(bits));
            let theirs = bf16::from_bits(bits).to_f64();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{bits:#x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#x}");
            }
        }
    }

    /// Values at and between consecutive representable numbers (midpoints test ties-to-even).
    fn probes(f: MiniFloat, limit: u32) -> Vec<f64> {
        let mut v = Vec::new();
        for bits in 0..limit {
            let a = f.decode(bits);
            let b = f.decode(bits + 1);
            if a.is_finite() && b.is_finite() {
                v.extend([a, -a, (a + b) / 2.0, -(a + b) / 2.0, a + (b - a) * 0.25]);
                v.push(a + (b - a) * 0.75);
            }
        }
        v
    }

    #[test]
    fn f16_encode_matches_half() {
        for x in probes(F16, 0x7bff) {
            assert_eq!(F16.encode(x), u32::from(f16::from_f64(x).to_bits()), "{x}");
        }
        assert_eq!(F16.encode(1e6), 0x7c00);
        assert_eq!(F16.encode(65520.0), 0x7c00); // halfway to 2^16 rounds up to inf
        assert_eq!(F16.encode(65519.0), 0x7bff);
    }

    #[test]
    fn bf16_encode_matches_half_from_f32() {
        // Probe through f32 values so `half` cannot double-round.
        for x in probes(BF16, 0x7f7f) {
            let xf = x as f32;
            assert_eq!(
                BF16.encode(f64::from(xf)),
                u32::from(bf16::from_f32(xf).to_bits()),
                "{x}"
            );
        }
    }

    #[test]
    fn fp8_tables() {
        assert_eq!(E4M3.decode(0x7e), 448.0);
        assert!(E4M3.decode(0x7f).is_nan());
        assert!(E4M3.decode(0xff).is_nan());
        assert_eq!(E4M3.decode(0x08), 2f64.powi(-6));
        assert_eq!(E4M3.decode(0x01), 2f64.powi(-9));
        assert_eq!(E4M3.decode(0x40), 2.0);
        assert_eq!(E4M3.decode(0xb8), -1.0);
        assert_eq!(E5M2.decode(0x7b), 57344.0);
        assert_eq!(E5M2.decode(0x7c), f64::INFINITY);
        assert!(E5M2.decode(0x7d).is_nan());
        assert_eq!(E5M2.decode(0x01), 2f64.powi(-16));
        assert_eq!(E5M2.decode(0x40), 2.0);
        // Saturation (satfinite) and ties to even.
        assert_eq!(E4M3.encode(1000.0), 0x7e);
        assert_eq!(E4M3.encode(-1000.0), 0xfe);
        assert_eq!(E5M2.encode(1e9), 0x7b);
        assert_eq!(E4M3.encode(17.0), E4M3.encode(16.0)); // 17 is a tie: 16 (even) wins
        assert_eq!(E4M3.encode(19.0), E4M3.encode(20.0)); // tie between 18 and 20 -> 20
        assert_eq!(E5M2.encode(9.0), E5M2.encode(8.0));
        assert_eq!(E4M3.encode(2f64.powi(-10)), 0x00); // half of the smallest subnormal: tie to 0
        assert_eq!(E4M3.encode(3.0 * 2f64.powi(-10)), 0x02);
    }

    #[test]
    fn fp8_roundtrip_every_pattern() {
        for f in [E4M3, E5M2] {
            for bits in 0..256u32 {
                let v = f.decode(bits);
                if v.is_finite() {
                    assert_eq!(f.encode(v), bits, "{f:?} {bits:#x}");
                }
            }
            // Brute force: the nearest non-negative finite pattern, ties to the even one.
            for x in probes(f, 0x7a) {
                if x.is_sign_negative() {
                    continue;
                }
                let mut best = 0u32;
                for bits in 0..0x80u32 {
                    let (v, b) = (f.decode(bits), f.decode(best));
                    if !v.is_finite() {
                        continue;
                    }
                    let (dv, db) = ((v - x).abs(), (b - x).abs());
                    if dv < db || (dv == db && bits % 2 == 0) {
                        best = bits;
                    }
                }
                assert_eq!(f.encode(x), best, "{f:?} {x}");
            }
        }
    }

    #[test]
    fn integers_and_wide_floats() {
        let mut b = [0u8; 8];
        for t in Dtype::ALL {
            for v in [-5.0, 0.0, 3.0, 12.0] {
                if v < 0.0 && t.kind() == Kind::Unsigned {
                    continue;
                }
                t.encode(v, &mut b);
                assert_eq!(t.decode(&b), v, "{}", t.name());
            }
        }
        Dtype::Int8.encode(-1.0, &mut b);
        assert_eq!(b[0], 0xff);
        assert_eq!(Dtype::parse("bf16"), Some(Dtype::Bfloat16));
        assert_eq!(Dtype::F8E5M2.code(), 11);
        assert_eq!(Dtype::Bfloat16.code(), 9);
    }
}
