//! Where one rank's protocol state lives, and which lane carries what: the address arithmetic
//! every rank computes alike from the same settings. Nothing here touches memory.
//!
//! A rank's flag area (in its device memory, or in shared host memory in host-only mode), one
//! 32-bit word per [`FLAG_STRIDE`] bytes:
//!
//! 1. the staged protocol's: per sender and receive slot a `ready` word, per receiver and slot
//!    a `credit` word ([`Layout::ready`], [`Layout::credit`]);
//! 2. the direct paths' ([`flag_words`]): per peer and direction a transfer's "here" and
//!    "done", per peer two words of the direct reductions and two of the host path;
//! 3. the captured groups' ([`captured_area_bytes`]): per group three words per partner;
//! 4. one word per receive lane (last: the lane count may differ between ranks).
//!
//! Then the receive slots ([`Layout::slot_addr`]), and the rendezvous inbox each rank keeps in
//! host shared memory ([`inbox_words`]): a ring of entries per sender for the direct
//! transfers, then the ring of the collective rendezvous of the direct reductions.

use crate::host_path::HostPath;

/// Bytes between flag words (one word per cache line: peers write them over NVLink).
pub(crate) const FLAG_STRIDE: u64 = 64;

/// Which queue of a communicator an operation goes on: the caller's stream, a copy lane or a
/// receive lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    User,
    Tx(usize),
    Rx(usize),
    /// The host path's copies ([`HostPath`]): 0 into pinned host memory (our outgoing share),
    /// 1 out of it (our incoming share).
    Host(usize),
}

/// Where one rank's protocol state lives, as that rank's device sees it.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub rank: usize,
    pub nranks: usize,
    /// Bytes per receive slot.
    pub chunk: usize,
    /// Receive slots per sender.
    pub slots: u32,
    pub tx_lanes: usize,
    pub rx_lanes: usize,
    /// Copy lanes the direct paths may use (at least `tx_lanes`; [`direct_tx_lanes`]).
    pub direct_tx: usize,
    /// Every rank's flags and receive area (this rank's own at `rank`).
    pub flags: Vec<u64>,
    pub scratch: Vec<u64>,
    /// Two ranks: a share of large direct transfers goes through pinned host memory beside
    /// NVLink (`CCL_IPC_HOST_PATH_PERMILLE`).
    pub host: Option<HostPath>,
    /// Host-only mode: this rank's receive area mirrored in its own GPU memory, slot for slot.
    /// A chunk to be reduced is copied there on the receive lane before its kernel runs (a
    /// copy engine reads host memory faster than a kernel does); the slot is credited back
    /// after the kernel, so the sender refills the slot, and so the mirror, only once the
    /// kernel is done with it.
    pub mirror: Option<u64>,
}

/// Most copy lanes of the direct paths.
pub(crate) const MAX_DIRECT_TX: usize = 8;

/// Copy lanes the direct paths of `n` ranks use: the staged protocol's `tx_lanes` with two
/// ranks; with more, one per peer plus one for local copies (up to [`MAX_DIRECT_TX`]), so that
/// pushes to several peers run on as many streams, and so copy engines, at once (on one or two
/// lanes they queued behind each other: 0.58-0.72x NCCL on 4 GPUs, measured 2026-11-22).
pub(crate) fn direct_tx_lanes(n: usize, tx_lanes: usize) -> usize {
    if n <= 2 {
        tx_lanes
    } else {
        n.min(MAX_DIRECT_TX).max(tx_lanes)
    }
}

/// Flag words of the direct transfers, after the staged protocol's in each rank's flag area:
/// per peer and per direction, one "here" and one "done" word; per peer two words of the
/// direct reductions and two of the host path.
pub(crate) fn flag_words(nranks: usize) -> usize {
    nranks * 8
}

/// A direct transfer's words, per peer and direction ([`Layout::direct_word`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirectWord {
    /// The first poster's stream is here: the copier may start.
    Arrive = 0,
    /// The copier is done.
    Done = 1,
}

/// The host path's words, per peer ([`Layout::host_word`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostWord {
    /// Chunks from the peer are in our ring.
    Ready = 0,
    /// Chunks to the peer have left its ring.
    Credit = 1,
}

/// A captured group's words per partner, in the order its steps set them (see `captured`):
/// the partner's inputs are ready, the first phase is done, everything is done.
pub(crate) const INPUTS: usize = 0;
pub(crate) const HALFWAY: usize = 1;
pub(crate) const DONE: usize = 2;
const KINDS: usize = 3;

/// Captured groups per communicator of `n` ranks on the direct paths; later ones take the
/// staged path. As many as 16 MiB of words per rank hold, between 1024 and 65536: an
/// inference engine captures a graph per batch size, each with two all-reduces per layer
/// (35 sizes of an 80-layer model: 5600 groups).
pub(crate) fn groups(n: usize) -> usize {
    ((16 << 20) / (KINDS * 4 * n.max(1))).clamp(1024, 65536)
}

/// Bytes of the captured groups' words in a flag area of `n` ranks.
pub(crate) fn captured_area_bytes(n: usize) -> usize {
    (groups(n) * KINDS * n * 4).next_multiple_of(FLAG_STRIDE as usize)
}

/// Offset of `from`'s word of `kind` for group `group` in an area of `n` ranks.
fn captured_offset(n: usize, group: usize, kind: usize, from: usize) -> u64 {
    (((group * KINDS + kind) * n + from) * 4) as u64
}

impl Layout {
    /// The copy lane of this rank's direct copies into `peer`'s buffers: with two ranks the
    /// peer's parity (the other lane is for local copies, [`Layout::beside_lane`]); with
    /// more, the peer's place after this rank (rank + 1 -> lane 0, rank + 2 -> lane 1, ...),
    /// one lane per peer while there are enough.
    pub fn push_lane(&self, peer: usize) -> Lane {
        if self.nranks <= 2 {
            Lane::Tx(peer % self.tx_lanes.max(1))
        } else {
            let k = (peer + self.nranks - self.rank - 1) % self.nranks;
            Lane::Tx(k % self.direct_tx.max(1))
        }
    }

    /// The copy lane no push of this rank uses while there are enough lanes: local copies
    /// go there, beside the pushes.
    pub fn beside_lane(&self) -> Lane {
        if self.nranks <= 2 {
            Lane::Tx(self.rank % self.tx_lanes.max(1))
        } else {
            Lane::Tx((self.nranks - 1) % self.direct_tx.max(1))
        }
    }

    /// The flag area: ready and credit words per peer and slot, the direct transfers' words,
    /// the captured groups' words, then one word per receive lane (last: the lane count may
    /// differ between ranks).
    pub fn flag_bytes(nranks: usize, slots: u32, rx_lanes: usize) -> usize {
        (nranks * 2 * slots as usize + flag_words(nranks) + rx_lanes) * FLAG_STRIDE as usize
            + captured_area_bytes(nranks)
    }

    /// Offset of the captured groups' words in a flag area.
    fn captured_base(&self) -> u64 {
        (self.direct_base() + flag_words(self.nranks)) as u64 * FLAG_STRIDE
    }

    /// `owner`'s word of captured group `group` that `from` writes (`kind`: [`INPUTS`],
    /// [`HALFWAY`] or [`DONE`]).
    pub(crate) fn captured_word(
        &self,
        owner: usize,
        group: usize,
        kind: usize,
        from: usize,
    ) -> u64 {
        self.flags[owner] + self.captured_base() + captured_offset(self.nranks, group, kind, from)
    }

    /// Index of the first direct-transfer word in a flag area.
    fn direct_base(&self) -> usize {
        self.nranks * 2 * self.slots as usize
    }

    /// `to`'s word that `from`'s chunk in `slot` is there.
    pub(crate) fn ready(&self, to: usize, from: usize, slot: u32) -> u64 {
        self.flags[to] + (from * 2 * self.slots as usize + slot as usize) as u64 * FLAG_STRIDE
    }

    /// `sender`'s word that `receiver` has consumed slot `slot`.
    pub(crate) fn credit(&self, sender: usize, receiver: usize, slot: u32) -> u64 {
        let i = receiver * 2 * self.slots as usize + self.slots as usize + slot as usize;
        self.flags[sender] + i as u64 * FLAG_STRIDE
    }

    /// This rank's word of receive lane `lane`: a reduction there finished.
    pub(crate) fn local(&self, lane: usize) -> u64 {
        self.flags[self.rank]
            + self.captured_base()
            + captured_area_bytes(self.nranks) as u64
            + lane as u64 * FLAG_STRIDE
    }

    /// `at`'s word about direct reductions with `other`: "here" or "done".
    pub(crate) fn sym_word(&self, at: usize, other: usize, done: bool) -> u64 {
        let i = self.direct_base() + self.nranks * 4 + other * 2 + done as usize;
        self.flags[at] + i as u64 * FLAG_STRIDE
    }

    /// `at`'s word about transfers between `at` and `other`, `at` being their source or not.
    pub(crate) fn direct_word(
        &self,
        at: usize,
        other: usize,
        at_is_src: bool,
        kind: DirectWord,
    ) -> u64 {
        let i = self.direct_base() + (other * 2 + at_is_src as usize) * 2 + kind as usize;
        self.flags[at] + i as u64 * FLAG_STRIDE
    }

    /// `at`'s host-path word about `other`.
    pub(crate) fn host_word(&self, at: usize, other: usize, kind: HostWord) -> u64 {
        let i = self.direct_base() + self.nranks * 6 + other * 2 + kind as usize;
        self.flags[at] + i as u64 * FLAG_STRIDE
    }

    /// Slot `slot` for `sender` in `receiver`'s area: one region per peer in rank order, the
    /// receiver's own skipped.
    pub(crate) fn slot_addr(&self, receiver: usize, sender: usize, slot: u32) -> u64 {
        self.scratch[receiver] + self.slot_offset(receiver, sender, slot)
    }

    fn slot_offset(&self, receiver: usize, sender: usize, slot: u32) -> u64 {
        let region = if sender < receiver {
            sender
        } else {
            sender - 1
        };
        (region as u64 * self.slots as u64 + slot as u64) * self.chunk as u64
    }

    /// This rank's mirror of its slot `slot` for `sender` ([`Layout::mirror`]).
    pub(crate) fn mirror_slot(&self, sender: usize, slot: u32) -> Option<u64> {
        self.mirror
            .map(|m| m + self.slot_offset(self.rank, sender, slot))
    }

    pub fn scratch_bytes(nranks: usize, slots: u32, chunk: usize) -> Option<usize> {
        (nranks.checked_sub(1)?)
            .checked_mul(slots as usize)?
            .checked_mul(chunk)
    }
}

/// Transfers a rank may post to one peer ahead of that peer's matching post.
pub(crate) const RING: usize = 256;

/// Words per rendezvous entry: the state word, then each side's post.
pub(crate) const ENTRY_WORDS: usize = 32;

/// Words of one side's post in an entry.
pub(crate) const POST_WORDS: usize = 14;

/// Collectives a rank may post ahead of the slowest rank (the direct reductions' ring).
pub(crate) const SYM_RING: usize = 64;

/// Words of a rank's inbox: the entries of transfers into it (one ring per source), then the
/// communicator's collective rendezvous ring (used in rank 0's inbox only).
pub(crate) fn inbox_words(nranks: usize) -> usize {
    nranks * RING * ENTRY_WORDS + sym_ring_words(nranks)
}

/// Words per entry of the collective rendezvous: its state, a count of ranks done with it,
/// then every rank's input and output post.
pub(crate) fn sym_entry_words(n: usize) -> usize {
    2 + n * 2 * POST_WORDS
}

/// Words of the collective rendezvous ring.
pub(crate) fn sym_ring_words(n: usize) -> usize {
    SYM_RING * sym_entry_words(n)
}

/// Where the collective rendezvous ring starts in an inbox.
pub(crate) fn sym_ring_base(n: usize) -> usize {
    n * RING * ENTRY_WORDS
}
