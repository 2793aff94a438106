#!/usr/bin/env python3
"""Deterministic megatron-core GPT training on 2 or more GPUs, to compare NVIDIA NCCL with libccl.

Run under torchrun, once per library (tests/megatron/run.sh does both; NPROC=N there runs N
ranks, and its config pp2-tp is --pp 2 --tp N/2 --sequence-parallel --batch-p2p):

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        tests/megatron/train_gpt.py --pp 2 --batch-p2p --tag pp2-1f1b/nccl
    LD_PRELOAD=$PWD/.dev/libnccl.so.2 python3 -m torch.distributed.run --standalone \
        --nproc-per-node 2 tests/megatron/train_gpt.py --pp 2 --batch-p2p --tag pp2-1f1b/ccl

Everything the run prints for comparison is one JSON object per line, each with "tag":
  {"event": "start", "rank", "nccl_path", "nccl_version", ...}   every rank, before training;
                                  nccl_path: the libnccl that torch's ProcessGroupNCCL calls
  {"iter": i, "loss": <float.hex>, "loss_f", "ms"}                 the logging rank (last pipeline
                                                                   stage, tensor-parallel rank 0)
  {"event": "summary", "median_ms", ...}                           the logging rank, after training
  {"event": "final", "rank", "param_sum": <float.hex>, ...}         every rank, after training
tests/megatron/compare.py reads them.

Only megatron-core's "local" modules are used (no Transformer Engine, no apex); the one local
piece is the LayerNorm (megatron's WrappedTorchNorm refuses sequence parallelism): a
torch.nn.LayerNorm whose parameters carry megatron's `sequence_parallel` attribute, so that
megatron's finalize_model_grads all-reduces their gradients across the tensor-parallel group,
exactly as it does for apex's FusedLayerNorm.

There is no data parallelism (world size == tp * pp, e.g. --tp 4 --pp 2 on 8 ranks), so no
DistributedDataParallel wrapper: gradients stay in param.grad and finalize_model_grads
(megatron's own, installed as config.finalize_model_grads_func) runs the reductions megatron
needs: layer-norm grads across TP for sequence parallelism, the tied word-embedding grad across
the first and last pipeline stage.
The optimizer is torch.optim.AdamW on fp32 master copies of the bf16 parameters.
"""

import argparse
import ctypes
import json
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from functools import partial

# NVLink multicast must stay off on the device (shared/DEVICE.md); the caller exports these too,
# set them here as well before torch/NCCL/NVSHMEM can read them.
for _k, _v in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
    # cuBLAS needs this for reproducible results when deterministic algorithms are on.
    ("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
):
    os.environ.setdefault(_k, _v)

T_START = time.perf_counter()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    p.add_argument("--vpp", type=int, default=None,
                   help="virtual pipeline size (model chunks per rank): the interleaved schedule")
    p.add_argument("--sequence-parallel", action="store_true", help="sequence parallelism (needs --tp > 1)")
    p.add_argument("--overlap-p2p", action="store_true",
                   help="config.overlap_p2p_comm: individual isend/irecv overlapped with compute "
                        "(interleaved schedule only; excludes --batch-p2p)")
    p.add_argument("--overlap-p2p-warmup-flush", action="store_true",
                   help="config.overlap_p2p_comm_warmup_flush (with --overlap-p2p)")
    p.add_argument("--batch-p2p", action="store_true",
                   help="config.batch_p2p_comm: pipeline p2p through torch.distributed.batch_isend_irecv")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--ffn", type=int, default=None, help="FFN hidden size (default 4 * hidden)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--num-micro", type=int, default=8, help="micro-batches per iteration")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tag", default="run", help="label on every JSON line, e.g. pp2-1f1b/ccl")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data-seed", type=int, default=4321)
    p.add_argument("--data-pool", type=int, default=64, help="distinct synthetic micro-batches, cycled")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=int, default=10, help="linear LR warm-up iterations")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="hidden and attention dropout (seeded through megatron's RNG tracker)")
    p.add_argument("--untie-embeddings", action="store_true",
                   help="separate output layer (default: tied, as Megatron-LM's GPT; under pipeline "
                        "parallelism that adds megatron's embedding-group all-reduce)")
    p.add_argument("--position-embedding", choices=["learned_absolute", "rope"], default="learned_absolute")
    p.add_argument("--no-deterministic", action="store_true",
                   help="skip torch.use_deterministic_algorithms and megatron's deterministic_mode")
    p.add_argument("--timing-skip", type=int, default=10,
                   help="iterations left out of the median time (capped at iters // 2)")
    p.add_argument("--dist-timeout-min", type=int, default=10, help="process-group timeout")
    a = p.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    errs = []
    if a.tp * a.pp != world:
        errs.append(f"tp * pp must equal the world size {world} (no data parallelism here)")
    if a.sequence_parallel and a.tp < 2:
        errs.append("--sequence-parallel needs --tp > 1")
    if a.sequence_parallel and a.seq % a.tp:
        errs.append("--seq must divide by --tp with sequence parallelism")
    if a.vpp is not None and (a.pp < 2 or a.vpp < 2):
        errs.append("--vpp needs --pp > 1 and a value > 1")
    chunks = a.pp * (a.vpp or 1)
    if a.layers % chunks:
        errs.append(f"--layers must divide by pp * vpp = {chunks}")
    if a.overlap_p2p and a.batch_p2p:
        errs.append("--overlap-p2p and --batch-p2p exclude each other (megatron raises)")
    if a.overlap_p2p and a.vpp is None:
        errs.append("--overlap-p2p needs the interleaved schedule (--vpp); the 1F1B schedule raises")
    if a.overlap_p2p_warmup_flush and not a.overlap_p2p:
        errs.append("--overlap-p2p-warmup-flush needs --overlap-p2p")
    if a.vpp is not None and a.num_micro % a.pp:
        errs.append("--num-micro must divide by --pp for the interleaved schedule")
    if a.heads % a.tp or a.vocab % a.tp or a.hidden % a.heads:
        errs.append("heads and vocab must divide by tp, hidden by heads")
    if a.iters < 1:
        errs.append("--iters must be >= 1")
    if errs:
        p.error("; ".join(errs))
    return a


def emit(obj):
    # One write per line (print() writes the newline separately), so that lines of the two
    # ranks, which share one output file, do not run into each other.
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def loaded_nccl(torch):
    """Which libnccl torch's ProcessGroupNCCL really calls, and its ncclGetVersion().

    The nccl* symbols are looked up through libtorch_cuda.so's handle (its NEEDED libnccl.so.2:
    under LD_PRELOAD that is the preloaded library, otherwise the one its RPATH found) and dladdr
    names the file that holds them. torch may map a second libnccl (its RPATH copy, loaded by
    path) that is never called; "mapped" lists every libnccl in /proc/self/maps."""
    mapped = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "libnccl" in os.path.basename(parts[-1]):
                path = os.path.realpath(parts[-1])
                if path not in mapped:
                    mapped.append(path)
    used, version = None, None
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    candidates = [os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"), None]
    for cand in candidates:
        try:
            fn = ctypes.CDLL(cand).ncclGetVersion
        except (OSError, AttributeError):
            continue
        info = _DlInfo()
        if libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            used = os.path.realpath(info.dli_fname.decode())
        fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
        v = ctypes.c_int(0)
        version = v.value if fn(ctypes.byref(v)) == 0 else "error"
        break
    return {"path": used or "unknown", "version": version, "mapped": mapped}


def decode_version(code):
    if not isinstance(code, int):
        return str(code)
    if code >= 10000:  # X*10000 + Y*100 + Z since 2.9
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])

    # MEGATRON_PIN_CPUS=1: each local rank keeps to its own share of the CPUs this process
    # may use (contiguous blocks), so two host-bound ranks do not trade cores, and caches,
    # during a run (iteration times of these runs swing 5-15% run to run).
    if os.environ.get("MEGATRON_PIN_CPUS", "0") == "1":
        cpus = sorted(os.sched_getaffinity(0))
        nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        share = max(1, len(cpus) // max(1, nlocal))
        mine = cpus[local_rank * share:(local_rank + 1) * share] or cpus
        os.sched_setaffinity(0, mine)

    import numpy as np
    import torch

    # MEGATRON_ONE_GPU=1: every rank on GPU 0 (with MPS, tests/gpu/mps.sh, they run side by
    # side): libccl's host costs in a real training loop on a one-GPU machine. NVIDIA's NCCL
    # refuses two ranks on one GPU, so such runs are libccl only.
    gpu = 0 if os.environ.get("MEGATRON_ONE_GPU", "0") == "1" else local_rank
    torch.cuda.set_device(gpu)
    deterministic = not args.no_deterministic
    if deterministic:
        # warn_only: an op without a deterministic kernel warns instead of failing the run;
        # compare.py's NCCL-vs-NCCL repeat (REPEAT_NCCL in run.sh) tells whether one mattered.
        torch.use_deterministic_algorithms(True, warn_only=True)
        # Do not NaN-fill every torch.empty: that would add work megatron does not do.
        import torch.utils.deterministic

        torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    # Same as Megatron-LM's _initialize_distributed: no device_id, so every NCCL communicator
    # is created lazily, on a process group's first collective.
    torch.distributed.init_process_group(
        backend="nccl", rank=rank, world_size=world, timeout=timedelta(minutes=args.dist_timeout_min)
    )

    import megatron.core
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )
    from megatron.core.transformer.transformer_config import TransformerConfig

    lib = loaded_nccl(torch)
    try:
        torch_nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception as e:  # noqa: BLE001 - informative only
        torch_nccl = f"error: {e}"
    emit({
        "tag": args.tag, "event": "start", "rank": rank, "world": world,
        "nccl_path": lib["path"],
        "nccl_version": decode_version(lib["version"]),
        "nccl_version_code": lib["version"],
        "nccl_mapped": lib["mapped"],
        "torch_nccl_version": torch_nccl,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "torch": torch.__version__, "megatron_core": megatron.core.__version__,
        "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", ""),
        "deterministic": deterministic,
        "args": vars(args),
    })

    # WORLD communicator first (Megatron-Bridge does this barrier too): one all_reduce.
    torch.distributed.barrier(device_ids=[gpu])

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        create_gloo_process_groups=False,
    )
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    is_logging_rank = parallel_state.is_pipeline_last_stage(ignore_virtual=True) and tp_rank == 0

    # Seeds as Megatron-LM's _set_random_seed: offset per pipeline stage, then the CUDA RNG
    # tracker (default / tensor-parallel / expert states) from model_parallel_cuda_manual_seed.
    seed = args.seed + 100 * pp_rank
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)

    config = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        num_attention_heads=args.heads,
        ffn_hidden_size=args.ffn,
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        sequence_parallel=args.sequence_parallel,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        bf16=True,
        hidden_dropout=args.dropout,
        attention_dropout=args.dropout,
        attention_backend=AttnBackend.local,
        batch_p2p_comm=args.batch_p2p,
        overlap_p2p_comm=args.overlap_p2p,
        overlap_p2p_comm_warmup_flush=args.overlap_p2p_warmup_flush,
        deallocate_pipeline_outputs=True,  # what Megatron-LM's training sets
        deterministic_mode=deterministic,
        use_cpu_initialization=False,
        init_method_std=0.02,
    )
    # Megatron's own gradient finalization, called by the schedules at the end of
    # forward_backward: TP all-reduce of sequence-parallel (layer-norm) grads, PP all-reduce of
    # the tied word-embedding grad; the DP part (finish_grad_sync) is a no-op below.
    config.finalize_model_grads_func = finalize_model_grads

    chunks = build_model(args, config, torch, parallel_state, GPTModel, Float16Module,
                         get_gpt_layer_local_spec, TransformerBlockSubmodules,
                         get_num_layers_to_build, DistributedDataParallelConfig, pp_rank)

    params = [p for c in chunks for p in c.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    masters = [p.detach().float().clone() for p in params]
    for m in masters:
        m.requires_grad_(True)
    opt = torch.optim.AdamW(masters, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            foreach=True)

    data = SyntheticData(args, torch)
    data_iters = [data.iterator() for _ in chunks]  # one per model chunk, identical streams

    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float()
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses.view(-1) * mask) / mask.sum()
        # The schedule divides the returned loss in place: report a copy.
        return loss, {"lm loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        b = next(data_iterator)
        output = model(b["tokens"], b["position_ids"], None, labels=b["labels"])
        return output, partial(loss_func, b["loss_mask"])

    forward_backward = get_forward_backward_func()
    emit({
        "tag": args.tag, "event": "built", "rank": rank, "pp_rank": pp_rank, "tp_rank": tp_rank,
        "chunks": len(chunks), "local_params": n_params,
        "schedule": forward_backward.__name__,
        "setup_s": round(time.perf_counter() - T_START, 2),
    })

    times = []
    losses = []
    # MEGATRON_TRACE_DIR: a torch.profiler (CUPTI) timeline of three iterations from
    # MEGATRON_TRACE_FROM (default 20), one gzipped Chrome trace per rank, to see where a
    # library's streams wait (kernels, copies and gaps per stream). Off by default.
    trace_dir = os.environ.get("MEGATRON_TRACE_DIR", "")
    trace_from = int(os.environ.get("MEGATRON_TRACE_FROM", "20"))
    prof = None
    for it in range(args.iters):
        if trace_dir and it == trace_from:
            prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
            prof.start()
        lr = args.lr * min(1.0, (it + 1) / max(1, args.warmup))
        for g in opt.param_groups:
            g["lr"] = lr
        torch.cuda.synchronize()
        t0 = time.perf_counter()

        for p in params:
            p.grad = None
        store = forward_backward(
            forward_step_func=forward_step,
            data_iterator=data_iters,
            model=chunks,
            num_microbatches=args.num_micro,
            seq_length=args.seq,
            micro_batch_size=args.micro_batch,
            decoder_seq_length=args.seq,
            forward_only=False,
        )
        with torch.no_grad():
            for p, m in zip(params, masters):
                m.grad = None if p.grad is None else p.grad.float()
            opt.step()
            for p, m in zip(params, masters):
                p.copy_(m)
        loss_t = torch.stack([d["lm loss"] for d in store]).mean() if store else None

        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        if is_logging_rank:
            loss = float(loss_t.item())
            losses.append(loss)
            emit({"tag": args.tag, "iter": it, "loss": loss.hex(), "loss_f": loss, "ms": round(ms, 3)})
        if prof is not None and it == trace_from + 2:
            prof.stop()
            os.makedirs(trace_dir, exist_ok=True)
            name = args.tag.replace("/", ".") + f".rank{rank}.json.gz"
            prof.export_chrome_trace(os.path.join(trace_dir, name))
            prof = None

    skip = min(args.timing_skip, args.iters // 2)
    median_ms = statistics.median(times[skip:])
    with torch.no_grad():
        param_sum = float(torch.stack([p.detach().double().sum() for p in params]).sum().item())
    if is_logging_rank:
        emit({
            "tag": args.tag, "event": "summary", "iters": args.iters, "timed_from": skip,
            "median_ms": round(median_ms, 3), "mean_ms": round(statistics.mean(times[skip:]), 3),
            "min_ms": round(min(times[skip:]), 3), "first_iter_ms": round(times[0], 3),
            "first_loss": losses[0], "last_loss": losses[-1],
            "nccl_path": lib["path"],
            "nccl_version": decode_version(lib["version"]),
        })
    emit({
        "tag": args.tag, "event": "final", "rank": rank, "iters": args.iters,
        "median_ms": round(median_ms, 3), "param_sum": param_sum.hex(), "local_params": n_params,
        "max_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "total_s": round(time.perf_counter() - T_START, 2),
    })

    torch.distributed.barrier(device_ids=[gpu])
    torch.distributed.destroy_process_group()


class SyntheticData:
    """Deterministic mock data, identical on every rank and in every run: a pool of micro-batches
    drawn once from a seeded CPU generator, cycled. The tokens follow a first-order Markov chain
    over an active set of min(vocab, 4096) token ids spread over the vocabulary: the next token
    is a fixed random successor of the current one with probability 0.9, a uniform pick from the
    active set otherwise. The loss therefore falls visibly within 100 iterations (first to the
    active set's entropy, then towards the chain's), so a broken gradient shows up as training
    that stops learning, not only as a bitwise mismatch."""

    def __init__(self, args, torch):
        g = torch.Generator().manual_seed(args.data_seed)
        n, b, s, v = args.data_pool, args.micro_batch, args.seq, args.vocab
        active = min(v, 4096)
        ids = torch.randperm(v, generator=g)[:active]  # active index -> token id
        successor = torch.randperm(active, generator=g)  # active index -> next active index
        cur = torch.randint(0, active, (n * b,), generator=g)
        cols = [cur]
        for _ in range(s):
            follow = torch.rand((n * b,), generator=g) < 0.9
            rnd = torch.randint(0, active, (n * b,), generator=g)
            cur = torch.where(follow, successor[cur], rnd)
            cols.append(cur)
        seqs = ids[torch.stack(cols, dim=1)].view(n, b, s + 1)
        dev = torch.cuda.current_device()
        self.tokens = seqs[:, :, :-1].contiguous().to(dev)
        self.labels = seqs[:, :, 1:].contiguous().to(dev)
        self.position_ids = torch.arange(s, device=dev).unsqueeze(0).expand(b, s).contiguous()
        self.loss_mask = torch.ones((b, s), dtype=torch.float, device=dev)
        self.n = n

    def iterator(self):
        i = 0
        while True:
            k = i % self.n
            yield {
                "tokens": self.tokens[k],
                "labels": self.labels[k],
                "position_ids": self.position_ids,
                "loss_mask": self.loss_mask,
            }
            i += 1


def make_layer_norm_class(torch):
    class SPLayerNorm(torch.nn.LayerNorm):
        """torch.nn.LayerNorm with megatron's LayerNormBuilder signature; its parameters carry
        `sequence_parallel` like apex's FusedLayerNorm / TE's TENorm, so finalize_model_grads
        all-reduces their grads across tensor-parallel ranks under sequence parallelism."""

        def __init__(self, config, hidden_size, eps=1e-5, **_ignored):
            super().__init__(hidden_size, eps=eps)
            for p in self.parameters():
                setattr(p, "sequence_parallel", bool(config.sequence_parallel))

    return SPLayerNorm


def build_model(args, config, torch, parallel_state, GPTModel, Float16Module,
                get_gpt_layer_local_spec, TransformerBlockSubmodules, get_num_layers_to_build,
                DistributedDataParallelConfig, pp_rank):
    """One GPTModel per model chunk (vpp of them for the interleaved schedule), built like
    Megatron-LM's get_model: pre/post-process from the (virtual) stage, .cuda(), Float16Module."""
    SPLayerNorm = make_layer_norm_class(torch)
    layer_spec = get_gpt_layer_local_spec()
    layer_spec.submodules.input_layernorm = SPLayerNorm
    layer_spec.submodules.pre_mlp_layernorm = SPLayerNorm

    chunks = []
    for i in range(args.vpp or 1):
        vp_stage = i if args.vpp else None
        pre = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        post = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        n_layers = get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank)
        block = TransformerBlockSubmodules(layer_specs=[layer_spec] * n_layers, layer_norm=SPLayerNorm)
        model = GPTModel(
            config=config,
            transformer_layer_spec=block,
            vocab_size=args.vocab,
            max_sequence_length=args.seq,
            pre_process=pre,
            post_process=post,
            share_embeddings_and_output_weights=not args.untie_embeddings,
            position_embedding_type=args.position_embedding,
            vp_stage=vp_stage,
        )
        model.cuda(torch.cuda.current_device())
        model = Float16Module(config, model)
        # finalize_model_grads expects megatron's DDP wrapper; with data-parallel size 1 its
        # grad sync has nothing to do, so give the chunk the two members it reads.
        model.ddp_config = DistributedDataParallelConfig()
        model.finish_grad_sync = _no_grad_sync
        chunks.append(model)
    return chunks


def _no_grad_sync(force_all_reduce=False):
    return None


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
