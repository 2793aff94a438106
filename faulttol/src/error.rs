//! The crate's one error type: protocol violations a peer (or a caller) committed, found by
//! the machines' invariant checks. None of them panics; each leaves the machine as it was.

use thiserror::Error;

/// A protocol violation or an invalid configuration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Error {
    /// A configuration value that would make a machine meaningless (a zero timeout).
    #[error("invalid fault-tolerance configuration: {0}")]
    InvalidConfig(&'static str),
    /// The receiver acknowledged bytes the sender never transmitted.
    #[error("ack of {done} bytes beyond the {transmitted} transmitted")]
    AckBeyondTransmitted {
        /// Bytes acknowledged.
        done: u64,
        /// Bytes transmitted.
        transmitted: u64,
    },
    /// A rollback would undo bytes the receiver already acknowledged.
    #[error("rollback to {done} below the {acked} bytes already acknowledged")]
    RollbackBelowAcked {
        /// Where the receiver rolled back to.
        done: u64,
        /// Bytes acknowledged before.
        acked: u64,
    },
    /// A rollback to bytes the sender never transmitted.
    #[error("rollback to {done} beyond the {transmitted} transmitted")]
    RollbackBeyondTransmitted {
        /// Where the receiver rolled back to.
        done: u64,
        /// Bytes transmitted.
        transmitted: u64,
    },
    /// Data beyond the buffer space the receiver posted.
    #[error("data up to {end} beyond the {posted} bytes posted")]
    BeyondPosted {
        /// End of the data.
        end: u64,
        /// Bytes posted.
        posted: u64,
    },
    /// Data overlapping data already received in the same epoch (the sender sends each
    /// byte once per epoch).
    #[error("data at {offset} overlaps data already received in this epoch")]
    Overlap {
        /// Start of the data.
        offset: u64,
    },
    /// A commit of a chunk whose data has not arrived in this epoch.
    #[error("commit of the chunk at {offset}, whose data did not arrive")]
    CommitUnreceived {
        /// Start of the chunk.
        offset: u64,
    },
    /// A message of an epoch the peer cannot have reached yet.
    #[error("message of epoch {got} ahead of epoch {current}")]
    FutureEpoch {
        /// The message's epoch.
        got: u32,
        /// This side's epoch.
        current: u32,
    },
    /// A message that only the other side of a connection sends.
    #[error("{0} is not sent to this side of a connection")]
    WrongDirection(&'static str),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
