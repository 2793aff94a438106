//! Datapath fragments: a datagram larger than the path MTU leaves as MTU-sized fragments,
//! each behind a [`FragHdr`], and is joined again on arrival (per path, a [`Partial`]).

use super::limits::{GSO_MAX_SEGS, MAX_DATAGRAM};

/// First byte of a datapath fragment (no frame of the protocol starts with it).
pub(super) const FRAG_TYPE: u8 = 0xF7;
/// Datapath fragment header: type u8 | index u8 | count u8 | 0 | stride u16 | 0 0 | id u32
/// (big-endian). `stride` is the payload of every fragment but the last, so fragment `i`
/// carries the datagram's bytes from `i * stride`.
pub(super) const FRAG_HDR: usize = 12;

/// A fragmented datagram being joined on one path, across receive calls.
#[derive(Default)]
pub(super) struct Partial {
    pub(super) id: u32,
    pub(super) count: u8,
    /// Fragments present, bit per index.
    pub(super) have: u64,
    /// Datagram length, once the last fragment is in.
    pub(super) len: usize,
    /// Allocated on first use: most paths never see a fragment that needs it.
    pub(super) buf: Vec<u8>,
}

/// A parsed datapath fragment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FragHdr {
    pub(super) index: u8,
    pub(super) count: u8,
    pub(super) stride: u16,
    pub(super) id: u32,
}

impl FragHdr {
    pub(super) fn encode(&self) -> [u8; FRAG_HDR] {
        let mut h = [0u8; FRAG_HDR];
        h[0] = FRAG_TYPE;
        h[1] = self.index;
        h[2] = self.count;
        h[4..6].copy_from_slice(&self.stride.to_be_bytes());
        h[8..12].copy_from_slice(&self.id.to_be_bytes());
        h
    }

    /// The header of `dg` and where its payload goes in the datagram, if `dg` is a
    /// well-formed fragment.
    pub(super) fn parse(dg: &[u8]) -> Option<(FragHdr, usize)> {
        if dg.len() < FRAG_HDR || dg[0] != FRAG_TYPE {
            return None;
        }
        let h = FragHdr {
            index: dg[1],
            count: dg[2],
            stride: u16::from_be_bytes([dg[4], dg[5]]),
            id: u32::from_be_bytes([dg[8], dg[9], dg[10], dg[11]]),
        };
        let body = dg.len() - FRAG_HDR;
        let last = h.index.checked_add(1) == Some(h.count);
        let ok = h.count >= 2
            && usize::from(h.count) <= GSO_MAX_SEGS
            && h.index < h.count
            && h.stride > 0
            && if last {
                body <= usize::from(h.stride)
            } else {
                body == usize::from(h.stride)
            };
        let off = usize::from(h.index) * usize::from(h.stride);
        (ok && off + body <= MAX_DATAGRAM).then_some((h, off))
    }
}
