//! What a kernel computes ([`KernelOp`], per element type) and its name.

use crate::dtype::{DataType, ReduceKind};

/// What a kernel computes, for an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelOp {
    /// `dst[i] = a[i] (op) b[i]`.
    Reduce(ReduceKindKey),
    /// `dst[i] = ((s0[i] (op) s1[i]) (op) s2[i]) ...` over `k` sources (3..=[`REDUCE_N_MAX`]),
    /// rounded after every step exactly as a chain of [`KernelOp::Reduce`] launches, but in
    /// one pass: every source is read at once (over NVLink, from every peer at once) and
    /// the destination written once. Not in [`KernelOp::ALL`]: one kernel per `k`, compiled
    /// when a communicator of `k` ranks needs it (see [`reduce_n_body_code`]).
    ///
    /// [`REDUCE_N_MAX`]: super::REDUCE_N_MAX
    /// [`reduce_n_body_code`]: super::reduce::reduce_n_body_code
    ReduceN(ReduceKindKey, u8),
    /// [`KernelOp::ReduceN`] queued before the peers' buffers are known: every address comes
    /// from a mailbox slot an engine thread fills once every rank has posted (see
    /// [`reduce_n_mail_code`]; 2..=[`REDUCE_N_MAX`] sources). Not in [`KernelOp::ALL`].
    ///
    /// [`REDUCE_N_MAX`]: super::REDUCE_N_MAX
    /// [`reduce_n_mail_code`]: super::reduce::reduce_n_mail_code
    ReduceNMail(ReduceKindKey, u8),
    /// A small all-reduce captured into a CUDA graph, whole in one block of
    /// [`GRAPH_AR_THREADS`] threads over `k` ranks' inputs (2..=[`REDUCE_N_MAX`]): it sets its
    /// "inputs ready" word at every peer and waits for theirs, reduces every element reading
    /// every input, sets its "done reading" word at every peer and waits for theirs, each word
    /// reset after its wait (see [`graph_all_reduce_code`]). Not in [`KernelOp::ALL`].
    ///
    /// [`GRAPH_AR_THREADS`]: super::GRAPH_AR_THREADS
    /// [`REDUCE_N_MAX`]: super::REDUCE_N_MAX
    /// [`graph_all_reduce_code`]: super::graph::graph_all_reduce_code
    GraphAllReduce(ReduceKindKey, u8),
    /// A small group of copies captured into a CUDA graph, in one block: the handshake of
    /// [`KernelOp::GraphAllReduce`], up to [`GRAPH_COPIES_MAX`] copies, the second handshake
    /// (see [`graph_copies_code`]; compiled under `Uint8`).
    ///
    /// [`GRAPH_COPIES_MAX`]: super::GRAPH_COPIES_MAX
    /// [`graph_copies_code`]: super::graph::graph_copies_code
    GraphCopies,
    /// One handshake of a captured group's parts (the one of [`KernelOp::GraphAllReduce`]) as a
    /// one-thread kernel: it spins on the peers' words, where a batch of stream waits is
    /// re-polled by the GPU's front end (a captured 4-rank group of copies took 40 us with
    /// stream waits on one H200 under MPS, 2026-11-29, `tests/gpu/graph_nodes.c`). Compiled
    /// under `Uint8`.
    GraphHandshake,
    /// `dst[i] = src[i] * scalar`.
    PreMul,
    /// `dst[i] = src[i] * scalar + acc[i]`, rounded once.
    PreMulAdd,
    /// `dst[i] = dst[i] / n` (integer division truncating toward zero; floats divide).
    DivInt,
    /// One-shot all-reduce of a small message over the ranks' low-latency areas (one block;
    /// see [`ll_body_code`]). Not in [`KernelOp::ALL`]: it has its own launcher.
    ///
    /// [`ll_body_code`]: super::ll::ll_body_code
    LlAllReduce(ReduceKindKey),
    /// Small transfers between all ranks over the low-latency areas, no arithmetic (see
    /// [`ll_exchange_code`]); one kernel for every type (compiled under `Uint8`).
    ///
    /// [`ll_exchange_code`]: super::ll::ll_exchange_code
    LlExchange,
    /// One thread waiting until a flag word reaches a value (cyclic `>=`), as a stream wait
    /// would, but without holding the hardware queue: where streams share one queue
    /// (`CUDA_DEVICE_MAX_CONNECTIONS=1`) a waiting stream operation stops every stream's
    /// work behind it, a running kernel does not (see [`wait_flag_code`]; compiled under
    /// `Uint8`).
    ///
    /// [`wait_flag_code`]: super::wait::wait_flag_code
    WaitFlag,
    /// A direct transfer's copy as one kernel: wait until a flag reaches a value, copy the
    /// bytes, then set another flag -- the wait, the copy and the signal never leave a
    /// command queued behind a waiting one on the hardware queue (see [`wait_copy_code`];
    /// one block; compiled under `Uint8`).
    ///
    /// [`wait_copy_code`]: super::wait::wait_copy_code
    WaitCopy,
    /// A send queued before its receiver posted: every block waits until a host-mapped
    /// mailbox slot holds the operation's tag, reads the destination address and length an
    /// engine thread wrote there, and the grid copies (see [`mail_copy_code`]; compiled under
    /// `Uint8`).
    ///
    /// [`mail_copy_code`]: super::wait::mail_copy_code
    MailCopy,
    /// A group's small sends and receives as one kernel over the ranks' low-latency areas (a
    /// few blocks a side): per (sender, receiver) pair a ring of [`LL_P2P_SLOTS`] slots of
    /// packed lines and credit words back, so a send needs no rendezvous with its receive (see
    /// [`ll_p2p_code`]; compiled under `Uint8`).
    ///
    /// [`LL_P2P_SLOTS`]: super::LL_P2P_SLOTS
    /// [`ll_p2p_code`]: super::ll::ll_p2p_code
    LlP2p,
}

/// [`ReduceKind`] with an order, so that kernel keys sort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceKindKey {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceKindKey {
    /// Every arithmetic reduction.
    pub const ALL: [ReduceKindKey; 4] = [
        ReduceKindKey::Sum,
        ReduceKindKey::Prod,
        ReduceKindKey::Max,
        ReduceKindKey::Min,
    ];
}

impl From<ReduceKind> for ReduceKindKey {
    fn from(k: ReduceKind) -> Self {
        match k {
            ReduceKind::Sum => ReduceKindKey::Sum,
            ReduceKind::Prod => ReduceKindKey::Prod,
            ReduceKind::Max => ReduceKindKey::Max,
            ReduceKind::Min => ReduceKindKey::Min,
        }
    }
}

impl KernelOp {
    /// Every kernel kind.
    pub const ALL: [KernelOp; 7] = [
        KernelOp::Reduce(ReduceKindKey::Sum),
        KernelOp::Reduce(ReduceKindKey::Prod),
        KernelOp::Reduce(ReduceKindKey::Max),
        KernelOp::Reduce(ReduceKindKey::Min),
        KernelOp::PreMul,
        KernelOp::PreMulAdd,
        KernelOp::DivInt,
    ];

    /// The kernel for a reduction.
    pub fn reduce(k: ReduceKind) -> Self {
        KernelOp::Reduce(k.into())
    }

    fn tag(self) -> &'static str {
        match self {
            KernelOp::Reduce(ReduceKindKey::Sum) => "reduce_sum",
            KernelOp::Reduce(ReduceKindKey::Prod) => "reduce_prod",
            KernelOp::Reduce(ReduceKindKey::Max) => "reduce_max",
            KernelOp::Reduce(ReduceKindKey::Min) => "reduce_min",
            KernelOp::PreMul => "premul",
            KernelOp::PreMulAdd => "premul_add",
            KernelOp::DivInt => "div_int",
            KernelOp::LlAllReduce(ReduceKindKey::Sum) => "ll_allreduce_sum",
            KernelOp::LlAllReduce(ReduceKindKey::Prod) => "ll_allreduce_prod",
            KernelOp::LlAllReduce(ReduceKindKey::Max) => "ll_allreduce_max",
            KernelOp::LlAllReduce(ReduceKindKey::Min) => "ll_allreduce_min",
            KernelOp::LlExchange => "ll_exchange",
            KernelOp::WaitFlag => "wait_flag",
            KernelOp::WaitCopy => "wait_copy",
            KernelOp::MailCopy => "mail_copy",
            KernelOp::LlP2p => "ll_p2p",
            KernelOp::ReduceN(ReduceKindKey::Sum, _) => "reduce_n_sum",
            KernelOp::ReduceN(ReduceKindKey::Prod, _) => "reduce_n_prod",
            KernelOp::ReduceN(ReduceKindKey::Max, _) => "reduce_n_max",
            KernelOp::ReduceN(ReduceKindKey::Min, _) => "reduce_n_min",
            KernelOp::ReduceNMail(ReduceKindKey::Sum, _) => "reduce_n_mail_sum",
            KernelOp::ReduceNMail(ReduceKindKey::Prod, _) => "reduce_n_mail_prod",
            KernelOp::ReduceNMail(ReduceKindKey::Max, _) => "reduce_n_mail_max",
            KernelOp::ReduceNMail(ReduceKindKey::Min, _) => "reduce_n_mail_min",
            KernelOp::GraphAllReduce(ReduceKindKey::Sum, _) => "graph_allreduce_sum",
            KernelOp::GraphAllReduce(ReduceKindKey::Prod, _) => "graph_allreduce_prod",
            KernelOp::GraphAllReduce(ReduceKindKey::Max, _) => "graph_allreduce_max",
            KernelOp::GraphAllReduce(ReduceKindKey::Min, _) => "graph_allreduce_min",
            KernelOp::GraphCopies => "graph_copies",
            KernelOp::GraphHandshake => "graph_handshake",
        }
    }

    /// The element-wise operation the kernel applies.
    pub(super) fn element_op(self) -> KernelOp {
        match self {
            KernelOp::LlAllReduce(k)
            | KernelOp::ReduceN(k, _)
            | KernelOp::ReduceNMail(k, _)
            | KernelOp::GraphAllReduce(k, _) => KernelOp::Reduce(k),
            op => op,
        }
    }

    /// Two inputs (`a`, `b`) rather than one.
    pub fn is_binary(self) -> bool {
        matches!(self, KernelOp::Reduce(_) | KernelOp::PreMulAdd)
    }
}

/// Short type tag used in kernel names.
pub fn dtype_tag(dt: DataType) -> &'static str {
    match dt {
        DataType::Int8 => "i8",
        DataType::Uint8 => "u8",
        DataType::Int32 => "i32",
        DataType::Uint32 => "u32",
        DataType::Int64 => "i64",
        DataType::Uint64 => "u64",
        DataType::Float16 => "f16",
        DataType::Float32 => "f32",
        DataType::Float64 => "f64",
        DataType::Bfloat16 => "bf16",
        DataType::Float8E4M3 => "e4m3",
        DataType::Float8E5M2 => "e5m2",
    }
}

/// The `extern "C"` name of a kernel, e.g. `ccl_reduce_sum_bf16`.
pub fn kernel_name(dt: DataType, op: KernelOp) -> String {
    match op {
        KernelOp::ReduceN(_, k) | KernelOp::ReduceNMail(_, k) | KernelOp::GraphAllReduce(_, k) => {
            format!("ccl_{}{k}_{}", op.tag(), dtype_tag(dt))
        }
        _ => format!("ccl_{}_{}", op.tag(), dtype_tag(dt)),
    }
}

/// Elements per 16-byte vector.
pub fn vec_elems(dt: DataType) -> usize {
    16 / dt.size()
}

/// Independent 16-byte vectors each thread keeps in flight per loop iteration.
pub const UNROLL: usize = 4;

/// Threads per block of every kernel.
pub const BLOCK_THREADS: u32 = 256;
