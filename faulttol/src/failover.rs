//! Primary/backup choice for one connection: which link carries the next chunk, when to
//! move to the backup, when to probe the primary, when to go back to it, and when to give
//! up. [`Failover`] holds the two links' health and the connection's state; [`SenderConn`]
//! and [`ReceiverConn`] join it to the [breakpoint ledgers](crate::breakpoint) for the two
//! ends, and are what a transport drives.
//!
//! ```text
//! from         event (seen by this end)                          to
//! OnPrimary,   active link Failed, other not: receiver rolls     OnBackup / OnPrimary
//!   OnBackup     back and tells the sender
//!              active link Failed, other not: sender asks the    RollingBack
//!                receiver to roll back
//!              active link Failed, other Failed too              Failed
//!              sender: traffic lost on a link that works (see    RollingBack
//!                below), rollback asked on the active link
//! RollingBack  the receiver's rollback arrives                   On<the link it came on>
//!              the link the request went on fails too            Failed
//!              request lost on a link that works: asked again    RollingBack
//! OnBackup     sender: primary Ok again (hold-down over),         OnPrimary
//!                at the next chunk boundary
//!              receiver: newest data arrives on the primary      OnPrimary
//! Failed       (terminal: the caller reports the connection      Failed
//!                failed, ncclRemoteError / ncclSystemError)
//! ```
//!
//! Switching back needs no rollback: the sender sends the next chunk on the primary while
//! earlier ones may still be on the backup, and the receiver holds chunks that overtake
//! others until the gap is filled, so traffic does not stall.
//!
//! A failed link is probed by both ends independently; the sender's view decides the
//! switch back, and the receiver takes traffic arriving on a link as the sender's verdict
//! that it works. A rollback the receiver starts says it gave up on the other link.
//!
//! The sender also resynchronises without moving (a rollback on the link it is on) when
//! traffic was lost on a link that works again: a probe answered while chunks sent before
//! it are still unacknowledged, or chunks left in flight on a link that failed after a
//! switch back. Without that both ends would wait forever on links that answer probes.

use std::collections::VecDeque;

use crate::breakpoint::{Message, ReceiverLedger, SenderLedger};
use crate::error::{Error, Result};
use crate::event::{Counters, EventLog, Reason, Scope, State, Transition};
use crate::nic::{HealthConfig, LinkHealth, LinkState};
use crate::path::Timestamp;
pub use crate::state::ConnState;

/// One of a connection's two links.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkRole {
    /// On the GPU's closest NIC.
    Primary,
    /// On the second-closest NIC (or another interface of `NCCL_SOCKET_IFNAME`).
    Backup,
}

impl LinkRole {
    /// The other link.
    pub fn other(self) -> LinkRole {
        match self {
            LinkRole::Primary => LinkRole::Backup,
            LinkRole::Backup => LinkRole::Primary,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl ConnState {
    fn on(link: LinkRole) -> ConnState {
        match link {
            LinkRole::Primary => ConnState::OnPrimary,
            LinkRole::Backup => ConnState::OnBackup,
        }
    }
}

/// A decision the caller acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Traffic moves to `to`, the stream resuming at byte `resume_from` (the sender
    /// re-transmits from there; the receiver expects it there).
    Switch {
        /// The link now carrying traffic.
        to: LinkRole,
        /// The byte the stream resumes at.
        resume_from: u64,
    },
    /// Both links are down: report the connection failed.
    Failed,
}

/// The link choice of one connection: two links' health and which one is active.
#[derive(Clone, Debug)]
pub struct Failover<I> {
    id: u64,
    links: [LinkHealth<I>; 2],
    active: LinkRole,
    state: ConnState,
    log: EventLog<I>,
    actions: VecDeque<Action>,
}

impl<I: Timestamp> Failover<I> {
    /// Connection `id` on links with ids `primary` and `backup`, starting on the primary.
    pub fn new(id: u64, primary: u32, backup: u32, cfg: HealthConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Failover {
            id,
            links: [LinkHealth::new(primary, cfg), LinkHealth::new(backup, cfg)],
            active: LinkRole::Primary,
            state: ConnState::OnPrimary,
            log: EventLog::default(),
            actions: VecDeque::new(),
        })
    }

    /// The link traffic goes on (or, while rolling back, will).
    pub fn active(&self) -> LinkRole {
        self.active
    }

    /// Where the connection stands.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// One link's health.
    pub fn link(&self, role: LinkRole) -> &LinkHealth<I> {
        &self.links[role.index()]
    }

    fn with_link(&mut self, role: LinkRole, f: impl FnOnce(&mut LinkHealth<I>)) {
        let link = &mut self.links[role.index()];
        f(link);
        // Passed on at once, so the observer sees link and connection records in order.
        while let Some(t) = link.poll_transition() {
            self.log.forward(t);
        }
        // A recovering link carries no traffic either: the other is the one left.
        let unusable = self.links.each_ref().map(|l| !l.is_usable());
        self.links[0].set_last_resort(unusable[1]);
        self.links[1].set_last_resort(unusable[0]);
    }

    /// Something is owed back on `role` (see [`LinkHealth::handle_expect`]).
    pub fn handle_expect(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_expect(now));
    }

    /// Traffic arrived on `role` (see [`LinkHealth::handle_arrival`]).
    pub fn handle_arrival(&mut self, now: I, role: LinkRole, still_expecting: bool) {
        self.with_link(role, |l| l.handle_arrival(now, still_expecting));
    }

    /// Another stream's traffic arrived on `role` (see [`LinkHealth::handle_alive`]).
    pub fn handle_alive(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_alive(now));
    }

    /// Nothing is owed on `role` any more.
    pub fn handle_idle(&mut self, role: LinkRole) {
        self.with_link(role, LinkHealth::handle_idle);
    }

    /// An error completion on `role`.
    pub fn handle_error(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_error(now));
    }

    /// The peer gave up on `role`.
    pub fn handle_peer_failed(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_peer_failed(now));
    }

    /// The peer resumed traffic on `role`.
    pub fn handle_peer_resumed(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_peer_resumed(now));
    }

    /// A fresh connection replaced `role`'s (see [`LinkHealth::handle_reconnected`]).
    pub fn handle_reconnected(&mut self, now: I, role: LinkRole) {
        self.with_link(role, |l| l.handle_reconnected(now));
    }

    /// The answer to probe `seq` arrived on `role`; returns whether it was outstanding.
    pub fn handle_probe_answer(&mut self, now: I, role: LinkRole, seq: u64) -> bool {
        let mut fresh = false;
        self.with_link(role, |l| fresh = l.handle_probe_answer(now, seq));
        fresh
    }

    /// Applies both links' timeouts due at `now`.
    pub fn handle_timeout(&mut self, now: I) {
        for role in [LinkRole::Primary, LinkRole::Backup] {
            self.with_link(role, |l| l.handle_timeout(now));
        }
    }

    /// The active link failed and the connection has not yet moved (or given up).
    pub fn active_down(&self) -> bool {
        self.state != ConnState::Failed && self.is_down(self.active)
    }

    /// Whether `role` is failed. A recovering link is not: traffic does not go back to it
    /// by choice, but as the last resort it beats failing the connection, and the rollback
    /// exchange on it soon proves it one way or the other.
    pub fn is_down(&self, role: LinkRole) -> bool {
        self.link(role).state() == LinkState::Failed
    }

    /// On the backup while the primary is healthy again.
    pub fn can_switch_back(&self) -> bool {
        self.state == ConnState::OnBackup && self.link(LinkRole::Primary).state() == LinkState::Ok
    }

    /// Traffic moves to `to`, resuming at `resume_from` (not once failed: that is terminal).
    pub fn switch(&mut self, now: I, to: LinkRole, resume_from: u64, reason: Reason) {
        if self.state == ConnState::Failed {
            return;
        }
        self.active = to;
        self.set(now, ConnState::on(to), reason);
        self.actions.push_back(Action::Switch { to, resume_from });
    }

    /// The sender asked the receiver, over `to`, to roll back.
    pub fn begin_rollback(&mut self, now: I, to: LinkRole, reason: Reason) {
        if self.state == ConnState::Failed {
            return;
        }
        self.active = to;
        self.set(now, ConnState::RollingBack, reason);
    }

    /// Both links are down.
    pub fn fail(&mut self, now: I) {
        if self.state == ConnState::Failed {
            return;
        }
        self.set(now, ConnState::Failed, Reason::AllLinksDown);
        self.actions.push_back(Action::Failed);
    }

    fn set(&mut self, now: I, to: ConnState, reason: Reason) {
        let from = std::mem::replace(&mut self.state, to);
        if from != to {
            let (f, t) = (State::Connection(from), State::Connection(to));
            self.log
                .record(now, Scope::Connection(self.id), f, t, reason);
        }
    }

    /// A probe to send now: its link and sequence number. None once failed: a failed
    /// connection is torn down, not revived.
    pub fn poll_probe(&mut self, now: I) -> Option<(LinkRole, u64)> {
        if self.state == ConnState::Failed {
            return None;
        }
        for role in [LinkRole::Primary, LinkRole::Backup] {
            let mut seq = None;
            self.with_link(role, |l| seq = l.poll_probe(now));
            if let Some(seq) = seq {
                return Some((role, seq));
            }
        }
        None
    }

    /// When [`handle_timeout`](Self::handle_timeout) and the probes are next due.
    pub fn poll_timeout(&self) -> Option<I> {
        if self.state == ConnState::Failed {
            return None;
        }
        self.links.iter().filter_map(LinkHealth::poll_timeout).min()
    }

    /// The oldest decision not yet taken.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The oldest transition (of the connection or either link) not yet drained.
    pub fn poll_transition(&mut self) -> Option<Transition<I>> {
        self.log.poll()
    }

    /// Transitions of the connection and both links, per reason.
    pub fn counters(&self) -> Counters {
        let mut c = *self.log.counters();
        for l in &self.links {
            c.add(l.counters());
        }
        c
    }
}

/// The sending end of a connection: chunks, acks, failover and switch-back.
#[derive(Clone, Debug)]
pub struct SenderConn<I> {
    core: Failover<I>,
    ledger: SenderLedger,
    out: VecDeque<(LinkRole, Message)>,
    /// End of each chunk transmitted and not acknowledged, and its link.
    inflight: VecDeque<(u64, LinkRole)>,
    /// Epoch of the rollback request out, while rolling back.
    requested: Option<u32>,
    /// Per link, the probe out on it and what was owed on it when it went: the end of the
    /// newest chunk then in flight there, and whether the rollback request was.
    probed: [Option<ProbeMark>; 2],
}

/// What a link owed when a probe went out on it. Links keep order, and the receiver acks
/// (and answers a rollback request) on the link the chunk (or request) came on, before it
/// answers a later probe; so whatever is still owed from before the probe when its answer
/// arrives was lost on a link that works now, and both ends must resynchronise.
#[derive(Clone, Copy, Debug)]
struct ProbeMark {
    seq: u64,
    chunks_up_to: Option<u64>,
    request: Option<u32>,
}

impl<I: Timestamp> SenderConn<I> {
    /// Connection `id` on links `primary` and `backup`, cutting its stream into chunks of
    /// `chunk_size` bytes.
    pub fn new(id: u64, links: (u32, u32), cfg: HealthConfig, chunk_size: u64) -> Result<Self> {
        Ok(SenderConn {
            core: Failover::new(id, links.0, links.1, cfg)?,
            ledger: SenderLedger::new(chunk_size)?,
            out: VecDeque::new(),
            inflight: VecDeque::new(),
            requested: None,
            probed: [None; 2],
        })
    }

    /// Link choice and health.
    pub fn failover(&self) -> &Failover<I> {
        &self.core
    }

    /// Where the transfer stands.
    pub fn ledger(&self) -> &SenderLedger {
        &self.ledger
    }

    /// Every byte posted is acknowledged.
    pub fn is_complete(&self) -> bool {
        self.ledger.is_complete()
    }

    /// `len` more bytes to send.
    pub fn post(&mut self, now: I, len: u64) {
        self.ledger.post(len);
        self.settle(now);
    }

    /// A message arrived on `link`. A protocol violation is reported and the message
    /// otherwise ignored.
    pub fn handle_message(&mut self, now: I, link: LinkRole, msg: Message) -> Result<()> {
        let r = self.on_message(now, link, msg);
        self.settle(now);
        r
    }

    /// The other direction's traffic arrived on `link`: it is alive (see
    /// [`LinkHealth::handle_alive`]).
    pub fn handle_alive(&mut self, now: I, link: LinkRole) {
        self.core.handle_alive(now, link);
        self.settle(now);
    }

    fn on_message(&mut self, now: I, link: LinkRole, msg: Message) -> Result<()> {
        match msg {
            Message::Cts { posted } => self.ledger.handle_cts(posted),
            Message::Ack { epoch, done } => {
                if self.ledger.handle_ack(epoch, done)? {
                    self.inflight.retain(|&(end, _)| end > done);
                }
            }
            Message::Rollback {
                epoch,
                done,
                posted,
            } => {
                self.ledger.handle_cts(posted);
                self.on_rollback(now, link, epoch, done)?;
            }
            Message::Probe { seq } => self.out.push_back((link, Message::ProbeAnswer { seq })),
            Message::ProbeAnswer { seq } => {
                self.on_probe_answer(now, link, seq);
                return Ok(());
            }
            Message::Data { .. } => return Err(Error::WrongDirection("data")),
            Message::Commit { .. } => return Err(Error::WrongDirection("commit")),
            Message::RollbackRequest { .. } => {
                return Err(Error::WrongDirection("rollback request"))
            }
        }
        self.core.handle_arrival(now, link, self.owes(link));
        Ok(())
    }

    fn on_rollback(&mut self, now: I, link: LinkRole, epoch: u32, done: u64) -> Result<()> {
        let solicited = self.requested == Some(epoch);
        let Some(resume_from) = self.ledger.handle_rollback(epoch, done)? else {
            return Ok(());
        };
        self.requested = None;
        self.inflight.clear();
        if !solicited {
            // The receiver rolls back on its own only when its link failed.
            self.core.handle_peer_failed(now, link.other());
        }
        if !self.core.link(link).is_usable() {
            // The rollback came through: the link works whatever this end thought.
            self.core.handle_peer_resumed(now, link);
        }
        self.core.switch(now, link, resume_from, Reason::Failover);
        Ok(())
    }

    fn on_probe_answer(&mut self, now: I, link: LinkRole, seq: u64) {
        if !self.core.handle_probe_answer(now, link, seq) {
            return;
        }
        let Some(mark) = self.probed[link.index()].take().filter(|m| m.seq == seq) else {
            return;
        };
        let lost_chunk = mark
            .chunks_up_to
            .is_some_and(|end| self.inflight.iter().any(|&(e, l)| l == link && e <= end));
        let lost_request = mark.request.is_some() && mark.request == self.requested;
        if (lost_chunk || lost_request) && self.core.link(link).is_usable() {
            self.resync(now, link);
        }
    }

    /// Asks the receiver, over `link`, to roll back: a new request, or the one out again.
    fn resync(&mut self, now: I, link: LinkRole) {
        let epoch = match self.requested {
            Some(epoch) => epoch,
            None => self.ledger.epoch().saturating_add(1),
        };
        self.requested = Some(epoch);
        self.out
            .push_back((link, Message::RollbackRequest { epoch }));
        self.core.begin_rollback(now, link, Reason::Resync);
    }

    /// An error completion on `link`.
    pub fn handle_error(&mut self, now: I, link: LinkRole) {
        self.core.handle_error(now, link);
        self.settle(now);
    }

    /// A fresh connection replaced `link`'s: what was in flight on the old one is lost. A
    /// failed link is probed at once; on one in use, chunks or a rollback request out on
    /// it are asked for again by a rollback at once, rather than after a chunk timeout.
    pub fn handle_reconnected(&mut self, now: I, link: LinkRole) {
        self.core.handle_reconnected(now, link);
        let rolling = self.core.state() == ConnState::RollingBack && link == self.core.active();
        let lost = rolling || self.inflight.iter().any(|&(_, l)| l == link);
        if lost && self.core.link(link).is_usable() {
            self.resync(now, link);
        }
        self.settle(now);
    }

    /// Applies the timeouts due at `now`.
    pub fn handle_timeout(&mut self, now: I) {
        self.core.handle_timeout(now);
        self.settle(now);
    }

    /// Whether anything is owed back on `link`: acks for its chunks in flight, the answer
    /// to a rollback request, or (on the active link) buffer space for data waiting.
    fn owes(&self, link: LinkRole) -> bool {
        let active = link == self.core.active();
        let waiting = match self.core.state() {
            ConnState::OnPrimary | ConnState::OnBackup => self.ledger.wants_credit(),
            ConnState::RollingBack => self.requested.is_some(),
            ConnState::Failed => false,
        };
        self.inflight.iter().any(|&(_, l)| l == link) || (active && waiting)
    }

    /// Moves off a failed active link, resynchronises when chunks were lost with the other
    /// one (after a switch back), and updates what each link owes.
    fn settle(&mut self, now: I) {
        if self.core.active_down() {
            let to = self.core.active().other();
            if self.core.is_down(to) {
                self.core.fail(now);
                return;
            }
            let epoch = self.ledger.epoch().saturating_add(1);
            self.requested = Some(epoch);
            self.out.push_back((to, Message::RollbackRequest { epoch }));
            self.core.begin_rollback(now, to, Reason::Failover);
        } else if self.lost_on_other() {
            self.resync(now, self.core.active());
        }
        for role in [LinkRole::Primary, LinkRole::Backup] {
            match self.owes(role) {
                true => self.core.handle_expect(now, role),
                false => self.core.handle_idle(role),
            }
        }
    }

    /// Chunks are in flight on the inactive link, and it failed.
    fn lost_on_other(&self) -> bool {
        let other = self.core.active().other();
        matches!(
            self.core.state(),
            ConnState::OnPrimary | ConnState::OnBackup
        ) && !self.core.link(other).is_usable()
            && self.inflight.iter().any(|&(_, l)| l == other)
    }

    /// The next message to send and its link: control messages and probes first, then the
    /// next chunk (its payload, then its commit).
    pub fn poll_transmit(&mut self, now: I) -> Option<(LinkRole, Message)> {
        if let Some(m) = self.out.pop_front() {
            return Some(m);
        }
        if let Some((link, seq)) = self.core.poll_probe(now) {
            self.mark_probe(link, seq);
            return Some((link, Message::Probe { seq }));
        }
        self.next_chunk(now)
    }

    fn mark_probe(&mut self, link: LinkRole, seq: u64) {
        let chunks_up_to = self
            .inflight
            .iter()
            .filter(|&&(_, l)| l == link)
            .map(|&(end, _)| end)
            .max();
        let request = self.requested.filter(|_| link == self.core.active());
        self.probed[link.index()] = Some(ProbeMark {
            seq,
            chunks_up_to,
            request,
        });
    }

    fn next_chunk(&mut self, now: I) -> Option<(LinkRole, Message)> {
        if !matches!(
            self.core.state(),
            ConnState::OnPrimary | ConnState::OnBackup
        ) {
            return None;
        }
        if self.core.can_switch_back() {
            let resume_from = self.ledger.transmitted();
            self.core
                .switch(now, LinkRole::Primary, resume_from, Reason::SwitchBack);
            self.settle(now);
        }
        let chunk = self.ledger.take_chunk()?;
        let (link, epoch) = (self.core.active(), self.ledger.epoch());
        self.inflight.push_back((chunk.end(), link));
        self.core.handle_expect(now, link);
        let offset = chunk.offset;
        self.out
            .push_back((link, Message::Commit { epoch, offset }));
        let len = chunk.len;
        Some((link, Message::Data { epoch, offset, len }))
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<I> {
        self.core.poll_timeout()
    }

    /// The oldest decision not yet taken.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.core.poll_action()
    }

    /// The oldest transition not yet drained.
    pub fn poll_transition(&mut self) -> Option<Transition<I>> {
        self.core.poll_transition()
    }

    /// Transitions of the connection and its links, per reason.
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }
}

/// The receiving end of a connection: grants, commits, acks and rollbacks.
#[derive(Clone, Debug)]
pub struct ReceiverConn<I> {
    core: Failover<I>,
    ledger: ReceiverLedger,
    out: VecDeque<(LinkRole, Message)>,
    /// End of the furthest chunk taken in this epoch: the link it came on is where the
    /// sender is now (a chunk overtaken on the other link says nothing).
    furthest: u64,
}

impl<I: Timestamp> ReceiverConn<I> {
    /// Connection `id` on links `primary` and `backup`.
    pub fn new(id: u64, links: (u32, u32), cfg: HealthConfig) -> Result<Self> {
        Ok(ReceiverConn {
            core: Failover::new(id, links.0, links.1, cfg)?,
            ledger: ReceiverLedger::new(),
            out: VecDeque::new(),
            furthest: 0,
        })
    }

    /// Link choice and health.
    pub fn failover(&self) -> &Failover<I> {
        &self.core
    }

    /// Where the transfer stands.
    pub fn ledger(&self) -> &ReceiverLedger {
        &self.ledger
    }

    /// `len` more bytes of buffer space: a clear-to-send goes out on the active link.
    pub fn post(&mut self, now: I, len: u64) {
        let posted = self.ledger.post(len);
        self.out
            .push_back((self.core.active(), Message::Cts { posted }));
        self.settle(now);
    }

    /// A message arrived on `link`. Returns whether it was a chunk's payload to place at
    /// its offset (`false` for an older epoch's, to drop, and for every other message).
    pub fn handle_message(&mut self, now: I, link: LinkRole, msg: Message) -> Result<bool> {
        let r = self.on_message(now, link, msg);
        self.settle(now);
        r
    }

    /// The other direction's traffic arrived on `link`: it is alive (see
    /// [`LinkHealth::handle_alive`]).
    pub fn handle_alive(&mut self, now: I, link: LinkRole) {
        self.core.handle_alive(now, link);
        self.settle(now);
    }

    fn on_message(&mut self, now: I, link: LinkRole, msg: Message) -> Result<bool> {
        let mut took = false;
        match msg {
            Message::Data { epoch, offset, len } => {
                took = self.ledger.handle_data(epoch, offset, len)?;
                if took {
                    self.follow(now, link, offset, len);
                }
            }
            Message::Commit { epoch, offset } => self.on_commit(link, epoch, offset)?,
            Message::RollbackRequest { epoch } => self.on_rollback_request(now, link, epoch),
            Message::Probe { seq } => self.out.push_back((link, Message::ProbeAnswer { seq })),
            Message::ProbeAnswer { seq } => {
                self.core.handle_probe_answer(now, link, seq);
                return Ok(false);
            }
            Message::Cts { .. } => return Err(Error::WrongDirection("clear-to-send")),
            Message::Ack { .. } => return Err(Error::WrongDirection("ack")),
            Message::Rollback { .. } => return Err(Error::WrongDirection("rollback")),
        }
        let owed = link == self.core.active() && self.ledger.wants_data();
        self.core.handle_arrival(now, link, owed);
        Ok(took)
    }

    /// The ack goes back on the link the commit came on: if it is lost, that link failed,
    /// and the sender, waiting on it, finds out; on the other link a lost ack could leave
    /// the sender waiting on a link that answers every probe.
    fn on_commit(&mut self, link: LinkRole, epoch: u32, offset: u64) -> Result<()> {
        if self.ledger.handle_commit(epoch, offset)? {
            let (epoch, done) = (self.ledger.epoch(), self.ledger.done());
            self.out.push_back((link, Message::Ack { epoch, done }));
        }
        Ok(())
    }

    /// The newest chunk came on `link`: the sender is there now.
    fn follow(&mut self, now: I, link: LinkRole, offset: u64, len: u64) {
        let end = offset.saturating_add(len);
        if end <= self.furthest {
            return;
        }
        self.furthest = end;
        if link == self.core.active() {
            return;
        }
        if !self.core.link(link).is_usable() {
            self.core.handle_peer_resumed(now, link);
        }
        let reason = match link {
            LinkRole::Primary => Reason::SwitchBack,
            LinkRole::Backup => Reason::Failover,
        };
        self.core.switch(now, link, offset, reason);
    }

    fn on_rollback_request(&mut self, now: I, link: LinkRole, epoch: u32) {
        if epoch <= self.ledger.epoch() {
            // Already rolled back (this end saw the failure too): repeat the answer.
            self.out.push_back((link, self.ledger.rollback_message()));
            return;
        }
        // The other link is not blamed: the sender may be resynchronising in place.
        if !self.core.link(link).is_usable() {
            self.core.handle_peer_resumed(now, link);
        }
        self.roll_back(now, link, epoch);
    }

    fn roll_back(&mut self, now: I, to: LinkRole, min_epoch: u32) {
        let msg = self.ledger.roll_back(min_epoch);
        self.out.push_back((to, msg));
        let done = self.ledger.done();
        self.furthest = done;
        self.core.switch(now, to, done, Reason::Failover);
    }

    /// An error completion on `link`.
    pub fn handle_error(&mut self, now: I, link: LinkRole) {
        self.core.handle_error(now, link);
        self.settle(now);
    }

    /// A fresh connection replaced `link`'s: what was in flight on the old one is lost. A
    /// failed link is probed at once; on the active one the grant goes again (acks lost
    /// with it are found by the sender's own timeout).
    pub fn handle_reconnected(&mut self, now: I, link: LinkRole) {
        self.core.handle_reconnected(now, link);
        if link == self.core.active() {
            let posted = self.ledger.posted();
            self.out.push_back((link, Message::Cts { posted }));
        }
        self.settle(now);
    }

    /// Applies the timeouts due at `now`.
    pub fn handle_timeout(&mut self, now: I) {
        self.core.handle_timeout(now);
        self.settle(now);
    }

    /// Moves off a failed active link; data is owed on the active link while granted
    /// space is not done, and nothing on the other.
    fn settle(&mut self, now: I) {
        if self.core.active_down() {
            let to = self.core.active().other();
            if self.core.is_down(to) {
                self.core.fail(now);
                return;
            }
            self.roll_back(now, to, 0);
        }
        let active = self.core.active();
        match self.ledger.wants_data() && self.core.state() != ConnState::Failed {
            true => self.core.handle_expect(now, active),
            false => self.core.handle_idle(active),
        }
        self.core.handle_idle(active.other());
    }

    /// The next message to send and its link. A probe goes with the grant re-sent (the
    /// re-sent clear-to-send): if the stall was a lost grant, that ends it.
    pub fn poll_transmit(&mut self, now: I) -> Option<(LinkRole, Message)> {
        if let Some(m) = self.out.pop_front() {
            return Some(m);
        }
        let (link, seq) = self.core.poll_probe(now)?;
        let posted = self.ledger.posted();
        self.out.push_back((link, Message::Cts { posted }));
        Some((link, Message::Probe { seq }))
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<I> {
        self.core.poll_timeout()
    }

    /// The oldest decision not yet taken.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.core.poll_action()
    }

    /// The oldest transition not yet drained.
    pub fn poll_transition(&mut self) -> Option<Transition<I>> {
        self.core.poll_transition()
    }

    /// Transitions of the connection and its links, per reason.
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }
}

#[cfg(test)]
mod tests;
