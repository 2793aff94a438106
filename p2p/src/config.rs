//! The engine's settings, as its owner read them from the parameter registry (`ccl` builds
//! one in one place; see `CCL_IPC_*`, `CCL_GRAPH_*` and the NCCL variables named below in
//! docs/ENV.md). Values are kept as the registry gives them: the engine clamps them where it
//! uses them, so an out-of-range setting behaves as it always has.

/// Everything the copy-engine engine reads from the environment.
#[derive(Debug, Clone, Default)]
pub struct P2pConfig {
    /// Whether CUDA is usable here at all (a driver, a device, not `CCL_DEVICE=host`).
    pub gpu_available: bool,
    /// `CCL_IPC_DISABLE`.
    pub disable: bool,
    /// `CCL_IPC_HOST_ONLY` (auto, 0, 1).
    pub host_only: String,
    /// `NCCL_SHM_DISABLE`.
    pub shm_disable: bool,
    /// `NCCL_P2P_DISABLE`.
    pub p2p_disable: bool,
    /// `NCCL_P2P_LEVEL` as set (None: unset).
    pub p2p_level: Option<String>,
    /// `CCL_IPC_FAULT_NO_PEER_ACCESS`.
    pub fault_no_peer_access: bool,
    /// `CCL_KERNEL_PRELOAD`.
    pub kernel_preload: bool,
    /// `CCL_TIMEOUT_S`.
    pub timeout_s: i64,

    /// `CCL_IPC_CHUNK_BYTES`, `CCL_IPC_SLOTS`, `CCL_IPC_SINGLE_STREAM_BYTES`, `CCL_IPC_LL_BYTES`,
    /// `CCL_IPC_RX_LANES`: the staged protocol's receive area and lanes.
    pub chunk_bytes: i64,
    pub slots: i64,
    pub single_stream_bytes: i64,
    /// None: `auto` ([`P2pConfig::ll_reduce_for`]).
    pub ll_bytes: Option<i64>,
    pub rx_lanes: i64,
    /// `CCL_IPC_LANE_PRIORITY`.
    pub lane_priority: String,
    /// `CCL_IPC_WAIT_KERNEL`, `CCL_IPC_COPY_KERNEL`.
    pub wait_kernel: String,
    pub copy_kernel: String,

    /// `CCL_IPC_DIRECT`, `CCL_IPC_DIRECT_SINGLE_BYTES`: transfers between user buffers.
    pub direct: bool,
    pub direct_single_bytes: i64,
    /// `CCL_IPC_DIRECT_REDUCE_BYTES`, `_MULTI`, `_WRITE_ALL`, `_PIECE_BYTES`, `_TAKEOVER_US`,
    /// `_TAKEOVER_MAX_BYTES`: reductions reading peers' inputs.
    pub direct_reduce_bytes: i64,
    pub direct_reduce_multi: bool,
    pub direct_reduce_write_all: bool,
    /// `CCL_IPC_DIRECT_REDUCE_MAILED`: a rank whose peers have not all posted queues a
    /// reduction kernel that learns their buffers from a mailbox slot ([`crate::mail`]).
    pub direct_reduce_mailed: bool,
    pub direct_reduce_piece_bytes: i64,
    pub direct_reduce_takeover_us: String,
    pub direct_reduce_takeover_max_bytes: i64,
    /// `CCL_IPC_LL_EXCHANGE_BYTES` (None: `auto`, see [`P2pConfig::ll_exchange_for`]).
    pub ll_exchange_bytes: Option<i64>,
    /// `CCL_IPC_LL_PACK_BYTES`: low-latency operations moving at most this many bytes per
    /// peer go in packed lines.
    pub ll_pack_bytes: i64,
    /// `CCL_IPC_P2P_KERNEL_BYTES`: sends and receives of at most this many bytes take the
    /// point-to-point kernel (within the exchange limit; at most one slot).
    pub p2p_kernel_bytes: i64,
    /// `CCL_IPC_LL_BLOCK_BYTES` (0: always the most blocks), `CCL_IPC_LL_THREADS` (0: the
    /// kernels' default), `CCL_IPC_LL_ACK_FENCE=0`: the low-latency kernels' grid and
    /// acknowledgement fence.
    pub ll_block_bytes: i64,
    pub ll_threads: i64,
    pub ll_ack_unfenced: bool,
    /// `CCL_IPC_LL_TWO_SHOT_BYTES` (0: never): low-latency all-reduces of more than two ranks
    /// from this many bytes go in two shots.
    pub ll_two_shot_bytes: i64,
    /// `CCL_IPC_BCAST_RELAY_BYTES`, `CCL_IPC_BCAST_RELAY_CHUNK_BYTES`.
    pub bcast_relay_bytes: i64,
    pub bcast_relay_chunk_bytes: i64,
    /// `CCL_IPC_REMOTE_COPY`, `CCL_IPC_REMOTE_COPY_MIN_BYTES`.
    pub remote_copy: bool,
    pub remote_copy_min_bytes: i64,
    /// `CCL_IPC_BATCH_COPIES`: which communicators queue a group's direct copies as one
    /// driver batch.
    pub batch_copies: BatchCopies,
    /// `CCL_IPC_BATCH_LOCAL_MAX_BYTES` (None: `auto`): the most bytes of local copies a batch
    /// holds ([`BatchCopies::local_max`]).
    pub batch_local_max: Option<i64>,
    /// `CCL_IPC_LOCAL_COPY_LANES`.
    pub local_copy_lanes: i64,
    /// `CCL_IPC_PUSH_WAIT_US`, `_BUSY_US`, `_MIN_BYTES`, `_ADAPT`, `CCL_IPC_EXCHANGE_WAIT_US`:
    /// how long a direct transfer's caller waits for its peer's call.
    pub push_wait_us: i64,
    pub push_wait_busy_us: i64,
    pub push_wait_min_bytes: i64,
    pub push_wait_adapt: bool,
    pub exchange_wait_us: i64,
    /// `CCL_IPC_MAILED_PUSH`, `CCL_IPC_MAIL_BLOCKS`: sends posted before their receives are
    /// pushed by a kernel once the receiver posts, instead of waiting ([`crate::mail`]).
    pub mailed_push: bool,
    pub mail_blocks: i64,
    /// `CCL_IPC_EAGER_SEND`, `CCL_IPC_EAGER_MIN_BYTES`: sends posted before their receives go
    /// through the receiver's slots (or, smaller, are pulled) instead of waiting
    /// (`rendezvous::go_eager`): `1`, `0`, or `auto` (on where `CUDA_DEVICE_MAX_CONNECTIONS=1`).
    pub eager_send: String,
    pub eager_min_bytes: i64,
    /// `CCL_IPC_EAGER_COPY_KERNEL`: a receiver copies eager chunks out with the wait-copy kernel.
    pub eager_copy_kernel: bool,

    /// `CCL_IPC_HOST_PATH_*`: the share of large transfers sent through pinned host memory
    /// beside NVLink.
    pub host_path_slot_bytes: i64,
    pub host_path_slots: i64,
    pub host_path_when_limited: bool,
    pub host_path_min_bytes: i64,
    pub host_path_permille: i64,
    pub host_path_exchange_min_bytes: i64,
    pub host_path_exchange_permille: i64,
    /// `CCL_IPC_HOST_ONLY_STAGE_IN`.
    pub host_only_stage_in: bool,

    /// `CCL_GRAPH_LL`, `CCL_GRAPH_DIRECT`, `CCL_GRAPH_ONE_SHOT_BYTES`, `CCL_GRAPH_FUSED`,
    /// `CCL_GRAPH_FUSED_COPY_BYTES`, `CCL_GRAPH_COPY_BLOCKS`, `CCL_GRAPH_HANDSHAKE_KERNEL`:
    /// captured groups.
    pub graph_ll: bool,
    pub graph_direct: bool,
    pub graph_one_shot_bytes: i64,
    pub graph_fused: bool,
    pub graph_fused_copy_bytes: i64,
    pub graph_copy_blocks: i64,
    pub graph_handshake_kernel: bool,
    /// `CCL_IPC_SYMMETRIC_WINDOWS`: symmetric windows agreed at registration (module `windows`).
    pub symmetric_windows: bool,
}

/// Which communicators queue a group's direct copies as one `cuMemcpyBatchAsync`
/// (`CCL_IPC_BATCH_COPIES`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BatchCopies {
    Off,
    /// `auto`: more than two ranks, where one batch per GPU moved 351-384 GB/s against 190-208
    /// for a stream per peer (four H200s, a probe with no library, 2026-11-28); two ranks too
    /// unless a group's own-block copies exceed [`TWO_RANK_BATCH_LOCAL_MAX`].
    #[default]
    Auto,
    /// Any number of ranks, local copies of any size (unless `CCL_IPC_BATCH_LOCAL_MAX_BYTES`
    /// says otherwise).
    Every,
}

/// With two ranks, the most bytes of local copies (an all-gather's or all-to-all's own block,
/// a gather's root's) a batch takes under `auto`. On two H200s (2026-11-30) a gather's root
/// copying its own 8 MiB block as a batch of one took 7% longer than alone, and batching
/// everything ran all-gathers and all-to-alls of 16 and 64 MiB at 0.73-0.84 of a lane per
/// direction (the own block no longer beside the push), 4 MiB at 0.98-1.01. Batches cut host time per call
/// (16 MiB all-gathers 19.6 -> 14.1 us, broadcasts 18.8 -> 12.3) and ran sends of 64 KiB -
/// 16 MiB 1.07-1.23x (`MODE=batch2`, `MODE=batchgate`, docs/device-runs/2026-11-30-batch2/).
pub const TWO_RANK_BATCH_LOCAL_MAX: usize = 2 << 20;

impl BatchCopies {
    /// The setting's value: `auto` (None), 0 (off) or any other integer (every count).
    pub fn from_setting(v: Option<i64>) -> BatchCopies {
        match v {
            None => BatchCopies::Auto,
            Some(0) => BatchCopies::Off,
            Some(_) => BatchCopies::Every,
        }
    }

    /// Whether a communicator of `n` ranks batches, and then the most bytes of local copies
    /// a batch may hold: `set` (`CCL_IPC_BATCH_LOCAL_MAX_BYTES`, negative as 0) or, left
    /// `auto`, [`TWO_RANK_BATCH_LOCAL_MAX`] with two ranks under `auto` and no limit otherwise
    /// (more than two ranks are not yet measured with a limit).
    pub fn local_max(self, n: usize, set: Option<i64>) -> Option<usize> {
        let auto = match self {
            BatchCopies::Off => return None,
            BatchCopies::Auto if n == 2 => TWO_RANK_BATCH_LOCAL_MAX,
            BatchCopies::Auto | BatchCopies::Every => usize::MAX,
        };
        Some(set.map_or(auto, |v| usize::try_from(v).unwrap_or(0)))
    }
}

/// The largest low-latency area per sender (two buffers of it per sender, by operation
/// parity, so a rank's area is `2 x ranks x this`): 8 MiB by default with two ranks (32 MiB
/// of GPU memory per rank); up to 16 MiB a setting can try the kernels where copy engines take
/// over by default.
pub const LL_AREA_MAX: usize = 16 << 20;

impl P2pConfig {
    /// Whether direct reductions over `n` ranks use the many-source kernel
    /// ([`ccl_cuda::cuda::source::KernelOp::ReduceN`]): to read every input at once
    /// (`CCL_IPC_DIRECT_REDUCE_MULTI`, three ranks or more) or to write an all-reduce's slice
    /// into every output (`CCL_IPC_DIRECT_REDUCE_WRITE_ALL`, two ranks or more); up to its
    /// most sources either way.
    pub fn reduce_n_for(&self, n: usize) -> bool {
        let max = ccl_cuda::cuda::source::REDUCE_N_MAX;
        (self.direct_reduce_multi && (3..=max).contains(&n))
            || (self.direct_reduce_write_all && (2..=max).contains(&n))
    }

    /// The exchange threshold with `n` ranks (`CCL_IPC_LL_EXCHANGE_BYTES`; 0: never). `auto`
    /// is the crossover measured with NVIDIA nccl-tests beside NCCL on two H200s: two ranks
    /// take the kernel up to 4 MiB per rank. At 2 MiB the kernel ran all-gather, all-to-all,
    /// broadcast, gather, scatter 1.03-1.27x NCCL against 0.65-0.86x on copy engines
    /// (2026-11-29, docs/device-runs/2026-11-29-x2/x2-midband.md); at 4 MiB per rank
    /// (2026-11-30, docs/device-runs/2026-11-30-defaults/exbig/) it matched copy engines in
    /// nccl-tests (8 MiB all-gathers 1.34-1.43x, gathers 1.08-1.32x) and took Megatron-core's
    /// tensor-parallel all-gathers (4 MiB per rank at micro-batch 2) off the push wait: host
    /// time in libccl's calls 994 -> 296 ms per 20 iterations. 8 and 16 MiB lost in CUDA graphs
    /// (all-to-all 16 MiB 0.88x, 32 MiB 0.79x). More ranks keep 512 KiB until a machine with
    /// more GPUs measures theirs.
    pub fn ll_exchange_for(&self, n: usize) -> usize {
        match self.ll_exchange_bytes {
            Some(b) => b.max(0) as usize,
            None if n == 2 => 4 << 20,
            None => 512 << 10,
        }
    }

    /// The low-latency all-reduce and reduce threshold with `n` ranks (`CCL_IPC_LL_BYTES`, at
    /// most [`LL_AREA_MAX`], whole 16-byte words; 0: never). `auto` is the crossover measured
    /// with NVIDIA nccl-tests beside NCCL on two H200s: two ranks take the kernel up to 8 MiB
    /// (2026-11-30, docs/device-runs/2026-11-30-pack/, `MODE=llbig8`: all-reduce 8 MiB 1.13x
    /// NCCL captured, 1.14x eager, on it against 0.94x / 0.97x on copy engines; reduce 1.17x /
    /// 1.14x against 1.06x / 0.91x; 16 MiB loses, all-reduce 0.86-0.90x); more ranks keep 1 MiB
    /// until a machine with more GPUs measures theirs.
    pub fn ll_reduce_for(&self, n: usize) -> usize {
        self.ll_limit(n, 8 << 20)
    }

    /// The low-latency reduce-scatter threshold, bytes per rank, with `n` ranks: as
    /// [`Self::ll_reduce_for`], but `auto` stops at 4 MiB per rank with two ranks: parts of 8
    /// MiB ran 1.09-1.11x NCCL on the kernel against 1.25-1.55x on copy engines (same run),
    /// parts of 4 MiB 1.23-1.28x on the kernel.
    pub fn ll_scatter_for(&self, n: usize) -> usize {
        self.ll_limit(n, 4 << 20)
    }

    /// `CCL_IPC_LL_BYTES` as set, or `auto`: `two` with two ranks, 1 MiB with more; at most
    /// [`LL_AREA_MAX`], whole 16-byte words.
    fn ll_limit(&self, n: usize, two: usize) -> usize {
        let b = match self.ll_bytes {
            Some(b) => b.max(0) as usize,
            None if n == 2 => two,
            None => 1 << 20,
        };
        b.min(LL_AREA_MAX) & !15
    }

    /// Bytes per sender of this rank's low-latency area with `n` ranks: the largest
    /// low-latency all-reduce (`CCL_IPC_LL_BYTES`) or exchange it takes, at most
    /// [`LL_AREA_MAX`].
    pub fn ll_area_for(&self, n: usize) -> usize {
        self.ll_reduce_for(n)
            .max(self.ll_exchange_for(n))
            .min(LL_AREA_MAX)
            & !15
    }

    /// Threads per block of the low-latency kernels (`CCL_IPC_LL_THREADS`): a multiple of
    /// 32 in 32 - 1024 (a block's protocol needs a thread per rank, at most 8 here).
    pub fn ll_threads_per_block(&self) -> u32 {
        if self.ll_threads <= 0 {
            return ccl_cuda::cuda::source::LL_THREADS;
        }
        (self.ll_threads.clamp(32, 1024) as u32) & !31
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` is 4 MiB with two ranks and 512 KiB with more; a number is taken as it is (a
    /// negative one as 0: never); the area holds the larger of the exchange and the
    /// all-reduce limits, at most [`LL_AREA_MAX`], in whole 16-byte words.
    #[test]
    fn exchange_threshold_and_area_follow_the_rank_count_and_the_settings() {
        let mut c = P2pConfig {
            ll_bytes: Some(1 << 20),
            ..P2pConfig::default()
        };
        assert_eq!(
            (c.ll_exchange_for(2), c.ll_exchange_for(4)),
            (4 << 20, 512 << 10)
        );
        assert_eq!((c.ll_area_for(2), c.ll_area_for(8)), (4 << 20, 1 << 20));
        c.ll_exchange_bytes = Some(0);
        assert_eq!((c.ll_exchange_for(2), c.ll_area_for(2)), (0, 1 << 20));
        c.ll_exchange_bytes = Some(-5);
        assert_eq!(c.ll_exchange_for(2), 0);
        c.ll_exchange_bytes = Some(64 << 20);
        assert_eq!(c.ll_area_for(3), LL_AREA_MAX);
        c.ll_exchange_bytes = Some((1 << 20) + 100);
        c.ll_bytes = Some(0);
        assert_eq!(c.ll_area_for(2), (1 << 20) + 96);
    }

    /// `auto` takes all-reduces up to 8 MiB and reduce-scatters up to 4 MiB per rank with two
    /// ranks, both 1 MiB with more; a number is taken as it is for both, at most 16 MiB, in
    /// whole 16-byte words; the area holds it.
    #[test]
    fn the_all_reduce_threshold_follows_the_rank_count_and_the_setting() {
        let mut c = P2pConfig::default();
        assert_eq!((c.ll_reduce_for(2), c.ll_reduce_for(3)), (8 << 20, 1 << 20));
        assert_eq!(
            (c.ll_scatter_for(2), c.ll_scatter_for(3)),
            (4 << 20, 1 << 20)
        );
        assert_eq!((c.ll_area_for(2), c.ll_area_for(8)), (8 << 20, 1 << 20));
        c.ll_bytes = Some(100);
        assert_eq!((c.ll_reduce_for(2), c.ll_scatter_for(2)), (96, 96));
        c.ll_bytes = Some(-1);
        assert_eq!(c.ll_reduce_for(4), 0);
        c.ll_bytes = Some(64 << 20);
        assert_eq!(c.ll_reduce_for(2), LL_AREA_MAX);
    }

    /// `auto` batches any group with more than two ranks and, with two, a group whose own
    /// blocks beside its transfers stay small; 0 never; any other number everything.
    #[test]
    fn batch_copies_follow_the_setting_and_the_rank_count() {
        let max = |v, n| BatchCopies::from_setting(v).local_max(n, None);
        assert_eq!(max(None, 2), Some(TWO_RANK_BATCH_LOCAL_MAX));
        assert_eq!(max(None, 3), Some(usize::MAX));
        assert_eq!((max(Some(0), 2), max(Some(0), 8)), (None, None));
        assert_eq!(
            (max(Some(1), 2), max(Some(1), 8)),
            (Some(usize::MAX), Some(usize::MAX))
        );
        assert_eq!(P2pConfig::default().batch_copies, BatchCopies::Auto);
        // An explicit limit holds at any count, for either mode that batches.
        let auto = BatchCopies::Auto;
        assert_eq!(auto.local_max(4, Some(2 << 20)), Some(2 << 20));
        assert_eq!(auto.local_max(2, Some(0)), Some(0));
        assert_eq!(auto.local_max(2, Some(-5)), Some(0));
        assert_eq!(
            BatchCopies::Every.local_max(8, Some(1 << 20)),
            Some(1 << 20)
        );
        assert_eq!(BatchCopies::Off.local_max(2, Some(1 << 20)), None);
    }
}
