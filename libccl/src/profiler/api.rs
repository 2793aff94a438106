//! The API events of interface v5 and v6: a `GroupApi` event per outermost group of a thread
//! (started by its first operation, as NCCL starts it when the first task is appended), and a
//! `CollApi` / `P2pApi` event per call, started and stopped inside the call. The operation
//! events started later take the call's event as their parent, as in NCCL.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::context::{downcast, dtype_name, func_name, root_of, Profiler, Ptr, ACTIVE};
use super::ffi::{self, kind, EventDescr};
use crate::core::Comm;
use crate::task::{Task, TaskKind};

/// What makes NCCL start a group API event: every event type but ProxyCtrl.
const GROUP_API_BITS: u64 = !kind::PROXY_CTRL & 0x7fff;
/// ... a collective API event (`collApiMask`).
const COLL_API_BITS: u64 = kind::COLL_API
    | kind::COLL
    | kind::PROXY_OP
    | kind::PROXY_STEP
    | kind::KERNEL_CH
    | kind::NET_PLUGIN
    | (0x7 << 12);
/// ... a point-to-point API event (`p2pApiMask`).
const P2P_API_BITS: u64 = kind::P2P_API
    | kind::P2P
    | kind::PROXY_OP
    | kind::PROXY_STEP
    | kind::KERNEL_CH
    | kind::NET_PLUGIN;

/// The calling thread's API events of its current group.
#[derive(Default)]
pub(crate) struct ApiGroup {
    /// The group API event and the context it was started in (the first operation's
    /// communicator, as in NCCL).
    group: Option<(Arc<Profiler>, Ptr)>,
    /// Per operation appended to the group, in order: its call's event (null when none).
    pub(super) ops: Vec<Ptr>,
}

thread_local! {
    static API: RefCell<ApiGroup> = RefCell::new(ApiGroup::default());
}

/// A call added `task` to `comm`'s work (a group's, or its own group of one at `depth` 1).
pub(crate) fn appended(comm: &Comm, task: &Task, depth: usize) {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let prof = comm.0.profiler.lock().clone().and_then(downcast);
    let handle = prof
        .filter(|p| p.plugin.version >= 5)
        .map(|p| call_event(comm, &p, task, depth))
        .unwrap_or(Ptr::NULL);
    API.with(|a| a.borrow_mut().ops.push(handle));
}

/// Starts the group API event if this is the group's first call, then starts and stops the
/// call's event; returns the call's handle.
fn call_event(comm: &Comm, prof: &Arc<Profiler>, task: &Task, depth: usize) -> Ptr {
    let captured = comm.0.cuda_dev >= 0
        && crate::gpu::available()
        && crate::graph::capturing(comm, std::slice::from_ref(task)).unwrap_or(false);
    let group = API.with(|a| {
        let mut a = a.borrow_mut();
        if a.group.is_none() && prof.wants(GROUP_API_BITS) {
            let mut d = EventDescr::new(kind::GROUP_API, std::ptr::null_mut(), prof.rank);
            d.u.group_api = ffi::GroupApiDescr {
                graph_captured: captured,
                group_depth: depth.max(1) as i32,
            };
            let h = prof.start(&mut d);
            prof.plugin.record(h, ffi::STATE_GROUP_START_API_STOP, 0);
            a.group = Some((Arc::clone(prof), h));
        }
        a.group
            .as_ref()
            .map_or(std::ptr::null_mut(), |(_, h)| h.as_ptr())
    });
    let mut d;
    match task.kind {
        TaskKind::Coll(c) if prof.wants(COLL_API_BITS) => {
            d = EventDescr::new(kind::COLL_API, group, prof.rank);
            d.u.coll_api = ffi::CollApiDescr {
                func: func_name(task.kind).as_ptr(),
                count: task.count,
                datatype: dtype_name(task.dtype).as_ptr(),
                root: root_of(c),
                stream: task.stream as *mut _,
                graph_captured: captured,
            };
        }
        TaskKind::Send { .. } | TaskKind::Recv { .. } if prof.wants(P2P_API_BITS) => {
            d = EventDescr::new(kind::P2P_API, group, prof.rank);
            d.u.p2p_api = ffi::P2pApiDescr {
                func: func_name(task.kind).as_ptr(),
                count: task.count,
                datatype: dtype_name(task.dtype).as_ptr(),
                stream: task.stream as *mut _,
                graph_captured: captured,
            };
        }
        _ => return Ptr::NULL,
    }
    let h = prof.start(&mut d);
    // NCCL stops the call's event when the call returns and still names it as the parent of
    // the operation's event: plugins keep it alive by reference counts.
    prof.plugin.stop(h);
    h
}

/// The outermost group end (or a call outside a group) takes the thread's API events.
pub(crate) fn take() -> ApiGroup {
    API.with(|a| std::mem::take(&mut *a.borrow_mut()))
}

impl ApiGroup {
    /// `ncclGroupEnd` begins: `ncclProfilerGroupEndApiStart` on the group API event.
    pub(crate) fn ending(&self) {
        if let Some((prof, h)) = &self.group {
            prof.plugin.record(*h, ffi::STATE_GROUP_END_API_START, 0);
        }
    }

    /// The group's calls returned: the group API event stops.
    pub(crate) fn finish(self) {
        if let Some((prof, h)) = self.group {
            prof.plugin.stop(h);
        }
    }
}
