//! Small sends and receives as the point-to-point kernel (`ccl_ll_p2p`) instead of copy-engine
//! transfers: a copy-engine transfer needs a host rendezvous and five stream operations (about
//! 13 us at 8 B, 1.2-2.2x NCCL's one kernel, 2x in place); the kernel writes into a slot of
//! the receiver's low-latency area that is mapped in advance, so a send never waits for its
//! receive to be called.
//!
//! Which transfers go this way depends only on the transfer's size, which sender and receiver
//! agree on, and on the agreed `CCL_IPC_P2P_KERNEL_BYTES`: never on how the ranks group
//! their calls. Each (sender, receiver) pair numbers its small transfers from 1 in call order
//! on both sides, so a send and its receive meet in the same slot whatever else either rank
//! queues.

use ccl_cuda::cuda::source::{LL_P2P_BYTES, LL_P2P_MAX_OPS};
use ccl_cuda::cuda::LlP2p;

use ccl_collectives::task::{Task, TaskKind};

/// The largest send or receive the kernel takes with the agreed limit `max`.
pub(crate) fn max_bytes(max: usize) -> usize {
    max.min(LL_P2P_BYTES)
}

/// Whether `t` is a send or receive small enough for the kernel (`max` bytes, 0: never; at
/// most one slot), to another rank.
pub(crate) fn is_small(t: &Task, rank: usize, max: usize) -> bool {
    let max = max_bytes(max);
    let peer = match t.kind {
        TaskKind::Send { peer } | TaskKind::Recv { peer } => peer,
        TaskKind::Coll(_) => return false,
    };
    max > 0 && peer != rank && t.count.saturating_mul(t.dtype.size()) <= max
}

/// Per pair, the sequence numbers of the small transfers so far (the last one used), and this
/// rank's sends so far (the kernel's ticket counts on from it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Seqs {
    sent: Vec<u32>,
    received: Vec<u32>,
    pub ticket: u32,
}

impl Seqs {
    pub fn new(nranks: usize) -> Seqs {
        Seqs {
            sent: vec![0; nranks],
            received: vec![0; nranks],
            ticket: 0,
        }
    }

    fn next(v: &mut [u32], peer: usize) -> Option<u32> {
        let s = v.get_mut(peer)?;
        *s = s.wrapping_add(1);
        Some(*s)
    }
}

/// One launch and the ticket base it runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub x: LlP2p,
    pub ticket_base: u32,
}

fn peer_of(t: &Task) -> usize {
    match t.kind {
        TaskKind::Send { peer } | TaskKind::Recv { peer } => peer,
        TaskKind::Coll(_) => usize::MAX,
    }
}

fn range(t: &Task, ptr: usize) -> (usize, usize) {
    (
        ptr,
        ptr.saturating_add(t.count.saturating_mul(t.dtype.size())),
    )
}

/// The launches for a group's small sends and receives (`small`, in call order), taking their
/// sequence numbers from `seqs`. Sends and receives go `LL_P2P_MAX_OPS` to a launch, in order;
/// a receive whose buffer overlaps a send of the group runs in that send's launch or later,
/// after it (in place: the send reads before the receive writes). Known limit: when both
/// ranks of a pair send each other more than `LL_P2P_SLOTS` messages in one group and each
/// receives an early one into the buffer of a send past the slots, each in-place receive waits
/// for a send that waits for the other's receive's credit, for good; the health check reports
/// it as the async error after `CCL_TIMEOUT_S` (found by review, 2026-11-30; such groups would
/// need the overlapped sends on copy engines, a choice both ranks would have to make alike).
pub(crate) fn plan(small: &[Task], seqs: &mut Seqs) -> Vec<Launch> {
    let sends: Vec<&Task> = small
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Send { .. }))
        .collect();
    let recvs: Vec<&Task> = small
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Recv { .. }))
        .collect();
    // Receives stay in call order (a pair's credit word says "consumed up to here"), filling
    // launches from the first; one that overlaps a send starts no earlier than that send's
    // launch and, there, waits for it.
    let mut recv_at: Vec<(usize, u32)> = Vec::with_capacity(recvs.len());
    let mut filled: Vec<usize> = Vec::new();
    let mut cur = 0;
    for r in &recvs {
        let (d0, d1) = range(r, r.recv);
        let last = sends.iter().rposition(|s| {
            let (s0, s1) = range(s, s.send);
            s0 < d1 && d0 < s1
        });
        let mut l = last.map_or(cur, |i| cur.max(i / LL_P2P_MAX_OPS));
        while filled.get(l).is_some_and(|&c| c >= LL_P2P_MAX_OPS) {
            l += 1;
        }
        if filled.len() <= l {
            filled.resize(l + 1, 0);
        }
        filled[l] += 1;
        cur = l;
        let after = match last {
            Some(i) if i / LL_P2P_MAX_OPS == l => (i % LL_P2P_MAX_OPS + 1) as u32,
            _ => 0,
        };
        recv_at.push((l, after));
    }
    let n = sends.len().div_ceil(LL_P2P_MAX_OPS).max(filled.len());
    let mut out: Vec<Launch> = (0..n)
        .map(|_| Launch {
            x: LlP2p::default(),
            ticket_base: 0,
        })
        .collect();
    for (i, s) in sends.iter().enumerate() {
        let Some(l) = out.get_mut(i / LL_P2P_MAX_OPS) else {
            continue;
        };
        let k = l.x.nsend as usize;
        let peer = peer_of(s);
        l.x.src[k] = s.send as u64;
        l.x.sbytes[k] = (s.count * s.dtype.size()) as u64;
        l.x.speer[k] = peer as u32;
        l.x.sseq[k] = Seqs::next(&mut seqs.sent, peer).unwrap_or(0);
        l.x.nsend += 1;
    }
    for (r, &(at, after)) in recvs.iter().zip(&recv_at) {
        let peer = peer_of(r);
        let seq = Seqs::next(&mut seqs.received, peer).unwrap_or(0);
        let Some(l) = out.get_mut(at) else { continue };
        let k = l.x.nrecv as usize;
        l.x.dst[k] = r.recv as u64;
        l.x.rbytes[k] = (r.count * r.dtype.size()) as u64;
        l.x.rpeer[k] = peer as u32;
        l.x.rseq[k] = seq;
        l.x.rafter[k] = after;
        l.x.nrecv += 1;
    }
    for l in &mut out {
        l.ticket_base = seqs.ticket;
        seqs.ticket = seqs.ticket.wrapping_add(l.x.nsend);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_cuda::DataType;

    fn p2p(send: bool, peer: usize, ptr: usize, count: usize) -> Task {
        let kind = if send {
            TaskKind::Send { peer }
        } else {
            TaskKind::Recv { peer }
        };
        let mut t = ccl_collectives::task::float_sum(kind, ptr, ptr, count);
        t.dtype = DataType::Uint8;
        t
    }

    #[test]
    fn smallness_depends_on_size_and_peer_only() {
        assert!(is_small(&p2p(true, 1, 0, 4096), 0, 4096));
        assert!(is_small(&p2p(true, 1, 0, 4097), 0, 8192));
        assert!(!is_small(&p2p(true, 1, 0, 8193), 0, 8192));
        assert!(is_small(&p2p(true, 1, 0, LL_P2P_BYTES), 0, 1 << 20));
        assert!(!is_small(&p2p(true, 1, 0, LL_P2P_BYTES + 1), 0, 1 << 20));
        assert!(!is_small(&p2p(false, 1, 0, 1), 0, 0));
        assert!(!is_small(&p2p(false, 0, 0, 1), 0, 4096));
        assert!(is_small(&p2p(false, 1, 0, 0), 0, 4096));
        assert!(!is_small(&p2p(true, 1, 0, usize::MAX), 0, 4096));
    }

    /// Numbers go on per pair and direction across groups; the ticket counts sends; an
    /// in-place receive waits for the send of its buffer.
    #[test]
    fn pairs_number_their_transfers_and_in_place_receives_follow_their_sends() {
        let mut s = Seqs::new(3);
        let g = [p2p(true, 1, 100, 8), p2p(false, 2, 100, 8)];
        let l = plan(&g, &mut s);
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].x.nsend, l[0].x.nrecv, l[0].ticket_base), (1, 1, 0));
        assert_eq!((l[0].x.speer[0], l[0].x.sseq[0]), (1, 1));
        assert_eq!(
            (l[0].x.rpeer[0], l[0].x.rseq[0], l[0].x.rafter[0]),
            (2, 1, 1)
        );
        let g = [
            p2p(false, 1, 300, 8),
            p2p(true, 1, 200, 8),
            p2p(true, 2, 400, 8),
        ];
        let l = plan(&g, &mut s);
        assert_eq!(l[0].ticket_base, 1);
        assert_eq!(&l[0].x.sseq[..2], &[2, 1]);
        assert_eq!((l[0].x.rseq[0], l[0].x.rafter[0]), (1, 0));
        assert_eq!(s.ticket, 3);
    }

    /// More than a launch holds: sends fill launches in order; receives keep their order, a
    /// receive overlapping a send of a later launch moves there behind it, and the receives
    /// after it follow it there.
    #[test]
    fn big_groups_split_and_overlapping_receives_move_behind_their_sends() {
        let m = LL_P2P_MAX_OPS;
        let mut s = Seqs::new(2);
        let mut g: Vec<Task> = (0..m + 3).map(|i| p2p(true, 1, 1000 + i * 16, 8)).collect();
        g.push(p2p(false, 1, 50_000, 8));
        g.push(p2p(false, 1, 1000 + (m + 2) * 16, 8)); // overlaps the last send
        g.push(p2p(false, 1, 60_000, 8));
        let l = plan(&g, &mut s);
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].x.nsend, l[1].x.nsend), (m as u32, 3));
        assert_eq!((l[0].x.nrecv, l[1].x.nrecv), (1, 2));
        assert_eq!((l[0].x.rseq[0], l[0].x.rafter[0]), (1, 0));
        assert_eq!((l[1].x.rseq[0], l[1].x.rafter[0]), (2, 3));
        assert_eq!((l[1].x.rseq[1], l[1].x.rafter[1]), (3, 0));
        assert_eq!((l[0].ticket_base, l[1].ticket_base), (0, m as u32));
        assert_eq!(l[1].x.sseq[2], m as u32 + 3);
        // Receives beyond a launch's room spill into the next, in order.
        let g: Vec<Task> = (0..m + 1)
            .map(|i| p2p(false, 1, 90_000 + i * 8, 8))
            .collect();
        let l = plan(&g, &mut s);
        assert_eq!((l.len(), l[0].x.nrecv, l[1].x.nrecv), (2, m as u32, 1));
        assert_eq!(l[1].x.rseq[0], 3 + m as u32 + 1);
    }
}
