"""PyTorch collectives and a small DDP run, for comparing libccl with NVIDIA NCCL bit for bit.

Run under torchrun with N >= 2 ranks (--nproc-per-node N), once with NVIDIA's NCCL and once with
LD_PRELOAD=.../libnccl.so.2 (libccl). Each rank saves every result tensor and the DDP losses to
$CCL_TORCH_OUT/<tag>_rank<r>.pt; tests/gpu/torch_compare.py DIR TAG_A TAG_B N compares two tags
(bit for bit with 2 ranks; with more, sums may differ by reduction order: see that script).

Point-to-point goes round a ring (rank r sends to r+1 and receives from r-1), which for 2 ranks
is the same exchange as before; new_group([0, 1]) is a 2-rank group whatever N is (ranks >= 2
are not members and keep their input). The big all-gather saves 8 Mi elements x N per dtype
and rank: about 0.5 GiB per rank file with 8 ranks, so keep CCL_TORCH_OUT on a local disk.
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def nccl_version():
    lib = ctypes.CDLL("libnccl.so.2")
    v = ctypes.c_int(0)
    lib.ncclGetVersion(ctypes.byref(v))
    return v.value


def main():
    tag = sys.argv[1]
    out_dir = os.environ.get("CCL_TORCH_OUT", "/tmp")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    # CCL_TORCH_ONE_GPU=1: every rank on GPU 0 (libccl allows it; NVIDIA's NCCL refuses it), to
    # compare libccl's own paths with each other on a one-GPU machine.
    if os.environ.get("CCL_TORCH_ONE_GPU") == "1":
        local = 0
    # CCL_TORCH_HOSTS=K: the ranks as K emulated hosts (consecutive ranks on each, by
    # CCL_HOSTID, which libccl reads at init), so libccl's hierarchy runs on one machine.
    hosts = int(os.environ.get("CCL_TORCH_HOSTS", "0"))
    if hosts > 0:
        os.environ["CCL_HOSTID"] = f"emulated-host-{rank * hosts // world}"
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    if rank == 0:
        print(f"[{tag}] ncclGetVersion from the loaded libnccl.so.2: {nccl_version()}", flush=True)
    res = {}
    trace = os.environ.get("CCL_TORCH_TRACE") == "1"

    class Traced(dict):
        def __setitem__(self, k, v):
            if trace:
                torch.cuda.synchronize()
                print(f"[{tag}] rank {rank}: {k} ok", flush=True)
            super().__setitem__(k, v)

    res = Traced()
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)

    def rnd(n, dt):
        return torch.randn(n, generator=g).to(dt).to(dev)

    def ring_p2p(x, name):
        # Blocking send/recv round the ring: rank 0 sends first, every other rank receives from
        # its predecessor before it sends on, so the chain 0 -> 1 -> ... -> N-1 -> 0 cannot
        # deadlock. With 2 ranks this is the old exchange (0 sends to 1, then receives from 1).
        # Then the same as one batch_isend_irecv.
        y = torch.empty_like(x)
        peer, prev = (rank + 1) % world, (rank - 1) % world
        if rank == 0:
            dist.send(x, dst=peer)
            dist.recv(y, src=prev)
        else:
            dist.recv(y, src=prev)
            dist.send(x, dst=peer)
        res[f"send_recv_{name}"] = y
        y = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, prev)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        res[f"batch_isend_irecv_{name}"] = y

    dts = () if os.environ.get("CCL_TORCH_ONLY_DDP") == "1" else (torch.float32, torch.bfloat16, torch.float16)
    for dt in dts:
        name = str(dt).split(".")[1]
        n = 1 << 16
        x = rnd(n * world, dt)
        y = x.clone()
        dist.all_reduce(y)
        res[f"all_reduce_{name}"] = y
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        res[f"all_reduce_max_{name}"] = y
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        res[f"all_reduce_avg_{name}"] = y
        y = x.clone()
        dist.broadcast(y, src=1)
        res[f"broadcast_{name}"] = y
        y = x.clone()
        dist.reduce(y, dst=0)
        res[f"reduce_{name}"] = y if rank == 0 else x
        y = torch.empty(n * world * world, dtype=dt, device=dev)
        dist.all_gather_into_tensor(y, x)
        res[f"all_gather_{name}"] = y
        y = torch.empty(n, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(y, x)
        res[f"reduce_scatter_{name}"] = y
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        res[f"all_to_all_{name}"] = y
        # Point-to-point round the ring, at this size and at a few hundred bytes (libccl's
        # point-to-point kernel rather than copy engines).
        ring_p2p(x, name)
        ring_p2p(x[:257].clone(), f"small_{name}")
    # Large tensors (copy-engine pipeline rather than the low-latency kernels), list-based
    # collectives (PyTorch turns several into grouped send/recv), and the other reductions.
    for dt in dts:
        name = str(dt).split(".")[1]
        # About 8 Mi elements, a multiple of the ranks (3 ranks: hosts of 2 + 1 emulated).
        big = rnd((8 << 20) // world * world, dt)
        y = big.clone()
        dist.all_reduce(y)
        res[f"big_all_reduce_{name}"] = y
        y = torch.empty(big.numel() // world, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(y, big)
        res[f"big_reduce_scatter_{name}"] = y
        y = torch.empty(big.numel() * world, dtype=dt, device=dev)
        dist.all_gather_into_tensor(y, big)
        res[f"big_all_gather_{name}"] = y
    if dts:
        x = rnd(4096 * world, torch.float32)
        for opname in ("PRODUCT", "MIN", "MAX"):
            y = x.clone()
            dist.all_reduce(y, op=getattr(dist.ReduceOp, opname))
            res[f"all_reduce_{opname.lower()}"] = y
        outs = [torch.empty(4096, device=dev) for _ in range(world)]
        dist.all_gather(outs, x[:4096])
        res["all_gather_list"] = torch.cat(outs)
        y = torch.empty(4096, device=dev)
        dist.reduce_scatter(y, list(x.chunk(world)))
        res["reduce_scatter_list"] = y
        outs = [torch.empty(4096 * world // world, device=dev) for _ in range(world)]
        dist.all_to_all(outs, list(x.chunk(world)))
        res["all_to_all_list"] = torch.cat(outs)
        gl = [torch.empty(4096, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(x[:4096], gather_list=gl, dst=0)
        res["gather"] = torch.cat(gl) if rank == 0 else x[:4096]
        y = torch.empty(4096, device=dev)
        dist.scatter(y, scatter_list=list(x.chunk(world)) if rank == 0 else None, src=0)
        res["scatter"] = y
    dist.barrier()
    sub = dist.new_group([0, 1])
    y = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(y, group=sub)
    res["new_group_all_reduce"] = y

    # DDP: a small MLP, 200 steps, fixed seeds and data.
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    dg = torch.Generator(device="cpu").manual_seed(99 + rank)
    losses = []
    for _ in range(200):
        xb = torch.randn(64, 256, generator=dg).to(dev)
        yb = torch.randint(0, 10, (64,), generator=dg).to(dev)
        loss = torch.nn.functional.cross_entropy(ddp(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    res["ddp_losses"] = torch.stack(losses)
    torch.cuda.synchronize()
    torch.save({k: v.cpu() for k, v in res.items()}, f"{out_dir}/{tag}_rank{rank}.pt")
    if rank == 0:
        print(f"[{tag}] done: {len(res)} results, final DDP loss {losses[-1].item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
