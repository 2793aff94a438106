//! The throughput monitor: post/completion timestamps per chunk, sliding windows, anomaly
//! detection and exporters. So far: the counters of where an executor's time went
//! ([`stats::ExecStats`]), which the executors fill and the communicator logs.

pub mod stats;

pub use stats::{ExecStats, TIMED_BYTES};
