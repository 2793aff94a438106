// Does a copy need SMs? Each copy variant runs while a kernel holds every SM (spinning for
// SPIN_MS): a copy engine finishes it during the spin, a copy done by a driver kernel waits for
// the spin to end. Also each variant's bandwidth alone, and the per-operation cost of the
// stream memory operations when the GPU runs them with the host out of the way (the host
// enqueues N operations behind a gate, opens it, and the GPU's time is taken from events).
// nvcc -O2 -arch=sm_90 -o ce_or_sm ce_or_sm.cu -lcuda && ./ce_or_sm
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(e, &s); \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s ? s : "?"); exit(1); } } while (0)

static const size_t BYTES = 64u << 20;
static const double SPIN_MS = 20.0;

__global__ void spin(unsigned long long ns) {
  unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (t - t0 > ns) break; }
}

static char *src0, *dst0, *dst1, *vmm_alias;  // GPU0 source / destination, GPU1 destination
static cudaStream_t s_spin, s_copy, s_copy1;

typedef void (*copy_fn)(size_t bytes, cudaStream_t s);
static void c_memcpy_local(size_t n, cudaStream_t s) { CK(cudaMemcpyAsync(dst0, src0, n, cudaMemcpyDeviceToDevice, s)); }
static void c_dtod_local(size_t n, cudaStream_t s) { CU(cuMemcpyDtoDAsync((CUdeviceptr)dst0, (CUdeviceptr)src0, n, (CUstream)s)); }
static void c_2d_local(size_t n, cudaStream_t s) {
  CK(cudaMemcpy2DAsync(dst0, 1 << 20, src0, 1 << 20, 1 << 20, n >> 20, cudaMemcpyDeviceToDevice, s));
}
static void c_peer_api_local(size_t n, cudaStream_t s) { CK(cudaMemcpyPeerAsync(dst0, 0, src0, 0, n, s)); }
static void c_push_peer(size_t n, cudaStream_t s) { CK(cudaMemcpyAsync(dst1, src0, n, cudaMemcpyDefault, s)); }
static void c_vmm_alias(size_t n, cudaStream_t s) { CK(cudaMemcpyAsync(vmm_alias, src0, n, cudaMemcpyDefault, s)); }
static void c_local_on_peer_stream(size_t n, cudaStream_t s) { CK(cudaMemcpyAsync(dst0, src0, n, cudaMemcpyDefault, s)); }
static void c_batch_overlap_hint(size_t n, cudaStream_t s) {
  CUdeviceptr d = (CUdeviceptr)dst0, sr = (CUdeviceptr)src0; size_t sz = n, idx = 0, fail = 0;
  CUmemcpyAttributes a; memset(&a, 0, sizeof a);
  a.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM; a.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
  a.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE; a.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CU(cuMemcpyBatchAsync(&d, &sr, &sz, 1, &a, &idx, 1, (CUstream)s));
  (void)fail;
}
static void c_pull_from_peer(size_t n, cudaStream_t s) { CK(cudaMemcpyAsync(dst0, dst1, n, cudaMemcpyDefault, s)); }

static float ms_between(cudaEvent_t a, cudaEvent_t b) { float m; CK(cudaEventElapsedTime(&m, a, b)); return m; }

// `dev`/`s`: the device and stream the copy is queued on.
static void check(const char *name, copy_fn f, int dev, cudaStream_t s) {
  CK(cudaSetDevice(dev));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  f(BYTES, s); CK(cudaStreamSynchronize(s));
  CK(cudaEventRecord(a, s)); for (int i = 0; i < 5; i++) f(BYTES, s); CK(cudaEventRecord(b, s));
  CK(cudaStreamSynchronize(s));
  double alone_gbs = 5.0 * BYTES / (ms_between(a, b) * 1e-3) / 1e9;
  // beside a kernel holding every SM of GPU0 (host clock: the copy may run on the other GPU)
  CK(cudaSetDevice(0));
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  double t0 = now();
  spin<<<sms * 2, 1024, 0, s_spin>>>((unsigned long long)(SPIN_MS * 1e6));
  struct timespec ts = {0, 2000000}; nanosleep(&ts, 0);  // let the spin occupy the SMs
  CK(cudaSetDevice(dev));
  double t1 = now();
  f(BYTES, s); CK(cudaStreamSynchronize(s));
  double done_at = (now() - t0) * 1e3, took = (now() - t1) * 1e3;
  CK(cudaSetDevice(0)); CK(cudaStreamSynchronize(s_spin));
  double spin_ms = (now() - t0) * 1e3;
  printf("%-58s alone %7.1f GB/s | beside a %.0f ms SM-filling spin: took %7.3f ms, done %6.2f ms after spin start -> %s\n",
         name, alone_gbs, SPIN_MS, took, done_at, done_at < spin_ms * 0.8 ? "copy engine" : "WAITED FOR SMs");
}

int main(void) {
  CU(cuInit(0));
  CK(cudaSetDevice(1)); CK(cudaMalloc(&dst1, BYTES)); CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaSetDevice(0)); CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&src0, BYTES)); CK(cudaMalloc(&dst0, BYTES));
  CK(cudaMemset(src0, 1, BYTES));
  CK(cudaStreamCreateWithFlags(&s_spin, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s_copy, cudaStreamNonBlocking));
  CK(cudaSetDevice(1)); CK(cudaStreamCreateWithFlags(&s_copy1, cudaStreamNonBlocking)); CK(cudaSetDevice(0));
  // A second virtual address for GPU0's own physical memory (VMM), so a local copy looks like
  // one between two mappings.
  {
    CUmemAllocationProp p; memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; p.location.id = 0;
    size_t gran; CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t sz = (BYTES + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h; CU(cuMemCreate(&h, sz, &p, 0));
    CUdeviceptr va; CU(cuMemAddressReserve(&va, sz, 0, 0, 0)); CU(cuMemMap(va, sz, 0, h, 0));
    CUmemAccessDesc acc; memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE; acc.location.id = 0; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(va, sz, &acc, 1));
    vmm_alias = (char *)va;
  }
  check("cudaMemcpyAsync D2D, same GPU", c_memcpy_local, 0, s_copy);
  check("cuMemcpyDtoDAsync, same GPU", c_dtod_local, 0, s_copy);
  check("cudaMemcpy2DAsync D2D, same GPU (1 MiB rows)", c_2d_local, 0, s_copy);
  check("cudaMemcpyPeerAsync GPU0->GPU0", c_peer_api_local, 0, s_copy);
  check("cudaMemcpyAsync to a VMM allocation, same GPU", c_vmm_alias, 0, s_copy);
  check("cuMemcpyBatchAsync PREFER_OVERLAP_WITH_COMPUTE, same GPU", c_batch_overlap_hint, 0, s_copy);
  check("GPU0 -> GPU0 copy on GPU1's stream", c_local_on_peer_stream, 1, s_copy1);
  check("cudaMemcpyAsync GPU0 -> GPU1 (push)", c_push_peer, 0, s_copy);
  check("cudaMemcpyAsync GPU1 -> GPU0 on GPU0 (pull)", c_pull_from_peer, 0, s_copy);
  return 0;
}
