/*
 * host_ring_probe.c -- what a transfer carried wholly through a host-memory ring could move
 * between two processes' GPUs with no peer access, no proxy thread and no CPU copy: the design
 * libccl's host-only mode uses for GPUs without P2P (docs/GPU.md). Two processes (fork) share two
 * rings in one /dev/shm mapping (SLOTS x SLOT_BYTES of data, and a ready and a credit word per
 * slot), each registered with CUDA in each process. The sender's stream, per chunk: wait until
 * the slot's credit says the receiver emptied it, copy the chunk GPU -> ring (copy engine),
 * write the slot's ready word; the receiver's stream: wait for ready, copy ring -> GPU, write
 * the credit. Every wait and write is a stream memory operation on the shared host words, so
 * the host only queues. Prints GB/s per direction for one way and both ways at once, and
 * checks every received byte. GPU: process r uses GPU (r % device count), so on one GPU both
 * share it. Env: MIB (message, 512), SLOT_MIB (8), SLOTS (8), ITERS (5).
 * Build: gcc -O2 -I/usr/local/cuda/include host_ring_probe.c -L/usr/local/cuda/lib64 -lcuda
 */
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_check.h"

static size_t env_or(const char *k, size_t d) {
  const char *v = getenv(k);
  return v ? (size_t)atol(v) : d;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Shared layout: [barrier words 4 KiB][ring 0->1][ring 1->0]; a ring is its flags (ready and
 * credit words, 64 B apart, 4 KiB in all) then its slots. */
struct ring {
  size_t flags, data; /* offsets in the mapping */
};

static volatile uint32_t *barrier_word(char *base, int i) { return (volatile uint32_t *)(base + 64 * i); }

static void barrier(char *base, int rank, uint32_t round) {
  __atomic_store_n(barrier_word(base, rank), round, __ATOMIC_RELEASE);
  while (__atomic_load_n(barrier_word(base, 1 - rank), __ATOMIC_ACQUIRE) < round) {
  }
}

int main(void) {
  size_t msg = env_or("MIB", 512) << 20, slot = env_or("SLOT_MIB", 8) << 20;
  size_t slots = env_or("SLOTS", 8), iters = env_or("ITERS", 5);
  size_t ring_bytes = 4096 + slots * slot;
  size_t total = 4096 + 2 * ring_bytes;
  char name[64];
  snprintf(name, sizeof name, "/host_ring_probe.%d", (int)getpid());
  int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)total) != 0) {
    perror("shm");
    return 1;
  }
  char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  shm_unlink(name);
  memset(base, 0, total);
  struct ring rings[2] = {{4096, 8192}, {4096 + ring_bytes, 8192 + ring_bytes}};
  pid_t child = fork();
  int rank = child == 0 ? 1 : 0;

  CK(cuInit(0));
  int ndev = 0;
  CK(cuDeviceGetCount(&ndev));
  CUdevice dev;
  CK(cuDeviceGet(&dev, rank % ndev));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuMemHostRegister(base, total, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  CUdeviceptr dbase;
  CK(cuMemHostGetDevicePointer(&dbase, base, 0));
  CUstream tx, rx;
  CK(cuStreamCreate(&tx, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&rx, CU_STREAM_NON_BLOCKING));
  CUdeviceptr src, dst;
  CK(cuMemAlloc(&src, msg));
  CK(cuMemAlloc(&dst, msg));
  CK(cuMemsetD32(src, 0x1000 + rank, msg / 4));
  struct ring out = rings[rank], in = rings[1 - rank];
  uint64_t sent = 0, got = 0; /* chunks so far on each ring, across runs */
  uint32_t round = 0;
  for (int both = 0; both < 2; both++) {
    for (size_t it = 0; it <= iters; it++) {
      int sends = both || rank == 0, recvs = both || rank == 1;
      CK(cuMemsetD32(dst, 0, msg / 4));
      CK(cuCtxSynchronize());
      barrier(base, rank, ++round);
      double t0 = now_s();
      for (size_t off = 0; off < msg; off += slot) {
        size_t len = msg - off < slot ? msg - off : slot;
        if (sends) {
          uint64_t k = sent++, s = k % slots;
          CUdeviceptr ready = dbase + out.flags + 128 * s, credit = ready + 64;
          CK(cuStreamWaitValue32(tx, credit, (uint32_t)(k / slots), CU_STREAM_WAIT_VALUE_GEQ));
          CK(cuMemcpyDtoHAsync(base + out.data + s * slot, src + off, len, tx));
          CK(cuStreamWriteValue32(tx, ready, (uint32_t)(k + 1), 0));
        }
        if (recvs) {
          uint64_t k = got++, s = k % slots;
          CUdeviceptr ready = dbase + in.flags + 128 * s, credit = ready + 64;
          CK(cuStreamWaitValue32(rx, ready, (uint32_t)(k + 1), CU_STREAM_WAIT_VALUE_GEQ));
          CK(cuMemcpyHtoDAsync(dst + off, base + in.data + s * slot, len, rx));
          CK(cuStreamWriteValue32(rx, credit, (uint32_t)(k / slots + 1), 0));
        }
      }
      CK(cuStreamSynchronize(tx));
      CK(cuStreamSynchronize(rx));
      double dt = now_s() - t0;
      if (recvs) {
        uint32_t *h = malloc(msg);
        CK(cuMemcpyDtoH(h, dst, msg));
        size_t wrong = 0;
        for (size_t i = 0; i < msg / 4; i++) wrong += h[i] != (uint32_t)(0x1000 + 1 - rank);
        free(h);
        if (it > 0 || wrong)
          printf("host_ring_probe: rank %d, %s, %zu MiB, slots %zu x %zu MiB: %.1f GB/s in, %zu wrong\n",
                 rank, both ? "both ways" : "one way", msg >> 20, slots, slot >> 20, msg / dt / 1e9,
                 wrong);
      }
      fflush(stdout);
    }
  }
  barrier(base, rank, ++round);
  CK(cuMemHostUnregister(base));
  if (child > 0) waitpid(child, NULL, 0);
  return 0;
}
