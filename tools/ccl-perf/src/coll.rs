//! The collectives ccl-perf measures and the nccl-tests conventions for each: how a byte size
//! turns into element counts, which bytes `algbw` counts, the `busbw` factor, the in-place
//! buffer layout, and which input element every output element must hold.

/// A measured operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    AlltoAll,
    SendRecv,
    Gather,
    Scatter,
}

/// Element counts of one operation at one size (all in elements of the data type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// The `count` argument of the nccl call (per rank), printed in the `count` column.
    pub param: usize,
    /// Elements each rank's send buffer holds.
    pub send: usize,
    /// Elements each rank's receive buffer holds.
    pub recv: usize,
    /// In place, the send pointer is `recvbuff + rank * send_ip_off` elements.
    pub send_ip_off: usize,
    /// In place, the receive pointer is `recvbuff + rank * recv_ip_off` elements.
    pub recv_ip_off: usize,
}

/// Where an expected output element comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The reduction over all ranks of input element `idx`.
    Reduced(usize),
    /// Input element `idx` of rank `rank`.
    Input { rank: usize, idx: usize },
}

impl Coll {
    pub const ALL: [Coll; 9] = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::Broadcast,
        Coll::Reduce,
        Coll::AlltoAll,
        Coll::SendRecv,
        Coll::Gather,
        Coll::Scatter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AlltoAll => "alltoall",
            Coll::SendRecv => "sendrecv",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
        }
    }

    /// Parses an op name; `all_reduce_perf` style names are accepted too.
    pub fn parse(s: &str) -> Option<Coll> {
        let s = s.strip_suffix("_perf").unwrap_or(s);
        let s = s.replace('-', "_");
        Coll::ALL
            .into_iter()
            .find(|c| c.name() == s || c.name().replace('_', "") == s)
    }

    /// Takes a reduction operator (the `redop` column is `none` otherwise).
    pub fn has_redop(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce)
    }

    /// Takes a root (the `root` column is -1 otherwise).
    pub fn has_root(self) -> bool {
        matches!(
            self,
            Coll::Broadcast | Coll::Reduce | Coll::Gather | Coll::Scatter
        )
    }

    /// Whether the counts scale with the number of ranks (`bytes / (nranks * size)`).
    fn per_rank_split(self) -> bool {
        matches!(
            self,
            Coll::AllGather | Coll::ReduceScatter | Coll::AlltoAll | Coll::Gather | Coll::Scatter
        )
    }

    /// Counts for a nominal size of `bytes` with `nranks` ranks and `tsize`-byte elements.
    ///
    /// all_reduce, broadcast, reduce, sendrecv: count = bytes / tsize on every rank.
    /// all_gather, reduce_scatter, alltoall, gather, scatter: count = bytes / (nranks * tsize)
    /// per rank, so `bytes` is the size of the full (gathered / scattered) buffer.
    pub fn counts(self, bytes: usize, nranks: usize, tsize: usize) -> Counts {
        let n = nranks.max(1);
        let total = bytes / tsize.max(1);
        if !self.per_rank_split() {
            return Counts {
                param: total,
                send: total,
                recv: total,
                send_ip_off: 0,
                recv_ip_off: 0,
            };
        }
        let c = total / n;
        let (send, recv, send_ip_off, recv_ip_off) = match self {
            Coll::AllGather | Coll::Gather => (c, c * n, c, 0),
            Coll::ReduceScatter | Coll::Scatter => (c * n, c, 0, c),
            _ => (c * n, c * n, 0, 0),
        };
        Counts {
            param: c,
            send,
            recv,
            send_ip_off,
            recv_ip_off,
        }
    }

    /// The bytes `algbw` counts (and the `size` column shows) for a given per-rank count.
    pub fn algbw_bytes(self, param: usize, nranks: usize, tsize: usize) -> usize {
        if self.per_rank_split() {
            param * nranks * tsize
        } else {
            param * tsize
        }
    }

    /// busbw = algbw * factor.
    pub fn busbw_factor(self, nranks: usize) -> f64 {
        let n = nranks.max(1) as f64;
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather
            | Coll::ReduceScatter
            | Coll::AlltoAll
            | Coll::Gather
            | Coll::Scatter => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce | Coll::SendRecv => 1.0,
        }
    }

    /// Whether the in-place run is checked. NCCL does not support aliased send and receive
    /// buffers for alltoall and sendrecv (data is overwritten before it is sent; seen with NCCL
    /// 2.28.9 on H200): as nccl-tests, those are timed in place but reported `N/A`.
    pub fn checks_in_place(self) -> bool {
        !matches!(self, Coll::AlltoAll | Coll::SendRecv)
    }

    /// Whether `rank`'s receive buffer is defined after the operation.
    pub fn has_output(self, rank: usize, root: usize) -> bool {
        match self {
            Coll::Reduce | Coll::Gather => rank == root,
            _ => true,
        }
    }

    /// Length of the index space the reduction runs over (0 for pure data movement).
    pub fn reduced_len(self, c: &Counts) -> usize {
        match self {
            Coll::AllReduce | Coll::Reduce => c.param,
            Coll::ReduceScatter => c.send,
            _ => 0,
        }
    }

    /// Where output element `k` of `rank` comes from.
    pub fn source(self, rank: usize, nranks: usize, root: usize, param: usize, k: usize) -> Source {
        let c = param.max(1);
        let n = nranks.max(1);
        match self {
            Coll::AllReduce | Coll::Reduce => Source::Reduced(k),
            Coll::ReduceScatter => Source::Reduced(rank * param + k),
            Coll::Broadcast => Source::Input { rank: root, idx: k },
            Coll::AllGather | Coll::Gather => Source::Input {
                rank: k / c,
                idx: k % c,
            },
            Coll::AlltoAll => Source::Input {
                rank: k / c,
                idx: rank * param + k % c,
            },
            Coll::Scatter => Source::Input {
                rank: root,
                idx: rank * param + k,
            },
            Coll::SendRecv => Source::Input {
                rank: (rank + n - sendrecv_shift(root, n)) % n,
                idx: k,
            },
        }
    }
}

/// How far along the ranks a sendrecv sends (`-r`): rank r sends to r + shift and receives
/// from r - shift; root 0 (the default) means 1, nccl-tests' ring.
pub fn sendrecv_shift(root: usize, nranks: usize) -> usize {
    match root % nranks.max(1) {
        0 => 1,
        k => k,
    }
}

/// The nominal sizes of a sweep, nccl-tests style: from `min` while `<= max`, multiplying by
/// `factor` when it is above 1, else adding `step`.
pub fn sweep(min: usize, max: usize, factor: usize, step: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = min;
    while s <= max {
        v.push(s);
        let next = if factor > 1 {
            s.saturating_mul(factor)
        } else {
            s.saturating_add(step)
        };
        if next <= s {
            break;
        }
        s = next;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_nccl_tests() {
        let c = Coll::AllReduce.counts(1024, 4, 4);
        assert_eq!((c.param, c.send, c.recv), (256, 256, 256));
        let c = Coll::AllGather.counts(1024, 4, 4);
        assert_eq!((c.param, c.send, c.recv, c.send_ip_off), (64, 64, 256, 64));
        let c = Coll::ReduceScatter.counts(1024, 4, 4);
        assert_eq!((c.param, c.send, c.recv, c.recv_ip_off), (64, 256, 64, 64));
        let c = Coll::AlltoAll.counts(1000, 3, 4);
        assert_eq!((c.param, c.send, c.recv), (83, 249, 249));
        let c = Coll::Gather.counts(64, 2, 8);
        assert_eq!((c.param, c.send, c.recv, c.send_ip_off), (4, 4, 8, 4));
        let c = Coll::Scatter.counts(64, 2, 8);
        assert_eq!((c.param, c.send, c.recv, c.recv_ip_off), (4, 8, 4, 4));
        let c = Coll::AllGather.counts(8, 4, 4);
        assert_eq!(c.param, 0);
        assert_eq!(Coll::AllGather.algbw_bytes(64, 4, 4), 1024);
        assert_eq!(Coll::Broadcast.algbw_bytes(64, 4, 4), 256);
    }

    #[test]
    fn busbw_factors() {
        assert_eq!(Coll::AllReduce.busbw_factor(2), 1.0);
        assert_eq!(Coll::AllReduce.busbw_factor(4), 1.5);
        assert_eq!(Coll::AllGather.busbw_factor(4), 0.75);
        assert_eq!(Coll::ReduceScatter.busbw_factor(8), 0.875);
        assert_eq!(Coll::AlltoAll.busbw_factor(2), 0.5);
        assert_eq!(Coll::Gather.busbw_factor(2), 0.5);
        assert_eq!(Coll::Scatter.busbw_factor(2), 0.5);
        assert_eq!(Coll::Broadcast.busbw_factor(8), 1.0);
        assert_eq!(Coll::Reduce.busbw_factor(8), 1.0);
        assert_eq!(Coll::SendRecv.busbw_factor(8), 1.0);
        assert_eq!(Coll::AllReduce.busbw_factor(1), 0.0);
    }

    #[test]
    fn sources() {
        // alltoall: block j of rank r's output is block r of rank j's input.
        assert_eq!(
            Coll::AlltoAll.source(1, 3, 0, 4, 9),
            Source::Input { rank: 2, idx: 5 }
        );
        assert_eq!(
            Coll::AllGather.source(0, 3, 0, 4, 9),
            Source::Input { rank: 2, idx: 1 }
        );
        assert_eq!(
            Coll::Scatter.source(2, 3, 1, 4, 3),
            Source::Input { rank: 1, idx: 11 }
        );
        // -r 2 on four ranks: rank 1 receives from rank 3.
        assert_eq!(
            Coll::SendRecv.source(1, 4, 2, 4, 3),
            Source::Input { rank: 3, idx: 3 }
        );
        assert_eq!(
            Coll::SendRecv.source(0, 3, 0, 4, 3),
            Source::Input { rank: 2, idx: 3 }
        );
        assert_eq!(
            Coll::ReduceScatter.source(2, 3, 0, 4, 1),
            Source::Reduced(9)
        );
        assert!(!Coll::Reduce.has_output(1, 0));
        assert!(!Coll::AlltoAll.checks_in_place() && !Coll::SendRecv.checks_in_place());
        assert!(Coll::AllGather.checks_in_place());
        assert!(Coll::Scatter.has_output(1, 0));
    }

    #[test]
    fn sweeps() {
        assert_eq!(sweep(8, 64 << 20, 4, 0).len(), 12);
        assert_eq!(sweep(8, 64, 2, 0), vec![8, 16, 32, 64]);
        assert_eq!(sweep(10, 40, 1, 10), vec![10, 20, 30, 40]);
        assert_eq!(sweep(32, 32, 1, 0), vec![32]);
        assert_eq!(sweep(0, 8, 2, 0), vec![0]);
        assert_eq!(Coll::parse("all_reduce_perf"), Some(Coll::AllReduce));
        assert_eq!(Coll::parse("alltoall"), Some(Coll::AlltoAll));
        assert_eq!(Coll::parse("send_recv"), None);
    }
}
