//! The settings the per-operation path reads, once per engine: timeouts, push waits, and
//! which long waits run as kernels.

use std::time::Duration;

use crate::config::P2pConfig;
use crate::device::LongWait;

/// How long posting a direct transfer may wait for a peer that is a whole ring of transfers
/// behind, when `CCL_TIMEOUT_S` does not say.
pub(crate) const DIRECT_POST_TIMEOUT: Duration = Duration::from_secs(600);

/// The settings the per-operation path needs, read from the parameters once per engine (a
/// parameter read takes a lock, a map lookup and a string copy; several per operation added
/// up in host-bound loops).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tuning {
    /// How long a direct post waits for ring room (`CCL_TIMEOUT_S`, else a default).
    pub(crate) post_timeout: Duration,
    /// `CCL_IPC_PUSH_WAIT_MIN_BYTES`.
    pub(crate) wait_min_bytes: usize,
    /// `CCL_IPC_DIRECT_SINGLE_BYTES`.
    pub(crate) single_max: usize,
    /// `CCL_IPC_PUSH_WAIT_ADAPT`.
    pub(crate) push_wait_adapt: bool,
    /// `CCL_IPC_LOCAL_COPY_LANES` (1..=8).
    pub(crate) local_copy_lanes: usize,
    /// `CCL_IPC_DIRECT_REDUCE_PIECE_BYTES`.
    pub(crate) reduce_piece: usize,
    /// `CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES`: reductions this large wait as long as any
    /// before taking over (there one GPU doing both halves costs more than a short host wait).
    pub(crate) takeover_max_bytes: usize,
    /// `CCL_IPC_PUSH_WAIT_US` and `CCL_IPC_PUSH_WAIT_BUSY_US`.
    pub(crate) push_wait: Duration,
    pub(crate) push_wait_busy: Duration,
    /// `CCL_IPC_EXCHANGE_WAIT_US` (None: 0, off).
    pub(crate) exchange_wait: Option<Duration>,
    /// `CCL_IPC_EAGER_SEND` and `CCL_IPC_EAGER_MIN_BYTES` (None: off).
    pub(crate) eager: Option<usize>,
}

impl Tuning {
    /// `max_connections`: `CUDA_DEVICE_MAX_CONNECTIONS` as this process has it (the `auto`
    /// settings' condition).
    pub(crate) fn from_config(cfg: &P2pConfig, max_connections: Option<&str>) -> Tuning {
        let us = |v: i64| Duration::from_micros(v.clamp(0, 10_000_000) as u64);
        Tuning {
            post_timeout: match cfg.timeout_s {
                s if s > 0 => Duration::from_secs(s as u64),
                _ => DIRECT_POST_TIMEOUT,
            },
            wait_min_bytes: cfg.push_wait_min_bytes.max(0) as usize,
            single_max: cfg.direct_single_bytes.max(0) as usize,
            push_wait_adapt: cfg.push_wait_adapt,
            local_copy_lanes: cfg.local_copy_lanes.clamp(1, 8) as usize,
            reduce_piece: cfg.direct_reduce_piece_bytes.max(1) as usize,
            takeover_max_bytes: cfg.direct_reduce_takeover_max_bytes.max(0) as usize,
            push_wait: us(cfg.push_wait_us),
            push_wait_busy: us(cfg.push_wait_busy_us),
            exchange_wait: Some(us(cfg.exchange_wait_us)).filter(|d| !d.is_zero()),
            eager: eager_on(&cfg.eager_send, max_connections)
                .then_some(cfg.eager_min_bytes.max(0) as usize),
        }
    }
}

/// Most blocks of a kernel that copies a captured group's data (`CCL_GRAPH_COPY_BLOCKS`, 1-1024),
/// given the GPU's `sms` and how many ranks of the communicator run on this GPU (`sharers`).
/// The spread kernel's blocks spin until block 0 has met the partners' block 0, so every
/// sharer's block 0 must find room beside the others' spinning blocks: one 1024-thread block
/// per SM per sharer (an SM holds two) leaves room for all of them. Eight ranks on one H200
/// under MPS hung in a captured 8 MiB all-gather at 64 blocks and passed at 16 and 32
/// (2026-12-01, `docs/device-runs/next/g8_probe.sh`).
pub(crate) fn graph_copy_blocks(configured: i64, sms: u32, sharers: usize) -> u32 {
    let set = configured.clamp(1, 1024) as u32;
    match u32::try_from(sharers) {
        Ok(k) if k > 1 => set.min((sms / k).max(1)),
        _ => set,
    }
}

/// Which long waits run as the wait kernel (`CCL_IPC_WAIT_KERNEL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WaitKernel {
    transfers: bool,
    reductions: bool,
}

impl WaitKernel {
    pub(crate) fn covers(self, of: LongWait) -> bool {
        match of {
            LongWait::Transfer => self.transfers,
            LongWait::Reduction => self.reductions,
        }
    }

    pub(crate) fn any(self) -> bool {
        self.transfers || self.reductions
    }
}

/// `CCL_IPC_DIRECT_REDUCE_TAKEOVER_US`: a number of microseconds (negative: off), or `auto`
/// / `auto-US` (on, waiting 0 or US microseconds, when `CUDA_DEVICE_MAX_CONNECTIONS=1`, as
/// Megatron-LM's host-bound training sets it; off otherwise).
pub(crate) fn takeover_wait(setting: &str, max_connections: Option<&str>) -> Option<Duration> {
    let s = setting.trim();
    let us = match s.strip_prefix("auto") {
        Some(rest) => {
            if !max_connections.is_some_and(|v| v.trim() == "1") {
                return None;
            }
            match rest.trim_start_matches('-') {
                "" => 0,
                n => n.parse::<i64>().ok()?,
            }
        }
        None => s.parse::<i64>().ok()?,
    };
    (us >= 0).then(|| Duration::from_micros(us.min(10_000_000) as u64))
}

/// `CCL_IPC_EAGER_SEND`: "1" on, `auto` on only where every stream shares one hardware queue
/// (`CUDA_DEVICE_MAX_CONNECTIONS=1`: host-bound training, where the push wait's host time
/// costs more than the exchanges' second copy), anything else off.
pub(crate) fn eager_on(setting: &str, max_connections: Option<&str>) -> bool {
    match setting.trim() {
        "1" => true,
        "auto" => max_connections.is_some_and(|v| v.trim() == "1"),
        _ => false,
    }
}

/// `CCL_IPC_WAIT_KERNEL`: "1" both kinds of long wait, "transfers" only direct transfers';
/// with an "auto" prefix ("auto", "auto-transfers") only where every stream shares one
/// hardware queue (`CUDA_DEVICE_MAX_CONNECTIONS=1`); anything else off.
pub(crate) fn wants_wait_kernel(setting: &str, max_connections: Option<&str>) -> WaitKernel {
    let s = setting.trim();
    let (auto, what) = match s.strip_prefix("auto") {
        Some(rest) => (true, rest.trim_start_matches('-')),
        None => (false, s),
    };
    if auto && !max_connections.is_some_and(|v| v.trim() == "1") {
        return WaitKernel::default();
    }
    match what {
        "" if auto => WaitKernel {
            transfers: true,
            reductions: true,
        },
        "transfers" => WaitKernel {
            transfers: true,
            reductions: false,
        },
        w if w.parse::<i64>().is_ok_and(|v| v != 0) => WaitKernel {
            transfers: true,
            reductions: true,
        },
        _ => WaitKernel::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sharing_a_gpu_split_its_sms_among_their_copy_kernels() {
        assert_eq!(graph_copy_blocks(64, 132, 1), 64);
        assert_eq!(graph_copy_blocks(64, 132, 0), 64);
        assert_eq!(graph_copy_blocks(64, 132, 8), 16);
        assert_eq!(graph_copy_blocks(64, 132, 4), 33);
        assert_eq!(graph_copy_blocks(16, 132, 4), 16);
        assert_eq!(graph_copy_blocks(64, 4, 8), 1);
        assert_eq!(graph_copy_blocks(0, 132, 1), 1);
        assert_eq!(graph_copy_blocks(5000, 132, 1), 1024);
    }

    #[test]
    fn the_takeover_wait_follows_its_setting_and_the_hardware_queues() {
        let us = Duration::from_micros;
        assert_eq!(takeover_wait("-1", Some("1")), None);
        assert_eq!(takeover_wait("0", None), Some(us(0)));
        assert_eq!(takeover_wait(" 25 ", Some("8")), Some(us(25)));
        assert_eq!(takeover_wait("auto", Some("1")), Some(us(0)));
        assert_eq!(takeover_wait("auto", Some("8")), None);
        assert_eq!(takeover_wait("auto", None), None);
        assert_eq!(takeover_wait("auto-40", Some("1")), Some(us(40)));
        assert_eq!(takeover_wait("soon", Some("1")), None);
    }

    #[test]
    fn eager_sends_follow_their_setting_and_the_hardware_queues() {
        assert!(eager_on("1", None));
        assert!(eager_on(" 1 ", Some("8")));
        assert!(eager_on("auto", Some("1")));
        assert!(!eager_on("auto", Some("8")));
        assert!(!eager_on("auto", None));
        assert!(!eager_on("0", Some("1")));
        assert!(!eager_on("yes", Some("1")));
        let mut cfg = P2pConfig {
            eager_send: "auto".into(),
            eager_min_bytes: 4096,
            ..P2pConfig::default()
        };
        assert_eq!(Tuning::from_config(&cfg, Some("1")).eager, Some(4096));
        assert_eq!(Tuning::from_config(&cfg, None).eager, None);
        cfg.eager_send = "0".into();
        assert_eq!(Tuning::from_config(&cfg, Some("1")).eager, None);
    }

    #[test]
    fn the_wait_kernel_follows_its_setting_and_the_hardware_queues() {
        let both = WaitKernel {
            transfers: true,
            reductions: true,
        };
        let transfers = WaitKernel {
            transfers: true,
            reductions: false,
        };
        let off = WaitKernel::default();
        assert_eq!(wants_wait_kernel("1", None), both);
        assert_eq!(wants_wait_kernel("0", Some("1")), off);
        assert_eq!(wants_wait_kernel("auto", Some("1")), both);
        assert_eq!(wants_wait_kernel("auto", Some("8")), off);
        assert_eq!(wants_wait_kernel("auto", None), off);
        assert_eq!(wants_wait_kernel("yes", Some("1")), off);
        assert_eq!(wants_wait_kernel("transfers", None), transfers);
        assert_eq!(wants_wait_kernel("auto-transfers", Some("1")), transfers);
        assert_eq!(wants_wait_kernel("auto-transfers", Some("8")), off);
        assert!(transfers.covers(LongWait::Transfer) && !transfers.covers(LongWait::Reduction));
    }
}
