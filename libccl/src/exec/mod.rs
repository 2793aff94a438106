//! The host executor: turns schedules and point-to-point tasks into raw operations on links
//! and runs them to completion without blocking, so one thread can drive many communicators
//! of one group at once (the `-g N` case) without deadlock.
//!
//! Every operation's first frame starts with a 48-byte header describing the API call that
//! produced it (kind, dtype, reduction, count, root, sequence number). The receiver checks it
//! against its own call, so ranks that issue different collectives get `ncclInvalidUsage`
//! naming both calls instead of silently corrupting memory or hanging.
//!
//! Its files: `plan` (the [`Plan`]: steps of raw operations and what runs around them),
//! `build` (plans from schedules and from groups of sends and receives), `op` (the raw
//! operations and their order within a step), `progress` ([`Plan::progress`]), `send` and
//! `recv` (one operation's frames), `header` ([`OpHeader`]), `gates` (memory a GPU stream
//! stages: [`Flag`], [`PieceGates`], [`CollGates`]), `buffers` (plan-owned memory kept per
//! thread). Its counters are the monitor's ([`ExecStats`]).

mod buffers;
mod build;
mod gates;
mod header;
mod op;
mod plan;
mod progress;
mod recv;
mod send;

#[cfg(test)]
pub(crate) mod mem_link;
#[cfg(test)]
mod tests;

pub use ccl_monitor::ExecStats;
pub use gates::{CollGates, Flag, PieceGates};
pub use header::{OpHeader, HDR_BYTES};
pub use plan::Plan;
