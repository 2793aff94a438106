//! Mismatched collectives on the cuda-ipc path: the data path carries no operation headers
//! (chunks go straight into receive slots), so each rank posts what it called on a small
//! board in host shared memory, and compares its own recent calls with its peers' boards when
//! it enqueues and when it is asked for its async error (PyTorch's watchdog asks every few
//! milliseconds). A mismatch becomes `ncclInvalidUsage` naming both calls, instead of a silent
//! hang or corrupt results. Only collectives are compared: every rank calls them in the same
//! order, while point-to-point groups legitimately differ between ranks.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use ccl_cuda::DataType;
use ccl_transports::shm::ShmBoard;

use crate::error::{Error, Result};
use ccl_collectives::task::{Task, TaskKind};

/// Collectives remembered (and posted) per rank.
pub(crate) const ENTRIES: usize = 64;
const ENTRY_WORDS: usize = 4;

/// What a group of collectives asked for: its first operation, how many there were, and a hash
/// of all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallSig {
    kind: u8,
    dtype: u8,
    red: u8,
    ntasks: u8,
    root: u32,
    count: u64,
    hash: u64,
}

impl CallSig {
    /// The signature of a group, `None` when it holds point-to-point operations.
    pub fn of(tasks: &[Task]) -> Option<CallSig> {
        let first = tasks.first()?;
        if tasks.iter().any(|t| !matches!(t.kind, TaskKind::Coll(_))) {
            return None;
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for t in tasks {
            for v in [
                t.kind.code() as u64,
                t.dtype as u64,
                t.red.code() as u64,
                t.kind.root().map_or(u64::MAX, |r| r as u64),
                t.count as u64,
            ] {
                hash = (hash ^ v).wrapping_mul(0x100_0000_01b3);
            }
        }
        Some(CallSig {
            kind: first.kind.code(),
            dtype: first.dtype as u8,
            red: first.red.code(),
            ntasks: tasks.len().min(255) as u8,
            root: first.kind.root().map_or(u32::MAX, |r| r as u32),
            count: first.count as u64,
            hash,
        })
    }

    fn words(&self) -> [u64; 3] {
        let a = self.kind as u64
            | (self.dtype as u64) << 8
            | (self.red as u64) << 16
            | (self.ntasks as u64) << 24
            | (self.root as u64) << 32;
        [a, self.count, self.hash]
    }

    fn from_words(w: [u64; 3]) -> CallSig {
        CallSig {
            kind: w[0] as u8,
            dtype: (w[0] >> 8) as u8,
            red: (w[0] >> 16) as u8,
            ntasks: (w[0] >> 24) as u8,
            root: (w[0] >> 32) as u32,
            count: w[1],
            hash: w[2],
        }
    }

    /// E.g. `AllReduce(count=100, Float32, op 0)`, with the group size when above one.
    pub fn describe(&self) -> String {
        const KINDS: [&str; 10] = [
            "?",
            "AllReduce",
            "Broadcast",
            "Reduce",
            "AllGather",
            "ReduceScatter",
            "AlltoAll",
            "Gather",
            "Scatter",
            "Send/Recv",
        ];
        let kind = KINDS.get(self.kind as usize).copied().unwrap_or("?");
        let dtype = DataType::from_raw(self.dtype as i32)
            .map_or_else(|| format!("type {}", self.dtype), |d| format!("{d:?}"));
        let root = if self.root == u32::MAX {
            String::new()
        } else {
            format!(", root {}", self.root)
        };
        let group = if self.ntasks > 1 {
            format!(" (first of {} in a group)", self.ntasks)
        } else {
            String::new()
        };
        format!(
            "{kind}(count={}, {dtype}, op {}{root}){group}",
            self.count, self.red
        )
    }
}

/// One `/dev/shm` board per rank of a communicator: this rank's own (created here) and its
/// peers' (mapped once every rank has created its own).
pub(crate) struct RankBoards {
    rank: usize,
    kind: &'static str,
    pub own: ShmBoard,
    pub peers: Vec<Option<ShmBoard>>,
}

/// The name of `rank`'s board of `kind` in the communicator with `nonce`.
pub(crate) fn board_name(kind: &str, nonce: u64, rank: usize) -> String {
    format!("{kind}-{nonce:016x}-{rank}")
}

impl RankBoards {
    /// Creates this rank's board of `words` words (before the peers open it).
    pub fn create(
        kind: &'static str,
        nonce: u64,
        rank: usize,
        nranks: usize,
        words: usize,
    ) -> Result<RankBoards> {
        let own = ShmBoard::create(&board_name(kind, nonce, rank), words)
            .map_err(|e| Error::system(format!("cuda-ipc {kind} board: {e}")))?;
        Ok(RankBoards {
            rank,
            kind,
            own,
            peers: (0..nranks).map(|_| None).collect(),
        })
    }

    /// Opens every peer's board (each has created its own by now).
    pub fn open_peers(&mut self, nonce: u64) -> Result<()> {
        for (j, slot) in self.peers.iter_mut().enumerate() {
            if j != self.rank {
                *slot = Some(
                    ShmBoard::open(&board_name(self.kind, nonce, j)).map_err(|e| {
                        Error::system(format!("rank {j}'s cuda-ipc {} board: {e}", self.kind))
                    })?,
                );
            }
        }
        Ok(())
    }

    /// Removes this rank's file once every peer has mapped it.
    pub fn unlink(&self) {
        self.own.unlink();
    }

    /// Rank `r`'s board (this rank's own at its rank).
    pub fn of(&self, r: usize) -> Option<&ShmBoard> {
        if r == self.rank {
            Some(&self.own)
        } else {
            self.peers.get(r)?.as_ref()
        }
    }
}

impl Drop for RankBoards {
    /// Unlinking is idempotent; a board dropped before the end of setup (every rank bails
    /// out alike) must not stay behind in `/dev/shm`.
    fn drop(&mut self) {
        self.own.unlink();
    }
}

/// This rank's call board (written here) and its peers' (read here).
pub(crate) struct CallBoard {
    pub boards: RankBoards,
}

impl CallBoard {
    /// Creates this rank's board (before the peers open it).
    pub fn create(nonce: u64, rank: usize, nranks: usize) -> Result<CallBoard> {
        Ok(CallBoard {
            boards: RankBoards::create("calls", nonce, rank, nranks, ENTRIES * ENTRY_WORDS)?,
        })
    }

    /// Posts collective number `seq` (from 1). The entry's sequence word goes last, so a
    /// reader that sees it before and after the other words saw a whole entry.
    pub fn post(&self, seq: u64, sig: CallSig) {
        let base = (seq as usize % ENTRIES) * ENTRY_WORDS;
        let w = |i: usize| self.boards.own.word(base + i);
        if let Some(s) = w(0) {
            s.store(0, Ordering::Release);
        }
        for (i, v) in sig.words().into_iter().enumerate() {
            if let Some(x) = w(i + 1) {
                x.store(v, Ordering::Release);
            }
        }
        if let Some(s) = w(0) {
            s.store(seq, Ordering::Release);
        }
    }

    fn read(board: &ShmBoard, seq: u64) -> Option<CallSig> {
        let base = (seq as usize % ENTRIES) * ENTRY_WORDS;
        let s1 = board.word(base)?.load(Ordering::Acquire);
        if s1 != seq {
            return None;
        }
        let mut w = [0u64; 3];
        for (i, x) in w.iter_mut().enumerate() {
            *x = board.word(base + 1 + i)?.load(Ordering::Acquire);
        }
        (board.word(base)?.load(Ordering::Acquire) == s1).then(|| CallSig::from_words(w))
    }

    /// The first disagreement between this rank's recent calls (`mine`, by sequence number)
    /// and what the peers posted for the same numbers. Calls a peer was seen to agree on, up
    /// to its first one not yet posted, are not read again (`mine.agreed`), so a call in step
    /// with its peers reads one or two of their entries, not the whole window.
    pub fn check(&self, mine: &mut History) -> Option<Error> {
        let peers = self.boards.peers.len();
        if mine.agreed.len() != peers {
            mine.agreed = vec![0; peers];
        }
        // Calls that left the window can no longer be compared.
        let floor = mine.recent.front().map_or(0, |&(seq, _)| seq - 1);
        for (j, b) in self.boards.peers.iter().enumerate() {
            let Some(b) = b else { continue };
            let agreed = &mut mine.agreed[j];
            *agreed = (*agreed).max(floor);
            let from = *agreed;
            for &(seq, sig) in mine.recent.iter().filter(|(seq, _)| *seq > from) {
                match Self::read(b, seq) {
                    Some(theirs) if theirs == sig && seq == *agreed + 1 => *agreed = seq,
                    Some(theirs) if theirs == sig => {}
                    Some(theirs) => {
                        // Both start alike: one rank grouped collectives the other did not.
                        let hint = if theirs.ntasks != sig.ntasks
                            && (
                                theirs.kind,
                                theirs.dtype,
                                theirs.red,
                                theirs.root,
                                theirs.count,
                            ) == (sig.kind, sig.dtype, sig.red, sig.root, sig.count)
                        {
                            "; between the GPUs of one host every rank must group its \
                             collectives alike (the same ones between each ncclGroupStart and \
                             ncclGroupEnd)"
                        } else {
                            ""
                        };
                        return Some(Error::invalid_usage(format!(
                            "mismatched collectives on a communicator: collective #{seq} is \
                             {} on rank {} but {} on rank {j}{hint}",
                            sig.describe(),
                            self.boards.rank,
                            theirs.describe()
                        )));
                    }
                    None => {}
                }
            }
        }
        None
    }
}

/// The recent calls of one rank and their count.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub seq: u64,
    pub recent: VecDeque<(u64, CallSig)>,
    /// Per peer of the board, the last call up to which every one was seen to agree.
    pub agreed: Vec<u64>,
}

impl History {
    /// Records the next collective; returns its sequence number.
    pub fn push(&mut self, sig: CallSig) -> u64 {
        self.seq += 1;
        if self.recent.len() == ENTRIES {
            self.recent.pop_front();
        }
        self.recent.push_back((self.seq, sig));
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccl_collectives::Collective;
    use ccl_cuda::ReduceKind;

    use ccl_collectives::task::Reduction;

    fn coll(c: Collective, count: usize) -> Task {
        Task {
            kind: TaskKind::Coll(c),
            send: 0x1000,
            recv: 0x2000,
            count,
            dtype: DataType::Float32,
            red: Reduction::Plain(ReduceKind::Sum),
            stream: 0,
            fold: false,
        }
    }

    /// The boards of ranks 0 and 1 of a two-rank communicator, each seeing the other's, their
    /// files already unlinked. `tag` keeps tests running at once apart.
    fn two_boards(tag: u64) -> (CallBoard, CallBoard) {
        let nonce = tag ^ std::process::id() as u64;
        let mut a = CallBoard::create(nonce, 0, 2).unwrap();
        let mut b = CallBoard::create(nonce, 1, 2).unwrap();
        a.boards.open_peers(nonce).unwrap();
        b.boards.open_peers(nonce).unwrap();
        a.boards.unlink();
        b.boards.unlink();
        (a, b)
    }

    #[test]
    fn peers_see_a_mismatch_by_sequence_number() {
        let (a, b) = two_boards(0x5eed_0000);
        let (mut ha, mut hb) = (History::default(), History::default());
        // 100 matching collectives (the board wraps), then a different count.
        for i in 0..100 {
            let s = CallSig::of(&[coll(Collective::AllReduce, i)]).unwrap();
            a.post(ha.push(s), s);
            b.post(hb.push(s), s);
            assert!(a.check(&mut ha).is_none() && b.check(&mut hb).is_none());
        }
        let sa = CallSig::of(&[coll(Collective::AllReduce, 100)]).unwrap();
        let sb = CallSig::of(&[coll(Collective::Broadcast { root: 1 }, 200)]).unwrap();
        a.post(ha.push(sa), sa);
        // Rank 1 has not called yet: nothing to compare.
        assert!(a.check(&mut ha).is_none());
        b.post(hb.push(sb), sb);
        let e = b.check(&mut hb).expect("rank 1 sees the mismatch");
        let msg = e.to_string();
        assert!(msg.contains("collective #101"), "{msg}");
        assert!(
            msg.contains("Broadcast(count=200, Float32, op 0, root 1) on rank 1"),
            "{msg}"
        );
        assert!(
            msg.contains("AllReduce(count=100, Float32, op 0) on rank 0"),
            "{msg}"
        );
        assert!(a.check(&mut ha).is_some(), "rank 0 sees it too");
        assert!(!msg.contains("group its collectives alike"), "{msg}");
    }

    /// A peer behind by several calls: nothing to compare until it posts, then the calls it
    /// agrees on are passed (and not read again) and its first different one is found.
    #[test]
    fn a_late_peer_s_mismatch_is_found_after_the_calls_it_agrees_on() {
        let (a, b) = two_boards(0x5eed_2000);
        let (mut ha, mut hb) = (History::default(), History::default());
        let s = CallSig::of(&[coll(Collective::AllReduce, 64)]).unwrap();
        let t = CallSig::of(&[coll(Collective::AllReduce, 65)]).unwrap();
        for _ in 0..10 {
            a.post(ha.push(s), s);
        }
        assert!(a.check(&mut ha).is_none());
        assert_eq!(ha.agreed, [0, 0]);
        for _ in 0..4 {
            b.post(hb.push(s), s);
        }
        assert!(a.check(&mut ha).is_none());
        assert_eq!(ha.agreed[1], 4);
        b.post(hb.push(t), t);
        let msg = a
            .check(&mut ha)
            .expect("rank 0 sees call 5 differ")
            .to_string();
        assert!(msg.contains("collective #5"), "{msg}");
        assert_eq!(ha.agreed[1], 4);
        assert!(a.check(&mut ha).is_some(), "and keeps seeing it");
    }

    #[test]
    fn a_group_against_the_same_collective_alone_says_to_group_alike() {
        let (a, b) = two_boards(0x5eed_1000);
        let (mut ha, mut hb) = (History::default(), History::default());
        let grouped = CallSig::of(&[
            coll(Collective::AllReduce, 256),
            coll(Collective::AllGather, 256),
        ])
        .unwrap();
        let alone = CallSig::of(&[coll(Collective::AllReduce, 256)]).unwrap();
        a.post(ha.push(grouped), grouped);
        b.post(hb.push(alone), alone);
        let msg = b.check(&mut hb).expect("a mismatch").to_string();
        assert!(
            msg.contains("AllReduce(count=256, Float32, op 0) (first of 2 in a group) on rank 0"),
            "{msg}"
        );
        assert!(msg.contains("must group its collectives alike"), "{msg}");
    }

    #[test]
    fn point_to_point_groups_are_not_compared() {
        let mut t = coll(Collective::AllReduce, 1);
        t.kind = TaskKind::Send { peer: 1 };
        assert!(CallSig::of(&[t]).is_none());
        assert!(CallSig::of(&[]).is_none());
        // Groups differ by any member, not only the first.
        let g1 = CallSig::of(&[
            coll(Collective::AllReduce, 1),
            coll(Collective::AllGather, 2),
        ]);
        let g2 = CallSig::of(&[
            coll(Collective::AllReduce, 1),
            coll(Collective::AllGather, 3),
        ]);
        assert_ne!(g1, g2);
        assert!(g1.unwrap().describe().contains("first of 2 in a group"));
    }
}
