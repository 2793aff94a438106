// Does a GPU-to-GPU exchange keep more bandwidth beside a GEMM when more copy engines share
// it? Two GPUs, one process. A cuBLAS bf16 8192^3 GEMM loop runs on each GPU (as
// tests/gpu/overlap.py's GEMM does on every rank) while 256 MiB goes each way (a 2-rank
// sendrecv), each direction in K parts on K streams of the source GPU (push), or half pushed
// by the source and half pulled by the destination. Prints GB/s per direction alone and beside.
// nvcc -O2 -arch=sm_90 -o ce_split ce_split_beside_gemm.cu -lcublas && ./ce_split
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static const size_t N = 256u << 20;
static const int G = 8192;
static char *src[2], *dst[2];
static __nv_bfloat16 *A[2], *B[2], *C[2];
static cudaStream_t gemm_st[2], cp[2][4];
static cublasHandle_t h[2];

static void exchange(int pull_half, int k) {
  size_t part = N / k;
  for (int s = 0; s < 2; s++) {
    int d = 1 - s;
    for (int i = 0; i < k; i++) {
      int pull = pull_half && (i % 2 == 1);
      int dev = pull ? d : s;
      CK(cudaSetDevice(dev));
      CK(cudaMemcpyAsync(dst[d] + i * part, src[s] + i * part, part, cudaMemcpyDefault, cp[dev][pull_half ? i / 2 : i]));
    }
  }
}

static void gemms(int n) {
  float one = 1, zero = 0;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    for (int i = 0; i < n; i++)
      cublasGemmEx(h[g], CUBLAS_OP_N, CUBLAS_OP_N, G, G, G, &one, A[g], CUDA_R_16BF, G, B[g], CUDA_R_16BF, G,
                   &zero, C[g], CUDA_R_16BF, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
}

static void sync_all(void) { for (int g = 0; g < 2; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); } }

static double rate(int pull_half, int k, int beside) {
  sync_all();
  if (beside) { gemms(80); struct timespec ts = {0, 20000000}; nanosleep(&ts, 0); }
  int reps = 20;
  double t0 = now();
  for (int r = 0; r < reps; r++) exchange(pull_half, k);
  for (int g = 0; g < 2; g++) for (int i = 0; i < 4; i++) { CK(cudaSetDevice(g)); CK(cudaStreamSynchronize(cp[g][i])); }
  double t = now() - t0;
  sync_all();
  return reps * (double)N / t / 1e9;
}

int main(void) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g)); CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&src[g], N)); CK(cudaMalloc(&dst[g], N));
    CK(cudaMalloc(&A[g], (size_t)G * G * 2)); CK(cudaMalloc(&B[g], (size_t)G * G * 2)); CK(cudaMalloc(&C[g], (size_t)G * G * 2));
    CK(cudaMemset(A[g], 0x3c, (size_t)G * G * 2)); CK(cudaMemset(B[g], 0x3c, (size_t)G * G * 2));
    CK(cudaStreamCreateWithFlags(&gemm_st[g], cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) CK(cudaStreamCreateWithFlags(&cp[g][i], cudaStreamNonBlocking));
    cublasCreate(&h[g]); cublasSetStream(h[g], gemm_st[g]);
    // A workspace, as PyTorch gives cuBLAS: without one Hopper's fastest GEMM kernels are
    // not chosen (3.9 ms against torch's 1.65 ms here).
    void *ws; CK(cudaMalloc(&ws, 32u << 20)); cublasSetWorkspace(h[g], ws, 32u << 20);
  }
  // GEMM alone
  sync_all(); double t0 = now(); gemms(40); sync_all();
  printf("GEMM alone %.3f ms each (both GPUs at once)\n", (now() - t0) / 40 * 1e3);
  int cfg[][2] = {{0, 1}, {0, 2}, {0, 4}, {1, 2}, {1, 4}};
  for (int c = 0; c < 5; c++) {
    double alone = rate(cfg[c][0], cfg[c][1], 0), beside = rate(cfg[c][0], cfg[c][1], 1);
    printf("%-9s %d parts: alone %6.1f GB/s per direction, beside the GEMMs %6.1f\n", cfg[c][0] ? "push+pull" : "push", cfg[c][1], alone, beside);
  }
  return 0;
}
