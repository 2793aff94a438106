"""How much work fits on one CUDA stream before queueing blocks the host (issue 5, 2026-11-23:
libccl's host sat ~0.6 ms in each send/receive call's driver calls once a lane held a few 256
MiB copies, so a training loop that queues compute and communication from one thread can run
only that far ahead of the GPU).

A stream of GPU 0 is held by cuStreamWaitValue32 on a flag nobody sets yet; then the same kind
of operation is queued on it repeatedly and each call timed. The first call that takes over 0.5
s blocked on a full queue; a helper thread releases the flag after 2 s. Kinds: 256 MiB and 8 MiB
copies to GPU 1, 8-byte copies to GPU 1, and stream memory writes.
python3 tests/gpu/queue_depth_probe.py
"""
import ctypes
import threading
import time

import torch

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
cuda.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
cuda.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]

N = 256 << 20
src = torch.ones(N, dtype=torch.uint8, device="cuda:0")
dst = torch.empty(N, dtype=torch.uint8, device="cuda:1")
dst.copy_(src)  # peer access on
flag = torch.zeros(16, dtype=torch.int32, device="cuda:0")
scratch = torch.zeros(16, dtype=torch.int32, device="cuda:0")
torch.cuda.set_device(0)
GEQ = 0  # CU_STREAM_WAIT_VALUE_GEQ


def probe(label, op, limit=20000):
    s = torch.cuda.Stream(device="cuda:0")
    other = torch.cuda.Stream(device="cuda:0")
    flag.zero_()
    torch.cuda.synchronize(0)
    v = [0]

    def release():
        time.sleep(2.0)
        torch.cuda.set_device(0)
        v[0] += 1
        assert cuda.cuStreamWriteValue32_v2(other.cuda_stream, flag.data_ptr(), 1, 0) == 0

    assert cuda.cuStreamWaitValue32_v2(s.cuda_stream, flag.data_ptr(), 1, GEQ) == 0
    th = threading.Thread(target=release)
    th.start()
    queued, blocked_at, times = 0, None, []
    t_start = time.perf_counter()
    for i in range(limit):
        t = time.perf_counter()
        op(s.cuda_stream, i)
        dt = time.perf_counter() - t
        times.append(dt * 1e6)
        queued += 1
        if dt > 0.5:
            blocked_at = i
            break
        if time.perf_counter() - t_start > 1.8:
            break
    th.join()
    s.synchronize()
    slow = [(i, round(t)) for i, t in enumerate(times) if t > 1000]
    print(f"{label:28s} host us per call: first {[round(t, 1) for t in times[:4]]}, median "
          f"{sorted(times)[len(times) // 2]:.1f}; calls over 1 ms: {len(slow)} (first: {slow[:6]})")
    if blocked_at is None:
        print(f"{label:28s} {queued} queued in {time.perf_counter() - t_start:.2f} s without blocking")
    else:
        print(f"{label:28s} call {blocked_at + 1} blocked until the stream was released ({blocked_at} fit)")


probe("256 MiB copy to GPU 1", lambda st, i: cuda.cuMemcpyAsync(dst.data_ptr(), src.data_ptr(), N, st), 400)
probe("8 MiB copy to GPU 1", lambda st, i: cuda.cuMemcpyAsync(dst.data_ptr(), src.data_ptr(), 8 << 20, st), 4000)
probe("8 B copy to GPU 1", lambda st, i: cuda.cuMemcpyAsync(dst.data_ptr(), src.data_ptr(), 8, st))
probe("cuStreamWriteValue32", lambda st, i: cuda.cuStreamWriteValue32_v2(st, scratch.data_ptr(), i, 0))
