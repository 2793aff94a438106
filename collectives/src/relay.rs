//! Broadcast over more than two GPUs as a pipelined scatter and all-gather of direct
//! transfers.
//!
//! A root that copies the whole buffer to each of `n - 1` peers sends `n - 1` times the
//! buffer over its own NVLink ports: 0.37x NCCL's ring on 4 GPUs (measured 2026-11-22). Here
//! the buffer is cut into chunks and each chunk into `n - 1` slices, one per non-root rank.
//! Phase `p` scatters chunk `p` (the root sends each slice to its owner) while the non-root
//! ranks all-gather chunk `p - 1` among themselves (each owner sends its slice to the other
//! non-root ranks). Every rank then sends and receives about the buffer's size once, as in a
//! ring, and copy engines do all of it.
//!
//! Each phase is one group of sends and receives of its own, queued after the previous one:
//! a rank forwards a slice only in the phase after the one it arrived in, and a direct group
//! ends with the rank's stream waiting until its transfers are done, so the slice is there
//! before anyone copies it on. Every rank derives the same phases from the call (count, type,
//! root, rank count, settings agreed at setup), so the transfers pair up. This module is
//! CUDA-free: it only rewrites tasks.

use crate::task::{Task, TaskKind};
use crate::Collective;

/// Most chunks one broadcast is cut into (phases = chunks + 1): each phase costs every rank
/// a few microseconds of host time per transfer, so a 1 GiB broadcast takes 64 MiB chunks
/// (pipeline fill 1/16 of the time) rather than hundreds of phases.
const MAX_CHUNKS: usize = 16;

/// When and how broadcasts are relayed (agreed by every rank at setup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relay {
    /// Broadcasts of at least this many bytes are relayed (0: never).
    pub min_bytes: usize,
    /// Bytes per chunk (one phase's scatter).
    pub chunk_bytes: usize,
}

impl Relay {
    /// Does this task get relayed on a communicator of `n` ranks?
    fn takes(&self, t: &Task, n: usize) -> bool {
        matches!(t.kind, TaskKind::Coll(Collective::Broadcast { .. }))
            && n > 2
            && self.min_bytes > 0
            && t.count.saturating_mul(t.dtype.size()) >= self.min_bytes
    }

    /// The group `tasks` of `rank` as phases to queue one after the other: a single phase
    /// (the tasks as they are) when no broadcast is relayed; otherwise the other tasks go with
    /// the first phase. Empty phases stay in place, so every rank numbers them alike.
    pub fn phases(&self, tasks: Vec<Task>, rank: usize, n: usize) -> Vec<Vec<Task>> {
        if !tasks.iter().any(|t| self.takes(t, n)) {
            return vec![tasks];
        }
        let mut phases: Vec<Vec<Task>> = vec![Vec::new()];
        for t in tasks {
            if !self.takes(&t, n) {
                phases[0].push(t);
                continue;
            }
            for (p, v) in self.broadcast(&t, rank, n).into_iter().enumerate() {
                if phases.len() <= p {
                    phases.push(Vec::new());
                }
                phases[p].extend(v);
            }
        }
        phases
    }

    /// One broadcast's sends and receives per phase.
    fn broadcast(&self, t: &Task, rank: usize, n: usize) -> Vec<Vec<Task>> {
        let root = t.kind.root().unwrap_or(0);
        let sz = t.dtype.size();
        let bytes = t.count.saturating_mul(sz);
        let chunks = bytes.div_ceil(self.chunk_bytes.max(1)).clamp(1, MAX_CHUNKS);
        let owners: Vec<usize> = (0..n).filter(|&r| r != root).collect();
        let m = owners.len();
        // Elements [lo, hi) of slice j of chunk c.
        let slice = |c: usize, j: usize| -> (usize, usize) {
            let at = |i: usize, of: usize, count: usize| {
                (count as u128 * i as u128 / of as u128) as usize
            };
            let (clo, chi) = (at(c, chunks, t.count), at(c + 1, chunks, t.count));
            (clo + at(j, m, chi - clo), clo + at(j + 1, m, chi - clo))
        };
        let send = |peer: usize, buf: usize, (lo, hi): (usize, usize)| Task {
            kind: TaskKind::Send { peer },
            send: buf + lo * sz,
            recv: 0,
            count: hi - lo,
            ..*t
        };
        let recv = |peer: usize, (lo, hi): (usize, usize)| Task {
            kind: TaskKind::Recv { peer },
            send: 0,
            recv: t.recv + lo * sz,
            count: hi - lo,
            ..*t
        };
        let mine = owners.iter().position(|&r| r == rank);
        let mut phases = vec![Vec::new(); chunks + 1];
        if rank == root && t.send != t.recv {
            // The root's own copy, beside its first sends.
            let all = (0, t.count);
            phases[0].push(send(rank, t.send, all));
            phases[0].push(recv(rank, all));
        }
        for (p, phase) in phases.iter_mut().enumerate() {
            if p < chunks {
                for (j, &owner) in owners.iter().enumerate() {
                    let s = slice(p, j);
                    if s.1 == s.0 {
                        continue;
                    }
                    if rank == root {
                        phase.push(send(owner, t.send, s));
                    } else if rank == owner {
                        phase.push(recv(root, s));
                    }
                }
            }
            let Some(j) = mine.filter(|_| p > 0) else {
                continue;
            };
            // The all-gather of the previous chunk, peers in rotated order.
            let own = slice(p - 1, j);
            for k in (1..m).map(|d| (j + d) % m) {
                if own.1 > own.0 {
                    phase.push(send(owners[k], t.recv, own));
                }
                let theirs = slice(p - 1, k);
                if theirs.1 > theirs.0 {
                    phase.push(recv(owners[k], theirs));
                }
            }
        }
        phases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bcast(root: usize, send: usize, recv: usize, count: usize) -> Task {
        crate::task::float_sum(
            TaskKind::Coll(Collective::Broadcast { root }),
            send,
            recv,
            count,
        )
    }

    const RELAY: Relay = Relay {
        min_bytes: 1 << 20,
        chunk_bytes: 1 << 20,
    };

    /// Plays the phases on host memory: every rank's buffers, sends matched to receives in
    /// order per (source, destination) pair within each phase, a phase's sends reading what
    /// earlier phases left. Returns each rank's receive buffer.
    fn play(n: usize, root: usize, count: usize, in_place: bool) -> Vec<Vec<u32>> {
        const SEND: usize = 1 << 40;
        const RECV: usize = 2 << 40;
        let phases: Vec<Vec<Vec<Task>>> = (0..n)
            .map(|r| {
                let send = if in_place && r == root { RECV } else { SEND };
                RELAY.phases(vec![bcast(root, send, RECV, count)], r, n)
            })
            .collect();
        let np = phases[0].len();
        assert!(phases.iter().all(|p| p.len() == np), "phase counts differ");
        let input: Vec<u32> = (0..count as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let mut recv: Vec<Vec<u32>> = (0..n)
            .map(|r| {
                if r == root && in_place {
                    input.clone()
                } else {
                    vec![u32::MAX; count]
                }
            })
            .collect();
        // `p` indexes every rank's phases, not one list.
        #[allow(clippy::needless_range_loop)]
        for p in 0..np {
            let snapshot = recv.clone();
            for dst in 0..n {
                for src in 0..n {
                    let sends: Vec<&Task> = phases[src][p]
                        .iter()
                        .filter(|t| t.kind == TaskKind::Send { peer: dst })
                        .collect();
                    let recvs: Vec<&Task> = phases[dst][p]
                        .iter()
                        .filter(|t| t.kind == TaskKind::Recv { peer: src })
                        .collect();
                    assert_eq!(sends.len(), recvs.len(), "phase {p} {src}->{dst}");
                    for (s, r) in sends.iter().zip(&recvs) {
                        assert_eq!(s.count, r.count);
                        let from = if s.send >= RECV {
                            &snapshot[src][(s.send - RECV) / 4..][..s.count]
                        } else {
                            assert_eq!(src, root, "only the root reads its send buffer");
                            &input[(s.send - SEND) / 4..][..s.count]
                        };
                        let at = (r.recv - RECV) / 4;
                        // A slice is forwarded only after it arrived.
                        assert!(from.iter().all(|&x| x != u32::MAX), "phase {p}");
                        let from = from.to_vec();
                        recv[dst][at..at + s.count].copy_from_slice(&from);
                    }
                }
            }
        }
        recv
    }

    #[test]
    fn relayed_broadcasts_deliver_every_element_to_every_rank() {
        for n in [3, 4, 5, 8] {
            for root in [0, 1, n - 1] {
                for count in [262_144, 262_147, 1_000_003] {
                    for in_place in [false, true] {
                        let out = play(n, root, count, in_place);
                        let want: Vec<u32> = (0..count as u32)
                            .map(|i| i.wrapping_mul(2_654_435_761))
                            .collect();
                        for (r, got) in out.iter().enumerate() {
                            assert!(got == &want, "n {n} root {root} count {count} rank {r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_rank_moves_about_the_buffer_once() {
        let (n, count) = (4, 16 << 20);
        for r in 0..n {
            let phases = RELAY.phases(vec![bcast(0, 1 << 40, 2 << 40, count)], r, n);
            let sent: usize = phases
                .iter()
                .flatten()
                .filter(|t| matches!(t.kind, TaskKind::Send { peer } if peer != r))
                .map(|t| t.count)
                .sum();
            let got: usize = phases
                .iter()
                .flatten()
                .filter(|t| matches!(t.kind, TaskKind::Recv { peer } if peer != r))
                .map(|t| t.count)
                .sum();
            if r == 0 {
                assert_eq!((sent, got), (count, 0));
            } else {
                // Its own third to two peers; everything from root and the two others.
                // (Slices round to whole elements per chunk: one each, two peers.)
                assert!(
                    sent.abs_diff(2 * count / 3) <= 2 * MAX_CHUNKS,
                    "rank {r} sent {sent}"
                );
                assert_eq!(got, count);
            }
        }
    }

    #[test]
    fn small_or_two_rank_broadcasts_and_other_tasks_stay_as_they_are() {
        let small = bcast(0, 1, 2, (1 << 20) / 4 - 1);
        assert_eq!(RELAY.phases(vec![small], 1, 4).len(), 1);
        let big = bcast(0, 1, 2, 1 << 20);
        assert_eq!(RELAY.phases(vec![big], 1, 2).len(), 1);
        let off = Relay {
            min_bytes: 0,
            ..RELAY
        };
        assert_eq!(off.phases(vec![big], 1, 4).len(), 1);
        let mut other = big;
        other.kind = TaskKind::Coll(Collective::AllGather);
        let phases = RELAY.phases(vec![other, big], 1, 4);
        assert!(phases.len() > 2);
        assert_eq!(phases[0][0].kind, other.kind);
    }
}
