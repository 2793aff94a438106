//! The throughput monitor: post/completion timestamps per work request, sliding-window
//! throughput per peer, path and NIC, anomaly and stall detection, and exporters (JSON lines,
//! Prometheus, [`Monitor::snapshot`]). Also the counters of where an executor's time went
//! ([`stats::ExecStats`]), which the executors fill and the communicator logs.
//!
//! Wiring: build a [`Monitor`] from a [`MonitorConfig`], hand its [`Publisher`] (or any
//! [`Subscriber`]) to transports and engines, and have them call `post`/`complete` with a
//! [`Work`] stamped by [`Publisher::now_ns`]. A disabled monitor's publisher costs one branch.
//! Windows are kept per peer (the connection), per path and per NIC.
//!
//! ```
//! use ccl_monitor::{CollId, Engine, Key, Monitor, MonitorConfig, Op, Subscriber, Unit, Work};
//!
//! // A transport generic over its subscriber; given `()` its calls compile away.
//! struct Transport<S: Subscriber> {
//!     events: S,
//! }
//!
//! impl<S: Subscriber> Transport<S> {
//!     fn chunk(&self, posted_ns: u64, done_ns: u64, bytes: u64) {
//!         let coll = CollId { comm: 7, op: Op::AllReduce, seq: 0 };
//!         let w = Work {
//!             ts_ns: posted_ns, bytes, peer: 1, path: 0, nic: 0,
//!             engine: Engine::Mpt, unit: Unit::Chunk, coll,
//!         };
//!         self.events.on_post(&w);
//!         self.events.on_complete(&Work { ts_ns: done_ns, ..w });
//!     }
//! }
//!
//! let cfg = MonitorConfig { enabled: true, ..MonitorConfig::default() };
//! let monitor = Monitor::new(&cfg)?;
//! let publisher = monitor.publisher();
//! let transport = Transport { events: publisher.clone() };
//! let t = publisher.now_ns();
//! transport.chunk(t, t + 40_000, 1 << 20);
//! monitor.flush()?;
//! let peer = monitor.snapshot().key(Key::Peer(1)).copied();
//! assert_eq!(peer.map(|k| (k.bytes, k.completions)), Some((1 << 20, 1)));
//! # Ok::<(), ccl_monitor::Error>(())
//! ```

pub mod clock;
mod collector;
pub mod config;
pub mod event;
pub mod export;
mod packed;
pub mod plugin;
mod publish;
pub mod ring;
mod select;
pub mod stats;
pub mod subscriber;
mod sync;
pub mod window;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

pub use clock::Clock;
pub use config::{CollectorSched, MonitorConfig};
pub use event::{CollId, Engine, Op, Record, Scope, Transition, Unit, Work};
pub use publish::Publisher;
pub use stats::{ExecStats, TIMED_BYTES};
pub use subscriber::Subscriber;
pub use window::{Event, Key, KeyStats, WindowConfig};

/// Everything that goes wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{name}={value:?}: {reason}")]
    Config {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("monitor metrics endpoint: {0}")]
    Bind(std::io::Error),
    #[error("starting a monitor thread: {0}")]
    Spawn(std::io::Error),
    #[error("the monitor's collector thread panicked")]
    CollectorPanicked,
    #[error("the monitor's collector did not answer within {0:?}")]
    Timeout(Duration),
    /// `NCCL_PROFILER_PLUGIN` names a library that does not load or lacks the interface.
    #[error("profiler plugin: {0}")]
    Plugin(String),
}

impl Error {
    pub(crate) fn plugin(why: impl Into<String>) -> Self {
        Error::Plugin(why.into())
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// The state of every key and the monitor's own counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// In key order: peers, then paths, then NICs.
    pub keys: Vec<KeyStats>,
    pub transitions: u64,
    /// Records the collector processed.
    pub records: u64,
    /// Records dropped because a ring was full.
    pub dropped: u64,
}

impl Snapshot {
    /// The state of one key.
    pub fn key(&self, key: Key) -> Option<&KeyStats> {
        self.keys.iter().find(|k| k.key == key)
    }
}

/// Which time stall detection runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeBase {
    /// The monitor's clock: records are stamped with [`Publisher::now_ns`].
    #[default]
    Clock,
    /// Record timestamps: the earliest of the producing threads' newest, for replays and
    /// simulations with made-up times (a producer that falls silent holds time back).
    Records,
}

/// How a monitor runs, beyond its [`MonitorConfig`].
pub struct Options {
    pub time_base: TimeBase,
    /// Also given every record and analysis event, on the collector thread.
    pub subscribers: Vec<Box<dyn Subscriber + Send>>,
    /// How long the collector sleeps when it found nothing to do (passes that keep finding
    /// nothing sleep up to 8 times longer); `None`: the config's `poll`.
    pub poll: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            time_base: TimeBase::Clock,
            subscribers: Vec::new(),
            poll: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("time_base", &self.time_base)
            .field("subscribers", &self.subscribers.len())
            .field("poll", &self.poll)
            .finish()
    }
}

/// What the publishers, the collector and the monitor share.
pub(crate) struct Shared {
    id: u64,
    ring_capacity: usize,
    clock: Clock,
    /// Rings registered by threads and not yet adopted by the collector.
    pending: Mutex<Vec<ring::Consumer<packed::Packed>>>,
    stop: AtomicBool,
    flush_req: AtomicU64,
    flush_done: Mutex<u64>,
    flushed: Condvar,
    snapshot: Arc<Mutex<Snapshot>>,
    collector: OnceLock<Thread>,
}

/// How long [`Monitor::flush`] waits for the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The monitor: owns the collector thread (windows, JSON file) and the metrics endpoint, and
/// stops both on drop.
#[derive(Debug)]
pub struct Monitor {
    shared: Option<Arc<Shared>>,
    collector: Option<JoinHandle<Result<(), Error>>>,
    metrics: Option<export::MetricsServer>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("id", &self.id).finish()
    }
}

impl Monitor {
    /// A monitor as configured; one that is not `enabled` starts no thread.
    pub fn new(cfg: &MonitorConfig) -> Result<Self, Error> {
        Self::with_options(cfg, Options::default())
    }

    /// A monitor with extra subscribers or another time base.
    pub fn with_options(cfg: &MonitorConfig, opts: Options) -> Result<Self, Error> {
        if !cfg.enabled {
            return Ok(Monitor {
                shared: None,
                collector: None,
                metrics: None,
            });
        }
        static IDS: AtomicU64 = AtomicU64::new(1);
        let shared = Arc::new(Shared {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            ring_capacity: cfg.ring_capacity,
            clock: *Clock::global(),
            pending: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            flush_req: AtomicU64::new(0),
            flush_done: Mutex::new(0),
            flushed: Condvar::new(),
            snapshot: Arc::new(Mutex::new(Snapshot::default())),
            collector: OnceLock::new(),
        });
        let metrics = match cfg.port {
            Some(port) => Some(export::MetricsServer::start(port, shared.snapshot.clone())?),
            None => None,
        };
        let collector = collector::Collector::new(cfg, opts, shared.clone())?.spawn()?;
        Ok(Monitor {
            shared: Some(shared),
            collector: Some(collector),
            metrics,
        })
    }

    /// Whether the monitor records anything.
    pub fn is_enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// A handle for emitting records (one that does nothing when the monitor is off).
    pub fn publisher(&self) -> Publisher {
        match &self.shared {
            Some(s) => Publisher::on(s.clone()),
            None => Publisher::off(),
        }
    }

    /// The state as of the collector's latest pass.
    pub fn snapshot(&self) -> Snapshot {
        match &self.shared {
            Some(s) => s.snapshot.lock().clone(),
            None => Snapshot::default(),
        }
    }

    /// Where the metrics endpoint listens, if it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// Waits until the collector has processed every record emitted before this call (by
    /// threads that synchronised with the caller) and written its file.
    pub fn flush(&self) -> Result<(), Error> {
        let Some(s) = &self.shared else {
            return Ok(());
        };
        let target = s.flush_req.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(t) = s.collector.get() {
            t.unpark();
        }
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        let mut done = s.flush_done.lock();
        while *done < target {
            if s.flushed.wait_until(&mut done, deadline).timed_out() {
                return Err(Error::Timeout(FLUSH_TIMEOUT));
            }
        }
        Ok(())
    }

    /// Stops the threads after the collector has processed everything emitted so far.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        self.metrics = None;
        let Some(s) = self.shared.take() else {
            return Ok(());
        };
        s.stop.store(true, Ordering::Release);
        match self.collector.take() {
            Some(h) => {
                h.thread().unpark();
                h.join().map_err(|_| Error::CollectorPanicked)?
            }
            None => Ok(()),
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "monitor shut down with an error");
        }
    }
}
