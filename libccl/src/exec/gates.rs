//! Gates between a plan and the GPU stream that stages its memory: flags in shared memory a
//! plan waits on before it reads a piece, and sets once a piece it writes is complete.

use std::sync::atomic::{AtomicU32, Ordering};

/// A 32-bit word in memory another agent shares (pinned host memory a GPU stream writes and
/// waits on) holding a sequence number.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    word: *const AtomicU32,
    value: u32,
}

// SAFETY: the word is process memory that outlives every plan using the flag (the GPU
// engine's flag slots), accessed only atomically.
unsafe impl Send for Flag {}
// SAFETY: as above.
unsafe impl Sync for Flag {}

impl Flag {
    /// # Safety
    /// `word` must stay valid, and be accessed only atomically, while any plan holds the flag.
    pub unsafe fn new(word: *const AtomicU32, value: u32) -> Flag {
        Flag { word, value }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: valid for the flag's life (see `new`).
        unsafe { &*self.word }
    }

    /// Reached `value` (wrap-safe: a later sequence number counts too).
    pub(super) fn is_set(&self) -> bool {
        (self.word().load(Ordering::Acquire).wrapping_sub(self.value) as i32) >= 0
    }

    pub(super) fn set(&self) {
        self.word().store(self.value, Ordering::Release);
    }
}

/// A point-to-point group staged in pieces ([`crate::pieces`]): sends of piece k start once
/// `start[k]` is set (its bytes reached host memory), and once every receive of piece k has
/// landed, `landed[k]` is set (its bytes may go back to the GPU) -- all in one plan, so pieces
/// of different operations never wait on each other's order across ranks.
#[derive(Debug, Clone)]
pub struct PieceGates {
    /// The piece of each task, in task order.
    pub of_task: Vec<usize>,
    pub start: Vec<Flag>,
    /// One per piece but the last (whose end is the plan's end).
    pub landed: Vec<Flag>,
}

/// A lone collective staged in pieces that runs as ONE plan ([`crate::pieces::streamed`]):
/// an operation reads (or, in place, writes) a piece of the staged input only once the GPU
/// stream has copied it down, and a piece of the staged output may go back up once every write
/// the schedule makes into it is done -- so the copies overlap the transfers without cutting
/// the collective into smaller ones, whose steps each drained the links.
#[derive(Debug, Clone)]
pub struct CollGates {
    /// (host start, host end, flag set once the bytes are in host memory), any order.
    pub input: Vec<(usize, usize, Flag)>,
    /// (host start, host end, flag this plan sets once it wrote its last byte there).
    pub output: Vec<(usize, usize, Flag)>,
}

/// [`CollGates`] with the bytes the plan still writes into each output piece.
pub(super) struct CollGateState {
    pub(super) gates: CollGates,
    pub(super) left: Vec<usize>,
}

pub(super) fn overlap(a: (usize, usize), lo: usize, len: usize) -> usize {
    a.1.min(lo.saturating_add(len)).saturating_sub(a.0.max(lo))
}

impl CollGateState {
    /// Every input piece that `[lo, lo+len)` touches is in host memory.
    pub(super) fn ready(&self, lo: usize, len: usize) -> bool {
        self.gates
            .input
            .iter()
            .all(|&(a, b, f)| overlap((a, b), lo, len) == 0 || f.is_set())
    }

    /// The plan wrote `[lo, lo+len)`: output pieces with nothing left to write are released.
    pub(super) fn wrote(&mut self, lo: usize, len: usize) {
        for (&(a, b, f), left) in self.gates.output.iter().zip(self.left.iter_mut()) {
            let o = overlap((a, b), lo, len);
            if o > 0 && *left > 0 {
                *left = left.saturating_sub(o);
                if *left == 0 {
                    f.set();
                }
            }
        }
    }
}
