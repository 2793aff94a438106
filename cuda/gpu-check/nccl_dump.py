"""Dump what NVIDIA's NCCL computes for every dtype x op on two GPUs, as a bit-exact reference
for libccl's host reductions (checked by `cargo run -p ccl-cuda --example check_gpu_dump DIR`).

Rank 0 contributes array A and rank 1 array B, so each output element is exactly one
reduction step `A[i] op B[i]` (Avg: each premultiplied by 1/2, then summed; integers summed,
then divided). Needs 2 GPUs, PyTorch with NCCL. Usage: python3 nccl_dump.py OUTDIR
"""
import os
import struct
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def edge_bits(nbytes):
    """A few interesting bit patterns of a width, as unsigned ints."""
    bits = 8 * nbytes
    top = 1 << (bits - 1)
    vals = {0, 1, 2, 3, 7, top, top + 1, top - 1, top - 2, (1 << bits) - 1, (1 << bits) - 2,
            top // 2, top // 2 + 1, top + top // 2}
    return sorted(vals)


FLOAT_EDGES = {
    "f16": [0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x03ff, 0x83ff, 0x0400, 0x0401,
            0x3c00, 0x3c01, 0xbc00, 0x3800, 0x4000, 0x3555, 0x6800, 0x6801, 0x1400, 0x7bff,
            0xfbff, 0x7bfe, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x5bff, 0x0200, 0x2000],
    "bf16": [0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x007f, 0x807f, 0x0080, 0x0081,
             0x3f80, 0x3f81, 0xbf80, 0x3f00, 0x4000, 0x3eab, 0x4b80, 0x4b81, 0x7f7f, 0xff7f,
             0x7f7e, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0040, 0x3380, 0x0100, 0x7f00],
    "f32": [0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x3f000000, 0x40400000,
            0x00800000, 0x80800000, 0x00000001, 0x80000001, 0x007fffff, 0x7f7fffff, 0xff7fffff,
            0x7f800000, 0xff800000, 0x7fc00000, 0x7fc00001, 0xffc00000, 0x7f800001, 0x3f800001,
            0x4b800000, 0x4b800001],
    "f64": [0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000, 0xbff0000000000000,
            0x0010000000000000, 0x0000000000000001, 0x8000000000000001, 0x7fefffffffffffff,
            0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0x7ff8000000000001,
            0xfff8000000000000, 0x7ff0000000000001, 0x3ff0000000000001],
}

# name, torch dtype, bytes, unsigned numpy view, random pairs
TYPES = [
    ("int8", torch.int8, 1, np.uint8, 4096),
    ("uint8", torch.uint8, 1, np.uint8, 4096),
    ("int32", torch.int32, 4, np.uint32, 4096),
    ("int64", torch.int64, 8, np.uint64, 4096),
    ("f16", torch.float16, 2, np.uint16, 262144),
    ("f32", torch.float32, 4, np.uint32, 65536),
    ("f64", torch.float64, 8, np.uint64, 65536),
    ("bf16", torch.bfloat16, 2, np.uint16, 262144),
    ("f8e4m3", getattr(torch, "float8_e4m3fn", None), 1, np.uint8, 0),
    ("f8e5m2", getattr(torch, "float8_e5m2", None), 1, np.uint8, 0),
]

FILES = {"int8": "ints", "uint8": "ints", "int32": "ints", "int64": "ints", "f16": "half",
         "bf16": "half", "f32": "wide", "f64": "wide", "f8e4m3": "fp8", "f8e5m2": "fp8"}


def inputs(name, nbytes, npu, nrandom):
    if nbytes == 1 and name.startswith("f8"):
        vals = np.arange(256, dtype=np.uint8)
    else:
        vals = np.array(FLOAT_EDGES.get(name, edge_bits(nbytes)), dtype=npu)
    a = np.repeat(vals, len(vals))
    b = np.tile(vals, len(vals))
    if nrandom:
        rng = np.random.default_rng(nbytes * 7919 + 31 * len(name) + ord(name[-1]))
        ra = np.frombuffer(rng.bytes(nrandom * nbytes), dtype=npu)
        rb = np.frombuffer(rng.bytes(nrandom * nbytes), dtype=npu)
        a = np.concatenate([a, ra])
        b = np.concatenate([b, rb])
    return a.astype(npu), b.astype(npu)


def record(out, key, elem, data):
    key = key.encode()
    out.write(struct.pack("<I", len(key)) + key + struct.pack("<IQ", elem, len(data)) + data)


def worker(rank, outdir):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=2)
    files = {}
    log = []
    for name, tdt, nbytes, npu, nrandom in TYPES:
        if tdt is None:
            log.append(f"{name}: no torch dtype")
            continue
        a, b = inputs(name, nbytes, npu, nrandom)
        mine = a if rank == 0 else b
        raw = torch.from_numpy(mine.view(np.uint8).copy()).cuda()
        ops = [("sum", dist.ReduceOp.SUM), ("prod", dist.ReduceOp.PRODUCT),
               ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN),
               ("avg", dist.ReduceOp.AVG)]
        if tdt.is_floating_point:
            ops.append(("premul0.3", dist._make_nccl_premul_sum(0.3)))
        results = {}
        for opname, op in ops:
            t = raw.clone().view(tdt)
            try:
                dist.all_reduce(t, op=op)
                torch.cuda.synchronize()
                results[opname] = t.view(torch.uint8).cpu().numpy().tobytes()
            except Exception as e:  # noqa: BLE001 - record and go on
                log.append(f"{name} {opname}: {type(e).__name__}: {str(e)[:200]}")
                dist.barrier()
        if rank == 0:
            if FILES[name] not in files:
                files[FILES[name]] = open(os.path.join(outdir, FILES[name] + ".bin"), "wb")
            f = files[FILES[name]]
            record(f, f"{name}/A", nbytes, a.view(np.uint8).tobytes())
            record(f, f"{name}/B", nbytes, b.view(np.uint8).tobytes())
            for opname, data in results.items():
                record(f, f"{name}/{opname}", nbytes, data)
            log.append(f"{name}: {len(a)} pairs, ops {sorted(results)}")
    if rank == 0:
        for f in files.values():
            f.close()
        with open(os.path.join(outdir, "log.txt"), "w") as f:
            f.write(f"torch {torch.__version__} nccl {torch.cuda.nccl.version()}\n")
            f.write("\n".join(log) + "\n")
        print("\n".join(log))
    dist.destroy_process_group()


if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    mp.spawn(worker, args=(outdir,), nprocs=2)
