//! Raw operations of a plan's steps: what each moves between which memory and which peer, how
//! far it got, and the order rules between operations of one step whose memory overlaps.

use super::gates::overlap;
use super::header::OpHeader;

#[derive(Debug, Clone, Copy)]
pub(super) enum XKind {
    Send {
        src: *const u8,
    },
    Recv {
        dst: *mut u8,
    },
    /// `fused`: `local` is this rank's raw input of a PreMulSum/float-Avg reduction, folded in
    /// as `local * scalar + incoming` with one rounding, as NCCL's kernels do. `local_first`:
    /// `local (op) incoming` (a fold in rank order, [`ccl_collectives::Op::RecvFold`]), else `incoming (op)
    /// local`.
    RecvReduce {
        local: *const u8,
        dst: *mut u8,
        fused: bool,
        local_first: bool,
    },
    Copy {
        src: *const u8,
        dst: *mut u8,
    },
    /// `dst = src (op) local`, all local: the folds of a one-exchange all-reduce or
    /// reduce-scatter.
    Reduce {
        src: *const u8,
        local: *const u8,
        dst: *mut u8,
    },
}

impl XKind {
    /// Runs on this rank alone: no link, no peer.
    pub(super) fn is_local(&self) -> bool {
        self.local_addrs().is_some()
    }

    /// A local operation's addresses -- the ranges it reads (a copy reads one, twice named)
    /// and the one it writes, each `bytes` long -- for gates on staged pieces.
    pub(super) fn local_addrs(&self) -> Option<[usize; 3]> {
        match *self {
            XKind::Copy { src, dst } => Some([src as usize, src as usize, dst as usize]),
            XKind::Reduce { src, local, dst } => Some([src as usize, local as usize, dst as usize]),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(super) struct XOp {
    pub(super) kind: XKind,
    pub(super) peer: usize,
    pub(super) bytes: usize,
    pub(super) done: usize,
    pub(super) header_done: bool,
    pub(super) finished: bool,
    pub(super) hdr: OpHeader,
    /// Gated point-to-point groups: the piece whose bytes this operation reads (sends and
    /// local copies wait for it) and the piece its output lands in.
    pub(super) piece: Option<usize>,
    pub(super) lands_in: Option<usize>,
    /// A send whose source a later receive of its step overwrites: its frames are copied into
    /// the link as they are queued (not sent from the source), so the receive may write there
    /// as soon as they are.
    pub(super) copy_frames: bool,
    /// A receive into what an earlier send of its step reads: each frame waits until that
    /// send has queued the bytes it would overwrite ([`order_overwrites`]).
    pub(super) after_sends: bool,
    /// A send of what an earlier receive of its step writes: each frame waits until that
    /// receive has written the bytes it carries ([`order_overwrites`]).
    pub(super) after_receives: bool,
}

impl XOp {
    /// Every byte (and the header) handed to the link; a send may still wait for the link to
    /// push them out before it is `finished`.
    pub(super) fn queued(&self) -> bool {
        self.finished || (self.header_done && self.done == self.bytes)
    }

    /// An operation on `peer` moving `hdr.bytes` bytes, not started.
    pub(super) fn new(kind: XKind, peer: usize, hdr: OpHeader) -> XOp {
        XOp {
            kind,
            peer,
            bytes: hdr.bytes as usize,
            done: 0,
            // Local copies never send a header.
            header_done: kind.is_local(),
            finished: false,
            hdr,
            piece: None,
            lands_in: None,
            copy_frames: false,
            after_sends: false,
            after_receives: false,
        }
    }

    /// Whether an earlier operation of its step (`before`) must go first: messages between one
    /// pair of ranks are FIFO, so an operation waits for the earlier ones of its step with the
    /// same peer and direction -- a send only until they have queued all their bytes (their
    /// wait for the link to empty overlaps this one's frames; waiting for it drained the link
    /// between every two pieces of a staged GPU group over the network).
    pub(super) fn waits_behind(&self, before: &[XOp]) -> bool {
        let sending = matches!(self.kind, XKind::Send { .. });
        before.iter().any(|o| {
            o.peer == self.peer
                && !o.kind.is_local()
                && matches!(o.kind, XKind::Send { .. }) == sending
                && if sending { !o.queued() } else { !o.finished }
        })
    }

    /// The range a receive writes, if this is one.
    pub(super) fn receives_into(&self) -> Option<(usize, usize)> {
        match self.kind {
            XKind::Recv { dst } | XKind::RecvReduce { dst, .. } => {
                Some((dst as usize, dst as usize + self.bytes))
            }
            _ => None,
        }
    }

    /// The part of a receive's destination not yet written (frames land in order).
    pub(super) fn unwritten(&self) -> Option<(usize, usize)> {
        self.receives_into().map(|(lo, hi)| (lo + self.done, hi))
    }

    /// The part of a send's source not yet queued (all of it before its first frame).
    pub(super) fn unqueued_source(&self) -> Option<(usize, usize)> {
        match self.kind {
            XKind::Send { src } => {
                let from = if self.header_done { self.done } else { 0 };
                Some((src as usize + from, src as usize + self.bytes))
            }
            _ => None,
        }
    }
}

/// Schedules may let a receive overwrite what a send earlier in its step reads (the send's data
/// is taken first: an in-place exchange all-reduce sends its input and folds the peer's into the
/// same buffer), and a send read what an earlier receive of its step writes (it forwards what
/// landed: a ring whose steps run as one). The first kind of send copies its frames into the
/// link as it queues them, and the receive takes a frame only once the send has queued every
/// byte the frame would write over; the second kind sends a frame only once the receive has
/// written every byte of it.
pub(super) fn order_overwrites(ops: &mut [XOp]) {
    for j in 0..ops.len() {
        let (before, rest) = ops.split_at_mut(j);
        let Some(later) = rest.first_mut() else {
            continue;
        };
        for earlier in before.iter_mut() {
            match (earlier.kind, later.kind) {
                (XKind::Send { src }, _) => {
                    if let Some((lo, hi)) = later.receives_into() {
                        if overlap((src as usize, src as usize + earlier.bytes), lo, hi - lo) > 0 {
                            earlier.copy_frames = true;
                            later.after_sends = true;
                        }
                    }
                }
                (_, XKind::Send { src }) => {
                    if let Some(w) = earlier.receives_into() {
                        if overlap(w, src as usize, later.bytes) > 0 {
                            later.after_receives = true;
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
