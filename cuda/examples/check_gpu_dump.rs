//! Compares the host reductions with a dump of what NVIDIA's NCCL computed on GPUs
//! (`cuda/gpu-check/nccl_dump.py`). Usage: `cargo run -p ccl-cuda --example check_gpu_dump DIR`.
//! Prints, per type and operation, how many elements differ; NaN-vs-NaN differences (payload
//! or sign only) are counted apart.

use std::collections::BTreeMap;

use ccl_cuda::host::reduce::{div_int, from_f64, premul, reduce, to_f64};
use ccl_cuda::{DataType, ReduceKind};

fn dtype(name: &str) -> Option<DataType> {
    Some(match name {
        "int8" => DataType::Int8,
        "uint8" => DataType::Uint8,
        "int32" => DataType::Int32,
        "uint32" => DataType::Uint32,
        "int64" => DataType::Int64,
        "uint64" => DataType::Uint64,
        "f16" => DataType::Float16,
        "bf16" => DataType::Bfloat16,
        "f32" => DataType::Float32,
        "f64" => DataType::Float64,
        "f8e4m3" => DataType::Float8E4M3,
        "f8e5m2" => DataType::Float8E5M2,
        _ => return None,
    })
}

fn read_records(path: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let data = std::fs::read(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut pos = 0;
    let take = |pos: &mut usize, n: usize| -> &[u8] {
        let s = &data[*pos..*pos + n];
        *pos += n;
        s
    };
    while pos < data.len() {
        let klen = u32::from_le_bytes(take(&mut pos, 4).try_into().unwrap_or_default()) as usize;
        let key = String::from_utf8_lossy(take(&mut pos, klen)).into_owned();
        let _elem = take(&mut pos, 4);
        let n = u64::from_le_bytes(take(&mut pos, 8).try_into().unwrap_or_default()) as usize;
        out.insert(key, take(&mut pos, n).to_vec());
    }
    out
}

/// What the host library computes for one NCCL operation on two ranks' inputs.
fn host_result(dt: DataType, op: &str, a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    let n = a.len() / dt.size();
    let mut out = vec![0u8; a.len()];
    let kind = match op {
        "sum" => Some(ReduceKind::Sum),
        "prod" => Some(ReduceKind::Prod),
        "max" => Some(ReduceKind::Max),
        "min" => Some(ReduceKind::Min),
        _ => None,
    };
    // SAFETY: a, b and out hold n elements each and are disjoint; the premul copies too.
    unsafe {
        if let Some(kind) = kind {
            reduce(dt, kind, out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n);
            return Some(out);
        }
        let factor = match op {
            "avg" if !dt.is_float() => {
                reduce(
                    dt,
                    ReduceKind::Sum,
                    out.as_mut_ptr(),
                    a.as_ptr(),
                    b.as_ptr(),
                    n,
                );
                div_int(dt, out.as_mut_ptr(), n, 2);
                return Some(out);
            }
            "avg" => 0.5,
            // PyTorch hands NCCL the factor converted through f32.
            "premul0.3" => f64::from(0.3f32),
            _ => return None,
        };
        let scalar = from_f64(dt, factor);
        let (mut pa, mut pb) = (vec![0u8; a.len()], vec![0u8; b.len()]);
        premul(dt, pa.as_mut_ptr(), a.as_ptr(), n, scalar.as_ptr());
        premul(dt, pb.as_mut_ptr(), b.as_ptr(), n, scalar.as_ptr());
        reduce(
            dt,
            ReduceKind::Sum,
            out.as_mut_ptr(),
            pa.as_ptr(),
            pb.as_ptr(),
            n,
        );
    }
    Some(out)
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "bin") {
            all.extend(read_records(&entry.path()));
        }
    }
    let mut total_bad = 0;
    for (key, gpu) in &all {
        let Some((name, op)) = key.split_once('/') else {
            continue;
        };
        if op == "A" || op == "B" {
            continue;
        }
        let (Some(dt), Some(a), Some(b)) = (
            dtype(name),
            all.get(&format!("{name}/A")),
            all.get(&format!("{name}/B")),
        ) else {
            continue;
        };
        let Some(host) = host_result(dt, op, a, b) else {
            println!("{key}: no host equivalent");
            continue;
        };
        let s = dt.size();
        let (mut bad, mut nan_only) = (0, 0);
        let mut examples = Vec::new();
        for i in 0..gpu.len() / s {
            let (g, h) = (&gpu[i * s..(i + 1) * s], &host[i * s..(i + 1) * s]);
            if g == h {
                continue;
            }
            if to_f64(dt, g).is_nan() && to_f64(dt, h).is_nan() {
                nan_only += 1;
                if nan_only <= 2 {
                    examples.push(format!(
                        "  nan-only a={:02x?} b={:02x?} gpu={g:02x?} host={h:02x?}",
                        &a[i * s..(i + 1) * s],
                        &b[i * s..(i + 1) * s]
                    ));
                }
                continue;
            }
            bad += 1;
            if bad <= 6 {
                examples.push(format!(
                    "  a={:02x?} ({}) b={:02x?} ({}) gpu={g:02x?} ({}) host={h:02x?} ({})",
                    &a[i * s..(i + 1) * s],
                    to_f64(dt, &a[i * s..]),
                    &b[i * s..(i + 1) * s],
                    to_f64(dt, &b[i * s..]),
                    to_f64(dt, g),
                    to_f64(dt, h)
                ));
            }
        }
        total_bad += bad;
        println!(
            "{key:>16}: {} elements, {bad} differ, {nan_only} differ only in NaN bits",
            gpu.len() / s
        );
        for e in examples {
            println!("{e}");
        }
    }
    println!("total differing (non-NaN) elements: {total_bad}");
}
