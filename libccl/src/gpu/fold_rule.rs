//! Which reductions of a group fold on the GPU (`CCL_GPU_FOLD_BYTES`): the settings applied to
//! the pure rule in `ccl_collectives::fold`.

use ccl_collectives::fold::{fold_rule, shares_memory};
pub(super) use ccl_collectives::fold::{Fold, Wide};

use crate::core::Comm;
use crate::params;
use crate::task::Task;

use super::device::is_device_ptr;

// The rule's rank limit is the kernels' own.
const _: () = assert!(ccl_collectives::fold::MAX_RANKS == ccl_cuda::cuda::source::REDUCE_N_MAX);

/// Which of a group's operations [`submit_folded`](super::fold::submit_folded) folds on the GPU.
/// Each is decided on the operation alone and the settings every rank shares, so a rank that groups
/// it with other operations and one that calls it alone decide alike; a reduce's other rank does
/// not look at its receive buffer. One that shares memory with another operation of its group stays
/// staged (those see each other's results in call order; the fold writes after the whole group).
pub(super) fn folds_of(comm: &Comm, tasks: &[Task]) -> Vec<Option<Fold>> {
    let min = params::CCL_GPU_FOLD_BYTES.get_i64();
    if min <= 0 {
        return vec![None; tasks.len()];
    }
    let who = (comm.rank(), comm.nranks());
    if who.1 > 2 && !params::CCL_GPU_FOLD_WIDE.get_bool() {
        return vec![None; tasks.len()];
    }
    let max = params::CCL_GPU_FOLD_MAX_BYTES.get_i64().max(0) as usize;
    let shared_memory_only = comm.0.issue.lock().shared_memory_only;
    let mut folds: Vec<Option<Fold>> = tasks
        .iter()
        .map(|t| {
            fold_rule(
                t,
                who,
                shared_memory_only,
                (min as usize, max),
                &is_device_ptr,
            )
        })
        .collect();
    for (i, f) in folds.iter_mut().enumerate() {
        if f.is_some() && shares_memory(tasks, i, who) {
            *f = None;
        }
    }
    folds
}
