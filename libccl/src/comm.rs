//! Communicators: init (blocking and not), split, finalize, destroy, abort, async errors.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bootstrap::{self, RankInfo, UniqueId};
use crate::connect::{build_state, linger, my_info};
use crate::core::{Comm, CommConfig, Life};
use crate::error::{Error, ErrorKind, Result};
use crate::params;

/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: i32 = -1;

impl Comm {
    /// Checks the arguments of `ncclCommInitRank*` and makes the handle; [`Comm::run_init`]
    /// then does the work (now, in a group's end, or on a thread for non-blocking configs).
    pub fn prepare(
        nranks: i32,
        id: &UniqueId,
        rank: i32,
        config: CommConfig,
    ) -> Result<(Comm, UniqueId)> {
        Self::prepare_on(nranks, id, rank, config, None)
    }

    /// [`Comm::prepare`] on a given CUDA device (`ncclCommInitAll`'s device list); `None`
    /// means the calling thread's current device, as NCCL does.
    pub fn prepare_on(
        nranks: i32,
        id: &UniqueId,
        rank: i32,
        config: CommConfig,
        device: Option<i32>,
    ) -> Result<(Comm, UniqueId)> {
        crate::log::init();
        crate::env_notes::tell_once();
        if nranks < 1 {
            return Err(Error::invalid_argument(format!(
                "nranks {nranks} must be at least 1"
            )));
        }
        if rank < 0 || rank >= nranks {
            return Err(Error::invalid_argument(format!(
                "rank {rank} out of range for {nranks} ranks"
            )));
        }
        id.decode()?;
        let dev = match device {
            Some(d) if crate::gpu::available() => d,
            _ => crate::gpu::current_device(),
        };
        Ok((
            Comm::new_inner(rank as usize, nranks as usize, config, dev),
            *id,
        ))
    }

    /// Runs init to the end and records the outcome as the async error.
    pub fn run_init(&self, id: UniqueId) -> Result<()> {
        let r = self.init_body(id);
        self.finish_init(r.clone());
        r
    }

    fn finish_init(&self, r: Result<()>) {
        match r {
            Ok(()) => *self.0.life.lock() = Life::Ready,
            Err(e) => {
                tracing::warn!("rank {}: init failed: {e}", self.0.rank);
                *self.0.async_error.lock() = Some(e);
                *self.0.life.lock() = Life::Ready;
            }
        }
    }

    fn init_body(&self, id: UniqueId) -> Result<()> {
        let (root, nonce) = id.decode()?;
        self.0.nonce.store(nonce, Ordering::Relaxed);
        if self.0.rank == 0 {
            if let Some(spec) = params::NCCL_COMM_ID.raw() {
                if bootstrap::resolve(&spec)? == root {
                    let l = TcpListener::bind(root).map_err(|e| {
                        Error::system(format!("NCCL_COMM_ID={spec}: cannot listen there: {e}"))
                    })?;
                    bootstrap::spawn_root(l, nonce)?;
                }
            }
        }
        let listener = bootstrap::listen()?;
        let info = my_info(self.0.rank, &listener, self.0.cuda_dev)?;
        let table = bootstrap::rendezvous(root, nonce, self.0.nranks, &info, &self.0.abort)?;
        let (state, issue) = build_state(self.0.rank, table, &listener, nonce, &self.0.abort)?;
        *self.0.issue.lock() = issue;
        *self.0.state.lock() = Some(state);
        self.attach_monitor()?;
        crate::ipc::attach(self)?;
        self.attach_hierarchy()?;
        crate::profiler::attach(self);
        let (ring, links) = self.describe();
        tracing::info!(
            "rank {} of {} ready: ring {ring}, links {links}",
            self.0.rank,
            self.0.nranks
        );
        Ok(())
    }

    /// Has the links report to the process's throughput monitor when `CCL_MONITOR` is on.
    fn attach_monitor(&self) -> Result<()> {
        let Some(monitor) = crate::monitor::acquire()? else {
            return Ok(());
        };
        if let Some(st) = self.0.state.lock().as_mut() {
            let comm = self.0.nonce.load(Ordering::Relaxed);
            crate::monitor::attach(&monitor, &mut st.links, comm);
        }
        *self.0.monitor.lock() = Some(monitor);
        Ok(())
    }

    /// Makes the communicator's hierarchy (a sub-communicator of this host's ranks and one
    /// across the hosts) where [`crate::hier::wanted`] finds it gains. Collective.
    fn attach_hierarchy(&self) -> Result<()> {
        let Some(at) = crate::hier::wanted(self, |want| self.agree_all(want))? else {
            return Ok(());
        };
        let config = CommConfig::blocking();
        let rank = self.rank() as i32;
        let local = self
            .split_unchecked(at.host as i32, rank, config.clone())?
            .ok_or_else(|| Error::internal("no communicator of this host's ranks"))?;
        let cross = self
            .split_unchecked(at.local as i32, rank, config)?
            .ok_or_else(|| Error::internal("no communicator across the hosts"))?;
        let h = crate::hier::Hierarchy::new(self, at, local, cross);
        self.0.hier.set(Arc::new(h));
        Ok(())
    }

    /// The hierarchy, taken out of its slot (destroy, abort).
    fn hierarchy_taken(&self) -> Option<Arc<crate::hier::Hierarchy>> {
        self.0.hier.take()?.into_any().downcast().ok()
    }

    /// `ncclCommRegister`: a buffer the caller will pass to operations again. A communicator
    /// that cannot take operations refuses it, as NCCL does.
    pub fn register(&self, ptr: usize, size: usize) -> Result<()> {
        self.check_usable()?;
        let taken = crate::ipc::register(self, ptr, size)?;
        tracing::debug!(
            "rank {}: registered {size} bytes at {ptr:#x}{}",
            self.0.rank,
            if taken { " with the copy engines" } else { "" }
        );
        Ok(())
    }

    /// `ncclCommWindowRegister`: a registration that, with `symmetric`
    /// (`NCCL_WIN_COLL_SYMMETRIC`: every rank registers a window of this size in the same
    /// order, and calls collectives with buffers at one offset of it), is also agreed with
    /// every rank, so collectives on the window push without waiting for their receivers.
    pub fn register_window(&self, ptr: usize, size: usize, symmetric: bool) -> Result<()> {
        self.check_usable()?;
        if !symmetric {
            return self.register(ptr, size);
        }
        crate::ipc::register(self, ptr, size)?;
        if crate::group::defer_window(self, ptr, size) {
            return Ok(());
        }
        self.agree_window(ptr, size)
    }

    /// Agrees the symmetric window at `ptr` with every rank (all of them call it in order).
    pub(crate) fn agree_window(&self, ptr: usize, size: usize) -> Result<()> {
        let agreed = crate::ipc::register_window(self, ptr, size)?;
        tracing::debug!(
            "rank {}: window of {size} bytes at {ptr:#x}{}",
            self.0.rank,
            if agreed { ", symmetric" } else { "" }
        );
        Ok(())
    }

    /// `ncclCommWindowDeregister` of the window at `ptr`.
    pub fn deregister_window(&self, ptr: usize) {
        crate::ipc::deregister_window(self, ptr);
    }

    /// `ncclCommInitRank` in one call (blocking).
    pub fn init_rank(nranks: i32, id: &UniqueId, rank: i32, config: CommConfig) -> Result<Comm> {
        let (c, id) = Comm::prepare(nranks, id, rank, config)?;
        c.run_init(id)?;
        Ok(c)
    }

    /// Starts init on a thread (non-blocking configs): the handle answers `InProgress` until
    /// it is done.
    pub fn spawn_init(&self, id: UniqueId) -> Result<()> {
        let c = self.clone();
        std::thread::Builder::new()
            .name("ccl-init".into())
            .spawn(move || {
                let _ = c.run_init(id);
            })
            .map(|_| ())
            .map_err(|e| Error::system(format!("spawn init thread: {e}")))
    }

    /// `ncclCommGetAsyncError`: `InProgress` while initializing, the first error otherwise.
    /// A revoked communicator reports the revoke's own result (done, as NCCL does), whatever
    /// failed before.
    pub fn async_error(&self) -> Result<()> {
        match *self.0.life.lock() {
            Life::Initializing => {
                return Err(Error::new(
                    ErrorKind::InProgress,
                    "communicator is still initializing",
                ))
            }
            Life::Revoked => return Ok(()),
            _ => {}
        }
        self.0.ipc.check_health();
        // A hierarchical all-reduce's failure (a dead peer seen on a sub-communicator) is this
        // communicator's.
        if let Some(h) = self.0.hier.get::<crate::hier::Hierarchy>() {
            for sub in [&h.local, &h.cross] {
                if let Err(e) = sub.async_error() {
                    self.set_async_error(&h.explain(e, sub));
                }
            }
        }
        match &*self.0.async_error.lock() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// `ncclCommSplit`: ranks with the same color form a communicator, ordered by key then
    /// parent rank; `SPLIT_NOCOLOR` ranks get `None`.
    /// A revoked communicator splits too (its ranks are all there to agree).
    pub fn split(&self, color: i32, key: i32, config: CommConfig) -> Result<Option<Comm>> {
        if *self.0.life.lock() != Life::Revoked {
            self.check_usable()?;
        }
        let child = self.split_unchecked(color, key, config)?;
        if let Some(c) = child.as_ref().filter(|c| c.check_usable().is_ok()) {
            crate::profiler::attach(c);
        }
        Ok(child)
    }

    /// [`Comm::split`] without the check that the communicator is ready: for the
    /// sub-communicators init itself makes ([`crate::hier`]).
    pub(crate) fn split_unchecked(
        &self,
        color: i32,
        key: i32,
        config: CommConfig,
    ) -> Result<Option<Comm>> {
        if color < 0 && color != SPLIT_NOCOLOR {
            return Err(Error::invalid_argument(format!(
                "split color {color} must be >= 0 or NCCL_SPLIT_NOCOLOR"
            )));
        }
        // Queued GPU operations first: their proxy needs the state lock this allgather holds,
        // and a peer's proxy may be waiting for ours.
        crate::gpu::wait_idle(self)?;
        let n = self.0.splits.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.0.state.lock();
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator has no state"))?;
        let listener = if color == SPLIT_NOCOLOR {
            None
        } else {
            Some(bootstrap::listen()?)
        };
        let info = match &listener {
            Some(l) => Some(my_info(0, l, self.0.cuda_dev)?),
            None => None,
        };
        #[derive(Serialize, Deserialize)]
        struct SplitInfo {
            color: i32,
            key: i32,
            info: Option<RankInfo>,
        }
        let mine = serde_json::to_vec(&SplitInfo { color, key, info })
            .map_err(|e| Error::internal(format!("encode split info: {e}")))?;
        let all = state
            .ctrl
            .allgather(&mine, &self.0.abort)
            .inspect_err(|e| self.set_async_error(e))?;
        drop(guard);
        let Some(listener) = listener else {
            return Ok(None);
        };
        let mut members: Vec<(i32, usize, RankInfo)> = Vec::new();
        for (r, b) in all.iter().enumerate() {
            let s: SplitInfo = serde_json::from_slice(b).map_err(|e| {
                Error::remote(format!("rank {r} sent a malformed split request: {e}"))
            })?;
            if s.color == color {
                let info = s
                    .info
                    .ok_or_else(|| Error::remote(format!("rank {r} has no address")))?;
                members.push((s.key, r, info));
            }
        }
        members.sort_by_key(|(k, r, _)| (*k, *r));
        let new_rank = members
            .iter()
            .position(|(_, r, _)| *r == self.0.rank)
            .ok_or_else(|| Error::internal("this rank is missing from its own split"))?;
        let table: Vec<RankInfo> = members
            .into_iter()
            .enumerate()
            .map(|(i, (_, _, mut info))| {
                info.rank = i;
                info
            })
            .collect();
        let tag = format!("split{n}|{color}");
        self.child(new_rank, table, &listener, &tag, config)
            .map(Some)
    }

    /// `ncclCommMemStats`' total: the GPU memory its engines (and its hierarchy's
    /// sub-communicators) hold; none of it can be suspended.
    pub fn gpu_bytes(&self) -> u64 {
        let subs = self
            .0
            .hier
            .get::<crate::hier::Hierarchy>()
            .map_or(0, |h| h.local.gpu_bytes() + h.cross.gpu_bytes());
        self.0.ipc.gpu_bytes() + self.0.gpu.gpu_bytes() + self.0.graph.gpu_bytes() + subs
    }

    /// `ncclCommGetUniqueId`: the id a grow of this communicator meets at; its caller (the
    /// coordinator) hands it to the joining ranks and passes it to its own `ncclCommGrow`.
    pub fn grow_id(&self) -> Result<UniqueId> {
        self.check_usable()?;
        crate::fresh_unique_id()
    }

    /// `ncclCommGrow` on a rank of this communicator: the coordinator's id (exactly one rank
    /// passes one) goes to every rank over the control connections, and each joins a
    /// communicator of `nranks` (more than this one's) under its own rank, where the new ranks
    /// join with that id. Returns the joined, not yet initialised, communicator and its id.
    pub fn grow(
        &self,
        nranks: i32,
        id: Option<UniqueId>,
        config: CommConfig,
    ) -> Result<(Comm, UniqueId)> {
        self.check_usable()?;
        if usize::try_from(nranks).map_or(true, |n| n <= self.0.nranks) {
            return Err(Error::invalid_argument(format!(
                "grow to {nranks} ranks: more than this communicator's {} are needed",
                self.0.nranks
            )));
        }
        crate::gpu::wait_idle(self)?;
        let all = {
            let mut guard = self.0.state.lock();
            let state = guard
                .as_mut()
                .ok_or_else(|| Error::invalid_usage("communicator has no state"))?;
            let mine = id.map_or(Vec::new(), |i| i.0.to_vec());
            state.ctrl.allgather(&mine, &self.0.abort)?
        };
        let ids: Vec<&Vec<u8>> = all.iter().filter(|b| !b.is_empty()).collect();
        let [one] = ids[..] else {
            return Err(Error::invalid_usage(format!(
                "ncclCommGrow: {} ranks passed an id; exactly one (the coordinator, from \
                 ncclCommGetUniqueId) must",
                ids.len()
            )));
        };
        let bytes: [u8; 128] = one[..]
            .try_into()
            .map_err(|_| Error::remote("the coordinator's grow id is not 128 bytes"))?;
        let rank = self.0.rank as i32;
        Comm::prepare_on(
            nranks,
            &UniqueId(bytes),
            rank,
            config,
            Some(self.0.cuda_dev),
        )
    }

    /// Whether every rank says `mine` (an allgather over the control connections): for
    /// decisions that must be the same on all ranks.
    pub(crate) fn agree_all(&self, mine: bool) -> Result<bool> {
        let mut guard = self.0.state.lock();
        let state = guard
            .as_mut()
            .ok_or_else(|| Error::invalid_usage("communicator has no state"))?;
        let all = state.ctrl.allgather(&[u8::from(mine)], &self.0.abort)?;
        Ok(all.iter().all(|b| b.first() == Some(&1)))
    }

    /// A new communicator over `table` (this rank is `new_rank`) derived from this one; `tag`
    /// makes its nonce unique among the parent's children and equal on all its members.
    fn child(
        &self,
        new_rank: usize,
        table: Vec<RankInfo>,
        listener: &TcpListener,
        tag: &str,
        config: CommConfig,
    ) -> Result<Comm> {
        let nonce =
            bootstrap::fnv1a(format!("{}|{tag}", self.0.nonce.load(Ordering::Relaxed)).as_bytes());
        let child = Comm::new_inner(new_rank, table.len(), config, self.0.cuda_dev);
        child.0.nonce.store(nonce, Ordering::Relaxed);
        let r = build_state(new_rank, table, listener, nonce, &child.0.abort).map(|(st, issue)| {
            *child.0.issue.lock() = issue;
            *child.0.state.lock() = Some(st);
        });
        let r = r
            .and_then(|()| child.attach_monitor())
            .and_then(|()| crate::ipc::attach(&child))
            .and_then(|()| child.attach_hierarchy());
        child.finish_init(r.clone());
        r.map(|()| child)
    }

    /// `ncclCommShrink`: a communicator of every rank but `exclude`, ranks renumbered in their
    /// old order. Only the survivors call it, so it works on a communicator that has failed (a
    /// dead peer); with `abort_first` the parent's outstanding work is abandoned first
    /// (`NCCL_SHRINK_ABORT`) and the parent is left aborted.
    pub fn shrink(&self, exclude: &[i32], abort_first: bool, config: CommConfig) -> Result<Comm> {
        let n = self.0.nranks;
        let mut excluded = vec![false; n];
        for &e in exclude {
            let r = usize::try_from(e).ok().filter(|&r| r < n).ok_or_else(|| {
                Error::invalid_argument(format!("exclude rank {e} is not a rank of {n}"))
            })?;
            if std::mem::replace(&mut excluded[r], true) {
                return Err(Error::invalid_argument(format!("rank {r} excluded twice")));
            }
        }
        if excluded[self.0.rank] {
            return Err(Error::invalid_argument(
                "this rank is in the exclude list: excluded ranks must not call ncclCommShrink",
            ));
        }
        // The exchange below must not be stopped by the parent's own abort flag.
        let go_on = AtomicBool::new(false);
        let abort = if abort_first {
            self.end_work();
            &go_on
        } else {
            crate::gpu::wait_idle(self)?;
            &*self.0.abort
        };
        let survivors: Vec<usize> = (0..n).filter(|&r| !excluded[r]).collect();
        let k = self.0.splits.fetch_add(1, Ordering::Relaxed);
        let listener = bootstrap::listen()?;
        let mine = serde_json::to_vec(&my_info(0, &listener, self.0.cuda_dev)?)
            .map_err(|e| Error::internal(format!("encode shrink info: {e}")))?;
        let all = {
            let mut guard = self.0.state.lock();
            let state = guard
                .as_mut()
                .ok_or_else(|| Error::invalid_usage("communicator was destroyed"))?;
            state.ctrl.allgather_among(&survivors, &mine, abort)?
        };
        let mut table = Vec::with_capacity(survivors.len());
        for (i, (b, &old)) in all.iter().zip(&survivors).enumerate() {
            let mut info: RankInfo = serde_json::from_slice(b).map_err(|e| {
                Error::remote(format!("rank {old} sent a malformed shrink request: {e}"))
            })?;
            info.rank = i;
            table.push(info);
        }
        let new_rank = survivors
            .iter()
            .position(|&r| r == self.0.rank)
            .ok_or_else(|| Error::internal("this rank is missing from its own shrink"))?;
        let tag = format!("shrink{k}|{survivors:?}");
        let child = self.child(new_rank, table, &listener, &tag, config)?;
        crate::profiler::attach(&child);
        Ok(child)
    }

    /// `ncclCommFinalize`: operations complete before calls return on this backend, so there
    /// is nothing left to flush; later operations are refused.
    pub fn finalize(&self) -> Result<()> {
        if let Some(h) = self.0.hier.get::<crate::hier::Hierarchy>() {
            h.local.finalize()?;
            h.cross.finalize()?;
        }
        crate::gpu::wait_idle(self)?;
        self.0.ipc.wait_idle(&self.0.abort)?;
        let mut life = self.0.life.lock();
        match *life {
            Life::Ready => {
                *life = Life::Finalized;
                Ok(())
            }
            Life::Initializing => Err(Error::invalid_usage(
                "finalize while the communicator is initializing",
            )),
            Life::Finalized => Err(Error::invalid_usage("communicator already finalized")),
            Life::Revoked => Err(Error::invalid_usage(
                "finalize after ncclCommRevoke is not supported: destroy, split or shrink it",
            )),
            Life::Gone => Err(Error::invalid_usage("communicator was destroyed")),
        }
    }

    /// Raises the abort flag and stops every engine as after an abort (what peers could
    /// still write into is leaked): the work in flight ends, from any thread.
    fn end_work(&self) {
        self.0.abort.store(true, Ordering::SeqCst);
        self.0.graph.shutdown(true);
        self.0.gpu.shutdown(true);
        self.0.ipc.shutdown(true);
    }

    /// `ncclCommRevoke`: ends every operation in flight, from any thread (what they were
    /// writing is garbage, as after an abort), and keeps the control connections, so the
    /// communicator can still be shrunk (the usual next step: survivors drop a failed rank),
    /// split or destroyed; later operations and finalize are refused. Done when it returns.
    pub fn revoke(&self) -> Result<()> {
        {
            let mut life = self.0.life.lock();
            match *life {
                Life::Ready => *life = Life::Revoked,
                Life::Initializing => {
                    return Err(Error::invalid_argument(
                        "revoke while the communicator is initializing",
                    ))
                }
                Life::Revoked => {
                    return Err(Error::invalid_argument("communicator already revoked"))
                }
                Life::Finalized => return Err(Error::invalid_argument("revoke after finalize")),
                Life::Gone => return Err(Error::invalid_argument("communicator was destroyed")),
            }
        }
        self.0.abort.store(true, Ordering::SeqCst);
        if let Some(h) = self.0.hier.get::<crate::hier::Hierarchy>() {
            // Their operations are this one's parts: ended the same way.
            for sub in [&h.local, &h.cross] {
                let _ = sub.revoke();
            }
        }
        self.end_work();
        // A host operation holds the state until it has seen the flag and given up; once it
        // has, the flag comes down so that a shrink's or split's exchange can run.
        drop(self.0.state.lock());
        self.0.abort.store(false, Ordering::SeqCst);
        tracing::info!("rank {}: communicator revoked", self.0.rank);
        Ok(())
    }

    /// `ncclCommDestroy`: says goodbye to peers (so they do not mistake our exit for a crash)
    /// and frees everything.
    pub fn destroy(&self) {
        if let Some(h) = self.hierarchy_taken() {
            h.local.destroy();
            h.cross.destroy();
        }
        let idle =
            crate::gpu::wait_idle(self).is_ok() && self.0.ipc.wait_idle(&self.0.abort).is_ok();
        if !idle {
            self.0.abort.store(true, Ordering::SeqCst);
        }
        crate::profiler::detach(self, !idle);
        self.0.graph.shutdown(true);
        self.0.gpu.shutdown(true);
        self.0.ipc.shutdown(!idle);
        let mut guard = self.0.state.lock();
        if let Some(mut st) = guard.take() {
            if st.exec_stats.recv_bytes + st.exec_stats.send_bytes > 0 {
                tracing::info!(
                    "rank {}: executor {}",
                    self.0.rank,
                    st.exec_stats.describe()
                );
            }
            // A failed communicator's peers may be gone, a revoked one's last sends were cut:
            // nothing to wait for.
            let revoked = *self.0.life.lock() == Life::Revoked;
            if idle && !revoked && self.0.async_error.lock().is_none() {
                linger(&mut st.links, &mut st.ctrl);
            }
            st.ctrl.say_bye();
        }
        drop(guard);
        self.release_monitor();
        *self.0.life.lock() = Life::Gone;
    }

    /// Lets go of the monitor (after the links, which report to it, are gone); the last
    /// communicator's release stops it and completes its file.
    fn release_monitor(&self) {
        let m = self.0.monitor.lock().take();
        if let Some(m) = m {
            if let Err(e) = m.flush() {
                tracing::warn!("rank {}: monitor flush: {e}", self.0.rank);
            }
        }
    }

    /// `ncclCommAbort`: stops any operation in flight (from any thread) and drops every
    /// connection without goodbye, so peers blocked on us fail at once.
    pub fn abort(&self) {
        self.0.abort.store(true, Ordering::SeqCst);
        if let Some(h) = self.hierarchy_taken() {
            h.local.abort();
            h.cross.abort();
        }
        self.end_work();
        crate::profiler::detach(self, true);
        let mut guard = self.0.state.lock();
        guard.take();
        drop(guard);
        self.release_monitor();
        *self.0.life.lock() = Life::Gone;
    }

    /// The ring order and link kinds, for tests and logs: ("0,2,1,3", "1shm,2socket").
    pub fn describe(&self) -> (String, String) {
        let ring = self.0.issue.lock().ring.clone();
        let g = self.0.state.lock();
        match g.as_ref() {
            Some(st) => {
                let ring = ring
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let count = |kind: &str| {
                    st.links
                        .iter()
                        .flatten()
                        .filter(|l| l.kind() == kind)
                        .count()
                };
                let mut links = format!("{}shm,{}socket", count("shm"), count("socket"));
                let mpt = count("mpt");
                if mpt > 0 {
                    links.push_str(&format!(",{mpt}mpt"));
                }
                (ring, links)
            }
            None => (String::new(), String::new()),
        }
    }
}
