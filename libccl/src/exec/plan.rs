//! A plan: one communicator's steps of raw operations for one collective or one group of sends
//! and receives, with what runs before and after them, and what it tells about itself.

use ccl_cuda::{DataType, ReduceKind};

use super::buffers::give_back;
use super::gates::{CollGateState, PieceGates};
use super::op::XOp;

pub(super) struct Prescale {
    pub(super) src: *const u8,
    pub(super) buf: Vec<u8>,
    pub(super) scalar: [u8; 8],
    pub(super) elems: usize,
}

/// What a plan does, kept as data so the message is formatted only on error.
#[derive(Debug, Clone, Copy)]
pub(super) enum PlanWhat {
    Coll {
        name: &'static str,
        seq: u64,
        count: usize,
        dtype: DataType,
    },
    P2p {
        ops: usize,
    },
}

/// A plan for one communicator: steps of raw operations, plus pre/post processing.
pub struct Plan {
    pub(super) steps: Vec<Vec<XOp>>,
    pub(super) cur: usize,
    pub(super) dtype: DataType,
    pub(super) arith: ReduceKind,
    /// The PreMulSum scalar (also float Avg's 1/n), for fused receive-reduce steps.
    pub(super) scalar: [u8; 8],
    /// Float Avg and PreMulSum scale the input into a private copy before the first step.
    pub(super) prescale: Option<Prescale>,
    /// Integer Avg divides the output by nranks after the last step.
    pub(super) postdiv: Option<(*mut u8, usize, u64)>,
    pub(super) _scratch: Vec<u8>,
    /// What the plan is, for error messages (formatted only when one is needed).
    pub(super) what: PlanWhat,
    pub(super) started: bool,
    /// Pieces of a gated point-to-point group, and receives (and local copies) still to land
    /// per piece.
    pub(super) gates: Option<PieceGates>,
    pub(super) landing: Vec<usize>,
    /// A lone collective staged in pieces.
    pub(super) coll_gates: Option<CollGateState>,
    /// Since when the current step has waited only for its sends' acknowledgements.
    pub(super) settling_since: Option<std::time::Instant>,
}

// SAFETY: the raw pointers are user buffers handed to us for the duration of the operation
// (NCCL's contract) and plan-owned vectors; a plan is executed by one thread at a time.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self._scratch));
        if let Some(p) = self.prescale.take() {
            give_back(p.buf);
        }
    }
}

impl Plan {
    pub(super) fn new(
        steps: Vec<Vec<XOp>>,
        dtype: DataType,
        arith: ReduceKind,
        what: PlanWhat,
    ) -> Plan {
        Plan {
            steps,
            cur: 0,
            dtype,
            arith,
            scalar: [0; 8],
            prescale: None,
            postdiv: None,
            _scratch: Vec::new(),
            what,
            started: false,
            gates: None,
            landing: Vec::new(),
            coll_gates: None,
            settling_since: None,
        }
    }

    /// Gated pieces: a receive or local copy of piece `k` finished; once all of the piece's
    /// have, the GPU stream may copy its bytes back.
    pub(super) fn landed(&mut self, k: usize) {
        let Some(g) = &self.gates else { return };
        if let Some(left) = self.landing.get_mut(k) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                if let Some(f) = g.landed.get(k) {
                    f.set();
                }
            }
        }
    }

    /// What the plan is, for error messages: "AllReduce(#3, count=10, float)".
    pub fn desc(&self) -> String {
        match self.what {
            PlanWhat::Coll {
                name,
                seq,
                count,
                dtype,
            } => {
                format!("{name}(#{seq}, count={count}, {})", dtype.name())
            }
            PlanWhat::P2p { ops } => format!("Send/Recv group of {ops} operations"),
        }
    }

    pub fn is_done(&self) -> bool {
        self.cur >= self.steps.len() && self.postdiv.is_none()
    }

    /// Peers the current step still waits for.
    pub fn waiting_on(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .steps
            .get(self.cur)
            .map(|ops| {
                ops.iter()
                    .filter(|o| !o.finished && !o.kind.is_local())
                    .map(|o| o.peer)
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable();
        v.dedup();
        v
    }
}
