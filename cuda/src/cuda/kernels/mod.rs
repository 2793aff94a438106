//! Launching the reduction kernels: compiled with NVRTC on first use per (type, operation),
//! cached on disk and in memory, launched on a given stream.

mod graph;
mod launch;
mod ll;
mod load;
mod preload;
mod reduce;
mod wait;

pub use graph::GraphWords;
pub use ll::{LlLaunch, LlP2p, LlTransfers};
pub use load::{KernelStats, Kernels};
pub use preload::Preloaded;
