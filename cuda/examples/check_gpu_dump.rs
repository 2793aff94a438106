//! Compares the host reductions with a dump of what NVIDIA's NCCL computed on GPUs
//! (`cuda/gpu-check/nccl_dump.py`). Usage: `cargo run -p ccl-cuda --example check_gpu_dump DIR`.
//! Prints, per type and operation, how many GPU results the host reproduces (NaN matches any
//! NaN). For pre-multiplied operations (Avg on floats, PreMulSum) it tries three orders of
//! rounding, since which rank's input NCCL fuses into the multiply-add depends on the chunk.
//! `VERBOSE=1` lists every unexplained element.

use std::collections::BTreeMap;

use ccl_cuda::host::reduce::{div_int, from_f64, premul, premul_add, reduce, to_f64};
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

/// What the host library computes for one NCCL operation on two ranks' inputs: one result,
/// or for pre-multiplied operations two (which input is fused into the multiply-add).
fn host_results(dt: DataType, op: &str, a: &[u8], b: &[u8]) -> Vec<Vec<u8>> {
    let n = a.len() / dt.size();
    let mut out = vec![0u8; a.len()];
    let kind = match op {
        "sum" => Some(ReduceKind::Sum),
        "prod" => Some(ReduceKind::Prod),
        "max" => Some(ReduceKind::Max),
        "min" => Some(ReduceKind::Min),
        _ => None,
    };
    // SAFETY: a, b and every output hold n elements each and are disjoint.
    unsafe {
        if let Some(kind) = kind {
            reduce(dt, kind, out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n);
            return vec![out];
        }
        let scalar = match op {
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
                return vec![out];
            }
            "avg" => from_f64(dt, 0.5),
            // PyTorch passes the factor as a double for f64 and through f32 otherwise; for
            // bf16 it appears to pass the low half of the f32's bits.
            "premul0.3" if dt == DataType::Float64 => from_f64(dt, 0.3),
            "premul0.3" if dt == DataType::Bfloat16 => {
                let low = 0.3f32.to_bits() as u16;
                let mut s = [0u8; 8];
                s[..2].copy_from_slice(&low.to_le_bytes());
                s
            }
            "premul0.3" => from_f64(dt, f64::from(0.3f32)),
            _ => return Vec::new(),
        };
        let (mut pa, mut pb) = (vec![0u8; a.len()], vec![0u8; b.len()]);
        premul(dt, pa.as_mut_ptr(), a.as_ptr(), n, scalar.as_ptr());
        premul(dt, pb.as_mut_ptr(), b.as_ptr(), n, scalar.as_ptr());
        let mut fused_a = vec![0u8; a.len()];
        premul_add(
            dt,
            fused_a.as_mut_ptr(),
            a.as_ptr(),
            pb.as_ptr(),
            n,
            scalar.as_ptr(),
        );
        let mut fused_b = vec![0u8; a.len()];
        premul_add(
            dt,
            fused_b.as_mut_ptr(),
            b.as_ptr(),
            pa.as_ptr(),
            n,
            scalar.as_ptr(),
        );
        reduce(
            dt,
            ReduceKind::Sum,
            out.as_mut_ptr(),
            pa.as_ptr(),
            pb.as_ptr(),
            n,
        );
        vec![fused_a, fused_b, out]
    }
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
        let candidates = host_results(dt, op, a, b);
        if candidates.is_empty() {
            println!("{key}: no host equivalent");
            continue;
        }
        let s = dt.size();
        let at = |buf: &[u8], i: usize| buf[i * s..(i + 1) * s].to_vec();
        let same =
            |x: &[u8], y: &[u8]| x == y || (to_f64(dt, x).is_nan() && to_f64(dt, y).is_nan());
        let verbose = std::env::var_os("VERBOSE").is_some();
        // How many elements each candidate is the first to explain; elements none explains.
        let mut explained = vec![0usize; candidates.len()];
        let mut unexplained = 0;
        for i in 0..gpu.len() / s {
            let g = at(gpu, i);
            match candidates.iter().position(|c| same(&g, &at(c, i))) {
                Some(k) => explained[k] += 1,
                None => {
                    unexplained += 1;
                    if unexplained <= 4 || verbose {
                        println!(
                            "  [{i}] a={:02x?} ({}) b={:02x?} ({}) gpu={g:02x?} ({}) host={:02x?} ({})",
                            at(a, i),
                            to_f64(dt, &at(a, i)),
                            at(b, i),
                            to_f64(dt, &at(b, i)),
                            to_f64(dt, &g),
                            at(&candidates[0], i),
                            to_f64(dt, &at(&candidates[0], i))
                        );
                    }
                }
            }
            if verbose && candidates.len() == 3 {
                let fused = [0, 1].map(|k| same(&g, &at(&candidates[k], i)));
                if fused == [false, false] && same(&g, &at(&candidates[2], i)) {
                    println!("  [{i}] only the unfused form round(a*s) + round(b*s) matches");
                }
            }
        }
        total_bad += unexplained;
        let labels = if candidates.len() == 3 {
            "fma(a, s, round(b*s)) / fma(b, s, round(a*s)) / round(a*s) + round(b*s)"
        } else {
            "host"
        };
        println!(
            "{key:>16}: {} elements, {unexplained} unexplained; explained by {labels}: {explained:?}",
            gpu.len() / s
        );
    }
    println!("total unexplained elements: {total_bad}");
}
