//! The throughput monitor: post/completion timestamps per chunk, sliding windows, anomaly
//! detection and exporters. No code yet.
