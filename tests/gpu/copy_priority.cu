// A same-GPU copy runs as a driver kernel (tests/gpu/ce_or_sm.cu), so beside compute it waits
// for SMs. Does a high-priority stream get it SMs as soon as the compute kernel's blocks
// retire? A "GEMM-like" kernel of many short blocks (BLOCK_US each) runs on a low-priority
// stream; a 128 MiB local copy is queued 1 ms in on a default-priority stream, then on the
// highest-priority stream. Prints when each copy ended, from the compute kernel's start.
// nvcc -O2 -arch=sm_90 -o copy_priority copy_priority.cu && ./copy_priority
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__global__ void short_blocks(unsigned long long ns) {
  unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (t - t0 > ns) break; }
}

int main(void) {
  const size_t bytes = 128u << 20;
  const unsigned block_us = 20, blocks = 400000;
  char *a, *b;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMemset(a, 1, bytes));
  int lo, hi; CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t compute, normal, high;
  CK(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, lo));
  CK(cudaStreamCreateWithPriority(&normal, cudaStreamNonBlocking, lo));
  CK(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, hi));
  cudaEvent_t e0, e1, c0, c1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreate(&c0)); CK(cudaEventCreate(&c1));
  // warm up
  short_blocks<<<1000, 128, 0, compute>>>(1000); CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, high));
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(c0, high)); CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, high)); CK(cudaEventRecord(c1, high));
  CK(cudaDeviceSynchronize());
  float alone; CK(cudaEventElapsedTime(&alone, c0, c1));
  printf("priority range %d (low) .. %d (high); 128 MiB local copy alone %.3f ms\n", lo, hi, alone);
  const char *names[2] = {"default-priority stream", "highest-priority stream"};
  cudaStream_t copy_streams[2] = {normal, high};
  for (int k = 0; k < 2; k++) {
    for (int rep = 0; rep < 2; rep++) {
      CK(cudaEventRecord(e0, compute));
      short_blocks<<<blocks, 128, 0, compute>>>(block_us * 1000ull);
      CK(cudaEventRecord(e1, compute));
      double t = now(); while (now() - t < 1e-3) {}
      CK(cudaEventRecord(c0, copy_streams[k]));
      CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, copy_streams[k]));
      CK(cudaEventRecord(c1, copy_streams[k]));
      CK(cudaDeviceSynchronize());
      float kernel_ms, copy_end, copy_start;
      CK(cudaEventElapsedTime(&kernel_ms, e0, e1)); CK(cudaEventElapsedTime(&copy_end, e0, c1));
      CK(cudaEventElapsedTime(&copy_start, e0, c0));
      printf("%-26s compute kernel %.2f ms; copy queued at %.2f ms, ended at %.2f ms (took %.3f ms)\n",
             names[k], kernel_ms, copy_start, copy_end, copy_end - copy_start);
    }
  }
  return 0;
}
