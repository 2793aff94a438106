//! The datapath's sizes: the largest datagram, the paths by default, the batches, and what
//! one UDP GSO send may carry.

/// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
pub const MAX_DATAGRAM: usize = 65507;
/// Default number of paths on this datapath: each is a socket, so keep fd counts modest.
pub const DEFAULT_UDP_PATHS: u16 = 8;
/// Messages per `recvmmsg` batch (and datagrams per `sendmmsg` batch of large datagrams).
pub const BATCH: usize = 32;
/// Most datagrams in one transmit batch (small datagrams pack densely into its buffer).
pub const TX_MAX: usize = 256;
/// Most segments of one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 or more).
pub(super) const GSO_MAX_SEGS: usize = 64;
/// Most payload bytes of one GSO send (an IPv4 datagram's length field).
pub(super) const GSO_MAX_BYTES: usize = MAX_DATAGRAM;
