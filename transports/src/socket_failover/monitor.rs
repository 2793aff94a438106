//! What a failover link tells the throughput monitor: a post per frame queued, on the
//! connection the stream is on then (its path key, the NIC of its socket), a completion
//! once the peer acknowledged the frame's last byte, and every transition of the
//! fault-tolerance machines (a connection failed, traffic moved to the backup, back to the
//! primary) as a monitor transition.

use ccl_faulttol::{ConnState, LinkRole, LinkState, NicState, Reason, State};
use ccl_monitor::{Engine, Scope, Transition};

use crate::frame_mon::{FrameMon, NIC_NONE};
use crate::LinkMonitor;

/// The path keys of the primary and the backup connection: apart from the multipath links'
/// (which count up from 0) and the single-connection links' ([`crate::SINGLE_PATH`]).
pub const FAILOVER_PATHS: [u16; 2] = [u16::MAX - 3, u16::MAX - 2];

/// One failover link's monitor state (under the link's lock).
#[derive(Debug)]
pub(super) struct FoMon {
    frames: FrameMon,
    /// The interface index of each connection's socket.
    nics: [u16; 2],
    id: u64,
}

fn role_index(role: LinkRole) -> usize {
    match role {
        LinkRole::Primary => 0,
        LinkRole::Backup => 1,
    }
}

impl FoMon {
    pub(super) fn off(id: u64) -> Self {
        FoMon {
            frames: FrameMon::off(Engine::Socket, FAILOVER_PATHS[0], NIC_NONE),
            nics: [NIC_NONE; 2],
            id,
        }
    }

    pub(super) fn attach(&mut self, m: &LinkMonitor, nics: [u16; 2]) {
        self.frames.attach(m);
        self.nics = nics;
    }

    pub(super) fn begin_op(&mut self, op: ccl_monitor::Op, seq: u64) {
        self.frames.begin_op(op, seq);
    }

    #[inline]
    pub(super) fn is_on(&self) -> bool {
        self.frames.is_on()
    }

    /// A frame of `len` bytes entered the send stream on `active`, ending at stream byte
    /// `end`.
    pub(super) fn queued(&mut self, active: LinkRole, len: usize, end: u64) {
        let r = role_index(active);
        self.frames.route(FAILOVER_PATHS[r], self.nics[r]);
        self.frames.posted(self.frames.now_ns(), len as u64);
        self.frames.owe(end, len as u64);
    }

    /// The peer acknowledged the stream up to `acked`.
    pub(super) fn acked(&mut self, acked: u64) {
        self.frames.reached(acked);
    }

    /// One transition of a machine of this link, reported now.
    pub(super) fn transition(&self, t: &ccl_faulttol::Transition<std::time::Instant>) {
        let scope = match t.scope {
            // Links are numbered 2 id (primary) and 2 id + 1 (backup).
            ccl_faulttol::Scope::Link(l) => {
                let r = usize::from(u64::from(l) != 2 * self.id);
                Scope::Path(FAILOVER_PATHS[r])
            }
            ccl_faulttol::Scope::Nic(n) => Scope::Nic(u16::try_from(n).unwrap_or(NIC_NONE)),
            ccl_faulttol::Scope::Connection(_) => Scope::Peer(self.frames.peer()),
        };
        self.frames.publisher().transition(&Transition {
            ts_ns: self.frames.now_ns(),
            scope,
            from: state_name(t.from),
            to: state_name(t.to),
            reason: reason_name(t.reason),
        });
    }
}

/// The monitor's name of a machine state (its transitions carry plain names).
pub fn state_name(s: State) -> &'static str {
    match s {
        State::Link(LinkState::Ok) => "ok",
        State::Link(LinkState::Suspect) => "suspect",
        State::Link(LinkState::Failed) => "failed",
        State::Link(LinkState::Recovering) => "recovering",
        State::Nic(NicState::Up) => "up",
        State::Nic(NicState::Down) => "down",
        State::Connection(ConnState::OnPrimary) => "on_primary",
        State::Connection(ConnState::OnBackup) => "on_backup",
        State::Connection(ConnState::RollingBack) => "rolling_back",
        State::Connection(ConnState::Failed) => "failed",
    }
}

/// The monitor's name of a transition's reason.
pub fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::ErrorCompletion => "error completion",
        Reason::ChunkTimeout => "chunk timeout",
        Reason::ProbeAnswered => "probe answered",
        Reason::ProbeTimeout => "probe timeout",
        Reason::Progress => "progress",
        Reason::HoldDownElapsed => "hold-down elapsed",
        Reason::PeerReported => "peer reported",
        Reason::PeerResumed => "peer resumed",
        Reason::Failover => "failover",
        Reason::SwitchBack => "switch back",
        Reason::Resync => "resync",
        Reason::AllLinksDown => "all links down",
        Reason::LinkUp => "link up",
    }
}
