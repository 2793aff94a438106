//! The header that opens every operation's first frame: the API call that produced it (kind,
//! dtype, reduction, count, root, sequence number), so a receiver that expects another call
//! names both instead of corrupting memory or hanging.

use ccl_cuda::DataType;

pub const HDR_BYTES: usize = 48;
const HDR_MAGIC: u32 = 0x4343_4f50; // "CCOP"

/// The identity of an operation on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHeader {
    pub kind: u8,
    pub dtype: u8,
    pub red: u8,
    pub root: i32,
    pub seq: u64,
    pub count: u64,
    pub bytes: u64,
}

/// The root a send/receive header carries when the GPU path made it of a reduction.
const P2P_FOLD_ROOT: i32 = -2;

impl OpHeader {
    /// The header of the `seq`-th send or receive between two ranks, of `bytes` bytes;
    /// `fold`: one the GPU path made of a reduction it folds (`Task::fold`), marked by its root.
    pub(super) fn p2p(seq: u64, bytes: usize, fold: bool) -> OpHeader {
        OpHeader {
            kind: 9,
            dtype: 0,
            red: 0,
            root: if fold { P2P_FOLD_ROOT } else { -1 },
            seq,
            count: bytes as u64,
            bytes: bytes as u64,
        }
    }

    pub(super) fn encode(&self, out: &mut [u8]) {
        out[..HDR_BYTES].fill(0);
        out[0..4].copy_from_slice(&HDR_MAGIC.to_le_bytes());
        out[4] = self.kind;
        out[5] = self.dtype;
        out[6] = self.red;
        out[8..12].copy_from_slice(&self.root.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.count.to_le_bytes());
        out[32..40].copy_from_slice(&self.bytes.to_le_bytes());
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < HDR_BYTES {
            return None;
        }
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        if u32at(0) != HDR_MAGIC {
            return None;
        }
        Some(OpHeader {
            kind: b[4],
            dtype: b[5],
            red: b[6],
            root: u32at(8) as i32,
            seq: u64at(16),
            count: u64at(24),
            bytes: u64at(32),
        })
    }

    pub(super) fn describe(&self) -> String {
        let kind = match self.kind {
            1 => "AllReduce",
            2 => "Broadcast",
            3 => "Reduce",
            4 => "AllGather",
            5 => "ReduceScatter",
            6 => "AlltoAll",
            7 => "Gather",
            8 => "Scatter",
            9 if self.root == P2P_FOLD_ROOT => "Send/Recv of a reduction folded on the GPU",
            9 => "Send/Recv",
            _ => "?",
        };
        let dt = DataType::from_raw(i32::from(self.dtype))
            .map(|d| d.name())
            .unwrap_or("?");
        format!(
            "{kind}(#{}, count={}, {dt}, op={}, root={}, {} bytes on this link)",
            self.seq, self.count, self.red, self.root, self.bytes
        )
    }
}
