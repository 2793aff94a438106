//! Write-with-immediate codec and work-request ids.
//!
//! *Immediate.* A data chunk travels as one `IBV_WR_RDMA_WRITE_WITH_IMM`: the payload is
//! written at `remote_base + offset` of the posted receive buffer and the 32-bit immediate
//! is the mpt [`ChunkHeader`] (last | reserved | CSN | RID | FID, see
//! [`header`](crate::mpt::header)). `imm_data` is `__be32` in both `ibv_send_wr` (offset 36)
//! and `ibv_wc` (offset 24), so the header goes on the wire in network order, the same
//! byte order as the datagram encoding of [`frame`](crate::mpt::frame). Only the 8-bit CSN
//! travels (no `seq_hi`): connections on this datapath run with `csn_reuse_guard`, as the
//! `sim` fabric's immediate-only mode does.
//!
//! *Work-request ids.* `wr_id` is the only cookie a completion returns, so it names the
//! connection, the path (queue pair) and the chunk:
//!
//! ```text
//!  63 62  61 ............ 40  39 ..... 32  31 .............. 0
//! +-----+--------------------+------------+--------------------+
//! |kind |  connection (22)   |  path (8)  | chunk seq (low 32) |
//! +-----+--------------------+------------+--------------------+
//! ```
//!
//! The chunk field holds the low 32 bits of the full 64-bit sequence number; the datapath
//! widens it against its `snd_una` like the datagram receiver does ([`unwrap_u32`]).
//!
//! [`unwrap_u32`]: crate::mpt::header::unwrap_u32

use crate::mpt::frame::DataFrame;
use crate::mpt::header::ChunkHeader;
use crate::mpt::path::PathId;

use super::VerbsError;

/// The value to store in `ibv_send_wr.imm_data` (network order).
pub fn imm_to_wire(header: ChunkHeader) -> u32 {
    header.imm().to_be()
}

/// The header carried by `ibv_wc.imm_data` (network order).
pub fn imm_from_wire(raw: u32) -> ChunkHeader {
    ChunkHeader::from_imm(u32::from_be(raw))
}

/// Remote address of a chunk's RDMA write: `base + offset`, checked against the posted
/// receive buffer's length.
pub fn write_target(
    frame: &DataFrame,
    remote_base: u64,
    remote_len: u64,
) -> Result<u64, VerbsError> {
    let end = frame.offset.checked_add(u64::from(frame.len));
    match end {
        Some(end) if end <= remote_len => {
            remote_base
                .checked_add(frame.offset)
                .ok_or(VerbsError::InvalidParam {
                    name: "remote address",
                    value: format!("{remote_base:#x}+{}", frame.offset),
                })
        }
        _ => Err(VerbsError::InvalidParam {
            name: "chunk beyond remote buffer",
            value: format!(
                "offset {} len {} buffer {remote_len}",
                frame.offset, frame.len
            ),
        }),
    }
}

/// The frame a receive completion stands for. `offset` comes from the datapath's own
/// placement bookkeeping (the write already landed there); the completion supplies the
/// immediate and `byte_len`.
pub fn frame_from_completion(imm_raw: u32, byte_len: u32, offset: u64) -> DataFrame {
    DataFrame {
        header: imm_from_wire(imm_raw),
        seq_hi: None,
        offset,
        len: byte_len,
    }
}

/// What a work request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrKind {
    /// A data chunk (write-with-immediate).
    Data = 0,
    /// A control frame (acknowledgement, credit) sent as a small SEND.
    Control = 1,
    /// A posted receive (consumed by a write-with-immediate or a SEND).
    Recv = 2,
    /// A path probe.
    Probe = 3,
}

/// Bits of the connection field.
pub const WR_CONN_BITS: u32 = 22;
/// Bits of the path field.
pub const WR_PATH_BITS: u32 = 8;
const CHUNK_BITS: u32 = 32;
const PATH_SHIFT: u32 = CHUNK_BITS;
const CONN_SHIFT: u32 = PATH_SHIFT + WR_PATH_BITS;
const KIND_SHIFT: u32 = CONN_SHIFT + WR_CONN_BITS;

/// A decoded `wr_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrId {
    /// Purpose.
    pub kind: WrKind,
    /// Connection index on this engine (22 bits).
    pub conn: u32,
    /// Path (queue pair) within the connection (0..=255).
    pub path: PathId,
    /// Low 32 bits of the chunk's sequence number (or a receive slot).
    pub chunk: u32,
}

impl WrId {
    /// Packs into the 64-bit `wr_id`.
    pub fn pack(self) -> Result<u64, VerbsError> {
        if self.conn >> WR_CONN_BITS != 0 {
            return Err(VerbsError::WrIdOutOfRange {
                field: "connection",
                value: u64::from(self.conn),
            });
        }
        if self.path.0 >> WR_PATH_BITS != 0 {
            return Err(VerbsError::WrIdOutOfRange {
                field: "path",
                value: u64::from(self.path.0),
            });
        }
        Ok(((self.kind as u64) << KIND_SHIFT)
            | (u64::from(self.conn) << CONN_SHIFT)
            | (u64::from(self.path.0) << PATH_SHIFT)
            | u64::from(self.chunk))
    }

    /// Unpacks a `wr_id` (every 64-bit value decodes).
    pub fn unpack(v: u64) -> WrId {
        let kind = match v >> KIND_SHIFT {
            0 => WrKind::Data,
            1 => WrKind::Control,
            2 => WrKind::Recv,
            _ => WrKind::Probe,
        };
        WrId {
            kind,
            conn: ((v >> CONN_SHIFT) & ((1 << WR_CONN_BITS) - 1)) as u32,
            path: PathId(((v >> PATH_SHIFT) & ((1 << WR_PATH_BITS) - 1)) as u16),
            chunk: v as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn immediate_is_the_chunk_header_in_network_order() {
        let h = ChunkHeader::new(true, 0xa5, 9, 0x7ff).unwrap();
        let wire = imm_to_wire(h);
        assert_eq!(wire.to_ne_bytes(), h.imm().to_be_bytes());
        let back = imm_from_wire(wire);
        assert_eq!(back, h);
        assert!(back.last());
        assert_eq!((back.csn(), back.rid(), back.fid()), (0xa5, 9, 0x7ff));
        for imm in [0u32, 1, 0x8000_0000, 0xdead_beef, u32::MAX] {
            assert_eq!(
                imm_from_wire(imm_to_wire(ChunkHeader::from_imm(imm))).imm(),
                imm
            );
        }
    }

    #[test]
    fn completion_rebuilds_a_narrow_data_frame() {
        let h = ChunkHeader::new(false, 3, 1, 42).unwrap();
        let f = frame_from_completion(imm_to_wire(h), 32768, 65536);
        assert_eq!(f.header, h);
        assert_eq!(f.seq_hi, None, "only the 8-bit CSN travels on verbs");
        assert_eq!((f.offset, f.len), (65536, 32768));
        assert_eq!(write_target(&f, 0x1000_0000, 1 << 20).unwrap(), 0x1001_0000);
        assert!(write_target(&f, 0x1000_0000, 65536 + 32767).is_err());
        let far = DataFrame {
            offset: u64::MAX,
            ..f
        };
        assert!(write_target(&far, 0, u64::MAX).is_err());
    }

    #[test]
    fn wr_id_round_trips() {
        for kind in [WrKind::Data, WrKind::Control, WrKind::Recv, WrKind::Probe] {
            for conn in [0u32, 1, 0x2a_aaaa, (1 << WR_CONN_BITS) - 1] {
                for path in [0u16, 1, 128, 255] {
                    for chunk in [0u32, 7, 0x8000_0000, u32::MAX] {
                        let id = WrId {
                            kind,
                            conn,
                            path: PathId(path),
                            chunk,
                        };
                        assert_eq!(WrId::unpack(id.pack().unwrap()), id);
                    }
                }
            }
        }
    }

    #[test]
    fn wr_id_rejects_fields_that_do_not_fit() {
        let ok = WrId {
            kind: WrKind::Data,
            conn: 0,
            path: PathId(0),
            chunk: 0,
        };
        assert!(matches!(
            WrId {
                conn: 1 << WR_CONN_BITS,
                ..ok
            }
            .pack(),
            Err(VerbsError::WrIdOutOfRange {
                field: "connection",
                ..
            })
        ));
        assert!(matches!(
            WrId {
                path: PathId(256),
                ..ok
            }
            .pack(),
            Err(VerbsError::WrIdOutOfRange { field: "path", .. })
        ));
    }
}
