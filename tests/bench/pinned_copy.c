// Issue 6: does the network path's pinned staging memory (cuMemHostAlloc) cost CPU copies
// more than ordinary (transparent-huge-page) memory? Copies between a malloc'd source and a
// destination of each kind with T threads (each its own slice), GB/s of the destination side.
// Build: cc -O2 -pthread -o pinned_copy pinned_copy.c -ldl    Run: ./pinned_copy [MiB] [threads]
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int (*init_t)(unsigned);
typedef int (*devget_t)(int *, int);
typedef int (*ctxcreate_t)(void **, unsigned, int);
typedef int (*hostalloc_t)(void **, size_t, unsigned);
typedef int (*hostreg_t)(void *, size_t, unsigned);

static size_t len; static int nthreads; static char *src, *dst; static int reverse;
static void *worker(void *arg) {
  long i = (long)arg; size_t part = len / nthreads;
  char *d = dst + i * part, *s = src + i * part;
  if (reverse) memcpy(s, d, part); else memcpy(d, s, part);
  return NULL;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double run(char *d, int rev) {
  dst = d; reverse = rev; double best = 0;
  for (int r = 0; r < 8; r++) {
    pthread_t th[64]; double t0 = now();
    for (long i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    double gbs = len / (now() - t0) / 1e9; if (gbs > best) best = gbs;
  }
  return best;
}
static char *thp(size_t n) {
  char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, n, MADV_HUGEPAGE); memset(p, 1, n); return p;
}
int main(int argc, char **argv) {
  len = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20; nthreads = argc > 2 ? atoi(argv[2]) : 8;
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cu) { fprintf(stderr, "no libcuda\n"); return 1; }
  init_t cuInit = (init_t)dlsym(cu, "cuInit"); devget_t cuDeviceGet = (devget_t)dlsym(cu, "cuDeviceGet");
  ctxcreate_t cuCtxCreate = (ctxcreate_t)dlsym(cu, "cuCtxCreate_v2");
  hostalloc_t cuMemHostAlloc = (hostalloc_t)dlsym(cu, "cuMemHostAlloc");
  hostreg_t cuMemHostRegister = (hostreg_t)dlsym(cu, "cuMemHostRegister_v2");
  int dev; void *ctx; if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate(&ctx, 0, dev)) { fprintf(stderr, "cuda init failed\n"); return 1; }
  src = thp(len);
  void *pinned; if (cuMemHostAlloc(&pinned, len, 3)) { fprintf(stderr, "cuMemHostAlloc failed\n"); return 1; }
  memset(pinned, 1, len);
  char *plain = thp(len);
  char *reg = thp(len); if (cuMemHostRegister(reg, len, 3)) fprintf(stderr, "register failed\n");
  char *small = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(small, len, MADV_NOHUGEPAGE); memset(small, 1, len);
  printf("%zu MiB, %d threads, best of 8, GB/s  (into / out of)\n", len >> 20, nthreads);
  printf("cuMemHostAlloc              %6.1f / %6.1f\n", run(pinned, 0), run(pinned, 1));
  printf("mmap + THP                  %6.1f / %6.1f\n", run(plain, 0), run(plain, 1));
  printf("mmap + THP + HostRegister   %6.1f / %6.1f\n", run(reg, 0), run(reg, 1));
  printf("mmap, 4 KiB pages           %6.1f / %6.1f\n", run(small, 0), run(small, 1));
  char line[256]; FILE *f = fopen("/proc/self/smaps_rollup", "r");
  while (f && fgets(line, sizeof line, f)) if (strstr(line, "AnonHuge")) fputs(line, stdout);
  f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r"); if (f && fgets(line, sizeof line, f)) printf("THP: %s", line);
  return 0;
}
