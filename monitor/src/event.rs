//! The records transports and engines emit, and the [`Subscriber`] interface they emit into.
//!
//! Every record is `Copy` and of fixed size (strings are `&'static str`), so emitting one is
//! a plain store into a per-thread ring with no allocation.

use serde::{Deserialize, Serialize};

/// What moved the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Host,
    Mpt,
    Socket,
    Shm,
    CopyEngine,
    StagedGpu,
}

/// The unit of work a record times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Chunk,
    Frame,
    Copy,
}

/// The collective (or point-to-point operation) a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    Reduce,
    AllToAll,
    Send,
    Recv,
    Other,
}

/// Which operation of which communicator: enough to name a slow collective in an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CollId {
    /// The communicator's hash (its unique id hashed).
    pub comm: u64,
    pub op: Op,
    /// The operation's sequence number within the communicator.
    pub seq: u64,
}

impl Op {
    const ALL: [Op; 9] = [
        Op::AllReduce,
        Op::AllGather,
        Op::ReduceScatter,
        Op::Broadcast,
        Op::Reduce,
        Op::AllToAll,
        Op::Send,
        Op::Recv,
        Op::Other,
    ];

    /// The operation's name in the JSON file (serde's name for it, without the quotes).
    pub(crate) fn wire_name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Broadcast => "broadcast",
            Op::Reduce => "reduce",
            Op::AllToAll => "all_to_all",
            Op::Send => "send",
            Op::Recv => "recv",
            Op::Other => "other",
        }
    }

    /// The operation NCCL's API names `name` ("AllReduce", "Send"...); `Other` for the rest.
    pub fn from_name(name: &str) -> Op {
        match name {
            "AllReduce" => Op::AllReduce,
            "AllGather" => Op::AllGather,
            "ReduceScatter" => Op::ReduceScatter,
            "Broadcast" => Op::Broadcast,
            "Reduce" => Op::Reduce,
            "AlltoAll" | "AllToAll" => Op::AllToAll,
            "Send" => Op::Send,
            "Recv" => Op::Recv,
            _ => Op::Other,
        }
    }
}

impl CollId {
    /// The bits of a packed sequence number: the top byte holds the operation.
    const SEQ_BITS: u32 = 56;

    /// The operation and sequence number in one word, for a cell that transports read
    /// without a lock (sequence numbers beyond 2^56 wrap).
    pub fn pack(op: Op, seq: u64) -> u64 {
        let code = Op::ALL.iter().position(|&o| o == op).unwrap_or(8) as u64;
        (code << Self::SEQ_BITS) | (seq & ((1 << Self::SEQ_BITS) - 1))
    }

    /// The identity of `comm`'s operation packed by [`CollId::pack`].
    pub fn unpack(comm: u64, packed: u64) -> CollId {
        let code = (packed >> Self::SEQ_BITS) as usize;
        CollId {
            comm,
            op: Op::ALL.get(code).copied().unwrap_or(Op::Other),
            seq: packed & ((1 << Self::SEQ_BITS) - 1),
        }
    }
}

/// One posted or completed work request: a chunk on a connection, a frame, or a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// The monitor clock's reading (or a simulated time) in nanoseconds.
    pub ts_ns: u64,
    pub bytes: u64,
    /// The remote rank.
    pub peer: u32,
    /// The path (rail, channel) within the connection.
    pub path: u16,
    pub nic: u16,
    pub engine: Engine,
    pub unit: Unit,
    pub coll: CollId,
}

/// What a health or failover transition applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Peer(u32),
    Path(u16),
    Nic(u16),
    Comm(u64),
}

/// A state change reported by whoever watches health (the fault-tolerance layer); the states
/// are plain names so this crate does not depend on that layer's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub ts_ns: u64,
    pub scope: Scope,
    pub from: &'static str,
    pub to: &'static str,
    pub reason: &'static str,
}

/// Any record (in the rings they travel packed, with a count of posts or completions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Record {
    Post(Work),
    Complete(Work),
    Transition(Transition),
}

impl Record {
    /// The record's timestamp.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Record::Post(w) | Record::Complete(w) => w.ts_ns,
            Record::Transition(t) => t.ts_ns,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of every field set, for this crate's tests.
    pub(crate) const W: Work = Work {
        ts_ns: 1,
        bytes: 2,
        peer: 3,
        path: 4,
        nic: 5,
        engine: Engine::Shm,
        unit: Unit::Copy,
        coll: CollId {
            comm: 6,
            op: Op::Broadcast,
            seq: 7,
        },
    };

    #[test]
    fn packed_identity_round_trips() {
        for op in Op::ALL {
            let id = CollId::unpack(9, CollId::pack(op, 12345));
            assert_eq!(
                id,
                CollId {
                    comm: 9,
                    op,
                    seq: 12345
                }
            );
        }
        assert_eq!(CollId::unpack(1, CollId::pack(Op::Send, 1 << 56)).seq, 0);
        assert_eq!(Op::from_name("AlltoAll"), Op::AllToAll);
        assert_eq!(Op::from_name("Gather"), Op::Other);
    }

    #[test]
    fn wire_names_are_serde_names() {
        for op in Op::ALL {
            let quoted = serde_json::to_string(&op).unwrap();
            assert_eq!(quoted, format!("\"{}\"", op.wire_name()));
        }
    }

    #[test]
    fn records_carry_their_timestamp() {
        assert_eq!(Record::Post(W).ts_ns(), 1);
        assert_eq!(Record::Complete(Work { ts_ns: 9, ..W }).ts_ns(), 9);
    }
}
