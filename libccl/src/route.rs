//! Which engine runs a communicator's part of a group: decided once per part, as a pure
//! function of facts gathered once ([`Facts::gather`]), so the choice is one table that a test
//! walks row by row instead of checks spread over the engines.
//!
//! | capture | GPU usable | memory | staged engine made | copy engines | device scalar | route |
//! |---|---|---|---|---|---|---|
//! | active | yes | any | any | any | any | [`Route::Capture`] |
//! | no | yes | device | any | yes | no | [`Route::CopyEngines`] |
//! | no | yes | device | any | yes | yes | [`Route::Staged`] |
//! | no | yes | device | any | no | any | [`Route::Staged`] |
//! | no | yes | no buffers | yes | as for device memory | | as for device memory |
//! | no | yes | no buffers | no | any | any | [`Route::Host`] |
//! | no | yes | host | any | any | any | [`Route::Host`] |
//! | - | no | any | any | any | any | [`Route::Host`] |
//!
//! Every rank of a communicator reaches the same route for a matched call except through
//! memory kinds, which NCCL also leaves to each rank (a rank may pass host memory only where
//! every rank does). The copy-engine engine's own choice between its paths is its business.

use crate::core::Comm;
use crate::error::Result;
use crate::task::{Reduction, Scalar, Task};

/// A communicator's part of a group.
pub type Part = (Comm, Vec<Task>);

/// An engine as a group reaches it: it takes every part the routes sent it, all at once, as
/// NCCL launches a group (the copy-engine engine posts every communicator's part before it
/// settles any, or ranks that one thread drives would wait for each other; the host executor
/// runs its parts side by side). Which engine a route sends to is one table
/// (`crate::group::engine_of`).
pub trait Submit: Sync {
    /// Queues (GPU) or runs (host) `parts`, each with the route that sent it here.
    fn submit(&self, parts: Vec<(Part, Route)>) -> Result<()>;
}

/// Where the buffers of a part live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Some buffer is GPU memory.
    Device,
    /// No operation has a buffer (counts of 0, NULL pointers).
    NoBuffers,
    /// Host memory.
    Host,
}

/// What the route looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The communicator has a CUDA device and CUDA is usable in this process.
    pub gpu_usable: bool,
    /// Some of the part's streams is capturing a CUDA graph.
    pub capturing: bool,
    pub memory: Memory,
    /// The staged GPU engine already runs for this communicator.
    pub staged_engine: bool,
    /// The copy-engine engine is attached (every rank on one host, peers mapped).
    pub copy_engines: bool,
    /// A PreMulSum whose scalar lives in device memory (read in stream order, which the
    /// staged engine does).
    pub device_scalar: bool,
}

/// The engine that runs a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Captured into the CUDA graph its streams are capturing ([`crate::graph`]).
    Capture,
    /// GPUs of one host on copy engines (`ccl-p2p`).
    CopyEngines,
    /// GPU memory staged through pinned host memory over the host transports ([`crate::gpu`]).
    Staged,
    /// Host memory, run to completion on the calling thread ([`crate::host`]).
    Host,
}

/// The route for `f`: the table in this module's documentation.
pub fn route(f: &Facts) -> Route {
    if !f.gpu_usable {
        return Route::Host;
    }
    if f.capturing {
        return Route::Capture;
    }
    let on_gpu = match f.memory {
        Memory::Device => true,
        Memory::NoBuffers => f.staged_engine,
        Memory::Host => false,
    };
    match (on_gpu, f.copy_engines && !f.device_scalar) {
        (false, _) => Route::Host,
        (true, true) => Route::CopyEngines,
        (true, false) => Route::Staged,
    }
}

impl Facts {
    /// The facts of `comm`'s part `tasks`, with the driver queries made once (capture status
    /// per stream, then, unless capturing, the memory kind per buffer). An invalidated capture
    /// is an error.
    pub fn gather(comm: &Comm, tasks: &[Task]) -> Result<Facts> {
        let gpu_usable = comm.0.cuda_dev >= 0 && crate::gpu::available();
        let capturing = gpu_usable && crate::graph::capturing(comm, tasks)?;
        let memory = if !gpu_usable || capturing {
            Memory::Host
        } else if tasks
            .iter()
            .any(|t| crate::gpu::is_device_ptr(t.send) || crate::gpu::is_device_ptr(t.recv))
        {
            Memory::Device
        } else if tasks.iter().all(|t| t.send == 0 && t.recv == 0) {
            Memory::NoBuffers
        } else {
            Memory::Host
        };
        Ok(Facts {
            gpu_usable,
            capturing,
            memory,
            staged_engine: comm.0.gpu.is_some(),
            copy_engines: comm.0.ipc.is_some(),
            device_scalar: tasks
                .iter()
                .any(|t| matches!(t.red, Reduction::PreMulSum(Scalar::Device(_)))),
        })
    }

    /// Whether the part runs on the GPU at all (capture aside).
    pub fn on_gpu(&self) -> bool {
        matches!(route(self), Route::CopyEngines | Route::Staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of facts: what must hold whatever the table says elsewhere.
    #[test]
    fn every_combination_keeps_the_rules() {
        use Memory::*;
        let mut seen = 0;
        for bits in 0..(1u32 << 5) {
            for memory in [Device, NoBuffers, Host] {
                let b = |i: u32| bits & (1 << i) != 0;
                let f = Facts {
                    gpu_usable: b(0),
                    capturing: b(1),
                    memory,
                    staged_engine: b(2),
                    copy_engines: b(3),
                    device_scalar: b(4),
                };
                let r = route(&f);
                if !f.gpu_usable || memory == Host && !f.capturing {
                    assert_eq!(r, Route::Host, "{f:?}");
                }
                if f.gpu_usable && f.capturing {
                    assert_eq!(r, Route::Capture, "{f:?}");
                }
                if f.device_scalar || !f.copy_engines {
                    assert_ne!(r, Route::CopyEngines, "{f:?}");
                }
                seen += 1;
            }
        }
        assert_eq!(seen, 96);
    }

    /// The rows as the module documentation lists them, one example each.
    #[test]
    fn the_documented_rows() {
        use Memory::*;
        let base = Facts {
            gpu_usable: true,
            capturing: false,
            memory: Device,
            staged_engine: false,
            copy_engines: true,
            device_scalar: false,
        };
        let rows = [
            (
                Facts {
                    capturing: true,
                    ..base
                },
                Route::Capture,
            ),
            (base, Route::CopyEngines),
            (
                Facts {
                    device_scalar: true,
                    ..base
                },
                Route::Staged,
            ),
            (
                Facts {
                    copy_engines: false,
                    ..base
                },
                Route::Staged,
            ),
            (
                Facts {
                    memory: NoBuffers,
                    staged_engine: true,
                    ..base
                },
                Route::CopyEngines,
            ),
            (
                Facts {
                    memory: NoBuffers,
                    staged_engine: true,
                    copy_engines: false,
                    ..base
                },
                Route::Staged,
            ),
            (
                Facts {
                    memory: NoBuffers,
                    ..base
                },
                Route::Host,
            ),
            (
                Facts {
                    memory: Host,
                    ..base
                },
                Route::Host,
            ),
            (
                Facts {
                    gpu_usable: false,
                    ..base
                },
                Route::Host,
            ),
        ];
        for (f, want) in rows {
            assert_eq!(route(&f), want, "{f:?}");
        }
    }
}
