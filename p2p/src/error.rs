//! The engine's error: a kind (the categories `ncclResult_t` distinguishes, mapped in `ccl`),
//! a message, and the place it was made, so `ncclGetLastError` points at the code that gave up.

use std::fmt;
use std::panic::Location;

use ccl_cuda::cuda::CudaError;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A bad argument from the caller.
    InvalidArgument,
    /// A call not allowed now, or calls that do not match across ranks.
    InvalidUsage,
    /// The operating system failed us, or a peer went silent past the timeout.
    System,
    /// A peer died or reported an error.
    Remote,
    /// A bug in libccl.
    Internal,
    /// A CUDA call failed.
    Cuda,
}

/// An error with its kind, a message and the place it was created.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({file}:{line})", file = self.location.file(), line = self.location.line())]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub location: &'static Location<'static>,
}

impl Error {
    #[track_caller]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            location: Location::caller(),
        }
    }

    #[track_caller]
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    #[track_caller]
    pub fn invalid_usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidUsage, message)
    }

    #[track_caller]
    pub fn system(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::System, message)
    }

    #[track_caller]
    pub fn remote(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Remote, message)
    }

    #[track_caller]
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Prefixes context to the message, keeping kind and origin.
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self)
    }
}

/// A failed driver call.
pub(crate) fn cuda_err(e: CudaError) -> Error {
    Error::new(ErrorKind::Cuda, e.to_string())
}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Self {
        cuda_err(e)
    }
}

impl From<ccl_collectives::Error> for Error {
    #[track_caller]
    fn from(e: ccl_collectives::Error) -> Self {
        Error::new(ErrorKind::InvalidArgument, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
