//! Hierarchical collectives as pure plans, for communicators whose ranks sit on several hosts:
//! where each rank sits (`placement`) and, per collective, which stages run on a host's
//! sub-communicator and on the one across the hosts, with which counts, buffers and offsets
//! (`plan`). The communicator crate makes the sub-communicators and runs the stages.

pub mod placement;
pub mod plan;
