//! Groups: `ncclGroupStart`/`ncclGroupEnd` nesting, and handing a group's operations to the
//! engines that run them.
//!
//! Outside a group an operation is a group of one. At the outermost `ncclGroupEnd` each
//! communicator's part goes to one engine: graph capture, the GPU engines (copy engines
//! between GPUs of one host, else staged through pinned host memory), the hierarchy's stages,
//! or the host executor ([`crate::host`]), which plans it per communicator: its collectives in
//! call order, then one plan holding all its sends and receives.
//!
//! On the host backend an operation has completed when the call (or the enclosing group end)
//! returns: user "streams" are host threads, and there is nothing else to synchronise with.

use std::cell::RefCell;
use std::sync::Arc;

use crate::bootstrap::UniqueId;
use crate::core::Comm;
use crate::error::{Error, Result};
use crate::route::{route, Facts, Part, Route, Submit};
use crate::task::Task;

#[derive(Default)]
struct GroupState {
    depth: usize,
    tasks: Vec<(Comm, Task)>,
    inits: Vec<(Comm, UniqueId)>,
    /// Symmetric windows to agree at the group's end: (communicator, base, bytes).
    windows: Vec<(Comm, usize, usize)>,
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

/// `ncclGroupStart`.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Whether the calling thread is inside a group.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// `ncclGroupEnd`: at the outermost level, runs pending inits then every queued operation.
pub fn end() -> Result<()> {
    let outer = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::invalid_usage("ncclGroupEnd without ncclGroupStart"));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok(None);
        }
        Ok(Some((
            std::mem::take(&mut g.tasks),
            std::mem::take(&mut g.inits),
            std::mem::take(&mut g.windows),
            g.error.take(),
        )))
    })?;
    let Some((tasks, inits, windows, error)) = outer else {
        return Ok(());
    };
    let api = crate::profiler::take_api();
    api.ending();
    let ran = (|| {
        if let Some(e) = error {
            return Err(e.context("an earlier call in this group failed; the group was not run"));
        }
        run_inits(inits)?;
        agree_windows(windows)?;
        if tasks.is_empty() {
            return Ok(());
        }
        run(tasks, &api)
    })();
    api.finish();
    ran
}

/// `ncclGroupSimulateEnd`: closes the group without running it and returns an estimate of
/// its time in microseconds (a latency term per operation plus bytes over host memory
/// bandwidth).
pub fn simulate_end() -> Result<f64> {
    let tasks = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::invalid_usage(
                "ncclGroupSimulateEnd without ncclGroupStart",
            ));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok(Vec::new());
        }
        g.error = None;
        g.inits.clear();
        g.windows.clear();
        // The group ends here, unrun: its API events end with it.
        crate::profiler::take_api().finish();
        Ok(std::mem::take(&mut g.tasks))
    })?;
    Ok(tasks
        .iter()
        .map(|(c, t)| {
            let bytes = t.count.saturating_mul(t.dtype.size()) as f64;
            let n = c.nranks().max(1) as f64;
            10.0 + 2.0 * (n - 1.0) / n * bytes / 5.0e3
        })
        .sum())
}

/// Records an error raised by a call inside a group, so `ncclGroupEnd` reports it.
pub fn record_error(e: &Error) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(e.clone());
        }
    });
}

impl Comm {
    /// Validates `task` and hands it to the current group (or runs it now).
    pub fn enqueue(&self, task: Task) -> Result<()> {
        self.check_usable()?;
        crate::task::validate(&task, self.0.rank, self.0.nranks)?;
        // As NCCL: a collective of no elements is dropped once its arguments pass (every rank
        // of a matched call drops it alike), so it costs no launch and no rendezvous.
        if task.count == 0 && matches!(task.kind, crate::task::TaskKind::Coll(_)) {
            return Ok(());
        }
        submit(self, task)
    }
}

/// Queues `task` in the current group, or runs it now outside one.
pub fn submit(comm: &Comm, task: Task) -> Result<()> {
    let depth = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.tasks.push((comm.clone(), task));
        }
        g.depth
    });
    crate::profiler::appended(comm, &task, depth);
    if depth > 0 {
        return Ok(());
    }
    // A call outside a group is a group of one, its API events included.
    let api = crate::profiler::take_api();
    api.ending();
    let ran = run(vec![(comm.clone(), task)], &api);
    api.finish();
    ran
}

/// Defers a communicator's init to the group's end (several ranks initialised by one thread
/// must rendezvous concurrently). Returns false outside a group.
pub fn defer_init(comm: &Comm, id: UniqueId) -> bool {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.inits.push((comm.clone(), id));
            true
        } else {
            false
        }
    })
}

/// Defers agreeing a symmetric window with the communicator's other ranks to the group's end
/// (ranks registered by one thread must meet concurrently). Returns false outside a group.
pub fn defer_window(comm: &Comm, ptr: usize, size: usize) -> bool {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.windows.push((comm.clone(), ptr, size));
            true
        } else {
            false
        }
    })
}

/// Agrees deferred windows: each communicator's in call order, the communicators at once
/// ([`on_own_threads`]).
fn agree_windows(windows: Vec<(Comm, usize, usize)>) -> Result<()> {
    let mut per_comm: Vec<(Comm, Vec<(usize, usize)>)> = Vec::new();
    for (c, ptr, size) in windows {
        match per_comm.iter_mut().find(|(d, _)| Arc::ptr_eq(&c.0, &d.0)) {
            Some((_, v)) => v.push((ptr, size)),
            None => per_comm.push((c, vec![(ptr, size)])),
        }
    }
    on_own_threads(per_comm, "window", |c, list| {
        list.into_iter()
            .try_for_each(|(ptr, size)| c.agree_window(ptr, size))
    })
}

/// Runs `f` on each communicator's part, the communicators at once on threads of their own,
/// each with its GPU current (its exports and captures ask the driver about that device): each
/// part meets the communicator's other ranks, so one thread driving several GPUs (nccl-tests'
/// `-g`) doing them one after the other would wait in the first for ranks it reaches later. A
/// single part runs on this thread. The first error, in part order, is returned.
fn on_own_threads<T: Send>(
    parts: Vec<(Comm, T)>,
    what: &str,
    f: impl Fn(&Comm, T) -> Result<()> + Sync,
) -> Result<()> {
    if parts.len() <= 1 {
        return parts.into_iter().try_for_each(|(c, t)| f(&c, t));
    }
    let f = &f;
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|(c, t)| {
                s.spawn(move || {
                    let ctx = match c.0.cuda_dev {
                        d if d >= 0 => Some(crate::gpu::device_context(d)?),
                        _ => None,
                    };
                    let _current = match &ctx {
                        Some(ctx) => Some(ctx.scope().map_err(crate::gpu::cuda_err)?),
                        None => None,
                    };
                    f(&c, t)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal(format!("a {what} thread panicked"))))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Runs inits concurrently, one thread each, and waits for all of them.
pub fn run_inits(inits: Vec<(Comm, UniqueId)>) -> Result<()> {
    if inits.is_empty() {
        return Ok(());
    }
    let handles: Vec<_> = inits
        .into_iter()
        .map(|(c, id)| std::thread::spawn(move || c.run_init(id)))
        .collect();
    let mut first = None;
    for h in handles {
        let r = h
            .join()
            .unwrap_or_else(|_| Err(Error::internal("init thread panicked")));
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Runs a group's operations: on the GPU path they are handed to each communicator's proxy
/// and ordered on the caller's streams; otherwise they run here to completion.
pub(crate) fn run(tasks: Vec<(Comm, Task)>, api: &crate::profiler::ApiGroup) -> Result<()> {
    // Profiler plugins see the group as the caller made it (before hierarchical operations
    // become stages on sub-communicators).
    let watch = crate::profiler::Watch::start(&tasks, api);
    let ran = (|| {
        let (tasks, forks) = fork_hierarchical(tasks)?;
        let ran = run_forked(tasks);
        // Whatever was queued on the forks, the caller's streams wait for it.
        ran.and(forks.join())
    })();
    if let Some(w) = watch {
        w.finish(ran.is_ok());
    }
    ran
}

/// A group with hierarchical operations over several communicators that share a caller's
/// stream: each communicator's operations move onto a stream of its own for the whole group
/// ([`crate::gpu::fork_shared_streams`]), so its stages follow each other there while another
/// communicator's go on theirs, as NCCL runs a group's communicators side by side. (Forked
/// stage by stage instead, each stage would wait for the other communicators' previous stage,
/// which a peer calling them one by one queues later.) Other groups are left as they are
/// (`run_flat` forks a flat group's communicators itself).
fn fork_hierarchical(tasks: Vec<(Comm, Task)>) -> Result<(Vec<(Comm, Task)>, crate::gpu::Forks)> {
    // Most groups hold one communicator: nothing to split, and no memory queries here on
    // top of the ones each stage makes.
    let one_comm = match tasks.first() {
        Some((first, _)) => tasks
            .iter()
            .all(|(c, _)| std::sync::Arc::ptr_eq(&c.0, &first.0)),
        None => true,
    };
    if one_comm || !tasks.iter().any(|(c, _)| c.0.hier.is_some()) {
        return Ok((tasks, crate::gpu::Forks::default()));
    }
    let (mut parts, went) = by_communicator(tasks);
    let mut on_gpu = Vec::new();
    let mut from = Vec::new();
    for (i, (c, ts)) in parts.iter_mut().enumerate() {
        if Facts::gather(c, ts)?.on_gpu() {
            on_gpu.push((c.clone(), std::mem::take(ts)));
            from.push(i);
        }
    }
    let forks = crate::gpu::fork_shared_streams(&mut on_gpu)?;
    for ((_, ts), i) in on_gpu.into_iter().zip(from) {
        parts[i].1 = ts;
    }
    let mut each: Vec<(Comm, std::vec::IntoIter<Task>)> = parts
        .into_iter()
        .map(|(c, ts)| (c, ts.into_iter()))
        .collect();
    let mut tasks = Vec::with_capacity(went.len());
    for p in went {
        let (c, ts) = &mut each[p];
        if let Some(t) = ts.next() {
            tasks.push((c.clone(), t));
        }
    }
    Ok((tasks, forks))
}

/// A group's operations by communicator (in order of first appearance), each communicator's in
/// call order, and for each call in turn the index of its communicator.
fn by_communicator(tasks: Vec<(Comm, Task)>) -> (Vec<(Comm, Vec<Task>)>, Vec<usize>) {
    let mut parts: Vec<(Comm, Vec<Task>)> = Vec::new();
    let mut went = Vec::with_capacity(tasks.len());
    for (c, t) in tasks {
        let p = match parts
            .iter()
            .position(|(x, _)| std::sync::Arc::ptr_eq(&x.0, &c.0))
        {
            Some(p) => p,
            None => {
                parts.push((c, Vec::new()));
                parts.len() - 1
            }
        };
        parts[p].1.push(t);
        went.push(p);
    }
    (parts, went)
}

/// [`run`] once the group's communicators have their streams.
fn run_forked(tasks: Vec<(Comm, Task)>) -> Result<()> {
    // Hierarchical operations go stage by stage, each stage a group on the sub-communicators
    // (which have no hierarchy of their own), after what stays flat before them (`hier::take`
    // keeps each communicator's call order).
    // A stage's failure is its sub-communicator's async error, which the communicator's own
    // reports (`Comm::async_error`).
    let crate::hier::Taken {
        rest: tasks,
        stages,
        held,
        hierarchies,
    } = crate::hier::take(tasks)?;
    let ran = (|| {
        if !tasks.is_empty() {
            run_flat(tasks)?;
        }
        for stage in stages {
            // The stage's communicators, for its failure only (nothing more on the way).
            let mut comms: Vec<Comm> = Vec::new();
            for (c, _) in &stage {
                if !comms.iter().any(|x| std::sync::Arc::ptr_eq(&x.0, &c.0)) {
                    comms.push(c.clone());
                }
            }
            run_flat(stage).map_err(|e| crate::hier::stage_failed(e, &comms, &hierarchies))?;
        }
        Ok(())
    })();
    let released = held.release();
    ran.and(released)
}

/// [`run`] of a group with nothing hierarchical in it.
fn run_flat(tasks: Vec<(Comm, Task)>) -> Result<()> {
    // Group by communicator, keeping call order, then order the communicators by what every
    // rank of each agrees on (its nonce, then the rank): the GPU paths queue one
    // communicator's part of the group after the other's on a shared stream, so two ranks
    // taking them in different orders (heap addresses differ between processes) would each
    // wait behind the part its peer queues last. The same total order is the lock order, so
    // two threads running groups over the same communicators cannot deadlock.
    let (mut comms, _) = by_communicator(tasks);
    comms.sort_by_key(|(c, _)| (c.nonce(), c.rank(), std::sync::Arc::as_ptr(&c.0) as usize));
    // Per engine, in the order the engines go (captures, the GPU, the host), its parts in
    // the communicators' order.
    let mut by_engine: [Vec<(Part, Route)>; 3] = Default::default();
    for (comm, tasks) in comms {
        let r = route(&Facts::gather(&comm, &tasks)?);
        by_engine[engine_of(r)].push(((comm, tasks), r));
    }
    for (i, parts) in by_engine.into_iter().enumerate() {
        if !parts.is_empty() {
            ENGINES[i].submit(parts)?;
        }
    }
    Ok(())
}

/// The engines a group's parts go to, in the order they go.
static ENGINES: [&dyn Submit; 3] = [&Capturing, &OnGpu, &OnHost];

/// Which engine runs a route's parts: its index in [`ENGINES`].
pub(crate) fn engine_of(r: Route) -> usize {
    match r {
        Route::Capture => 0,
        Route::CopyEngines | Route::Staged => 1,
        Route::Host => 2,
    }
}

/// Graph capture: each part into the graphs its streams capture.
struct Capturing;

impl Submit for Capturing {
    fn submit(&self, parts: Vec<(Part, Route)>) -> Result<()> {
        capture_all(parts.into_iter().map(|(p, _)| p).collect())
    }
}

/// The GPU engines: the copy-engine engine where the route says so and the communicator has
/// it, the staged engine otherwise, every part on streams of its own where parts share a
/// caller's stream.
struct OnGpu;

impl Submit for OnGpu {
    fn submit(&self, parts: Vec<(Part, Route)>) -> Result<()> {
        let (mut on_gpu, routes): (Vec<Part>, Vec<Route>) = parts.into_iter().unzip();
        let forks = crate::gpu::fork_shared_streams(&mut on_gpu)?;
        let queued = (|| {
            let mut direct = Vec::new();
            for ((comm, tasks), r) in on_gpu.into_iter().zip(routes) {
                let engine = (r == Route::CopyEngines)
                    .then(|| crate::ipc::engine_for(&comm, &tasks))
                    .flatten();
                match engine {
                    Some((ctx, eng)) => direct.push((ctx, eng, tasks)),
                    None => crate::gpu::submit(&comm, tasks)?,
                }
            }
            if !direct.is_empty() {
                crate::ipc::submit(direct)?;
            }
            Ok(())
        })();
        // Whatever was queued on the forks, the caller's streams wait for it.
        queued.and(forks.join())
    }
}

/// The host executor, once each communicator's GPU work has run.
struct OnHost;

impl Submit for OnHost {
    fn submit(&self, parts: Vec<(Part, Route)>) -> Result<()> {
        for ((comm, _), _) in &parts {
            crate::gpu::wait_idle(comm)?;
        }
        crate::host::run(parts.into_iter().map(|(p, _)| p).collect())
    }
}

/// Captures each communicator's part of a group into the graphs its streams capture. Capturing
/// on the direct paths meets the communicator's other ranks, so the communicators capture at
/// once ([`on_own_threads`]).
fn capture_all(captured: Vec<(Comm, Vec<Task>)>) -> Result<()> {
    on_own_threads(captured, "capture", |comm, tasks| {
        crate::graph::capture(comm, tasks)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tests::task;
    use ccl_collectives::Collective as C;

    #[test]
    fn a_group_splits_by_communicator_in_call_order() {
        let (a, b, c) = (
            Comm::unconnected(0, 2),
            Comm::unconnected(0, 2),
            Comm::unconnected(1, 4),
        );
        let calls = [(&b, 1), (&a, 2), (&b, 3), (&c, 4), (&a, 5)];
        let tasks = calls
            .iter()
            .map(|&(comm, n)| (comm.clone(), task(C::AllReduce, n)))
            .collect();
        let (parts, went) = by_communicator(tasks);
        let counts: Vec<Vec<usize>> = parts
            .iter()
            .map(|(_, ts)| ts.iter().map(|t| t.count).collect())
            .collect();
        assert_eq!(counts, vec![vec![1, 3], vec![2, 5], vec![4]]);
        assert!(std::sync::Arc::ptr_eq(&parts[0].0 .0, &b.0));
        assert!(std::sync::Arc::ptr_eq(&parts[2].0 .0, &c.0));
        assert_eq!(went, vec![0, 1, 0, 2, 1]);
    }

    /// Every route has its engine, captures go first and the host last (a host part waits for
    /// its communicator's GPU work, queued by then), and both GPU routes share one engine (their
    /// parts fork shared streams together).
    #[test]
    fn every_route_goes_to_one_engine_in_a_fixed_order() {
        assert_eq!(engine_of(Route::Capture), 0);
        assert_eq!(engine_of(Route::CopyEngines), 1);
        assert_eq!(engine_of(Route::Staged), 1);
        assert_eq!(engine_of(Route::Host), 2);
        assert_eq!(ENGINES.len(), 3);
    }
}
