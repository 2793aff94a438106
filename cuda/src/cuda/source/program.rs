//! Whole kernel sources, as NVRTC compiles them: one kernel per program, or every batchable
//! kernel of a type in one program.

use std::fmt::Write as _;

use crate::dtype::DataType;

use super::graph::{graph_all_reduce_code, graph_copies_code, graph_handshake_code};
use super::ll::{ll_body_code, ll_exchange_code, ll_p2p_code};
use super::op::{kernel_name, KernelOp};
use super::prelude::{typed_prelude, COMMON, DEVICE_PRIMITIVES, HEADER};
use super::reduce::{body_code, op_code, reduce_n_body_code, reduce_n_mail_code};
use super::wait::{mail_copy_code, wait_copy_code, wait_flag_code};

/// The complete source of one kernel (one NVRTC program).
pub fn kernel_source(dt: DataType, op: KernelOp) -> String {
    kernel_source_with(dt, op, DEVICE_PRIMITIVES)
}

/// [`kernel_source`] with other definitions of the primitives (the typedefs and functions
/// of [`DEVICE_PRIMITIVES`]); tests use host C++ ones to run the kernels on the CPU.
pub fn kernel_source_with(dt: DataType, op: KernelOp, primitives: &str) -> String {
    let mut s = String::with_capacity(8192);
    s.push_str(HEADER);
    s.push_str(primitives);
    if op == KernelOp::LlExchange {
        s.push_str("struct alignas(16) ccl_u4 { u32 x, y, z, w; };\n");
        ll_exchange_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::WaitFlag {
        wait_flag_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::WaitCopy {
        wait_copy_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::MailCopy {
        mail_copy_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::LlP2p {
        ll_p2p_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::GraphCopies {
        graph_copies_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    if op == KernelOp::GraphHandshake {
        graph_handshake_code(&kernel_name(dt, op), &mut s);
        return s;
    }
    s.push_str(COMMON);
    typed_prelude(dt, &mut s);
    typed_kernel(dt, op, &mut s);
    s
}

/// One kernel over elements of `dt`: its element operation and its body.
fn typed_kernel(dt: DataType, op: KernelOp, out: &mut String) {
    op_code(dt, op.element_op(), out);
    match op {
        KernelOp::LlAllReduce(_) => ll_body_code(&kernel_name(dt, op), out),
        KernelOp::ReduceN(_, k) => reduce_n_body_code(&kernel_name(dt, op), k, out),
        KernelOp::ReduceNMail(_, k) => reduce_n_mail_code(&kernel_name(dt, op), k, out),
        KernelOp::GraphAllReduce(_, k) => graph_all_reduce_code(&kernel_name(dt, op), k, out),
        _ => body_code(&kernel_name(dt, op), op.is_binary(), out),
    }
}

/// Whether `op` is a kernel over typed elements, which [`batch_source`] can compile together
/// with others of its type; the rest (no arithmetic) are one program each.
pub fn batchable(op: KernelOp) -> bool {
    !matches!(
        op,
        KernelOp::LlExchange
            | KernelOp::WaitFlag
            | KernelOp::WaitCopy
            | KernelOp::MailCopy
            | KernelOp::LlP2p
            | KernelOp::GraphCopies
            | KernelOp::GraphHandshake
    )
}

/// One NVRTC program of every kernel of `ops` (each [`batchable`]) over elements of `dt`:
/// NVRTC's cost is mostly per program, and it scales poorly over threads of one process, so
/// the kernels loaded ahead compile as one program per type. Each kernel's element operation
/// and helpers sit in a namespace of their own (they share names), its macros are undefined
/// after it, and its `extern "C"` name is [`kernel_name`]'s, as in [`kernel_source`].
pub fn batch_source(dt: DataType, ops: &[KernelOp]) -> String {
    batch_source_with(dt, ops, DEVICE_PRIMITIVES)
}

/// [`batch_source`] with other definitions of the primitives (see [`kernel_source_with`]).
pub fn batch_source_with(dt: DataType, ops: &[KernelOp], primitives: &str) -> String {
    let mut s = String::with_capacity(8192 * (ops.len() + 1));
    s.push_str(HEADER);
    s.push_str(primitives);
    s.push_str(COMMON);
    typed_prelude(dt, &mut s);
    for (i, &op) in ops.iter().enumerate() {
        let _ = writeln!(s, "\nnamespace ccl_kernel_{i} {{");
        typed_kernel(dt, op, &mut s);
        s.push_str("\n} // namespace\n");
        for m in KERNEL_MACROS {
            let _ = writeln!(s, "#undef {m}");
        }
    }
    s
}

/// Macros the kernel bodies define (undefined between the kernels of a [`batch_source`]).
const KERNEL_MACROS: [&str; 7] = [
    "UNROLL", "VN", "K", "HELD", "UNROLL_N", "LL_MAXB", "LL_MAXR",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::ReduceKind;

    #[test]
    fn source_is_deterministic_and_names_every_kernel() {
        let mut names = std::collections::HashSet::new();
        for dt in DataType::ALL {
            for op in KernelOp::ALL {
                let a = kernel_source(dt, op);
                let b = kernel_source(dt, op);
                assert_eq!(a, b);
                let name = kernel_name(dt, op);
                assert!(
                    a.contains(&format!("extern \"C\" __global__ void {name}(")),
                    "{name}"
                );
                assert!(!a.contains("#include"), "{name}");
                assert!(names.insert(name));
                // Braces balance (a cheap syntax sanity check of the generator).
                let open = a.matches('{').count();
                let close = a.matches('}').count();
                assert_eq!(open, close, "{dt:?} {op:?}");
            }
        }
        assert_eq!(names.len(), 12 * 7);
        assert_eq!(
            kernel_name(DataType::Bfloat16, KernelOp::reduce(ReduceKind::Sum)),
            "ccl_reduce_sum_bf16"
        );
    }
}

#[cfg(test)]
mod dump {
    /// `CCL_DUMP_KERNELS=DIR cargo test -p ccl-cuda dump_sources` writes every kernel's
    /// source to DIR (for inspecting or compiling them offline).
    #[test]
    fn dump_sources() {
        let Some(dir) = std::env::var_os("CCL_DUMP_KERNELS") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for dt in crate::dtype::DataType::ALL {
            for op in super::KernelOp::ALL {
                let name = super::kernel_name(dt, op);
                std::fs::write(dir.join(format!("{name}.cu")), super::kernel_source(dt, op))
                    .unwrap();
            }
        }
    }
}
