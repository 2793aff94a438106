//! The caller's streams that several communicators of a group share, forked onto streams of
//! each communicator's own and joined back.

use ccl_cuda::cuda::{self, Stream};

use super::device::{cuda_err, device_context, plain_event};
use crate::core::Comm;
use crate::error::Result;
use crate::task::Task;

/// The caller's streams a group's communicators share, each forked onto a stream of the
/// communicator's own for the group ([`fork_shared_streams`]); joined back by [`Forks::join`].
#[derive(Default)]
#[must_use = "the caller's streams must wait for the forks (Forks::join)"]
pub(crate) struct Forks(Vec<(Stream, Stream)>);

impl Forks {
    /// Makes each caller's stream wait for the work queued on its forks.
    pub(crate) fn join(self) -> Result<()> {
        for (user, side) in self.0 {
            let ev = plain_event(side.context())?;
            ev.record(&side).map_err(cuda_err)?;
            user.wait_event(&ev).map_err(cuda_err)?;
        }
        Ok(())
    }
}

/// NCCL runs the communicators of a group side by side (each on a stream of its own, joined
/// to the caller's streams), so a rank that calls their operations one by one matches a rank
/// that groups them. Queued one after the other on one shared stream, each part would wait
/// for the other's peers: so every communicator's part but the first on a caller's stream
/// moves onto a stream of the communicator's own that waits for the caller's stream first;
/// [`Forks::join`] makes the caller's stream wait for them after everything is queued.
/// Parts on streams no other part uses stay where they are.
pub(crate) fn fork_shared_streams(parts: &mut [(Comm, Vec<Task>)]) -> Result<Forks> {
    let mut forks = Forks::default();
    if parts.len() < 2 {
        return Ok(forks);
    }
    let moves = streams_to_fork(parts.iter().map(|(_, ts)| ts.as_slice()));
    for (i, (comm, tasks)) in parts.iter_mut().enumerate() {
        let mine: Vec<usize> = moves
            .iter()
            .filter(|(p, _)| *p == i)
            .map(|&(_, s)| s)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let ctx = device_context(comm.0.cuda_dev)?;
        let mut pool = comm.0.side_streams.lock();
        while pool.len() < mine.len() {
            pool.push(Stream::with_flags(&ctx, true).map_err(cuda_err)?);
        }
        for (&user_raw, side) in mine.iter().zip(pool.iter()) {
            // SAFETY: `user_raw` is the caller's own live stream (NCCL's contract); `side`
            // lives as long as the communicator, past any work queued on it (a destroyed
            // stream's queued work still completes).
            let (user, side) = unsafe {
                (
                    Stream::from_raw(&ctx, user_raw as cuda::sys::CUstream),
                    Stream::from_raw(&ctx, side.raw()),
                )
            };
            let ev = plain_event(&ctx)?;
            ev.record(&user).map_err(cuda_err)?;
            side.wait_event(&ev).map_err(cuda_err)?;
            for t in tasks.iter_mut().filter(|t| t.stream == user_raw) {
                t.stream = side.raw() as usize;
            }
            forks.0.push((user, side));
        }
    }
    Ok(forks)
}

/// Which parts of a group move off which caller's stream ([`fork_shared_streams`]): each
/// `(part, stream)` where an earlier part uses that stream too, once.
fn streams_to_fork<'a>(parts: impl Iterator<Item = &'a [Task]>) -> Vec<(usize, usize)> {
    let mut first_user: Vec<(usize, usize)> = Vec::new();
    let mut moves: Vec<(usize, usize)> = Vec::new();
    for (i, tasks) in parts.enumerate() {
        for t in tasks {
            match first_user.iter().find(|(s, _)| *s == t.stream) {
                None => first_user.push((t.stream, i)),
                Some(&(_, j)) if j != i && !moves.contains(&(i, t.stream)) => {
                    moves.push((i, t.stream))
                }
                Some(_) => {}
            }
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Reduction, TaskKind};
    use ccl_collectives::Collective;

    #[test]
    fn only_parts_after_the_first_on_a_stream_are_forked() {
        let on = |streams: &[usize]| -> Vec<Task> {
            streams
                .iter()
                .map(|&s| Task {
                    kind: TaskKind::Coll(Collective::AllReduce),
                    send: 0x1000,
                    recv: 0x1000,
                    count: 1,
                    dtype: ccl_cuda::DataType::Float32,
                    red: Reduction::Plain(ccl_cuda::ReduceKind::Sum),
                    stream: s,
                    fold: false,
                })
                .collect()
        };
        let parts = [
            on(&[1, 1, 2]),
            on(&[1]),
            on(&[3]),
            on(&[2, 1, 2]),
            on(&[3, 3]),
        ];
        let moves = streams_to_fork(parts.iter().map(Vec::as_slice));
        assert_eq!(moves, vec![(1, 1), (3, 2), (3, 1), (4, 3)]);
        // One part alone, or parts on streams of their own, stay put.
        assert!(streams_to_fork([on(&[1, 1])].iter().map(Vec::as_slice)).is_empty());
        assert!(streams_to_fork([on(&[1]), on(&[2])].iter().map(Vec::as_slice)).is_empty());
    }
}
