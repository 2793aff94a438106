//! Connecting a communicator: this rank's card for the rendezvous, the links to every peer
//! (shared memory on one host, TCP or the multipath transport between hosts, with their sizing
//! from the CPUs and settings), the ring order from the topology search, and saying goodbye.

use std::net::TcpListener;
use std::sync::atomic::AtomicBool;

use ccl_transports::mpt::CcKind;
use ccl_transports::mpt_link::{MptLink, MptLinkConfig};
use ccl_transports::shm::{ShmLink, ShmRing};
use ccl_transports::socket::SocketLink;
use ccl_transports::Link;

use crate::bootstrap::{self, Ctrl, RankInfo};
use crate::core::{CommState, IssueState};
use crate::error::{Error, Result};
use crate::link_nics::{self, LinkNics};
use crate::params;
use crate::topo_plan::topo_plan;

/// This rank's card; `cuda_dev` is the communicator's device (-1: none).
pub(crate) fn my_info(rank: usize, listener: &TcpListener, cuda_dev: i32) -> Result<RankInfo> {
    Ok(RankInfo {
        rank,
        addr: listener
            .local_addr()
            .map_err(|e| Error::system(format!("listener address: {e}")))?,
        host_id: bootstrap::host_id(),
        hostname: bootstrap::hostname(),
        pid: std::process::id(),
        gpu_bus: crate::gpu::pci_bus_id(cuda_dev),
    })
}

/// Connects the mesh and the data links of a new communicator.
pub(crate) fn build_state(
    rank: usize,
    table: Vec<RankInfo>,
    listener: &TcpListener,
    nonce: u64,
    abort: &AtomicBool,
) -> Result<(CommState, IssueState)> {
    let n = table.len();
    // Transport per peer from the topology search (shared memory on one host unless
    // NCCL_SHM_DISABLE; the network otherwise); host identity alone if the search fails. Both
    // sides decide alike: same table, same settings.
    let plan = topo_plan(&table);
    let shm_ok = !params::NCCL_SHM_DISABLE.get_bool();
    let my_host = table[rank].host_id;
    // The process's copy threads, once (CCL_COPY_THREADS), now that the ranks sharing this
    // host are known.
    let cpus = cpu_share(table.iter().filter(|t| t.host_id == my_host).count());
    let helpers = copy_threads(&params::CCL_COPY_THREADS.get_str(), cpus)?;
    ccl_transports::par::configure(
        helpers,
        params::CCL_COPY_PARALLEL_BYTES.get_i64().max(1) as usize,
    );
    let use_shm = |j: usize| {
        use ccl_topology::plan::Transport;
        j != rank
            && match plan.as_ref().and_then(|p| p.transport(rank, j)) {
                Some(t) => matches!(t.transport, Transport::Shm | Transport::P2p(_)),
                None => shm_ok && table[j].host_id == my_host,
            }
    };
    let (mut ctrl, data) =
        bootstrap::connect_mesh(rank, &table, listener, nonce, &|j| !use_shm(j), abort)?;
    let mut links: Vec<Option<Box<dyn Link>>> = (0..n).map(|_| None).collect();
    let frames = link_frames(&params::CCL_SOCKET_FRAME_BYTES.get_str())?;
    let frame = frames.tcp;
    // Between hosts: the multipath transport (by default, or CCL_NET / NCCL_NET `mpt`) or TCP
    // links (`socket`). The multipath link sets itself up over the data stream, in ascending
    // peer order on every rank, so the blocking hello exchange cannot deadlock; then a probe
    // checks that datagrams flow both ways. By default a pair whose probe fails falls back to
    // TCP over the same stream (both sides learn the outcome); asked for explicitly, mpt fails.
    let remote_links = data.iter().filter(|s| s.is_some()).count();
    // The NICs of links to other hosts, this rank's primary (from the topology plan) first.
    let nics = match remote_links {
        0 => LinkNics::default(),
        _ => LinkNics::for_rank(&table, rank)?,
    };
    let mpt = mpt_link_config(&frames, rank, cpus, remote_links, helpers, &nics.ips)?;
    let shared_memory_only = shm_ok && table.iter().all(|t| t.host_id == my_host);
    let probe = std::time::Duration::from_millis(
        params::CCL_MPT_PROBE_MS.get_i64().clamp(1, 600_000) as u64,
    );
    // TCP with a backup connection on a second NIC: by default when two are selected.
    let failover = mpt.is_none() && nics.ips.len() >= 2 && params::CCL_SOCKET_FAILOVER.get_bool();
    for (j, s) in data.into_iter().enumerate() {
        let Some(s) = s else { continue };
        // Both ends agree on the NIC order of the link (the lower rank's) before either
        // binds anything to it.
        let order = match (failover || mpt.is_some()) && nics.ips.len() >= 2 {
            true => Some(link_nics::agree(&s, rank, j, &nics.mine)?),
            false => None,
        };
        if let (true, Some(order)) = (failover, &order) {
            links[j] = Some(failover_link(&s, &nics, order, rank, j, frame)?);
            continue;
        }
        links[j] = Some(match &mpt {
            Some((cfg, strict)) => {
                let mut cfg = cfg.clone();
                if let Some(order) = &order {
                    cfg.local_ips = nics.ips_in(order);
                    cfg.nic_ids = order.iter().map(|&k| k as u16).collect();
                }
                match MptLink::over_tcp(s, cfg)?.probe(probe)? {
                    Ok(link) => Box::new(link),
                    Err((_, why)) if *strict => {
                        return Err(Error::system(format!(
                            "mpt link to rank {j}: {why}; CCL_NET=socket uses TCP instead"
                        )))
                    }
                    Err((tcp, why)) => {
                        tracing::warn!(
                            "rank {rank}: mpt link to rank {j}: {why}; using TCP for it"
                        );
                        Box::new(SocketLink::new(tcp, frame)?)
                    }
                }
            }
            None => Box::new(SocketLink::new(s, frame)?),
        });
    }
    // Shared memory: each rank creates its incoming ring per local peer, sends the name,
    // maps the peer's ring, acknowledges, and unlinks its own once the peer has mapped it.
    let slot = params::CCL_SHM_SLOT_BYTES.get_i64().clamp(4096, 64 << 20) as usize & !63;
    // NCCL_BUFFSIZE (4 MiB by default) of ring per direction, in slots of CCL_SHM_SLOT_BYTES.
    let nslots = (params::NCCL_BUFFSIZE.get_i64().max(0) as usize / slot).clamp(2, 64);
    let local: Vec<usize> = (0..n).filter(|&j| use_shm(j)).collect();
    let mut rx: Vec<Option<ShmRing>> = (0..n).map(|_| None).collect();
    let mut own_paths = Vec::new();
    for &j in &local {
        let ring = ShmRing::create(nslots, slot)?;
        ctrl.send(j, ring.path().as_bytes())?;
        own_paths.push(ring.path().to_string());
        rx[j] = Some(ring);
    }
    let result = (|| -> Result<()> {
        for &j in &local {
            let path = String::from_utf8(ctrl.recv(j, abort)?)
                .map_err(|_| Error::remote(format!("rank {j} sent a non-UTF-8 shm name")))?;
            let tx = ShmRing::open(&path)?;
            let rx_ring = rx[j]
                .take()
                .ok_or_else(|| Error::internal("shm ring missing"))?;
            links[j] = Some(Box::new(ShmLink::new(rx_ring, tx)));
            ctrl.send(j, b"mapped")?;
        }
        for &j in &local {
            if ctrl.recv(j, abort)? != b"mapped" {
                return Err(Error::remote(format!("rank {j} did not map its shm ring")));
            }
        }
        Ok(())
    })();
    // Both sides have mapped every ring (or init failed): the names can go, the mappings stay,
    // so nothing is left in /dev/shm even if a process dies later.
    for p in &own_paths {
        let _ = std::fs::remove_file(p);
    }
    result?;
    let ring = agree_ring(rank, &table, &mut ctrl, abort)?;
    let p2p_beyond_level =
        params::NCCL_P2P_LEVEL.raw().is_some() && plan.as_ref().is_some_and(gpus_beyond_p2p_level);
    Ok((
        CommState {
            ctrl,
            links,
            table,
            staging: Vec::new(),
            exec_stats: Default::default(),
        },
        IssueState {
            ring,
            coll_seq: 0,
            p2p_seqs: vec![(0, 0); n],
            shared_memory_only,
            p2p_beyond_level,
            schedules: Default::default(),
        },
    ))
}

/// Connects the primary and backup streams to rank `j` over the data stream `s` (the lower
/// rank dials) on the first two NICs of `order` (the link's, agreed by both ends), and
/// builds the failover link on them, its primary redialed when it fails.
fn failover_link(
    s: &std::net::TcpStream,
    nics: &LinkNics,
    order: &[usize],
    rank: usize,
    j: usize,
    frame: usize,
) -> Result<Box<dyn Link>> {
    use ccl_transports::socket_failover::{
        connect_pair, FailoverConfig, FailoverSocketLink, PrimaryNic,
    };
    let ips = nics.ips_in(order);
    let [primary, backup, ..] = ips[..] else {
        return Err(Error::internal("failover link with fewer than two NICs"));
    };
    tracing::info!(
        "rank {rank}: link to rank {j} fails over: primary {}, backup {}",
        nics.describe(&order[..1]),
        nics.describe(&order[1..2])
    );
    let mut ctrl = s
        .try_clone()
        .map_err(|e| Error::system(format!("failover link to rank {j}: {e}")))?;
    let (primary, backup, redial) = connect_pair(
        &mut ctrl,
        [primary, backup],
        rank < j,
        bootstrap::bootstrap_timeout(),
    )?;
    let cfg = FailoverConfig::new(frame, j as u64);
    // Followed by name, so a primary NIC that comes back renumbered is found again.
    let nic = primary
        .local_addr()
        .ok()
        .and_then(|a| PrimaryNic::holding(a.ip()));
    let link = FailoverSocketLink::with_readdress(primary, backup, cfg, redial, nic)?;
    Ok(Box::new(link))
}

/// Whether the topology search keeps any two ranks of one host off peer-to-peer because their
/// GPUs are farther apart than `NCCL_P2P_LEVEL`.
fn gpus_beyond_p2p_level(plan: &ccl_topology::plan::Plan) -> bool {
    use ccl_topology::plan::{NoP2p, TransportReason};
    plan.hosts.iter().any(|h| {
        let ranks = &h.ranks;
        ranks.iter().enumerate().any(|(i, &a)| {
            ranks[i + 1..].iter().any(|&b| {
                matches!(
                    plan.transport(a, b).map(|t| t.reason),
                    Some(
                        TransportReason::SharedMemory(NoP2p::BeyondLevel { .. })
                            | TransportReason::ShmDisabled(NoP2p::BeyondLevel { .. })
                    )
                )
            })
        })
    })
}

/// The multipath link settings, and whether it was asked for by name (then a link whose probe
/// fails is an error, not a fallback to TCP): the default when neither `CCL_NET` nor
/// `NCCL_NET` is set, or either says `mpt`. `None`: the TCP socket transport. `nics`: the
/// local addresses to spread paths over, in list order (each link puts its own first NIC
/// first); empty: the link's own.
fn mpt_link_config(
    frames: &LinkFrames,
    rank: usize,
    cpus: usize,
    remote_links: usize,
    copy_helpers: usize,
    nics: &[std::net::IpAddr],
) -> Result<Option<(MptLinkConfig, bool)>> {
    let ccl_net = params::CCL_NET.get_str();
    let from_ccl = !ccl_net.trim().is_empty();
    let net = if from_ccl {
        ccl_net
    } else {
        params::NCCL_NET.get_str()
    };
    let strict = match net.trim().to_ascii_lowercase().as_str() {
        "socket" => return Ok(None),
        "" => false,
        "mpt" => true,
        // NCCL_NET keeps NCCL's meaning: names of NCCL's own plugins ("IB", ...) that libccl
        // does not have fall back to sockets with a warning rather than failing init.
        other if !from_ccl => {
            tracing::warn!("NCCL_NET={other:?}: no such network in libccl; using sockets");
            return Ok(None);
        }
        other => {
            return Err(Error::invalid_argument(format!(
                "CCL_NET={other:?}: expected socket or mpt"
            )))
        }
    };
    let cc = params::CCL_MPT_CC
        .get_str()
        .parse::<CcKind>()
        .map_err(|e| Error::invalid_argument(format!("CCL_MPT_CC: {e}")))?;
    let drop_rate = params::CCL_MPT_DROP
        .get_str()
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=1.0).contains(p))
        .ok_or_else(|| Error::invalid_argument("CCL_MPT_DROP must be a fraction in [0, 1]"))?;
    // Both ends of a link run the smaller of their counts (the hello settles it). A number
    // out of range is an error, not a clamp.
    let engines = auto_or(
        "CCL_MPT_ENGINES",
        &params::CCL_MPT_ENGINES.get_str(),
        1..=ccl_transports::mpt_link::MAX_ENGINES,
    )?
    .unwrap_or(auto_engines(cpus, remote_links));
    if !nics.is_empty() {
        tracing::info!("mpt paths spread over {} NICs: {nics:?}", nics.len());
    }
    let inflight = params::CCL_MPT_INFLIGHT_BYTES
        .get_i64()
        .clamp(1 << 20, 1 << 30) as usize;
    Ok(Some((
        MptLinkConfig {
            paths: params::CCL_MPT_PATHS.get_i64().clamp(1, 256) as u16,
            chunk_size: params::CCL_MPT_CHUNK_BYTES.get_i64().clamp(256, 65_491) as u32,
            ack_delay: std::time::Duration::from_micros(
                params::CCL_MPT_ACK_DELAY_US.get_i64().clamp(0, 10_000) as u64,
            ),
            fail_after: std::time::Duration::from_millis(
                params::CCL_MPT_FAIL_AFTER_MS.get_i64().clamp(0, 3_600_000) as u64,
            ),
            max_frame: frames.mpt_one,
            slots: mpt_slots(frames.mpt_one, inflight),
            engines_max_frame: Some(frames.mpt_several),
            engines_slots: Some(mpt_slots(frames.mpt_several, inflight)),
            drop_rate,
            cc,
            // Loss injection is seeded per process so ranks drop different datagrams.
            seed: u64::from(std::process::id()) << 16 ^ rank as u64,
            engines,
            engine_copy: params::CCL_MPT_ENGINE_COPY.get_bool(),
            async_copy: params::CCL_MPT_ASYNC_COPY.get_bool(),
            zero_copy: params::CCL_MPT_ZERO_COPY.get_bool(),
            place_receives: place_receives(
                &params::CCL_MPT_PLACE_RECEIVES.get_str(),
                copy_helpers,
            )?,
            local_ips: nics.to_vec(),
            nic_ids: Vec::new(),
            spin: std::time::Duration::from_micros(params::CCL_MPT_SPIN_US.get_i64().max(0) as u64),
            inline_bytes: params::CCL_MPT_INLINE_BYTES.get_i64().max(0) as usize,
            split_bytes: params::CCL_MPT_SPLIT_BYTES.get_i64().clamp(4096, 1 << 30) as usize,
        },
        strict,
    )))
}

/// `CCL_MPT_PLACE_RECEIVES`: `auto` places receives when the process has no copy helpers.
/// Placing moves the write of every received byte into cold memory onto the engine threads;
/// without helpers the executor made that write after them, on the same critical path, and
/// placing saves a copy (2 cores, sendrecv +13-25%); with helpers it ran beside the engines,
/// and placing slows the engines (16 CPUs, 2 ranks of 8 engines and 4 helpers, sendrecv 4.80
/// -> 4.12 GB/s, five alternations).
fn place_receives(setting: &str, copy_helpers: usize) -> Result<bool> {
    Ok(auto_or("CCL_MPT_PLACE_RECEIVES", setting, 0..=1)?.map_or(copy_helpers == 0, |v| v == 1))
}

/// Largest frames of the links between hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LinkFrames {
    tcp: usize,
    /// A multipath link that runs one engine (which copies and sends every frame alone).
    mpt_one: usize,
    /// A multipath link that runs several engines (the smaller count of its two sides): they
    /// split a frame, and the copy threads copy it.
    mpt_several: usize,
}

/// `CCL_SOCKET_FRAME_BYTES`: `auto` is 512 KiB, except 16 MiB on a multipath link of several
/// engines (one engine on 2 cores lost 15-25% with 4 MiB frames over veth; several split a
/// frame, and each frame costs its round of receive postings, pops and part headers: on the
/// GPU machine 4 MiB beat 512 KiB, sendrecv 1.64 -> 2.38-3.01 GB/s, and on 16 CPUs, two
/// ranks of 8 engines, 16 MiB beat 4 MiB, host-memory sendrecv 4.33 -> 5.87 GB/s, all_reduce
/// 4.13 -> 5.57, GPU-memory all_reduce 4.31 -> 4.86, three alternations each); a number
/// (4 KiB..64 MiB, rounded down to 64 bytes) is all of them.
fn link_frames(setting: &str) -> Result<LinkFrames> {
    Ok(
        match auto_or("CCL_SOCKET_FRAME_BYTES", setting, 4096..=64 << 20)? {
            None => LinkFrames {
                tcp: 512 << 10,
                mpt_one: 512 << 10,
                mpt_several: 16 << 20,
            },
            Some(frame) => {
                let frame = frame & !63;
                LinkFrames {
                    tcp: frame,
                    mpt_one: frame,
                    mpt_several: frame,
                }
            }
        },
    )
}

/// A setting that is `auto` (`None`: the caller's default) or a whole number in `range`;
/// anything else is an error naming `name` and what it accepts.
fn auto_or(
    name: &str,
    setting: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<Option<usize>> {
    let setting = setting.trim();
    if setting.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    setting
        .parse::<usize>()
        .ok()
        .filter(|v| range.contains(v))
        .map(Some)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{name}={setting}: expected auto or {}..={}",
                range.start(),
                range.end()
            ))
        })
}

/// Frames in flight on a multipath link with frames of `frame` bytes (on each engine when
/// several split them): `inflight` bytes worth (`CCL_MPT_INFLIGHT_BYTES`), 4 to 16 (the
/// header's request-id space). From settings both sides must agree on, so both post as many
/// receives as the other may send.
fn mpt_slots(frame: usize, inflight: usize) -> u32 {
    (inflight / frame.max(1)).clamp(4, 16) as u32
}

/// CPUs this process can count on: those it may run on, shared with the other `local` ranks
/// of its host when it may run on all of them (unbound ranks share the machine; a rank bound
/// to a subset has it to itself).
fn cpu_share(local: usize) -> usize {
    let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
    let online = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok());
    if online == Some(mine) {
        (mine / local.max(1)).max(1)
    } else {
        mine
    }
}

/// mpt engines per link when `CCL_MPT_ENGINES` is `auto`, from the CPUs this process can
/// count on (`cpus`, its share of the host, [`cpu_share`]) and the links it opens to other
/// hosts (`remote_links`): 8 engines in all from 8 CPUs up, shared out over the links (at
/// least one each), else one per link. Every link is opened at setup and each engine is a
/// thread with its own sockets, so a rank with many peers on other hosts must not get 8 per
/// peer (64 peers would be 512 threads).
///
/// Engines are threads that copy and move datagrams, and they spend much of their time
/// waiting on the peer, so more engines than CPUs is not waste. Two ranks on 16 CPUs (8
/// each), 128 MiB host-memory sendrecv / all_reduce over loopback (2026-11-23, ccl-perf): 1 engine
/// 1.50 / 1.40 GB/s, 8 engines (with 4 copy threads) 4.64-4.76 / 4.25. Two ranks on 32 (the
/// GPU machine): 8 engines 5.98 / 5.78 against 4 engines' 4.79 / 4.27; 16 were slower. On 2
/// cores four engines were slower than one; 3 to 7 CPUs were not measured and keep one.
fn auto_engines(cpus: usize, remote_links: usize) -> usize {
    if cpus >= 8 {
        (8 / remote_links.max(1)).max(1)
    } else {
        1
    }
}

/// Longest `destroy` waits for peers to confirm what was sent to them.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps the links up until their peers have confirmed every byte sent to them, or for
/// [`LINGER`]: a send completes before its peer confirms it on links that resend lost
/// datagrams themselves (`Link::unconfirmed`), and a datagram lost just before the links
/// went would leave the peer waiting for it. A peer that already left in order (or died)
/// waits for nothing and confirms nothing more: its link is not waited for (a rank that only
/// received could otherwise wait out the whole linger for a datagram its departed peer never
/// acknowledged, and warn).
pub(crate) fn linger(links: &mut [Option<Box<dyn Link>>], ctrl: &mut bootstrap::Ctrl) {
    let until = std::time::Instant::now() + LINGER;
    loop {
        let departed = ctrl.departed();
        let mut left = false;
        for (j, link) in links.iter_mut().enumerate() {
            if let Some(link) = link
                .as_mut()
                .filter(|_| !departed.get(j).copied().unwrap_or(false))
            {
                left |= link.unconfirmed();
            }
        }
        if !left {
            return;
        }
        if std::time::Instant::now() >= until {
            tracing::warn!("peers did not confirm the last bytes sent to them within {LINGER:?}");
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Helper threads for large copies (`CCL_COPY_THREADS`): `auto` is a quarter of `cpus` (the
/// process's share, [`cpu_share`]) but at least 4 and at most 8 from 8 CPUs up, and none
/// below 8, where helpers (which spin briefly between parts) would take cores from the
/// engines and the executor; a number is taken as it is (up to 64). Without helpers the
/// executor copies every received byte alone and is what limits the network path once there
/// are several engines (two ranks of 8 CPUs, 8 engines: sendrecv 3.20 GB/s with none, 4.76
/// with 4; the executor thread busy throughout).
fn copy_threads(setting: &str, cpus: usize) -> Result<usize> {
    Ok(
        auto_or("CCL_COPY_THREADS", setting, 0..=64)?.unwrap_or(if cpus < 8 {
            0
        } else {
            (cpus / 4).clamp(4, 8)
        }),
    )
}

/// The ring order: rank 0 runs the topology search and tells everybody, so ranks whose local
/// discovery differs cannot end up with different rings.
fn agree_ring(
    rank: usize,
    table: &[RankInfo],
    ctrl: &mut Ctrl,
    abort: &AtomicBool,
) -> Result<Vec<usize>> {
    let n = table.len();
    if n == 1 {
        return Ok(vec![0]);
    }
    if rank == 0 {
        let ring = search_ring(table);
        let bytes =
            serde_json::to_vec(&ring).map_err(|e| Error::internal(format!("encode ring: {e}")))?;
        for j in 1..n {
            ctrl.send(j, &bytes)?;
        }
        Ok(ring)
    } else {
        let ring: Vec<usize> = serde_json::from_slice(&ctrl.recv(0, abort)?)
            .map_err(|e| Error::remote(format!("rank 0 sent a malformed ring order: {e}")))?;
        let mut seen = vec![false; n];
        if ring.len() != n
            || !ring
                .iter()
                .all(|&r| r < n && !std::mem::replace(&mut seen[r], true))
        {
            return Err(Error::remote(format!(
                "rank 0 sent a ring order that is not a permutation: {ring:?}"
            )));
        }
        Ok(ring)
    }
}

/// Channel 0's ring from the topology search; rank order if the search fails.
fn search_ring(table: &[RankInfo]) -> Vec<usize> {
    match topo_plan(table).as_ref().and_then(|p| p.channels.first()) {
        Some(c) if c.ring.len() == table.len() => {
            tracing::info!("ring order {:?}", c.ring);
            c.ring.clone()
        }
        _ => (0..table.len()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        auto_engines, copy_threads, cpu_share, gpus_beyond_p2p_level, link_frames, mpt_slots,
        place_receives, LinkFrames,
    };

    /// `NCCL_P2P_LEVEL` nearer than the path between some two GPUs of a host (the PCIe box:
    /// pairs under one switch are PIX, across switches PHB/SYS) sends cuda-ipc host-only, as
    /// NCCL takes shared memory there; a level that covers every pair, or one host's GPUs on
    /// NVLink, does not.
    #[test]
    fn a_p2p_level_nearer_than_some_pair_of_gpus_is_found() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/topologies");
        let load = |f: &str| ccl_topology::xml::read_file(&dir.join(f)).unwrap();
        let with = |level: &str| {
            ccl_topology::TopoConfig::from_lookup(|k| {
                (k == "NCCL_P2P_LEVEL").then(|| level.to_string())
            })
            .unwrap()
        };
        let beyond = |sys: &ccl_topology::model::System, hosts, level| {
            let p = ccl_topology::report::plan_cluster(sys, hosts, &with(level)).unwrap();
            gpus_beyond_p2p_level(&p)
        };
        let pcie = load("pcie-8gpu.xml");
        assert!(beyond(&pcie, 1, "PIX"));
        assert!(beyond(&pcie, 2, "NVL"));
        assert!(!beyond(&pcie, 1, "SYS"));
        let dgx = load("dgx-h100-nvswitch.xml");
        assert!(!beyond(&dgx, 1, "NVL"));
        assert!(!beyond(&dgx, 2, "PIX"));
    }

    #[test]
    fn a_process_counts_on_a_share_of_the_cpus_and_at_least_one() {
        let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(cpu_share(1) <= mine && cpu_share(1) >= 1);
        assert!(cpu_share(2) <= cpu_share(1));
        // Divided only when this process may run on every online CPU (else it is bound).
        assert!(cpu_share(100_000) == 1 || cpu_share(100_000) == mine);
        assert_eq!(cpu_share(0), cpu_share(1));
    }

    #[test]
    fn frames_auto_differ_by_link_kind_and_engines_and_a_number_sets_all() {
        let all = |f| LinkFrames {
            tcp: f,
            mpt_one: f,
            mpt_several: f,
        };
        assert_eq!(
            link_frames("auto").ok(),
            Some(LinkFrames {
                tcp: 512 << 10,
                mpt_one: 512 << 10,
                mpt_several: 16 << 20
            })
        );
        assert_eq!(link_frames("1048576").ok(), Some(all(1 << 20)));
        assert_eq!(link_frames("4097").ok(), Some(all(4096)));
        for bad in ["4095", "67108865", "big", "-1"] {
            assert!(link_frames(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(mpt_slots(512 << 10, 16 << 20), 16);
        assert_eq!(mpt_slots(2 << 20, 16 << 20), 8);
        assert_eq!(mpt_slots(4 << 20, 16 << 20), 4);
        assert_eq!(mpt_slots(64 << 20, 16 << 20), 4);
        assert_eq!(mpt_slots(4 << 20, 64 << 20), 16);
        // The default: one engine's 512 KiB frames 6 in flight, several engines' 16 MiB
        // frames 4 (as with the earlier 16 MiB default).
        let default: usize = crate::params::CCL_MPT_INFLIGHT_BYTES
            .default
            .parse()
            .unwrap();
        assert_eq!(mpt_slots(512 << 10, default), 6);
        assert_eq!(mpt_slots(16 << 20, default), 4);
    }

    #[test]
    fn auto_engines_are_eight_in_all_from_eight_cpus_and_one_per_link_below() {
        for links in [0, 1] {
            assert_eq!(auto_engines(1, links), 1);
            assert_eq!(auto_engines(2, links), 1);
            assert_eq!(auto_engines(7, links), 1);
            assert_eq!(auto_engines(8, links), 8);
            assert_eq!(auto_engines(16, links), 8);
            assert_eq!(auto_engines(256, links), 8);
        }
        // Shared over the links to other hosts, at least one each.
        assert_eq!(auto_engines(16, 2), 4);
        assert_eq!(auto_engines(16, 3), 2);
        assert_eq!(auto_engines(16, 8), 1);
        assert_eq!(auto_engines(16, 64), 1);
        assert_eq!(auto_engines(4, 64), 1);
    }

    #[test]
    fn receives_are_placed_by_default_only_without_copy_helpers() {
        assert!(place_receives("auto", 0).unwrap());
        assert!(!place_receives(" AUTO ", 4).unwrap());
        assert!(place_receives("1", 4).unwrap());
        assert!(!place_receives("0", 0).unwrap());
        assert!(place_receives("2", 0).is_err());
        assert!(place_receives("yes", 0).is_err());
    }

    #[test]
    fn copy_threads_auto_is_a_quarter_of_many_cpus_and_none_on_few() {
        assert_eq!(copy_threads("auto", 2).ok(), Some(0));
        assert_eq!(copy_threads("auto", 7).ok(), Some(0));
        assert_eq!(copy_threads("auto", 8).ok(), Some(4));
        assert_eq!(copy_threads("auto", 15).ok(), Some(4));
        assert_eq!(copy_threads("AUTO", 16).ok(), Some(4));
        assert_eq!(copy_threads(" auto ", 32).ok(), Some(8));
        assert_eq!(copy_threads("auto", 256).ok(), Some(8));
        assert_eq!(copy_threads("0", 32).ok(), Some(0));
        assert_eq!(copy_threads("64", 2).ok(), Some(64));
        for bad in ["65", "-1", "many", ""] {
            assert!(copy_threads(bad, 32).is_err(), "{bad:?} accepted");
        }
    }
}
