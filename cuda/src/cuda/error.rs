//! The one error type of the CUDA backend.

use std::ffi::c_int;

/// Everything that can go wrong in the CUDA backend. Driver and NVRTC failures carry the name
/// of the call that failed and the library's own name and description of the code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// No CUDA driver library could be loaded (a machine without an NVIDIA driver).
    #[error("CUDA driver not available: could not load {tried}: {reason}")]
    NoDriver { tried: String, reason: String },
    /// The driver library lacks a function the backend needs (a driver that is too old).
    #[error("{library} has no symbol {symbol} (driver too old?)")]
    MissingSymbol { library: String, symbol: String },
    /// A driver API call returned an error.
    #[error("{call} failed: {name} ({code}): {message}")]
    Driver {
        call: &'static str,
        code: c_int,
        name: String,
        message: String,
    },
    /// No NVRTC library could be loaded, so no kernel can be compiled.
    #[error("NVRTC not available: could not load {tried}: {reason}")]
    NoNvrtc { tried: String, reason: String },
    /// An NVRTC call returned an error.
    #[error("{call} failed: NVRTC error {code}: {message}")]
    Nvrtc {
        call: &'static str,
        code: c_int,
        message: String,
    },
    /// NVRTC rejected a generated kernel; `log` is its compile log.
    #[error("NVRTC could not compile {kernel} for {arch}: {log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
    /// An argument the backend cannot use (wrong size, misaligned pointer, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device or driver lacks a feature (CUDA VMM, shareable handles, ...); callers
    /// fall back to an older mechanism.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A wait on the host (for a flag, a child, ...) ran past its deadline.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl CudaError {
    /// The numeric `CUresult` for driver errors, `None` for every other kind.
    pub fn driver_code(&self) -> Option<c_int> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when the error means "no usable CUDA here" (no driver, no device, driver too
    /// old): callers fall back to the host backend instead of failing.
    pub fn is_unavailable(&self) -> bool {
        match self {
            CudaError::NoDriver { .. } | CudaError::MissingSymbol { .. } => true,
            CudaError::Driver { code, .. } => matches!(
                *code,
                crate::cuda::sys::CUDA_ERROR_NO_DEVICE
                    | crate::cuda::sys::CUDA_ERROR_INSUFFICIENT_DRIVER
                    | crate::cuda::sys::CUDA_ERROR_NOT_INITIALIZED
            ),
            _ => false,
        }
    }
}

/// Result of the CUDA backend.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
