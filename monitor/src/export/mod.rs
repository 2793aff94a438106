//! Where the monitor's findings go: JSON lines files and a Prometheus endpoint.

pub mod json;
pub mod prometheus;

pub use json::{JsonLine, JsonWriter, LineKind};
pub use prometheus::{render, MetricsServer};
