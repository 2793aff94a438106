//! Fault tolerance (ICCL-style, generalised): per-path health state machines, primary/backup
//! choice and breakpoint agreement, all sans-IO: callers pass events and the current time
//! in and act on what comes out; nothing here does IO or reads a clock.
//!
//! So far: [`path`], the health of each path of a multipath connection.

pub mod path;

pub use path::{PathHealth, PathStatus, PathsHealth, Timestamp, PROBE_MAX_SHIFT};
