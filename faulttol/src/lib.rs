//! Fault tolerance (ICCL-style, generalised): link health, primary/backup choice and
//! breakpoint agreement, all sans-IO: callers pass events and the current time in
//! (`handle_*(now, ..)`) and act on what comes out (`poll_*()`); nothing here does IO or
//! reads a clock.
//!
//! Each connection has a primary link on its GPU's closest NIC and a backup on the
//! second-closest (without RDMA, interfaces `NCCL_SOCKET_IFNAME` selects), both connected
//! at setup. A link fails on an error completion, or when a chunk times out and a probe
//! then goes unanswered (a link stalled only because the peer's upstream failed answers,
//! and is not blamed). The end that sees the failure has the receiver roll back to what it
//! committed; the sender rolls back to that and resumes on the backup, so no byte is lost
//! and none delivered twice. The failed primary is probed, and once healthy for a hold-down
//! period traffic returns to it at a chunk boundary without stalling. Traffic lost on a link
//! that works again (it answers a probe sent after the loss) is recovered the same way,
//! without moving. When both links are down the connection reports failure. Every
//! transition is logged (`tracing::info!`, which `NCCL_DEBUG=INFO` maps to), counted, and
//! queued as a record for an observer (the monitor).
//!
//! Timing defaults are in [`HealthConfig`]: a silent link is failed 150 ms after its last
//! sign of life, so traffic is on the backup well within 200 ms of a link going down.
//!
//! - [`path`]: the health of each path of a multipath connection (the multipath transport).
//! - [`nic`]: the health of one link (Ok, Suspect, Failed, Recovering) and of a NIC.
//! - [`breakpoint`]: the sender's and receiver's ledgers and the rollback messages.
//! - [`failover`]: primary/backup choice, and the two ends of a connection ([`SenderConn`],
//!   [`ReceiverConn`]) joining it to the ledgers.
//! - [`event`]: transition records and counters.

pub mod breakpoint;
pub mod error;
pub mod event;
pub mod failover;
pub mod nic;
pub mod path;
pub mod state;

pub use breakpoint::{Chunk, Message, ReceiverLedger, SenderLedger};
pub use error::{Error, Result};
pub use event::{Counters, EventLog, Reason, Scope, State, Transition};
pub use failover::{Action, ConnState, Failover, LinkRole, ReceiverConn, SenderConn};
pub use nic::{HealthConfig, LinkHealth, LinkState, NicHealth, NicState};
pub use path::{PathHealth, PathStatus, PathsHealth, Timestamp, PROBE_MAX_SHIFT};
