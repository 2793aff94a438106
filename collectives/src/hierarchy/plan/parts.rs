//! What every stage plan is made of: sends and receives of blocks, which sub-communicator a
//! stage goes on, and how a reduction splits over the two stages.

use crate::task::{Reduction, Scalar, Task, TaskKind};

/// How a reduction splits over a first stage (among a host's ranks) and a second (across the
/// hosts) of `nranks` ranks in all: the operator in both; PreMulSum scales in the first and
/// sums in the second; float average multiplies by 1/nranks in the first (NCCL's average of
/// floats). Not for integer average (which stays flat).
pub fn split_reduction(t: &Task, nranks: usize) -> (Reduction, Reduction) {
    let sum = Reduction::Plain(crate::dtype::ReduceKind::Sum);
    match t.red {
        Reduction::Plain(k) => (Reduction::Plain(k), Reduction::Plain(k)),
        Reduction::PreMulSum(s) => (Reduction::PreMulSum(s), sum),
        Reduction::Avg => match crate::task::premul_scalar(t, nranks) {
            Some(inv) => (Reduction::PreMulSum(Scalar::Immediate(inv)), sum),
            None => (sum, sum),
        },
    }
}

/// Which of a hierarchy's sub-communicators a stage goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Local,
    Cross,
}

/// `p` as a send or receive of `count` of `t`'s elements.
pub fn p2p_task(t: &Task, p: &P2p, count: usize) -> Task {
    let (kind, send, recv) = match *p {
        P2p::Send { peer, from } => (TaskKind::Send { peer }, from, 0),
        P2p::Recv { peer, into } => (TaskKind::Recv { peer }, 0, into),
    };
    Task {
        kind,
        send,
        recv,
        count,
        red: Reduction::Plain(crate::dtype::ReduceKind::Sum),
        ..*t
    }
}

/// A send or receive of blocks of a hierarchical operation, by its peer's rank in the
/// communicator it goes on and the address it reads or writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum P2p {
    Send { peer: usize, from: usize },
    Recv { peer: usize, into: usize },
}

impl P2p {
    pub fn peer(&self) -> usize {
        match *self {
            P2p::Send { peer, .. } | P2p::Recv { peer, .. } => peer,
        }
    }

    /// The same with its peer numbered `peer` (on another communicator).
    pub fn on_peer(self, peer: usize) -> P2p {
        match self {
            P2p::Send { from, .. } => P2p::Send { peer, from },
            P2p::Recv { into, .. } => P2p::Recv { peer, into },
        }
    }
}
