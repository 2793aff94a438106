// Copy-engine ceilings on N GPUs of one host (issue: N-GPU copy-engine collectives): the
// all-gather and all-to-all patterns as plain cudaMemcpyAsync between peers, no library, with
// 1, 2, 4 and 8 streams per GPU, pushed (each GPU's streams write its block to every peer) or
// pulled (each GPU's streams read every peer's block), peers taken in rotated order (GPU g's
// k-th copy goes to g+k+1) so no GPU's NVLink ingress is hit by everyone at once. One process
// drives every GPU (peer access on), which is the hardware's ceiling for what libccl's
// processes do through IPC mappings. Prints, per pattern, size and setting, the time and
// nccl-tests' busbw ((N-1)/N x total bytes / time), best of ITERS.
//
//   gcc -O2 tests/gpu/ce_ceiling_n.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64
//     -lcudart -o /tmp/ce_ceiling_n   (one line), then /tmp/ce_ceiling_n [MAX_BYTES] [ITERS]
//
// MAX_BYTES (default 1 GiB) is the all-gather's output per GPU (nccl-tests' size); sizes go
// from 1 MiB up by 8x, then MAX_BYTES.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t ck_e = (x);                                                                \
    if (ck_e != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(ck_e));         \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

enum { MAXG = 8, MAXS = 8 };
static int n;
static cudaStream_t st[MAXG][MAXS];
static char *in[MAXG], *out[MAXG];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// One collective of `bytes` output per GPU: block = bytes / n from every GPU to every other.
// all-to-all: GPU g's block for peer p is at in[g] + p * block (distinct per peer); all-gather:
// the same block in[g] + g * block goes to every peer. Lands at out[p] + g * block either way.
static void once(size_t bytes, int streams, int pull, int alltoall) {
  size_t block = bytes / n;
  for (int g = 0; g < n; g++) {
    for (int k = 0; k < n - 1; k++) {
      int p = (g + k + 1) % n;
      int dev = pull ? p : g; /* whose engine copies */
      const char *src = in[g] + (size_t)(alltoall ? p : g) * block;
      CK(cudaSetDevice(dev));
      CK(cudaMemcpyAsync(out[p] + (size_t)g * block, src, block, cudaMemcpyDefault,
                         st[dev][k % streams]));
    }
  }
}

static void sync_all(void) {
  for (int d = 0; d < n; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
}

static void measure(size_t bytes, int streams, int pull, int alltoall, int iters) {
  once(bytes, streams, pull, alltoall);
  sync_all();
  double best = 1e30;
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    once(bytes, streams, pull, alltoall);
    sync_all();
    double t = now() - t0;
    best = t < best ? t : best;
  }
  double busbw = (double)(n - 1) / n * (double)bytes / best / 1e9;
  printf("%-10s %-4s streams %d  %12zu B  %10.1f us  busbw %7.1f GB/s\n",
         alltoall ? "alltoall" : "all_gather", pull ? "pull" : "push", streams, bytes, best * 1e6,
         busbw);
  fflush(stdout);
}

int main(int argc, char **argv) {
  size_t max = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 30;
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  CK(cudaGetDeviceCount(&n));
  if (n > MAXG) n = MAXG;
  if (n < 2) {
    printf("ce_ceiling_n: %d GPU(s): nothing to measure between peers\n", n);
    return 0;
  }
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < n; p++) {
      int ok = 0;
      if (p == g) continue;
      CK(cudaDeviceCanAccessPeer(&ok, g, p));
      if (!ok) {
        printf("ce_ceiling_n: GPU %d cannot reach GPU %d\n", g, p);
        return 1;
      }
      cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
    }
    for (int s = 0; s < MAXS; s++) CK(cudaStreamCreateWithFlags(&st[g][s], cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&in[g], max));
    CK(cudaMalloc((void **)&out[g], max));
    CK(cudaMemset(in[g], g + 1, max));
  }
  printf("ce_ceiling_n: %d GPUs, best of %d\n", n, iters);
  int counts[] = {1, 2, 4, 8};
  for (int alltoall = 0; alltoall < 2; alltoall++)
    for (size_t bytes = 1 << 20;; bytes = bytes * 8 > max ? max : bytes * 8) {
      for (int pull = 0; pull < 2; pull++)
        for (int c = 0; c < 4; c++) measure(bytes / n * n, counts[c], pull, alltoall, iters);
      if (bytes >= max) break;
    }
  return 0;
}
