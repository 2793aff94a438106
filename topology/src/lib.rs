//! The system model (CPUs, PCI switches, GPUs, NICs, NVLink), its discovery, the
//! `NCCL_TOPO_FILE` XML format, paths, and the ring/tree search that turns a system into
//! channels.
//!
//! Everything except discovery is a pure function over data.

pub mod config;
pub mod error;
pub mod model;
pub mod nic;
pub mod paths;
pub mod plan;
pub mod search;
pub mod types;
pub mod xml;

pub use config::{CrossNic, DeviceFilter, NetSelect, TopoConfig};
pub use error::{Result, TopoError};
pub use model::{NetKind, NodeId, NodeKind, System};
pub use paths::{Path, PathOptions, Paths};
pub use plan::{
    plan, Channel, HostPlan, HostSystems, NoP2p, PeerTransport, Plan, RankInfo, Transport,
    TransportReason, Tree,
};
pub use types::{BusId, LinkType, PathType};
