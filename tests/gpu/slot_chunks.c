/*
 * slot_chunks.c -- what an eager transfer's chunk costs with no library: GPU 0 pushes BYTES to
 * GPU 1 through SLOTS receive slots of CHUNK bytes, as libccl's staged protocol does (per chunk
 * the sender's stream waits for the slot's credit, copies into the slot and writes its ready
 * word; the receiver's stream waits for ready, copies the chunk out and writes the credit back),
 * against one copy straight into the destination. The sender's chunks alternate over LANES
 * streams (libccl: 2). Modes, each timed REPS times after a warm-up, median printed:
 *   direct  one copy GPU 0 -> GPU 1 destination
 *   chain   the protocol above
 *   nocopy  the protocol without the receiver's copy out (wait ready, write credit)
 *   nowait  the sender's copies and ready writes alone, no credit waits, no receiver
 * Prints us per transfer, GB/s and us per chunk beyond `direct`. Needs two GPUs with peer
 * access. Build: gcc -O2 -I/usr/local/cuda/include slot_chunks.c -L/usr/local/cuda/lib64 -lcuda
 * -o slot_chunks; run: BYTES=268435456 CHUNK=8388608 SLOTS=4 ./slot_chunks
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu_check.h"

enum { MAX_SLOTS = 64, MAX_LANES = 8, LINE = 64 };

static size_t env_size(const char *name, size_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

struct setup {
  CUcontext ctx[2];
  CUstream tx[MAX_LANES], rx;
  CUdeviceptr src, slots, dst;   /* src on GPU 0; slots and dst on GPU 1 */
  CUdeviceptr ready, credit;     /* ready words on GPU 1, credit words on GPU 0, a line each */
  size_t bytes, chunk;
  unsigned nslots, lanes;
  uint32_t seq;                  /* chunks sent so far, every rep counting on */
};

/* Each stream's operations are queued with its own GPU's context current. */
static void on(struct setup *s, int gpu) { CK(cuCtxSetCurrent(s->ctx[gpu])); }

static void queue_direct(struct setup *s) {
  on(s, 0);
  CK(cuMemcpyAsync(s->dst, s->src, s->bytes, s->tx[0]));
}

/* The protocol; `copy_out` 0 leaves the receiver's copy out, `waits` 0 every wait and the
 * receiver. */
static void queue_chain(struct setup *s, int copy_out, int waits) {
  size_t chunks = (s->bytes + s->chunk - 1) / s->chunk;
  for (size_t j = 0; j < chunks; ++j) {
    uint32_t seq = ++s->seq;
    unsigned slot = seq % s->nslots;
    size_t off = j * s->chunk, len = s->bytes - off < s->chunk ? s->bytes - off : s->chunk;
    CUstream tx = s->tx[seq % s->lanes];
    CUdeviceptr slot_at = s->slots + (size_t)slot * s->chunk;
    on(s, 0);
    if (waits && seq > s->nslots)
      CK(cuStreamWaitValue32(tx, s->credit + slot * LINE, seq - s->nslots,
                             CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuMemcpyAsync(slot_at, s->src + off, len, tx));
    CK(cuStreamWriteValue32(tx, s->ready + slot * LINE, seq, 0));
    if (!waits) continue;
    on(s, 1);
    CK(cuStreamWaitValue32(s->rx, s->ready + slot * LINE, seq, CU_STREAM_WAIT_VALUE_GEQ));
    if (copy_out) CK(cuMemcpyAsync(s->dst + off, slot_at, len, s->rx));
    CK(cuStreamWriteValue32(s->rx, s->credit + slot * LINE, seq, 0));
  }
}

static void sync_all(struct setup *s) {
  for (unsigned l = 0; l < s->lanes; ++l) CK(cuStreamSynchronize(s->tx[l]));
  CK(cuStreamSynchronize(s->rx));
}

/* Median us of `reps` transfers in `mode` (0 direct, 1 chain, 2 nocopy, 3 nowait). */
static double time_mode(struct setup *s, int mode, int reps) {
  double t[256];
  if (reps > 256) reps = 256;
  for (int r = -2; r < reps; ++r) {
    sync_all(s);
    double t0 = now_us();
    if (mode == 0) queue_direct(s);
    else queue_chain(s, mode == 1, mode != 3);
    sync_all(s);
    if (r >= 0) t[r] = now_us() - t0;
  }
  qsort(t, reps, sizeof t[0], cmp_double);
  return t[reps / 2];
}

static void make(struct setup *s) {
  CUdevice d[2];
  for (int g = 0; g < 2; ++g) {
    CK(cuDeviceGet(&d[g], g));
    CK(cuDevicePrimaryCtxRetain(&s->ctx[g], d[g]));
  }
  int can = 0;
  CK(cuDeviceCanAccessPeer(&can, d[0], d[1]));
  if (!can) {
    fprintf(stderr, "slot_chunks: GPU 0 cannot reach GPU 1\n");
    exit(1);
  }
  CK(cuCtxSetCurrent(s->ctx[1]));
  CK(cuCtxEnablePeerAccess(s->ctx[0], 0));
  CK(cuMemAlloc(&s->slots, (size_t)s->nslots * s->chunk));
  CK(cuMemAlloc(&s->dst, s->bytes));
  CK(cuMemAlloc(&s->ready, MAX_SLOTS * LINE));
  CK(cuMemsetD8(s->ready, 0, MAX_SLOTS * LINE));
  CK(cuStreamCreate(&s->rx, CU_STREAM_NON_BLOCKING));
  CK(cuCtxSetCurrent(s->ctx[0]));
  CK(cuCtxEnablePeerAccess(s->ctx[1], 0));
  CK(cuMemAlloc(&s->src, s->bytes));
  CK(cuMemsetD8(s->src, 7, s->bytes));
  CK(cuMemAlloc(&s->credit, MAX_SLOTS * LINE));
  CK(cuMemsetD8(s->credit, 0, MAX_SLOTS * LINE));
  for (unsigned l = 0; l < s->lanes; ++l) CK(cuStreamCreate(&s->tx[l], CU_STREAM_NON_BLOCKING));
  CK(cuCtxSynchronize());
}

int main(void) {
  struct setup s;
  memset(&s, 0, sizeof s);
  s.bytes = env_size("BYTES", 256u << 20);
  s.chunk = env_size("CHUNK", 8u << 20);
  s.nslots = (unsigned)env_size("SLOTS", 4);
  s.lanes = (unsigned)env_size("LANES", 2);
  int reps = (int)env_size("REPS", 20);
  if (!s.chunk || !s.nslots || s.nslots > MAX_SLOTS || !s.lanes || s.lanes > MAX_LANES) {
    fprintf(stderr, "slot_chunks: CHUNK > 0, SLOTS 1-%d, LANES 1-%d\n", MAX_SLOTS, MAX_LANES);
    return 1;
  }
  CK(cuInit(0));
  make(&s);
  size_t chunks = (s.bytes + s.chunk - 1) / s.chunk;
  static const char *names[] = {"direct", "chain", "nocopy", "nowait"};
  double direct = 0;
  printf("slot_chunks: %zu bytes, %zu chunks of %zu, %u slots, %u sender lanes\n", s.bytes,
         chunks, s.chunk, s.nslots, s.lanes);
  for (int m = 0; m < 4; ++m) {
    double us = time_mode(&s, m, reps);
    if (m == 0) direct = us;
    printf("%-7s %10.1f us %8.1f GB/s %8.2f us per chunk beyond direct\n", names[m], us,
           s.bytes / us * 1e-3, m ? (us - direct) / chunks : 0.0);
  }
  return 0;
}
