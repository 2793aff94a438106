//! The crate's error type. Each error records where it was made (s2n-quic style), so a
//! message in `ncclGetLastError` points at the code that gave up. The C ABI maps the kinds to
//! `ncclResult_t` in one place (`ffi/`).

use std::fmt;
use std::panic::Location;

/// What went wrong, in the categories `ncclResult_t` distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A bad argument from the caller: NULL pointer, bad dtype/op/root/peer, overflow.
    InvalidArgument,
    /// A call that is not allowed now or not supported, or calls that do not match across
    /// ranks.
    InvalidUsage,
    /// The operating system failed us, or a peer went silent past the timeout.
    System,
    /// A peer died, closed its connection or reported an error.
    Remote,
    /// A bug in libccl.
    Internal,
    /// A non-blocking operation has not finished yet.
    InProgress,
    /// A CUDA call failed.
    Cuda,
}

/// An error with its kind, a message and the place it was created.
#[derive(Clone, PartialEq, Eq)]
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}:{})",
            self.message,
            self.location.file(),
            self.location.line()
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self)
    }
}

impl std::error::Error for Error {}

impl From<ccl_transports::Error> for Error {
    #[track_caller]
    fn from(e: ccl_transports::Error) -> Self {
        let kind = match e {
            ccl_transports::Error::PeerClosed { .. } | ccl_transports::Error::Unreachable(_) => {
                ErrorKind::Remote
            }
            ccl_transports::Error::Protocol(_) => ErrorKind::InvalidUsage,
            ccl_transports::Error::Io { .. } => ErrorKind::System,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<ccl_cuda::cuda::CudaError> for Error {
    fn from(e: ccl_cuda::cuda::CudaError) -> Self {
        Error::new(ErrorKind::Cuda, e.to_string())
    }
}

impl From<ccl_collectives::Error> for Error {
    #[track_caller]
    fn from(e: ccl_collectives::Error) -> Self {
        Error::new(ErrorKind::InvalidArgument, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
