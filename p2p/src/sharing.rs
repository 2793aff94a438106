//! Which ranks of a communicator share one GPU, worked out once at setup from the offers' PCI
//! bus ids and the ranks' process ids. Libccl allows ranks sharing a GPU (machines with fewer
//! GPUs than ranks; NVIDIA's NCCL refuses them), and three things depend on who shares it: how
//! many blocks a captured copy kernel may take (they must all fit on its SMs at once), whether
//! host-only mode may run (ranks of one process share its hardware queues), and whether a
//! captured handshake may spin in a kernel (another process's rank runs in time slices
//! without MPS).

/// The ranks on this rank's GPU (this rank included), all and those of this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GpuSharing {
    ranks: Vec<usize>,
    in_process: Vec<usize>,
}

impl GpuSharing {
    /// Rank `rank`'s view, from every rank's process id and its GPU's PCI bus id.
    pub(crate) fn of<B: PartialEq>(rank: usize, pids: &[u32], bus_ids: &[B]) -> GpuSharing {
        let ranks: Vec<usize> = (0..bus_ids.len())
            .filter(|&j| bus_ids[j] == bus_ids[rank])
            .collect();
        let in_process = ranks
            .iter()
            .copied()
            .filter(|&j| pids.get(j) == pids.get(rank))
            .collect();
        GpuSharing { ranks, in_process }
    }

    /// How many ranks use this GPU, this one included.
    pub(crate) fn count(&self) -> usize {
        self.ranks.len().max(1)
    }

    /// Whether a rank of another process uses this GPU.
    pub(crate) fn other_processes(&self) -> bool {
        self.ranks.len() > self.in_process.len()
    }

    /// Whether the engine may run on `rank`: not host-only while another rank of this process
    /// shares the GPU, since host-only keeps two more streams per rank waiting on host words,
    /// and in one process those share the GPU's hardware queues, where such a wait can hold up
    /// the very work of the other rank that would release it (tests/gpu/two_comms.c, two
    /// communicators of two ranks on one GPU in one process: hung within 3000 iterations).
    /// Those stay staged; every rank sees the same table, so all decide alike. Warns where
    /// ranks of this process share the queues.
    pub(crate) fn allows(
        &self,
        rank: usize,
        host_only: bool,
        max_connections: Option<&str>,
    ) -> bool {
        if host_only && self.in_process.len() > 1 {
            tracing::info!(
                "rank {rank}: cuda-ipc host-only off: another rank of this communicator shares \
                 this process's GPU (the staged path carries the communicator)"
            );
            return false;
        }
        warn_of_shared_queues(rank, &self.in_process, max_connections);
        true
    }
}

/// Hardware queues a device gives a process's streams when `CUDA_DEVICE_MAX_CONNECTIONS`
/// does not say.
const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// Warns (from the lowest of them) when several ranks of this communicator share one GPU in
/// this process (`sharing`, this rank's included) with fewer than 32 hardware queues: their
/// streams then share queues, and a stream waiting for a peer at the head of a queue holds up
/// whatever is queued behind it there, which may be the very work that would release it (four
/// ranks on one H100, an 8 MiB average all-reduce through the slots: hung at the default 8,
/// done in 2 s at 32; measured 2026-11-23). NCCL refuses two ranks on one GPU; libccl allows
/// it for machines with fewer GPUs than ranks. Returns whether it warned.
fn warn_of_shared_queues(rank: usize, sharing: &[usize], max_connections: Option<&str>) -> bool {
    let queues = max_connections
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let warn = sharing.len() > 1 && sharing.first() == Some(&rank) && queues < 32;
    if warn {
        tracing::warn!(
            "ranks {sharing:?} of this communicator share one GPU in this process, whose \
             streams then share {queues} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): a \
             stream waiting for a peer can hold up the work that would release it, and the \
             communicator can hang; set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process \
             starts CUDA"
        );
    }
    warn
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the lowest of several ranks sharing a GPU warns, and only below 32 queues (8 when
    /// unset or unreadable).
    #[test]
    fn ranks_sharing_a_gpu_are_warned_of_shared_queues() {
        assert!(warn_of_shared_queues(0, &[0, 2], None));
        assert!(warn_of_shared_queues(0, &[0, 1], Some("31")));
        assert!(warn_of_shared_queues(1, &[1, 3], Some("junk")));
        assert!(!warn_of_shared_queues(2, &[0, 2], None));
        assert!(!warn_of_shared_queues(0, &[0, 1], Some("32")));
        assert!(!warn_of_shared_queues(0, &[0], None));
    }

    fn bus(b: u8) -> [u8; 16] {
        [b; 16]
    }

    /// Four ranks in three processes on two GPUs: ranks 0 and 1 in one process and rank 3 in
    /// another on GPU a, rank 2 alone on GPU b.
    #[test]
    fn sharing_counts_ranks_and_processes_on_this_gpu() {
        let pids = [10, 10, 11, 12];
        let buses = [bus(1), bus(1), bus(2), bus(1)];
        let s = GpuSharing::of(0, &pids, &buses);
        assert_eq!((s.count(), s.other_processes()), (3, true));
        assert_eq!(s.in_process, vec![0, 1]);
        assert!(
            !s.allows(0, true, None),
            "host-only with a rank of this process"
        );
        assert!(s.allows(0, false, Some("32")));
        let alone = GpuSharing::of(2, &pids, &buses);
        assert_eq!((alone.count(), alone.other_processes()), (1, false));
        assert!(alone.allows(2, true, None));
        let other = GpuSharing::of(3, &pids, &buses);
        assert_eq!((other.count(), other.other_processes()), (3, true));
        assert!(
            other.allows(3, true, None),
            "host-only beside other processes' ranks"
        );
    }
}
