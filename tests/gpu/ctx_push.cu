// Can a send posted before its receive push its data later without holding the caller's
// thread, from a second context of the sender's own GPU? (docs/ARCHITECTURE.md, "The
// copy-engine rendezvous and invariant 1": a copy queued later on a stream of the caller's
// context may sit behind the caller's stream wait in a shared hardware queue, as under
// CUDA_DEVICE_MAX_CONNECTIONS=1, and never run; and one GPU pushing and pulling halves both
// directions, tests/gpu/ipc_bench.c.) A second context has hardware queues of its own. No
// library; one process.
//
//   memory    what the second context costs in GPU memory (cuMemGetInfo before and after)
//   late      the caller's stream: a kernel producing the data, "ready" written to pinned
//             memory, a wait for "done", a kernel checking the destination; the host returns
//             at once, sleeps LATE_MS (the receiver's late call), then queues on the second
//             context's stream: wait for "ready", the copy, "done". Run it with and without
//             CUDA_DEVICE_MAX_CONNECTIONS=1: it must end, with the destination exact.
//   bandwidth a 256 MiB copy within GPU 0 from each context, alone, and the second context's
//             beside a kernel of the first filling every SM for 20 ms (a copy within one GPU
//             is a driver kernel: two contexts' kernels take turns, so this shows the slices)
//   push2     with two GPUs: "late" with the destination on GPU 1 (the case of a send: a
//             copy engine's push to a peer); then GPU 0's second context pushes 0 -> 1 while
//             GPU 1 pushes 1 -> 0 (each GPU pushing its own data, as two ranks would), then
//             the same beside a 20 ms kernel of GPU 0's own context (does the copy engine's
//             copy run meanwhile?)
//
// SKIP_LOCAL=1 goes straight to push2 (on one H200 "late" within the GPU hung, 2026-12-01).
// nvcc -O2 -arch=sm_90 -o ctx_push ctx_push.cu -lcuda && ./ctx_push [LATE_MS [same]]
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(e, &s); \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s ? s : "?"); exit(1); } } while (0)

// A hang says where it was (a probe of hazards: queues that wait forever are a finding).
static const char *phase = "start";
static void on_alarm(int sig) {
  (void)sig;
  printf("HANG: no progress for 20 s in %s\n", phase);
  fflush(stdout);
  _exit(3);
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__global__ void fill(unsigned *p, size_t n, unsigned seed, unsigned long long spin_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (unsigned)i * 2654435761u + seed;
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < spin_ns);
}

__global__ void check(const unsigned *p, size_t n, unsigned seed, unsigned *wrong) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != (unsigned)i * 2654435761u + seed) atomicAdd(wrong, 1u);
}

static size_t free_mem(void) { size_t f, t; CK(cudaMemGetInfo(&f, &t)); return f; }

// The second context of device `dev`, the caller's (primary) context current again after.
static CUcontext second_context(int dev) {
  CUcontext prim, c;
  CU(cuCtxGetCurrent(&prim));
  CUdevice d;
  CU(cuDeviceGet(&d, dev));
  CU(cuCtxCreate(&c, NULL, 0, d));
  CU(cuCtxSetCurrent(prim));
  return c;
}

// One copy on `s` of context `ctx`, its time in ms.
static double timed_copy(CUcontext ctx, CUstream s, void *dst, void *src, size_t bytes) {
  CU(cuCtxPushCurrent(ctx));
  double t0 = now();
  CU(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, s));
  CU(cuStreamSynchronize(s));
  double ms = (now() - t0) * 1e3;
  CU(cuCtxPopCurrent(NULL));
  return ms;
}

// The second of two copies (the first warms up).
static double copy_ms(CUcontext ctx, CUstream s, void *dst, void *src, size_t bytes) {
  timed_copy(ctx, s, dst, src, bytes);
  return timed_copy(ctx, s, dst, src, bytes);
}

// One late push: the caller's stream produces `src` (GPU 0), says "ready", waits for "done"
// and checks `dst`; LATE_MS later the host queues on `lane` of context `lctx`: wait for
// "ready", the copy to `dst`, "done".
struct late { cudaStream_t user; unsigned *src, *wrong; size_t n; CUdeviceptr ready, done; int ms; };
static void late_round(const struct late *l, unsigned round, const char *what, CUcontext lctx,
                       CUstream lane, unsigned *dst) {
  phase = "late";
  alarm(20);
  size_t bytes = l->n * 4;
  CK(cudaMemsetAsync(dst, 0, bytes, l->user));
  CK(cudaMemsetAsync(l->wrong, 0, 4, l->user));
  double t0 = now();
  fill<<<264, 512, 0, l->user>>>(l->src, l->n, round, 2000000);
  CU(cuStreamWriteValue32((CUstream)l->user, l->ready, round, 0));
  CU(cuStreamWaitValue32((CUstream)l->user, l->done, round, CU_STREAM_WAIT_VALUE_GEQ));
  check<<<264, 512, 0, l->user>>>(dst, l->n, round, l->wrong);
  double queued = (now() - t0) * 1e3;
  usleep(l->ms * 1000);
  CU(cuCtxPushCurrent(lctx));
  CU(cuStreamWaitValue32(lane, l->ready, round, CU_STREAM_WAIT_VALUE_GEQ));
  CU(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)l->src, bytes, lane));
  CU(cuStreamWriteValue32(lane, l->done, round, 0));
  CU(cuCtxPopCurrent(NULL));
  CK(cudaStreamSynchronize(l->user));
  unsigned w = 0;
  CK(cudaMemcpy(&w, l->wrong, 4, cudaMemcpyDeviceToHost));
  printf("late round %u%s: caller queued in %.3f ms, ended after %.1f ms, %u wrong words\n",
         round, what, queued, (now() - t0) * 1e3, w);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGALRM, on_alarm);
  int late_ms = argc > 1 ? atoi(argv[1]) : 5;
  // "same": the late copy goes on a second stream of the caller's own context instead (the
  // hazard: under CUDA_DEVICE_MAX_CONNECTIONS=1 it waits behind the caller's wait for "done").
  int same = argc > 2 && strcmp(argv[2], "same") == 0;
  const char *cdmc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("CUDA_DEVICE_MAX_CONNECTIONS=%s, late by %d ms\n", cdmc ? cdmc : "(unset)", late_ms);
  CU(cuInit(0));
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  phase = "memory";
  alarm(20);
  size_t before = free_mem();
  CUcontext second = second_context(0);
  size_t after = free_mem();
  printf("memory: the second context took %.1f MiB of GPU 0\n", (before - after) / 1048576.0);

  const size_t bytes = 256u << 20, n = bytes / 4;
  unsigned *src, *dst, *wrong, *flags;
  CK(cudaMalloc(&src, bytes)); CK(cudaMalloc(&dst, bytes)); CK(cudaMalloc(&wrong, 4));
  // Portable: mapped in every context, the second one included.
  CK(cudaHostAlloc(&flags, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  CUdeviceptr ready, done;
  CU(cuMemHostGetDevicePointer(&ready, flags, 0));
  done = ready + 4;
  cudaStream_t user;
  CK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  CUstream lane;
  CU(cuCtxPushCurrent(second));
  CU(cuStreamCreate(&lane, CU_STREAM_NON_BLOCKING));
  CU(cuCtxPopCurrent(NULL));
  CUcontext late_ctx = second;
  CUstream late = lane;
  if (same) {
    CU(cuCtxGetCurrent(&late_ctx));
    CU(cuStreamCreate(&late, CU_STREAM_NON_BLOCKING));
  }

  struct late l = {user, src, wrong, n, ready, done, late_ms};
  // SKIP_LOCAL=1: straight to push2 (a copy within GPU 0 from the second context never ran
  // behind the caller's wait on one H200, 2026-12-01).
  int local = !getenv("SKIP_LOCAL");
  for (unsigned round = 1; local && round <= 3; round++)
    late_round(&l, round, same ? " (a stream of the caller's context)" : "", late_ctx, late, dst);
  if (same) return 0;

  if (local) {
    phase = "bandwidth";
    alarm(20);
    CUcontext prim;
    CU(cuCtxGetCurrent(&prim));
    printf("bandwidth: 256 MiB on GPU 0 from the caller's context %.1f GB/s, from the second %.1f GB/s\n",
           bytes / copy_ms(prim, (CUstream)user, dst, src, bytes) / 1e6,
           bytes / copy_ms(second, lane, dst, src, bytes) / 1e6);
    // Beside a kernel filling every SM for 20 ms (the fill's spin), the second context's copy.
    CK(cudaStreamSynchronize(user));
    double t0 = now();
    fill<<<132 * 4, 512, 0, user>>>(src, 1024, 7, 20000000);
    usleep(1000);
    double copy = timed_copy(second, lane, dst, src, bytes);
    CK(cudaStreamSynchronize(user));
    printf("beside a 20 ms kernel of the caller's context: the second context's 256 MiB copy took "
           "%.2f ms (kernel and copy together %.1f ms)\n", copy, (now() - t0) * 1e3);
  }

  if (ngpu >= 2) {
    // Each GPU pushes its own: 0 -> 1 from GPU 0's second context, 1 -> 0 from GPU 1.
    unsigned *a1, *b1;
    CUcontext p1;
    CK(cudaDeviceEnablePeerAccess(1, 0));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
    CU(cuCtxGetCurrent(&p1));
    CK(cudaMalloc(&a1, bytes)); CK(cudaMalloc(&b1, bytes));
    cudaStream_t s1;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaSetDevice(0));
    CU(cuCtxPushCurrent(second));
    CU(cuCtxEnablePeerAccess(p1, 0));
    CU(cuCtxPopCurrent(NULL));
    // The late push into GPU 1 (a copy engine's, as a send's would be).
    for (unsigned round = 4; round <= 6; round++)
      late_round(&l, round, " (into GPU 1)", second, lane, a1);
    phase = "push2";
    for (int rep = 0; rep < 3; rep++) {
      alarm(20);
      // rep 2: beside a kernel of GPU 0's own context filling every SM for 20 ms.
      if (rep == 2) fill<<<132 * 4, 512, 0, user>>>(src, 1024, 7, 20000000);
      CK(cudaSetDevice(1));
      CK(cudaDeviceSynchronize());
      CK(cudaSetDevice(0));
      if (rep < 2) CK(cudaDeviceSynchronize());
      double p0 = now();
      CU(cuCtxPushCurrent(second));
      CU(cuMemcpyAsync((CUdeviceptr)a1, (CUdeviceptr)dst, bytes, lane));
      CU(cuCtxPopCurrent(NULL));
      CK(cudaSetDevice(1));
      CK(cudaMemcpyAsync(src, b1, bytes, cudaMemcpyDeviceToDevice, s1));
      CK(cudaSetDevice(0));
      CU(cuCtxPushCurrent(second));
      CU(cuStreamSynchronize(lane));
      CU(cuCtxPopCurrent(NULL));
      double one = (now() - p0) * 1e3;
      CK(cudaSetDevice(1));
      CK(cudaStreamSynchronize(s1));
      CK(cudaSetDevice(0));
      double both = (now() - p0) * 1e3;
      printf("push2%s: 0 -> 1 from the second context %.1f GB/s (%.2f ms); both directions "
             "done in %.2f ms\n", rep == 2 ? " beside a 20 ms kernel on GPU 0" : "",
             bytes / one / 1e6, one, both);
      CK(cudaStreamSynchronize(user));
    }
  } else {
    printf("push2: skipped (one GPU)\n");
  }
  return 0;
}
