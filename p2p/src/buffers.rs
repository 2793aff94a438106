//! User buffers for the direct transfers: how a peer reaches ours (legacy IPC handles of
//! `cuMemAlloc` memory, or the file descriptor of a VMM allocation from `ncclMemAlloc`, cached
//! per allocation), how we reach a peer's (mappings, cached per allocation and shared by the
//! communicators of the process), and the bounce buffer for what cannot be mapped.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use std::os::fd::{AsFd, RawFd};

use ccl_cuda::cuda::{self, Context, DeviceBuffer, IpcHandle, IpcMapping, MemoryKind, VmmMapping};
use parking_lot::Mutex;

use crate::error::cuda_err;
use crate::error::{Error, Result};
use crate::rendezvous::{Export, Exported, Post, Reach, VMM_ID};

/// Most exported handles remembered per communicator (forgotten all at once past this).
const EXPORTS_MAX: usize = 4096;

fn vmm_handle(fd: RawFd, len: usize) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(&fd.to_le_bytes());
    h[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

fn vmm_of_handle(h: &[u8; 64]) -> (RawFd, usize) {
    let mut fd = [0u8; 4];
    fd.copy_from_slice(&h[..4]);
    let mut len = [0u8; 8];
    len.copy_from_slice(&h[8..16]);
    (RawFd::from_le_bytes(fd), u64::from_le_bytes(len) as usize)
}

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
    /// Every peer in another process can take a file descriptor of ours (probed at setup),
    /// so `ncclMemAlloc`'s VMM memory can be exported.
    vmm: bool,
    /// This process's context on the peer's GPU, with remote copies on (two ranks).
    pub there: Option<Arc<Context>>,
}

impl Buffers {
    /// Bytes of the bounce buffers made so far.
    pub fn bounce_bytes(&self) -> u64 {
        self.bounce.iter().map(|b| b.len() as u64).sum()
    }

    pub fn new(ctx: Arc<Context>, vmm: bool) -> Buffers {
        Buffers {
            ctx,
            pid: std::process::id() as u64,
            exports: HashMap::new(),
            bounce: Vec::new(),
            vmm,
            there: None,
        }
    }
}

impl Buffers {
    /// How a peer maps our `ncclMemAlloc` VMM allocation around `ptr`, where peers can take
    /// our descriptors.
    fn vmm_export(&self, ptr: u64) -> Export {
        if !self.vmm {
            return None;
        }
        let v = cuda::vmm::lookup(ptr)?;
        Some(Exported {
            base: v.base,
            buffer_id: VMM_ID | v.alloc_id,
            handle: vmm_handle(v.fd, v.len),
        })
    }
}

impl Reach for Buffers {
    fn export(&mut self, ptr: u64) -> Result<Export> {
        // Memory CUDA does not know has no buffer id: not mappable, unless it is one of our
        // VMM allocations (should the driver not give those an id).
        let Ok(buffer_id) = cuda::buffer_id(ptr) else {
            return Ok(self.vmm_export(ptr));
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
            })
            // VMM memory has no legacy handle; ours (ncclMemAlloc) has a file descriptor.
            .or_else(|| self.vmm_export(ptr));
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
        resolve_post(&self.ctx, self.pid, p)
    }

    fn resolve_there(&mut self, p: &Post) -> Result<Option<u64>> {
        let Some(there) = &self.there else {
            return Ok(None);
        };
        if p.pid == self.pid {
            return Ok(Some(p.addr));
        }
        Ok(Some(mapping(there, p)? + p.offset))
    }
}

/// The address of a peer's posted buffer in this process (`pid`), mapped through `ctx` (the
/// mapping kept for the process's lifetime).
pub(crate) fn resolve_post(ctx: &Arc<Context>, pid: u64, p: &Post) -> Result<u64> {
    if p.pid == pid {
        return Ok(p.addr);
    }
    Ok(mapping(ctx, p)? + p.offset)
}

/// A peer's allocation mapped here: a legacy IPC mapping, or an imported VMM allocation
/// (which keeps the memory alive after its owner frees it). Never unmapped: keys cannot go
/// stale, since neither buffer ids nor allocation ids are reused within a process.
enum Mapped {
    Ipc(IpcMapping),
    Vmm(VmmMapping),
}

impl Mapped {
    fn ptr(&self) -> u64 {
        match self {
            Mapped::Ipc(m) => m.ptr(),
            Mapped::Vmm(m) => m.ptr(),
        }
    }
}

/// Mappings of peers' allocations, shared by every communicator of the process (a process
/// may map an allocation once), keyed by (peer process, its buffer or VMM allocation id, our
/// device).
fn mapping(ctx: &Arc<Context>, p: &Post) -> Result<u64> {
    type Key = (u64, u64, i32);
    static MAPS: OnceLock<Mutex<HashMap<Key, Mapped>>> = OnceLock::new();
    let key = (p.pid, p.buffer_id, ctx.ordinal());
    let mut maps = MAPS.get_or_init(Default::default).lock();
    if let Some(m) = maps.get(&key) {
        return Ok(m.ptr());
    }
    let m = if p.buffer_id & VMM_ID != 0 {
        Mapped::Vmm(import_vmm(ctx, p)?)
    } else {
        Mapped::Ipc(IpcMapping::open(ctx, &IpcHandle(p.handle)).map_err(cuda_err)?)
    };
    let ptr = m.ptr();
    maps.insert(key, m);
    Ok(ptr)
}

/// Imports a peer's VMM allocation: its file descriptor is taken from the owner's process
/// (pidfd) and imported here.
fn import_vmm(ctx: &Arc<Context>, p: &Post) -> Result<VmmMapping> {
    let (fd, len) = vmm_of_handle(&p.handle);
    let pid = u32::try_from(p.pid)
        .map_err(|_| Error::internal(format!("cuda-ipc: bad peer pid {}", p.pid)))?;
    let own = cuda::vmm::fd_from_process(pid, fd).map_err(|e| {
        Error::system(format!(
            "cuda-ipc: cannot take file descriptor {fd} of process {pid} (VMM buffer): {e}"
        ))
    })?;
    VmmMapping::import(ctx, own.as_fd(), len).map_err(cuda_err)
}

/// Can this process take a file descriptor from process `pid` (the kernel's ptrace rules)?
/// Setup probes every peer with a descriptor it keeps open for the purpose.
pub(crate) fn can_take_fd(pid: u32, fd: RawFd) -> bool {
    cuda::vmm::fd_from_process(pid, fd).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmm_handles_round_trip() {
        assert_eq!(vmm_of_handle(&vmm_handle(37, 2 << 20)), (37, 2 << 20));
        assert_eq!(vmm_of_handle(&vmm_handle(-1, 0)), (-1, 0));
    }

    /// The setup probe: a descriptor of this very process can be taken back (pidfd_getfd);
    /// one that is not open cannot (a number far above any open descriptor: a closed one's
    /// number may be reused at once by another test's thread).
    #[test]
    fn fd_probe_sees_open_and_missing_descriptors() {
        use std::os::fd::AsRawFd;
        let (r, _w) = nix::unistd::pipe().unwrap();
        let pid = std::process::id();
        if !can_take_fd(pid, r.as_raw_fd()) {
            eprintln!("pidfd_getfd not permitted here; skipping");
            return;
        }
        assert!(!can_take_fd(pid, 1 << 20));
        assert!(!can_take_fd(u32::MAX - 7, r.as_raw_fd()));
    }
}
