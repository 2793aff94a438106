//! What a rank offers its peers at setup, as bytes on the control plane.

use ccl_cuda::cuda::IPC_HANDLE_SIZE;

use crate::config::P2pConfig;

/// What a rank offers its peers at setup.
pub(crate) struct Offer {
    pub(crate) capable: bool,
    /// Wants direct transfers (`CCL_IPC_DIRECT`): used only if every rank does.
    pub(crate) direct: bool,
    pub(crate) dev: i32,
    pub(crate) chunk: u64,
    pub(crate) slots: u32,
    pub(crate) single_max: u64,
    /// Bytes per sender of this rank's low-latency area, and its largest low-latency
    /// all-reduce (`CCL_IPC_LL_BYTES`): the smallest over the ranks of each is used.
    pub(crate) ll_area: u64,
    pub(crate) ll_reduce: u64,
    /// Its largest low-latency reduce-scatter, bytes per rank: the smallest over the ranks
    /// is used.
    pub(crate) ll_scatter: u64,
    /// `CCL_IPC_P2P_KERNEL_BYTES` (0: off): the smallest over the ranks is used.
    pub(crate) p2p_max: u64,
    /// `CCL_IPC_DIRECT_REDUCE_BYTES` (0: off): used only if every rank has it on.
    pub(crate) direct_reduce: u64,
    /// `CCL_IPC_LL_EXCHANGE_BYTES` (0: off): the smallest over the ranks is used.
    pub(crate) ll_exchange_max: u64,
    /// `CCL_IPC_LL_PACK_BYTES` (0: off): the smallest over the ranks is used.
    pub(crate) ll_pack: u64,
    /// `CCL_IPC_LL_TWO_SHOT_BYTES` (0: off): the smallest over the ranks is used.
    pub(crate) ll_two_shot: u64,
    /// `CCL_IPC_LL_BLOCK_BYTES` (0: always the most blocks): the smallest over the ranks is
    /// used.
    pub(crate) ll_block: u64,
    /// `CCL_IPC_BCAST_RELAY_BYTES` (0: off, on any rank) and `_CHUNK_BYTES`.
    pub(crate) relay_min: u64,
    pub(crate) relay_chunk: u64,
    /// A descriptor kept open during setup: peers in other processes try to take it, to learn
    /// whether VMM memory (shared by descriptor) can travel between the ranks (-1: none).
    pub(crate) probe_fd: i32,
    pub(crate) flags_ptr: u64,
    pub(crate) scratch_ptr: u64,
    pub(crate) ll_ptr: u64,
    pub(crate) flags_handle: [u8; IPC_HANDLE_SIZE],
    pub(crate) scratch_handle: [u8; IPC_HANDLE_SIZE],
    pub(crate) ll_handle: [u8; IPC_HANDLE_SIZE],
    /// Wants remote copies (`CCL_IPC_REMOTE_COPY`): used only if every rank does.
    pub(crate) remote: bool,
    /// Wants mailed direct reductions (`CCL_IPC_DIRECT_REDUCE_MAILED`): used only if every
    /// rank does.
    pub(crate) mailed_reduce: bool,
    /// Host-only mode (`CCL_IPC_HOST_ONLY`): every rank must offer it alike.
    pub(crate) host_only: bool,
    /// The GPU's PCI bus id, NUL-padded: a peer in another process finds our GPU by it (device
    /// numbers differ between processes under `CUDA_VISIBLE_DEVICES`).
    pub(crate) bus_id: [u8; BUS_ID_BYTES],
    /// The host path's ring geometry (no slots: off, or this rank could not make its ring):
    /// used only if both ranks offer the same.
    pub(crate) host: HostRing,
}

impl Offer {
    pub(crate) fn none() -> Offer {
        Offer {
            capable: false,
            direct: false,
            dev: -1,
            chunk: 0,
            slots: 0,
            single_max: 0,
            ll_area: 0,
            ll_reduce: 0,
            ll_scatter: 0,
            p2p_max: 0,
            direct_reduce: 0,
            ll_exchange_max: 0,
            ll_pack: 0,
            ll_two_shot: 0,
            ll_block: 0,
            relay_min: 0,
            relay_chunk: 0,
            probe_fd: -1,
            flags_ptr: 0,
            scratch_ptr: 0,
            ll_ptr: 0,
            flags_handle: [0; IPC_HANDLE_SIZE],
            scratch_handle: [0; IPC_HANDLE_SIZE],
            ll_handle: [0; IPC_HANDLE_SIZE],
            remote: false,
            mailed_reduce: false,
            host_only: false,
            bus_id: [0; BUS_ID_BYTES],
            host: HostRing::default(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_BYTES);
        b.push(
            self.capable as u8
                | (self.direct as u8) << 1
                | (self.remote as u8) << 2
                | (self.host_only as u8) << 3
                | (self.mailed_reduce as u8) << 4,
        );
        b.extend_from_slice(&self.dev.to_le_bytes());
        b.extend_from_slice(&self.chunk.to_le_bytes());
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&self.single_max.to_le_bytes());
        b.extend_from_slice(&self.ll_area.to_le_bytes());
        b.extend_from_slice(&self.flags_ptr.to_le_bytes());
        b.extend_from_slice(&self.scratch_ptr.to_le_bytes());
        b.extend_from_slice(&self.ll_ptr.to_le_bytes());
        b.extend_from_slice(&self.flags_handle);
        b.extend_from_slice(&self.scratch_handle);
        b.extend_from_slice(&self.ll_handle);
        b.extend_from_slice(&self.direct_reduce.to_le_bytes());
        b.extend_from_slice(&self.probe_fd.to_le_bytes());
        b.extend_from_slice(&self.ll_exchange_max.to_le_bytes());
        b.extend_from_slice(&self.relay_min.to_le_bytes());
        b.extend_from_slice(&self.relay_chunk.to_le_bytes());
        b.extend_from_slice(&self.bus_id);
        b.extend_from_slice(&self.host.slot_bytes.to_le_bytes());
        b.extend_from_slice(&self.host.slots.to_le_bytes());
        b.extend_from_slice(&self.ll_reduce.to_le_bytes());
        b.extend_from_slice(&self.ll_pack.to_le_bytes());
        b.extend_from_slice(&self.ll_two_shot.to_le_bytes());
        b.extend_from_slice(&self.ll_block.to_le_bytes());
        b.extend_from_slice(&self.ll_scatter.to_le_bytes());
        b.extend_from_slice(&self.p2p_max.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Offer> {
        if b.len() != OFFER_BYTES {
            return None;
        }
        let u32_at = |o: usize| b.get(o..o + 4).and_then(|s| s.try_into().ok());
        let u64_at = |o: usize| b.get(o..o + 8).and_then(|s| s.try_into().ok());
        let mut o = Offer::none();
        o.capable = b[0] & 1 == 1;
        o.direct = b[0] & 2 == 2;
        o.remote = b[0] & 4 == 4;
        o.host_only = b[0] & 8 == 8;
        o.mailed_reduce = b[0] & 16 == 16;
        o.dev = i32::from_le_bytes(u32_at(1)?);
        o.chunk = u64::from_le_bytes(u64_at(5)?);
        o.slots = u32::from_le_bytes(u32_at(13)?);
        o.single_max = u64::from_le_bytes(u64_at(17)?);
        o.ll_area = u64::from_le_bytes(u64_at(25)?);
        o.flags_ptr = u64::from_le_bytes(u64_at(33)?);
        o.scratch_ptr = u64::from_le_bytes(u64_at(41)?);
        o.ll_ptr = u64::from_le_bytes(u64_at(49)?);
        let h = |i: usize| b.get(57 + i * IPC_HANDLE_SIZE..57 + (i + 1) * IPC_HANDLE_SIZE);
        o.flags_handle.copy_from_slice(h(0)?);
        o.scratch_handle.copy_from_slice(h(1)?);
        o.ll_handle.copy_from_slice(h(2)?);
        o.direct_reduce = u64::from_le_bytes(u64_at(57 + 3 * IPC_HANDLE_SIZE)?);
        o.probe_fd = i32::from_le_bytes(u32_at(65 + 3 * IPC_HANDLE_SIZE)?);
        o.ll_exchange_max = u64::from_le_bytes(u64_at(69 + 3 * IPC_HANDLE_SIZE)?);
        o.relay_min = u64::from_le_bytes(u64_at(77 + 3 * IPC_HANDLE_SIZE)?);
        o.relay_chunk = u64::from_le_bytes(u64_at(85 + 3 * IPC_HANDLE_SIZE)?);
        let at = 93 + 3 * IPC_HANDLE_SIZE;
        o.bus_id.copy_from_slice(b.get(at..at + BUS_ID_BYTES)?);
        let at = at + BUS_ID_BYTES;
        o.host = HostRing {
            slot_bytes: u64::from_le_bytes(u64_at(at)?),
            slots: u32::from_le_bytes(u32_at(at + 8)?),
        };
        o.ll_reduce = u64::from_le_bytes(u64_at(at + 12)?);
        o.ll_pack = u64::from_le_bytes(u64_at(at + 20)?);
        o.ll_two_shot = u64::from_le_bytes(u64_at(at + 28)?);
        o.ll_block = u64::from_le_bytes(u64_at(at + 36)?);
        o.ll_scatter = u64::from_le_bytes(u64_at(at + 44)?);
        o.p2p_max = u64::from_le_bytes(u64_at(at + 52)?);
        Some(o)
    }
}

pub(crate) const BUS_ID_BYTES: usize = 16;

const OFFER_BYTES: usize = 1
    + 4
    + 8
    + 4
    + 8
    + 8
    + 8
    + 8
    + 8
    + 3 * IPC_HANDLE_SIZE
    + 8
    + 4
    + 8
    + 16
    + BUS_ID_BYTES
    + 12
    + 8
    + 8
    + 8
    + 8
    + 8
    + 8;

/// A PCI bus id as the offer carries it (lower case, NUL-padded, cut to [`BUS_ID_BYTES`]).
pub(crate) fn bus_id_bytes(id: &str) -> [u8; BUS_ID_BYTES] {
    let mut b = [0u8; BUS_ID_BYTES];
    for (d, c) in b.iter_mut().zip(id.to_ascii_lowercase().bytes()) {
        *d = c;
    }
    b
}

/// The geometry of a rank's host-path ring (`CCL_IPC_HOST_PATH_SLOT_BYTES`, `_SLOTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HostRing {
    pub(crate) slot_bytes: u64,
    pub(crate) slots: u32,
}

impl HostRing {
    pub(crate) fn from_config(cfg: &P2pConfig) -> HostRing {
        HostRing {
            slot_bytes: (cfg.host_path_slot_bytes.clamp(4096, 1 << 30) as u64) & !4095,
            slots: cfg.host_path_slots.clamp(2, 64) as u32,
        }
    }

    pub(crate) fn ring_bytes(&self) -> usize {
        self.slot_bytes as usize * self.slots as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's exchange table pairs up with its peers': what rank a sends to b is what b
    /// expects from a, and every rank's local copy is its own part.
    #[test]
    fn offers_round_trip_and_reject_other_lengths() {
        let mut o = Offer::none();
        o.capable = true;
        o.direct = true;
        o.dev = 3;
        o.chunk = 8 << 20;
        o.slots = 4;
        o.single_max = 1 << 19;
        o.ll_area = 2 << 20;
        o.ll_reduce = 1 << 20;
        o.ll_scatter = 1 << 19;
        o.p2p_max = 65536;
        o.direct_reduce = 2 << 20;
        o.probe_fd = 17;
        o.ll_exchange_max = 4096;
        o.flags_ptr = 0x7000_0000_1000;
        o.ll_handle = [7; IPC_HANDLE_SIZE];
        o.remote = true;
        o.bus_id = bus_id_bytes("0000:3B:00.0");
        o.relay_chunk = 1 << 24;
        o.host = HostRing {
            slot_bytes: 8 << 20,
            slots: 8,
        };
        let b = o.encode();
        assert_eq!(b.len(), OFFER_BYTES);
        let d = Offer::decode(&b).unwrap();
        assert!(d.capable && d.direct && d.remote);
        assert_eq!(&d.bus_id[..13], b"0000:3b:00.0\0", "lower case, NUL-padded");
        assert_eq!(d.relay_chunk, 1 << 24);
        assert_eq!(
            (
                d.dev,
                d.chunk,
                d.slots,
                d.single_max,
                d.ll_area,
                d.ll_reduce,
                d.direct_reduce,
                d.flags_ptr
            ),
            (
                3,
                8 << 20,
                4,
                1 << 19,
                2 << 20,
                1 << 20,
                2 << 20,
                0x7000_0000_1000
            )
        );
        assert_eq!(d.ll_handle, [7; IPC_HANDLE_SIZE]);
        assert_eq!((d.probe_fd, d.ll_exchange_max), (17, 4096));
        assert_eq!((d.ll_scatter, d.p2p_max), (1 << 19, 65536));
        assert_eq!(d.host, o.host);
        assert!(!d.host_only);
        assert!(Offer::decode(&b[..b.len() - 1]).is_none());
        // Host-only travels in the flag byte, beside the others.
        o.host_only = true;
        let d = Offer::decode(&o.encode()).unwrap();
        assert!(d.host_only && d.capable && d.direct && d.remote);
    }
}
