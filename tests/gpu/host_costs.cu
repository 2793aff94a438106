// Host time of the driver calls a zero-SM 8-byte operation makes (issue 5's latency is
// host-bound: one rank's main thread is 100% busy at 8 B), each alone and batched. The stream
// is held by a wait on a host flag while N calls are queued, so only the calls' host time is
// counted (no back-pressure from the GPU), then released.
// BYTES sets the copies' size (default 8); with one GPU the "peer" buffer is on that GPU too.
// nvcc -O2 -arch=sm_90 -o host_costs host_costs.cu -lcuda && BYTES=16777216 ./host_costs
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(e, &s); \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s ? s : "?"); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static CUstream st;
static char *buf0, *buf1;
static unsigned *flags, *gate_host;
static CUdeviceptr gate_dev;
static unsigned seq = 0;
static size_t bytes = 8;
static CUevent ev;

typedef void (*fn)(void);

static void bench(const char *name, fn f, int calls_per_op) {
  double best = 1e9;
  for (int rep = 0; rep < 7; rep++) {
    *(volatile unsigned *)gate_host = 0;
    CU(cuStreamWaitValue32(st, gate_dev, 1, CU_STREAM_WAIT_VALUE_GEQ));
    const int n = 200;
    double t0 = now();
    for (int i = 0; i < n; i++) f();
    double t = (now() - t0) / n * 1e6;
    *(volatile unsigned *)gate_host = 1;
    CU(cuStreamSynchronize(st));
    if (t < best) best = t;
  }
  printf("%-60s %6.2f us per op (%d call%s)\n", name, best, calls_per_op, calls_per_op == 1 ? "" : "s");
}

static void write1(void) { CU(cuStreamWriteValue32(st, (CUdeviceptr)&flags[0], ++seq, 0)); }
static void wait1(void) { CU(cuStreamWaitValue32(st, (CUdeviceptr)&flags[1], 0, CU_STREAM_WAIT_VALUE_GEQ)); }
static void write_wait(void) { write1(); wait1(); }
static void batch(int k) {
  CUstreamBatchMemOpParams p[4]; memset(p, 0, sizeof p);
  for (int i = 0; i < k; i++) {
    if (i % 2 == 0) { p[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32; p[i].writeValue.address = (CUdeviceptr)&flags[0]; p[i].writeValue.value = ++seq; }
    else { p[i].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32; p[i].waitValue.address = (CUdeviceptr)&flags[1]; p[i].waitValue.value = 0; p[i].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ; }
  }
  CU(cuStreamBatchMemOp(st, k, p, 0));
}
static void batch2(void) { batch(2); }
static void batch4(void) { batch(4); }
static void copy_peer(void) { CU(cuMemcpyAsync((CUdeviceptr)buf1, (CUdeviceptr)buf0, bytes, st)); }
static void copy_local(void) { CU(cuMemcpyAsync((CUdeviceptr)buf0 + bytes, (CUdeviceptr)buf0, bytes, st)); }
static void copy_dtod_peer(void) { CU(cuMemcpyDtoDAsync((CUdeviceptr)buf1, (CUdeviceptr)buf0, bytes, st)); }
static void copy_batch(int k) {
  CUdeviceptr d[2] = {(CUdeviceptr)buf1, (CUdeviceptr)buf0 + bytes}, s[2] = {(CUdeviceptr)buf0, (CUdeviceptr)buf0};
  size_t sz[2] = {bytes, bytes}, idx = 0;
  CUmemcpyAttributes a; memset(&a, 0, sizeof a); a.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CU(cuMemcpyBatchAsync(d, s, sz, k, &a, &idx, 1, st));
}
static void copy_batch1(void) { copy_batch(1); }
static void copy_batch2(void) { copy_batch(2); }
static void peer_and_local(void) { copy_peer(); copy_local(); }
static void event_record(void) { CU(cuEventRecord(ev, st)); }
static void event_wait(void) { CU(cuStreamWaitEvent(st, ev, 0)); }
// libccl's second side of one transfer plus a first side's flag and wait, as queued now.
static void zsm_exchange_now(void) { write1(); wait1(); copy_peer(); write1(); wait1(); }
static void zsm_exchange_batched(void) { batch2(); copy_peer(); batch2(); }
static void zsm_alltoall_now(void) { write1(); wait1(); copy_peer(); write1(); copy_local(); wait1(); }
static void zsm_alltoall_batched(void) { batch2(); copy_batch2(); batch2(); }

int main(void) {
  CU(cuInit(0));
  if (getenv("BYTES")) bytes = strtoull(getenv("BYTES"), 0, 0);
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  if (ngpu > 1) {
    CK(cudaSetDevice(1)); CK(cudaMalloc(&buf1, bytes)); CK(cudaDeviceEnablePeerAccess(0, 0));
    CK(cudaSetDevice(0)); CK(cudaDeviceEnablePeerAccess(1, 0));
  } else {
    CK(cudaSetDevice(0)); CK(cudaMalloc(&buf1, bytes));
  }
  printf("%d GPU(s), copies of %zu bytes\n", ngpu, bytes);
  CK(cudaMalloc(&buf0, 2 * bytes)); CK(cudaMalloc(&flags, 256)); CK(cudaMemset(flags, 0, 256));
  CK(cudaHostAlloc(&gate_host, 64, cudaHostAllocMapped));
  CU(cuMemHostGetDevicePointer(&gate_dev, gate_host, 0));
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  bench("cuStreamWriteValue32", write1, 1);
  bench("cuStreamWaitValue32 (already met)", wait1, 1);
  bench("write + wait, two calls", write_wait, 2);
  bench("cuStreamBatchMemOp of write + wait", batch2, 1);
  bench("cuStreamBatchMemOp of 4", batch4, 1);
  bench("cuMemcpyAsync 8 B peer", copy_peer, 1);
  bench("cuMemcpyDtoDAsync 8 B peer", copy_dtod_peer, 1);
  bench("cuMemcpyAsync 8 B same GPU (driver kernel)", copy_local, 1);
  bench("cuMemcpyAsync peer + same GPU, two calls", peer_and_local, 2);
  bench("cuMemcpyBatchAsync of 1 (peer)", copy_batch1, 1);
  bench("cuMemcpyBatchAsync of 2 (peer + same GPU)", copy_batch2, 1);
  bench("cuEventRecord", event_record, 1);
  bench("cuStreamWaitEvent", event_wait, 1);
  bench("send/recv side as queued now (5 calls)", zsm_exchange_now, 5);
  bench("send/recv side, memops batched (3 calls)", zsm_exchange_batched, 3);
  bench("all-to-all side as queued now (6 calls)", zsm_alltoall_now, 6);
  bench("all-to-all side batched (3 calls)", zsm_alltoall_batched, 3);
  return 0;
}
