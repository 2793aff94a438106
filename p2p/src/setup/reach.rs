//! How the engine may reach the peer GPUs' memory, from the settings alone.

use crate::config::P2pConfig;

/// How the engine may reach the peer GPUs' memory, from the settings alone (every rank reads
/// the same ones; the offers check that they agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerReach {
    /// Mapped peer memory (CUDA IPC, or plain pointers in one process).
    Mapped,
    /// Shared host memory only: flag words, receive slots and the host path's ring.
    HostOnly,
    /// Not at all: GPU operations are staged through the host transports.
    None,
}

impl PeerReach {
    /// `forced` is `CCL_IPC_HOST_ONLY` ([`forced_host_only`]), `p2p_off` whether the user turned
    /// GPU peer-to-peer off, `shm_off` whether `NCCL_SHM_DISABLE` asks for sockets between local
    /// ranks. Host-only is a shared-memory transport on copy engines, so `auto` takes it where
    /// NVIDIA's NCCL would take its shared-memory transport: peer-to-peer off, shared memory on.
    pub(crate) fn from_settings(
        forced: Option<bool>,
        n: usize,
        p2p_off: bool,
        shm_off: bool,
    ) -> Self {
        let host_only = n >= 2 && forced.unwrap_or(p2p_off && !shm_off);
        match (host_only, p2p_off) {
            (true, _) => PeerReach::HostOnly,
            (false, false) => PeerReach::Mapped,
            (false, true) => PeerReach::None,
        }
    }

    /// What to try when every rank offered mapped peer memory but some rank could not map it
    /// (GPUs without peer access: consumer cards, many VMs, GPUs hidden from each other):
    /// host-only, where `auto` would have chosen it had the settings said so, as NCCL falls
    /// back to its shared-memory transport there.
    pub(crate) fn when_unmappable(
        self,
        forced: Option<bool>,
        n: usize,
        shm_off: bool,
    ) -> Option<Self> {
        (self == PeerReach::Mapped && forced.is_none() && n >= 2 && !shm_off)
            .then_some(PeerReach::HostOnly)
    }
}

/// `CCL_IPC_HOST_ONLY` as forced on or off (`1`, `0`), or left to `auto` (None; also what an
/// unparsable value means, with a warning).
pub(crate) fn forced_host_only(setting: &str) -> Option<bool> {
    match setting.trim() {
        "auto" | "" => None,
        v => match v.parse::<i64>() {
            Ok(v) => Some(v != 0),
            Err(_) => {
                tracing::warn!("CCL_IPC_HOST_ONLY={v:?} is not auto, 0 or 1; using auto");
                None
            }
        },
    }
}

/// Whether the user turned GPU peer-to-peer off: `NCCL_P2P_DISABLE=1`, `NCCL_P2P_LEVEL=LOC`
/// (or `0`), which NCCL reads as "never peer-to-peer", or a `NCCL_P2P_LEVEL` nearer than the
/// path between some two GPUs of a host (`beyond_level`, from the topology search).
pub(crate) fn p2p_disabled(cfg: &P2pConfig, beyond_level: bool) -> bool {
    beyond_level
        || cfg.p2p_disable
        || cfg
            .p2p_level
            .as_deref()
            .and_then(ccl_topology::types::PathType::parse_level)
            == Some(ccl_topology::types::PathType::Loc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` takes host-only exactly where NCCL would take shared memory between two GPUs;
    /// `1` and `0` force it on (two ranks only) or off.
    #[test]
    fn host_only_where_peer_to_peer_is_off_and_shared_memory_on() {
        use PeerReach::*;
        let r = |s: &str, n, p2p_off, shm_off| {
            PeerReach::from_settings(forced_host_only(s), n, p2p_off, shm_off)
        };
        assert_eq!(r("auto", 2, false, false), Mapped);
        assert_eq!(r("auto", 2, true, false), HostOnly);
        assert_eq!(r("", 2, true, false), HostOnly);
        assert_eq!(
            r("auto", 2, true, true),
            None,
            "NCCL_SHM_DISABLE: the network path"
        );
        assert_eq!(
            r("auto", 4, true, false),
            HostOnly,
            "more ranks: through the slots"
        );
        assert_eq!(r("auto", 1, true, false), None);
        assert_eq!(r("auto", 3, false, false), Mapped);
        assert_eq!(r("1", 2, false, false), HostOnly);
        assert_eq!(
            r("1", 2, true, true),
            HostOnly,
            "forced on over the shared-memory veto"
        );
        assert_eq!(r("1", 4, false, false), HostOnly);
        assert_eq!(r("0", 2, true, false), None);
        assert_eq!(r("0", 2, false, false), Mapped);
        assert_eq!(r(" 1 ", 2, true, false), HostOnly);
        assert_eq!(r("junk", 2, true, false), HostOnly, "unparsable: auto");
    }

    /// Peers whose memory cannot be mapped: host-only under `auto` (as NCCL falls back to shared
    /// memory), never when forced either way, nor against `NCCL_SHM_DISABLE`.
    #[test]
    fn unmappable_peers_fall_back_to_host_only_under_auto() {
        use PeerReach::*;
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 2, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 8, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only(""), 2, false),
            Some(HostOnly)
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("auto"), 2, true),
            Option::None
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("0"), 2, false),
            Option::None
        );
        assert_eq!(
            Mapped.when_unmappable(forced_host_only("1"), 2, false),
            Option::None
        );
        assert_eq!(
            HostOnly.when_unmappable(forced_host_only("auto"), 2, false),
            Option::None
        );
        assert_eq!(
            None.when_unmappable(forced_host_only("auto"), 2, false),
            Option::None
        );
    }
}
