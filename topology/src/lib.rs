//! The system model (CPUs, PCI switches, GPUs, NICs, NVLink), its discovery, the
//! `NCCL_TOPO_FILE` XML format, paths, and the ring/tree search that turns a system into
//! channels.
//!
//! Everything except [`discover`] (sysfs, `libcuda.so.1`, `libnvidia-ml.so.1`, files) is a
//! pure function over data. The communicator's use:
//!
//! 1. `let cfg = TopoConfig::from_env()?;` and `let sys = discover::system(&cfg)?;` on each
//!    rank (honours `NCCL_TOPO_FILE` / `NCCL_TOPO_DUMP_FILE`);
//! 2. exchange [`RankInfo`] (host id, GPU bus id, NUMA node) and, for hosts that differ,
//!    the system as XML ([`xml::to_string`] / [`xml::parse_str`]);
//! 3. `plan(&ranks, &systems, &cfg)?` gives [`Channel`]s (ring order, tree, NIC per rank),
//!    the primary and backup NIC per rank, and [`Plan::transport`] for any rank pair.
//!
//! ```
//! use ccl_topology::{plan, xml, HostSystems, RankInfo, TopoConfig, Transport, PathType};
//! let sys = xml::parse_str(r#"<system version="1"><cpu numaid="0">
//!   <pci busid="0000:19:00.0" class="0x030200"><gpu dev="0" sm="90">
//!     <nvlink target="0000:3b:00.0" count="18" tclass="0x030200"/></gpu></pci>
//!   <pci busid="0000:3b:00.0" class="0x030200"><gpu dev="1" sm="90">
//!     <nvlink target="0000:19:00.0" count="18" tclass="0x030200"/></gpu></pci>
//!   <nic><net name="eth0" dev="0" speed="25000" port="0"/></nic>
//! </cpu></system>"#, "example").unwrap();
//! let ranks: Vec<RankInfo> = (0..4)
//!     .map(|r| RankInfo {
//!         host: (r / 2) as u64,
//!         gpu: Some(if r % 2 == 0 { "0000:19:00.0" } else { "0000:3b:00.0" }.parse().unwrap()),
//!         numa: Some(0),
//!     })
//!     .collect();
//! let p = plan(&ranks, &HostSystems::uniform(sys), &TopoConfig::default()).unwrap();
//! assert_eq!(p.transport(0, 1).unwrap().transport, Transport::P2p(PathType::Nvl));
//! assert_eq!(p.transport(1, 2).unwrap().transport, Transport::Net);
//! assert_eq!(p.channels[0].ring.len(), 4);
//! assert_eq!(p.primary_nic[0], Some(0));
//! ```

pub mod config;
pub mod discover;
pub mod error;
pub mod link_order;
pub mod model;
pub mod nic;
pub mod paths;
pub mod plan;
pub mod report;
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
