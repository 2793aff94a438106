// SM stores over NVLink against copy engines on N GPUs of one host, no library: the ceilings
// behind CCL_IPC_DIRECT_REDUCE_WRITE_ALL (a direct all-reduce whose kernel writes its reduced
// slice into every GPU's output) and behind a copy kernel for the data collectives.
//   all_gather: each GPU's block into every peer's output, by copy engines (one stream per peer)
//     or by one kernel of B blocks storing 16-byte vectors into every peer;
//   all_reduce: each GPU reduces its slice (1/N) of every GPU's input (float sum), then either
//     copy engines push the reduced slice to every peer (pieces of the slice, the next piece
//     reducing meanwhile: libccl's default) or the kernel stores it into every output itself.
// One process drives every GPU (peer access on). Prints time and nccl-tests' busbw (all_gather
// (N-1)/N x bytes / t, all_reduce 2 (N-1)/N x bytes / t), best of ITERS, and checks every
// all-reduce result. VIRTUAL=K on a machine with one GPU runs K "GPUs" as buffers on GPU 0
// (results checked; the speeds then say nothing of NVLink).
//
//   nvcc -O2 -arch=sm_90 -o /tmp/store_vs_ce tests/gpu/store_vs_ce.cu && /tmp/store_vs_ce [MAX] [ITERS]
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

enum { MAXG = 8, PIECES = 4 };
static int n, ndev;
static cudaStream_t st[MAXG][MAXG];
static cudaEvent_t reduced[MAXG][PIECES];
static float *in[MAXG], *out[MAXG];

struct Ptrs { float *p[MAXG]; };

static int dev_of(int g) { return ndev == 1 ? 0 : g; }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// dst[k][i] = src[i] for every k < nd, 16-byte vectors (counts are multiples of 4 floats).
__global__ void store_all(const float4 *src, Ptrs dst, int nd, size_t nv) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 v = src[i];
#pragma unroll
    for (int k = 0; k < MAXG; k++)
      if (k < nd) ((float4 *)dst.p[k])[i] = v;
  }
}

// r = sum over ns sources (in source order); written to the nd destinations.
__global__ void reduce_to(Ptrs src, int ns, Ptrs dst, int nd, size_t nv) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 r = ((const float4 *)src.p[0])[i];
#pragma unroll
    for (int k = 1; k < MAXG; k++)
      if (k < ns) {
        float4 v = ((const float4 *)src.p[k])[i];
        r.x += v.x; r.y += v.y; r.z += v.z; r.w += v.w;
      }
#pragma unroll
    for (int k = 0; k < MAXG; k++)
      if (k < nd) ((float4 *)dst.p[k])[i] = r;
  }
}

static void sync_all(void) {
  for (int d = 0; d < ndev; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
}

// mode 0: copy engines, 1: one kernel of `blocks` blocks.
static void all_gather(size_t bytes, int mode, int blocks) {
  size_t block = bytes / n;
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(dev_of(g)));
    const float *src = in[g];
    if (mode == 0) {
      for (int k = 1; k < n; k++) {
        int p = (g + k) % n;
        CK(cudaMemcpyAsync((char *)out[p] + g * block, src, block, cudaMemcpyDefault, st[g][k]));
      }
    } else {
      Ptrs d;
      for (int k = 1; k < n; k++) d.p[k - 1] = (float *)((char *)out[(g + k) % n] + g * block);
      store_all<<<blocks, 512, 0, st[g][0]>>>((const float4 *)src, d, n - 1, block / 16);
    }
  }
}

// mode 0: reduce pieces locally, copy engines push each; 1: the kernel writes every output.
static void all_reduce(size_t bytes, int mode, int blocks) {
  size_t slice = bytes / n, pieces = mode == 0 ? PIECES : 1, piece = slice / pieces;
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(dev_of(g)));
    for (size_t c = 0; c < pieces; c++) {
      size_t off = g * slice + c * piece;
      Ptrs s, d;
      for (int k = 0; k < n; k++) s.p[k] = (float *)((char *)in[(g + k) % n] + off);
      d.p[0] = (float *)((char *)out[g] + off);
      for (int k = 1; k < n && mode == 1; k++) d.p[k] = (float *)((char *)out[(g + k) % n] + off);
      reduce_to<<<blocks, 512, 0, st[g][0]>>>(s, n, d, mode == 1 ? n : 1, piece / 16);
      if (mode == 1) continue;
      CK(cudaEventRecord(reduced[g][c], st[g][0]));
      for (int k = 1; k < n; k++) {
        CK(cudaStreamWaitEvent(st[g][k], reduced[g][c], 0));
        CK(cudaMemcpyAsync((char *)out[(g + k) % n] + off, d.p[0], piece, cudaMemcpyDefault,
                           st[g][k]));
      }
    }
  }
}

static int check_all_reduce(size_t bytes) {
  size_t count = bytes / 4;
  float want = 0, *h = (float *)malloc(bytes);
  for (int g = 0; g < n; g++) want += (float)(g + 1);
  int bad = 0;
  for (int g = 0; g < n && !bad; g++) {
    CK(cudaSetDevice(dev_of(g)));
    CK(cudaMemcpy(h, out[g], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++)
      if (h[i] != want) { bad = 1; break; }
  }
  free(h);
  return bad;
}

static void measure(const char *op, void (*f)(size_t, int, int), size_t bytes, int mode,
                    int blocks, int iters) {
  f(bytes, mode, blocks);
  sync_all();
  double best = 1e30;
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    f(bytes, mode, blocks);
    sync_all();
    double t = now() - t0;
    best = t < best ? t : best;
  }
  int ar = f == all_reduce;
  double factor = (ar ? 2.0 : 1.0) * (n - 1) / n;
  const char *how = mode == 0 ? (ar ? "reduce+CE push" : "copy engines") : "SM stores";
  printf("%-10s %-15s blocks %4d %11zu B %9.1f us busbw %7.1f GB/s%s\n", op, how,
         mode ? blocks : 0, bytes, best * 1e6, factor * bytes / best / 1e9,
         ar && check_all_reduce(bytes) ? "  WRONG" : "");
  fflush(stdout);
}

int main(int argc, char **argv) {
  size_t max = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 30;
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  CK(cudaGetDeviceCount(&ndev));
  n = ndev > MAXG ? MAXG : ndev;
  if (ndev == 1) n = getenv("VIRTUAL") ? atoi(getenv("VIRTUAL")) : 1;
  if (n < 2 || n > MAXG) {
    printf("store_vs_ce: %d GPU(s): nothing to measure between peers (VIRTUAL=K on one GPU)\n", n);
    return 0;
  }
  ndev = ndev == 1 ? 1 : n;
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(dev_of(g)));
    for (int p = 0; p < n && ndev > 1; p++) {
      if (p == g) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
    }
    for (int s = 0; s < MAXG; s++) CK(cudaStreamCreateWithFlags(&st[g][s], cudaStreamNonBlocking));
    for (int c = 0; c < PIECES; c++)
      CK(cudaEventCreateWithFlags(&reduced[g][c], cudaEventDisableTiming));
    CK(cudaMalloc((void **)&in[g], max));
    CK(cudaMalloc((void **)&out[g], max));
    float *h = (float *)malloc(max);
    for (size_t i = 0; i < max / 4; i++) h[i] = (float)(g + 1);
    CK(cudaMemcpy(in[g], h, max, cudaMemcpyHostToDevice));
    free(h);
  }
  printf("store_vs_ce: %d %s, best of %d\n", n, ndev == 1 ? "virtual GPUs on GPU 0" : "GPUs", iters);
  int blocks[] = {16, 32, 64, 132};
  size_t unit = (size_t)n * PIECES * 16;
  for (size_t bytes = 1 << 20;; bytes = bytes * 4 > max ? max : bytes * 4) {
    size_t b = bytes / unit * unit;
    measure("all_gather", all_gather, b, 0, 0, iters);
    for (int k = 0; k < 4; k++) measure("all_gather", all_gather, b, 1, blocks[k], iters);
    measure("all_reduce", all_reduce, b, 0, 132, iters);
    for (int k = 0; k < 4; k++) measure("all_reduce", all_reduce, b, 1, blocks[k], iters);
    if (bytes >= max) break;
  }
  return 0;
}
