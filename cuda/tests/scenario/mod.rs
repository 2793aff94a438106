//! Scenarios the kernel tests share between host threads and GPUs: a seeded generator, and
//! random traffic for the point-to-point kernel (its launches and the check of what landed).

#![allow(dead_code)] // each test file uses its own part
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use ccl_cuda::cuda::source::{LL_P2P_MAX_OPS, LL_P2P_SLOTS};
use ccl_cuda::cuda::LlP2p;

/// A tiny deterministic generator (xorshift), so a schedule is the same every run.
pub struct Xs(pub u64);

impl Xs {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Random point-to-point traffic: `n` ranks, `rounds` rounds; in each round every rank sends
/// 0..=`per_pair` messages of 0..=40 KiB to every other rank (one launch per rank and round:
/// its sends, then its receives in source order), and with probability 1/4 its first receive
/// lands in the buffer one of its first `LL_P2P_SLOTS` sends reads (in place, held back by the
/// ticket until that send and every one before it have read: those need no credit from the
/// round's receives, which is why the library holds receives for no later send). A last
/// launch pair sends 8 bytes from rank 0 to a receive of 16 on rank 1 (a size mismatch) into
/// the probe buffer. Each message has a `SLOT`-byte place in its rank's send or receive
/// buffer, so what lands next to a message is checked too.
pub struct P2pTraffic {
    pub n: usize,
    rounds: usize,
    /// Most messages a rank sends in a round.
    most: usize,
    /// sizes[k][r][p]: the messages r sends p in round k.
    sizes: Vec<Vec<Vec<Vec<usize>>>>,
    /// in_place[k][r]: the send whose buffer r's first receive of round k lands in.
    in_place: Vec<Vec<Option<usize>>>,
}

/// Bytes of a message's place: runs of up to 5 KiB per block, every split and tail, in
/// buffers that stay small (the slots take up to `LL_P2P_BYTES`; a boundary test sends that).
pub const SLOT: usize = 40 << 10;

/// One rank's launches: the kernel's parameters and its ticket base.
pub type Launches = Vec<(LlP2p, u32)>;

impl P2pTraffic {
    pub fn random(n: usize, rounds: usize, per_pair: usize, seed: u64) -> P2pTraffic {
        let most = per_pair * (n - 1);
        assert!(most <= LL_P2P_MAX_OPS);
        let mut rng = Xs(seed);
        let mut pair = |r: usize, p: usize| -> Vec<usize> {
            let c = if p == r {
                0
            } else {
                rng.below(per_pair as u64 + 1)
            };
            (0..c)
                .map(|_| rng.below(SLOT as u64 + 1) as usize)
                .collect()
        };
        let sizes: Vec<Vec<Vec<Vec<usize>>>> = (0..rounds)
            .map(|_| {
                (0..n)
                    .map(|r| (0..n).map(|p| pair(r, p)).collect())
                    .collect()
            })
            .collect();
        let in_place = (0..rounds)
            .map(|k| {
                (0..n)
                    .map(|r| {
                        let sends: usize = sizes[k][r].iter().map(Vec::len).sum();
                        let target = rng.below(LL_P2P_SLOTS as u64) as usize;
                        (rng.below(4) == 0 && sends > 0).then(|| target.min(sends - 1))
                    })
                    .collect()
            })
            .collect();
        P2pTraffic {
            n,
            rounds,
            most,
            sizes,
            in_place,
        }
    }

    /// Bytes of each rank's send and receive buffer.
    pub fn buf_len(&self) -> usize {
        self.rounds * self.most * SLOT
    }

    /// What rank `r`'s send buffer holds before the run.
    pub fn send_data(&self, r: usize) -> Vec<u8> {
        (0..self.buf_len())
            .map(|i| (i * 31 + r * 7 + 1) as u8)
            .collect()
    }

    /// What every receive buffer (and the probe) holds before the run.
    pub const FILL: u8 = 0xEE;

    fn at(&self, k: usize, m: usize) -> usize {
        (k * self.most + m) * SLOT
    }

    /// Where receive `j` of rank `r` in round `k` lands: (in the send buffer?, offset).
    fn land(&self, k: usize, r: usize, j: usize) -> (bool, usize) {
        match self.in_place[k][r] {
            Some(m) if j == 0 => (true, self.at(k, m)),
            _ => (false, self.at(k, j)),
        }
    }

    /// Every rank's launches, in order, for buffers at these addresses (`probe`: 16 bytes on
    /// rank 1).
    #[allow(clippy::needless_range_loop)] // ranks index several tables at once
    pub fn launches(&self, send: &[u64], recv: &[u64], probe: u64) -> Vec<Launches> {
        let n = self.n;
        let mut launches: Vec<Launches> = vec![Vec::new(); n];
        let mut sent = vec![vec![0u32; n]; n];
        let mut received = vec![vec![0u32; n]; n];
        let mut ticket = vec![0u32; n];
        for k in 0..self.rounds {
            for r in 0..n {
                let mut x = LlP2p::default();
                for p in 0..n {
                    for &b in &self.sizes[k][r][p] {
                        let m = x.nsend as usize;
                        sent[r][p] += 1;
                        x.src[m] = send[r] + self.at(k, m) as u64;
                        (x.sbytes[m], x.speer[m], x.sseq[m]) = (b as u64, p as u32, sent[r][p]);
                        x.nsend += 1;
                    }
                }
                for p in 0..n {
                    for &b in &self.sizes[k][p][r] {
                        let j = x.nrecv as usize;
                        received[r][p] += 1;
                        let (into_send, off) = self.land(k, r, j);
                        x.dst[j] = off as u64 + if into_send { send[r] } else { recv[r] };
                        // In place: after the send of that buffer (and those before it).
                        x.rafter[j] = match self.in_place[k][r] {
                            Some(m) if into_send => m as u32 + 1,
                            _ => 0,
                        };
                        (x.rbytes[j], x.rpeer[j], x.rseq[j]) = (b as u64, p as u32, received[r][p]);
                        x.nrecv += 1;
                    }
                }
                launches[r].push((x, ticket[r]));
                ticket[r] += x.nsend;
            }
        }
        let mut x = LlP2p::default();
        (x.nsend, x.src[0], x.sbytes[0], x.speer[0], x.sseq[0]) =
            (1, send[0], 8, 1, sent[0][1] + 1);
        launches[0].push((x, ticket[0]));
        let mut y = LlP2p::default();
        (y.nrecv, y.dst[0], y.rbytes[0], y.rpeer[0], y.rseq[0]) =
            (1, probe, 16, 0, received[1][0] + 1);
        launches[1].push((y, ticket[1]));
        launches
    }

    /// Checks every message where it was meant to land and nothing around it, the probe and
    /// the error word, from the buffers as the run left them.
    pub fn check(&self, send: &[Vec<u8>], recv: &[Vec<u8>], probe: &[u8], err: u32) {
        let n = self.n;
        let want: Vec<Vec<u8>> = (0..n).map(|r| self.send_data(r)).collect();
        for k in 0..self.rounds {
            for r in 0..n {
                let mut j = 0;
                for p in 0..n {
                    // p's send index of its messages to r: after those to lower ranks.
                    let first: usize = self.sizes[k][p][..r].iter().map(Vec::len).sum();
                    for (i, &b) in self.sizes[k][p][r].iter().enumerate() {
                        let from = &want[p][self.at(k, first + i)..self.at(k, first + i) + b];
                        let (into_send, base) = self.land(k, r, j);
                        let buf = if into_send { &send[r] } else { &recv[r] };
                        // (assert!, not assert_eq!: a failure names the message, not 40 KiB)
                        assert!(
                            &buf[base..base + b] == from,
                            "n {n} round {k}: message {i} from {p} to {r} ({b} bytes) differs"
                        );
                        let rest = &buf[base + b..base + SLOT];
                        if into_send {
                            assert!(
                                rest == &want[r][base + b..base + SLOT],
                                "n {n} round {k}: {r}'s send buffer changed past the receive"
                            );
                        } else {
                            assert!(rest.iter().all(|&v| v == Self::FILL));
                        }
                        j += 1;
                    }
                }
            }
        }
        // The mismatched send read rank 0's first send buffer as the rounds left it.
        assert_eq!(&probe[..8], &send[0][..8]);
        assert!(probe[8..16].iter().all(|&v| v == Self::FILL));
        assert_eq!(err, 1, "the mismatch names rank 0 (+1)");
    }
}
