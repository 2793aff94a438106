"""Do a thread's driver calls wait while another thread of the process is blocked launching
onto a full stream? (Issue 5: libccl's send/receive beside overlap.py's GEMM thread loses 38%
while the copy engines alone lose 1%; the GEMM thread's cudaMemsetAsync / launches block ~1.4
ms each once its queue is full, measured 2026-11-23 with overlap.py.)

One process. A GEMM thread runs 8192^3 bf16 matmuls on GPU 0, either free-running (its queue
fills and every launch blocks until a GEMM ends, as in overlap.py) or throttled (at most
THROTTLE GEMMs queued, so its launches never block). Meanwhile this thread times single driver
calls on a side stream of GPU 0 (cuStreamWriteValue32, cuStreamWaitValue32 on a satisfied
flag, an 8 B cuMemcpyAsync to GPU 1, cuEventRecord), and then queues flagged 256 MiB
exchanges between the GPUs (as ce_beside_torch_gemm.py) reporting the host time to queue them
against the time until they are done.
python3 tests/gpu/launch_block_probe.py
"""
import ctypes
import threading
import time

import torch

N = 256 << 20
THROTTLE = 4
dev = [torch.device("cuda:0"), torch.device("cuda:1")]
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev[0])
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev[0])
gemm_stream = torch.cuda.Stream(device=dev[0])
side = [torch.cuda.Stream(device=d) for d in dev]
src = [torch.ones(N, dtype=torch.uint8, device=d) for d in dev]
dst = [torch.empty(N, dtype=torch.uint8, device=d) for d in dev]
dst[1].copy_(src[0])
dst[0].copy_(src[1])
small = [torch.zeros(64, dtype=torch.int32, device=d) for d in dev]
flags = [torch.zeros(64, dtype=torch.int32, device=d) for d in dev]

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
cuda.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
cuda.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
cuda.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
cuda.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
ev = ctypes.c_void_p()
torch.cuda.set_device(0)
assert cuda.cuEventCreate(ctypes.byref(ev), 2) == 0  # CU_EVENT_DISABLE_TIMING
seq = [0]


def gemm_loop(stop, throttled, count):
    torch.cuda.set_device(0)
    pending = []
    with torch.cuda.stream(gemm_stream):
        while not stop.is_set():
            torch.matmul(a, b)
            count[0] += 1
            if throttled:
                e = torch.cuda.Event()
                e.record()
                pending.append(e)
                while len(pending) > THROTTLE:
                    while not pending[0].query():
                        time.sleep(50e-6)
                    pending.pop(0)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def time_calls(label, fn, n=2000):
    torch.cuda.set_device(0)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e6)
        time.sleep(20e-6)  # spread the calls over many GEMMs
    torch.cuda.synchronize(0)
    return (f"  {label:34s} median {pct(ts, 50):7.1f} us  90th {pct(ts, 90):7.1f}  99th {pct(ts, 99):8.1f}  "
            f"max {max(ts):8.1f}  over 100 us: {sum(1 for t in ts if t > 100)} of {n}")


def flagged_exchanges(n):
    """libccl's flag protocol around each 256 MiB push, both GPUs, from this one thread."""
    t0 = time.perf_counter()
    for _ in range(n):
        seq[0] += 1
        v = seq[0]
        for g in range(2):
            torch.cuda.set_device(g)
            assert cuda.cuStreamWriteValue32_v2(side[g].cuda_stream, flags[1 - g].data_ptr(), v, 0) == 0
        for g in range(2):
            torch.cuda.set_device(g)
            st = side[g].cuda_stream
            assert cuda.cuStreamWaitValue32_v2(st, flags[g].data_ptr(), v, 0) == 0
            assert cuda.cuMemcpyAsync(dst[1 - g].data_ptr(), src[g].data_ptr(), N, st) == 0
            assert cuda.cuStreamWriteValue32_v2(st, flags[1 - g].data_ptr() + 64, v, 0) == 0
        for g in range(2):
            torch.cuda.set_device(g)
            assert cuda.cuStreamWaitValue32_v2(side[g].cuda_stream, flags[g].data_ptr() + 64, v, 0) == 0
    t_issue = time.perf_counter() - t0
    for s in side:
        s.synchronize()
    t_all = time.perf_counter() - t0
    return f"  {n} flagged exchanges: queued in {t_issue * 1e3:.2f} ms, done in {t_all * 1e3:.2f} ms: {n * N / t_all / 1e9:.1f} GB/s per direction"


def calls():
    st = side[0].cuda_stream
    out = []
    out.append(time_calls("cuStreamWriteValue32", lambda: cuda.cuStreamWriteValue32_v2(st, small[0].data_ptr(), 1, 0)))
    out.append(time_calls("cuStreamWaitValue32 (satisfied)", lambda: cuda.cuStreamWaitValue32_v2(st, small[0].data_ptr(), 0, 0)))
    out.append(time_calls("cuMemcpyAsync 8 B to GPU 1", lambda: cuda.cuMemcpyAsync(small[1].data_ptr(), small[0].data_ptr(), 8, st)))
    out.append(time_calls("cuEventRecord", lambda: cuda.cuEventRecord(ev, st)))
    return out


torch.cuda.synchronize(0)
print("alone:")
for line in calls():
    print(line)
flagged_exchanges(3)
print(flagged_exchanges(40))
for throttled in (False, True):
    stop, count = threading.Event(), [0]
    th = threading.Thread(target=gemm_loop, args=(stop, throttled, count))
    th.start()
    time.sleep(0.3)  # let a free-running GEMM queue fill
    c0, t0 = count[0], time.perf_counter()
    lines = calls()
    lines.append(flagged_exchanges(40))
    rate = (count[0] - c0) / (time.perf_counter() - t0)
    stop.set()
    th.join()
    torch.cuda.synchronize(0)
    print(f"beside a GEMM thread, {'throttled to ' + str(THROTTLE) + ' queued' if throttled else 'free-running'} "
          f"({rate:.0f} GEMMs/s launched):")
    for line in lines:
        print(line)
