//! The system model (CPUs, PCI switches, GPUs, NICs, NVLink), its discovery, the
//! `NCCL_TOPO_FILE` XML format, paths, and the ring/tree search that turns a system into
//! channels.
