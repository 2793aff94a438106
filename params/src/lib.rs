//! Every environment parameter libccl reads, in one typed, documented registry.
//!
//! NCCL's own variables keep NCCL's meaning; libccl's additions are `CCL_*`. Values come from
//! the environment first, then from `NCCL_CONF_FILE` (or `~/.nccl.conf`, then
//! `/etc/nccl.conf`), as `KEY=VALUE` lines. Each value is read once and cached, as NCCL does,
//! so a long-running job sees one configuration.

use std::collections::HashMap;
use std::sync::OnceLock;

/// One parameter: its name, its default as text, and what it does.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

macro_rules! params {
    ($($id:ident = ($name:literal, $default:literal, $doc:literal);)*) => {
        $(pub const $id: Param = Param { name: $name, default: $default, doc: $doc };)*
        /// Every parameter, for `ccl-perf --env` and `ncclParamGetAllParameterKeys`.
        pub const ALL: &[Param] = &[$($id),*];
    };
}

params! {
    NCCL_DEBUG = ("NCCL_DEBUG", "", "Log level: VERSION, WARN, INFO, TRACE (empty: errors only).");
    NCCL_DEBUG_SUBSYS = ("NCCL_DEBUG_SUBSYS", "", "Comma list of subsystems whose INFO and TRACE messages NCCL_DEBUG shows: INIT, BOOTSTRAP, ENV, COLL, P2P, SHM, NET, GRAPH (topology), TUNING, PROXY, ALLOC, REG, PROFILE (monitor and profiler plugins), CALL, or ALL; a leading ^ shows all but the listed. Warnings show whatever the list. Unset: every subsystem (NCCL shows INIT,BOOTSTRAP,ENV by default; libccl's scripts read the INFO messages of every subsystem).");
    NCCL_DEBUG_FILE = ("NCCL_DEBUG_FILE", "", "Write logs to this file (%h host, %p pid are expanded) instead of stderr.");
    NCCL_COMM_ID = ("NCCL_COMM_ID", "", "host:port of the bootstrap root; rank 0 listens there, ncclGetUniqueId returns it.");
    NCCL_SOCKET_IFNAME = ("NCCL_SOCKET_IFNAME", "", "Interfaces for bootstrap and sockets: prefix list, ^ excludes, = exact match.");
    NCCL_SOCKET_FAMILY = ("NCCL_SOCKET_FAMILY", "", "AF_INET or AF_INET6 to force an address family.");
    NCCL_SHM_DISABLE = ("NCCL_SHM_DISABLE", "0", "1: never use shared memory between ranks of one host (use sockets).");
    NCCL_P2P_DISABLE = ("NCCL_P2P_DISABLE", "0", "1: no GPU peer-to-peer; traffic goes through host shared memory.");
    NCCL_P2P_LEVEL = ("NCCL_P2P_LEVEL", "", "The farthest path over which GPUs use peer-to-peer (LOC, NVL, NVB, C2C, PIX, PXB, PHB, SYS, or 0-5 as NCCL reads them; unset: PXB for the topology search). LOC or 0 turns peer-to-peer off, as NCCL_P2P_DISABLE=1 does; set, and nearer than the path the topology search finds between some two GPUs of a host (NVL on a PCIe-only machine, PIX across PCIe switches), it sends cuda-ipc host-only under CCL_IPC_HOST_ONLY=auto, where NCCL takes shared memory between those GPUs (unset, peer-to-peer is used wherever the GPUs can map each other's memory).");
    NCCL_NET = ("NCCL_NET", "", "Network transport between hosts: Socket (TCP), or unset for libccl's multipath transport (CCL_NET); other NCCL plugin names fall back to Socket with a warning.");
    NCCL_PROFILER_PLUGIN = ("NCCL_PROFILER_PLUGIN", "", "Profiler plugin to load, by NCCL's rules: a path or library name, or a bare name X for libnccl-profiler-X.so; unset: libnccl-profiler.so if the loader finds one; none: no plugin. Interface versions 6, 5 and 4 (ncclProfiler_v6/_v5/_v4). Each communicator is reported to it: group, collective and point-to-point events, and one kernel-channel event per operation timed by CUDA events on its streams (host backend: the host clock). A plugin that fails to load or to init is skipped with a warning (docs/PROFILER.md).");
    NCCL_ALGO = ("NCCL_ALGO", "", "Algorithms allowed: list of Ring, Tree (^ excludes); unknown names are ignored.");
    NCCL_PROTO = ("NCCL_PROTO", "", "Protocols allowed (LL, LL128, Simple; ^ excludes): parsed, one protocol on the host backend.");
    NCCL_BUFFSIZE = ("NCCL_BUFFSIZE", "4194304", "Bytes of buffering per peer connection and direction.");
    NCCL_CONF_FILE = ("NCCL_CONF_FILE", "", "File of KEY=VALUE defaults (else ~/.nccl.conf, /etc/nccl.conf).");
    CCL_TIMEOUT_S = ("CCL_TIMEOUT_S", "0", "Seconds without progress before a collective fails with a system error (0: never). Also how long a connected peer may stay silent in init's and ncclCommSplit's exchanges (0: CCL_BOOTSTRAP_TIMEOUT_S): a peer whose network died never closes its control connection.");
    CCL_WARN_STUCK_S = ("CCL_WARN_STUCK_S", "300", "Seconds without progress before a warning names the stuck operation and peer.");
    CCL_BOOTSTRAP_TIMEOUT_S = ("CCL_BOOTSTRAP_TIMEOUT_S", "300", "Seconds init may wait for all ranks to arrive.");
    CCL_HOSTID = ("CCL_HOSTID", "", "Overrides the host identity (hostname + boot id + network namespace).");
    CCL_DEVICE = ("CCL_DEVICE", "", "host: never use the CUDA driver, every buffer is host memory (the host backend). Unset (or anything else): the CUDA backend when the driver finds a GPU, else the host backend.");
    CCL_SHM_SLOT_BYTES = ("CCL_SHM_SLOT_BYTES", "262144", "Bytes per shared-memory ring slot (largest frame).");
    CCL_SOCKET_FAILOVER = ("CCL_SOCKET_FAILOVER", "1", "CCL_NET=socket with two or more NICs selected (CCL_MPT_IFNAMES or an NCCL_SOCKET_IFNAME list): 1 (the default): each link to another host keeps a backup TCP connection on a second NIC and fails over to it, resuming from the last byte the receiver confirmed. The primary is the topology plan's NIC of the lower rank of the pair (the NIC closest to the rank's GPU, else to its CPU; a host's ranks spread over NICs tied for closest) and the backup its backup NIC (another port of that NIC, else the next closest); a failed primary is redialed every 100 ms (at its NIC's new address if the NIC came back renumbered: each side looks its primary NIC up by name and tells the peer over the backup) and traffic returns to it after a 400 ms hold-down; the last working connection is given up only after 2 s without an answer. Armed without a cut (two namespace hosts of 2 ranks, 64 MiB, medians armed / plain, 2026-11-29, an idle 16-core machine, commit 9bc44b3, six pairs): all_reduce 1.009, sendrecv 1.058 (docs/PERFORMANCE.md). 0: one TCP connection per link.");
    CCL_SOCKET_FRAME_BYTES = ("CCL_SOCKET_FRAME_BYTES", "auto", "Largest frame on a link between hosts, 4 KiB..64 MiB, or auto (the default): 512 KiB, except 16 MiB on a multipath (mpt) link that runs several engines (both sides have 8 or more CPUs per rank), where a frame is split over the engines and each frame costs a round of receive postings, pops and part headers (GPU machine, network path, 128 MiB: sendrecv 1.64 -> 2.38-3.01 GB/s, all_reduce 1.71 -> 2.50-2.83 with 4 MiB against 512 KiB; 16 CPUs, two ranks of 8 engines, 16 MiB against 4 MiB: host-memory sendrecv 4.33 -> 5.87, all_reduce 4.13 -> 5.57, GPU-memory all_reduce 4.31 -> 4.86; one engine on 2 cores lost 15-25% with 4 MiB frames). mpt links keep CCL_MPT_INFLIGHT_BYTES / frame frames in flight, 4 to 16: at 16 MiB frames 4, 64 MiB per direction of a link (the several-engine frames apply only to a rank's few remote links: its 8 engines are shared over them). Every rank must use the same value.");
    CCL_NET = ("CCL_NET", "", "Transport between hosts: mpt (UDP multipath) or socket (TCP); overrides NCCL_NET. Unset (and NCCL_NET unset): mpt, with a pair whose datagrams do not get through (CCL_MPT_PROBE_MS) falling back to TCP; mpt by name: such a pair fails init.");
    CCL_MPT_PROBE_MS = ("CCL_MPT_PROBE_MS", "3000", "mpt: how long link setup waits for the peer's probe datagram before the pair falls back to TCP (mpt by default) or fails (CCL_NET=mpt).");
    CCL_MPT_DROP = ("CCL_MPT_DROP", "0", "mpt: fraction of outgoing UDP datagrams dropped at random (loss injection for tests and demos).");
    CCL_MPT_CHUNK_BYTES = ("CCL_MPT_CHUNK_BYTES", "60000", "mpt: chunk size in bytes (one chunk per UDP datagram; a datagram over the path MTU leaves as one GSO send of MTU-sized datapath fragments, joined again by the receiver).");
    CCL_MPT_SPIN_US = ("CCL_MPT_SPIN_US", "0", "mpt: microseconds an engine thread that found nothing to do keeps polling its paths before it parks in poll (0, the default: it parks at once). Spinning measured no better: 200 us on two ranks of 8 CPUs, 8 engines, 128 MiB host-memory sendrecv 2.76 GB/s against 3.06 parked (2026-11-23); on 2 cores a spinning engine takes the core its peers need.");
    CCL_ONE_SHOT_BYTES = ("CCL_ONE_SHOT_BYTES", "32768", "Host schedules (host memory, and GPU memory staged over the network path): an all-reduce, reduce-scatter or all-gather whose block times (ranks - 1) is at most this many bytes -- what each rank sends -- goes in one exchange: the reductions send every rank's block to the ranks that need it and fold the blocks in rank order (so every rank holds the same bits, for every reduction), the all-gather sends straight to every rank; instead of a ring's n-1 or 2(n-1) exchanges or a tree's 2 log n. Not an all-reduce of more than two ranks all on one host over shared memory: there the ring measured as fast or faster. 16 CPUs, four ranks over TCP, 8 B..8 KiB, us: all-reduce 35-49 -> 22-36, reduce-scatter 34-48 -> 27-32, all-gather 37-41 -> 27-35 (eight ranks 72-82 -> 50-55); multipath transport all-reduce 67-96 -> 51-77 (and since sends complete on leaving, 2026-11-24, four ranks: all-gather 31-40 -> 28-33, reduce-scatter 30-38 -> 23-36); two ranks, CPU machine, 8 B: mpt 22-27 -> 13-15, TCP 7-8 -> 4.0-4.3, shared memory 1.14-1.17 -> 0.77-0.80 (2026-11-24). 0: off; off too when NCCL_ALGO allows only one of ring and tree. Every rank must use the same value.");
    CCL_RING_ONE_STEP = ("CCL_RING_ONE_STEP", "0", "Host schedules (host memory, GPU memory staged through it): 1: a ring all-reduce, reduce-scatter or all-gather runs its steps as one, each send forwarding a frame as soon as the receive that writes it has landed and each receive overwriting only what earlier sends have taken (those sends copy their frames), so no step waits for the one before it to drain; 0, the default: step by step (one H100 machine, 16 CPUs over loopback, 2 and 4 ranks, 2-128 MiB: no gain, within +-15% of step by step either way; 2026-11-24). The same messages in the same order either way, so ranks may differ. A local setting.");
    CCL_ALLREDUCE_EXCHANGE_BYTES = ("CCL_ALLREDUCE_EXCHANGE_BYTES", "1048576", "Host schedules over the network (not shared memory alone), two ranks: an all-reduce of at least this many bytes (and at most CCL_ALLREDUCE_EXCHANGE_MAX_BYTES), above CCL_ONE_SHOT_BYTES, goes in one exchange: each rank sends its whole input and folds the other's into its output frame by frame as it arrives, rank 0's operand first on both ranks (the same bits on both), instead of the ring's reduce-scatter and all-gather, whose second half waits for the first to drain. The same bytes cross the network each way; each rank reduces all of the message instead of half, and in place each frame is copied into the link as it is sent (the fold overwrites the input behind it). 1 MiB, the default: one H100 machine, 16 CPUs, two ranks over loopback (2026-11-24, four alternations, GB/s out of place): 2 MiB 0.6-1.7 -> 1.1-2.3, 8 MiB 2.4-3.6 -> 3.7-4.5 (GPU memory 1.7-3.0 -> 1.9-3.5); at 128 KiB it lost (1.3-1.4 -> 0.9-1.0), at 512 KiB level. 0: off. Every rank must use the same value.");
    CCL_ALLREDUCE_EXCHANGE_MAX_BYTES = ("CCL_ALLREDUCE_EXCHANGE_MAX_BYTES", "16777216", "The largest all-reduce that goes in one exchange (CCL_ALLREDUCE_EXCHANGE_BYTES). 16 MiB, the default: above it the ring's half-size reduction wins where the CPUs are the limit (16 CPUs, two ranks: 32 MiB host memory 6.3-7.0 -> 5.6-6.6 GB/s out of place, 6.8-7.1 -> 4.8-5.5 in place; 128 MiB level to 10% worse; 2026-11-24). Every rank must use the same value.");
    CCL_ONE_SHOT_RANKS = ("CCL_ONE_SHOT_RANKS", "8", "Most ranks a one-exchange reduce-scatter or all-gather (CCL_ONE_SHOT_BYTES) is used for, and twice the most for an all-reduce (default 8: all-reduces of up to 4 ranks; at 8 ranks over TCP the tree was faster, 46-53 us against 51-73; 2026-11-24): each rank sends and receives one message per other rank. Every rank must use the same value.");
    CCL_MPT_INLINE_BYTES = ("CCL_MPT_INLINE_BYTES", "262144", "mpt, links of several engines: frames of at most this many bytes (262144, the default: every frame not split over the engines) go whole on the link's lead engine, and the thread that sends or waits for them runs that engine's progress itself instead of waking engine threads for the data and again for its acknowledgement (16 CPUs, two ranks of 8 engines over loopback, host memory, us per 8 B operation: sendrecv 87-240 -> 28-30, all_reduce 126-156 -> 48-56, all_gather 75-79 -> 26-29; 128 KiB sendrecv 197-272 -> 106-112; 128 MiB busbw unchanged; 2026-11-24). 0: off, every frame to the least-loaded engine. A local setting (nothing changes on the wire).");
    CCL_MPT_SPLIT_BYTES = ("CCL_MPT_SPLIT_BYTES", "262144", "mpt, links of several engines: frames longer than this are cut into one part per engine; shorter ones go whole to one engine. Every rank must use the same value (the hello checks).");
    CCL_MPT_ACK_DELAY_US = ("CCL_MPT_ACK_DELAY_US", "100", "mpt: microseconds the acknowledgement of a chunk that is a whole message (a small frame) may wait for the next such chunk, so one acknowledgement covers both (0: every chunk acknowledged at once; at most 10000). The acknowledgements were half the datagrams of small operations; a copied frame's send completes without its acknowledgement, and frames of one chunk are always copied. Every rank should use the same value (a sender's retransmission timeout adds it).");
    CCL_MPT_FAIL_AFTER_MS = ("CCL_MPT_FAIL_AFTER_MS", "6000", "mpt: a connection gives up on its peer (a network failure, every operation on the link erring) after more than 50 retransmission timeouts, or 50 unanswered probes, spanning at least this many milliseconds (0-3600000). The count alone passes in about 3 s at the capped 64 ms backoff, less than a live peer may stall on a loaded host (2026-11-29: about 4 s on a 2-core CI machine). Both NICs cut under a loop of 64 MiB operations: every rank erred 6.2-6.6 s after the cut at the default (tests/bench/failover_measure.sh MODES=both, docs/PERFORMANCE.md). Lower finds a dead network sooner; CCL_TIMEOUT_S bounds a collective whatever this says.");
    CCL_MPT_PATHS = ("CCL_MPT_PATHS", "8", "mpt: UDP paths (sockets, distinct source ports) per peer, 1..256; both sides must agree.");
    CCL_MPT_IFNAMES = ("CCL_MPT_IFNAMES", "", "mpt: network interfaces (NICs) to spread each link's UDP paths over: exact names, comma-separated, in the same NIC order on every host, at most 8 (e.g. eth0,eth1). Path i uses the (i mod count)-th, so a NIC port that dies takes only its share of the paths: the connection resends their chunks on the others and keeps probing the dead ones, which carry traffic again when the port comes back. Empty, the default: the interfaces a positive NCCL_SOCKET_IFNAME list matches, when it matches two or more that are up (sorted by name, as NCCL's socket transport uses every one it matches), else every path on the interface the ranks bootstrap over.");
    CCL_MPT_CC = ("CCL_MPT_CC", "cubic", "mpt: congestion control: cubic (the default), swift, eqds or none. Swift allows 50 us of queueing delay above the best round trip it has seen (on the GPU machine's loaded loopback, where a fixed target had collapsed it to 0.05 GB/s, it now moves 128 MiB sendrecv at 5.8 GB/s against CUBIC's 6.0).");
    CCL_COPY_THREADS = ("CCL_COPY_THREADS", "auto", "Helper threads (process-wide) that share the copy or reduction of a large received frame with the executor thread, which otherwise moves every received byte alone (the network path, shared memory), and the mpt link's copy of a large outgoing frame into its send slots. auto (the default): a quarter of the CPUs this process can count on (the CPUs it may run on, divided among its host's ranks when it may run on all of them), at least 4 and at most 8 from 8 CPUs up, none below 8 (on 2 cores helpers only compete with the engines; on the GPU machine's 32, 8 helpers took the network path's host-memory sendrecv from 2.17 to 5.10 GB/s and all_reduce from 2.01 to 4.43, 8 engines, 8 MiB frames; two ranks of 8 CPUs, 8 engines: sendrecv 3.20 GB/s with none, 4.76 with 4); or a number, 0 for none. A local setting.");
    CCL_COPY_PARALLEL_BYTES = ("CCL_COPY_PARALLEL_BYTES", "262144", "Smallest copy or reduction of a frame (bytes) split over the CCL_COPY_THREADS helpers. 256 KiB, the default: helpers spin briefly for the next part, so splitting pays from about 64 KiB (examples/par_copy.rs, 2 cores, one helper: 64 KiB pieces 19 GB/s against one thread's 12).");
    CCL_MPT_ZERO_COPY = ("CCL_MPT_ZERO_COPY", "1", "mpt: 1, the default: an operation's frames after its first are not copied into send slots at all; the engines send (and resend) them from the operation's own memory (the user buffer, the plan's scratch or the pinned staging chunk), which the operation keeps unchanged until every frame is acknowledged; a failed operation copies what is still unacknowledged into the slots before its buffers go back. 0: copy every frame (CCL_MPT_ASYNC_COPY then decides on which thread). Local to each rank.");
    CCL_MPT_INFLIGHT_BYTES = ("CCL_MPT_INFLIGHT_BYTES", "3145728", "mpt: bytes of frames a link may have in flight per direction (posted receives the sender may fill; a frame split over several engines is in flight on all of them at once): the frames in flight are this over the largest frame, 4 to 16. 3 MiB, the default: a link of one engine (512 KiB frames) keeps 6 frames in flight, a link of several (16 MiB frames) 4. Frames in flight beyond the caches cost every copy of them: with 16 (the earlier 16 MiB) two ranks with a core each moved host-memory sendrecv at 1 MiB 1.73 GB/s against 2.28 with 6, all_reduce 1 MiB 1.86 against 2.28, sendrecv 8 MiB 1.48 against 1.72, 64 MiB level (2026-11-30, the 2-core CPU machine, tests/bench/mpt_settings_ab.sh, medians of 4 rotated rounds). Clamped to 1 MiB..1 GiB. Every rank must use the same value.");
    CCL_MPT_PLACE_RECEIVES = ("CCL_MPT_PLACE_RECEIVES", "auto", "mpt: 1: the frames of a receive after its first are written by the engines straight into the destination (the user buffer or the plan's scratch) rather than into receive slots that the executor then copies out: one copy of every received byte fewer, but the engines make the write into cold memory that the copy helpers otherwise make beside them. A one-engine link starts once a full-sized frame has come; a link of several engines places the parts of frames split over all of them. 0: always through the slots. auto, the default: 1 when the process has no copy helpers (CCL_COPY_THREADS; 2 cores, sendrecv +13-16% with one engine, +20-25% with two), else 0 (16 CPUs, two ranks of 8 engines and 4 helpers each, host-memory sendrecv 4.12 GB/s placed against 4.80 not, five alternations). A local setting (nothing changes on the wire).");
    CCL_MPT_ASYNC_COPY = ("CCL_MPT_ASYNC_COPY", "0", "mpt: 1: with several engines, the copy threads copy outgoing frames into their send slots while the executor goes on (receiving, reducing), and each frame is queued once copied; 0, the default: the executor waits for each frame's copy (not yet measured on a many-core host). Needs copy threads (CCL_COPY_THREADS). A local setting.");
    CCL_MPT_ENGINE_COPY = ("CCL_MPT_ENGINE_COPY", "0", "mpt: 1: with several engines, each engine's thread copies its own part of an outgoing split frame while the sender waits (0, the default: the sender copies every part; on a 2-core machine engine copies were slower at 512 KiB frames, where a part is shorter to copy than to hand over); a local choice.");
    CCL_MPT_ENGINES = ("CCL_MPT_ENGINES", "auto", "mpt: engines per link, 1..16, or auto (the default: from the CPUs a rank can count on -- its affinity set, or its share of the host's CPUs among the ranks there -- 8 in all from 8 CPUs up, shared out over the links the rank opens to other hosts, at least 1 each -- 8 for one peer, 4 each for two, 1 each for 8 or more -- else 1 per link. On the GPU machine, two ranks of 16 CPUs, 8 engines moved the network path's 128 MiB sendrecv / all_reduce / alltoall at 5.98 / 5.78 / 6.55 GB/s against 4 engines' 4.79 / 4.27 / 5.10; two ranks of 8 CPUs, host memory: 8 engines 4.64-4.76 / 4.25 GB/s sendrecv / all_reduce against one engine's 1.50 / 1.40; on 2 cores four engines were slower than one); the two sides of a link run the smaller of their counts. Each engine is an independent sub-link (its own connection, CCL_MPT_PATHS UDP paths and progress thread); frames go to the least-loaded engine, frames over 256 KiB are split into one part per engine, and the receiver delivers them in order. 1 keeps the single-engine wire format.");
    NCCL_CUMEM_ENABLE = ("NCCL_CUMEM_ENABLE", "0", "1: ncclMemAlloc returns CUDA VMM memory (cuMemCreate), which cuda-ipc shares with peer processes by file descriptor (taken with pidfd_getfd where the kernel allows, probed at setup; else through the bounce buffer), as NCCL does; 0 (the default until measured on a GPU): cuMemAlloc memory, shared by legacy CUDA IPC.");
    CCL_IPC_DISABLE = ("CCL_IPC_DISABLE", "0", "1: GPUs of one host do not map each other's memory (operations on device memory are staged through the host).");
    CCL_IPC_CHUNK_BYTES = ("CCL_IPC_CHUNK_BYTES", "8388608", "cuda-ipc: bytes per pipelined chunk (one copy-engine copy); every rank must use the same value.");
    CCL_IPC_SLOTS = ("CCL_IPC_SLOTS", "4", "cuda-ipc: chunks in flight per peer and direction (receive slots per peer); every rank must use the same value.");
    CCL_IPC_SINGLE_STREAM_BYTES = ("CCL_IPC_SINGLE_STREAM_BYTES", "524288", "cuda-ipc: groups moving at most this many bytes run on the caller's stream alone (lowest latency); larger ones pipeline on a copy stream and a receive stream.");
    CCL_IPC_RX_LANES = ("CCL_IPC_RX_LANES", "1", "cuda-ipc: receive streams per communicator (1-4); more let chunks be copied out or reduced concurrently.");
    CCL_IPC_DIRECT = ("CCL_IPC_DIRECT", "1", "cuda-ipc: send/receive, all-gather, all-to-all, broadcast, gather and scatter copy straight between user buffers on copy engines (0: through the receive slots and kernels); every rank must use the same value.");
    CCL_IPC_DIRECT_SINGLE_BYTES = ("CCL_IPC_DIRECT_SINGLE_BYTES", "524288", "cuda-ipc: direct transfers of a group moving at most this many bytes (this rank's sends and receives) run on the caller's stream alone; larger ones copy on separate lanes so pushes, pulls and local copies overlap.");
    CCL_HIERARCHY = ("CCL_HIERARCHY", "auto", "Communicators spanning two or more hosts, one of them with two ranks or more: collectives go in stages on two sub-communicators made at init (the ranks of each host: cuda-ipc between GPUs; the ranks holding one index on every host: the network), from CCL_HIERARCHY_MIN_BYTES up, instead of staging every byte through host memory and the proxy. Hosts of equal size: all-reduces as a reduce-scatter on each host, an all-reduce of each share across the hosts and an all-gather on each host (the last elements of an uneven count as an all-reduce on each host then across); all-gathers each block across the hosts to the ranks of its index, then on each host; broadcasts and reduces across the hosts among the ranks of the root's index and on each host; reduce-scatters, gathers and scatters where each host's ranks are consecutive; all-to-alls too with CCL_HIERARCHY_ALLTOALL=1. Hosts of different sizes: all-reduces through each host's first rank; all-gathers each block to one rank of every other host, then on each host; broadcasts and reduces from any root; gathers and scatters where each host's ranks are consecutive; reduce-scatters and all-to-alls flat. Everywhere: sends and receives between ranks of one host on the host's communicator; integer averages flat. auto, the default: for operations on GPU memory, on communicators where every rank has a GPU; 1: for host memory too; 0: off. Every rank must use the same value.");
    CCL_HIERARCHY_ALLTOALL = ("CCL_HIERARCHY_ALLTOALL", "0", "1: on a communicator that goes hierarchically (CCL_HIERARCHY) with each host's ranks consecutive, all-to-alls go hierarchically too: each rank's blocks gathered on its host at the rank holding their destination's index, then across the hosts a host's blocks in one message (NCCL's PXN). Off by default: measured only with emulated hosts on one GPU, where it was slower (128 MiB: 1.2-1.8 GB/s against flat 2.7-2.9, 2026-11-24), not yet across real hosts. Every rank must use the same value.");
    CCL_HIERARCHY_MIN_BYTES = ("CCL_HIERARCHY_MIN_BYTES", "0", "The smallest operation (bytes of a rank's buffer: an all-reduce's, a reduce-scatter's output block, an all-gather's input block) that goes hierarchically (CCL_HIERARCHY). Every rank must use the same value.");
    CCL_GPU_FOLD_BYTES = ("CCL_GPU_FOLD_BYTES", "8388608", "GPU path over the network (not shared memory alone), two ranks: an all-reduce, reduce-scatter or reduce of GPU buffers whose transfer (the whole input of an all-reduce or reduce, one block of a reduce-scatter) is at least this many bytes (and at most CCL_GPU_FOLD_MAX_BYTES) goes as a send/receive of the operands -- each rank sends what the other reduces (a reduce's root sends nothing) into a scratch buffer on the other's GPU -- and the GPU folds the received operand with its own, rank 0's first on both ranks (float average and PreMulSum: each rank scales its own operands on the GPU first, then they are added), so the CPUs only move bytes and the reduction runs at the send/receive rate. The scratch buffer (twice the message for scaled reductions) stays allocated on the GPU. 8 MiB, the default: one H100, two ranks over loopback (2026-11-24, two alternations, GB/s out of place): 8 MiB 3.30-3.37 -> 3.31-3.42, 32 MiB 3.18-3.55 -> 3.84-3.85, 128 MiB 3.95-4.10 -> 4.39-4.60, the send/receive rate of the same call (4.60). 0: off (ring, or the exchange folded on the CPU). Every rank must use the same value.");
    CCL_GPU_FOLD_WIDE = ("CCL_GPU_FOLD_WIDE", "0", "CCL_GPU_FOLD_BYTES for three to eight ranks: 1: all-reduces whose count splits evenly over the ranks and reduce-scatters go block by block -- each rank sends block j of its input to rank j and receives its own block of every other rank's input into a GPU scratch buffer, one kernel folds the blocks in rank order, and an all-reduce then sends its folded block to every rank (the ring's bytes, no CPU reductions; the window applies to a block). 0, the default: the ring, as measured no better (one H100, ranks as processes each its own host, 48 / 192 MiB, one round each, GB/s out of place / in place; 2026-11-24: all-reduce 3 ranks ring 2.70/3.28, 3.15/3.23 -> fold 3.16/3.07, 3.28/3.41; 4 ranks 2.26/2.12, 2.32/2.28 -> 2.44/2.47, 1.91/2.50; reduce-scatter 3 ranks 2.53/2.64, 2.81/2.74 -> 2.00/2.94, 2.23/3.32). Every rank must use the same value.");
    CCL_GPU_FOLD_MAX_BYTES = ("CCL_GPU_FOLD_MAX_BYTES", "268435456", "The largest transfer CCL_GPU_FOLD_BYTES folds on the GPU (its scratch buffer on the GPU is as large; two or three times for float average and PreMulSum): 256 MiB, the default, bounds that memory; larger all-reduces take the ring. Every rank must use the same value.");
    CCL_GPU_PIECE_BYTES = ("CCL_GPU_PIECE_BYTES", "33554432", "GPU operations staged through pinned host memory (the network path, NCCL_P2P_DISABLE=1): large all-reduces, broadcasts, reduces, all-gathers, all-to-alls and send/receive groups go in pieces of this many bytes per operation, so the copies to and from the GPU overlap the transfers (0: whole). 32 MiB, the default: with 4 mpt engines, 4 MiB frames and 8 copy threads (the defaults on the GPU machine) it beat 4 MiB pieces (2 H200, network path over loopback, 128 MiB, one call: all_reduce 1.64 -> 2.33 GB/s, sendrecv 1.83 -> 2.77, alltoall 1.20 -> 1.16) and 8 MiB pieces and whole operations in an earlier call; with one engine and no copy threads (2026-11-22) 4 MiB pieces beat whole operations everywhere. Every rank must use the same value.");
    CCL_GPU_STREAM_PIECE_BYTES = ("CCL_GPU_STREAM_PIECE_BYTES", "auto", "GPU path over the network (or staged): a lone all-reduce, reduce-scatter or reduce of GPU buffers longer than this many bytes, with a plain reduction, or a lone broadcast, all-to-all, gather or scatter (whose own block, at the root where there is one, then goes input to output on the GPU: one device copy), runs as ONE collective whose operations read each piece of this many bytes (more when that would make over 256 pieces) as soon as the stream has copied it to host memory and hand each piece of the result back as soon as it is written, instead of copying the whole input down before the collective starts and the whole result up after it ends (above CCL_GPU_PIECE_BYTES: one collective per piece, whose steps each drain the links). auto, the default: pieces of 2 MiB or a sixteenth of the operation, whichever is longer, when the communicator's collectives cross the network, off (0) when they cross shared memory alone (not measured there); 2 MiB pieces lost from 64 MiB on (one H100, 2026-11-24, three alternations, all-reduce 256 / 512 MiB: 2 MiB 4.3 / 4.2 GB/s, 8 MiB 4.8 / 4.7, auto 4.8 / 4.8). One H100, two ranks over loopback, GPU memory (2026-11-24, three alternations, GB/s): 4 MiB 2.78-2.98 -> 3.08-3.35, 8 MiB 3.34-3.79 -> 3.93-4.19, 16 MiB 4.15-4.53 -> 4.28-4.55, 32 MiB level; 128 MiB level with 2 and 8 MiB pieces (2026-11-24; two H200s, 2026-11-24: 8 MiB pieces 6.1-6.6 against 5.8-6.4 per piece collective). A number: that, on every communicator; 0: off. Every rank must use the same value.");
    CCL_GPU_STREAM_P2P = ("CCL_GPU_STREAM_P2P", "1", "GPU path over the network (or staged), while collectives stream there (CCL_GPU_STREAM_PIECE_BYTES on): 1, the default: every send and receive in a group with GPU memory is one message, however long (CCL_GPU_PIECE_BYTES no longer cuts it), and a group of sends and receives one of which is longer than a stream piece runs as one plan on byte-range gates: each send's frames wait only for their piece to reach host memory, each receive's finished pieces go back to the GPU while the rest arrive (pieces as CCL_GPU_STREAM_PIECE_BYTES cuts the longer direction's bytes). 0: sends and receives longer than CCL_GPU_PIECE_BYTES go as several messages of that size, and a group of them is copied down first and up after (or per piece in a gated group). One H100, two ranks over loopback, send/receive 128 / 512 MiB, four alternations (2026-11-24): 32 MiB messages 4.30-4.60 / 4.38-4.56 GB/s, whole messages on 8 MiB gates 4.72-5.09 / 4.87-5.25. Every rank must use the same value (a send cut into messages does not match a receive of one).");
    CCL_IPC_DIRECT_REDUCE_BYTES = ("CCL_IPC_DIRECT_REDUCE_BYTES", "1", "cuda-ipc: all-reduces and reduce-scatters of at least this many bytes (the whole input) that the low-latency kernel does not take (CCL_IPC_LL_BYTES) read the peers' inputs directly in one kernel and push the result straight into their outputs, when every rank's buffers can be mapped and every rank calls within the push wait; otherwise they go through the staged protocol (0: never; the default 1: all of them -- staged measured 0.2-0.4x NCCL at 8 MiB, direct 0.94-0.96x); used only if every rank has it on.");
    CCL_IPC_PUSH_WAIT_US = ("CCL_IPC_PUSH_WAIT_US", "500", "cuda-ipc: how long a direct send waits (host) for the receiver's call so that it can push the data (two processes each pushing use the copy engines best; one process pushing and pulling halves the bandwidth); then the receiver pulls.");
    CCL_IPC_DIRECT_REDUCE_PIECE_BYTES = ("CCL_IPC_DIRECT_REDUCE_PIECE_BYTES", "16777216", "cuda-ipc: a direct all-reduce reduces its slice in pieces of this many bytes (at most 16 pieces), each pushed to the peers while the next one reduces.");
    CCL_IPC_COPY_KERNEL = ("CCL_IPC_COPY_KERNEL", "0", "cuda-ipc: 1: the side of a direct transfer that copies (pushing sender or pulling receiver) waits for its peer, copies and signals in one kernel of one block instead of a stream wait, a copy-engine copy and a stream write, so under CUDA_DEVICE_MAX_CONNECTIONS=1 nothing of ours sits queued behind a waiting command (uses an SM while it waits and copies); auto: only under CUDA_DEVICE_MAX_CONNECTIONS=1; 0 (the default): copy engines, no kernel.");
    CCL_IPC_WAIT_KERNEL = ("CCL_IPC_WAIT_KERNEL", "auto-transfers", "cuda-ipc: 1: a direct transfer's wait for the peer's copy and a direct reduction's for its peers run as a one-thread kernel instead of a stream wait operation, which holds the hardware queue that CUDA_DEVICE_MAX_CONNECTIONS=1 makes every stream share (Megatron-LM's setting); transfers: only the direct transfers' waits; auto / auto-transfers (the default): the same, only under CUDA_DEVICE_MAX_CONNECTIONS=1; 0: stream waits, no kernel at all. Megatron-LM, one device call on 2026-11-22 (60 iterations): transfers took 1F1B from 1.073x to 0.926x NCCL's iteration time, interleaved from 0.964x to 0.936x, tensor parallel from 1.62x to 1.26x; 1 (reductions too) made tensor parallel 1.29x (2026-11-22).");
    CCL_IPC_PUSH_WAIT_ADAPT = ("CCL_IPC_PUSH_WAIT_ADAPT", "1", "cuda-ipc: 1: once a send's push wait for a peer runs out (the receiver called late, as pipeline stages do), the next sends to that peer give up at once (2, 4, 8 ... 64 of them, then it waits again), so the sender's host thread is not held on every send; 0: always wait.");
    CCL_IPC_DIRECT_REDUCE_TAKEOVER_US = ("CCL_IPC_DIRECT_REDUCE_TAKEOVER_US", "auto", "cuda-ipc, two ranks: a rank whose peer has not yet called a direct all-reduce or reduce-scatter waits this many microseconds (host), then leaves the whole reduction to the peer, which does both halves when it calls; neither host waits longer. auto / auto-US, the default: so (0 or US) when CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM's host-bound training sets it, off otherwise (Megatron tp2-sp, 100 iterations: 585.7 ms off, 510.0 ms at 0; NCCL 523.8 / 488.1). -1: wait as CCL_IPC_PUSH_WAIT_US says, then both go staged. A local setting.");
    CCL_GRAPH_DIRECT = ("CCL_GRAPH_DIRECT", "1", "Collectives and sends/receives captured into CUDA graphs between the GPUs of one host (cuda-ipc): 1: captured on the direct paths (copy engines and a reduction kernel, no host thread at replay; every collective, send and receive, every reduction but PreMulSum with a device scalar; 1024-65536 groups per communicator by its size, 65536 up to 8 ranks); 0, or what it does not cover: through pinned host memory and the host transports (docs/GRAPHS.md). Must be the same on every rank.");
    CCL_GRAPH_LL = ("CCL_GRAPH_LL", "1", "Small collectives captured into CUDA graphs between the GPUs of one host (cuda-ipc): 1: the ones an eager call would run as a low-latency kernel (CCL_IPC_LL_BYTES, CCL_IPC_LL_EXCHANGE_BYTES) are captured as that kernel, which takes its operation's number on the GPU at every replay (no exchange with the peers at capture); every rank must then replay its graphs and issue its eager low-latency operations in the same order, as NCCL requires of a communicator's operations. 0: they take the CCL_GRAPH_DIRECT paths. Every rank must use the same value.");
    CCL_GRAPH_ONE_SHOT_BYTES = ("CCL_GRAPH_ONE_SHOT_BYTES", "262144", "Captured all-reduces on the direct paths (CCL_GRAPH_DIRECT) of at most this many bytes: every rank reduces all of it in one kernel reading every rank's input, between two handshakes, instead of reducing its share and copying the others' (a handshake and a copy more); the smallest value over the ranks is used.");
    CCL_GRAPH_FUSED_COPY_BYTES = ("CCL_GRAPH_FUSED_COPY_BYTES", "16777216", "With CCL_GRAPH_FUSED: a captured group that only copies, with no in-place exchange through scratch memory, of at most this many bytes in at most 16 copies runs as one kernel that also does its two handshakes; above 64 KiB (what one block takes) the kernel spreads over a block per 32 KiB, up to CCL_GRAPH_COPY_BLOCKS: block 0 does the first handshake and lets the others go, the last block to finish does the second. Larger groups go on copy engines between handshake kernels, every rank writing its partners' receive buffers (pushing: a copy engine writes over NVLink faster than it reads; 2026-11-30, docs/device-runs/2026-11-30-graphs/push/: 16 MiB - 1 GiB all_gather 1.02-1.08x pulling, alltoall 1.00-1.08, sendrecv 1.00-1.05) where no rank's group parks a receive, else reading them. Two H200s, nccl-tests -G 10 beside NVIDIA NCCL 2.28.9 (2026-11-30, docs/device-runs/2026-11-30-spread/): busbw over NCCL's with 65536 (one block's bytes, the earlier default), 4 MiB and 16 MiB (64 blocks): sendrecv 128 KiB - 4 MiB 0.41-0.78 / 0.88-1.34 / 0.94-1.34, 8 MiB all_gather 0.93 / 0.93 / 1.43, alltoall 0.71 / 0.71 / 1.09, gather 0.73 / 0.73 / 1.12, sendrecv 0.83 / 0.83 / 1.05; 16 MiB alltoall 0.76 / 0.76 / 0.98, sendrecv 0.89 / 0.89 / 1.00 (about where copy engines catch up). The kernel takes SMs: the zero-SM setting (CCL_IPC_LL_EXCHANGE_BYTES=0) keeps every captured copy on copy engines. A local setting (both forms wait and write the same words in the same order).");
    CCL_GRAPH_COPY_BLOCKS = ("CCL_GRAPH_COPY_BLOCKS", "64", "Most blocks of the kernels that copy a captured group's data on SMs (the spread form of CCL_GRAPH_FUSED_COPY_BYTES, and groups of copies between handshake kernels), a block per 32 KiB up to this many (1-1024). Two H200s, nccl-tests -G 10 (2026-11-30, docs/device-runs/2026-11-30-spread/copyblocks.md): 32 and 64 level up to 4 MiB, 64 and 128 level at 8 and 16 MiB. Where N ranks of the communicator share one GPU (MPS, or one process) at most the GPU's SMs / N: the spread kernel's blocks spin until every rank's first block has met, so all of them must fit on the GPU at once (eight ranks on one H200 under MPS hung in a captured 8 MiB all-gather at 64 blocks, passed at 16 and 32; 2026-12-01). A local setting.");
    CCL_GRAPH_FUSED = ("CCL_GRAPH_FUSED", "1", "Small groups captured into CUDA graphs on the direct paths (CCL_GRAPH_DIRECT), up to 8 ranks, as one kernel of one block that also does the group's two handshakes (on GPU words, no stream memory operations), instead of two batches of stream memory operations around a reduction kernel or copies: a group that is one all-reduce going one-shot (CCL_GRAPH_ONE_SHOT_BYTES), one reduce-scatter or one reduce, of a plain reduction (sum, prod, max, min), at most 64 KiB (an all-reduce in place: 16384 elements), or a group that only copies (all-gather, broadcast, all-to-all, gather, scatter, sends and receives; in-place exchanges through scratch memory included) in at most 16 copies, at most 64 KiB on one block, up to CCL_GRAPH_FUSED_COPY_BYTES (16 MiB) spread over blocks. A one-block group uses one SM for a few microseconds. Larger groups that only copy, two to 16 copies of at most CCL_IPC_LL_EXCHANGE_BYTES each, copy in one kernel of up to CCL_GRAPH_COPY_BLOCKS blocks between their handshakes instead of a copy-engine node per copy (one H200, four ranks under MPS, 2026-11-29: captured all-gathers and all-to-alls of 128 KiB - 2 MiB 20-28% less time per call); CCL_IPC_LL_EXCHANGE_BYTES=0 keeps those on copy engines. Off on a GPU that a rank of another process shares in time slices (not under MPS). 0: the parts. A local setting (both forms wait and write the same words in the same order).");
    CCL_GRAPH_HANDSHAKE_KERNEL = ("CCL_GRAPH_HANDSHAKE_KERNEL", "1", "Groups captured into CUDA graphs on the direct paths (CCL_GRAPH_DIRECT) that are not one kernel (CCL_GRAPH_FUSED): each handshake with the partners as a one-thread kernel spinning on the words, instead of a batch of stream waits and writes, which the GPU re-polls slowly once several partners are waited for (a 4-rank captured all-gather of 64 KiB per rank: 40 us per call with stream waits, one H200 under MPS, 2026-11-29). Off where CCL_GRAPH_FUSED is (time-sliced sharing of a GPU). 0: stream waits and writes. A local setting (both wait and write the same words in the same order).");
    CCL_KERNEL_PRELOAD = ("CCL_KERNEL_PRELOAD", "1", "GPU: 1 (the default): the first communicator on a device loads every reduction kernel of every type then (compiled on all cores, at most 16, where the disk cache lacks them; a communicator of 3-8 ranks adds its many-input kernels), as NCCL does: loading a module waits for everything queued on the device and holds up the other threads' driver calls meanwhile, so a load while streams wait for work another thread has yet to queue never returns (two ranks of one process on a GPU hung about 1 run in 3, 2026-11-23). 0: each kernel loads at its first use.");
    CCL_IPC_DIRECT_REDUCE_MULTI = ("CCL_IPC_DIRECT_REDUCE_MULTI", "1", "cuda-ipc, more than two ranks (up to 8): a direct all-reduce or reduce-scatter reduces this rank's slice in one kernel reading every rank's input at once, instead of one two-input kernel per peer (the same bits either way). 0: the chain. A local setting.");
    CCL_IPC_DIRECT_REDUCE_WRITE_ALL = ("CCL_IPC_DIRECT_REDUCE_WRITE_ALL", "0", "cuda-ipc, up to 8 ranks: 1: a direct all-reduce's kernel writes each element of this rank's reduced slice into every rank's output as it computes it (stores over NVLink from SMs), instead of the copy engines pushing the slice to the peers piece by piece behind the kernel: one kernel launch and no copies per call, and each GPU's reads of its peers and writes to them overlap in one pass. The same bits either way. 0 (the default): copy-engine pushes; not yet measured on several GPUs (tests/gpu/device_x4.sh PART=writeall, MODE=writeall of docs/device-runs/next/next_x2.sh). A local setting.");
    CCL_IPC_DIRECT_REDUCE_MAILED = ("CCL_IPC_DIRECT_REDUCE_MAILED", "0", "cuda-ipc, 2 to 8 ranks: 1: a direct all-reduce or reduce-scatter whose peers have not all called yet waits for nothing: the rank queues at its call one reduction kernel that learns the peers' buffers from a mailbox slot in host-mapped memory, which the engine's mail thread fills once every rank has posted and the peers' buffers are mapped here (for an all-reduce the kernel also writes the reduced slice into every rank's output, as CCL_IPC_DIRECT_REDUCE_WRITE_ALL=1 does); buffers that cannot be mapped go through this rank's bounce buffer (a copy in before, a copy out after). So no host thread waits for a peer's call (DESIGN.md invariant 1) and the path no longer depends on how late a peer called: with 0 the first ranks wait up to CCL_IPC_PUSH_WAIT_US for the others' posts and every rank goes staged when one is late. The same bits either way. Reduces still meet (only the root has an output). The kernel's blocks wait on the GPU while a peer is late, holding their SMs. One H200, 2-8 ranks under MPS (2026-12-01, docs/device-runs/2026-12-01-onegpu-mailed/): nccl-tests all_reduce and reduce_scatter 0 wrong, the host waited 0.000-0.011 ms per rank for the peers' posts against 0.09-18 ms with 0; host time per 16 MiB all-reduce 12-27 us (mostly 13-17) against 22-24; four ranks' all-reduces of 2 - 64 MiB took 1.1-1.6 times as long as with 0, their kernels' waiting blocks sharing the one GPU's SMs; a survivor's mailed all-reduce with a dead peer released by ncclCommAbort in 3-8 ms. Not yet measured on two or four GPUs, hence 0 (the default). Used only if every rank has it on.");
    CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES = ("CCL_IPC_DIRECT_REDUCE_TAKEOVER_MAX_BYTES", "67108864", "cuda-ipc, two ranks, with CCL_IPC_DIRECT_REDUCE_TAKEOVER_US on: a direct reduction of at least this many bytes (per rank's input) first waits for the peer's call as long as CCL_IPC_PUSH_WAIT_US says (one GPU reducing both halves takes about twice as long, which outweighs a short host wait on large messages), and only then leaves it all to the peer instead of going staged. A local setting.");
    CCL_IPC_PUSH_WAIT_MIN_BYTES = ("CCL_IPC_PUSH_WAIT_MIN_BYTES", "0", "cuda-ipc: direct sends smaller than this do not wait for their receiver's call at all (the receiver pulls), nor direct reductions (all-reduce, reduce-scatter) of fewer bytes for the other ranks' calls (they go staged unless every rank already posted): the wait holds the caller's host thread, which a host-bound training loop (Megatron tensor parallel) pays in full, while the cost of not waiting is a copy at up to half bandwidth when the later rank both pushes and pulls; 0 (the default): every send may wait (a local setting).");
    CCL_IPC_PUSH_WAIT_BUSY_US = ("CCL_IPC_PUSH_WAIT_BUSY_US", "5000", "cuda-ipc: how long that wait may last while this GPU is still busy with the communicator's earlier work (waiting then idles nothing).");
    CCL_IPC_EXCHANGE_WAIT_US = ("CCL_IPC_EXCHANGE_WAIT_US", "20000", "cuda-ipc: a send whose group (sends and receives only: not a collective's blocks) also receives from the same peer (torch batch_isend_irecv: a pipeline stage's send-forward-receive-backward) waits this many microseconds for that peer's receive, regardless of CCL_IPC_PUSH_WAIT_US and CCL_IPC_PUSH_WAIT_ADAPT, so that each side pushes its own data on its own copy engines at once; given up, the later side copies both directions one after the other (Megatron pp2-1f1b, micro-batch 8: two 88 us copies in series per exchange). The group cannot complete before the peer calls, and Megatron synchronizes right after it. 0: as any send. A local setting.");
    CCL_IPC_MAILED_PUSH = ("CCL_IPC_MAILED_PUSH", "0", "cuda-ipc: 1: a send posted before its receive (the receiver has not called yet) waits for nothing: it queues a copy kernel that waits on a mailbox slot in host-mapped memory, and an engine thread writes the receiver's buffer address there once the receiver posts and its buffer is mapped in this process; so no host thread waits for a peer's call (DESIGN.md invariant 1) and each GPU still pushes its own data. The kernel's copy uses CCL_IPC_MAIL_BLOCKS SMs (copy engines do the other copies). Replaces the push waits (CCL_IPC_PUSH_WAIT_US, CCL_IPC_EXCHANGE_WAIT_US) for such sends; falls back to them when 1024 mailed sends are in flight. 0 (the default): off.");
    CCL_IPC_EAGER_SEND = ("CCL_IPC_EAGER_SEND", "auto", "cuda-ipc: 1: a direct send posted before its receive (the receiver has not called yet) waits for nothing: from CCL_IPC_EAGER_MIN_BYTES on it goes through the receiver's receive slots (CCL_IPC_SLOTS x CCL_IPC_CHUNK_BYTES per peer), this GPU's copy engine pushing each chunk and the receiver's GPU copying it out once the receiver calls (it queues its own copies first); a smaller one is pulled by the receiver. No host thread then waits for a peer. auto (the default): 1 where CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM's host-bound training sets it, 0 elsewhere. Two H200s beside NVIDIA NCCL 2.28.9, 2026-11-30 (docs/device-runs/2026-11-30-eager/early): Megatron-core iterations with 1 against 0 tp2-sp 514.1 / 542.1 ms (NCCL 508.6), pp2-1f1b 185.8 / 211.7 ms (NCCL 171.6), the host waiting 0 ms where 0 waited up to 714 ms per rank; but in nccl-tests an exchange (sendrecv, all_gather, alltoall) whose first side goes through the slots ran at 0.49-0.90 of 0's speed from 8 MiB up and sendrecv 8 KiB - 2 MiB at 0.60-0.88 (the receiver's second copy), one-way transfers 0.95-1.02. 0: such a send waits for its receiver up to CCL_IPC_PUSH_WAIT_US (and CCL_IPC_EXCHANGE_WAIT_US) so that it can push straight into the receiver's buffer, else the receiver pulls. CCL_IPC_MAILED_PUSH and CCL_IPC_REMOTE_COPY come first where on. A local setting: a receiver handles an eager send whatever its own.");
    CCL_IPC_EAGER_MIN_BYTES = ("CCL_IPC_EAGER_MIN_BYTES", "1048576", "cuda-ipc, with CCL_IPC_EAGER_SEND on: the smallest send that goes through the receiver's slots when posted before its receive; a smaller one waits for nothing either, the receiver copies it (pulls) when it calls (one copy where the slots take two).");
    CCL_IPC_EAGER_COPY_KERNEL = ("CCL_IPC_EAGER_COPY_KERNEL", "0", "cuda-ipc: 1: a receiver copies each chunk of an eager send (CCL_IPC_EAGER_SEND) out of its receive slot with one kernel that waits for the chunk, copies it on SMs (a block per 64 KiB, up to 32) and returns the slot, instead of a stream wait, a copy and a stream write (a kernel's spin holds no hardware queue, as a stream wait does): an experiment on why eager exchanges ran at 0.49-0.90 of the push wait's speed: on two H200s (2026-11-30, f83ccce, docs/device-runs/2026-11-30-x2-f83ccce/eagerck.md) it ran them at 0.52-0.84, plain eager at 0.50-0.86, so it stays off. 0 (the default): the stream operations. A local setting.");
    CCL_IPC_MAIL_BLOCKS = ("CCL_IPC_MAIL_BLOCKS", "16", "cuda-ipc, with CCL_IPC_MAILED_PUSH=1: blocks (of 512 threads) of a mailed send's copy kernel, 1-56.");
    CCL_IPC_LL_EXCHANGE_BYTES = ("CCL_IPC_LL_EXCHANGE_BYTES", "auto", "cuda-ipc: all-gathers, all-to-alls, broadcasts, gathers and scatters of at most this many bytes (count x type size: per rank, per peer for all-to-all, the whole buffer for broadcast; at most 16 MiB) run as the one-kernel low-latency exchange (32 blocks push into the peers' low-latency areas, then copy out what the peers pushed: one launch, no rendezvous), and sends and receives of at most this many bytes (at most 32 KiB) as the point-to-point kernel (two blocks, slots mapped in advance, no rendezvous), instead of zero-SM copy-engine transfers, whose driver calls and rendezvous cost host time and latency. auto: 4 MiB with two ranks, 512 KiB with more (2026-11-30, docs/device-runs/2026-11-30-defaults/exbig/: at 4 MiB per rank the kernel matched copy engines in nccl-tests and cut Megatron-core tensor-parallel's host time in libccl's calls 3.3x; 8 and 16 MiB lost in CUDA graphs, all-to-all 0.79-0.88x). Measured 2026-11-29 with NVIDIA nccl-tests beside NCCL 2.28.9 on two H200s (docs/device-runs/2026-11-29-x2/x2-midband.md): at 2 MiB the kernel ran all-gather 1.22x NCCL, all-to-all 1.11-1.21x, broadcast 1.19-1.27x, gather 0.81-1.09x, scatter 1.03-1.09x, where copy engines ran 0.65-0.86x; from 8 MiB copy engines match it. Below 512 KiB (one H200, two processes under MPS, tests/gpu/device_host_cost.sh) a 64 KiB all-gather cost 23 us of host time per call on copy engines against 8 us on the kernel. More than two ranks are not yet measured above 512 KiB. The area each rank maps holds the larger of this and CCL_IPC_LL_BYTES per peer. 0: never, so these operations use no SM at any size (the zero-SM setting), captured into CUDA graphs too (their copies on copy engines, their handshakes as stream waits); the smallest value over the ranks is used.");
    CCL_IPC_LOCAL_COPY_LANES = ("CCL_IPC_LOCAL_COPY_LANES", "1", "cuda-ipc: a direct group's local copies (an all-gather's or all-to-all's own block, a root's own part) of at least 2 MiB are cut into parts of at least 1 MiB over this many streams -- the free copy lane, then copy and receive lanes the group's transfers leave idle (CCL_IPC_RX_LANES adds some) -- (1, the default: one copy; 4 measured no faster beside a GEMM on 2026-11-22: a copy within one GPU is a driver kernel on SMs, not copy-engine work, see CCL_IPC_LANE_PRIORITY); a local setting.");
    CCL_IPC_LANE_PRIORITY = ("CCL_IPC_LANE_PRIORITY", "default", "cuda-ipc: high: libccl's own streams (copy and receive lanes) are created at the device's highest priority; default (the default): at the default priority. A copy within one GPU (an all-gather's or all-to-all's own block, a root's own part) runs as a driver kernel on SMs, not on a copy engine (tests/gpu/ce_or_sm.cu); beside a compute kernel that fills the GPU it started only when that kernel ended (a 128 MiB copy queued 1 ms into a 3.9 ms kernel of short blocks: done at 3.9 ms at default priority, 0.07 ms after it was queued at the highest; tests/gpu/copy_priority.cu); but beside a bf16 GEMM loop (tests/gpu/overlap.py), whose kernels keep their blocks on the SMs to the end, high changed nothing (all-gather 85.3 against 84.2 GB/s, all-to-all 86.0 against 84.7, 2026-11-23), so it is not the default. A local setting.");
    CCL_IPC_BCAST_RELAY_BYTES = ("CCL_IPC_BCAST_RELAY_BYTES", "8388608", "cuda-ipc: broadcasts of at least this many bytes over more than two GPUs go as a pipelined scatter to the non-root ranks and an all-gather among them, on copy engines, so the root sends the buffer about once instead of once per peer (0: never; used only if every rank has it on, from the largest value).");
    CCL_IPC_BCAST_RELAY_CHUNK_BYTES = ("CCL_IPC_BCAST_RELAY_CHUNK_BYTES", "16777216", "cuda-ipc: a relayed broadcast is cut into chunks of about this many bytes (larger when that would make more than 16; at least 1 MiB), each scattered in one phase while the previous one is all-gathered.");
    CCL_IPC_SYMMETRIC_WINDOWS = ("CCL_IPC_SYMMETRIC_WINDOWS", "1", "cuda-ipc: windows registered with ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC) are agreed with every rank when registered (each rank's window mapped by its peers), and collectives moving data (all-gather, all-to-all, broadcast, gather, scatter) whose landing places lie in such windows, at one offset of every rank's, push each rank's data into its peers' buffers without waiting for their calls: no send waits on the host for its receiver, and each GPU's copy engines move its own data whoever calls first (otherwise the later rank may copy both directions, at half speed). Direct all-reduces and reduce-scatters on such windows take the peers' buffers from the windows instead of waiting for their posts, so none goes staged for a late peer (a reduce still meets: only its root has an output). Where the buffers could be read two ways (a scatter's output that may be in place) or a peer receives over its own input (an in-place all-to-all) the collective meets as without windows; a receiver whose buffer is not where its sender pushed reports ncclInvalidUsage. One H200, two ranks under MPS, nccl-tests -R 2 (2026-12-01): all_gather, alltoall, broadcast, gather, sendrecv, all_reduce 8 B - 64 MiB 0 wrong; two and four ranks, all_reduce and reduce_scatter 8 B - 256 MiB 0 wrong, the host waited 0.002-0.003 ms in all for the peers' posts of 38-72 direct reductions per rank, 0.4-5.0 ms without windows (6-8 of them staged); not yet measured on two or four GPUs. 0: such windows are plain registrations. Every rank must use the same value.");
    CCL_IPC_REMOTE_COPY = ("CCL_IPC_REMOTE_COPY", "0", "cuda-ipc, two ranks on one host: 1: each process also keeps a context on its peer's GPU (525 MiB of that GPU's memory measured on an H200, tests/gpu/cross_issue.cu), and in groups of sends and receives a transfer it would pull from its peer is queued there instead, so the peer GPU's copy engine pushes it while this GPU's pushes this rank's own data (one GPU pushing and pulling at once halves both directions). Such a send then never waits for its receiver's call (CCL_IPC_PUSH_WAIT_US, CCL_IPC_EXCHANGE_WAIT_US), which ties the two ranks' host threads together (send/receive at 512 MiB: 384 GB/s with it, 386 without; the hosts waited 1 ms in all instead of 937 ms over a PyTorch run). Not for collectives: beside an all-to-all's or all-gather's own-block kernel the other process's copy on that GPU slowed both (256 MiB all-to-all 370 -> 510 us). Used only if both ranks set it and the peer's GPU is visible here; transfers of VMM memory (ncclMemAlloc with NCCL_CUMEM_ENABLE=1, PyTorch's expandable segments) and under CCL_IPC_REMOTE_COPY_MIN_BYTES are pulled as before. 0 (the default): off.");
    CCL_IPC_BATCH_COPIES = ("CCL_IPC_BATCH_COPIES", "auto", "cuda-ipc, eager calls: auto (the default): the copies one rank does in a group's direct transfers, its own block included, go to the driver as one batch on the caller's stream (cuMemcpyBatchAsync, CUDA 12.8+ drivers), after one wait for every peer's arrival and before one write of every \"done\" (and a direct reduction's slice of one piece goes to every peer as one batch): one driver call instead of one per copy, and with more than two ranks the driver spreads the batch over the copy engines (one batch per GPU moved an all-gather's blocks at 351-384 GB/s on four H200s where one stream per peer moved 190-208, a probe with no library on 2026-11-28). With two ranks a group whose own-block copies exceed 2 MiB keeps a copy lane per direction: a large copy within the GPU ran slower in a batch than alone or beside the push on a lane of its own (two H200s beside NVIDIA NCCL 2.28.9, 2026-11-30, docs/device-runs/2026-11-30-batch2/: batching everything ran all-gathers and all-to-alls of 16 and 64 MiB at 0.73-0.84 of lanes and a gather's root 0.93 at 16 MiB; batches under this limit ran sends of 64 KiB - 16 MiB 1.07-1.23x and cut host time per call at 16 MiB for all-gathers from 19.6 to 14.1 us and broadcasts from 18.8 to 12.3). 1: batch every group, any rank count. Not on the legacy default stream, nor where the driver lacks the call: one copy lane per peer as with 0.");
    CCL_IPC_BATCH_LOCAL_MAX_BYTES = ("CCL_IPC_BATCH_LOCAL_MAX_BYTES", "auto", "cuda-ipc, with batched copies (CCL_IPC_BATCH_COPIES): a group whose local copies (an all-gather's or all-to-all's own block, a gather's root's) total more than this many bytes keeps a copy lane per peer instead of one batch. auto (the default): 2 MiB with two ranks under CCL_IPC_BATCH_COPIES=auto, no limit with more ranks or with CCL_IPC_BATCH_COPIES=1 (more than two ranks are not yet measured with a limit: on two H200s an 8 MiB own block took 7% longer in a batch than alone, 2026-11-30, docs/device-runs/2026-11-30-batch2/); an integer: that limit at any rank count (0: no local copy in a batch). A local setting.");
    CCL_IPC_REMOTE_COPY_MIN_BYTES = ("CCL_IPC_REMOTE_COPY_MIN_BYTES", "1048576", "cuda-ipc, with CCL_IPC_REMOTE_COPY=1: transfers of at least this many bytes go on the peer GPU's copy engine (smaller ones keep the push wait and pull as before: two event hops cost more than they save).");
    CCL_IPC_HOST_PATH_PERMILLE = ("CCL_IPC_HOST_PATH_PERMILLE", "80", "cuda-ipc, two ranks on one host with direct transfers: this many thousandths (0-500; 1000: all of it, through the ring in rounds however long, the data path of GPUs with no peer access, to measure it where they have it) of a direct transfer of at least CCL_IPC_HOST_PATH_MIN_BYTES, in a group with no transfer the other way with the same peer, go from GPU to GPU through pinned host memory over PCIe, beside the NVLink copy of the rest (one copy engine moves at most ~390 GB/s over NVLink on an H200 pair; PCIe adds up to ~45 GB/s one way: tests/gpu/pcie_side_path.cu). The host path needs a shared-memory ring of CCL_IPC_HOST_PATH_SLOTS x CCL_IPC_HOST_PATH_SLOT_BYTES per rank, pinned; it is made if this or CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE is above 0. Local: the rank that posts a transfer first decides its share for both.");
    CCL_IPC_HOST_ONLY = ("CCL_IPC_HOST_ONLY", "auto", "cuda-ipc, ranks of one host: host-only mode, for GPUs that must not or cannot reach each other's memory (NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL=LOC; consumer cards, many VMs): the engine's flag words and receive slots ((ranks - 1) x CCL_IPC_SLOTS x CCL_IPC_CHUNK_BYTES per rank, 96 MiB at four ranks) live in shared pinned host memory. Two ranks: every byte of a send, receive, all-gather, all-to-all, broadcast, gather or scatter goes GPU -> shared pinned ring -> GPU on copy engines in stream order (CCL_IPC_HOST_PATH_SLOTS x _SLOT_BYTES), and reductions go chunk by chunk into the peer's receive slots and are reduced out of them by this GPU's kernels; more ranks (or CCL_IPC_DIRECT=0): every operation through the slots, pushed on copy engines, copied or reduced out by kernels. Captured groups (collectives, sends and receives) whose inputs fit one slot region (CCL_IPC_SLOTS x CCL_IPC_CHUNK_BYTES) go through the slots as outboxes (copy engines, reduction kernels; 8 MiB captured all-reduce, one H100, two ranks: 10.3 GB/s against the staged captured path's 1.1-3.1, send/receive 12.7 against 2.4), larger groups of all-reduces, broadcasts and reduces in rounds of pieces (64 MiB captured all-reduce: 12.4 against 0.8), other larger groups and sends to oneself staged through the proxy; not used where another rank of the communicator shares this process's GPU (its waits could hold up that rank's work). auto, the default: on where NVIDIA's NCCL would use its shared-memory transport between the GPUs: peer-to-peer off by NCCL_P2P_DISABLE or NCCL_P2P_LEVEL (LOC, or nearer than the path between some two GPUs of a host), or some rank unable to map its peers' GPU memory (no peer access), with NCCL_SHM_DISABLE unset; 1: on for any ranks of one host; 0: off (such GPUs stage everything through the host transports). One H100, ranks as processes on it, 128 MiB, against the staged path (2026-11-24): two ranks send/receive 20-23 GB/s against 2.9-3.3, broadcast 47 against 3.6, all-reduce 20.5-21.1 against 1.7-3.3; four ranks all-reduce 8.4-10.2 against 2.5, all-gather 10.2 against 2.2, all-to-all 10.3 against 1.9 (every rank's traffic crosses the one GPU's PCIe link there); not yet measured on several GPUs. Every rank must use the same value (the setup checks).");
    CCL_IPC_HOST_ONLY_STAGE_IN = ("CCL_IPC_HOST_ONLY_STAGE_IN", "1", "cuda-ipc host-only mode: 1: a chunk this rank reduces comes from its receive slot in host memory into a mirror slot in its own GPU memory on a copy engine first, and the reduction kernel reads that (kernels read host memory over PCIe slower than copy engines do; one H100, ranks as processes on it, 128 MiB, 2026-11-24: two ranks all-reduce 20.5-21.1 GB/s against 15.6-15.7, reduce-scatter 18.9-19.1 against 12.4-13.4; four ranks all-reduce 8.4-10.2 against 6.5-7.0); 0: the kernel reads the host slot itself. A local setting.");
    CCL_IPC_FAULT_NO_PEER_ACCESS = ("CCL_IPC_FAULT_NO_PEER_ACCESS", "0", "Fault injection for tests: 1: this rank's cuda-ipc setup acts as if it could not map its peers' GPU memory (as between GPUs without peer access), so the fallback to host-only mode (CCL_IPC_HOST_ONLY=auto) can be exercised on GPUs that have peer access.");
    CCL_IPC_HOST_PATH_WHEN_LIMITED = ("CCL_IPC_HOST_PATH_WHEN_LIMITED", "0", "cuda-ipc: 0 (the default): while this GPU's clocks are held at its power or thermal limit (NVML's clock event reasons; libccl's copies alone stay far below it, someone's compute does not), new direct transfers skip the host path: it costs power that then comes out of the compute's clock (2026-11-23: beside a bf16 GEMM loop at the H200's 700 W cap it lifted send/receive from 361 to 390 GB/s and cost the GEMM 7.0 -> 8.3-8.5% of its speed). Sampled at most every 5 ms, a limited sample counting for 100 ms. 1: the host path runs regardless. A local setting (the rank that posts a transfer first decides its share).");
    CCL_IPC_HOST_PATH_MIN_BYTES = ("CCL_IPC_HOST_PATH_MIN_BYTES", "67108864", "cuda-ipc: the smallest one-way direct transfer that takes the host path (CCL_IPC_HOST_PATH_PERMILLE).");
    CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE = ("CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE", "70", "cuda-ipc: as CCL_IPC_HOST_PATH_PERMILLE, for a transfer whose group also has one the other way with the same peer (a send/receive exchange, a 2-rank all-gather or all-to-all): both GPUs' PCIe traffic then meets on the way to the CPU, so less goes that way.");
    CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES = ("CCL_IPC_HOST_PATH_EXCHANGE_MIN_BYTES", "134217728", "cuda-ipc: the smallest transfer of an exchange that takes the host path (CCL_IPC_HOST_PATH_EXCHANGE_PERMILLE).");
    CCL_IPC_HOST_PATH_SLOT_BYTES = ("CCL_IPC_HOST_PATH_SLOT_BYTES", "8388608", "cuda-ipc: the host path's chunk size at most (rounded down to 4 KiB); a transfer's share is cut into equal chunks, as few as fit but at least four while each holds 1 MiB (one chunk would copy into host memory and out again one after the other).");
    CCL_IPC_HOST_PATH_SLOTS = ("CCL_IPC_HOST_PATH_SLOTS", "8", "cuda-ipc: chunks in the host path's ring per direction (2-64); a transfer's share never exceeds the ring. Used only if both ranks have the same slots and slot size.");
    CCL_IPC_LL_PACK_BYTES = ("CCL_IPC_LL_PACK_BYTES", "262144", "cuda-ipc: low-latency kernels (all-reduce, reduce-scatter, reduce, and the exchange: all-gather, all-to-all, broadcast, gather, scatter) moving at most this many bytes to or from each peer write packed lines (16 bytes carrying 8 payload bytes and the operation's number twice), which the peer reads as they arrive: one NVLink crossing where the flagged form pays data, a fence and a flag. Two H200s beside NVIDIA NCCL 2.28.9, nccl-tests in CUDA graphs (-G 10), 2026-11-30 (docs/device-runs/2026-11-30-pack/): with 256 KiB the seven low-latency ops ran 1.09-2.22x NCCL from 16 KiB to 2 MiB; with 64 KiB the flagged form's ~3 us step above it left broadcast and reduce at 128 KiB at 0.94-0.95x and scatter at 256 KiB at 0.88x. At most 262144; 0: always the flagged form; the smallest value over the ranks is used.");
    CCL_IPC_P2P_KERNEL_BYTES = ("CCL_IPC_P2P_KERNEL_BYTES", "131072", "cuda-ipc: sends and receives of at most this many bytes (and at most CCL_IPC_LL_EXCHANGE_BYTES: 0 there keeps every send on copy engines) run as the point-to-point kernel, writing packed lines into slots the receiver mapped in advance (8 send and 8 receive blocks a launch, each taking a run of every message's lines), so a send never waits for its receive's call; larger ones are copy-engine transfers. At most 262144 (a slot); the smallest value over the ranks is used. Two H200s beside NVIDIA NCCL 2.28.9, eager nccl-tests sendrecv, two repetitions in one call (2026-11-30, docs/device-runs/2026-11-30-batch2/kernels/): the kernel took 64 KiB in 8.3-9.8 us and 128 KiB in 9.5 against 13.0-14.1 on copy engines (NCCL 8.1-8.3), 256 KiB in 12.3 against 12.6-12.9 (NCCL 10.1); with 32 KiB (the limit before) 64 and 128 KiB ran at 0.62-0.63 of NCCL, with 128 KiB at 0.87-0.96. More than two ranks are not measured above 32 KiB");
    CCL_IPC_LL_BLOCK_BYTES = ("CCL_IPC_LL_BLOCK_BYTES", "0", "cuda-ipc: payload bytes per peer one block of a low-latency kernel takes: an operation moving b bytes to or from each peer runs ceil(b / this) blocks, 1 to 128 (fewer blocks raise fewer flags and acknowledgements across NVLink per operation; more move a large operation's bytes with more SMs). 0 (the default): always 32 blocks (two H200s, CUDA graphs, 2026-11-30: 8192, fewer blocks for small operations, did no better; 2026-12-01, docs/device-runs/2026-12-01-x2/smallops/: eager all-reduces of 8 B - 128 KiB with 65536, one block, ran 0.52-0.70 of NCCL where 32 blocks ran 1.10-1.42, and Megatron tp2-sp's 8 MiB all-gather and reduce-scatter on 8 blocks (524288) cost a bf16 GEMM beside them 125% / 161% of its time against 90% / 77% on 32; larger operations with more blocks not measured yet). The smallest value over the ranks is used.");
    CCL_IPC_LL_THREADS = ("CCL_IPC_LL_THREADS", "512", "cuda-ipc: threads per block of the low-latency all-reduce and exchange kernels (a multiple of 32, 32-1024). A local setting.");
    CCL_IPC_LL_ACK_FENCE = ("CCL_IPC_LL_ACK_FENCE", "0", "cuda-ipc: 1: a low-latency kernel's block fences at system scope before it tells its peers it has read their data; 0 (the default): no fence there, as every value read was consumed before the block's barrier, so the reads are complete (two H200s, GPU time in CUDA graphs, 2026-11-30: 1-16 KiB all-reduces 3.5-3.9 us without the fence against 4.9-5.4 with it, NCCL 5.8-6.7). A local setting.");
    CCL_IPC_LL_TWO_SHOT_BYTES = ("CCL_IPC_LL_TWO_SHOT_BYTES", "0", "cuda-ipc, more than two ranks: low-latency all-reduces (at most CCL_IPC_LL_BYTES) of at least this many bytes whose element count divides by the rank count run in two shots, a low-latency reduce-scatter and then a low-latency all-gather of the reduced parts (two kernels; each rank sends 2(n-1)/n of the buffer instead of n-1 times it), instead of the one-shot kernel. 0 (the default): always one shot, until the crossover is measured on more than two GPUs; the smallest value over the ranks is used.");
    CCL_IPC_LL_BYTES = ("CCL_IPC_LL_BYTES", "auto", "cuda-ipc: all-reduces and reduces of at most this many bytes, and reduce-scatters of at most this many bytes per rank, run as one low-latency kernel per rank (0: never; at most 16 MiB, where the area each rank maps grows to 2 x ranks x this); the smallest value over the ranks is used. auto: with two ranks all-reduces and reduces up to 8 MiB, reduce-scatters up to 4 MiB per rank; 1 MiB with more. Two H200s beside NVIDIA NCCL 2.28.9, nccl-tests, 2026-11-30 (docs/device-runs/2026-11-30-pack/, NCCL's time over libccl's, CUDA graphs / eager): all-reduce 8 MiB 1.13 / 1.14x on the kernel against 0.94 / 0.97x on copy engines, reduce 8 MiB 1.17 / 1.14x against 1.06 / 0.91x; at 16 MiB the kernel lost (all-reduce 0.86 / 0.90x), as did reduce-scatter parts of 8 MiB (1.11 / 1.09x against 1.55 / 1.25x); 2 and 4 MiB all-reduces 1.9 / 1.4x (docs/device-runs/2026-11-30-llbig/). More ranks are not measured above 1 MiB.");
    CCL_MONITOR = ("CCL_MONITOR", "0", "1: the throughput monitor records every chunk the multipath transport posts and completes, and every frame of the socket, shared-memory and failover socket links (bytes, peer, path, NIC; failover transitions as events), and every copy-engine copy of a transfer between the GPUs of one host (timed on the GPU by two events; engine copy_engine, the copy lane as its path), and keeps sliding-window throughput per peer, path and NIC, reporting drops below CCL_MONITOR_DROP x baseline, recoveries, stalls and path health changes. One monitor per process, shared by its communicators (one collector thread, one file, one port). 0 (the default): off, one branch per chunk or frame.");
    CCL_MONITOR_WINDOW = ("CCL_MONITOR_WINDOW", "8", "Monitor: completions per throughput window (1-4096; 1: the latest completion's bytes over the busy time since the one before), the window reaching back at least CCL_MONITOR_SPAN_US; smaller reacts sooner and is noisier.");
    CCL_MONITOR_POLL_US = ("CCL_MONITOR_POLL_US", "10000", "Monitor: how often (microseconds, 100-1000000) its collector thread drains the records while they come. Events carry the time they happened and are reported up to this much later; shorter costs more (each pass wakes a thread that competes with the transport's for the cores).");
    CCL_MONITOR_SPAN_US = ("CCL_MONITOR_SPAN_US", "1000", "Monitor: a throughput window also spans at least this many microseconds of busy time (0-1000000; 0: only CCL_MONITOR_WINDOW counts), so acknowledgements arriving in batches do not read as bursts.");
    CCL_MONITOR_EARLY = ("CCL_MONITOR_EARLY", "1", "Monitor: a window whose CCL_MONITOR_WINDOW completions reach back further than CCL_MONITOR_SPAN_US is also judged on its latest span (0/1), so a drop shows within about the span at any window; 0 lets the completions smooth dips of about the span too.");
    CCL_MONITOR_SCHED = ("CCL_MONITOR_SCHED", "batch", "Monitor: how its collector thread yields the cores to the threads that move data: nice (nice 10: woken for a pass, it can still preempt a transport thread at once), batch (SCHED_BATCH at nice 10: the same share, but a wake-up never preempts a running thread) or idle (SCHED_IDLE: only on a core no other thread wants; under full load its rings can fill and drop records, which it counts). Host-backend sendrecv 1 MiB, busbw monitor on over off (medians of alternating pairs; the 16 cores of an nvidia-h200, tests/bench/monitor_overhead.sh, 2026-11-30, docs/device-runs/2026-11-30-monsched/): nice 0.976 / 0.984 / 0.964 in runs of 40 / 24 / 20 pairs, batch 0.984 / 0.996 (40 / 20), idle 1.005 / 0.957 (24 / 20); each on run over the off run beside it, median: nice 0.967 / 0.974 / 0.956, batch 0.982 / 0.989, idle 0.992 / 0.968; no record dropped in any.");
    CCL_MONITOR_SAMPLE_US = ("CCL_MONITOR_SAMPLE_US", "1000", "Monitor: at most one throughput sample per peer, path and NIC per this many microseconds in CCL_MONITOR_FILE (10-1000000). Anomalies, recoveries and stalls carry their exact times whatever it is; finer costs more (each sample is a JSON line written by the collector thread). Also the copy engines' sampling: at most one copy per lane per this long is timed on the GPU (two CUDA events).");
    CCL_MONITOR_DROP = ("CCL_MONITOR_DROP", "0.5", "Monitor: a window below this fraction of its key's baseline is an anomaly (above 0, below 1); it ends halfway back to the baseline.");
    CCL_MONITOR_FILE = ("CCL_MONITOR_FILE", "", "Monitor: JSON lines file of throughput samples, anomalies, recoveries, stalls and transitions (%p: the process id), rotated by size; read it with `ccl-monitor summary|plot`. Empty: no file.");
    CCL_MONITOR_PORT = ("CCL_MONITOR_PORT", "", "Monitor: Prometheus metrics on 127.0.0.1 at this port (0 picks one). Empty: no endpoint.");
    CCL_MONITOR_STALL_US = ("CCL_MONITOR_STALL_US", "100000", "Monitor: no completion for this many microseconds with work outstanding on a key is a stall.");
    CCL_MONITOR_FILE_BYTES = ("CCL_MONITOR_FILE_BYTES", "67108864", "Monitor: size at which CCL_MONITOR_FILE rotates (at least 4096).");
    CCL_MONITOR_FILE_KEEP = ("CCL_MONITOR_FILE_KEEP", "4", "Monitor: rotated files kept (FILE.1 the newest).");
    CCL_RANK = ("CCL_RANK", "", "Rank of this process for manually launched ccl-perf.");
    CCL_NRANKS = ("CCL_NRANKS", "", "Number of ranks for manually launched ccl-perf.");
}

fn conf_file() -> &'static HashMap<String, String> {
    static CONF: OnceLock<HashMap<String, String>> = OnceLock::new();
    CONF.get_or_init(|| {
        let mut paths = Vec::new();
        if let Ok(p) = std::env::var(NCCL_CONF_FILE.name) {
            paths.push(p);
        } else {
            if let Ok(home) = std::env::var("HOME") {
                paths.push(format!("{home}/.nccl.conf"));
            }
            paths.push("/etc/nccl.conf".into());
        }
        paths
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|text| parse_conf(&text))
            .unwrap_or_default()
    })
}

/// Parses `KEY=VALUE` lines; `#` starts a comment.
pub fn parse_conf(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("").trim();
            let (k, v) = line.split_once('=')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn cache() -> &'static parking_lot::Mutex<HashMap<&'static str, Option<String>>> {
    static CACHE: OnceLock<parking_lot::Mutex<HashMap<&'static str, Option<String>>>> =
        OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl Param {
    /// The value set by the user (environment, then conf file), if any; cached on first read.
    pub fn raw(&self) -> Option<String> {
        let mut c = cache().lock();
        c.entry(self.name)
            .or_insert_with(|| {
                std::env::var(self.name)
                    .ok()
                    .or_else(|| conf_file().get(self.name).cloned())
                    .filter(|v| !v.is_empty())
            })
            .clone()
    }

    /// The value as text, the default when unset.
    pub fn get_str(&self) -> String {
        self.raw().unwrap_or_else(|| self.default.to_string())
    }

    /// The value as an integer; an unparsable value falls back to the default with a warning.
    pub fn get_i64(&self) -> i64 {
        let s = self.get_str();
        match s.trim().parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                tracing::warn!(
                    "{}={s:?} is not an integer; using {}",
                    self.name,
                    self.default
                );
                self.default.parse().unwrap_or(0)
            }
        }
    }

    /// A setting that is `auto` (None) or an integer; anything else is `auto` with a warning.
    pub fn get_auto_i64(&self) -> Option<i64> {
        let s = self.get_str();
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return None;
        }
        let v = s.parse::<i64>().ok();
        if v.is_none() {
            tracing::warn!(
                "{}={s:?} is neither auto nor an integer; using auto",
                self.name
            );
        }
        v
    }

    pub fn get_bool(&self) -> bool {
        self.get_i64() != 0
    }
}

/// Forgets cached values (tests, `ncclResetDebugInit`).
pub fn reset_cache() {
    cache().lock().clear();
}

/// Looks a parameter up by name.
pub fn find(name: &str) -> Option<&'static Param> {
    ALL.iter().find(|p| p.name == name)
}

/// Parses NCCL's list syntax (`NCCL_ALGO`, `NCCL_PROTO`): `a,b` allows exactly those,
/// `^a,b` allows all but those. Returns a predicate over lower-cased names.
pub fn list_filter(spec: &str) -> impl Fn(&str) -> bool {
    let spec = spec.trim();
    let (exclude, body) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let names: Vec<String> = body
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    let empty = names.is_empty();
    move |name: &str| {
        if empty {
            return true;
        }
        let hit = names.iter().any(|n| n == &name.to_ascii_lowercase());
        hit != exclude
    }
}

/// Parameters read as a switch: 0 is off, anything else on.
const SWITCHES: &[&str] = &[
    "NCCL_SHM_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_CUMEM_ENABLE",
    "CCL_RING_ONE_STEP",
    "CCL_MPT_ZERO_COPY",
    "CCL_MPT_ASYNC_COPY",
    "CCL_MPT_ENGINE_COPY",
    "CCL_IPC_DISABLE",
    "CCL_IPC_DIRECT",
    "CCL_IPC_DIRECT_REDUCE_MULTI",
    "CCL_IPC_DIRECT_REDUCE_WRITE_ALL",
    "CCL_IPC_DIRECT_REDUCE_MAILED",
    "CCL_IPC_PUSH_WAIT_ADAPT",
    "CCL_SOCKET_FAILOVER",
    "CCL_IPC_REMOTE_COPY",
    "CCL_IPC_SYMMETRIC_WINDOWS",
    "CCL_IPC_MAILED_PUSH",
    "CCL_IPC_EAGER_COPY_KERNEL",
    "CCL_IPC_HOST_ONLY_STAGE_IN",
    "CCL_IPC_FAULT_NO_PEER_ACCESS",
    "CCL_IPC_HOST_PATH_WHEN_LIMITED",
    "CCL_HIERARCHY_ALLTOALL",
    "CCL_GPU_FOLD_WIDE",
    "CCL_GPU_STREAM_P2P",
    "CCL_GRAPH_DIRECT",
    "CCL_GRAPH_FUSED",
    "CCL_GRAPH_HANDSHAKE_KERNEL",
    "CCL_KERNEL_PRELOAD",
];

/// Parameters whose value is not what their default suggests (an integer default that is a
/// fraction, an empty default that is a number, `auto` that also takes 0 and 1 only).
const KINDS: &[(&str, &str)] = &[
    ("CCL_MPT_DROP", "fraction 0..1"),
    ("CCL_RANK", "integer"),
    ("CCL_NRANKS", "integer"),
    ("CCL_HIERARCHY", "`auto`, 0 or 1"),
    ("CCL_IPC_HOST_ONLY", "`auto`, 0 or 1"),
    ("CCL_MPT_PLACE_RECEIVES", "`auto`, 0 or 1"),
    ("CCL_IPC_COPY_KERNEL", "text"),
    ("CCL_IPC_EAGER_SEND", "`auto`, 0 or 1"),
    ("CCL_IPC_BATCH_COPIES", "`auto`, 0 or 1"),
    ("CCL_IPC_BATCH_LOCAL_MAX_BYTES", "`auto` or integer"),
];

impl Param {
    /// What kind of value the parameter takes, in words, for the rendered list (`markdown`).
    pub fn kind(&self) -> &'static str {
        if SWITCHES.contains(&self.name) {
            return "0 or 1";
        }
        if let Some((_, kind)) = KINDS.iter().find(|(name, _)| *name == self.name) {
            return kind;
        }
        match self.default {
            d if d.parse::<i64>().is_ok() => "integer",
            "auto" => "`auto` or integer",
            _ => "text",
        }
    }
}

/// The sections of the rendered list: a parameter goes in the first whose prefix it has.
const SECTIONS: &[(&str, &str, &str)] = &[
    ("NCCL_", "NCCL's variables", "Read as NVIDIA's NCCL reads them, so settings users already have keep their meaning."),
    ("CCL_IPC_", "`CCL_IPC_*`: the copy-engine engine (GPUs of one host)", "The engine in `p2p/` that moves data between the GPUs of one host with copy engines and small kernels (docs/GPU.md)."),
    ("CCL_GRAPH_", "`CCL_GRAPH_*`: CUDA graph capture", "Operations captured into CUDA graphs (docs/GRAPHS.md)."),
    ("CCL_GPU_", "`CCL_GPU_*`: GPU memory staged through host memory", "GPU operations that go through pinned host memory and a proxy thread: ranks on several hosts, or GPUs the copy-engine engine does not take."),
    ("CCL_HIERARCHY", "`CCL_HIERARCHY*`: communicators spanning hosts", "Collectives split into a stage within each host and one across the hosts."),
    ("CCL_MPT_", "`CCL_MPT_*`: the multipath transport between hosts", "The UDP multipath transport (`transports/src/mpt`), the default between hosts."),
    ("CCL_", "`CCL_*`: libccl's other settings", "Timeouts, host identity, the host backend's schedules and transports, and the benchmark's manual launch."),
];

/// Every parameter as Markdown: one section per prefix (`SECTIONS`), one entry per parameter
/// with its kind, its default and its description. `docs/ENV.md` is exactly this text,
/// written by `cargo run -q -p ccl --example env_md > docs/ENV.md`; the test
/// `libccl/tests/env_doc.rs` fails when the two differ.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Environment variables\n\n\
         The parameters in libccl's registry, generated from it (`params/src/lib.rs`) by\n\
         `cargo run -q -p ccl --example env_md > docs/ENV.md`; do not edit by hand\n\
         (`cargo test -p ccl --test env_doc` fails when this file is stale).\n\n\
         Values come from the environment first, then from `NCCL_CONF_FILE` (else `~/.nccl.conf`,\n\
         then `/etc/nccl.conf`) as `KEY=VALUE` lines. Each is read once per process.\n\
         `ccl-perf --env` prints the values a running library sees. With `NCCL_DEBUG=INFO` the\n\
         first communicator of a process lists every `NCCL_` and `CCL_` variable set: those\n\
         libccl reads with their values, the `NCCL_` ones it does not read, and `CCL_` names\n\
         that are no setting of libccl's, with the nearest one (a mistyped `CCL_MONITR=1`).\n\n\
         A few variables are read outside the registry: the topology search's (`NCCL_TOPO_FILE`,\n\
         `NCCL_TOPO_DUMP_FILE`, `NCCL_IB_HCA`, `NCCL_CROSS_NIC`, `NCCL_MIN_NCHANNELS`,\n\
         `NCCL_MAX_NCHANNELS`, `NCCL_NVB_DISABLE`, `NCCL_PXN_DISABLE`; `topology/src/config.rs`),\n\
         the CUDA loader's (`CCL_CUDA_LIBRARY`, `CCL_NVRTC_LIBRARY`: the driver and NVRTC\n\
         libraries to load; `CCL_KERNEL_CACHE`: the kernel cache directory, `off` for none,\n\
         default `$XDG_CACHE_HOME/libccl` or `~/.cache/libccl`) and CUDA's own\n\
         `CUDA_DEVICE_MAX_CONNECTIONS`.\n",
    );
    let section = |p: &Param| {
        SECTIONS
            .iter()
            .position(|(prefix, _, _)| p.name.starts_with(prefix))
    };
    for (i, (_, title, about)) in SECTIONS.iter().enumerate() {
        let members: Vec<&Param> = ALL.iter().filter(|p| section(p) == Some(i)).collect();
        if members.is_empty() {
            continue;
        }
        out.push_str(&format!("\n## {title}\n\n{about}\n\n"));
        for p in members {
            let default = if p.default.is_empty() {
                "unset".to_string()
            } else {
                format!("`{}`", p.default)
            };
            out.push_str(&format!(
                "- **`{}`** ({}; default {}): {}\n",
                p.name,
                p.kind(),
                default,
                p.doc.trim()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_lines_parse_with_comments() {
        let m = parse_conf("# c\nNCCL_DEBUG=INFO\n  CCL_TIMEOUT_S = 5 # five\n=x\nbad\n");
        assert_eq!(m.get("NCCL_DEBUG").map(String::as_str), Some("INFO"));
        assert_eq!(m.get("CCL_TIMEOUT_S").map(String::as_str), Some("5"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn list_filter_handles_include_and_exclude() {
        let f = list_filter("^NVLS");
        assert!(f("ring") && f("tree") && !f("nvls"));
        let f = list_filter("Ring,tree");
        assert!(f("ring") && f("TREE") && !f("nvls"));
        let f = list_filter("");
        assert!(f("anything"));
    }

    #[test]
    fn every_param_is_named_and_documented_once() {
        let mut names: Vec<_> = ALL.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert!(ALL.iter().all(|p| !p.doc.is_empty()));
    }

    #[test]
    fn every_kind_override_names_a_parameter() {
        for name in SWITCHES.iter().chain(KINDS.iter().map(|(n, _)| n)) {
            assert!(find(name).is_some(), "{name} is not in the registry");
        }
    }

    #[test]
    fn markdown_lists_every_parameter_once_in_a_section() {
        let md = markdown();
        for p in ALL {
            let entry = format!("- **`{}`** (", p.name);
            assert_eq!(md.matches(&entry).count(), 1, "{}", p.name);
        }
        assert!(md.contains("- **`NCCL_P2P_DISABLE`** (0 or 1; default `0`): "));
        assert!(md.contains("- **`CCL_MPT_CC`** (text; default `cubic`): "));
        assert!(md.contains("- **`CCL_RANK`** (integer; default unset): "));
        assert!(md.find("## NCCL's variables") < md.find("`CCL_IPC_*`"));
    }
}
