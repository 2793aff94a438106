//! Prints host reduction throughput (GB/s of destination bytes) for the types the
//! shared-memory allreduce leans on. Run with
//! `cargo run -p ccl-cuda --release --example reduce_speed`.

use std::time::Instant;

use ccl_cuda::host::reduce::reduce;
use ccl_cuda::{DataType, ReduceKind};

const BYTES: usize = 16 << 20;

fn measure(dt: DataType, op: ReduceKind, in_place: bool, offset: usize) -> f64 {
    let count = BYTES / dt.size();
    // u64 storage keeps the base 8-byte aligned so `offset` alone decides misalignment.
    let mut a = vec![0x3c00_3c00_3c00_3c00u64; BYTES / 8 + 1];
    let b = vec![0x3c00_3c00_3c00_3c00u64; BYTES / 8 + 1];
    let mut d = vec![0u64; BYTES / 8 + 1];
    // SAFETY: offset < 8 stays inside each buffer's extra u64.
    let pa = unsafe { (a.as_mut_ptr() as *mut u8).add(offset) };
    // SAFETY: as above.
    let pb = unsafe { (b.as_ptr() as *const u8).add(offset) };
    let pd = if in_place {
        pa
    } else {
        // SAFETY: as above.
        unsafe { (d.as_mut_ptr() as *mut u8).add(offset) }
    };
    // Warm up: fault in pages.
    // SAFETY: each buffer holds BYTES + 8 bytes; dst is disjoint from or equal to a.
    unsafe { reduce(dt, op, pd, pa, pb, count) };
    let iters = 20;
    let start = Instant::now();
    for _ in 0..iters {
        // SAFETY: each buffer holds BYTES + 8 bytes; dst is disjoint from or equal to a.
        unsafe { reduce(dt, op, pd, pa, pb, count) };
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(&d);
    (BYTES * iters) as f64 / secs / 1e9
}

fn main() {
    for (dt, op) in [
        (DataType::Float32, ReduceKind::Sum),
        (DataType::Float64, ReduceKind::Sum),
        (DataType::Int32, ReduceKind::Sum),
        (DataType::Int64, ReduceKind::Sum),
        (DataType::Float32, ReduceKind::Max),
        (DataType::Float16, ReduceKind::Sum),
        (DataType::Bfloat16, ReduceKind::Sum),
        (DataType::Float8E4M3, ReduceKind::Sum),
    ] {
        let disjoint = measure(dt, op, false, 0);
        let in_place = measure(dt, op, true, 0);
        let unaligned = measure(dt, op, false, 1);
        println!(
            "{:>9} {:?}: disjoint {disjoint:6.2} GB/s, in place {in_place:6.2} GB/s, misaligned {unaligned:6.2} GB/s",
            dt.name(),
            op
        );
    }
}
