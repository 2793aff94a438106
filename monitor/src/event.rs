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

/// Any record, as it travels through a ring.
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

/// Receives records. Every method defaults to doing nothing, so a subscriber implements only
/// what it wants; a transport generic over `S: Subscriber` and given `()` compiles its calls
/// away.
pub trait Subscriber {
    /// A work request was handed to the hardware or peer.
    fn on_post(&self, _w: &Work) {}
    /// A work request completed.
    fn on_complete(&self, _w: &Work) {}
    /// A health or failover state changed.
    fn on_transition(&self, _t: &Transition) {}
    /// The monitor's analysis produced an event (only subscribers given to
    /// [`crate::Monitor::with_options`] see these).
    fn on_window(&self, _e: &crate::window::Event) {}
}

/// The subscriber that ignores everything.
impl Subscriber for () {}

/// Both subscribers, in order: a transport holds one `S` and still feeds several sinks.
impl<A: Subscriber, B: Subscriber> Subscriber for (A, B) {
    fn on_post(&self, w: &Work) {
        self.0.on_post(w);
        self.1.on_post(w);
    }

    fn on_complete(&self, w: &Work) {
        self.0.on_complete(w);
        self.1.on_complete(w);
    }

    fn on_transition(&self, t: &Transition) {
        self.0.on_transition(t);
        self.1.on_transition(t);
    }

    fn on_window(&self, e: &crate::window::Event) {
        self.0.on_window(e);
        self.1.on_window(e);
    }
}

/// A shared subscriber.
impl<S: Subscriber + ?Sized> Subscriber for std::sync::Arc<S> {
    fn on_post(&self, w: &Work) {
        (**self).on_post(w);
    }

    fn on_complete(&self, w: &Work) {
        (**self).on_complete(w);
    }

    fn on_transition(&self, t: &Transition) {
        (**self).on_transition(t);
    }

    fn on_window(&self, e: &crate::window::Event) {
        (**self).on_window(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    struct Count(Cell<u32>, Cell<u32>, Cell<u32>);

    impl Subscriber for Count {
        fn on_post(&self, _w: &Work) {
            self.0.set(self.0.get() + 1);
        }
        fn on_complete(&self, _w: &Work) {
            self.1.set(self.1.get() + 1);
        }
        fn on_transition(&self, _t: &Transition) {
            self.2.set(self.2.get() + 1);
        }
    }

    const W: Work = Work {
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
    fn a_pair_feeds_both_and_unit_ignores() {
        let pair = (Count::default(), ((), Count::default()));
        pair.on_post(&W);
        pair.on_complete(&W);
        pair.on_complete(&W);
        pair.on_transition(&Transition {
            ts_ns: 1,
            scope: Scope::Comm(6),
            from: "a",
            to: "b",
            reason: "c",
        });
        for c in [&pair.0, &pair.1 .1] {
            assert_eq!((c.0.get(), c.1.get(), c.2.get()), (1, 2, 1));
        }
    }

    #[test]
    fn records_carry_their_timestamp() {
        assert_eq!(Record::Post(W).ts_ns(), 1);
        assert_eq!(Record::Complete(Work { ts_ns: 9, ..W }).ts_ns(), 9);
    }
}
