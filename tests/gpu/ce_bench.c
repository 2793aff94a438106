// Copy-engine ceilings between two GPUs: push (source GPU's streams write the peer), pull
// (destination GPU's streams read the peer), both at once on one direction, and both
// directions, with 1..8 streams per GPU. Prints GB/s each way. Used to pick how libccl's
// zero-copy path splits a transfer. Build: gcc ce_bench.c -I/usr/local/cuda/include
// -L/usr/local/cuda/lib64 -lcudart
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

enum { MAXS = 8 };
static cudaStream_t st[2][MAXS];
static char *buf[2][2]; // [gpu][0: source area, 1: destination area]

// One direction `from`->`to` of `bytes`: `push` streams on `from`, `pull` streams on `to`, each
// taking an equal share, in pieces of `chunk` bytes round-robin over the streams.
static void dir(int from, int to, size_t bytes, int push, int pull, size_t chunk) {
  int total = push + pull; size_t off = 0; int i = 0;
  while (off < bytes) {
    size_t n = bytes - off < chunk ? bytes - off : chunk;
    int k = i % total;
    int dev = k < push ? from : to, s = k < push ? k : k - push;
    CK(cudaSetDevice(dev));
    CK(cudaMemcpyAsync(buf[to][1] + off, buf[from][0] + off, n, cudaMemcpyDefault, st[dev][s]));
    off += n; i++;
  }
}

static void sync_all(void) { for (int d = 0; d < 2; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); } }

static void run(const char *name, size_t bytes, int bidir, int push, int pull, size_t chunk) {
  for (int w = 0; w < 2; w++) { dir(0, 1, bytes, push, pull, chunk); if (bidir) dir(1, 0, bytes, push, pull, chunk); }
  sync_all();
  int reps = 10; double t0 = now();
  for (int r = 0; r < reps; r++) { dir(0, 1, bytes, push, pull, chunk); if (bidir) dir(1, 0, bytes, push, pull, chunk); }
  sync_all();
  double t = (now() - t0) / reps;
  printf("%-10s %s bytes=%zu push=%d pull=%d chunk=%zu: %.1f us, %.1f GB/s each way\n", name,
         bidir ? "bidir" : "uni  ", bytes, push, pull, chunk, t * 1e6, bytes / t / 1e9);
}

int main(void) {
  size_t big = 512ul << 20;
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d)); CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    for (int s = 0; s < MAXS; s++) CK(cudaStreamCreateWithFlags(&st[d][s], cudaStreamNonBlocking));
    CK(cudaMalloc(&buf[d][0], big)); CK(cudaMalloc(&buf[d][1], big));
    CK(cudaMemset(buf[d][0], d + 1, big));
  }
  size_t sizes[] = {512ul << 20, 128ul << 20};
  for (int z = 0; z < 2; z++) {
    size_t b = sizes[z];
    for (int bidir = 0; bidir < 2; bidir++) {
      run("push", b, bidir, 1, 0, b); run("push", b, bidir, 2, 0, b / 2); run("push", b, bidir, 4, 0, b / 4);
      run("pull", b, bidir, 0, 1, b); run("pull", b, bidir, 0, 2, b / 2);
      run("push+pull", b, bidir, 1, 1, b / 2); run("push+pull", b, bidir, 2, 2, b / 4);
      run("push+pull", b, bidir, 1, 1, 8 << 20); run("push", b, bidir, 2, 0, 8 << 20); run("push", b, bidir, 2, 0, 32 << 20);
    }
  }
  for (size_t b = 8; b <= (8u << 20); b *= 32) { run("small", b, 1, 1, 0, b); run("small", b, 0, 1, 0, b); }
  return 0;
}
