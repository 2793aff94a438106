"""Collectives captured in a CUDA graph and replayed, as PyTorch users capture them
(torch.cuda.graph around dist calls: tensor-parallel layers under CUDA graphs, inference
engines' decode steps). Run under torchrun with N >= 1 ranks:

    torchrun --nproc-per-node N tests/gpu/torch_graph.py TAG

CCL_GRAPH_ONE_GPU=1 puts every rank on GPU 0 (libccl allows it; NVIDIA's NCCL refuses two
ranks on one GPU). Each replay gets new inputs; every result is checked exactly against what
the collective must give (integer-valued floats, so sums are exact in any order), eager
collectives run between replays on the same communicator, and the process exits 1 on any
wrong element. Prints one line per check and "PASS" at the end.
"""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "run"
    # A hang prints where every thread of Python was, then exits.
    faulthandler.dump_traceback_later(int(os.environ.get("CCL_GRAPH_HANG_S", "150")), exit=True)
    verbose = os.environ.get("CCL_GRAPH_VERBOSE") == "1"
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev_index = 0 if os.environ.get("CCL_GRAPH_ONE_GPU") == "1" else local
    torch.cuda.set_device(dev_index)
    dev = torch.device("cuda", dev_index)
    dist.init_process_group("nccl", device_id=dev)
    n = int(os.environ.get("CCL_GRAPH_ELEMS", str(1 << 20)))
    replays = int(os.environ.get("CCL_GRAPH_REPLAYS", "20"))

    x = torch.zeros(n, device=dev)
    gathered = torch.zeros(world * n, device=dev)
    scattered = torch.zeros(n // world if n % world == 0 else 0, device=dev)
    ring = torch.zeros(n, device=dev)
    base = torch.arange(n, device=dev, dtype=torch.float32) % 1024

    side = torch.cuda.Stream()

    def warm_up(t):
        # PyTorch's recipe: run once on a side stream before capturing.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_reduce(t)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

    warm_up(x)

    graph = torch.cuda.CUDAGraph()
    empty = torch.zeros(0, device=dev)
    with torch.cuda.graph(graph):
        dist.all_reduce(empty)  # moves nothing, must not fail the capture
        dist.all_reduce(x)
        y = x * 2
        dist.all_gather_into_tensor(gathered, y)
        if scattered.numel():
            dist.reduce_scatter_tensor(scattered, gathered[:n])
        if world > 1:
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            ops = [dist.P2POp(dist.isend, y, nxt), dist.P2POp(dist.irecv, ring, prv)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    wrong = 0

    def check(name, got, want):
        nonlocal wrong
        bad = int((got != want).sum().item())
        wrong += bad
        if bad:
            print(f"[{tag}] rank {rank}: {name}: {bad} wrong elements", flush=True)

    for it in range(replays):
        # Rank r's input: base + r + it (exact in float32).
        x.copy_(base + rank + it)
        graph.replay()
        torch.cuda.synchronize()
        total = world * base + sum(range(world)) + world * it
        check(f"replay {it} all_reduce", x, total)
        check(f"replay {it} all_gather", gathered, (2 * total).repeat(world))
        if scattered.numel():
            k = n // world
            check(f"replay {it} reduce_scatter", scattered, world * 2 * total[rank * k:(rank + 1) * k])
        if world > 1:
            check(f"replay {it} send/recv", ring, 2 * total)
        # An eager collective on the same communicator between replays.
        e = torch.full((1024,), float(rank + it), device=dev)
        dist.all_reduce(e)
        torch.cuda.synchronize()
        check(f"eager {it}", e, torch.full_like(e, float(sum(range(world)) + world * it)))

    if os.environ.get("CCL_GRAPH_TIME") == "1":
        # Time per all_reduce: K in one graph replayed R times, against K * R eager calls.
        for elems, k, r in ((2048, 20, 50), (16 << 20, 4, 10)):
            t = torch.ones(elems, device=dev)
            g = torch.cuda.CUDAGraph()
            warm_up(t)
            with torch.cuda.graph(g):
                for _ in range(k):
                    dist.all_reduce(t)
            times = {}
            if verbose:
                print(f"[{tag}] rank {rank}: captured {k} all_reduces of {elems} elements", flush=True)
            for mode in ("graph", "eager", "graph"):
                if verbose:
                    print(f"[{tag}] rank {rank}: timing {mode}", flush=True)
                torch.cuda.synchronize()
                dist.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                # One host synchronisation per k operations either way (a training step's).
                for _ in range(r):
                    if mode == "graph":
                        g.replay()
                    else:
                        for _ in range(k):
                            dist.all_reduce(t)
                    torch.cuda.synchronize()
                end.record()
                torch.cuda.synchronize()
                times[mode] = start.elapsed_time(end) * 1e3 / (k * r)
            if rank == 0:
                print(f"[{tag}] all_reduce {elems * 4} B: graph replay {times['graph']:.1f} us/op, "
                      f"eager {times['eager']:.1f} us/op", flush=True)

    ahead = int(os.environ.get("CCL_GRAPH_AHEAD", "0"))
    if ahead:
        # Replays queued ahead of the GPU with no synchronisation between them.
        for it in range(ahead):
            x.copy_(base + rank + it)
            graph.replay()
        torch.cuda.synchronize()
        last = ahead - 1
        check(f"{ahead} replays ahead", x, world * base + sum(range(world)) + world * last)
        if rank == 0:
            print(f"[{tag}] {ahead} replays queued ahead: done", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    print(f"[{tag}] rank {rank}: {replays} replays, {wrong} wrong elements", flush=True)
    if wrong:
        sys.exit(1)
    if rank == 0:
        print(f"[{tag}] PASS", flush=True)


if __name__ == "__main__":
    main()
