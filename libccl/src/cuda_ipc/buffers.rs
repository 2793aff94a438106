//! User buffers for the direct transfers: how a peer reaches ours (exported IPC handles,
//! cached per allocation), how we reach a peer's (mappings, cached per allocation and shared by
//! the communicators of the process), the bounce buffer for what cannot be mapped, and the
//! rendezvous of one group's transfers ([`plan`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use ccl_cuda::cuda::{self, Context, DeviceBuffer, IpcHandle, IpcMapping, MemoryKind};
use parking_lot::Mutex;

use super::direct::{Export, Exported, Post, Reach};
use crate::error::{Error, Result};
use crate::gpu::cuda_err;

/// Most exported handles remembered per communicator (forgotten all at once past this).
const EXPORTS_MAX: usize = 4096;

/// This rank's side of the direct transfers of one communicator.
pub(crate) struct Buffers {
    ctx: Arc<Context>,
    pid: u64,
    /// Buffer id -> how a peer maps that allocation (`None`: it cannot). Buffer ids are
    /// never reused within a process, so an entry cannot go stale: one attribute query per
    /// buffer on the hot path.
    exports: HashMap<u64, Export>,
    /// Bounce buffers, the last the current one; earlier ones stay allocated (queued work may
    /// still use them) until the communicator goes.
    bounce: Vec<DeviceBuffer>,
}

impl Buffers {
    pub fn new(ctx: Arc<Context>) -> Buffers {
        Buffers {
            ctx,
            pid: std::process::id() as u64,
            exports: HashMap::new(),
            bounce: Vec::new(),
        }
    }
}

impl Reach for Buffers {
    fn export(&mut self, ptr: u64) -> Result<Export> {
        // Memory CUDA does not know has no buffer id: not mappable.
        let Ok(buffer_id) = cuda::buffer_id(ptr) else {
            return Ok(None);
        };
        if let Some(&ex) = self.exports.get(&buffer_id) {
            return Ok(ex);
        }
        let info = cuda::pointer_info(ptr).map_err(cuda_err)?;
        let ex = (info.kind == MemoryKind::Device && info.size > 0)
            .then(|| IpcHandle::of(&self.ctx, info.base).ok())
            .flatten()
            .map(|h| Exported {
                base: info.base,
                buffer_id,
                handle: h.0,
            });
        if self.exports.len() >= EXPORTS_MAX {
            self.exports.clear();
        }
        self.exports.insert(buffer_id, ex);
        Ok(ex)
    }

    fn pid(&self) -> u64 {
        self.pid
    }

    fn bounce(&mut self, bytes: usize) -> Result<(u64, Exported)> {
        if !self.bounce.last().is_some_and(|b| b.len() >= bytes) {
            let len = bytes.next_power_of_two().max(1 << 20);
            self.bounce
                .push(DeviceBuffer::new(&self.ctx, len).map_err(cuda_err)?);
        }
        let ptr = self.bounce.last().map_or(0, DeviceBuffer::ptr);
        let ex = self
            .export(ptr)?
            .ok_or_else(|| Error::system("cuda-ipc: the bounce buffer cannot be exported"))?;
        Ok((ptr, ex))
    }

    fn resolve(&mut self, p: &Post) -> Result<u64> {
        if p.pid == self.pid {
            return Ok(p.addr);
        }
        let base = mapping(&self.ctx, p)?;
        Ok(base + p.offset)
    }
}

/// Mappings of peers' allocations, shared by every communicator of the process (a process
/// may map an allocation once), keyed by (peer process, its buffer id, our device).
fn mapping(ctx: &Arc<Context>, p: &Post) -> Result<u64> {
    type Key = (u64, u64, i32);
    static MAPS: OnceLock<Mutex<HashMap<Key, Arc<IpcMapping>>>> = OnceLock::new();
    let key = (p.pid, p.buffer_id, ctx.ordinal());
    let mut maps = MAPS.get_or_init(Default::default).lock();
    if let Some(m) = maps.get(&key) {
        return Ok(m.ptr());
    }
    let m = IpcMapping::open(ctx, &IpcHandle(p.handle)).map_err(cuda_err)?;
    let ptr = m.ptr();
    maps.insert(key, Arc::new(m));
    Ok(ptr)
}
