//! NCCL profiler plugins (`NCCL_PROFILER_PLUGIN`): the plugin is loaded once per process,
//! initialised per communicator, and told of each group, collective and point-to-point
//! operation, with one kernel-channel event per operation that carries its execution time.
//! `docs/PROFILER.md` says what a plugin receives and why the timestamps are what they are.
//!
//! The C ABI lives in `ccl_monitor::plugin` (here [`ffi`]), a communicator's context in [`context`], the API events in
//! `api`; this module reports a group's operations. With no plugin loaded the cost on the data
//! path is one atomic load per call and per group.

mod api;
mod context;
pub use ccl_monitor::plugin as ffi;
mod timing;

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::core::Comm;
use crate::route::{route, Facts, Route};
use crate::task::{Task, TaskKind};
pub(crate) use api::{appended, take as take_api, ApiGroup};
pub use context::{attach, detach, Profiler};
use context::{downcast, dtype_name, func_name, root_of, Ptr, ACTIVE};
use ffi::{kind, EventDescr};

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
}

impl Part {
    /// Kernel-channel events of every operation (`spans` gives a stream's start and end, when
    /// timed) then the stops: operations, then the group.
    fn complete(&self, spans: &dyn Fn(usize) -> Option<(u64, u64)>) {
        for op in &self.ops {
            if op.handle.is_null() {
                continue;
            }
            if self.prof.wants(kind::KERNEL_CH) {
                if let Some((t0, t1)) = spans(op.stream) {
                    self.prof.kernel_channel(op.handle, t0, t1);
                }
            }
            self.prof.plugin.stop(op.handle);
        }
        self.prof.plugin.stop(self.group);
    }
}

/// The events of one group in flight: started by [`Watch::start`] before the group runs,
/// completed by [`Watch::finish`] (host) or by the timing thread (GPU).
pub(crate) struct Watch {
    parts: Vec<(Part, Timing)>,
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

/// A communicator of a group, its context, and its operations with their API events.
type CommCalls<'a> = (&'a Comm, Arc<Profiler>, Vec<(Task, Ptr)>);

impl Watch {
    /// Starts the group and operation events of the communicators of `tasks` that have a
    /// plugin context; `parents` holds each operation's API event (or is empty). `None` (at
    /// once) when no communicator has a context.
    pub(crate) fn start(tasks: &[(Comm, Task)], api: &ApiGroup) -> Option<Watch> {
        if ACTIVE.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let null = Ptr::NULL;
        let mut comms: Vec<CommCalls<'_>> = Vec::new();
        for (i, (c, t)) in tasks.iter().enumerate() {
            let parent = api.ops.get(i).copied().unwrap_or(null);
            match comms.iter_mut().find(|(x, _, _)| Arc::ptr_eq(&x.0, &c.0)) {
                Some((_, _, ts)) => ts.push((*t, parent)),
                None => {
                    let Some(prof) = c.0.profiler.lock().clone().and_then(downcast) else {
                        continue;
                    };
                    comms.push((c, prof, vec![(*t, parent)]));
                }
            }
        }
        let parts: Vec<(Part, Timing)> = comms
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
        for (part, how) in self.parts {
            match how {
                Timing::Host { t0 } => part.complete(&|_| ok.then_some((t0, t1))),
                Timing::Gpu(starts) if ok => {
                    part.prof.queued();
                    timing::submit(
                        starts,
                        Box::new(move |spans| {
                            part.complete(spans);
                            part.prof.done();
                        }),
                    );
                }
                Timing::Gpu(_) | Timing::Untimed => part.complete(&|_| None),
            }
        }
    }
}

/// Starts one communicator's group event and its operations' events, and the timing of
/// the part (events on the GPU's streams, or the host clock).
fn start_part(comm: &Comm, prof: Arc<Profiler>, calls: &[(Task, Ptr)]) -> (Part, Timing) {
    let tasks: Vec<Task> = calls.iter().map(|(t, _)| *t).collect();
    let tasks = &tasks[..];
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
    // Version 4 plugins take the group as the operation's parent; later ones the call's API
    // event (if one was started) and the group in `parentGroup`.
    let v4 = prof.plugin.version == 4;
    let ops = calls
        .iter()
        .map(|(t, api)| {
            let parent = if v4 { group.as_ptr() } else { api.as_ptr() };
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
                        parent_group: group.as_ptr(),
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
                        parent_group: group.as_ptr(),
                    };
                    prof.start(&mut d)
                }
                _ => Ptr::NULL,
            };
            Op {
                handle,
                stream: t.stream,
            }
        })
        .collect();
    (Part { prof, group, ops }, timing)
}
