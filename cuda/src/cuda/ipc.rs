//! CUDA IPC: exporting device memory to another process and mapping it there.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::context::Context;
use super::error::{CudaError, Result};
use super::sys::*;

/// Size of a `CUipcMemHandle`.
pub const IPC_HANDLE_SIZE: usize = 64;

/// A legacy CUDA IPC memory handle: 64 opaque bytes naming one `cuMemAlloc` allocation, sent
/// to a peer process (through the bootstrap) and opened there with [`IpcMapping::open`].
/// Serialises as a byte string.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcHandle(pub [u8; IPC_HANDLE_SIZE]);

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcHandle(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

impl IpcHandle {
    /// The handle of the allocation that contains `ptr` (a device address of `ctx`). The
    /// peer maps the whole allocation: add `ptr - pointer_info(ptr).base` on its side.
    pub fn of(ctx: &Context, ptr: CUdeviceptr) -> Result<IpcHandle> {
        let _g = ctx.scope()?;
        let mut h = CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: writes one 64-byte handle; an address that is not device memory of a
        // cuMemAlloc allocation is reported as an error code.
        let r = unsafe { (ctx.driver().fns.cuIpcGetMemHandle)(&mut h, ptr) };
        ctx.driver().check("cuIpcGetMemHandle", r)?;
        Ok(IpcHandle(h.reserved))
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> [u8; IPC_HANDLE_SIZE] {
        self.0
    }

    /// A handle from its 64 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcHandle> {
        let arr: [u8; IPC_HANDLE_SIZE] = bytes.try_into().map_err(|_| {
            CudaError::InvalidArgument(format!(
                "an IPC handle has {IPC_HANDLE_SIZE} bytes, got {}",
                bytes.len()
            ))
        })?;
        Ok(IpcHandle(arr))
    }

    /// Lower-case hex of the 64 bytes (for command lines and logs).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`IpcHandle::to_hex`].
    pub fn from_hex(s: &str) -> Result<IpcHandle> {
        let bad = || CudaError::InvalidArgument(format!("not a hex IPC handle: {s:?}"));
        if s.len() != 2 * IPC_HANDLE_SIZE || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; IPC_HANDLE_SIZE];
        for (i, o) in out.iter_mut().enumerate() {
            let pair = s.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *o = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(IpcHandle(out))
    }
}

impl Serialize for IpcHandle {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

struct HandleVisitor;

impl<'de> Visitor<'de> for HandleVisitor {
    type Value = IpcHandle;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{IPC_HANDLE_SIZE} bytes")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> std::result::Result<IpcHandle, E> {
        IpcHandle::from_bytes(v).map_err(|_| E::invalid_length(v.len(), &self))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<IpcHandle, A::Error> {
        let mut out = [0u8; IPC_HANDLE_SIZE];
        for (i, o) in out.iter_mut().enumerate() {
            *o = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(i, &self))?;
        }
        if seq.next_element::<u8>()?.is_some() {
            return Err(de::Error::invalid_length(IPC_HANDLE_SIZE + 1, &self));
        }
        Ok(IpcHandle(out))
    }
}

impl<'de> Deserialize<'de> for IpcHandle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<IpcHandle, D::Error> {
        d.deserialize_bytes(HandleVisitor)
    }
}

/// Another process's allocation mapped into this one (`cuIpcOpenMemHandle`), unmapped on
/// drop. Peer access is enabled lazily, so the memory may live on another GPU.
#[derive(Debug)]
pub struct IpcMapping {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
}

impl IpcMapping {
    /// Maps the allocation named by `handle` into `ctx`.
    pub fn open(ctx: &Arc<Context>, handle: &IpcHandle) -> Result<IpcMapping> {
        let _g = ctx.scope()?;
        let mut ptr: CUdeviceptr = 0;
        let h = CUipcMemHandle { reserved: handle.0 };
        // SAFETY: writes one CUdeviceptr; the handle is passed by value.
        let r = unsafe {
            (ctx.driver().fns.cuIpcOpenMemHandle)(&mut ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        };
        ctx.driver().check("cuIpcOpenMemHandle_v2", r)?;
        Ok(IpcMapping {
            ctx: Arc::clone(ctx),
            ptr,
        })
    }

    /// The mapped base address (the start of the exporter's allocation).
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if let Ok(_g) = self.ctx.scope() {
            // SAFETY: opened by cuIpcOpenMemHandle here, closed once.
            let _ = unsafe { (self.ctx.driver().fns.cuIpcCloseMemHandle)(self.ptr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IpcHandle {
        let mut b = [0u8; IPC_HANDLE_SIZE];
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(37).wrapping_add(11);
        }
        IpcHandle(b)
    }

    #[test]
    fn bytes_and_hex_round_trip() {
        let h = sample();
        assert_eq!(IpcHandle::from_bytes(&h.to_bytes()).unwrap(), h);
        assert_eq!(IpcHandle::from_hex(&h.to_hex()).unwrap(), h);
        assert!(IpcHandle::from_bytes(&[0u8; 63]).is_err());
        assert!(IpcHandle::from_hex("zz").is_err());
        assert!(IpcHandle::from_hex(&"g".repeat(128)).is_err());
    }

    #[test]
    fn serde_round_trip() {
        let h = sample();
        let json = serde_json::to_string(&h).unwrap();
        let back: IpcHandle = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        // A sequence of the wrong length is rejected.
        assert!(serde_json::from_str::<IpcHandle>("[1,2,3]").is_err());
        let long = format!("[{}]", vec!["0"; 65].join(","));
        assert!(serde_json::from_str::<IpcHandle>(&long).is_err());
    }
}
