// The floor under issue 5's 8-byte zero-SM latency: what each building block of a copy-engine
// transfer costs per operation when queued back to back, on two GPUs in one process, beside an
// empty kernel and a kernel that does a whole 8-byte exchange (what NCCL's LL path amounts to).
// Each figure is (enqueue N operations + synchronize) / N, as ccl-perf times an operation.
// Build and run on the device machine: nvcc -O2 -o zsm_prims zsm_prims.cu -lcuda && ./zsm_prims
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(e, &s); \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s ? s : "?"); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static cudaStream_t st[2];
static char *buf[2];          // 4 KiB of data per GPU
static unsigned *flag[2];     // flags per GPU: [0] "here", [1] "done"
static unsigned seq = 0;

__global__ void empty_kernel(void) {}

// One 8-byte exchange by a single thread per GPU, as a low-latency kernel does it: write the
// value with a flag into the peer's memory, spin on the own flag, copy the value out.
__global__ void ll_exchange(volatile unsigned long long *peer_slot, volatile unsigned long long *own_slot,
                            const unsigned long long *src, unsigned long long *dst, unsigned seq) {
  unsigned long long v = *src;
  peer_slot[0] = v; __threadfence_system(); peer_slot[1] = seq;
  while (own_slot[1] < seq) {}
  *dst = own_slot[0];
}

static void sync_all(void) { for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaStreamSynchronize(st[d])); } }

typedef void (*op_fn)(void);

static void bench(const char *name, op_fn f) {
  for (int i = 0; i < 50; i++) f();
  sync_all();
  int n = 2000; double t0 = now();
  for (int i = 0; i < n; i++) f();
  sync_all();
  printf("%-58s %8.2f us/op\n", name, (now() - t0) / n * 1e6);
}

static void memcpy_peer_push(void) { CK(cudaMemcpyAsync(buf[1], buf[0] + 64, 8, cudaMemcpyDefault, st[0])); }
static void memcpy_peer_pull(void) { CK(cudaMemcpyAsync(buf[1], buf[0] + 64, 8, cudaMemcpyDefault, st[1])); }
static void memcpy_local(void) { CK(cudaMemcpyAsync(buf[0], buf[0] + 64, 8, cudaMemcpyDefault, st[0])); }
static void memcpy_local_d2d_api(void) { CU(cuMemcpyDtoDAsync((CUdeviceptr)buf[0], (CUdeviceptr)(buf[0] + 64), 8, (CUstream)st[0])); }
static void write_local(void) { CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[0][0], ++seq, 0)); }
static void write_peer(void) { CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[1][0], ++seq, 0)); }
static void kernel_empty(void) { CK(cudaSetDevice(0)); empty_kernel<<<1, 1, 0, st[0]>>>(); }

// Flag ping-pong: GPU0 writes "here" into GPU1, GPU1 waits and writes "done" into GPU0, GPU0
// waits. One round trip of stream memory operations.
static void pingpong(void) {
  ++seq;
  CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[1][0], seq, 0));
  CU(cuStreamWaitValue32((CUstream)st[1], (CUdeviceptr)&flag[1][0], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CU(cuStreamWriteValue32((CUstream)st[1], (CUdeviceptr)&flag[0][1], seq, 0));
  CU(cuStreamWaitValue32((CUstream)st[0], (CUdeviceptr)&flag[0][1], seq, CU_STREAM_WAIT_VALUE_GEQ));
}

// libccl's one-way transfer, receiver first (it flags "here"), sender second (waits, pushes,
// flags "done"), the receiver waiting for "done".
static void transfer_push(void) {
  ++seq;
  CU(cuStreamWriteValue32((CUstream)st[1], (CUdeviceptr)&flag[0][0], seq, 0));
  CU(cuStreamWaitValue32((CUstream)st[1], (CUdeviceptr)&flag[1][1], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CU(cuStreamWaitValue32((CUstream)st[0], (CUdeviceptr)&flag[0][0], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cudaMemcpyAsync(buf[1], buf[0] + 64, 8, cudaMemcpyDefault, st[0]));
  CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[1][1], seq, 0));
}

// The same with the receiver second: it waits for the sender's "here" and pulls.
static void transfer_pull(void) {
  ++seq;
  CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[1][0], seq, 0));
  CU(cuStreamWaitValue32((CUstream)st[0], (CUdeviceptr)&flag[0][1], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CU(cuStreamWaitValue32((CUstream)st[1], (CUdeviceptr)&flag[1][0], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cudaMemcpyAsync(buf[1], buf[0] + 64, 8, cudaMemcpyDefault, st[1]));
  CU(cuStreamWriteValue32((CUstream)st[1], (CUdeviceptr)&flag[0][1], seq, 0));
}

// An exchange (each sends 8 B to the other) as libccl's second poster queues it: both copies on
// its stream, one after the other.
static void exchange_one_side(void) {
  ++seq;
  CU(cuStreamWriteValue32((CUstream)st[1], (CUdeviceptr)&flag[0][0], seq, 0));
  CU(cuStreamWaitValue32((CUstream)st[1], (CUdeviceptr)&flag[1][1], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CU(cuStreamWaitValue32((CUstream)st[0], (CUdeviceptr)&flag[0][0], seq, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cudaMemcpyAsync(buf[1], buf[0] + 64, 8, cudaMemcpyDefault, st[0]));
  CK(cudaMemcpyAsync(buf[0] + 128, buf[1] + 64, 8, cudaMemcpyDefault, st[0]));
  CU(cuStreamWriteValue32((CUstream)st[0], (CUdeviceptr)&flag[1][1], seq, 0));
}

// The exchange with each side pushing its own direction: both flag "here", both wait for the
// other's "here", push, flag "done", wait for the other's "done".
static void exchange_both_push(void) {
  ++seq;
  for (int d = 0; d < 2; d++) CU(cuStreamWriteValue32((CUstream)st[d], (CUdeviceptr)&flag[1 - d][0], seq, 0));
  for (int d = 0; d < 2; d++) {
    CU(cuStreamWaitValue32((CUstream)st[d], (CUdeviceptr)&flag[d][0], seq, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cudaMemcpyAsync(buf[1 - d] + 128, buf[d] + 64, 8, cudaMemcpyDefault, st[d]));
    CU(cuStreamWriteValue32((CUstream)st[d], (CUdeviceptr)&flag[1 - d][1], seq, 0));
  }
  for (int d = 0; d < 2; d++) CU(cuStreamWaitValue32((CUstream)st[d], (CUdeviceptr)&flag[d][1], seq, CU_STREAM_WAIT_VALUE_GEQ));
}

// An all-to-all's shape on 2 GPUs: transfer_push plus each side's own-block local copy.
static void alltoall_shape(void) {
  transfer_push();
  CK(cudaMemcpyAsync(buf[0] + 256, buf[0] + 64, 8, cudaMemcpyDefault, st[0]));
  CK(cudaMemcpyAsync(buf[1] + 256, buf[1] + 64, 8, cudaMemcpyDefault, st[1]));
}

static void ll_kernels(void) {
  ++seq;
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    ll_exchange<<<1, 1, 0, st[d]>>>((unsigned long long *)(buf[1 - d] + 1024), (unsigned long long *)(buf[d] + 1024),
                                    (const unsigned long long *)(buf[d] + 64), (unsigned long long *)(buf[d] + 128), seq);
  }
}

int main(void) {
  CU(cuInit(0));
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    CK(cudaMalloc(&buf[d], 4096));
    CK(cudaMemset(buf[d], 0, 4096));
    CK(cudaMalloc(&flag[d], 256));
    CK(cudaMemset(flag[d], 0, 256));
  }
  CK(cudaSetDevice(0));
  bench("memcpy 8 B peer push (GPU0 stream)", memcpy_peer_push);
  bench("memcpy 8 B peer pull (GPU1 stream)", memcpy_peer_pull);
  bench("memcpy 8 B local (cudaMemcpyAsync)", memcpy_local);
  bench("memcpy 8 B local (cuMemcpyDtoDAsync)", memcpy_local_d2d_api);
  bench("stream write value, local", write_local);
  bench("stream write value, peer", write_peer);
  bench("empty kernel", kernel_empty);
  bench("flag ping-pong (write, wait, write, wait)", pingpong);
  bench("one-way transfer, sender pushes", transfer_push);
  bench("one-way transfer, receiver pulls", transfer_pull);
  bench("exchange, second poster copies both", exchange_one_side);
  bench("exchange, each pushes its own", exchange_both_push);
  bench("all-to-all shape (push + own-block copies)", alltoall_shape);
  bench("exchange as one LL kernel per GPU", ll_kernels);
  return 0;
}
