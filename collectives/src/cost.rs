//! Latency-bandwidth cost model for choosing an algorithm.
//!
//! A schedule runs as a sequence of steps; a step costs `alpha` (per-step latency: a proxy
//! round, a rendezvous) plus `beta` times the bytes the busiest link of a rank carries in that
//! step. With `S` bytes per rank, `n` ranks, `P` pipeline pieces and `H = 1 + floor(log2(n-1))`
//! the bit tree's height:
//!
//! | algorithm | steps | bytes per step |
//! |---|---|---|
//! | ring AllReduce | `2(n-1)` | `S/n` |
//! | ring AllGather / ReduceScatter | `n-1` | `S` |
//! | ring (chain) Broadcast / Reduce | `P + n - 2` | `S/P` |
//! | double-tree AllReduce | `3H + P - 2` | `3 S/(2P)` (a rank sends up one tree and down to two children in the other) |
//! | tree Broadcast | `P + H - 1` | `2 S/P` (two children) |
//! | tree Reduce | `2H + P - 1` | `2 S/P` (two children fold in) |
//! | direct (all-to-all, gather, scatter, all-gather, broadcast) | `1` | `(n-1) S` |
//! | direct Reduce / ReduceScatter | `n-1` | `S` |
//! | direct AllReduce | `n` | `S/n`, last step `(n-1) S/n` |
//!
//! The tree's extra factor on bytes is what makes rings win for large messages; its `log n`
//! steps make it win for small ones at larger `n`. Direct algorithms are the only choice for
//! AlltoAll / Gather / Scatter; for AllGather / ReduceScatter / Broadcast / Reduce / AllReduce
//! they are not chosen by default because the model ignores incast at the receiving NIC.

use crate::{supports, Algorithm, Collective, Pipeline};

/// Parameters of the cost model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Microseconds of fixed cost per step.
    pub alpha_us: f64,
    /// Microseconds per byte on one link.
    pub beta_us_per_byte: f64,
    /// Element size assumed when turning bytes into pipeline pieces.
    pub elem_bytes: usize,
    pub pipeline: Pipeline,
}

impl CostModel {
    /// 5 us per step (host-driven proxies), 20 GB/s links, 4-byte elements.
    pub const DEFAULT: CostModel = CostModel {
        alpha_us: 5.0,
        beta_us_per_byte: 1.0 / 20_000.0,
        elem_bytes: 4,
        pipeline: Pipeline::DEFAULT,
    };

    /// Modelled time in microseconds, `None` when `algo` does not implement `coll`.
    pub fn estimate(
        &self,
        coll: Collective,
        algo: Algorithm,
        nranks: usize,
        bytes: usize,
    ) -> Option<f64> {
        if !supports(coll, algo) {
            return None;
        }
        if nranks <= 1 {
            return Some(0.0);
        }
        let nf = nranks as f64;
        let s = bytes as f64;
        let p = self.pipeline.pieces(bytes / self.elem_bytes.max(1)).max(1) as f64;
        let h = tree_height(nranks) as f64;
        let step =
            |steps: f64, per_step: f64| steps * (self.alpha_us + per_step * self.beta_us_per_byte);
        use Algorithm as A;
        use Collective as C;
        Some(match (algo, coll) {
            (A::Ring, C::AllReduce) => step(2.0 * (nf - 1.0), s / nf),
            (A::Ring, C::AllGather | C::ReduceScatter) => step(nf - 1.0, s),
            (A::Ring, _) => step(p + nf - 2.0, s / p),
            (A::Tree, C::AllReduce) => step(3.0 * h + p - 2.0, 1.5 * s / p),
            (A::Tree, C::Broadcast { .. }) => step(p + h - 1.0, 2.0 * s / p),
            (A::Tree, _) => step(2.0 * h + p - 1.0, 2.0 * s / p),
            (A::Direct, C::Reduce { .. } | C::ReduceScatter) => step(nf - 1.0, s),
            (A::Direct, C::AllReduce) => step(nf - 1.0, s / nf) + step(1.0, (nf - 1.0) * s / nf),
            (A::Direct, _) => step(1.0, (nf - 1.0) * s),
        })
    }

    /// The cheapest default candidate for `coll` (ties go to the ring).
    pub fn choose(&self, coll: Collective, nranks: usize, bytes: usize) -> Algorithm {
        use Collective as C;
        let candidates: &[Algorithm] = match coll {
            C::AllReduce | C::Broadcast { .. } | C::Reduce { .. } => {
                &[Algorithm::Ring, Algorithm::Tree]
            }
            C::AllGather | C::ReduceScatter => &[Algorithm::Ring],
            C::AlltoAll | C::Gather { .. } | C::Scatter { .. } => &[Algorithm::Direct],
        };
        let mut best = (
            candidates.first().copied().unwrap_or(Algorithm::Direct),
            f64::INFINITY,
        );
        for &a in candidates {
            if let Some(c) = self.estimate(coll, a, nranks, bytes) {
                if c < best.1 {
                    best = (a, c);
                }
            }
        }
        best.0
    }
}

/// [`CostModel::estimate`] with [`CostModel::DEFAULT`].
pub fn estimate_us(coll: Collective, algo: Algorithm, nranks: usize, bytes: usize) -> Option<f64> {
    CostModel::DEFAULT.estimate(coll, algo, nranks, bytes)
}

/// Height of the bit tree over `n >= 2` positions.
pub(crate) fn tree_height(n: usize) -> usize {
    if n < 2 {
        return 0;
    }
    1 + (usize::BITS - 1 - (n - 1).leading_zeros()) as usize
}
