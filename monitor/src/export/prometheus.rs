//! The Prometheus text exposition (format 0.0.4) of a [`Snapshot`], served on
//! `127.0.0.1:port` by a thread of its own.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use crate::window::KeyStats;
use crate::{Error, Snapshot};

type Field = fn(&KeyStats) -> f64;

/// The per-key families: name, type, help, value.
const KEYED: [(&str, &str, &str, Field); 7] = [
    (
        "ccl_monitor_bytes_total",
        "counter",
        "Bytes completed.",
        |k| k.bytes as f64,
    ),
    (
        "ccl_monitor_completions_total",
        "counter",
        "Work requests completed.",
        |k| k.completions as f64,
    ),
    (
        "ccl_monitor_throughput_bytes_per_second",
        "gauge",
        "Throughput over the latest window of completions.",
        |k| k.tput_bps,
    ),
    (
        "ccl_monitor_baseline_bytes_per_second",
        "gauge",
        "Moving baseline of healthy window throughput.",
        |k| k.baseline_bps,
    ),
    (
        "ccl_monitor_outstanding",
        "gauge",
        "Work requests posted and not yet completed.",
        |k| k.outstanding as f64,
    ),
    (
        "ccl_monitor_anomalies_total",
        "counter",
        "Throughput drops below the threshold.",
        |k| k.anomalies as f64,
    ),
    (
        "ccl_monitor_stalls_total",
        "counter",
        "Spells with work outstanding and no completion.",
        |k| k.stalls as f64,
    ),
];

/// The exposition text of a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(256 + s.keys.len() * 700);
    for (name, kind, help, value) in KEYED {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for k in &s.keys {
            let (scope, id) = (k.key.scope(), k.key.id());
            let _ = writeln!(
                out,
                "{name}{{scope=\"{scope}\",id=\"{id}\"}} {}",
                float(value(k))
            );
        }
    }
    let globals = [
        (
            "ccl_monitor_transitions_total",
            "Health and failover transitions reported.",
            s.transitions,
        ),
        (
            "ccl_monitor_records_total",
            "Records the collector processed.",
            s.records,
        ),
        (
            "ccl_monitor_dropped_records_total",
            "Records dropped because a ring was full.",
            s.dropped,
        ),
    ];
    for (name, help, v) in globals {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    out
}

/// Prometheus spells infinities and NaN its own way; finite values print as Rust does.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// The endpoint's thread; stops and joins on drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `127.0.0.1:port` (0 picks a free port) and answers `GET /metrics` with the
    /// latest snapshot.
    pub fn start(port: u16, snapshot: Arc<Mutex<Snapshot>>) -> Result<Self, Error> {
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ccl-monitor-http".into())
            .spawn(move || serve(listener, &flag, &snapshot))
            .map_err(Error::Spawn)?;
        tracing::info!(%addr, "monitor metrics endpoint listening");
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The accept loop blocks; a connection of our own wakes it to see the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::warn!("monitor metrics thread panicked");
            }
        }
    }
}

fn serve(listener: TcpListener, stop: &AtomicBool, snapshot: &Mutex<Snapshot>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        match conn {
            Ok(stream) => {
                if let Err(e) = answer(stream, snapshot) {
                    tracing::debug!(error = %e, "monitor metrics request failed");
                }
            }
            Err(e) => tracing::debug!(error = %e, "monitor metrics accept failed"),
        }
    }
}

/// Reads one request head (bounded in size and time) and answers it.
fn answer(mut stream: TcpStream, snapshot: &Mutex<Snapshot>) -> std::io::Result<()> {
    // One client at a time: a stuck one must not hold the endpoint for long.
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next(), parts.next());
    let (status, ctype, body) = if method == Some(b"GET") && target == Some(b"/metrics") {
        let body = render(&snapshot.lock());
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".to_owned(),
        )
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes())?;
    stream.flush()
}
