//! The windows' cost per record without threads or clocks: a multipath-like stream (one peer,
//! eight paths on two NICs, each path posting and completing a 60000-byte chunk every 25 us
//! of simulated time) through `Windows`, for counting instructions with
//! `perf stat -e instructions:u target/release/examples/window_cost [RECORDS]`.
#![allow(clippy::unwrap_used)]

use ccl_monitor::window::Windows;
use ccl_monitor::{CollId, Engine, Op, Unit, Work};

fn main() {
    let records: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let mut w = Windows::new(ccl_monitor::MonitorConfig::default().window_config());
    let mut out = Vec::new();
    let mut events = 0usize;
    let mut ts = 1_000_000u64;
    let mut done = 0u64;
    while done < records {
        for path in 0..8u16 {
            let work = Work {
                ts_ns: ts + u64::from(path) * 300,
                bytes: 60_000,
                peer: 1,
                path,
                nic: path % 2,
                engine: Engine::Mpt,
                unit: Unit::Chunk,
                coll: CollId {
                    comm: 7,
                    op: Op::Send,
                    seq: done / 1000,
                },
            };
            w.on_post_n(&work, 1);
            let mut c = work;
            c.ts_ns += 20_000;
            w.on_complete_n(&c, 1, &mut out);
            done += 2;
        }
        ts += 25_000;
        if ts % 1_000_000 < 25_000 {
            w.tick(ts, &mut out);
            events += out.len();
            out.clear();
        }
    }
    println!("{records} records, {events} events");
}
