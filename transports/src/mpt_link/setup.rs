//! Setting a link up: bind every engine's paths ([`MptEndpoint`]), exchange hellos, connect
//! and start the engines; over a TCP stream with [`MptLink::over_tcp`], then check that
//! datagrams get through with [`MptLink::probe`].

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use crate::mpt::udp::UdpPaths;
use crate::socket_failover::PrimaryNic;
use crate::{Error, Link, Result, PIECE_ALIGN};

use super::config::{for_engines, layout, MptLinkConfig, MAX_ENGINES, MAX_NICS, MAX_SLOTS};
use super::engine::{start_engine, SubEndpoint};
use super::hello::{parse_hello, HELLO_MAGIC, HELLO_MAGIC_ADDRS, HELLO_MAGIC_ENGINES, MAX_HELLO};
use super::link::MptLink;
use super::parts::PART_HEADER;

/// One end of a link before the peer is known: bound sockets and flow ids.
pub struct MptEndpoint {
    subs: Vec<SubEndpoint>,
    cfg: MptLinkConfig,
}

/// Each of `ips` (local NICs' addresses, in path order) and where its NIC's address is
/// looked up again when its paths fail: by the name of the interface that holds it now.
fn nics_of(ips: &[IpAddr]) -> Vec<(IpAddr, Option<PrimaryNic>)> {
    ips.iter()
        .map(|&ip| (ip, PrimaryNic::holding(ip)))
        .collect()
}

/// Seed of engine `e`: engine 0 keeps the link's own, so a one-engine link draws the same
/// losses and path samples as before engines existed.
fn engine_seed(seed: u64, e: usize) -> u64 {
    if e == 0 {
        seed
    } else {
        mix(seed ^ (e as u64).wrapping_mul(0xA24B_AED4_963E_E407))
    }
}

impl MptEndpoint {
    /// Binds the path sockets of every engine on `ip`.
    pub fn bind(ip: IpAddr, cfg: MptLinkConfig) -> Result<Self> {
        let several = for_engines(&cfg, 2);
        let slots = 1..=MAX_SLOTS as u32;
        if !slots.contains(&cfg.slots) || !slots.contains(&several.slots) {
            return Err(Error::Protocol("mpt slots must be in 1..=16".into()));
        }
        if cfg.engines == 0 || cfg.engines > MAX_ENGINES {
            return Err(Error::Protocol(format!(
                "mpt engines must be in 1..={MAX_ENGINES}, not {}",
                cfg.engines
            )));
        }
        if cfg.local_ips.len() > MAX_NICS {
            return Err(Error::Protocol(format!(
                "mpt paths spread over at most {MAX_NICS} local addresses, not {}",
                cfg.local_ips.len()
            )));
        }
        if cfg.engines > 1 && u32::try_from(several.max_frame).is_err() {
            return Err(Error::Protocol(
                "mpt frames over 4 GiB cannot be split across engines".into(),
            ));
        }
        let mut subs = Vec::with_capacity(cfg.engines);
        let ips = if cfg.local_ips.is_empty() {
            std::slice::from_ref(&ip)
        } else {
            &cfg.local_ips[..]
        };
        let nics = nics_of(ips);
        for e in 0..cfg.engines {
            let seed = engine_seed(cfg.seed, e);
            let udp = UdpPaths::bind_on(ips, cfg.paths, cfg.drop_rate, seed)
                .map_err(|e| Error::io(format!("bind mpt udp paths on {ips:?}"), e))?;
            // The flow id doubles as a connection id: datagrams of an older connection that
            // reach a reused port are rejected by the core.
            let fid = (mix(seed ^ u64::from(std::process::id()) ^ nanos_now()) & 0x7FF) as u16;
            subs.push(SubEndpoint {
                udp,
                fid,
                seed,
                nics: nics.clone(),
            });
        }
        Ok(MptEndpoint { subs, cfg })
    }

    /// Where each local NIC's address (in the order of `local_ips`, or the one address the
    /// endpoint was bound to) is looked up while its paths are failed, instead of by the
    /// name of the interface that held it at bind: when it changes (the NIC was
    /// renumbered), the NIC's paths move to the new address. Extra entries are ignored.
    pub fn follow_nics(&mut self, lookups: Vec<PrimaryNic>) {
        for sub in &mut self.subs {
            for ((_, at), l) in sub.nics.iter_mut().zip(&lookups) {
                *at = Some(l.clone());
            }
        }
    }

    /// The hello to send to the peer. One engine: magic `MPT1`, flow id, path count,
    /// ports. Several: magic `MPTE`, engine count, largest frame, split size, then flow id,
    /// path count and ports of each engine.
    pub fn hello(&self) -> Result<Vec<u8>> {
        let mut h = Vec::with_capacity(MAX_HELLO);
        if self.subs.len() == 1 {
            h.extend_from_slice(HELLO_MAGIC);
        } else {
            let (max_frame, split) = layout(&for_engines(&self.cfg, self.subs.len()));
            h.extend_from_slice(HELLO_MAGIC_ENGINES);
            h.extend_from_slice(&(self.subs.len() as u16).to_be_bytes());
            h.extend_from_slice(&(max_frame as u64).to_be_bytes());
            h.extend_from_slice(&(split as u64).to_be_bytes());
        }
        for s in &self.subs {
            let ports = s
                .udp
                .local_ports()
                .map_err(|e| Error::io("udp local ports", e))?;
            h.extend_from_slice(&s.fid.to_be_bytes());
            h.extend_from_slice(&(ports.len() as u16).to_be_bytes());
            for p in ports {
                h.extend_from_slice(&p.to_be_bytes());
            }
        }
        if !self.cfg.local_ips.is_empty() {
            h.extend_from_slice(HELLO_MAGIC_ADDRS);
            h.push(self.cfg.local_ips.len() as u8);
            for ip in &self.cfg.local_ips {
                match ip {
                    IpAddr::V4(a) => {
                        h.push(4);
                        h.extend_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        h.push(6);
                        h.extend_from_slice(&a.octets());
                    }
                }
            }
        }
        Ok(h)
    }

    /// Connects to the peer at `peer_ip` that sent `hello`.
    pub fn connect(self, peer_ip: IpAddr, hello: &[u8], tcp: Option<TcpStream>) -> Result<MptLink> {
        let bad = |m: &str| Error::Protocol(format!("mpt hello from {peer_ip}: {m}"));
        let mut theirs = parse_hello(hello).map_err(bad)?;
        // Both sides run the smaller engine count (each side's default follows its own core
        // count): the extra engines' paths close unused. Framing and the layout check below
        // follow the count both use.
        let mut subs = self.subs;
        let n = subs.len().min(theirs.engines.len());
        subs.truncate(n);
        theirs.engines.truncate(n);
        if n == 1 {
            theirs.layout = None;
        }
        let cfg = for_engines(&self.cfg, n);
        let (max_frame, split) = layout(&cfg);
        if let Some((their_max, their_split)) = theirs.layout {
            // Receive slots are sized for this side's messages: the peer's must fit them.
            if (their_max, their_split) != (max_frame as u64, split as u64) {
                return Err(bad(&format!(
                    "the peer frames up to {their_max} bytes and splits above {their_split}, \
                     this side {max_frame} and {split}; both must be equal"
                )));
            }
        }
        // Several engines put a part header in front of every message; a message holds a
        // whole frame up to `split` bytes (or too short to cut at PIECE_ALIGN: under
        // `n * PIECE_ALIGN`), or one engine's part of a longer one (cuts rounded down to
        // PIECE_ALIGN make a part up to that much longer than an n-th).
        let max_msg = if n == 1 {
            max_frame
        } else {
            PART_HEADER
                + split
                    .max(max_frame.div_ceil(n) + PIECE_ALIGN)
                    .max(n * PIECE_ALIGN)
                    .min(max_frame)
        };
        let mut engines = Vec::with_capacity(n);
        let their_ips = if theirs.addrs.is_empty() {
            vec![peer_ip]
        } else {
            theirs.addrs
        };
        for (e, (sub, (fid, ports))) in subs.into_iter().zip(theirs.engines).enumerate() {
            let peer = if n == 1 {
                peer_ip.to_string()
            } else {
                format!("{peer_ip} (engine {e})")
            };
            let to: Vec<std::net::SocketAddr> = ports
                .iter()
                .enumerate()
                .map(|(i, &p)| std::net::SocketAddr::new(their_ips[i % their_ips.len()], p))
                .collect();
            engines.push(start_engine(&cfg, sub, (fid, &to), peer, max_msg, n > 1)?);
        }
        Ok(MptLink {
            engines,
            max_frame,
            split_bytes: split,
            peeked: None,
            next_seq: 0,
            engine_copy: cfg.engine_copy,
            next_frame: 0,
            last_engine: n - 1,
            heads: vec![None; n],
            ready: None,
            next_part: 0,
            shape: (1, 0),
            tcp,
            in_flight: std::collections::VecDeque::new(),
            reserved: [0; MAX_ENGINES],
            async_copy: cfg.async_copy && n > 1,
            zero_copy: cfg.zero_copy,
            copy_up_to: cfg.chunk_size as usize,
            place_receives: cfg.place_receives,
            last_full: false,
            // Only frames that go whole anyway: a longer one would not fit the peer's slots.
            inline_bytes: if n > 1 {
                cfg.inline_bytes.min(split)
            } else {
                0
            },
            send_inline: false,
            recv_inline: n > 1 && cfg.inline_bytes > 0,
            lead_driven: false,
            mon_op: None,
        })
    }
}

fn nanos_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// splitmix64 finaliser: spreads seed bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl MptLink {
    /// Sets up a link over a connected TCP stream: both sides bind their paths on the
    /// stream's local address, exchange hellos over it, and connect to each other. The
    /// stream stays open with the link. Both sides run the smaller engine count; a different
    /// frame layout fails both with an error naming the difference.
    pub fn over_tcp(mut tcp: TcpStream, cfg: MptLinkConfig) -> Result<Self> {
        let local = tcp
            .local_addr()
            .map_err(|e| Error::io("mpt: tcp local address", e))?;
        let peer = tcp
            .peer_addr()
            .map_err(|e| Error::io("mpt: tcp peer address", e))?;
        let ep = MptEndpoint::bind(local.ip(), cfg)?;
        let hello = ep.hello()?;
        let io = |e| Error::io(format!("mpt hello with {peer}"), e);
        tcp.set_nonblocking(false).map_err(io)?;
        tcp.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io)?;
        tcp.write_all(&(hello.len() as u32).to_be_bytes())
            .map_err(io)?;
        tcp.write_all(&hello).map_err(io)?;
        let mut len = [0u8; 4];
        tcp.read_exact(&mut len).map_err(io)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_HELLO {
            return Err(Error::Protocol(format!("mpt hello from {peer} too long")));
        }
        let mut theirs = vec![0u8; len];
        tcp.read_exact(&mut theirs).map_err(io)?;
        ep.connect(peer.ip(), &theirs, Some(tcp))
    }

    /// Checks that datagrams reach the peer and come back, before any data is trusted to
    /// the link (a firewall that drops UDP would otherwise show only as a hang): each side
    /// sends one probe frame and waits up to `within` for the peer's, then both tell each other
    /// over the TCP stream whether the peer's probe came. `Ok(Ok(link))`: both came (and are
    /// consumed). `Ok(Err((tcp, why)))`: at least one side saw none; the link is torn down and
    /// its TCP stream, clean, handed back for a TCP link instead.
    #[allow(clippy::type_complexity)]
    pub fn probe(
        mut self,
        within: Duration,
    ) -> Result<std::result::Result<MptLink, (TcpStream, String)>> {
        const PROBE: &[u8; 16] = b"libccl-mpt-probe";
        let deadline = std::time::Instant::now() + within;
        let (mut sent, mut got) = (false, false);
        // `sent` is only queued: the frame may still wait for a copy, room in the engine or
        // the peer's receive announcement. Leaving before it is out would block this side on
        // the outcome read below while its probe sits unsent, and fail the peer's wait.
        while !(sent && got && !self.has_pending()) && std::time::Instant::now() < deadline {
            if !sent {
                sent = self.try_send(PROBE)?;
            }
            self.flush()?;
            if !got {
                if let Some(f) = self.peek()? {
                    if f != PROBE {
                        return Err(Error::Protocol(
                            "mpt probe: the peer sent data before its probe".into(),
                        ));
                    }
                    self.pop();
                    got = true;
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let Some(tcp) = self.tcp.as_mut() else {
            return Err(Error::Protocol(
                "mpt probe: the link has no TCP stream".into(),
            ));
        };
        let io = |e| Error::io("mpt probe outcome", e);
        tcp.write_all(&[got as u8]).map_err(io)?;
        let mut theirs = [0u8; 1];
        tcp.read_exact(&mut theirs).map_err(io)?;
        if got && theirs[0] == 1 {
            return Ok(Ok(self));
        }
        let why = match (got, theirs[0] == 1) {
            (false, false) => "no probe datagram got through in either direction",
            (false, true) => "the peer's probe datagrams did not reach this side",
            _ => "this side's probe datagrams did not reach the peer",
        };
        let left = match (sent, self.has_pending()) {
            (false, _) => "; this side's probe was never queued",
            (true, true) => "; this side's probe was still queued or being resent",
            (true, false) => "",
        };
        let why = format!(
            "{why} within {} ms (UDP blocked?){left}",
            within.as_millis()
        );
        match self.tcp.take() {
            Some(tcp) => Ok(Err((tcp, why))),
            None => Err(Error::Protocol(why)),
        }
    }
}
