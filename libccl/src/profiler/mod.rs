//! NCCL profiler plugins (`NCCL_PROFILER_PLUGIN`): the plugin is loaded once per process,
//! initialised per communicator, and told of each group, collective and point-to-point
//! operation, with one kernel-channel event per operation that carries its execution time.
//! `docs/PROFILER.md` says what a plugin receives and why the timestamps are what they are.
//!
//! The C ABI lives in [`ffi`]; this module decides what to report and when. With no plugin
//! loaded the cost on the data path is one atomic load per group.

pub mod ffi;
mod timing;

use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ccl_collectives::Collective;
use ccl_cuda::DataType;
use parking_lot::{Condvar, Mutex};

use crate::core::Comm;
use crate::params;
use crate::route::{route, Facts, Route};
use crate::task::{Task, TaskKind};
use ffi::{kind, EventDescr, Plugin};

/// The process's plugin: loaded at the first communicator's init, `None` when there is none
/// (or it failed to load: NCCL then runs on without one).
static PLUGIN: OnceLock<Option<Plugin>> = OnceLock::new();

/// Communicators with a plugin context: while 0, groups skip the profiler at once.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

fn plugin() -> Option<&'static Plugin> {
    PLUGIN
        .get_or_init(|| {
            let setting = params::NCCL_PROFILER_PLUGIN.raw();
            if setting
                .as_deref()
                .is_some_and(|s| s.trim().eq_ignore_ascii_case("none"))
            {
                return None;
            }
            let explicit = setting.is_some();
            match Plugin::load(setting.as_deref()) {
                Ok(p) => {
                    tracing::info!(
                        "PROFILER/Plugin: loaded {} (interface v{}) from {}",
                        p.name,
                        p.version,
                        p.path
                    );
                    Some(p)
                }
                Err(e) if explicit => {
                    tracing::warn!("PROFILER/Plugin: {e}; continuing without a profiler");
                    None
                }
                Err(e) => {
                    tracing::debug!("PROFILER/Plugin: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// A plugin handle or context: plugins are called from any thread, as NCCL calls them from
/// its API and proxy threads.
#[derive(Clone, Copy)]
struct Ptr(*mut c_void);
// SAFETY: an opaque pointer the plugin gave us; we only hand it back to the plugin.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

/// One communicator's plugin context.
pub struct Profiler {
    plugin: &'static Plugin,
    ctx: Ptr,
    mask: u64,
    rank: i32,
    _name: CString,
    /// Collectives issued so far, per kind (NCCL's `seqNumber[func]`).
    seq: [AtomicU64; 8],
    /// Groups whose completion the timing thread has not reported yet.
    pending: Mutex<usize>,
    drained: Condvar,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Profiler({} mask {:#x})", self.plugin.name, self.mask)
    }
}

/// Initialises the plugin (if any) for a communicator that just became ready. Plugin absent
/// or `init` failing: a warning (for a failing `init`), and the communicator runs on.
pub fn attach(comm: &Comm) {
    let Some(plugin) = plugin() else { return };
    let n_nodes = {
        let st = comm.0.state.lock();
        let mut hosts: Vec<u64> = st
            .as_ref()
            .map(|s| s.table.iter().map(|r| r.host_id).collect())
            .unwrap_or_default();
        hosts.sort_unstable();
        hosts.dedup();
        hosts.len().max(1)
    };
    let name = ffi::c_name(comm.0.config.comm_name.as_deref().unwrap_or(""));
    let (rank, nranks) = (comm.0.rank as i32, comm.0.nranks as i32);
    match plugin.init(comm.nonce(), &name, n_nodes as i32, nranks, rank) {
        Ok((ctx, mask)) => {
            tracing::info!(
                "PROFILER/Plugin: rank {rank} of {nranks}: event mask {mask:#x} ({})",
                plugin.name
            );
            let prof = Profiler {
                plugin,
                ctx: Ptr(ctx),
                mask,
                rank,
                _name: name,
                seq: Default::default(),
                pending: Mutex::new(0),
                drained: Condvar::new(),
            };
            *comm.0.profiler.lock() = Some(Arc::new(prof));
            ACTIVE.fetch_add(1, Ordering::Relaxed);
        }
        Err(code) => tracing::warn!(
            "PROFILER/Plugin: {} init failed with error {code}; continuing without a profiler",
            plugin.name
        ),
    }
}

/// Finalises the communicator's plugin context after its last event: destroy waits for the
/// timing thread to report its outstanding groups; with `bounded` (abort) it waits at most a
/// little, and a context whose events are still outstanding is left unfinalised rather than
/// finalised under them.
pub fn detach(comm: &Comm, bounded: bool) {
    let Some(prof) = comm.0.profiler.lock().take().and_then(downcast) else {
        return;
    };
    ACTIVE.fetch_sub(1, Ordering::Relaxed);
    let mut pending = prof.pending.lock();
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while *pending > 0 {
        if bounded {
            if prof.drained.wait_until(&mut pending, limit).timed_out() {
                tracing::warn!(
                    "PROFILER/Plugin: rank {}: {} groups still running at abort; context not finalized",
                    prof.rank,
                    *pending
                );
                return;
            }
        } else {
            prof.drained.wait(&mut pending);
        }
    }
    drop(pending);
    // As NCCL: a plugin that returned no context (the inspector when it is not enabled) is
    // not finalised.
    if !prof.ctx.0.is_null() {
        prof.plugin.finalize(prof.ctx.0);
    }
}

/// The communicator's context out of its untyped slot.
fn downcast(p: Arc<dyn std::any::Any + Send + Sync>) -> Option<Arc<Profiler>> {
    p.downcast().ok()
}

impl Profiler {
    fn wants(&self, bits: u64) -> bool {
        self.mask & bits != 0
    }

    fn start(&self, descr: &mut EventDescr) -> Ptr {
        Ptr(self.plugin.start(self.ctx.0, descr))
    }

    /// The kernel-channel events of a completed operation: channel 0 from `t0` to `t1` (ns).
    fn kernel_channel(&self, parent: Ptr, t0: u64, t1: u64) {
        let mut d = EventDescr::new(kind::KERNEL_CH, parent.0, self.rank);
        d.u.kernel_ch = ffi::KernelChDescr {
            channel_id: 0,
            p_timer: t0,
        };
        let h = self.start(&mut d);
        self.plugin.record_kernel_stop(h.0, t1.max(t0 + 1));
        self.plugin.stop(h.0);
    }

    fn queued(&self) {
        *self.pending.lock() += 1;
    }

    fn done(&self) {
        let mut p = self.pending.lock();
        *p = p.saturating_sub(1);
        if *p == 0 {
            self.drained.notify_all();
        }
    }
}

/// How an operation's execution is timed.
enum Timing {
    /// It runs to completion inside the group call: host clock before and after.
    Host { t0: u64 },
    /// It runs on the GPU: CUDA events on its streams, read by the timing thread.
    Gpu(timing::Starts),
    /// Captured into a graph (it runs at replay), or timing could not be set up: no kernel
    /// channel events, so a plugin is not told of a channel it will never see complete.
    Untimed,
}

/// One operation's plugin handle and the stream it runs on.
struct Op {
    handle: Ptr,
    stream: usize,
}

/// One communicator's part of a group, as reported.
struct Part {
    prof: Arc<Profiler>,
    group: Ptr,
    ops: Vec<Op>,
    timing: Timing,
}

impl Part {
    /// Kernel-channel events of every operation (when timed) then the stops: operations,
    /// then the group.
    fn complete(&self, spans: &dyn Fn(usize) -> Option<(u64, u64)>) {
        for op in &self.ops {
            if op.handle.0.is_null() {
                continue;
            }
            if self.prof.wants(kind::KERNEL_CH) {
                if let Some((t0, t1)) = spans(op.stream) {
                    self.prof.kernel_channel(op.handle, t0, t1);
                }
            }
            self.prof.plugin.stop(op.handle.0);
        }
        self.prof.plugin.stop(self.group.0);
    }
}

/// The events of one group in flight: started by [`Watch::start`] before the group runs,
/// completed by [`Watch::finish`] (host) or by the timing thread (GPU).
pub(crate) struct Watch {
    parts: Vec<Part>,
}

/// What makes NCCL start a group event (`ncclProfilerStartGroupEvent`).
const GROUP_BITS: u64 = kind::GROUP
    | kind::COLL
    | kind::P2P
    | kind::PROXY_OP
    | kind::PROXY_STEP
    | kind::KERNEL_CH
    | kind::NET_PLUGIN;
/// What makes it start an operation's event (`ncclProfilerStartTaskEvents`), besides the
/// operation's own bit.
const TASK_BITS: u64 = kind::PROXY_OP | kind::PROXY_STEP | kind::KERNEL_CH | kind::NET_PLUGIN;

impl Watch {
    /// Starts the group and operation events of the communicators of `tasks` that have a
    /// plugin context. `None` (at once) when no communicator has one.
    pub(crate) fn start(tasks: &[(Comm, Task)]) -> Option<Watch> {
        if ACTIVE.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut comms: Vec<(&Comm, Arc<Profiler>, Vec<Task>)> = Vec::new();
        for (c, t) in tasks {
            match comms.iter_mut().find(|(x, _, _)| Arc::ptr_eq(&x.0, &c.0)) {
                Some((_, _, ts)) => ts.push(*t),
                None => {
                    let Some(prof) = c.0.profiler.lock().clone().and_then(downcast) else {
                        continue;
                    };
                    comms.push((c, prof, vec![*t]));
                }
            }
        }
        let parts: Vec<Part> = comms
            .into_iter()
            .filter(|(_, prof, _)| prof.wants(GROUP_BITS))
            .map(|(comm, prof, tasks)| start_part(comm, prof, &tasks))
            .collect();
        (!parts.is_empty()).then_some(Watch { parts })
    }

    /// The group's calls returned (`ok`: without error). Host-timed parts complete now;
    /// GPU-timed ones go to the timing thread, which completes them when their streams
    /// pass the end of the group.
    pub(crate) fn finish(self, ok: bool) {
        let t1 = timing::now_ns();
        for part in self.parts {
            match &part.timing {
                Timing::Host { t0 } => {
                    let t0 = *t0;
                    part.complete(&|_| ok.then_some((t0, t1)));
                }
                Timing::Untimed => part.complete(&|_| None),
                Timing::Gpu(_) if !ok => part.complete(&|_| None),
                Timing::Gpu(_) => timing::submit(part),
            }
        }
    }
}

/// Starts one communicator's group event and its operations' events, and the timing of
/// the part (events on the GPU's streams, or the host clock).
fn start_part(comm: &Comm, prof: Arc<Profiler>, tasks: &[Task]) -> Part {
    let rank = prof.rank;
    let mut gd = EventDescr::new(kind::GROUP, std::ptr::null_mut(), rank);
    let group = prof.start(&mut gd);
    let how = Facts::gather(comm, tasks).map(|f| route(&f)).ok();
    let timing = match how {
        Some(Route::Host) => Timing::Host {
            t0: timing::now_ns(),
        },
        Some(Route::CopyEngines | Route::Staged) => timing::Starts::record(comm, tasks)
            .map(Timing::Gpu)
            .unwrap_or(Timing::Untimed),
        Some(Route::Capture) | None => Timing::Untimed,
    };
    let channels = u8::from(!matches!(timing, Timing::Untimed) && prof.wants(kind::KERNEL_CH));
    let algo = match how {
        Some(Route::Host) => c"Host",
        Some(Route::CopyEngines) => c"CopyEngine",
        Some(Route::Staged) => c"Staged",
        Some(Route::Capture) => c"Graph",
        None => c"Unknown",
    };
    // Version 4 plugins take the group as the operation's parent; later ones an API event
    // (none here) as parent and the group in `parentGroup`.
    let parent = if prof.plugin.version == 4 {
        group.0
    } else {
        std::ptr::null_mut()
    };
    let ops = tasks
        .iter()
        .map(|t| {
            let handle = match t.kind {
                TaskKind::Coll(c) if prof.wants(kind::COLL | TASK_BITS) => {
                    let mut d = EventDescr::new(kind::COLL, parent, rank);
                    d.u.coll = ffi::CollDescr {
                        seq_number: prof.seq[t.kind.code() as usize % 8]
                            .fetch_add(1, Ordering::Relaxed),
                        func: func_name(t.kind).as_ptr(),
                        send_buff: t.send as *const c_void,
                        recv_buff: t.recv as *mut c_void,
                        count: t.count,
                        root: root_of(c),
                        datatype: dtype_name(t.dtype).as_ptr(),
                        n_channels: channels,
                        n_warps: 0,
                        algo: algo.as_ptr(),
                        proto: c"Simple".as_ptr(),
                        parent_group: group.0,
                    };
                    prof.start(&mut d)
                }
                TaskKind::Send { peer } | TaskKind::Recv { peer }
                    if prof.wants(kind::P2P | TASK_BITS) =>
                {
                    let mut d = EventDescr::new(kind::P2P, parent, rank);
                    let buff = if matches!(t.kind, TaskKind::Send { .. }) {
                        t.send
                    } else {
                        t.recv
                    };
                    d.u.p2p = ffi::P2pDescr {
                        func: func_name(t.kind).as_ptr(),
                        buff: buff as *mut c_void,
                        datatype: dtype_name(t.dtype).as_ptr(),
                        count: t.count,
                        peer: peer as i32,
                        n_channels: channels,
                        parent_group: group.0,
                    };
                    prof.start(&mut d)
                }
                _ => Ptr(std::ptr::null_mut()),
            };
            Op {
                handle,
                stream: t.stream,
            }
        })
        .collect();
    Part {
        prof,
        group,
        ops,
        timing,
    }
}

fn root_of(c: Collective) -> i32 {
    match c {
        Collective::Broadcast { root }
        | Collective::Reduce { root }
        | Collective::Gather { root }
        | Collective::Scatter { root } => root as i32,
        _ => 0,
    }
}

/// NCCL's names for the operations (`ncclFuncToString`), which plugins compare against.
fn func_name(k: TaskKind) -> &'static CStr {
    match k {
        TaskKind::Coll(Collective::AllReduce) => c"AllReduce",
        TaskKind::Coll(Collective::Broadcast { .. }) => c"Broadcast",
        TaskKind::Coll(Collective::Reduce { .. }) => c"Reduce",
        TaskKind::Coll(Collective::AllGather) => c"AllGather",
        TaskKind::Coll(Collective::ReduceScatter) => c"ReduceScatter",
        TaskKind::Coll(Collective::AlltoAll) => c"AlltoAll",
        TaskKind::Coll(Collective::Gather { .. }) => c"Gather",
        TaskKind::Coll(Collective::Scatter { .. }) => c"Scatter",
        TaskKind::Send { .. } => c"Send",
        TaskKind::Recv { .. } => c"Recv",
    }
}

/// NCCL's names for the types (`ncclDatatypeToString`).
fn dtype_name(d: DataType) -> &'static CStr {
    match d {
        DataType::Int8 => c"ncclInt8",
        DataType::Uint8 => c"ncclUint8",
        DataType::Int32 => c"ncclInt32",
        DataType::Uint32 => c"ncclUint32",
        DataType::Int64 => c"ncclInt64",
        DataType::Uint64 => c"ncclUint64",
        DataType::Float16 => c"ncclFloat16",
        DataType::Float32 => c"ncclFloat32",
        DataType::Float64 => c"ncclFloat64",
        DataType::Bfloat16 => c"ncclBfloat16",
        DataType::Float8E4M3 => c"ncclFloat8e4m3",
        DataType::Float8E5M2 => c"ncclFloat8e5m2",
    }
}
