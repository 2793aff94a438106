//! Transition records: every state change of a link, NIC or connection machine is logged
//! (`tracing::info!`, which `NCCL_DEBUG=INFO` maps to), counted per reason, and queued as a
//! [`Transition`] for an observer (the monitor) to drain.
//!
//! Each machine owns one [`EventLog`]: it logs and counts a transition when it makes it, so
//! the record exists even if nobody drains the queue, and the queue is bounded so a machine
//! nobody observes does not grow without end (the counters keep counting; the oldest
//! records go, and [`EventLog::dropped`] says how many).

use std::collections::VecDeque;

use crate::state::{ConnState, LinkState, NicState};

/// Records an [`EventLog`] keeps before it drops the oldest: well over what an observer
/// polling once per operation misses, small enough to be harmless when none polls.
pub const EVENT_QUEUE_CAP: usize = 1024;

/// What a transition is about, by the caller-assigned id of the thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One link (a queue pair, a socket) between two ranks.
    Link(u32),
    /// One NIC, aggregating the links it carries.
    Nic(u32),
    /// One connection (a primary and a backup link).
    Connection(u64),
}

/// A state of any machine of the crate, so one record type serves all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// A link's health.
    Link(LinkState),
    /// A NIC's aggregate health.
    Nic(NicState),
    /// Which link a connection uses.
    Connection(ConnState),
}

/// Why a transition was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The link reported an error completion.
    ErrorCompletion,
    /// Nothing came back on the link within the per-chunk timeout.
    ChunkTimeout,
    /// A probe was answered in time.
    ProbeAnswered,
    /// A probe was not answered within the probe timeout.
    ProbeTimeout,
    /// Traffic arrived on a suspect link: it works, it was not to blame.
    Progress,
    /// A recovering link answered probes for the whole hold-down period.
    HoldDownElapsed,
    /// The peer gave up on the link (its rollback arrived on the other one).
    PeerReported,
    /// The peer resumed traffic on the link (its own hold-down ended first).
    PeerResumed,
    /// The connection's link failed and it moved to the other one.
    Failover,
    /// The primary link is healthy again and traffic went back to it.
    SwitchBack,
    /// Traffic owed on a link that works was lost (it answered a probe sent after it):
    /// both ends roll back and resume on the same link.
    Resync,
    /// Every link of the NIC or connection is down.
    AllLinksDown,
    /// A link of a NIC that was down is usable again.
    LinkUp,
}

impl Reason {
    /// Number of reasons, the length of the per-reason counters.
    pub const COUNT: usize = 13;

    fn index(self) -> usize {
        self as usize
    }
}

/// One state change of a machine, at the time the caller handed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition<I> {
    /// When it was made (the `now` of the call that made it).
    pub at: I,
    /// What changed.
    pub scope: Scope,
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// Why.
    pub reason: Reason,
}

/// Transitions counted per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    by_reason: [u64; Reason::COUNT],
}

impl Counters {
    /// Transitions made for `reason`.
    pub fn get(&self, reason: Reason) -> u64 {
        self.by_reason[reason.index()]
    }

    /// All transitions.
    pub fn total(&self) -> u64 {
        self.by_reason.iter().sum()
    }

    /// Adds `other`'s counts, to sum the machines a connection is made of.
    pub fn add(&mut self, other: &Counters) {
        for (a, b) in self.by_reason.iter_mut().zip(other.by_reason) {
            *a += b;
        }
    }

    fn count(&mut self, reason: Reason) {
        self.by_reason[reason.index()] += 1;
    }
}

/// The transitions one machine made: logged and counted when made, queued until drained.
#[derive(Clone, Debug)]
pub struct EventLog<I> {
    queue: VecDeque<Transition<I>>,
    counters: Counters,
    dropped: u64,
}

impl<I> Default for EventLog<I> {
    fn default() -> Self {
        EventLog {
            queue: VecDeque::new(),
            counters: Counters::default(),
            dropped: 0,
        }
    }
}

impl<I: Copy> EventLog<I> {
    /// Logs, counts and queues a transition.
    pub fn record(&mut self, at: I, scope: Scope, from: State, to: State, reason: Reason) {
        // `at` is the caller's clock, which need not print; the subscriber stamps the line.
        tracing::info!(?scope, ?from, ?to, ?reason, "fault tolerance transition");
        self.counters.count(reason);
        self.enqueue(Transition {
            at,
            scope,
            from,
            to,
            reason,
        });
    }

    /// Queues a transition another machine already logged and counted (a connection passes
    /// on its links' records, so the observer sees them in the order they were made).
    pub fn forward(&mut self, t: Transition<I>) {
        self.enqueue(t);
    }

    fn enqueue(&mut self, t: Transition<I>) {
        if self.queue.len() >= EVENT_QUEUE_CAP {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(t);
    }

    /// The oldest transition not yet drained.
    pub fn poll(&mut self) -> Option<Transition<I>> {
        self.queue.pop_front()
    }

    /// Transitions this log made, per reason (forwarded ones are not counted here).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Records dropped undrained because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(from: LinkState, to: LinkState) -> (State, State) {
        (State::Link(from), State::Link(to))
    }

    #[test]
    fn records_are_counted_per_reason_and_drained_in_order() {
        let mut log = EventLog::default();
        let (f, t) = link(LinkState::Ok, LinkState::Suspect);
        log.record(1u64, Scope::Link(3), f, t, Reason::ChunkTimeout);
        let (f, t) = link(LinkState::Suspect, LinkState::Ok);
        log.record(2u64, Scope::Link(3), f, t, Reason::ProbeAnswered);
        assert_eq!(log.counters().get(Reason::ChunkTimeout), 1);
        assert_eq!(log.counters().total(), 2);
        assert_eq!(log.poll().map(|t| t.at), Some(1));
        assert_eq!(log.poll().map(|t| t.reason), Some(Reason::ProbeAnswered));
        assert_eq!(log.poll(), None);
    }

    #[test]
    fn full_queue_drops_the_oldest_but_keeps_counting() {
        let mut log = EventLog::default();
        let (f, t) = link(LinkState::Ok, LinkState::Failed);
        for i in 0..EVENT_QUEUE_CAP as u64 + 5 {
            log.record(i, Scope::Nic(0), f, t, Reason::ErrorCompletion);
        }
        assert_eq!(log.dropped(), 5);
        assert_eq!(log.counters().get(Reason::ErrorCompletion), 1029);
        assert_eq!(log.poll().map(|t| t.at), Some(5));
    }

    #[test]
    fn counters_add_up() {
        let mut a = Counters::default();
        a.count(Reason::Failover);
        let mut b = Counters::default();
        b.count(Reason::Failover);
        b.count(Reason::SwitchBack);
        a.add(&b);
        assert_eq!((a.get(Reason::Failover), a.total()), (2, 3));
    }
}
