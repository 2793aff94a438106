//! The 32-bit per-chunk control header (UCCL's immediate-data layout) and the rules that turn
//! its narrow wire fields back into full sequence numbers.
//!
//! ```text
//!  31   30 ........ 23  22 ........ 15  14 .. 11  10 ........ 0
//! +----+--------------+---------------+----------+--------------+
//! |last|  reserved(8) |    CSN (8)    |  RID (4) |   FID (11)   |
//! +----+--------------+---------------+----------+--------------+
//! ```
//!
//! * `last`: this chunk ends its message; the receiver learns the message length from the
//!   last chunk's `offset + len`.
//! * `reserved`: sent as zero, ignored on receipt (room for later extensions).
//! * `CSN`: chunk sequence number, the low 8 bits of a per-connection, per-direction 64-bit
//!   counter that numbers every *new* chunk (retransmissions reuse their CSN). See
//!   [`unwrap_csn`] for how the receiver recovers the full number.
//! * `RID`: request id, the low 4 bits of the message index (the n-th `send` on the
//!   connection). See [`unwrap_rid`].
//! * `FID`: flow id, the *receiver's* local id for the connection, so the receiving endpoint
//!   can demultiplex without any other state (up to 2048 flows per endpoint).
//!
//! # Wrapping and disambiguation
//!
//! *CSN.* Every new chunk takes the next value of a 64-bit per-direction sequence counter;
//! the CSN is its low 8 bits. The sender never has more than `W` (the window, at most 128 =
//! half the CSN space, as in UCCL) chunks outstanding past its oldest unacknowledged chunk
//! `snd_una`, and `snd_una <= rcv_nxt` always holds (the receiver's cumulative point is what
//! moves `snd_una`). So every chunk that is *new* to the receiver lies in
//! `[rcv_nxt, rcv_nxt + W)`.
//!
//! * Datagram datapaths (`udp`, `sim`) also carry bits 8..31 of the sequence number in the
//!   frame prefix (see [`frame`](super::frame)); the receiver expands the 32 bits to the
//!   value nearest `rcv_nxt` ([`unwrap_u32`]): below `rcv_nxt` or already in the SACK bitmap
//!   is a duplicate, `[rcv_nxt, rcv_nxt + W)` is new. A stale copy would have to be 2^31
//!   chunks (64 TiB) old to be mistaken.
//! * With only the 8-bit CSN (verbs immediate data) the receiver reads the distance
//!   `d = (csn - rcv_nxt) mod 256`: `d < W` is the chunk at `rcv_nxt + d`, anything else an
//!   old chunk (acknowledged and dropped) — [`unwrap_csn`]. This is ambiguous for a stale copy
//!   of chunk `s` (a spurious retransmission, a fabric duplicate) that arrives after the
//!   receiver has moved past `s + 256 - W`: it would pass for chunk `s + 256`. Reaching that
//!   point needs chunk `s + 256 - W` to have been sent, so the sender holds back a new chunk
//!   `n` until `csn_reuse_guard` (an upper bound on a datagram's lifetime in the fabric) has
//!   passed since the last transmission of chunk `n - (256 - W)`, the one sharing CSN
//!   `(n + W) mod 256`. It is the maximum-segment-lifetime argument of TCP, made explicit.
//!
//! *RID.* A sender has at most 16 messages in flight (`[oldest incomplete, +16)`), and the
//! receiver's oldest incomplete receive `base` is at least the sender's oldest incomplete
//! send (a message completes at the sender only after every chunk was acknowledged, i.e.
//! received). Duplicates are removed by CSN first, so a chunk that reaches RID decoding
//! belongs to a message in `[base, base + 16)`, and the RID picks exactly one.

use super::MptError;

/// Bits of the flow id field.
pub const FID_BITS: u32 = 11;
/// Bits of the request id field.
pub const RID_BITS: u32 = 4;
/// Bits of the chunk sequence number field.
pub const CSN_BITS: u32 = 8;
/// Largest flow id (2047).
pub const MAX_FLOW_ID: u16 = (1 << FID_BITS) - 1;
/// Number of distinct request ids, hence the most messages in flight per direction (16).
pub const RID_SPACE: u64 = 1 << RID_BITS;
/// Number of distinct CSNs (256).
pub const CSN_SPACE: u64 = 1 << CSN_BITS;
/// Largest window (outstanding chunks) the CSN space can disambiguate (128).
pub const MAX_WINDOW: u32 = 1 << (CSN_BITS - 1);

const RID_SHIFT: u32 = FID_BITS;
const CSN_SHIFT: u32 = RID_SHIFT + RID_BITS;
const RESERVED_SHIFT: u32 = CSN_SHIFT + CSN_BITS;
const LAST_SHIFT: u32 = 31;

/// The per-chunk control header, exactly the 32 bits of RDMA immediate data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkHeader(u32);

impl ChunkHeader {
    /// Builds a header; the reserved bits are zero.
    pub fn new(last: bool, csn: u8, rid: u8, fid: u16) -> Result<Self, MptError> {
        if u64::from(rid) >= RID_SPACE {
            return Err(MptError::RequestIdOutOfRange(rid));
        }
        if fid > MAX_FLOW_ID {
            return Err(MptError::FlowIdOutOfRange(fid));
        }
        Ok(ChunkHeader(
            (u32::from(last) << LAST_SHIFT)
                | (u32::from(csn) << CSN_SHIFT)
                | (u32::from(rid) << RID_SHIFT)
                | u32::from(fid),
        ))
    }

    /// Reads a received immediate value. Every 32-bit value is a valid header; reserved
    /// bits are kept but carry no meaning.
    pub const fn from_imm(imm: u32) -> Self {
        ChunkHeader(imm)
    }

    /// The immediate value to put on the wire.
    pub const fn imm(self) -> u32 {
        self.0
    }

    /// Whether this chunk ends its message.
    pub const fn last(self) -> bool {
        self.0 >> LAST_SHIFT != 0
    }

    /// The reserved byte (zero from this implementation).
    pub const fn reserved(self) -> u8 {
        (self.0 >> RESERVED_SHIFT) as u8
    }

    /// Low 8 bits of the chunk sequence number.
    pub const fn csn(self) -> u8 {
        (self.0 >> CSN_SHIFT) as u8
    }

    /// Low 4 bits of the message index.
    pub const fn rid(self) -> u8 {
        ((self.0 >> RID_SHIFT) & ((1 << RID_BITS) - 1)) as u8
    }

    /// The receiver's flow id.
    pub const fn fid(self) -> u16 {
        (self.0 & ((1 << FID_BITS) - 1)) as u16
    }
}

/// Where a received 8-bit CSN falls relative to the receiver's cumulative point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsnPosition {
    /// A chunk at this full sequence number `>= rcv_nxt` (inside the window).
    Ahead(u64),
    /// An old chunk (below `rcv_nxt`): a duplicate or late retransmission.
    Behind,
}

/// Recovers the full sequence number of a received CSN (see the module docs).
pub fn unwrap_csn(rcv_nxt: u64, csn: u8, window: u32) -> CsnPosition {
    let d = csn.wrapping_sub(rcv_nxt as u8);
    if u32::from(d) < window {
        CsnPosition::Ahead(rcv_nxt + u64::from(d))
    } else {
        CsnPosition::Behind
    }
}

/// Recovers the full message index of a received RID given the receiver's oldest incomplete
/// receive `base` (see the module docs).
pub fn unwrap_rid(base: u64, rid: u8) -> u64 {
    let d = u64::from(rid.wrapping_sub(base as u8)) & (RID_SPACE - 1);
    base + d
}

/// Recovers a full 64-bit counter from its low 32 bits, choosing the value nearest to
/// `reference` (used for the 32-bit cumulative fields of acknowledgements).
pub fn unwrap_u32(reference: u64, low: u32) -> u64 {
    let delta = i64::from(low.wrapping_sub(reference as u32) as i32);
    reference.wrapping_add(delta as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_uccl() {
        let h = ChunkHeader::new(true, 0xAB, 0x5, 0x7FF).unwrap();
        assert_eq!(h.imm(), (1 << 31) | (0xAB << 15) | (0x5 << 11) | 0x7FF);
        assert_eq!(
            (h.last(), h.csn(), h.rid(), h.fid(), h.reserved()),
            (true, 0xAB, 5, 2047, 0)
        );
        let h = ChunkHeader::from_imm(0x7F80_0000);
        assert_eq!(
            (h.last(), h.reserved(), h.csn(), h.rid(), h.fid()),
            (false, 0xFF, 0, 0, 0)
        );
        assert!(ChunkHeader::new(false, 0, 16, 0).is_err());
        assert!(ChunkHeader::new(false, 0, 0, 2048).is_err());
    }

    #[test]
    fn every_field_round_trips() {
        for last in [false, true] {
            for csn in [0u8, 1, 127, 128, 255] {
                for rid in 0..16u8 {
                    for fid in [0u16, 1, 1024, 2047] {
                        let h = ChunkHeader::new(last, csn, rid, fid).unwrap();
                        let back = ChunkHeader::from_imm(h.imm());
                        assert_eq!(
                            (back.last(), back.csn(), back.rid(), back.fid()),
                            (last, csn, rid, fid)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn csn_unwrap_across_wrap() {
        // rcv_nxt = 250, window 128: CSN 250..=255 and 0..=121 are ahead.
        assert_eq!(unwrap_csn(250, 250, 128), CsnPosition::Ahead(250));
        assert_eq!(unwrap_csn(250, 3, 128), CsnPosition::Ahead(259));
        assert_eq!(unwrap_csn(250, 121, 128), CsnPosition::Ahead(377));
        assert_eq!(unwrap_csn(250, 122, 128), CsnPosition::Behind);
        assert_eq!(unwrap_csn(250, 249, 128), CsnPosition::Behind);
        // Boundary of a smaller window.
        assert_eq!(unwrap_csn(0, 7, 8), CsnPosition::Ahead(7));
        assert_eq!(unwrap_csn(0, 8, 8), CsnPosition::Behind);
    }

    #[test]
    fn rid_unwrap() {
        assert_eq!(unwrap_rid(0, 0), 0);
        assert_eq!(unwrap_rid(14, 15), 15);
        assert_eq!(unwrap_rid(14, 0), 16);
        assert_eq!(unwrap_rid(14, 13), 29);
        assert_eq!(unwrap_rid(1_000_003, (1_000_003u64 % 16) as u8), 1_000_003);
    }

    #[test]
    fn u32_unwrap() {
        assert_eq!(unwrap_u32(10, 12), 12);
        assert_eq!(unwrap_u32(10, 5), 5);
        assert_eq!(
            unwrap_u32(u64::from(u32::MAX) - 1, 3),
            u64::from(u32::MAX) + 4
        );
        assert_eq!(unwrap_u32(1 << 40, 7), (1 << 40) + 7);
    }
}
