//! Bootstrap: the unique id, the root rendezvous, host identity, and the control mesh that
//! ranks use for allgather, barrier, liveness and error notices.
//!
//! `ncclGetUniqueId` starts a root thread listening on this host's chosen interface and puts
//! its address in the id. Every rank connects to the root with its own listening address and
//! host id; the root answers everybody with the full table and exits. Ranks then connect a
//! TCP control connection to every other rank (lower ranks are dialled, higher ones accepted),
//! plus a data connection where the pair will use the socket transport.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::error::ErrorKind;
use crate::error::{Error, Result};
use crate::params;

const ID_MAGIC: [u8; 4] = *b"CCL\x01";
const HELLO_MAGIC: u32 = 0x4343_4c48;
/// Largest control message accepted; protects against garbage on the control port.
const MAX_CTRL_MSG: usize = 64 << 20;

/// The 128-byte `ncclUniqueId`: magic, root address, and a nonce that tags the communicator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            Ok((addr, nonce)) => write!(f, "UniqueId({addr}, {nonce:016x})"),
            Err(_) => write!(f, "UniqueId(<invalid>)"),
        }
    }
}

impl UniqueId {
    pub fn encode(addr: SocketAddr, nonce: u64) -> Self {
        let mut b = [0u8; 128];
        b[0..4].copy_from_slice(&ID_MAGIC);
        b[4..6].copy_from_slice(&addr.port().to_be_bytes());
        match addr.ip() {
            IpAddr::V4(ip) => {
                b[6] = 4;
                b[8..12].copy_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                b[6] = 6;
                b[8..24].copy_from_slice(&ip.octets());
            }
        }
        b[24..32].copy_from_slice(&nonce.to_le_bytes());
        UniqueId(b)
    }

    /// The root address and nonce; an id that libccl did not make is an invalid argument.
    pub fn decode(&self) -> Result<(SocketAddr, u64)> {
        let b = &self.0;
        if b[0..4] != ID_MAGIC {
            return Err(Error::invalid_argument(
                "unique id was not produced by ncclGetUniqueId (bad magic)",
            ));
        }
        if b[32..].iter().any(|&x| x != 0) || b[7] != 0 {
            return Err(Error::invalid_argument(
                "unique id is corrupt (reserved bytes are not zero)",
            ));
        }
        let port = u16::from_be_bytes([b[4], b[5]]);
        let ip: IpAddr = match b[6] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[8..24]);
                IpAddr::V6(o.into())
            }
            f => {
                return Err(Error::invalid_argument(format!(
                    "unique id is corrupt (address family {f})"
                )))
            }
        };
        if port == 0 {
            return Err(Error::invalid_argument("unique id is corrupt (port 0)"));
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(&b[24..32]);
        Ok((SocketAddr::new(ip, port), u64::from_le_bytes(n)))
    }
}

/// FNV-1a, for host ids and nonces derived from text.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// This process's host identity: hostname + boot id + network namespace, so ranks in
/// different namespaces of one machine count as different hosts. `CCL_HOSTID` overrides.
pub fn host_id() -> u64 {
    if let Some(s) = params::CCL_HOSTID.raw() {
        return fnv1a(s.as_bytes());
    }
    let host = hostname();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    fnv1a(format!("{host}|{}|{netns}", boot.trim()).as_bytes())
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Does interface `name` pass an `NCCL_SOCKET_IFNAME` spec (`a,b` prefixes, `^` excludes,
/// `=` exact names)?
pub fn ifname_matches(spec: &str, name: &str) -> bool {
    let mut s = spec.trim();
    let exclude = s.starts_with('^');
    if exclude {
        s = &s[1..];
    }
    let exact = s.starts_with('=');
    if exact {
        s = &s[1..];
    }
    let hit = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                name == p
            } else {
                name.starts_with(p)
            }
        });
    hit != exclude
}

/// One address of a network interface, as `getifaddrs` lists it.
struct IfAddr {
    name: String,
    ip: IpAddr,
    up: bool,
    loopback: bool,
}

/// Every dialable address of every interface (link-local IPv6, which needs a scope id, left
/// out).
fn interface_addresses() -> Result<Vec<IfAddr>> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| Error::system(format!("getifaddrs: {e}")))?;
    let mut out = Vec::new();
    for ifa in addrs {
        let Some(addr) = ifa.address else { continue };
        let ip: IpAddr = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            let ip = v6.ip();
            // Link-local v6 needs a scope id to be dialled; skip it.
            if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                continue;
            }
            IpAddr::V6(ip)
        } else {
            continue;
        };
        out.push(IfAddr {
            name: ifa.interface_name.clone(),
            ip,
            up: ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP),
            loopback: ifa
                .flags
                .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

/// Interface `name`'s address: its IPv4 one, else its first IPv6 one.
fn address_of<'a>(all: &'a [IfAddr], name: &str) -> Option<&'a IfAddr> {
    all.iter()
        .filter(|a| a.name == name)
        .min_by_key(|a| !a.ip.is_ipv4())
}

/// The addresses of the interfaces `names` (exact names, in that order; `CCL_MPT_IFNAMES`):
/// each interface's IPv4 address, else its first IPv6 one. An interface with no address is
/// an error; one that is down is taken all the same (its paths come into use when it comes
/// up), with a warning.
pub fn named_interface_ips(names: &[&str]) -> Result<Vec<IpAddr>> {
    let all = interface_addresses()?;
    names
        .iter()
        .map(|&n| {
            let pick = address_of(&all, n).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "CCL_MPT_IFNAMES: interface {n:?} has no address here"
                ))
            })?;
            if !pick.up {
                tracing::warn!("CCL_MPT_IFNAMES: interface {n} is down; its paths wait for it");
            }
            Ok(pick.ip)
        })
        .collect()
}

/// The NICs that a positive `NCCL_SOCKET_IFNAME` list names (`eth`, `ens1,ens2`; not `^...`
/// exclusions), when it names two or more that are up and not loopback: as NCCL's socket
/// transport does, the multipath transport then uses them all (`CCL_MPT_IFNAMES` unset).
/// Sorted by name, so hosts with alike NICs pair them alike; at most `max`. Each with its
/// name.
pub fn socket_ifname_nics(max: usize) -> Result<Vec<(String, IpAddr)>> {
    match params::NCCL_SOCKET_IFNAME.raw() {
        Some(spec) if !spec.trim().starts_with('^') => {
            Ok(nics_matching(&spec, &interface_addresses()?, max))
        }
        _ => Ok(Vec::new()),
    }
}

fn nics_matching(spec: &str, all: &[IfAddr], max: usize) -> Vec<(String, IpAddr)> {
    let mut names: Vec<&str> = all
        .iter()
        .filter(|a| a.up && !a.loopback && ifname_matches(spec, &a.name))
        .map(|a| a.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 2 {
        return Vec::new();
    }
    let mut ips: Vec<(String, IpAddr)> = names
        .iter()
        .filter_map(|&n| address_of(all, n).map(|a| (n.to_string(), a.ip)))
        .collect();
    // One address family: a path cannot connect across families, so with any IPv4 NIC the
    // IPv6-only ones stay out.
    if ips.iter().any(|(_, ip)| ip.is_ipv4()) {
        ips.retain(|(_, ip)| ip.is_ipv4());
    }
    if ips.len() < 2 {
        return Vec::new();
    }
    ips.truncate(max);
    ips
}

/// Picks the address to listen on: the first interface matching `NCCL_SOCKET_IFNAME`, or by
/// default the first that is up and neither loopback nor docker, else loopback.
pub fn local_address() -> Result<(String, IpAddr)> {
    let spec = params::NCCL_SOCKET_IFNAME.raw();
    let family = params::NCCL_SOCKET_FAMILY.raw().unwrap_or_default();
    let mut candidates: Vec<(String, IpAddr, bool)> = Vec::new();
    for a in interface_addresses()? {
        if !a.up {
            continue;
        }
        match family.as_str() {
            "AF_INET" if !a.ip.is_ipv4() => continue,
            "AF_INET6" if !a.ip.is_ipv6() => continue,
            _ => {}
        }
        candidates.push((a.name, a.ip, a.loopback));
    }
    let pick = match &spec {
        Some(spec) => candidates
            .iter()
            .filter(|(n, ip, _)| {
                ifname_matches(spec, n)
                    && (family.is_empty() || ip.is_ipv4() == (family != "AF_INET6"))
            })
            .min_by_key(|(_, ip, _)| !ip.is_ipv4()),
        None => candidates
            .iter()
            .filter(|(n, _, lo)| !lo && !n.starts_with("docker"))
            .min_by_key(|(_, ip, _)| !ip.is_ipv4())
            .or_else(|| candidates.iter().find(|(_, _, lo)| *lo)),
    };
    match pick {
        Some((n, ip, _)) => Ok((n.clone(), *ip)),
        None => Err(Error::system(format!(
            "no usable network interface (NCCL_SOCKET_IFNAME={})",
            spec.unwrap_or_default()
        ))),
    }
}

/// What every rank tells the others at init.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: usize,
    pub addr: SocketAddr,
    pub host_id: u64,
    pub hostname: String,
    pub pid: u32,
    /// The PCI bus id of the rank's GPU (as CUDA writes it, `0000:18:00.0`); `None` without
    /// one. Bus ids, not device ordinals: `CUDA_VISIBLE_DEVICES` renumbers ordinals per
    /// process, so only the bus id names the same GPU in every rank's topology.
    pub gpu_bus: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct RootHello {
    magic: u32,
    nonce: u64,
    nranks: usize,
    info: RankInfo,
}

#[derive(Serialize, Deserialize)]
enum RootReply {
    Table(Vec<RankInfo>),
    Failed(String),
}

fn write_msg(s: &mut TcpStream, tag: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut hdr = [0u8; 5];
    hdr[0] = tag;
    hdr[1..5].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut buf = Vec::with_capacity(5 + payload.len());
    buf.extend_from_slice(&hdr);
    buf.extend_from_slice(payload);
    s.write_all(&buf)
}

fn read_msg(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut hdr = [0u8; 5];
    s.read_exact(&mut hdr)?;
    let len = u32::from_le_bytes([hdr[1], hdr[2], hdr[3], hdr[4]]) as usize;
    if len > MAX_CTRL_MSG {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("control message of {len} bytes"),
        ));
    }
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok((hdr[0], payload))
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::internal(format!("encode: {e}")))
}

fn unjson<'a, T: Deserialize<'a>>(b: &'a [u8], what: &str) -> Result<T> {
    serde_json::from_slice(b).map_err(|e| Error::remote(format!("malformed {what}: {e}")))
}

/// A read that timed out (the socket has a read timeout), as opposed to one that failed.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Between timed-out reads: gives up on abort or past the deadline.
fn keep_waiting(
    abort: &AtomicBool,
    deadline: Instant,
    late: impl FnOnce() -> String,
) -> Result<()> {
    if abort.load(Ordering::Relaxed) {
        return Err(Error::system("aborted while waiting for a peer"));
    }
    if Instant::now() > deadline {
        return Err(Error::system(late()));
    }
    Ok(())
}

/// Seconds init may take.
pub fn bootstrap_timeout() -> Duration {
    Duration::from_secs(params::CCL_BOOTSTRAP_TIMEOUT_S.get_i64().max(1) as u64)
}

/// How long a connected peer may stay silent in an exchange: `CCL_TIMEOUT_S` when set (a peer
/// whose network died never closes its end, and its init may have failed), else as init.
pub fn peer_silence_limit() -> Duration {
    match params::CCL_TIMEOUT_S.get_i64() {
        t if t > 0 => bootstrap_timeout().min(Duration::from_secs(t as u64)),
        _ => bootstrap_timeout(),
    }
}

/// Starts the root rendezvous on `listener` for the communicator tagged `nonce`. It serves
/// one communicator and exits; a root nobody contacts exits after the bootstrap timeout.
pub fn spawn_root(listener: TcpListener, nonce: u64) -> Result<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::system(format!("root listener: {e}")))?;
    std::thread::Builder::new()
        .name("ccl-bootstrap-root".into())
        .spawn(move || {
            if let Err(e) = run_root(listener, nonce) {
                tracing::warn!("bootstrap root: {e}");
            }
        })
        .map_err(|e| Error::system(format!("spawn root thread: {e}")))?;
    Ok(())
}

fn run_root(listener: TcpListener, nonce: u64) -> Result<()> {
    let deadline = Instant::now() + bootstrap_timeout();
    let mut nranks: Option<usize> = None;
    let mut conns: Vec<(TcpStream, RankInfo)> = Vec::new();
    let mut failure: Option<String> = None;
    while nranks.map_or(true, |n| conns.len() < n) && failure.is_none() {
        if Instant::now() > deadline {
            failure = Some(format!(
                "only {} of {:?} ranks reached the root in time",
                conns.len(),
                nranks
            ));
            break;
        }
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(Error::system(format!("root accept: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let Ok((_, body)) = read_msg(&mut s) else {
            continue; // a stray connection, not a rank
        };
        let Ok(hello) = serde_json::from_slice::<RootHello>(&body) else {
            continue;
        };
        if hello.magic != HELLO_MAGIC || hello.nonce != nonce {
            let _ = write_msg(
                &mut s,
                0,
                &json(&RootReply::Failed(
                    "unique id does not match this root".into(),
                ))?,
            );
            continue;
        }
        let n = *nranks.get_or_insert(hello.nranks);
        if hello.nranks != n {
            failure = Some(format!(
                "rank {} says nranks={} but rank {} said nranks={n}",
                hello.info.rank,
                hello.nranks,
                conns.first().map(|c| c.1.rank).unwrap_or(0)
            ));
        } else if hello.info.rank >= n {
            failure = Some(format!(
                "rank {} out of range for nranks={n}",
                hello.info.rank
            ));
        } else if conns.iter().any(|(_, i)| i.rank == hello.info.rank) {
            failure = Some(format!("rank {} joined twice", hello.info.rank));
        }
        conns.push((s, hello.info));
    }
    let reply = match &failure {
        Some(f) => RootReply::Failed(f.clone()),
        None => {
            let mut table: Vec<RankInfo> = conns.iter().map(|(_, i)| i.clone()).collect();
            table.sort_by_key(|i| i.rank);
            RootReply::Table(table)
        }
    };
    let body = json(&reply)?;
    for (s, _) in conns.iter_mut() {
        let _ = write_msg(s, 0, &body);
    }
    Ok(())
}

/// Dials `addr` until it answers or `deadline` passes (the root may not be up yet when
/// `NCCL_COMM_ID` is used), giving up early if `abort` is set.
pub fn connect_retry(addr: SocketAddr, deadline: Instant, abort: &AtomicBool) -> Result<TcpStream> {
    let mut wait = Duration::from_millis(1);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(Error::system(format!(
                        "connect to {addr}: {e} (gave up after the bootstrap timeout)"
                    )));
                }
                if abort.load(Ordering::Relaxed) {
                    return Err(Error::system("init aborted"));
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// Resolves `host:port` (for `NCCL_COMM_ID`).
pub fn resolve(spec: &str) -> Result<SocketAddr> {
    spec.to_socket_addrs()
        .map_err(|e| Error::invalid_argument(format!("NCCL_COMM_ID={spec}: {e}")))?
        .next()
        .ok_or_else(|| Error::invalid_argument(format!("NCCL_COMM_ID={spec} resolves to nothing")))
}

/// Exchanges `info` with every rank through the root at `root`; returns the table by rank.
pub fn rendezvous(
    root: SocketAddr,
    nonce: u64,
    nranks: usize,
    info: &RankInfo,
    abort: &AtomicBool,
) -> Result<Vec<RankInfo>> {
    let deadline = Instant::now() + bootstrap_timeout();
    let mut s = connect_retry(root, deadline, abort)?;
    let hello = RootHello {
        magic: HELLO_MAGIC,
        nonce,
        nranks,
        info: info.clone(),
    };
    write_msg(&mut s, 0, &json(&hello)?)
        .map_err(|e| Error::system(format!("send to bootstrap root {root}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| Error::system(format!("{e}")))?;
    loop {
        match read_msg(&mut s) {
            Ok((_, body)) => {
                return match unjson::<RootReply>(&body, "root reply")? {
                    RootReply::Table(t) if t.len() == nranks => Ok(t),
                    RootReply::Table(t) => Err(Error::internal(format!(
                        "root sent {} ranks, expected {nranks}",
                        t.len()
                    ))),
                    RootReply::Failed(why) => {
                        Err(Error::invalid_usage(format!("bootstrap failed: {why}")))
                    }
                }
            }
            Err(e) if timed_out(&e) => keep_waiting(abort, deadline, || {
                format!(
                    "bootstrap root {root} did not gather all {nranks} ranks within {:?}",
                    bootstrap_timeout()
                )
            })?,
            Err(e) => return Err(Error::system(format!("bootstrap root {root}: {e}"))),
        }
    }
}

/// Creates this rank's listening socket on the chosen interface.
pub fn listen() -> Result<TcpListener> {
    let (_, ip) = local_address()?;
    TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::system(format!("bind {ip}: {e}")))
}

const TAG_DATA: u8 = 1;
const TAG_ERROR: u8 = 2;
const TAG_BYE: u8 = 3;

/// Purpose of a connection in the mesh handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnKind {
    Control,
    Data,
}

#[derive(Serialize, Deserialize)]
struct MeshHello {
    magic: u32,
    nonce: u64,
    rank: usize,
    kind: ConnKind,
}

struct PeerCtrl {
    stream: TcpStream,
    inbox: VecDeque<Vec<u8>>,
    /// The peer said goodbye (destroyed its communicator): its EOF is not a failure.
    left: bool,
    failed: Option<String>,
    /// The peer's process is gone (its control connection closed without a goodbye). Only
    /// operations that still wait for it fail, and only once nothing more arrives from it:
    /// what it sent before dying is still in our rings and socket buffers.
    gone: Option<String>,
    /// The peer reported that one of its operations failed. Operations waiting for it fail
    /// once they stop progressing; the connection itself still works (a shrink among
    /// survivors uses it).
    reported: Option<String>,
}

/// What [`Ctrl::poll_health`] found short of a hard failure.
#[derive(Debug)]
pub enum Health {
    Ok,
    /// A peer an operation waits for has left, died or reported a failure. The caller fails
    /// the operation only if it still cannot progress on its next look (frames sent before
    /// may be queued).
    NeededPeerLeft(Error),
}

/// Control connections to every other rank.
pub struct Ctrl {
    pub rank: usize,
    pub nranks: usize,
    peers: Vec<Option<PeerCtrl>>,
}

/// Connects the mesh: a control connection to every rank, and a data connection to every rank
/// `j` with `data_to(j)`. Lower ranks are dialled, higher ranks accepted.
pub fn connect_mesh(
    rank: usize,
    table: &[RankInfo],
    listener: &TcpListener,
    nonce: u64,
    data_to: &dyn Fn(usize) -> bool,
    abort: &AtomicBool,
) -> Result<(Ctrl, Vec<Option<TcpStream>>)> {
    let n = table.len();
    let deadline = Instant::now() + bootstrap_timeout();
    let mut ctrl: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut data: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for j in 0..rank {
        for kind in [ConnKind::Control, ConnKind::Data] {
            if kind == ConnKind::Data && !data_to(j) {
                continue;
            }
            let mut s = connect_retry(table[j].addr, deadline, abort)
                .map_err(|e| e.context(format!("rank {rank} dialling rank {j}")))?;
            let hello = MeshHello {
                magic: HELLO_MAGIC,
                nonce,
                rank,
                kind,
            };
            write_msg(&mut s, 0, &json(&hello)?)
                .map_err(|e| Error::system(format!("hello to rank {j}: {e}")))?;
            match kind {
                ConnKind::Control => ctrl[j] = Some(s),
                ConnKind::Data => data[j] = Some(s),
            }
        }
    }
    let expected: usize = (rank + 1..n).map(|j| 1 + usize::from(data_to(j))).sum();
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::system(format!("listener: {e}")))?;
    let mut got = 0;
    while got < expected {
        match listener.accept() {
            Ok((mut s, from)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let hello: MeshHello = match read_msg(&mut s) {
                    Ok((_, b)) => match serde_json::from_slice(&b) {
                        Ok(h) => h,
                        Err(_) => continue,
                    },
                    Err(_) => continue,
                };
                if hello.magic != HELLO_MAGIC
                    || hello.nonce != nonce
                    || hello.rank <= rank
                    || hello.rank >= n
                {
                    tracing::warn!("ignoring unexpected connection from {from}");
                    continue;
                }
                let slot = match hello.kind {
                    ConnKind::Control => &mut ctrl[hello.rank],
                    ConnKind::Data => &mut data[hello.rank],
                };
                if slot.is_some() {
                    return Err(Error::internal(format!(
                        "rank {} connected twice",
                        hello.rank
                    )));
                }
                *slot = Some(s);
                got += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if abort.load(Ordering::Relaxed) {
                    return Err(Error::system("init aborted"));
                }
                if Instant::now() > deadline {
                    let missing: Vec<usize> =
                        (rank + 1..n).filter(|&j| ctrl[j].is_none()).collect();
                    return Err(Error::system(format!(
                        "rank {rank}: ranks {missing:?} did not connect within {:?}",
                        bootstrap_timeout()
                    )));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(Error::system(format!("accept: {e}"))),
        }
    }
    let peers = ctrl
        .into_iter()
        .map(|s| {
            s.map(|stream| {
                let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
                PeerCtrl {
                    stream,
                    inbox: VecDeque::new(),
                    left: false,
                    failed: None,
                    gone: None,
                    reported: None,
                }
            })
        })
        .collect();
    Ok((
        Ctrl {
            rank,
            nranks: n,
            peers,
        },
        data,
    ))
}

impl Ctrl {
    fn peer(&mut self, j: usize) -> Result<&mut PeerCtrl> {
        self.peers
            .get_mut(j)
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::internal(format!("no control connection to rank {j}")))
    }

    /// Sends a bootstrap message to rank `j`.
    pub fn send(&mut self, j: usize, payload: &[u8]) -> Result<()> {
        let p = self.peer(j)?;
        write_msg(&mut p.stream, TAG_DATA, payload)
            .map_err(|e| Error::remote(format!("control send to rank {j}: {e}")))
    }

    fn handle(p: &mut PeerCtrl, j: usize, tag: u8, body: Vec<u8>) {
        match tag {
            TAG_DATA => p.inbox.push_back(body),
            TAG_ERROR => {
                p.reported = Some(format!(
                    "rank {j} reported an error: {}",
                    String::from_utf8_lossy(&body)
                ))
            }
            TAG_BYE => p.left = true,
            _ => p.failed = Some(format!("rank {j} sent control tag {tag}")),
        }
    }

    fn status(p: &PeerCtrl, j: usize) -> Result<()> {
        if let Some(f) = &p.failed {
            return Err(Error::remote(f.clone()));
        }
        if p.left {
            return Err(Error::remote(format!(
                "rank {j} has destroyed its communicator"
            )));
        }
        Ok(())
    }

    /// Receives the next bootstrap message from rank `j`.
    pub fn recv(&mut self, j: usize, abort: &AtomicBool) -> Result<Vec<u8>> {
        let deadline = Instant::now() + peer_silence_limit();
        loop {
            let p = self.peer(j)?;
            if let Some(m) = p.inbox.pop_front() {
                return Ok(m);
            }
            Self::status(p, j)?;
            match read_msg(&mut p.stream) {
                Ok((tag, body)) => Self::handle(p, j, tag, body),
                Err(e) if timed_out(&e) => keep_waiting(abort, deadline, || {
                    format!("rank {j} sent nothing for {:?}", peer_silence_limit())
                })?,
                Err(e) => {
                    p.failed = Some(format!("control connection to rank {j} broke: {e}"));
                }
            }
        }
    }

    /// Every rank's `mine`, by rank.
    pub fn allgather(&mut self, mine: &[u8], abort: &AtomicBool) -> Result<Vec<Vec<u8>>> {
        let all: Vec<usize> = (0..self.nranks).collect();
        self.allgather_among(&all, mine, abort)
    }

    /// Every member's `mine`, in `members` order; ranks outside `members` (excluded or dead
    /// ones, for a shrink) are not contacted. `members` includes this rank.
    pub fn allgather_among(
        &mut self,
        members: &[usize],
        mine: &[u8],
        abort: &AtomicBool,
    ) -> Result<Vec<Vec<u8>>> {
        for &j in members {
            if j != self.rank {
                self.send(j, mine)?;
            }
        }
        let mut out = Vec::with_capacity(members.len());
        for &j in members {
            out.push(if j == self.rank {
                mine.to_vec()
            } else {
                self.recv(j, abort)?
            });
        }
        Ok(out)
    }

    pub fn barrier(&mut self, abort: &AtomicBool) -> Result<()> {
        self.allgather(&[], abort).map(|_| ())
    }

    /// Checks, without blocking, whether any peer died, left, or reported an error; messages
    /// that arrive meanwhile are kept for `recv`. Peers in `ignore_left` may have left.
    pub fn poll_health(&mut self, needed: &dyn Fn(usize) -> bool) -> Result<Health> {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut idx = Vec::new();
        for (j, p) in self.peers.iter().enumerate() {
            if let Some(p) = p {
                if p.failed.is_none() && p.gone.is_none() {
                    fds.push(libc::pollfd {
                        fd: p.stream.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    idx.push(j);
                }
            }
        }
        if !fds.is_empty() {
            // SAFETY: `fds` is a valid array of pollfd for the duration of the call; timeout 0.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
            if r > 0 {
                for (f, &j) in fds.iter().zip(&idx) {
                    if f.revents == 0 {
                        continue;
                    }
                    let Ok(p) = self.peer(j) else { continue };
                    match read_msg(&mut p.stream) {
                        Ok((tag, body)) => Self::handle(p, j, tag, body),
                        Err(e) if timed_out(&e) => {}
                        Err(e) => {
                            if !p.left {
                                p.gone =
                                    Some(format!("rank {j} is gone (control connection: {e})"));
                            }
                        }
                    }
                }
            }
        }
        let mut health = Health::Ok;
        for (j, p) in self.peers.iter().enumerate() {
            if let Some(p) = p {
                if let Some(f) = &p.failed {
                    return Err(Error::remote(f.clone()));
                }
                if needed(j) {
                    // A peer that died, left or failed an operation may still have sent all
                    // this rank needs for the current one (it can be a step ahead): all three
                    // fail the operation only if it stays stuck.
                    if let Some(g) = p.reported.as_ref().or(p.gone.as_ref()) {
                        health = Health::NeededPeerLeft(Error::remote(g.clone()));
                    } else if p.left {
                        health = Health::NeededPeerLeft(Error::remote(format!(
                            "rank {j} destroyed its communicator while this rank still waits for it"
                        )));
                    }
                }
            }
        }
        Ok(health)
    }

    /// Which peers said goodbye or are gone (after reading what has arrived from them):
    /// nothing more this rank sends can matter to them.
    pub fn departed(&mut self) -> Vec<bool> {
        let _ = self.poll_health(&|_| false);
        self.peers
            .iter()
            .map(|p| p.as_ref().is_some_and(|p| p.left || p.gone.is_some()))
            .collect()
    }

    /// Tells every peer this rank failed, so they stop waiting for it at once.
    pub fn notify_error(&mut self, err: &Error) {
        let msg = format!("{:?}: {}", err.kind, err.message);
        for p in self.peers.iter_mut().flatten() {
            let _ = p.stream.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = write_msg(&mut p.stream, TAG_ERROR, msg.as_bytes());
        }
    }

    /// Tells every peer this rank is leaving on purpose.
    pub fn say_bye(&mut self) {
        for p in self.peers.iter_mut().flatten() {
            let _ = p.stream.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = write_msg(&mut p.stream, TAG_BYE, &[]);
        }
    }
}

/// Shared flag type for abort.
pub type AbortFlag = Arc<AtomicBool>;

#[cfg(test)]
mod tests;
