//! The host path: two ranks move a share of their large direct transfers through pinned host
//! memory beside NVLink, each direction through a ring in shared memory. Here is where the
//! rings are and how a transfer is cut between NVLink and the ring; `direct` queues the copies.

/// Two ranks: a share of every large direct transfer goes GPU -> pinned host memory -> GPU
/// over the GPUs' PCIe links, beside the NVLink copy of the rest. One copy engine moves at
/// most ~390-395 GB/s over NVLink on the H200 pair whatever the streams (measured 2026-11-22);
/// PCIe adds ~50 GB/s each way (2026-11-23, `tests/gpu/pcie_side_path.cu`: 512 MiB one way
/// 394 -> 437 GB/s with 10% through host memory, both ways 389 -> 408 with 6-8%: the two GPUs'
/// PCIe traffic meets on the way to the CPU). The source's engine copies each chunk into a ring
/// in shared pinned memory (the destination's `/dev/shm` region, mapped by both) and flags
/// it ready in the destination's flag area; the destination's engine copies it out and
/// returns the slot's credit. Both sides cut a transfer alike from the first poster's size
/// and share alone (its post carries the share; a peer with another size or other settings
/// still sees the same flags), and one transfer never
/// needs more slots than the ring has, so no chunk waits for a later chunk of its own
/// transfer (which, with every stream merged into one queue, could wait for the peer's
/// queue behind our own wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostPath {
    /// The ring our transfers to the peer use (in the peer's region), as this process maps it.
    pub out_ring: u64,
    /// The ring the peer's transfers to us use (our region).
    pub in_ring: u64,
    /// Slot size (a multiple of 4 KiB) and count of each ring.
    pub slot_bytes: usize,
    pub slots: u32,
    /// (smallest transfer, share in thousandths) of a transfer whose group has no transfer
    /// the other way with the same peer, and of one whose group has (an exchange: both GPUs'
    /// PCIe traffic then meets on the way to the CPU, so less goes through host memory).
    /// Local settings: the first poster's share holds for both sides.
    pub one_way: (usize, u32),
    pub exchange: (usize, u32),
}

/// One transfer's share of the host path: bytes from `nvl` to `end` in chunks of `per`
/// (the last one shorter), chunk numbers from `first_chunk` on in this direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostShare {
    pub nvl: usize,
    pub end: usize,
    pub per: usize,
    pub first_chunk: u64,
}

impl HostShare {
    /// (chunk number, offset, length) of every chunk.
    pub fn chunks(self) -> impl Iterator<Item = (u64, usize, usize)> {
        (self.nvl..self.end)
            .step_by(self.per.max(1))
            .enumerate()
            .map(move |(i, off)| {
                (
                    self.first_chunk + i as u64,
                    off,
                    self.per.min(self.end - off),
                )
            })
    }

    pub fn count(&self) -> u64 {
        (self.end - self.nvl).div_ceil(self.per.max(1)) as u64
    }
}

impl HostPath {
    /// A share that sends the whole transfer through host memory, however long (the ring is
    /// then used in rounds): the data path of GPUs that cannot reach each other's memory, and
    /// on GPUs that can, a way to measure it. Any other share is at most half.
    pub const WHOLE: u32 = 1000;

    /// The share this side posts for a transfer of `bytes` (0: none).
    pub fn permille(&self, bytes: usize, exchange: bool) -> u32 {
        let (min, permille) = if exchange {
            self.exchange
        } else {
            self.one_way
        };
        if bytes < min.max(1) {
            0
        } else if permille >= Self::WHOLE {
            Self::WHOLE
        } else {
            permille.min(500)
        }
    }

    /// How a transfer whose first poster has `bytes` and posted `permille` is cut:
    /// `(nvl, per)` -- the bytes before `nvl` go over NVLink, the rest through host memory in
    /// chunks of `per` (at most `slots` of them, each at most a slot, at least four while
    /// they hold 1 MiB each: one chunk would copy into host memory and out again one after
    /// the other); with [`HostPath::WHOLE`] all of it from 0, in as many chunks as it takes.
    /// None: the whole transfer goes over NVLink.
    pub fn split(&self, bytes: usize, permille: u32) -> Option<(usize, usize)> {
        if self.slot_bytes < 4096 || self.slot_bytes % 4096 != 0 || self.slots == 0 {
            return None;
        }
        if permille >= Self::WHOLE {
            // Everything, in chunks of at most a slot (at least four while they hold 1 MiB).
            if bytes == 0 {
                return None;
            }
            let n = bytes.div_ceil(self.slot_bytes).max((bytes >> 20).min(4));
            let per = bytes
                .div_ceil(n.max(1))
                .next_multiple_of(4096)
                .min(self.slot_bytes);
            return Some((0, per));
        }
        let ring = self.slot_bytes.saturating_mul(self.slots as usize);
        let share = ((bytes as u128 * permille.min(500) as u128 / 1000) as usize).min(ring) & !4095;
        if share == 0 || share >= bytes {
            return None;
        }
        let n = share
            .div_ceil(self.slot_bytes)
            .max((share >> 20).min(4))
            .min(self.slots as usize)
            .max(1);
        let per = share
            .div_ceil(n)
            .next_multiple_of(4096)
            .min(self.slot_bytes);
        Some((bytes - share, per))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole share ([`HostPath::WHOLE`], any setting of 1000 or more) moves all of a transfer
    /// from 0, in chunks of at most a slot (at least four while they hold 1 MiB), however many
    /// rings that takes; any other share stays at most half.
    #[test]
    fn a_whole_share_moves_all_of_a_transfer_in_as_many_chunks_as_it_takes() {
        let h = HostPath {
            out_ring: 0,
            in_ring: 0,
            slot_bytes: 8 << 20,
            slots: 8,
            one_way: (1, 1000),
            exchange: (1, 5000),
        };
        assert_eq!(h.permille(1, false), HostPath::WHOLE);
        assert_eq!(h.permille(1, true), HostPath::WHOLE);
        assert_eq!(h.split(0, HostPath::WHOLE), None);
        for (bytes, count) in [
            (1usize, 1u64),
            (4096, 1),
            (2 << 20, 2),
            (4 << 20, 4),
            (64 << 20, 8),
            ((512 << 20) + 12_345, 65),
        ] {
            let (nvl, per) = h.split(bytes, 1000).unwrap();
            let share = HostShare {
                nvl,
                end: bytes,
                per,
                first_chunk: 5,
            };
            assert_eq!((nvl, share.count()), (0, count), "{bytes}");
            let mut at = 0;
            for (i, (c, off, len)) in share.chunks().enumerate() {
                assert_eq!((c, off), (5 + i as u64, at));
                assert!(len > 0 && len <= h.slot_bytes);
                at += len;
            }
            assert_eq!(at, bytes);
        }
        let (nvl, _) = h.split(64 << 20, 999).unwrap();
        assert_eq!((64 << 20) - nvl, 32 << 20, "999 is half at most");
    }

    /// The host path's share: none below a mode's threshold (just below / at it), the
    /// exchange's own; its cut: the share rounded down to 4 KiB and capped by the ring, at
    /// least four chunks while they hold 1 MiB each, at most `slots` of at most a slot, the
    /// NVLink part and the chunks covering the transfer exactly once.
    #[test]
    fn the_host_path_cuts_transfers_into_at_most_a_ring_of_chunks() {
        let h = HostPath {
            out_ring: 0,
            in_ring: 0,
            slot_bytes: 8 << 20,
            slots: 8,
            one_way: (64 << 20, 100),
            exchange: (256 << 20, 70),
        };
        assert_eq!(h.permille((64 << 20) - 1, false), 0);
        assert_eq!(h.permille(64 << 20, false), 100);
        assert_eq!(h.permille((256 << 20) - 1, true), 0);
        assert_eq!(h.permille(256 << 20, true), 70);
        let (nvl, per) = h.split(32 << 20, 80).unwrap();
        assert_eq!(
            (32 << 20) - nvl,
            (((32u64 << 20) * 80 / 1000) as usize) & !4095
        );
        assert_eq!(
            ((32 << 20) - nvl).div_ceil(per),
            2,
            "2.56 MiB: two chunks of 1 MiB or more"
        );
        for bytes in [
            32usize << 20,
            128 << 20,
            (512 << 20) + 12_345,
            4 << 30,
            usize::MAX / 2,
        ] {
            for permille in [1u32, 60, 100, 500, 900] {
                let Some((nvl, per)) = h.split(bytes, permille) else {
                    assert!(permille == 1 && bytes < 4 << 20, "{bytes} {permille}");
                    continue;
                };
                let share = HostShare {
                    nvl,
                    end: bytes,
                    per,
                    first_chunk: 7,
                };
                let chunks: Vec<_> = share.chunks().collect();
                assert!(!chunks.is_empty() && chunks.len() as u64 == share.count());
                assert!(
                    chunks.len() <= h.slots as usize,
                    "{bytes}: {} chunks",
                    chunks.len()
                );
                assert!(bytes - nvl <= h.slot_bytes * h.slots as usize);
                assert!(bytes - nvl <= bytes / 2, "at most half: {bytes} {permille}");
                let mut at = nvl;
                for (i, &(c, off, len)) in chunks.iter().enumerate() {
                    assert_eq!((c, off), (7 + i as u64, at));
                    assert!(len > 0 && len <= h.slot_bytes);
                    at += len;
                }
                assert_eq!(at, bytes);
            }
        }
        // 512 MiB at 10%: 51.2 MiB in seven chunks of at most 8 MiB.
        let (nvl, per) = h.split(512 << 20, 100).unwrap();
        assert_eq!(((512 << 20) - nvl).div_ceil(per), 7);
        // 128 MiB at 10%: 12.8 MiB in four chunks, not two.
        let (nvl, per) = h.split(128 << 20, 100).unwrap();
        assert_eq!(((128 << 20) - nvl).div_ceil(per), 4);
        // Nothing posted, or a share that rounds to nothing.
        assert_eq!(h.split(1 << 30, 0), None);
        assert_eq!(h.split(40_000, 80), None);
    }
}
