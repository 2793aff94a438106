"""Copy-engine bandwidth between the two GPUs beside PyTorch's bf16 GEMM loop (the GEMM of
tests/gpu/overlap.py), with no library in between: is the 39% that libccl's 256 MiB
send/receive loses beside that GEMM the copy engines' own loss?

One process, both GPUs. 256 MiB each way per exchange (each GPU pushes to the other on a
side stream), alone, then while both GPUs run 8192^3 bf16 matmuls on their default streams;
also the GEMM's time alone and beside; then the same exchanges with libccl's flags around each
copy; then those while a second thread keeps launching the GEMMs (as overlap.py does), with the
host time of one stream-memory-operation call meanwhile.
python3 tests/gpu/ce_beside_torch_gemm.py
"""
import ctypes
import threading
import time

import torch

N = 256 << 20
dev = [torch.device("cuda:0"), torch.device("cuda:1")]
src = [torch.ones(N, dtype=torch.uint8, device=d) for d in dev]
dst = [torch.empty(N, dtype=torch.uint8, device=d) for d in dev]
a = [torch.randn(8192, 8192, dtype=torch.bfloat16, device=d) for d in dev]
b = [torch.randn(8192, 8192, dtype=torch.bfloat16, device=d) for d in dev]
side = [torch.cuda.Stream(device=d) for d in dev]
# A tensor copy between the GPUs once each way: torch enables peer access for it, so the
# driver copies below go straight over NVLink.
dst[1].copy_(src[0])
dst[0].copy_(src[1])


def sync():
    for d in dev:
        torch.cuda.synchronize(d)


def gemms(n):
    for _ in range(n):
        for g in range(2):
            with torch.cuda.device(g):
                torch.matmul(a[g], b[g])


# The driver's own copy (a tensor copy_ between devices would also order itself after the
# destination's current stream, where the GEMMs queue).
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]


def exchanges(n):
    t0 = time.perf_counter()
    for _ in range(n):
        for g in range(2):
            torch.cuda.set_device(g)
            r = cuda.cuMemcpyAsync(dst[1 - g].data_ptr(), src[g].data_ptr(), N, side[g].cuda_stream)
            assert r == 0, r
    for s in side:
        s.synchronize()
    return n * N / (time.perf_counter() - t0) / 1e9


cuda.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
cuda.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
flags = [torch.zeros(64, dtype=torch.int32, device=d) for d in dev]  # [0]: here, [16]: done
seq = [0]


def flagged_exchanges(n):
    """The same exchange with libccl's flags around each copy: "here" into the peer, wait for
    the peer's, push, "done" into the peer, wait for the peer's (stream memory operations)."""
    t0 = time.perf_counter()
    for _ in range(n):
        seq[0] += 1
        v = seq[0]
        for g in range(2):
            torch.cuda.set_device(g)
            st = side[g].cuda_stream
            assert cuda.cuStreamWriteValue32_v2(st, flags[1 - g].data_ptr(), v, 0) == 0
        for g in range(2):
            torch.cuda.set_device(g)
            st = side[g].cuda_stream
            assert cuda.cuStreamWaitValue32_v2(st, flags[g].data_ptr(), v, 0) == 0
            assert cuda.cuMemcpyAsync(dst[1 - g].data_ptr(), src[g].data_ptr(), N, st) == 0
            assert cuda.cuStreamWriteValue32_v2(st, flags[1 - g].data_ptr() + 64, v, 0) == 0
        for g in range(2):
            torch.cuda.set_device(g)
            assert cuda.cuStreamWaitValue32_v2(side[g].cuda_stream, flags[g].data_ptr() + 64, v, 0) == 0
    for s in side:
        s.synchronize()
    return n * N / (time.perf_counter() - t0) / 1e9


sync()
gemms(10)
sync()
t0 = time.perf_counter()
gemms(50)
sync()
gemm_ms = (time.perf_counter() - t0) / 50 * 1e3
exchanges(3)
sync()
alone = exchanges(20)
sync()
gemms(200)  # ~330 ms of GEMMs queued
time.sleep(0.02)
beside = exchanges(20)
sync()
flagged_exchanges(3)
sync()
f_alone = flagged_exchanges(20)
sync()
gemms(200)
time.sleep(0.02)
f_beside = flagged_exchanges(20)
sync()
# The GEMM's own loss beside exchanges that keep the copy engines busy throughout (no SM work
# of ours at all): how much of a GEMM's slowdown beside libccl's transfers is the copies' memory
# and link traffic rather than anything the library does.
t0 = time.perf_counter()
gemms(200)
sync()
g_alone = (time.perf_counter() - t0) / 200 * 1e3
t0 = time.perf_counter()
gemms(200)
while not all(torch.cuda.current_stream(d).query() for d in dev):
    exchanges(2)
sync()
g_beside = (time.perf_counter() - t0) / 200 * 1e3
print(f"GEMM alone {g_alone:.3f} ms, beside back-to-back 256 MiB exchanges {g_beside:.3f} ms "
      f"({100 * (g_beside / g_alone - 1):.1f}% slower)")
t0 = time.perf_counter()
gemms(200)
while not all(torch.cuda.current_stream(d).query() for d in dev):
    flagged_exchanges(2)
sync()
g_beside_f = (time.perf_counter() - t0) / 200 * 1e3
print(f"GEMM beside back-to-back flagged exchanges {g_beside_f:.3f} ms ({100 * (g_beside_f / g_alone - 1):.1f}% slower)")
print(f"with flags: alone {f_alone:.1f} GB/s per direction, beside the GEMM loop {f_beside:.1f} "
      f"({100 * (1 - f_beside / f_alone):.0f}% lost)")
# The GEMMs launched by a thread of their own that keeps the GEMM queue full (as
# tests/gpu/overlap.py does), while this thread queues the flagged exchanges: if the driver
# calls of the exchanges wait behind the GEMM thread's blocked launches, the exchange rate
# falls here although the copy engines are free.
stop = threading.Event()


def gemm_thread():
    while not stop.is_set():
        gemms(20)


th = threading.Thread(target=gemm_thread)
th.start()
time.sleep(0.2)  # let the GEMM queues fill
t_beside = flagged_exchanges(40)
host_calls = []
for _ in range(200):
    t = time.perf_counter()
    torch.cuda.set_device(0)
    assert cuda.cuStreamWriteValue32_v2(side[0].cuda_stream, flags[1].data_ptr() + 128, 1, 0) == 0
    host_calls.append((time.perf_counter() - t) * 1e6)
stop.set()
th.join()
sync()
host_calls.sort()
print(f"with flags, GEMMs launched by a second thread: {t_beside:.1f} GB/s per direction; one "
      f"cuStreamWriteValue32 call meanwhile: median {host_calls[100]:.1f} us, 99th "
      f"{host_calls[198]:.1f} us, max {host_calls[-1]:.1f} us")
print(f"GEMM alone {gemm_ms:.3f} ms; exchange of 256 MiB each way: alone {alone:.1f} GB/s per direction, "
      f"beside the GEMM loop {beside:.1f} ({100 * (1 - beside / alone):.0f}% lost)")
