// Can PCIe carry a share of a GPU-to-GPU transfer beside NVLink, so a large send goes faster
// than one copy engine's NVLink ceiling (~390-395 GB/s on the H200 pair, issue 5: sendrecv and
// broadcast at 512 MiB need 1.15x NCCL's 356-362 GB/s, i.e. 410-417)? One process, two GPUs.
//
//   1. NVLink alone: one 512 MiB copy GPU0 -> GPU1, then both directions at once;
//   2. PCIe alone: GPU0 -> pinned host (D2H), pinned -> GPU1 (H2D), and both at once on one GPU
//      (the full-duplex case a two-way exchange needs);
//   3. split: (1 - f) of the bytes over NVLink in one copy, f through pinned host memory in
//      chunks of C bytes (D2H chunk i on the source GPU, an event, H2D chunk i on the
//      destination GPU), one direction and both directions at once.
// Times are wall clock over REPS repetitions after a warm-up, everything synchronized at the
// end of each repetition; every split result is checked against the source once.
//
// nvcc -O2 -arch=sm_90 -o /tmp/pcie_side tests/gpu/pcie_side_path.cu && /tmp/pcie_side
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static const size_t N = 512u << 20;
static const int REPS = 10;
static const int MAXCH = 256;
static char *src[2], *dst[2], *host[2];  // host[d]: staging for the direction d -> 1-d
static cudaStream_t nv[2], d2h[2], h2d[2];
static cudaEvent_t ev[2][MAXCH];

// Queue direction s -> 1-s: bytes [0, nvl) over NVLink, [nvl, N) through host in chunks.
static void queue_dir(int s, size_t nvl, size_t chunk) {
  int d = 1 - s;
  if (nvl) {
    CK(cudaSetDevice(s));
    CK(cudaMemcpyAsync(dst[d], src[s], nvl, cudaMemcpyDefault, nv[s]));
  }
  size_t off = nvl;
  for (int i = 0; off < N; i++) {
    size_t n = N - off < chunk ? N - off : chunk;
    CK(cudaSetDevice(s));
    CK(cudaMemcpyAsync(host[s] + off, src[s] + off, n, cudaMemcpyDeviceToHost, d2h[s]));
    CK(cudaEventRecord(ev[s][i], d2h[s]));
    CK(cudaSetDevice(d));
    CK(cudaStreamWaitEvent(h2d[d], ev[s][i], 0));
    CK(cudaMemcpyAsync(dst[d] + off, host[s] + off, n, cudaMemcpyHostToDevice, h2d[d]));
    off += n;
  }
}

static void sync_all(void) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceSynchronize());
  }
}

// Seconds per repetition of `dirs` directions (1: 0 -> 1 only; 2: both) with nvl NVLink bytes.
static double split(int dirs, size_t nvl, size_t chunk) {
  for (int w = 0; w < 2; w++) {
    for (int s = 0; s < dirs; s++) queue_dir(s, nvl, chunk);
    sync_all();
  }
  double t0 = now();
  for (int r = 0; r < REPS; r++) {
    for (int s = 0; s < dirs; s++) queue_dir(s, nvl, chunk);
    sync_all();
  }
  return (now() - t0) / REPS;
}

static int check(int dirs) {
  int bad = 0;
  char* a = (char*)malloc(N);
  char* b = (char*)malloc(N);
  for (int s = 0; s < dirs; s++) {
    CK(cudaSetDevice(s));
    CK(cudaMemcpy(a, src[s], N, cudaMemcpyDeviceToHost));
    CK(cudaSetDevice(1 - s));
    CK(cudaMemcpy(b, dst[1 - s], N, cudaMemcpyDeviceToHost));
    if (memcmp(a, b, N) != 0) bad++;
  }
  free(a);
  free(b);
  return bad;
}

// One-way PCIe rates: D2H alone, H2D alone, both on GPU 0 at once.
static void pcie_alone(void) {
  size_t n = 256u << 20;
  CK(cudaSetDevice(0));
  for (int w = 0; w < 2; w++) {
    CK(cudaMemcpyAsync(host[0], src[0], n, cudaMemcpyDeviceToHost, d2h[0]));
    CK(cudaMemcpyAsync(dst[0], host[1], n, cudaMemcpyHostToDevice, h2d[0]));
    CK(cudaDeviceSynchronize());
  }
  double t0 = now();
  for (int r = 0; r < REPS; r++) CK(cudaMemcpyAsync(host[0], src[0], n, cudaMemcpyDeviceToHost, d2h[0]));
  CK(cudaDeviceSynchronize());
  double d2h_s = (now() - t0) / REPS;
  t0 = now();
  for (int r = 0; r < REPS; r++) CK(cudaMemcpyAsync(dst[0], host[1], n, cudaMemcpyHostToDevice, h2d[0]));
  CK(cudaDeviceSynchronize());
  double h2d_s = (now() - t0) / REPS;
  t0 = now();
  for (int r = 0; r < REPS; r++) {
    CK(cudaMemcpyAsync(host[0], src[0], n, cudaMemcpyDeviceToHost, d2h[0]));
    CK(cudaMemcpyAsync(dst[0], host[1], n, cudaMemcpyHostToDevice, h2d[0]));
  }
  CK(cudaDeviceSynchronize());
  double both_s = (now() - t0) / REPS;
  printf("pcie GPU0 256 MiB: D2H %.1f GB/s, H2D %.1f GB/s, both at once %.1f GB/s each\n",
         n / d2h_s / 1e9, n / h2d_s / 1e9, n / both_s / 1e9);
}

int main(void) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&src[g], N));
    CK(cudaMalloc(&dst[g], N));
    CK(cudaMemset(src[g], 0, N));
    CK(cudaHostAlloc((void**)&host[g], N, cudaHostAllocPortable));
    CK(cudaStreamCreateWithFlags(&nv[g], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&d2h[g], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&h2d[g], cudaStreamNonBlocking));
    for (int i = 0; i < MAXCH; i++) CK(cudaEventCreateWithFlags(&ev[g][i], cudaEventDisableTiming));
  }
  // Distinct patterns per GPU so a misplaced chunk is seen.
  {
    unsigned* p = (unsigned*)malloc(N);
    for (int g = 0; g < 2; g++) {
      for (size_t i = 0; i < N / 4; i++) p[i] = (unsigned)(i * 2654435761u) ^ (g ? 0xa5a5a5a5u : 0u);
      CK(cudaSetDevice(g));
      CK(cudaMemcpy(src[g], p, N, cudaMemcpyHostToDevice));
    }
    free(p);
  }
  pcie_alone();
  double one = split(1, N, N), two = split(2, N, N);
  printf("nvlink alone 512 MiB: one way %.1f GB/s, both ways %.1f GB/s each\n", N / one / 1e9,
         N / two / 1e9);
  size_t chunks[] = {2u << 20, 4u << 20, 8u << 20};
  double fracs[] = {0.04, 0.06, 0.08, 0.10, 0.12, 0.14};
  for (int dirs = 1; dirs <= 2; dirs++) {
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
      for (size_t f = 0; f < sizeof fracs / sizeof *fracs; f++) {
        size_t side = (size_t)(N * fracs[f]) & ~((size_t)(1 << 20) - 1);
        double t = split(dirs, N - side, chunks[c]);
        int bad = check(dirs);
        printf("split %s chunk %zu MiB side %.2f (%zu MiB): %.1f GB/s per direction (x%.3f of nvlink alone) %s\n",
               dirs == 1 ? "one way " : "both ways", chunks[c] >> 20, fracs[f], side >> 20,
               N / t / 1e9, (dirs == 1 ? one : two) / t, bad ? "WRONG" : "ok");
        CK(cudaSetDevice(1));
        CK(cudaMemset(dst[1], 0, N));
        CK(cudaSetDevice(0));
        CK(cudaMemset(dst[0], 0, N));
      }
    }
  }
  return 0;
}
