//! What the API records for one operation before a group turns it into a plan. The types live
//! in `ccl-collectives` (every engine speaks them); checking a call's arguments against the
//! communicator is the API's concern and stays here.

pub use ccl_collectives::task::*;

use crate::error::{Error, Result};

/// Checks an operation's arguments against the communicator's size.
pub fn validate(task: &Task, rank: usize, nranks: usize) -> Result<()> {
    let name = task.kind.name();
    if let Some(root) = task.kind.root() {
        if root >= nranks {
            return Err(Error::invalid_argument(format!(
                "{name}: root {root} is not a rank of this {nranks}-rank communicator"
            )));
        }
    }
    if let TaskKind::Send { peer } | TaskKind::Recv { peer } = task.kind {
        if peer >= nranks {
            return Err(Error::invalid_argument(format!(
                "{name}: peer {peer} is not a rank of this {nranks}-rank communicator"
            )));
        }
    }
    let (send_elems, recv_elems) =
        buffer_counts(task.kind, rank, nranks, task.count).ok_or_else(|| {
            Error::invalid_argument(format!("{name}: count {} overflows", task.count))
        })?;
    let size = task.dtype.size();
    for (what, elems, ptr) in [
        ("sendbuff", send_elems, task.send),
        ("recvbuff", recv_elems, task.recv),
    ] {
        let bytes = elems
            .checked_mul(size)
            .filter(|b| isize::try_from(*b).is_ok())
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{name}: count {} of {} is too large ({what} size overflows)",
                    task.count,
                    task.dtype.name()
                ))
            })?;
        if bytes > 0 && ptr == 0 {
            return Err(Error::invalid_argument(format!("{name}: {what} is NULL")));
        }
        if bytes > 0 && ptr.checked_add(bytes).is_none() {
            return Err(Error::invalid_argument(format!(
                "{name}: {what} + size wraps the address space"
            )));
        }
    }
    Ok(())
}
