//! The rendezvous of a transfer's two ranks in host shared memory: each side posts how to
//! reach its buffer ([`Post`]) on an entry of the destination's inbox ([`Words`]), and a
//! compare-and-swap on the entry's state word decides which side came first ([`post`],
//! [`resolve`]); `direct` explains what each side then queues. Also what the direct paths
//! share about buffers: how this rank's are exported and peers' resolved ([`Reach`]), which
//! the collective rendezvous of the direct reductions and the captured groups use too.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::layout::{ENTRY_WORDS, POST_WORDS, RING};
use crate::sync::{Atomic64, Ordering};

/// How the other side reaches one side's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Post {
    /// Process of the poster: in the same process `addr` is usable as it is.
    pub pid: u64,
    pub addr: u64,
    pub bytes: u64,
    /// The allocation (CUDA's process-unique buffer id) and the offset in it, for mapping
    /// from another process through `handle`.
    pub buffer_id: u64,
    pub offset: u64,
    pub handle: [u8; 64],
    /// The host path's share of the transfer in thousandths, as this side would cut it
    /// ([`crate::host_path::HostPath`]): the first poster's value holds for both sides (0: none).
    pub host_permille: u32,
}

impl Post {
    pub(crate) fn to_words(self) -> [u64; POST_WORDS] {
        let mut w = [0u64; POST_WORDS];
        w[..5].copy_from_slice(&[self.pid, self.addr, self.bytes, self.buffer_id, self.offset]);
        for (i, c) in self.handle.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            w[5 + i] = u64::from_le_bytes(b);
        }
        w[13] = u64::from(self.host_permille);
        w
    }

    pub(crate) fn from_words(w: &[u64; POST_WORDS]) -> Post {
        let mut handle = [0u8; 64];
        for (i, c) in handle.chunks_exact_mut(8).enumerate() {
            c.copy_from_slice(&w[5 + i].to_le_bytes());
        }
        Post {
            pid: w[0],
            addr: w[1],
            bytes: w[2],
            buffer_id: w[3],
            offset: w[4],
            handle,
            host_permille: w[13].min(1000) as u32,
        }
    }
}

/// Shared words a rendezvous lives in (a `/dev/shm` board, or memory in tests).
pub(crate) trait Words {
    fn word(&self, i: usize) -> Option<&dyn Atomic64>;
}

impl Words for ccl_transports::shm::ShmBoard {
    fn word(&self, i: usize) -> Option<&dyn Atomic64> {
        ccl_transports::shm::ShmBoard::word(self, i).map(|w| w as &dyn Atomic64)
    }
}

impl Words for Vec<AtomicU64> {
    fn word(&self, i: usize) -> Option<&dyn Atomic64> {
        self.get(i).map(|w| w as &dyn Atomic64)
    }
}

/// Entry state bits (above them, the entry's generation: transfer number / `RING`).
const SRC: u64 = 1;
const DST: u64 = 2;
/// The source stopped waiting for the destination's post: the destination copies (pulls).
const FINAL: u64 = 4;
/// The source sends eagerly, through the destination's receive slots ([`go_eager`]): the
/// destination copies out of its slots.
const EAGER: u64 = 8;
/// The source pushes without waiting for the destination's post: a symmetric window told it
/// where the destination's buffer is ([`post_pushed`]); its post's `addr` names that place in
/// the destination's process.
const PUSH: u64 = 16;
const GEN_SHIFT: u32 = 5;

/// What a post found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The peer copies; this side flags "here" and waits for "done".
    First,
    /// This side copies, from or to the peer's posted buffer.
    Second(Post),
    /// A source posted before its destination: it waits (briefly, [`resolve`]) for the
    /// destination's post so it can push, the faster way across processes, or sends eagerly
    /// ([`go_eager`]).
    Pending,
    /// The source sends through the destination's receive slots: for the destination, the
    /// source's post (its size cuts the chunks); for the source, None.
    Eager(Option<Post>),
    /// For the destination: the source pushes, without having waited for this post, into the
    /// place its post's `addr` names ([`post_pushed`]); this side flags "here" and waits for
    /// "done", as for [`Outcome::First`].
    Pushed(Post),
}

/// One rendezvous entry: transfer `seq` from `src`, in the destination's inbox.
struct Entry<'a> {
    board: &'a dyn Words,
    base: usize,
    gen: u64,
}

impl<'a> Entry<'a> {
    fn new(board: &'a dyn Words, src: usize, seq: u64) -> Entry<'a> {
        Entry {
            board,
            base: (src * RING + (seq % RING as u64) as usize) * ENTRY_WORDS,
            gen: seq / RING as u64,
        }
    }

    fn word(&self, i: usize) -> Result<&'a dyn Atomic64> {
        self.board
            .word(self.base + i)
            .ok_or_else(|| Error::internal("cuda-ipc: rendezvous entry outside the board"))
    }

    fn side_at(src_side: bool) -> usize {
        if src_side {
            1
        } else {
            1 + POST_WORDS
        }
    }

    fn write(&self, src_side: bool, p: &Post) -> Result<()> {
        for (i, v) in p.to_words().into_iter().enumerate() {
            self.word(Self::side_at(src_side) + i)?
                .store(v, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Reads the other side's post and frees the entry for the transfer `RING` later (the
    /// reader is the last to touch it).
    fn take(&self, src_side: bool) -> Result<Post> {
        let mut w = [0u64; POST_WORDS];
        for (i, v) in w.iter_mut().enumerate() {
            *v = self
                .word(Self::side_at(src_side) + i)?
                .load(Ordering::Relaxed);
        }
        self.word(0)?
            .store((self.gen + 1) << GEN_SHIFT, Ordering::Release);
        Ok(Post::from_words(&w))
    }
}

/// Posts this side of transfer `seq` from `src` (the entry sits in the destination's inbox
/// `board`). A destination never waits: it copies (pulls) only if the source already gave up
/// waiting for it, else the source will push. Waits only while the entry still holds the
/// transfer `RING` earlier (a peer that far behind) until `deadline`, or until `stop` says
/// the communicator is going away.
pub(crate) fn post(
    board: &dyn Words,
    src: usize,
    seq: u64,
    i_am_src: bool,
    mine: &Post,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> Result<Outcome> {
    let side = if i_am_src {
        Side::Source
    } else {
        Side::Destination
    };
    post_as(board, (src, seq), side, mine, deadline, stop)
}

/// Posts the source side of transfer `seq` whose destination buffer this side already knows
/// (`target`, as the destination's process names it, through a symmetric window): the
/// destination's post if it came first (then it is pushed to as any), else `target`
/// without waiting. Either way this side pushes, whenever the destination calls: the path no
/// longer depends on which rank called first. Waits only as [`post`] does, for ring room.
pub(crate) fn post_pushed(
    board: &dyn Words,
    src: usize,
    seq: u64,
    mine: &Post,
    target: &Post,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> Result<Outcome> {
    post_as(
        board,
        (src, seq),
        Side::Pushing(target),
        mine,
        deadline,
        stop,
    )
}

/// Which side posts, and how.
#[derive(Clone, Copy)]
enum Side<'a> {
    Source,
    Destination,
    /// A source that pushes to this place unless the destination posted first.
    Pushing(&'a Post),
}

/// [`post`] and [`post_pushed`]: the other side's post when it settles this one, else this
/// side's post set on the entry by a compare-and-swap.
fn post_as(
    board: &dyn Words,
    (src, seq): (usize, u64),
    side: Side<'_>,
    mine: &Post,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> Result<Outcome> {
    let e = Entry::new(board, src, seq);
    let state = e.word(0)?;
    let i_am_src = !matches!(side, Side::Destination);
    let mut spins = 0u32;
    loop {
        let w = state.load(Ordering::Acquire);
        let (g, bits) = (w >> GEN_SHIFT, w & (SRC | DST | FINAL | EAGER | PUSH));
        if g == e.gen {
            let mine_bit = if i_am_src { SRC } else { DST };
            if bits & mine_bit != 0 {
                return Err(Error::internal(format!(
                    "cuda-ipc: transfer {seq} from rank {src} posted twice by one side"
                )));
            }
            if let Some(o) = settled_by_other(&e, bits, i_am_src)? {
                return Ok(o);
            }
            let (post, set, o) = match side {
                Side::Source => (*mine, SRC, Outcome::Pending),
                Side::Destination => (*mine, DST, Outcome::First),
                Side::Pushing(t) => (
                    Post {
                        addr: t.addr,
                        ..*mine
                    },
                    SRC | PUSH,
                    Outcome::Second(*t),
                ),
            };
            e.write(i_am_src, &post)?;
            if state
                .compare_exchange(w, w | set, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(o);
            }
            continue;
        }
        if g > e.gen {
            return Err(Error::internal(format!(
                "cuda-ipc: rendezvous entry of transfer {seq} from rank {src} is at generation \
                 {g}, ahead of this side"
            )));
        }
        wait_for_ring(state, &mut spins, stop, deadline, || {
            format!("{RING} transfers behind rank {src}")
        })?;
    }
}

/// What the other side's post, already on the entry (`bits`), makes of this side's.
fn settled_by_other(e: &Entry<'_>, bits: u64, i_am_src: bool) -> Result<Option<Outcome>> {
    Ok(Some(match i_am_src {
        true if bits & DST != 0 => Outcome::Second(e.take(false)?),
        false if bits & FINAL != 0 => Outcome::Second(e.take(true)?),
        false if bits & EAGER != 0 => Outcome::Eager(Some(e.take(true)?)),
        false if bits & PUSH != 0 => Outcome::Pushed(e.take(true)?),
        _ => return Ok(None),
    }))
}

/// One poll of a rendezvous entry that still serves an earlier round (a peer that far
/// behind): fails when the communicator is aborted or at `deadline`, else backs off.
pub(crate) fn wait_for_ring(
    word: &dyn Atomic64,
    spins: &mut u32,
    stop: &dyn Fn() -> bool,
    deadline: Option<Instant>,
    behind: impl FnOnce() -> String,
) -> Result<()> {
    if stop() {
        return Err(Error::system(
            "cuda-ipc: communicator aborted while waiting for a peer",
        ));
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(Error::system(format!(
            "cuda-ipc: a peer stayed more than {} (CCL_TIMEOUT_S)",
            behind()
        )));
    }
    word.pause(spins);
    Ok(())
}

/// How long a pending send waits for its destination's post.
#[derive(Clone, Copy)]
pub(crate) struct PushWait<'a> {
    /// Give up from here on if this rank's GPU has caught up (waiting would idle it)...
    pub soft: Instant,
    /// ...and from here on regardless.
    pub hard: Instant,
    /// Whether this rank's GPU still has earlier work of the communicator queued.
    pub busy: &'a dyn Fn() -> bool,
    /// Waiting cannot succeed (checked all along).
    pub futile: &'a dyn Fn() -> bool,
}

impl PushWait<'_> {
    /// Time to give up waiting.
    pub(crate) fn over(&self, stop: &dyn Fn() -> bool) -> bool {
        let now = Instant::now();
        stop() || now >= self.hard || (now >= self.soft && !(self.busy)()) || (self.futile)()
    }
}

/// Settles a source's [`Outcome::Pending`] post: `Second` (push) once the destination has
/// posted, or `First` (the destination will pull when it posts) when `wait` runs out.
pub(crate) fn resolve(
    board: &dyn Words,
    src: usize,
    seq: u64,
    wait: PushWait<'_>,
    stop: &dyn Fn() -> bool,
) -> Result<Outcome> {
    settle_source(board, src, seq, || {
        wait.over(stop).then_some((FINAL, Outcome::First))
    })
}

/// Settles a source's [`Outcome::Pending`] post without waiting: `Second` (push) if the
/// destination has posted, else `Eager(None)`: the source copies through the destination's
/// receive slots, and the destination, posting later, copies out of them. Neither side's host
/// waits for the other, and each GPU's engines move its own side (the source's push into the
/// slots, the destination's copy out), where a pull by the destination would leave both to
/// one GPU.
pub(crate) fn go_eager(board: &dyn Words, src: usize, seq: u64) -> Result<Outcome> {
    settle_source(board, src, seq, || Some((EAGER, Outcome::Eager(None))))
}

/// The source's side of a pending entry: `Second` as soon as the destination has posted; else
/// `decide` may settle it (the state bit to set and what the source does then), the bit set
/// by a compare-and-swap against the destination's post; `None` polls on.
fn settle_source(
    board: &dyn Words,
    src: usize,
    seq: u64,
    mut decide: impl FnMut() -> Option<(u64, Outcome)>,
) -> Result<Outcome> {
    let e = Entry::new(board, src, seq);
    let state = e.word(0)?;
    let mut spins = 0u32;
    loop {
        let w = state.load(Ordering::Acquire);
        if w >> GEN_SHIFT != e.gen || w & SRC == 0 || w & (FINAL | EAGER) != 0 {
            return Err(Error::internal(format!(
                "cuda-ipc: transfer {seq} from rank {src} is not pending (entry {w:#x})"
            )));
        }
        if w & DST != 0 {
            return Ok(Outcome::Second(e.take(false)?));
        }
        match decide() {
            Some((bit, o)) => {
                if state
                    .compare_exchange(w, w | bit, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Ok(o);
                }
            }
            None => state.pause(&mut spins),
        }
    }
}

/// For a send this side posted and left pending (its copy mailed, [`crate::mail`]): the
/// receiver's post once it has come (the entry is then free for the transfer `RING` later),
/// or None while it has not.
pub(crate) fn take_if_posted(board: &dyn Words, src: usize, seq: u64) -> Result<Option<Post>> {
    let e = Entry::new(board, src, seq);
    let w = e.word(0)?.load(Ordering::Acquire);
    if w >> GEN_SHIFT != e.gen || w & SRC == 0 || w & (FINAL | EAGER) != 0 {
        return Err(Error::internal(format!(
            "cuda-ipc: mailed transfer {seq} from rank {src} is not pending (entry {w:#x})"
        )));
    }
    if w & DST == 0 {
        return Ok(None);
    }
    e.take(false).map(Some)
}

/// Has `peer` posted (and so is waiting on, or gave up waiting on) a send to this rank that
/// this rank has not posted the receive of yet? Then both ranks sit in a send waiting for the
/// other's receive (two sends called before the two receives): waiting is futile.
pub(crate) fn peer_sends_first(inbox: &dyn Words, peer: usize, next_in: u64) -> bool {
    let e = Entry::new(inbox, peer, next_in);
    e.word(0).is_ok_and(|w| {
        let w = w.load(Ordering::Acquire);
        w >> GEN_SHIFT == e.gen && w & SRC != 0 && w & (DST | EAGER | PUSH) == 0
    })
}

/// Marks a post's buffer id as a VMM allocation id (CUDA's buffer ids are small counters):
/// its "handle" then carries the owner's file descriptor and the allocation's length.
pub(crate) const VMM_ID: u64 = 1 << 63;

/// Whether a post's buffer id names a VMM allocation.
pub(crate) fn is_vmm_id(id: u64) -> bool {
    id & VMM_ID != 0
}

/// An allocation a peer can map: its base, CUDA's buffer id and IPC handle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exported {
    pub base: u64,
    pub buffer_id: u64,
    pub handle: [u8; 64],
}

impl Exported {
    pub(crate) fn post(&self, pid: u64, ptr: u64, bytes: usize) -> Post {
        Post {
            pid,
            addr: ptr,
            bytes: bytes as u64,
            buffer_id: self.buffer_id,
            offset: ptr - self.base,
            handle: self.handle,
            host_permille: 0,
        }
    }
}

/// How a peer maps a pointer of ours (`None`: it cannot).
pub(crate) type Export = Option<Exported>;

/// Buffers as the device sees them: what a peer can map, the bounce buffer, and peers'
/// posted buffers mapped here.
pub(crate) trait Reach {
    fn pid(&self) -> u64;
    fn export(&mut self, ptr: u64) -> Result<Export>;
    /// A bounce buffer of at least `bytes` (its address, and how peers map it).
    fn bounce(&mut self, bytes: usize) -> Result<(u64, Exported)>;
    /// The address of a peer's posted buffer as this device sees it.
    fn resolve(&mut self, p: &Post) -> Result<u64>;
    /// The address of a peer's posted (non-VMM) buffer as this process's context on the
    /// peer's GPU sees it; `None` without remote copies.
    fn resolve_there(&mut self, p: &Post) -> Result<Option<u64>> {
        let _ = p;
        Ok(None)
    }
}

/// Only the words a loom model touches (loom tracks every atomic it creates), for the model
/// checks of this module and of the collective rendezvous.
#[cfg(test)]
pub(crate) struct LoomWords(std::collections::HashMap<usize, loom::sync::atomic::AtomicU64>);

#[cfg(test)]
impl LoomWords {
    /// Zeroed words at each `(start, len)`.
    pub(crate) fn new(ranges: &[(usize, usize)]) -> LoomWords {
        let mut m = std::collections::HashMap::new();
        for &(at, len) in ranges {
            for i in at..at + len {
                m.insert(i, loom::sync::atomic::AtomicU64::new(0));
            }
        }
        LoomWords(m)
    }
}

#[cfg(test)]
impl Words for LoomWords {
    fn word(&self, i: usize) -> Option<&dyn Atomic64> {
        self.0.get(&i).map(|w| w as &dyn Atomic64)
    }
}

#[cfg(test)]
mod tests;
