//! A communicator's plugin context: the process's plugin (loaded once), each communicator's
//! `init` and `finalize`, and what every event needs (the mask, NCCL's names for operations
//! and types).

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ccl_collectives::Collective;
use ccl_cuda::DataType;
use parking_lot::{Condvar, Mutex};

use super::ffi::{self, kind, EventDescr, Plugin};
use crate::core::Comm;
use crate::params;
use crate::task::TaskKind;

/// The process's plugin: loaded at the first communicator's init, `None` when there is none
/// (or it failed to load: NCCL then runs on without one).
static PLUGIN: OnceLock<Option<Plugin>> = OnceLock::new();

/// Communicators with a plugin context: while 0, groups skip the profiler at once.
pub(super) static ACTIVE: AtomicUsize = AtomicUsize::new(0);

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

pub(super) use super::ffi::Handle as Ptr;

/// One communicator's plugin context.
pub struct Profiler {
    pub(super) plugin: &'static Plugin,
    ctx: Ptr,
    mask: u64,
    pub(super) rank: i32,
    _name: CString,
    /// Collectives issued so far, per kind (NCCL's `seqNumber[func]`).
    pub(super) seq: [AtomicU64; 8],
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
                ctx,
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
    if !prof.ctx.is_null() {
        prof.plugin.finalize(prof.ctx);
    }
}

/// The communicator's context out of its untyped slot.
pub(super) fn downcast(p: Arc<dyn std::any::Any + Send + Sync>) -> Option<Arc<Profiler>> {
    p.downcast().ok()
}

impl Profiler {
    pub(super) fn wants(&self, bits: u64) -> bool {
        self.mask & bits != 0
    }

    pub(super) fn start(&self, descr: &mut EventDescr) -> Ptr {
        self.plugin.start(self.ctx, descr)
    }

    /// The kernel-channel events of a completed operation: channel 0 from `t0` to `t1` (ns).
    pub(super) fn kernel_channel(&self, parent: Ptr, t0: u64, t1: u64) {
        let mut d = EventDescr::new(kind::KERNEL_CH, parent.as_ptr(), self.rank);
        d.u.kernel_ch = ffi::KernelChDescr {
            channel_id: 0,
            p_timer: t0,
        };
        let h = self.start(&mut d);
        self.plugin.record_kernel_stop(h, t1.max(t0 + 1));
        self.plugin.stop(h);
    }

    pub(super) fn queued(&self) {
        *self.pending.lock() += 1;
    }

    pub(super) fn done(&self) {
        let mut p = self.pending.lock();
        *p = p.saturating_sub(1);
        if *p == 0 {
            self.drained.notify_all();
        }
    }
}

pub(super) fn root_of(c: Collective) -> i32 {
    match c {
        Collective::Broadcast { root }
        | Collective::Reduce { root }
        | Collective::Gather { root }
        | Collective::Scatter { root } => root as i32,
        _ => 0,
    }
}

/// NCCL's names for the operations (`ncclFuncToString`), which plugins compare against.
pub(super) fn func_name(k: TaskKind) -> &'static CStr {
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
pub(super) fn dtype_name(d: DataType) -> &'static CStr {
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
