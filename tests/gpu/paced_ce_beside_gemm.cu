// Does pacing copy-engine traffic lower what it costs a power-capped GEMM? (Issue 5,
// 2026-11-23: beside libccl's 256 MiB send/receive loop the bf16 GEMM of tests/gpu/overlap.py runs
// 7-8% slower, and its SM clock drops from ~1500 to ~1410 MHz at the 700 W cap: the copies'
// power comes out of the GEMM's clock.) Both GPUs of one process run 8192^3 bf16 GEMMs
// (cuBLAS) on a stream each, fed by a thread each, while a thread per GPU pushes 64 MiB chunks
// to the other GPU on a copy stream, each chunk followed by a host function that sleeps so the
// engine is busy `duty` of the time. Prints the GEMM's time per call and the copies' GB/s per
// direction for each duty, in an order that repeats "alone" to show the drift.
// nvcc -O2 -arch=sm_90 -o /tmp/paced tests/gpu/paced_ce_beside_gemm.cu -lcublas && /tmp/paced
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <thread>
#include <vector>

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static const int N = 8192;
static const size_t CHUNK = 64ull << 20, TOTAL = 256ull << 20;
static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

struct Gpu {
  cublasHandle_t h;
  cudaStream_t gs, cs;
  void *a, *b, *c, *src, *dst;
  cudaEvent_t g0, g1;
};
static Gpu gpu[2];

struct Pace {
  double sleep_us;
};
static void CUDART_CB nap(void* p) {
  double us = static_cast<Pace*>(p)->sleep_us;
  if (us > 0) {
    double t = now_us();
    while (now_us() - t < us) {
    }
  }
}

// Runs `iters` GEMMs per GPU with copies at `duty` (<0: no copies); returns GEMM ms per call
// (mean of both GPUs) and the copies' GB/s per direction.
static void phase(const char* label, int iters, double duty) {
  std::atomic<bool> gemms_done{false};
  std::vector<std::thread> th;
  for (int g = 0; g < 2; g++)
    th.emplace_back([g, iters] {
      CK(cudaSetDevice(g));
      Gpu& x = gpu[g];
      float one = 1.f, zero = 0.f;
      CK(cudaEventRecord(x.g0, x.gs));
      for (int i = 0; i < iters; i++)
        cublasGemmEx(x.h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, x.a, CUDA_R_16BF, N, x.b,
                     CUDA_R_16BF, N, &zero, x.c, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      CK(cudaEventRecord(x.g1, x.gs));
    });
  double copy_bytes[2] = {0, 0}, copy_us[2] = {0, 0};
  // 64 MiB at ~390 GB/s is ~172 us; the nap makes the engine busy `duty` of the time.
  Pace pace{duty > 0 && duty < 1 ? 172.0 * (1.0 / duty - 1.0) : 0.0};
  if (duty >= 0)
    for (int g = 0; g < 2; g++)
      th.emplace_back([g, duty, &pace, &gemms_done, &copy_bytes, &copy_us] {
        CK(cudaSetDevice(g));
        Gpu& x = gpu[g];
        usleep(20000);  // the GEMM queue first
        double t0 = now_us();
        size_t moved = 0;
        while (!gemms_done.load()) {
          for (size_t off = 0; off < TOTAL; off += CHUNK) {
            CK(cudaMemcpyAsync((char*)gpu[1 - g].dst + off, (char*)x.src + off, CHUNK,
                               cudaMemcpyDeviceToDevice, x.cs));
            if (duty < 1) CK(cudaLaunchHostFunc(x.cs, nap, &pace));
          }
          CK(cudaStreamSynchronize(x.cs));
          moved += TOTAL;
        }
        copy_bytes[g] = moved;
        copy_us[g] = now_us() - t0;
      });
  // The GEMM threads end once queued; the copies run until both GEMM streams drain.
  th[0].join();
  th[1].join();
  for (int g = 0; g < 2; g++) CK(cudaEventSynchronize(gpu[g].g1));
  gemms_done = true;
  for (size_t i = 2; i < th.size(); i++) th[i].join();
  float ms[2];
  for (int g = 0; g < 2; g++) CK(cudaEventElapsedTime(&ms[g], gpu[g].g0, gpu[g].g1));
  double gemm_ms = (ms[0] + ms[1]) / 2 / iters;
  double gbs = duty >= 0 ? (copy_bytes[0] / copy_us[0] + copy_bytes[1] / copy_us[1]) / 2 / 1e3 : 0;
  printf("%-22s GEMM %.4f ms per call (gpu0 %.4f gpu1 %.4f)  copies %.1f GB/s per direction\n",
         label, gemm_ms, ms[0] / iters, ms[1] / iters, gbs);
  fflush(stdout);
}

int main() {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    Gpu& x = gpu[g];
    cublasCreate(&x.h);
    CK(cudaStreamCreateWithFlags(&x.gs, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&x.cs, cudaStreamNonBlocking));
    cublasSetStream(x.h, x.gs);
    size_t m = (size_t)N * N * 2;
    CK(cudaMalloc(&x.a, m));
    CK(cudaMalloc(&x.b, m));
    CK(cudaMalloc(&x.c, m));
    CK(cudaMalloc(&x.src, TOTAL));
    CK(cudaMalloc(&x.dst, TOTAL));
    // Random operands: a GEMM's power depends on its data (constant inputs draw far less).
    std::vector<__nv_bfloat16> h((size_t)N * N);
    srand(1234 + g);
    for (auto& v : h) v = __float2bfloat16((float)rand() / RAND_MAX * 2.f - 1.f);
    CK(cudaMemcpy(x.a, h.data(), m, cudaMemcpyHostToDevice));
    for (auto& v : h) v = __float2bfloat16((float)rand() / RAND_MAX * 2.f - 1.f);
    CK(cudaMemcpy(x.b, h.data(), m, cudaMemcpyHostToDevice));
    CK(cudaMemset(x.src, 1, TOTAL));
    CK(cudaEventCreate(&x.g0));
    CK(cudaEventCreate(&x.g1));
  }
  const int iters = 600;  // ~1 s of GEMMs per phase
  phase("warm-up", 300, -1);
  const struct {
    const char* label;
    double duty;
  } order[] = {{"alone", -1},     {"copies duty 1.00", 1},   {"copies duty 0.85", 0.85},
               {"copies duty 0.70", 0.7}, {"alone", -1},     {"copies duty 0.55", 0.55},
               {"copies duty 1.00", 1},   {"copies duty 0.85", 0.85}, {"copies duty 0.70", 0.7},
               {"alone", -1}};
  for (auto& o : order) phase(o.label, iters, o.duty);
  return 0;
}
