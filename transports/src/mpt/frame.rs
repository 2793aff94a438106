//! Frames: what a datagram carries, and their byte encoding for datagram datapaths.
//!
//! A data chunk is the 32-bit [`ChunkHeader`] plus its placement (byte offset inside the
//! message) plus payload. On verbs the header is the immediate data and the placement is the
//! RDMA write's remote address, so nothing else travels; on datagram datapaths (`udp`, `sim`)
//! the encoding below puts both in a 16-byte prefix. Control frames (acknowledgements and
//! probes) are small fixed-size datagrams of their own.
//!
//! ```text
//! data  (16 B + payload): type=1 | seq_hi u24 | imm u32 | offset u64 | payload ...
//!                         (type=4: same without seq_hi, bytes 1..4 zero)
//! ack   (44 B)          : type=2 | flags (1 echo, 2 duplicate) | flow u16 | cum u32 | sack u128 | echo_csn u32
//!                         | echo_path u16 | 0 0 | posted u32 | credit u32 | 0 0 0 0
//! probe (8 B)           : type=3 | 0 | flow u16 | 0 0 0 0
//! ```
//! All integers are big-endian (network order, like RDMA immediate data).
//!
//! `seq_hi` is bits 8..31 of the chunk's sequence number, whose low 8 bits are the header's
//! CSN. Datagram datapaths have room for it, so their receivers disambiguate sequence
//! numbers over 32 bits and a stale duplicate can never pass for a new chunk. Datapaths that
//! carry only the 32-bit immediate (verbs) leave it out (`None`); the receiver then falls
//! back to the 8-bit rule, which the sender protects with `MptConfig::csn_reuse_guard` (see
//! [`header`](super::header)).

use super::header::ChunkHeader;
use super::MptError;

/// Bytes in front of a data chunk's payload.
pub const DATA_HEADER_LEN: usize = 16;
/// Bytes of an encoded acknowledgement.
pub const ACK_LEN: usize = 44;
/// Bytes of an encoded probe.
pub const PROBE_LEN: usize = 8;
/// Longest control frame; scratch buffers for `encode` need at least this much.
pub const MAX_CONTROL_LEN: usize = ACK_LEN;

const TYPE_DATA: u8 = 1;
const TYPE_ACK: u8 = 2;
const TYPE_PROBE: u8 = 3;
const TYPE_DATA_NARROW: u8 = 4;
const ACK_FLAG_ECHO: u8 = 1;
const ACK_FLAG_DUPLICATE: u8 = 2;

/// One chunk of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataFrame {
    /// Control header (immediate data).
    pub header: ChunkHeader,
    /// Bits 8..31 of the sequence number (24 bits), where the datapath carries them.
    pub seq_hi: Option<u32>,
    /// Byte offset of this chunk inside its message.
    pub offset: u64,
    /// Payload length in bytes.
    pub len: u32,
}

/// Which chunk caused an acknowledgement, so the sender can time it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo {
    /// Low 32 bits of the full sequence number of the chunk.
    pub seq: u32,
    /// Path the chunk arrived on.
    pub path: u16,
    /// Microseconds the receiver held the acknowledgement back (`MptConfig::ack_delay`),
    /// which the sender takes off its round-trip sample.
    pub held_us: u16,
}

/// Acknowledgement, window update and credit grant from a receiver to its sender.
///
/// Every field is cumulative, so a lost acknowledgement is repaired by the next one and a
/// duplicated or reordered one changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckFrame {
    /// The *sender's* flow id (the flow id of the connection that receives this frame).
    pub flow: u16,
    /// Low 32 bits of `rcv_nxt`: every chunk before it was received.
    pub cum: u32,
    /// Selective acknowledgement: bit `i` set = chunk `cum + 1 + i` was received.
    pub sack: u128,
    /// The chunk that triggered this acknowledgement, if any.
    pub echo: Option<Echo>,
    /// A chunk the receiver already had arrived since its previous acknowledgement (like a
    /// TCP D-SACK): a retransmission was spurious, or the fabric duplicated a chunk. The
    /// sender widens its reordering window.
    pub duplicate: bool,
    /// Low 32 bits of the number of receives posted so far (rendezvous: the sender starts
    /// message `n` only once `posted > n`).
    pub posted: u32,
    /// Low 32 bits of the credit granted so far, in bytes (receiver-driven congestion
    /// control; zero and unused otherwise).
    pub credit: u32,
}

/// A sender waiting for the peer's window update asks for an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeFrame {
    /// The receiver's flow id.
    pub flow: u16,
}

/// Anything the core sends or receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A chunk of data.
    Data(DataFrame),
    /// An acknowledgement / window update / credit grant.
    Ack(AckFrame),
    /// A request for an acknowledgement.
    Probe(ProbeFrame),
}

impl Frame {
    /// The flow id of the connection this frame is addressed to, for demultiplexing.
    pub fn destination_flow(&self) -> u16 {
        match self {
            Frame::Data(d) => d.header.fid(),
            Frame::Ack(a) => a.flow,
            Frame::Probe(p) => p.flow,
        }
    }

    /// Bytes `encode` writes (for data: the prefix only, the payload follows).
    pub fn encoded_len(&self) -> usize {
        match self {
            Frame::Data(_) => DATA_HEADER_LEN,
            Frame::Ack(_) => ACK_LEN,
            Frame::Probe(_) => PROBE_LEN,
        }
    }

    /// Writes the frame (for data: the 16-byte prefix) into `out`; returns the bytes written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, MptError> {
        let n = self.encoded_len();
        let out = out
            .get_mut(..n)
            .ok_or(MptError::BufferTooSmall { need: n })?;
        out.fill(0);
        match self {
            Frame::Data(d) => {
                match d.seq_hi {
                    Some(hi) => {
                        out[0] = TYPE_DATA;
                        out[1..4].copy_from_slice(&(hi & 0xFF_FFFF).to_be_bytes()[1..4]);
                    }
                    None => out[0] = TYPE_DATA_NARROW,
                }
                out[4..8].copy_from_slice(&d.header.imm().to_be_bytes());
                out[8..16].copy_from_slice(&d.offset.to_be_bytes());
            }
            Frame::Ack(a) => {
                out[0] = TYPE_ACK;
                out[2..4].copy_from_slice(&a.flow.to_be_bytes());
                out[4..8].copy_from_slice(&a.cum.to_be_bytes());
                out[8..24].copy_from_slice(&a.sack.to_be_bytes());
                if a.duplicate {
                    out[1] |= ACK_FLAG_DUPLICATE;
                }
                if let Some(e) = a.echo {
                    out[1] |= ACK_FLAG_ECHO;
                    out[24..28].copy_from_slice(&e.seq.to_be_bytes());
                    out[28..30].copy_from_slice(&e.path.to_be_bytes());
                    out[30..32].copy_from_slice(&e.held_us.to_be_bytes());
                }
                out[32..36].copy_from_slice(&a.posted.to_be_bytes());
                out[36..40].copy_from_slice(&a.credit.to_be_bytes());
            }
            Frame::Probe(p) => {
                out[0] = TYPE_PROBE;
                out[2..4].copy_from_slice(&p.flow.to_be_bytes());
            }
        }
        Ok(n)
    }

    /// The destination flow of the frame `head` starts with, read from those first bytes
    /// only (a data frame's prefix, or a whole control frame): what a datapath that peeks at
    /// a datagram from an unknown sender needs to decide whether it belongs to this
    /// connection. `None` if `head` starts no frame.
    pub fn peek_flow(head: &[u8]) -> Option<u16> {
        let len = match *head.first()? {
            TYPE_ACK => ACK_LEN,
            TYPE_PROBE => PROBE_LEN,
            _ => DATA_HEADER_LEN,
        };
        let (frame, _) = Frame::decode(head.get(..len)?).ok()?;
        Some(frame.destination_flow())
    }

    /// Parses a datagram; returns the frame and, for data, its payload.
    pub fn decode(buf: &[u8]) -> Result<(Frame, &[u8]), MptError> {
        let ty = *buf.first().ok_or(MptError::Malformed("empty datagram"))?;
        match ty {
            TYPE_DATA | TYPE_DATA_NARROW => {
                let payload = buf
                    .get(DATA_HEADER_LEN..)
                    .ok_or(MptError::Malformed("short data frame"))?;
                let len = u32::try_from(payload.len())
                    .map_err(|_| MptError::Malformed("data frame too long"))?;
                let seq_hi =
                    (ty == TYPE_DATA).then(|| u32::from_be_bytes([0, buf[1], buf[2], buf[3]]));
                let frame = DataFrame {
                    header: ChunkHeader::from_imm(be_u32(buf, 4)?),
                    seq_hi,
                    offset: be_u64(buf, 8)?,
                    len,
                };
                Ok((Frame::Data(frame), payload))
            }
            TYPE_ACK => {
                if buf.len() != ACK_LEN {
                    return Err(MptError::Malformed("ack frame length"));
                }
                let flags = buf[1];
                let echo = if flags & ACK_FLAG_ECHO != 0 {
                    Some(Echo {
                        seq: be_u32(buf, 24)?,
                        path: be_u16(buf, 28)?,
                        held_us: be_u16(buf, 30)?,
                    })
                } else {
                    None
                };
                let mut sack = [0u8; 16];
                sack.copy_from_slice(&buf[8..24]);
                let frame = AckFrame {
                    duplicate: flags & ACK_FLAG_DUPLICATE != 0,
                    flow: be_u16(buf, 2)?,
                    cum: be_u32(buf, 4)?,
                    sack: u128::from_be_bytes(sack),
                    echo,
                    posted: be_u32(buf, 32)?,
                    credit: be_u32(buf, 36)?,
                };
                Ok((Frame::Ack(frame), &[]))
            }
            TYPE_PROBE => {
                if buf.len() != PROBE_LEN {
                    return Err(MptError::Malformed("probe frame length"));
                }
                Ok((
                    Frame::Probe(ProbeFrame {
                        flow: be_u16(buf, 2)?,
                    }),
                    &[],
                ))
            }
            _ => Err(MptError::Malformed("unknown frame type")),
        }
    }
}

fn field<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], MptError> {
    let mut out = [0u8; N];
    out.copy_from_slice(
        buf.get(at..at + N)
            .ok_or(MptError::Malformed("truncated field"))?,
    );
    Ok(out)
}

fn be_u16(buf: &[u8], at: usize) -> Result<u16, MptError> {
    field(buf, at).map(u16::from_be_bytes)
}

fn be_u32(buf: &[u8], at: usize) -> Result<u32, MptError> {
    field(buf, at).map(u32::from_be_bytes)
}

fn be_u64(buf: &[u8], at: usize) -> Result<u64, MptError> {
    field(buf, at).map(u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_round_trip() {
        for seq_hi in [None, Some(0), Some(0xAB_CDEF)] {
            let f = Frame::Data(DataFrame {
                header: ChunkHeader::new(true, 200, 3, 17).unwrap(),
                seq_hi,
                offset: 0x0102_0304_0506_0708,
                len: 5,
            });
            let mut buf = [0u8; DATA_HEADER_LEN + 5];
            assert_eq!(f.encode(&mut buf).unwrap(), DATA_HEADER_LEN);
            buf[DATA_HEADER_LEN..].copy_from_slice(b"hello");
            let (back, payload) = Frame::decode(&buf).unwrap();
            assert_eq!(back, f);
            assert_eq!(payload, b"hello");
            assert_eq!(back.destination_flow(), 17);
        }
    }

    #[test]
    fn control_round_trip() {
        let echo = Some(Echo {
            seq: 0xDEAD_BEEF,
            path: 255,
            held_us: 65_535,
        });
        for (echo, duplicate) in [(None, false), (echo, true), (echo, false)] {
            let f = Frame::Ack(AckFrame {
                duplicate,
                flow: 2047,
                cum: 77,
                sack: (1u128 << 127) | 5,
                echo,
                posted: 9,
                credit: 123_456,
            });
            let mut buf = [0u8; MAX_CONTROL_LEN];
            let n = f.encode(&mut buf).unwrap();
            assert_eq!(Frame::decode(&buf[..n]).unwrap(), (f, &[][..]));
        }
        let p = Frame::Probe(ProbeFrame { flow: 4 });
        let mut buf = [0u8; PROBE_LEN];
        p.encode(&mut buf).unwrap();
        assert_eq!(Frame::decode(&buf).unwrap().0, p);
    }

    #[test]
    fn malformed_inputs_are_errors() {
        assert!(Frame::decode(&[]).is_err());
        assert!(Frame::decode(&[9, 0, 0, 0]).is_err());
        assert!(Frame::decode(&[TYPE_DATA, 0, 0]).is_err());
        assert!(Frame::decode(&[TYPE_ACK; 10]).is_err());
        assert!(Frame::Probe(ProbeFrame { flow: 1 })
            .encode(&mut [0u8; 3])
            .is_err());
    }
}
