//! Inputs built so every result is exact, and the expected outputs.
//!
//! Every input element is a small integer chosen from `(seed, rank, index)` by a hash, inside
//! a range picked per data type and reduction so that any order of evaluation gives the exact
//! result in the data type:
//!
//! * sum / avg: non-negative values with `nranks * max <= L` where `L` is the largest integer
//!   up to which the type counts exactly (fp8 e5m2 8, e4m3 16, bfloat16 256, half 2048, 8-bit
//!   integers 100, wider types 2^20); premulsum (scalar 2) uses `L / 2`. Every partial sum is
//!   then exact too.
//! * prod: values 1 or 2, with at most `k` twos per element over all ranks, `2^k` exact.
//! * max / min and pure data movement: values in `[-R, R]` (unsigned `[0, 2R]`).
//!
//! Avg on floating types is `sum(x_i * (1/n))` rounded per term as NCCL computes it: exact
//! when `n` is a power of two; otherwise the check allows a relative error of `(n + 2)` units
//! of roundoff (about `(n + 2) / 2` ulp). Integer avg truncates toward zero.

use crate::coll::{Coll, Counts, Source};
use crate::dtype::{Dtype, Kind};

/// A reduction operator as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    PreMulSum,
}

/// The scalar ccl-perf passes to `ncclRedOpCreatePreMulSum`.
pub const PREMUL_SCALAR: f64 = 2.0;

impl RedOp {
    pub const ALL: [RedOp; 6] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum,
    ];

    /// The name in the `redop` column (nccl-tests prints `mulsum` for PreMulSum).
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::PreMulSum => "mulsum",
        }
    }

    pub fn parse(s: &str) -> Option<RedOp> {
        let o = match s.to_ascii_lowercase().as_str() {
            "sum" => RedOp::Sum,
            "prod" => RedOp::Prod,
            "max" => RedOp::Max,
            "min" => RedOp::Min,
            "avg" => RedOp::Avg,
            "premulsum" | "mulsum" => RedOp::PreMulSum,
            _ => return None,
        };
        Some(o)
    }

    /// The built-in `ncclRedOp_t` value (PreMulSum ops are created at run time).
    pub fn builtin_code(self) -> Option<i32> {
        match self {
            RedOp::Sum => Some(0),
            RedOp::Prod => Some(1),
            RedOp::Max => Some(2),
            RedOp::Min => Some(3),
            RedOp::Avg => Some(4),
            RedOp::PreMulSum => None,
        }
    }
}

/// Largest integer up to which sums stay exact (and below the 0x7b fill byte for 8-bit ints).
fn sum_limit(t: Dtype) -> u64 {
    match t {
        Dtype::Int8 | Dtype::Uint8 => 100,
        Dtype::F8E5M2 => 8,
        Dtype::F8E4M3 => 16,
        Dtype::Bfloat16 => 256,
        Dtype::Half => 2048,
        _ => 1 << 20,
    }
}

/// Most factors of two a product may hold.
fn prod_twos(t: Dtype) -> usize {
    match t {
        Dtype::Int8 | Dtype::Uint8 => 6,
        Dtype::Int32 | Dtype::Uint32 => 30,
        Dtype::Int64 | Dtype::Uint64 => 62,
        Dtype::F8E4M3 => 8,
        Dtype::F8E5M2 | Dtype::Half => 15,
        Dtype::Float | Dtype::Double | Dtype::Bfloat16 => 100,
    }
}

/// Half-range of max/min and data-movement values.
fn spread(t: Dtype) -> u64 {
    match t {
        Dtype::Int8 | Dtype::Uint8 => 50,
        Dtype::F8E5M2 => 8,
        Dtype::F8E4M3 => 16,
        Dtype::Bfloat16 => 128,
        _ => 1000,
    }
}

/// The byte every checked output is filled with before the check run: in no type is it a
/// value any input or result here can take.
pub const FILL_BYTE: u8 = 0x7b;

/// The input generator of one (type, operator, size) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gen {
    pub dtype: Dtype,
    pub op: Option<RedOp>,
    pub nranks: usize,
    pub seed: u64,
}

fn mix(seed: u64, rank: usize, idx: usize) -> u64 {
    let mut h = (idx as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (((rank as u64) << 24) ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d))
            .wrapping_mul(0xd1b5_4a32_d192_ed03);
    h ^= h >> 31;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 29)
}

/// `h` mapped onto `0..k` by its high bits: a multiply where `%` divides (the division was a
/// visible share of building 512 MiB of 8-bit inputs).
fn below(h: u64, k: u64) -> u64 {
    ((u128::from(h) * u128::from(k)) >> 64) as u64
}

impl Gen {
    /// Input element `idx` of `rank`.
    pub fn value(&self, rank: usize, idx: usize) -> f64 {
        let n = self.nranks.max(1);
        let h = mix(self.seed, rank, idx);
        match self.op {
            Some(RedOp::Sum | RedOp::Avg | RedOp::PreMulSum) => {
                let lim = match self.op {
                    Some(RedOp::PreMulSum) => sum_limit(self.dtype) / 2,
                    _ => sum_limit(self.dtype),
                };
                let m = (lim / n as u64).min(1000);
                if m >= 1 {
                    below(h, m + 1) as f64
                } else if (idx + rank) % n == 0 {
                    1.0
                } else {
                    0.0
                }
            }
            Some(RedOp::Prod) => {
                let period = n.div_ceil(prod_twos(self.dtype)).max(1);
                if (idx + rank) % period == 0 && h & 1 == 1 {
                    2.0
                } else {
                    1.0
                }
            }
            Some(RedOp::Max | RedOp::Min) | None => {
                let r = spread(self.dtype);
                let v = below(h, 2 * r + 1) as f64;
                if self.dtype.kind() == Kind::Unsigned {
                    v
                } else {
                    v - r as f64
                }
            }
        }
    }

    /// The exact result of the reduction over all ranks of element `idx`, before rounding
    /// to the data type.
    pub fn reduced(&self, idx: usize) -> f64 {
        let n = self.nranks.max(1);
        let vals = (0..n).map(|r| self.value(r, idx));
        match self.op {
            Some(RedOp::Sum) | None => vals.sum(),
            Some(RedOp::Prod) => vals.product(),
            Some(RedOp::Max) => vals.fold(f64::NEG_INFINITY, f64::max),
            Some(RedOp::Min) => vals.fold(f64::INFINITY, f64::min),
            Some(RedOp::PreMulSum) => vals.map(|v| v * PREMUL_SCALAR).sum(),
            Some(RedOp::Avg) => {
                let s: f64 = vals.sum();
                if self.dtype.kind() == Kind::Float {
                    s / n as f64
                } else {
                    (s / n as f64).trunc()
                }
            }
        }
    }

    /// Relative tolerance of the check (0: bit-exact).
    pub fn tolerance(&self) -> f64 {
        let n = self.nranks.max(1);
        match (self.op, self.dtype.precision()) {
            (Some(RedOp::Avg), Some(p)) if !n.is_power_of_two() => {
                (n as f64 + 2.0) * 2f64.powi(-(p as i32))
            }
            _ => 0.0,
        }
    }

    /// The send-buffer contents of `rank`: `count` encoded elements.
    pub fn input(&self, rank: usize, count: usize) -> Vec<u8> {
        let ts = self.dtype.size();
        let mut out = vec![0u8; count * ts];
        par_elements(&mut out, ts, |i, chunk| {
            self.dtype.encode(self.value(rank, i), chunk)
        });
        out
    }

    /// The encoded reduction results over `len` indices (shared by all local ranks).
    pub fn reduced_vec(&self, len: usize) -> Vec<u8> {
        let ts = self.dtype.size();
        let mut out = vec![0u8; len * ts];
        par_elements(&mut out, ts, |i, chunk| {
            self.dtype.encode(self.reduced(i), chunk)
        });
        out
    }
}

/// Encoded inputs and reduction results, built once at the largest count a sweep asks for and
/// served as prefixes (an element depends on its rank and index, never on the count). A
/// `-d all -o all` sweep up to 1 GiB otherwise spends most of its time on the host building the
/// same values again for every size, placement and rank.
#[derive(Debug, Default)]
pub struct Prefixes {
    /// Most recently used last. A sweep now uses one generator per type and operator (the
    /// timed runs write zeros), so one entry would do; two are kept so a caller alternating
    /// two generators does not rebuild 512 MiB on every call.
    entries: Vec<(Gen, Prefix)>,
}

#[derive(Debug, Default)]
struct Prefix {
    inputs: Vec<Vec<u8>>,
    reduced: Vec<u8>,
}

impl Prefixes {
    const KEEP: usize = 2;

    fn entry(&mut self, g: &Gen) -> &mut Prefix {
        match self.entries.iter().position(|(k, _)| k == g) {
            Some(i) => {
                let e = self.entries.remove(i);
                self.entries.push(e);
            }
            None => {
                if self.entries.len() >= Self::KEEP {
                    self.entries.remove(0);
                }
                self.entries.push((*g, Prefix::default()));
            }
        }
        let last = self.entries.len() - 1;
        &mut self.entries[last].1
    }

    /// Makes sure the inputs of `ranks` hold at least `count` elements (built for `at_least`
    /// when they must be built).
    pub fn prepare_inputs(
        &mut self,
        g: &Gen,
        ranks: impl IntoIterator<Item = usize>,
        count: usize,
        at_least: usize,
    ) {
        let ts = g.dtype.size();
        let e = self.entry(g);
        for r in ranks {
            if e.inputs.len() <= r {
                e.inputs.resize_with(r + 1, Vec::new);
            }
            if e.inputs[r].len() < count * ts {
                e.inputs[r] = g.input(r, count.max(at_least));
            }
        }
    }

    /// The first `count` encoded inputs of `rank` ([`Self::prepare_inputs`] first).
    pub fn input(&self, g: &Gen, rank: usize, count: usize) -> Option<&[u8]> {
        let (_, e) = self.entries.iter().find(|(k, _)| k == g)?;
        e.inputs.get(rank)?.get(..count * g.dtype.size())
    }

    /// Every rank's inputs, each `count` elements long (empty where not prepared).
    pub fn inputs(&self, g: &Gen, count: usize) -> Vec<&[u8]> {
        (0..g.nranks)
            .map(|r| self.input(g, r, count).unwrap_or(&[]))
            .collect()
    }

    /// Makes sure the reduction results hold at least `len` elements (built for `at_least`).
    pub fn prepare_reduced(&mut self, g: &Gen, len: usize, at_least: usize) {
        let e = self.entry(g);
        if e.reduced.len() < len * g.dtype.size() {
            e.reduced = g.reduced_vec(len.max(at_least));
        }
    }

    /// The first `len` encoded reduction results ([`Self::prepare_reduced`] first).
    pub fn reduced(&self, g: &Gen, len: usize) -> Option<&[u8]> {
        let (_, e) = self.entries.iter().find(|(k, _)| k == g)?;
        e.reduced.get(..len * g.dtype.size())
    }
}

/// What one check of one rank's output found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckResult {
    pub wrong: u64,
    /// First wrong element: (index, got, expected).
    pub first: Option<(usize, u64, u64)>,
}

/// Expected output bytes of `rank` (None when the rank has no defined output). `inputs`: every
/// rank's encoded send buffer where the output copies inputs (elements beyond them are
/// generated), `reduced`: the encoded reduction results.
pub fn expected(
    coll: Coll,
    g: &Gen,
    rank: usize,
    root: usize,
    c: &Counts,
    reduced: &[u8],
    inputs: &[&[u8]],
) -> Option<Vec<u8>> {
    if !coll.has_output(rank, root) {
        return None;
    }
    let ts = g.dtype.size();
    let mut out = vec![0u8; c.recv * ts];
    // Within a block of `param` elements every source is contiguous (see `Coll::source`):
    // copy whole blocks from what is at hand, build the rest element by element.
    let block = c.param.max(1);
    let mut built = Vec::new();
    for (b, part) in out.chunks_mut(block * ts).enumerate() {
        let k0 = b * block;
        let len = part.len();
        let from = match coll.source(rank, g.nranks, root, c.param, k0) {
            Source::Reduced(i) => reduced.get(i * ts..i * ts + len)?,
            Source::Input { rank: r, idx } => {
                match inputs.get(r).and_then(|v| v.get(idx * ts..idx * ts + len)) {
                    Some(s) => s,
                    None => {
                        built.push(k0);
                        continue;
                    }
                }
            }
        };
        part.copy_from_slice(from);
    }
    for k0 in built {
        let end = ((k0 + block) * ts).min(out.len());
        par_elements(&mut out[k0 * ts..end], ts, |k, chunk| {
            if let Source::Input { rank: r, idx } =
                coll.source(rank, g.nranks, root, c.param, k0 + k)
            {
                g.dtype.encode(g.value(r, idx), chunk)
            }
        });
    }
    Some(out)
}

/// Elements per thread below which one thread does all the work.
const PAR_MIN: usize = 1 << 16;

/// Calls `f(index, element bytes)` for every `ts`-byte element of `out`, on all cores for
/// large buffers: checking a 1 GiB result element by element on one core takes seconds.
fn par_elements(out: &mut [u8], ts: usize, f: impl Fn(usize, &mut [u8]) + Sync) {
    let n = out.len() / ts.max(1);
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(n / PAR_MIN)
        .max(1);
    let per = n.div_ceil(threads) * ts;
    if threads == 1 || per == 0 {
        for (i, chunk) in out.chunks_exact_mut(ts).enumerate() {
            f(i, chunk);
        }
        return;
    }
    std::thread::scope(|s| {
        for (t, part) in out.chunks_mut(per).enumerate() {
            let f = &f;
            s.spawn(move || {
                let base = t * per / ts;
                for (i, chunk) in part.chunks_exact_mut(ts).enumerate() {
                    f(base + i, chunk);
                }
            });
        }
    });
}

/// Counts the elements of `got` that differ from `want`.
pub fn compare(dtype: Dtype, got: &[u8], want: &[u8], rel_tol: f64) -> CheckResult {
    let ts = dtype.size();
    let mut res = CheckResult::default();
    if got == want {
        return res;
    }
    let word = |b: &[u8]| {
        let mut raw = [0u8; 8];
        raw[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(raw)
    };
    for (i, (g, w)) in got.chunks_exact(ts).zip(want.chunks_exact(ts)).enumerate() {
        if g == w {
            continue;
        }
        if rel_tol > 0.0 {
            let (gv, wv) = (dtype.decode(g), dtype.decode(w));
            if (gv - wv).abs() <= rel_tol * wv.abs() {
                continue;
            }
        }
        res.wrong += 1;
        if res.first.is_none() {
            res.first = Some((i, word(g), word(w)));
        }
    }
    if got.len() != want.len() {
        res.wrong += (got.len().abs_diff(want.len()) / ts) as u64;
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Emulates NCCL's arithmetic in the data type: terms in any order, each step rounded.
    fn device_reduce(g: &Gen, idx: usize, order: &[usize]) -> f64 {
        let t = g.dtype;
        let round = |v: f64| {
            let mut b = [0u8; 8];
            t.encode(v, &mut b);
            t.decode(&b)
        };
        let n = g.nranks as f64;
        let term = |r: usize| -> f64 {
            let x = g.value(r, idx);
            match g.op {
                Some(RedOp::PreMulSum) => round(x * round(PREMUL_SCALAR)),
                Some(RedOp::Avg) if t.kind() == Kind::Float => round(x * round(1.0 / n)),
                _ => x,
            }
        };
        let mut acc = term(order[0]);
        for &r in &order[1..] {
            let x = term(r);
            acc = round(match g.op {
                Some(RedOp::Prod) => acc * x,
                Some(RedOp::Max) => acc.max(x),
                Some(RedOp::Min) => acc.min(x),
                _ => acc + x,
            });
        }
        if g.op == Some(RedOp::Avg) && t.kind() != Kind::Float {
            acc = (acc / n).trunc();
        }
        acc
    }

    #[test]
    fn inputs_are_exact_for_every_type_op_and_order() {
        let mut b = [0u8; 8];
        for t in Dtype::ALL {
            for op in RedOp::ALL {
                for n in [1usize, 2, 3, 4, 7, 8, 16] {
                    let g = Gen {
                        dtype: t,
                        op: Some(op),
                        nranks: n,
                        seed: 3,
                    };
                    let fwd: Vec<usize> = (0..n).collect();
                    let rev: Vec<usize> = (0..n).rev().collect();
                    for idx in 0..300 {
                        for r in 0..n {
                            let v = g.value(r, idx);
                            t.encode(v, &mut b);
                            assert_eq!(t.decode(&b), v, "input not representable");
                            if t.size() == 1 {
                                assert_ne!(b[0], FILL_BYTE, "{} {op:?} input", t.name());
                            }
                        }
                        let want = g.reduced(idx);
                        t.encode(want, &mut b);
                        let want_t = t.decode(&b);
                        if t.size() == 1 {
                            assert_ne!(b[0], FILL_BYTE, "{} {op:?} n={n}", t.name());
                        }
                        for order in [&fwd, &rev] {
                            let got = device_reduce(&g, idx, order);
                            let tol = g.tolerance();
                            if tol == 0.0 {
                                assert_eq!(got, want_t, "{} {op:?} n={n} idx={idx}", t.name());
                                assert_eq!(want, want_t, "{} {op:?} n={n}", t.name());
                            } else {
                                assert!(
                                    (got - want_t).abs() <= tol * want_t.abs(),
                                    "{} {op:?} n={n} got {got} want {want_t}",
                                    t.name()
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn inputs_vary_with_rank_index_and_seed() {
        for t in Dtype::ALL {
            for op in [None, Some(RedOp::Sum), Some(RedOp::Max), Some(RedOp::Prod)] {
                let g = Gen {
                    dtype: t,
                    op,
                    nranks: 2,
                    seed: 0,
                };
                let h = Gen { seed: 1, ..g };
                let a: Vec<f64> = (0..64).map(|i| g.value(0, i)).collect();
                let b: Vec<f64> = (0..64).map(|i| g.value(1, i)).collect();
                let c: Vec<f64> = (0..64).map(|i| h.value(0, i)).collect();
                assert_ne!(a, b);
                assert_ne!(a, c);
                assert!(a.windows(2).any(|w| w[0] != w[1]));
            }
        }
        // A product must differ from the max somewhere (two factors of two meet).
        let g = Gen {
            dtype: Dtype::Int8,
            op: Some(RedOp::Prod),
            nranks: 2,
            seed: 0,
        };
        assert!((0..64).any(|i| g.reduced(i) == 4.0));
    }

    #[test]
    fn expected_layouts_and_compare() {
        let g = Gen {
            dtype: Dtype::Float,
            op: None,
            nranks: 3,
            seed: 1,
        };
        let c = Coll::AllGather.counts(48, 3, 4);
        let want = expected(Coll::AllGather, &g, 1, 0, &c, &[], &[]).unwrap_or_default();
        let mut cat = Vec::new();
        for r in 0..3 {
            cat.extend(g.input(r, c.param));
        }
        assert_eq!(want, cat);
        let mut bad = want.clone();
        bad[5] ^= 1;
        bad[40] ^= 1;
        let res = compare(Dtype::Float, &bad, &want, 0.0);
        assert_eq!(res.wrong, 2);
        assert_eq!(res.first.map(|f| f.0), Some(1));
        assert_eq!(compare(Dtype::Float, &want, &want, 0.0).wrong, 0);
        assert!(expected(Coll::Reduce, &g, 1, 0, &c, &[], &[]).is_none());
    }

    /// Cached prefixes (built at a larger count) give exactly what building at each size gives,
    /// for every operation, rank and root, with and without the inputs at hand.
    #[test]
    fn cached_prefixes_give_the_same_expected_outputs() {
        let n = 3;
        for coll in Coll::ALL {
            for (dtype, op) in [
                (Dtype::Float, Some(RedOp::Sum)),
                (Dtype::Bfloat16, Some(RedOp::Prod)),
                (Dtype::Int8, None),
            ] {
                let g = Gen {
                    dtype,
                    op: if coll.has_redop() { op } else { None },
                    nranks: n,
                    seed: 7,
                };
                let big = coll.counts(3000 * dtype.size() * n, n, dtype.size());
                let mut p = Prefixes::default();
                for size in [0usize, 24, 96, 1200] {
                    let c = coll.counts(size * dtype.size(), n, dtype.size());
                    let len = coll.reduced_len(&c);
                    p.prepare_reduced(&g, len, coll.reduced_len(&big));
                    p.prepare_inputs(&g, 0..n, c.send, big.send);
                    let fresh_reduced = g.reduced_vec(len);
                    assert_eq!(p.reduced(&g, len), Some(&fresh_reduced[..]));
                    for r in 0..n {
                        assert_eq!(p.input(&g, r, c.send), Some(&g.input(r, c.send)[..]));
                        let root = (r + 1) % n;
                        let fresh = expected(coll, &g, r, root, &c, &fresh_reduced, &[]);
                        let inputs = p.inputs(&g, c.send);
                        let cached = expected(coll, &g, r, root, &c, &fresh_reduced, &inputs);
                        assert_eq!(
                            fresh,
                            cached,
                            "{} {dtype:?} rank {r} size {size}",
                            coll.name()
                        );
                    }
                }
            }
        }
    }
}
