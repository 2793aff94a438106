//! Symmetric windows (`ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`): every rank
//! registers a buffer of the same size in the same order, and a collective's buffers sit at the
//! same offset of every rank's window. A rank then knows where each of its sends lands on its
//! peer without the peer's post, and pushes whenever the peer calls
//! ([`crate::rendezvous::post_pushed`]): no send waits on the host for its receiver, and which
//! side copies no longer depends on who called first. The windows are agreed when they are
//! registered ([`crate::registration::register_window`]); here they are looked up.

use ccl_collectives::task::{Task, TaskKind};
use ccl_collectives::Collective;

use crate::direct_reduce::NO_POST;
use crate::error::Result;
use crate::lower::{lower, overlap, Act};
use crate::rendezvous::Post;

/// One window: this rank's range, and every peer's window as its owner posted it (None at
/// this rank's index).
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub base: u64,
    pub size: u64,
    pub peers: Vec<Option<Post>>,
}

/// The communicator's symmetric windows.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    list: Vec<Window>,
}

impl Windows {
    pub(crate) fn add(&mut self, w: Window) {
        self.list.push(w);
    }

    /// Forgets the window at `base`; false if there was none.
    pub(crate) fn remove(&mut self, base: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|w| w.base != base);
        self.list.len() != before
    }

    /// The window holding `[addr, addr + bytes)`, and `addr`'s offset in it.
    fn find(&self, addr: u64, bytes: usize) -> Option<(&Window, u64)> {
        let end = addr.checked_add(bytes as u64)?;
        self.list
            .iter()
            .find(|w| addr >= w.base && end <= w.base + w.size)
            .map(|w| (w, addr - w.base))
    }

    /// Peer `q`'s place mirroring `[addr, addr + bytes)` of this rank's window, as a post of
    /// `q`'s (so it resolves through the mapping cache like any).
    fn mirror(&self, q: usize, addr: u64, bytes: usize) -> Option<Post> {
        let (w, off) = self.find(addr, bytes)?;
        let p = w.peers.get(q)?.as_ref()?;
        Some(Post {
            addr: p.addr + off,
            bytes: bytes as u64,
            offset: p.offset + off,
            host_permille: 0,
            ..*p
        })
    }

    /// Where each of this rank's sends in a group of collectives lands, per peer in send order,
    /// as the peer's posts would name it; None when the group does not go so: it has sends or
    /// receives (their buffers need not be symmetric), some landing place lies outside the
    /// windows, a peer would receive over its own sends (an in-place all-to-all: it must
    /// receive into its bounce buffer, which only its post names), or the peers' buffers could
    /// be read two ways that disagree ([`readings`]). A peer's buffers are this rank's at the
    /// same offsets, so its receives are this rank's group lowered as the peer's.
    pub(crate) fn targets(
        &self,
        tasks: &[Task],
        rank: usize,
        n: usize,
    ) -> Result<Option<Vec<Vec<Post>>>> {
        let p2p = |t: &Task| matches!(t.kind, TaskKind::Send { .. } | TaskKind::Recv { .. });
        if self.list.is_empty() || tasks.is_empty() || tasks.iter().any(p2p) {
            return Ok(None);
        }
        let mut all = vec![Vec::new(); n];
        for (q, out) in all.iter_mut().enumerate().filter(|&(q, _)| q != rank) {
            let mut agreed: Option<Vec<(u64, usize)>> = None;
            for as_q in readings(tasks, rank, q) {
                let Some(places) = landing_places(&as_q, rank, q, n)? else {
                    return Ok(None);
                };
                if agreed.as_ref().is_some_and(|a| *a != places) {
                    return Ok(None);
                }
                agreed = Some(places);
            }
            for (dst, bytes) in agreed.unwrap_or_default() {
                match self.mirror(q, dst, bytes) {
                    Some(p) => out.push(p),
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(all))
    }
}

impl Windows {
    /// Every rank's (input, output) of a direct all-reduce or reduce-scatter whose buffers lie
    /// in this rank's windows, as the owners' posts would name them (this rank's entry is
    /// [`NO_POST`]: its own buffers are used as they are); None for other collectives (a
    /// reduce's output exists on its root only, so the others cannot mirror it) or buffers
    /// outside the windows. An in-place reduce-scatter's output is each rank's own block of
    /// its input, so a peer's is mirrored at the peer's block, not at this rank's.
    pub(crate) fn reduction_posts(
        &self,
        t: &Task,
        rank: usize,
        n: usize,
    ) -> Option<Vec<(Post, Post)>> {
        if self.list.is_empty()
            || !matches!(
                t.kind,
                TaskKind::Coll(Collective::AllReduce | Collective::ReduceScatter)
            )
        {
            return None;
        }
        let size = t.dtype.size();
        let (sb, rb) = ccl_collectives::task::buffer_counts(t.kind, rank, n, t.count)?;
        let (sb, rb) = (sb.checked_mul(size)?, rb.checked_mul(size)?);
        let (send, recv) = (t.send as u64, t.recv as u64);
        let block = |r: usize| send + (r * rb) as u64;
        let in_place_rs =
            matches!(t.kind, TaskKind::Coll(Collective::ReduceScatter)) && recv == block(rank);
        let mut posts = vec![(NO_POST, NO_POST); n];
        for (q, p) in posts.iter_mut().enumerate().filter(|&(q, _)| q != rank) {
            let out = if in_place_rs { block(q) } else { recv };
            *p = (self.mirror(q, send, sb)?, self.mirror(q, out, rb)?);
        }
        Some(posts)
    }
}

/// Where rank `q`, holding the buffers `as_q` (in this rank's address space), receives this
/// rank's sends, in order; None if it would receive over its own sends.
fn landing_places(
    as_q: &[Task],
    me: usize,
    q: usize,
    n: usize,
) -> Result<Option<Vec<(u64, usize)>>> {
    let theirs = lower(as_q, q, n, usize::MAX, 0)?;
    let sends: Vec<(u64, usize)> = theirs
        .tx
        .iter()
        .flatten()
        .map(|s| (s.src, s.bytes))
        .collect();
    let mut places = Vec::with_capacity(theirs.rx[me].len());
    for r in &theirs.rx[me] {
        let Act::Copy { dst } = r.act else {
            return Ok(None);
        };
        if sends.iter().any(|&(a, al)| overlap(a, al, dst, r.bytes)) {
            return Ok(None);
        }
        places.push((dst, r.bytes));
    }
    Ok(Some(places))
}

/// Rank `q`'s group as this rank (`me`) may read it through the windows: the same buffers at
/// the same offsets, except where this rank's task is in place by NCCL's conventions. An
/// all-gather's or gather's input is then each rank's own block of its output (at this rank's
/// offset it would lie over the block where `q` receives this rank's, which no caller means);
/// a scatter's output is each rank's own block of its input, or, as a scatter's input is unused
/// off the root and may lie anywhere, at this rank's offset: both readings are given, and a
/// send goes to its place only where they agree.
fn readings(tasks: &[Task], me: usize, q: usize) -> Vec<Vec<Task>> {
    let mut ambiguous = false;
    let read: Vec<Task> = tasks
        .iter()
        .map(|t| {
            let block = (t.count * t.dtype.size()) as u64;
            let at = |base: usize, r: usize| (base as u64 + r as u64 * block) as usize;
            match t.kind {
                TaskKind::Coll(Collective::AllGather | Collective::Gather { .. })
                    if t.send == at(t.recv, me) =>
                {
                    Task {
                        send: at(t.recv, q),
                        ..*t
                    }
                }
                TaskKind::Coll(Collective::Scatter { .. }) if t.recv == at(t.send, me) => {
                    ambiguous = true;
                    Task {
                        recv: at(t.send, q),
                        ..*t
                    }
                }
                _ => *t,
            }
        })
        .collect();
    match ambiguous {
        true => vec![tasks.to_vec(), read],
        false => vec![read],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: [u64; 3] = [0x10_0000, 0x50_0000, 0x90_0000];

    /// Three ranks whose windows are [BASE[r], BASE[r] + 1 MiB), seen from `rank`.
    fn windows(rank: usize) -> Windows {
        let peers = (0..3)
            .map(|q| {
                (q != rank).then(|| Post {
                    pid: 7 + q as u64,
                    addr: BASE[q],
                    bytes: 1 << 20,
                    buffer_id: 40 + q as u64,
                    offset: 64,
                    handle: [q as u8; 64],
                    host_permille: 0,
                })
            })
            .collect();
        let mut w = Windows::default();
        w.add(Window {
            base: BASE[rank],
            size: 1 << 20,
            peers,
        });
        w
    }

    fn task(kind: TaskKind, send: u64, recv: u64, count: usize) -> Task {
        ccl_collectives::task::float_sum(kind, send as usize, recv as usize, count)
    }

    #[test]
    fn an_all_gather_lands_at_the_peers_own_offsets() {
        let w = windows(1);
        let t = task(
            TaskKind::Coll(Collective::AllGather),
            BASE[1] + 0x100,
            BASE[1] + 0x1000,
            16,
        );
        let got = w.targets(&[t], 1, 3).unwrap().unwrap();
        assert!(got[1].is_empty());
        for q in [0, 2] {
            assert_eq!(got[q].len(), 1, "one block to rank {q}");
            let p = got[q][0];
            // Rank 1's block of 64 bytes at offset 0x1000 + 64 of rank q's window.
            assert_eq!(p.addr, BASE[q] + 0x1000 + 64);
            assert_eq!(p.offset, 64 + 0x1000 + 64);
            assert_eq!(
                (p.bytes, p.pid, p.buffer_id),
                (64, 7 + q as u64, 40 + q as u64)
            );
            assert_eq!(p.host_permille, 0);
        }
    }

    #[test]
    fn groups_that_cannot_go_symmetric_say_so() {
        let w = windows(0);
        let coll = |kind, send, recv| task(TaskKind::Coll(kind), send, recv, 16);
        // Outside the window, sends and receives, no windows at all.
        let outside = coll(Collective::AllGather, BASE[0], BASE[0] + (1 << 20));
        assert!(w.targets(&[outside], 0, 3).unwrap().is_none());
        let send = task(TaskKind::Send { peer: 1 }, BASE[0], BASE[0], 16);
        assert!(w.targets(&[send], 0, 3).unwrap().is_none());
        let fine = coll(Collective::AlltoAll, BASE[0], BASE[0] + 0x1000);
        assert!(Windows::default().targets(&[fine], 0, 3).unwrap().is_none());
        assert!(w.targets(&[fine], 0, 3).unwrap().is_some());
        // In place, an all-to-all's peers receive over their own sends.
        let in_place = coll(Collective::AlltoAll, BASE[0], BASE[0]);
        assert!(w.targets(&[in_place], 0, 3).unwrap().is_none());
        // An in-place all-gather does not (every rank's block is its own).
        let ag = coll(Collective::AllGather, BASE[0] + 64, BASE[0]);
        assert!(w.targets(&[ag], 0, 3).unwrap().is_some());
    }

    #[test]
    fn a_scatter_that_may_be_in_place_meets_as_any() {
        // Block 2 of rank 2's input: NCCL's in-place scatter puts rank q's output at block q of
        // its own input, the same offset at block 2: the readings disagree.
        let w = windows(2);
        let block = 4 * 16;
        let input = BASE[2] + 0x2000;
        let scatter = |recv| {
            task(
                TaskKind::Coll(Collective::Scatter { root: 2 }),
                input,
                recv,
                16,
            )
        };
        assert!(w
            .targets(&[scatter(input + 2 * block)], 2, 3)
            .unwrap()
            .is_none());
        let apart = w
            .targets(&[scatter(input + 0x1000)], 2, 3)
            .unwrap()
            .unwrap();
        for q in [0, 1] {
            assert_eq!(got_addr(&apart, q), BASE[q] + 0x3000);
        }
        // An in-place all-gather reads one way only: every rank's block is its own.
        let ag = task(
            TaskKind::Coll(Collective::AllGather),
            input + 2 * block,
            input,
            16,
        );
        let got = w.targets(&[ag], 2, 3).unwrap().unwrap();
        for q in [0, 1] {
            assert_eq!(got_addr(&got, q), BASE[q] + 0x2000 + 2 * block);
        }
    }

    fn got_addr(t: &[Vec<Post>], q: usize) -> u64 {
        assert_eq!(t[q].len(), 1);
        t[q][0].addr
    }

    #[test]
    fn a_reduction_mirrors_every_peers_buffers() {
        let w = windows(1);
        let coll = |kind, send, recv| task(TaskKind::Coll(kind), send, recv, 16);
        let ar = coll(Collective::AllReduce, BASE[1] + 0x100, BASE[1] + 0x1000);
        let got = w.reduction_posts(&ar, 1, 3).unwrap();
        assert_eq!(got[1], (NO_POST, NO_POST));
        for q in [0, 2] {
            let (i, o) = got[q];
            assert_eq!(
                (i.addr, i.bytes, i.offset),
                (BASE[q] + 0x100, 64, 64 + 0x100)
            );
            assert_eq!(
                (o.addr, o.bytes, o.buffer_id),
                (BASE[q] + 0x1000, 64, 40 + q as u64)
            );
        }
        // In place, a reduce-scatter's output is each rank's own block of its input (16
        // floats of 48).
        let input = BASE[1] + 0x2000;
        let rs = coll(Collective::ReduceScatter, input, input + 64);
        let got = w.reduction_posts(&rs, 1, 3).unwrap();
        for q in [0, 2] {
            let (i, o) = got[q];
            assert_eq!((i.addr, i.bytes), (BASE[q] + 0x2000, 3 * 64));
            assert_eq!((o.addr, o.bytes), (BASE[q] + 0x2000 + q as u64 * 64, 64));
        }
        // Out of place, every rank's output at this rank's offset.
        let rs = coll(Collective::ReduceScatter, input, input + 0x1000);
        assert_eq!(
            w.reduction_posts(&rs, 1, 3).unwrap()[2].1.addr,
            BASE[2] + 0x3000
        );
        // A reduce's output is its root's only; buffers outside the window; no windows.
        let reduce = coll(Collective::Reduce { root: 0 }, BASE[1], BASE[1] + 0x1000);
        assert!(w.reduction_posts(&reduce, 1, 3).is_none());
        let outside = coll(Collective::AllReduce, BASE[1], BASE[1] + (1 << 20) - 32);
        assert!(w.reduction_posts(&outside, 1, 3).is_none());
        assert!(Windows::default().reduction_posts(&ar, 1, 3).is_none());
    }

    #[test]
    fn removing_a_window_forgets_it() {
        let mut w = windows(0);
        assert!(!w.remove(BASE[1]));
        assert!(w.remove(BASE[0]));
        let t = task(
            TaskKind::Coll(Collective::Broadcast { root: 0 }),
            BASE[0],
            BASE[0],
            4,
        );
        assert!(w.targets(&[t], 0, 3).unwrap().is_none());
    }
}
