"""PyTorch's in-process recovery on libccl: one rank of three dies during an all-reduce loop;
the survivors' process group fails the pending work (PyTorch's watchdog sees
ncclCommGetAsyncError and aborts the communicator, TORCH_NCCL_ASYNC_ERROR_HANDLING=2), the
survivors check that their CUDA stream drains, destroy the group, make a new one of two in the
same processes and run exact all-reduces. Prints one PASS / FAIL line per survivor with the
seconds each step took.

    TORCH_NCCL_ASYNC_ERROR_HANDLING=2 LD_PRELOAD=.dev/new/libnccl.so.2 \\
      python3 -m torch.distributed.run --nproc-per-node 3 tests/gpu/torch_abort.py

CCL_TORCH_ONE_GPU=1 puts every rank on GPU 0 (libccl allows it; NVIDIA's NCCL does not).
"""
import faulthandler
import os
import time

import torch
import torch.distributed as dist


def drained(stream, secs):
    """Seconds until everything queued on `stream` so far has run, or None."""
    ev = torch.cuda.Event()
    ev.record(stream)
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        if ev.query():
            return time.monotonic() - t0
        time.sleep(0.001)
    return None


def main():
    # A hang shows where it is: every thread's stack, then the process ends.
    faulthandler.dump_traceback_later(int(os.environ.get("CCL_TORCH_ABORT_DEADLINE_S", "60")), exit=True)
    rank = int(os.environ["RANK"])
    local = 0 if os.environ.get("CCL_TORCH_ONE_GPU") == "1" else int(os.environ["LOCAL_RANK"])
    n_dev = torch.cuda.device_count()
    torch.cuda.set_device(local % n_dev)
    dev = torch.device("cuda", local % n_dev)
    dist.init_process_group("nccl", device_id=dev)
    x = torch.ones(1024, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    if rank == 2:
        os._exit(0)  # dies: no destroy, no goodbye
    big = torch.ones(16 << 20, device=dev)
    t0 = time.monotonic()
    failed = None
    print(f"rank {rank}: queued the all-reduce the dead rank will never join", flush=True)
    try:
        work = dist.all_reduce(big, async_op=True)
        work.wait(timeout=__import__("datetime").timedelta(seconds=30))
        torch.cuda.synchronize()
    except Exception as e:  # the pending work fails once the communicator is aborted
        failed = type(e).__name__
    detect = time.monotonic() - t0
    print(f"rank {rank}: pending work ended ({failed}) after {detect:.2f} s", flush=True)
    stream_s = drained(torch.cuda.current_stream(), 5)
    print(f"rank {rank}: stream drained: {stream_s}", flush=True)
    t1 = time.monotonic()
    dist.destroy_process_group()
    destroy_s = time.monotonic() - t1
    print(f"rank {rank}: old group destroyed in {destroy_s:.3f} s", flush=True)
    # A store of the survivors' own (torchrun's agent store still counts three workers).
    port = int(os.environ["MASTER_PORT"]) + 17
    store = dist.TCPStore(os.environ["MASTER_ADDR"], port, 2, rank == 0)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=2, device_id=dev)
    ok = True
    for i in range(5):
        y = torch.full((4 << 20,), float(rank + 1 + i), device=dev)
        dist.all_reduce(y)
        torch.cuda.synchronize()
        ok &= bool((y == float(2 * i + 3)).all())
    dist.destroy_process_group()
    good = failed is not None and stream_s is not None and ok
    print(
        f"{'PASS' if good else 'FAIL'} torch_abort rank {rank}: pending all-reduce failed with "
        f"{failed} after {detect:.2f} s, stream drained "
        f"{'in %.3f s' % stream_s if stream_s is not None else 'no'}, old group destroyed in "
        f"{destroy_s:.3f} s, new group of 2 exact: {ok}",
        flush=True,
    )
    os._exit(0 if good else 1)


if __name__ == "__main__":
    main()
