//! The CUDA backend: the driver API and NVRTC loaded at run time, and the reduction kernels.
//!
//! Nothing here needs the CUDA toolkit to build, and nothing panics where there is no GPU:
//! [`Driver::get`] returns [`CudaError::NoDriver`] (see [`CudaError::is_unavailable`]) and
//! callers use the host backend instead.
//!
//! * [`Driver`]: the function table (`cuMemAlloc_v2`, `cuStreamWaitValue32_v2`, ...).
//! * [`Context`]: a device's primary context, shared with the CUDA runtime (PyTorch).
//! * [`DeviceBuffer`], [`PinnedBuffer`], [`pointer_info`]: memory.
//! * [`Stream`] (own or the caller's `cudaStream_t`), [`Event`]: ordering.
//! * [`Flag`]: a pinned u32 that streams wait on and write (DESIGN.md invariant 2).
//! * [`IpcHandle`], [`IpcMapping`]: sharing `cuMemAlloc` memory across processes.
//! * [`VmmAllocation`], [`VmmMapping`], [`vmm::register`] / [`vmm::lookup`],
//!   [`vmm::fd_from_process`]: CUDA VMM memory (`ncclMemAlloc`), shared as file descriptors.
//! * [`ClockLimits`]: whether the GPU is held at its power or thermal limit (NVML).
//! * [`Kernels`]: NVRTC-compiled reductions for every type and operation, matching
//!   [`crate::host::reduce`] bit for bit, cached on disk.

/// The environment variables the backend reads outside libccl's registry: which driver and
/// NVRTC libraries to load, where compiled kernels are cached.
pub const ENV_VARS: &[&str] = &["CCL_CUDA_LIBRARY", "CCL_NVRTC_LIBRARY", "CCL_KERNEL_CACHE"];

pub mod cache;
pub mod context;
pub mod driver;
pub mod error;
pub mod flag;
pub mod helpers;
pub mod ipc;
pub mod kernels;
pub mod memory;
pub mod nvml;
pub mod nvrtc;
pub mod source;
pub mod stream;
pub mod sys;
pub mod vmm;

pub use context::{current_device, Context, CurrentGuard};
pub use driver::Driver;
pub use error::{CudaError, Result};
pub use flag::Flag;
pub use ipc::{IpcHandle, IpcMapping, IPC_HANDLE_SIZE};
pub use kernels::{GraphWords, KernelStats, Kernels, LlLaunch, LlP2p, LlTransfers, Preloaded};
pub use memory::{
    buffer_id, is_device_memory, pointer_info, DeviceBuffer, HostRegistration, MemoryKind,
    PinnedBuffer, PointerInfo,
};
pub use nvml::ClockLimits;
pub use nvrtc::{Image, ImageKind, Nvrtc, Target};
pub use source::KernelOp;
pub use stream::{
    capture_status_of, CaptureStatus, Event, EventFlags, MemOp, RelaxedCapture, Stream, WaitCond,
};
pub use vmm::{VmmAllocation, VmmInfo, VmmMapping};
