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

use ccl_cuda::cuda::source::{LL_P2P_BYTES, LL_P2P_MAX_OPS, LL_P2P_SLOTS};
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

/// A send whose source a receive of its group overwrites, read from a copy taken before the
/// group's first launch: launch `launch`'s send `k`, `bytes` from `src`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub launch: usize,
    pub k: usize,
    pub src: u64,
    pub bytes: usize,
}

/// A group's launches, and the sends they read from snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SmallGroup {
    pub launches: Vec<Launch>,
    pub snapshots: Vec<Snapshot>,
}

impl SmallGroup {
    /// Bytes the snapshots take, each at an offset rounded up to 16.
    pub fn snapshot_bytes(&self) -> usize {
        self.snapshots
            .iter()
            .map(|s| s.bytes.next_multiple_of(16))
            .sum()
    }

    /// Points the snapshotted sends at copies laid out from `base` and returns the copies to
    /// make first, as (destination, source, bytes).
    pub fn place_snapshots(&mut self, base: u64) -> Vec<(u64, u64, usize)> {
        let mut at = base;
        let mut copies = Vec::with_capacity(self.snapshots.len());
        for s in &self.snapshots {
            if let Some(l) = self.launches.get_mut(s.launch) {
                l.x.src[s.k] = at;
                copies.push((at, s.src, s.bytes));
                at += s.bytes.next_multiple_of(16) as u64;
            }
        }
        copies
    }
}

/// The launches for a group's small sends and receives (`small`, in call order), taking their
/// sequence numbers from `seqs`. Sends and receives go `LL_P2P_MAX_OPS` to a launch, in order.
/// A receive whose buffer overlaps a send of the group (in place: the send reads before the
/// receive writes) waits in its launch for that send when the send is one of the group's
/// first `LL_P2P_SLOTS` (such a send needs no credit for a message of this group, so it ends
/// whatever the peers' receives do); a later send in its launch or after is read from a
/// snapshot instead. Held behind such a send, both ranks of a pair exchanging more than the
/// slots in place could each wait for a send that waits for the other's held receive's credit.
pub(crate) fn plan(small: &[Task], seqs: &mut Seqs) -> SmallGroup {
    let sends: Vec<&Task> = small
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Send { .. }))
        .collect();
    let recvs: Vec<&Task> = small
        .iter()
        .filter(|t| matches!(t.kind, TaskKind::Recv { .. }))
        .collect();
    // Receives stay in call order (a pair's credit word says "consumed up to here"), filling
    // launches from the first.
    let mut recv_at: Vec<(usize, u32)> = Vec::with_capacity(recvs.len());
    let mut snap = vec![false; sends.len()];
    for (j, r) in recvs.iter().enumerate() {
        let l = j / LL_P2P_MAX_OPS;
        let (d0, d1) = range(r, r.recv);
        let mut after = 0;
        for (i, s) in sends.iter().enumerate().skip(l * LL_P2P_MAX_OPS) {
            let (s0, s1) = range(s, s.send);
            if !(s0 < d1 && d0 < s1) {
                continue;
            }
            if i < LL_P2P_SLOTS && i / LL_P2P_MAX_OPS == l {
                after = after.max(i as u32 + 1);
            } else {
                snap[i] = true;
            }
        }
        recv_at.push((l, after));
    }
    let n = sends
        .len()
        .div_ceil(LL_P2P_MAX_OPS)
        .max(recvs.len().div_ceil(LL_P2P_MAX_OPS));
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
    let snapshots = sends
        .iter()
        .enumerate()
        .filter(|&(i, _)| snap[i])
        .map(|(i, s)| Snapshot {
            launch: i / LL_P2P_MAX_OPS,
            k: i % LL_P2P_MAX_OPS,
            src: s.send as u64,
            bytes: s.count * s.dtype.size(),
        })
        .collect();
    SmallGroup {
        launches: out,
        snapshots,
    }
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
        let l = plan(&g, &mut s).launches;
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
        let l = plan(&g, &mut s).launches;
        assert_eq!(l[0].ticket_base, 1);
        assert_eq!(&l[0].x.sseq[..2], &[2, 1]);
        assert_eq!((l[0].x.rseq[0], l[0].x.rafter[0]), (1, 0));
        assert_eq!(s.ticket, 3);
    }

    /// More than a launch holds: sends fill launches in order; receives keep their order and
    /// their launch; a receive overlapping a send of a later launch leaves it to a snapshot.
    #[test]
    fn big_groups_split_and_overlapped_sends_of_later_launches_read_snapshots() {
        let m = LL_P2P_MAX_OPS;
        let mut s = Seqs::new(2);
        let mut g: Vec<Task> = (0..m + 3).map(|i| p2p(true, 1, 1000 + i * 16, 8)).collect();
        g.push(p2p(false, 1, 50_000, 8));
        g.push(p2p(false, 1, 1000 + (m + 2) * 16, 8)); // overlaps the last send
        g.push(p2p(false, 1, 60_000, 8));
        let mut l = plan(&g, &mut s);
        assert_eq!(l.launches.len(), 2);
        let x = |l: &SmallGroup, i: usize| l.launches[i].x;
        assert_eq!((x(&l, 0).nsend, x(&l, 1).nsend), (m as u32, 3));
        assert_eq!((x(&l, 0).nrecv, x(&l, 1).nrecv), (3, 0));
        assert_eq!(&x(&l, 0).rseq[..3], &[1, 2, 3]);
        assert_eq!(&x(&l, 0).rafter[..3], &[0, 0, 0]);
        let snap = Snapshot {
            launch: 1,
            k: 2,
            src: 1000 + (m as u64 + 2) * 16,
            bytes: 8,
        };
        assert_eq!(l.snapshots, vec![snap]);
        assert_eq!(l.snapshot_bytes(), 16);
        assert_eq!(l.place_snapshots(7 << 20), vec![(7 << 20, snap.src, 8)]);
        assert_eq!(x(&l, 1).src[2], 7 << 20);
        assert_eq!(
            (l.launches[0].ticket_base, l.launches[1].ticket_base),
            (0, m as u32)
        );
        assert_eq!(x(&l, 1).sseq[2], m as u32 + 3);
        // Receives beyond a launch's room spill into the next, in order.
        let g: Vec<Task> = (0..m + 1)
            .map(|i| p2p(false, 1, 90_000 + i * 8, 8))
            .collect();
        let l = plan(&g, &mut s);
        assert_eq!(l.launches.len(), 2);
        assert_eq!((x(&l, 0).nrecv, x(&l, 1).nrecv), (m as u32, 1));
        assert_eq!(x(&l, 1).rseq[0], 3 + m as u32 + 1);
    }

    /// Both ranks of a pair sending each other more than the slots in place (each receiving
    /// early messages into the buffers of sends past the slots) could each hold a receive
    /// behind a send that waits for the other's held receive's credit: a receive waits only
    /// for one of the group's first `LL_P2P_SLOTS` sends and every later one it overlaps goes
    /// from a snapshot. The same group on both ranks (a symmetric exchange).
    #[test]
    fn in_place_receives_wait_only_for_sends_that_need_no_credit() {
        let k = LL_P2P_SLOTS + 4;
        let mut s = Seqs::new(2);
        let mut g: Vec<Task> = (0..k).map(|i| p2p(true, 1, 4096 * i, 64)).collect();
        // The first receive lands in send 9's buffer, the second in send 2's, the third in
        // sends 5 to 11's (a wide one).
        g.push(p2p(false, 1, 4096 * (LL_P2P_SLOTS + 1), 64));
        g.push(p2p(false, 1, 4096 * 2, 64));
        g.push(p2p(false, 1, 4096 * 5, 4096 * 6 + 64));
        let l = plan(&g, &mut s);
        assert_eq!(l.launches.len(), 1);
        let x = l.launches[0].x;
        assert_eq!(&x.rafter[..3], &[0, 3, LL_P2P_SLOTS as u32]);
        let snapped: Vec<usize> = l.snapshots.iter().map(|s| s.k).collect();
        assert_eq!(
            snapped,
            vec![
                LL_P2P_SLOTS,
                LL_P2P_SLOTS + 1,
                LL_P2P_SLOTS + 2,
                LL_P2P_SLOTS + 3
            ]
        );
        assert!(l.snapshots.iter().all(|s| s.launch == 0 && s.bytes == 64));
    }
}
