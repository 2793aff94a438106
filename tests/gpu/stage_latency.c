/*
 * stage_latency.c -- what one staged GPU operation costs the stream with no network in it: per
 * iteration, a device-to-host copy of SIZE bytes into pinned memory, a flag written by the stream
 * (cuStreamWriteValue32), a wait on a second flag (cuStreamWaitValue32) that a host thread sets
 * as soon as it sees the first (the proxy, doing nothing), and the host-to-device copy back.
 * Prints us per iteration for several sizes; with WAIT=0 the stream skips the flags (copies
 * alone). Build: gcc -O2 -I/usr/local/cuda/include stage_latency.c -L/usr/local/cuda/lib64
 * -lcuda -lpthread -o stage_latency
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cu_check.h"

static volatile uint32_t *flags; /* [0]: start, written by the stream; [16]: done, by the host */
static volatile int stop;

static void *proxy(void *arg) {
  (void)arg;
  uint32_t seen = 0;
  while (!stop) {
    uint32_t s = __atomic_load_n(&flags[0], __ATOMIC_ACQUIRE);
    if (s != seen) {
      seen = s;
      __atomic_store_n(&flags[16], s, __ATOMIC_RELEASE);
    }
  }
  return NULL;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void) {
  int wait = getenv("WAIT") ? atoi(getenv("WAIT")) : 1;
  int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 2000;
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void *host, *fl;
  CK(cuMemHostAlloc(&host, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemHostAlloc(&fl, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  flags = fl;
  CUdeviceptr dflags, src, dst;
  CK(cuMemHostGetDevicePointer(&dflags, fl, 0));
  CK(cuMemAlloc(&src, 1 << 20));
  CK(cuMemAlloc(&dst, 1 << 20));
  pthread_t th;
  pthread_create(&th, NULL, proxy, NULL);
  static const size_t sizes[] = {8, 256, 512, 1024, 2048, 4096, 65536};
  uint32_t seq = 0;
  for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    double t0 = 0;
    for (int i = -100; i < iters; i++) {
      if (i == 0) {
        CK(cuStreamSynchronize(s));
        t0 = now_us();
      }
      seq++;
      CK(cuMemcpyDtoHAsync(host, src, n, s));
      if (wait) {
        CK(cuStreamWriteValue32(s, dflags, seq, 0));
        CK(cuStreamWaitValue32(s, dflags + 64, seq, CU_STREAM_WAIT_VALUE_GEQ));
      }
      CK(cuMemcpyHtoDAsync(dst, host, n, s));
    }
    CK(cuStreamSynchronize(s));
    printf("stage_latency: %zu B, flags %s: %.2f us per iteration\n", n, wait ? "on" : "off",
           (now_us() - t0) / iters);
  }
  stop = 1;
  pthread_join(th, NULL);
  return 0;
}
