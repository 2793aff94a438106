//! Receiving on a link of several engines: the head message of each engine, its part header
//! checked, and the next frame (or part of one) to deliver in order.

use crate::{Error, Result};

use super::link::{Head, MptLink, Ready};
use super::parts::{part_range, PART_HEADER, PART_MAGIC};

impl MptLink {
    /// The completed head message of engine `e`, decoded and checked.
    fn head(&mut self, e: usize) -> Result<Option<Head>> {
        if let Some(h) = self.heads[e] {
            return Ok(Some(h));
        }
        let eng = &self.engines[e];
        let Some((slot, len, lent)) = eng.shared.head(false)? else {
            return Ok(None);
        };
        let bad = |m: String| Error::Protocol(format!("mpt link engine {e}: {m}"));
        if len < PART_HEADER {
            return Err(bad(format!(
                "{len}-byte message, shorter than a part header"
            )));
        }
        let mut b = [0u8; PART_HEADER];
        // SAFETY: `slot` is engine `e`'s oldest completed receive and is released only by
        // `pop` or `join_parts`, which clear `heads[e]` first; `len >= PART_HEADER`.
        b.copy_from_slice(unsafe { eng.shared.recv_bytes(eng.stride, slot, 0, PART_HEADER) });
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        let seq = u64::from_le_bytes(s);
        let total = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
        let (part, parts) = (usize::from(b[12]), usize::from(b[13]));
        if u16::from_le_bytes([b[14], b[15]]) != PART_MAGIC {
            return Err(bad(
                "bad part header magic (does the peer run one engine?)".into()
            ));
        }
        if parts == 0 || parts > self.engines.len() || part >= parts || total > self.max_frame {
            return Err(bad(format!(
                "bad part header: part {part} of {parts}, frame of {total} bytes"
            )));
        }
        let (lo, hi) = part_range(total, part, parts);
        if hi - lo != len - PART_HEADER {
            return Err(bad(format!(
                "part {part} of {parts} of a {total}-byte frame carries {} bytes, not {}",
                len - PART_HEADER,
                hi - lo
            )));
        }
        let h = Head {
            slot,
            lent,
            len,
            seq,
            total,
            part,
            parts,
        };
        self.heads[e] = Some(h);
        Ok(Some(h))
    }

    /// Finds the next piece to deliver: frame `next_frame` at an engine's head, or while a
    /// split frame is being delivered, its part `next_part` at the head of engine `next_part`.
    pub(super) fn find_next(&mut self) -> Result<Option<Ready>> {
        if self.next_part > 0 {
            let i = self.next_part;
            let Some(p) = self.head(i)? else {
                return Ok(None);
            };
            if p.seq != self.next_frame || p.part != i || (p.parts, p.total) != self.shape {
                return Err(Error::Protocol(format!(
                    "mpt link engine {i}: expected part {i}/{} of {}-byte frame {}, found part \
                     {}/{} of {}-byte frame {}",
                    self.shape.0, self.shape.1, self.next_frame, p.part, p.parts, p.total, p.seq
                )));
            }
            return Ok(Some(Ready {
                engine: i,
                slot: p.slot,
                len: p.len - PART_HEADER,
                lent: p.lent,
            }));
        }
        let mut found = None;
        for e in 0..self.engines.len() {
            let Some(h) = self.head(e)? else { continue };
            if h.seq < self.next_frame {
                return Err(Error::Protocol(format!(
                    "mpt link engine {e}: frame {} again (expected {})",
                    h.seq, self.next_frame
                )));
            }
            if h.seq == self.next_frame {
                found = Some((e, h));
                break;
            }
        }
        let Some((e, h)) = found else {
            return Ok(None);
        };
        // Part `i` travels on engine `i`; the frame starts once part 0 is in.
        if h.part != e && h.parts > 1 {
            return Err(Error::Protocol(format!(
                "mpt link engine {e}: part {}/{} of frame {} on the wrong engine",
                h.part, h.parts, h.seq
            )));
        }
        if h.part != 0 {
            return Ok(None);
        }
        self.shape = (h.parts, h.total);
        Ok(Some(Ready {
            engine: e,
            slot: h.slot,
            len: h.len - PART_HEADER,
            lent: h.lent,
        }))
    }
}
