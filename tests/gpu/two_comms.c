/*
 * two_comms.c -- issue 4's stream-order check on the GPU machine: one process, two GPUs, two
 * communicator sets (ncclCommInitAll twice), each driven by its own thread on its own streams,
 * 10,000 all-reduces each (small and large sizes mixed, so both the low-latency kernel and the
 * copy-engine pipeline run), each followed by a 256-byte send/receive exchange and a 64-byte
 * all-gather (the point-to-point and exchange kernels), all at once. It must finish (a watchdog fails it after
 * TWO_COMMS_TIMEOUT_S seconds) and every result must be exact. Then both ranks' all-reduce
 * captured into CUDA graphs in one group, launched three times, must be exact, and the
 * communicator must still work eagerly.
 *
 *   gcc -O2 -std=gnu11 -I ffi/include -I /usr/local/cuda/include tests/gpu/two_comms.c \
 *       -L .dev -Wl,-rpath,$PWD/.dev -l:libnccl.so.2 -L /usr/local/cuda/lib64 -lcudart \
 *       -lpthread -o two_comms
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

#define NDEV 2
#define CHECK_CUDA(x)                                                                 \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)
#define CHECK_NCCL(x)                                                                   \
  do {                                                                                  \
    ncclResult_t r_ = (x);                                                              \
    if (r_ != ncclSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %d %s\n", __FILE__, __LINE__, #x, r_, ncclGetLastError(NULL)); \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

static int iters = 10000;

/* TWO_COMMS_ONE_GPU=1: both ranks of each set on GPU 0 (a machine with one GPU). */
static int one_gpu = 0;
static int gpu(int d) { return one_gpu ? 0 : d; }

/* Floats of the small send/receive (256 bytes) and of each rank's all-gather block (64). */
#define SMALL 64
#define GATHER 16
static float small_value(int set, int rank) { return (float)(10 * set + rank + 1); }

struct set {
  int id;
  ncclComm_t comms[NDEV];
  cudaStream_t streams[NDEV];
  float *buf[NDEV];
  float *small_send[NDEV], *small_recv[NDEV], *gathered[NDEV];
  size_t max_count;
  long bad;
};

static void *drive(void *arg) {
  struct set *s = arg;
  /* Counts cycle through the low-latency range, the one-stream range and the pipeline. */
  const size_t counts[] = {2, 1000, 16384, 200000, 4 << 20};
  for (int i = 0; i < iters; i++) {
    size_t count = counts[i % 5];
    if (count > s->max_count) count = s->max_count;
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < NDEV; d++)
      CHECK_NCCL(ncclAllReduce(s->buf[d], s->buf[d], count, ncclFloat, ncclSum, s->comms[d], s->streams[d]));
    CHECK_NCCL(ncclGroupEnd());
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < NDEV; d++) {
      CHECK_NCCL(ncclSend(s->small_send[d], SMALL, ncclFloat, 1 - d, s->comms[d], s->streams[d]));
      CHECK_NCCL(ncclRecv(s->small_recv[d], SMALL, ncclFloat, 1 - d, s->comms[d], s->streams[d]));
    }
    CHECK_NCCL(ncclGroupEnd());
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < NDEV; d++)
      CHECK_NCCL(ncclAllGather(s->small_send[d], s->gathered[d], GATHER, ncclFloat, s->comms[d], s->streams[d]));
    CHECK_NCCL(ncclGroupEnd());
    /* Values double each step; reset every 20 steps to stay exact. */
    if (i % 20 == 19) {
      for (int d = 0; d < NDEV; d++) {
        CHECK_CUDA(cudaSetDevice(gpu(d)));
        CHECK_CUDA(cudaStreamSynchronize(s->streams[d]));
        float *h = malloc(s->max_count * sizeof(float));
        CHECK_CUDA(cudaMemcpy(h, s->buf[d], s->max_count * sizeof(float), cudaMemcpyDeviceToHost));
        /* Element 0 took part in all 20 steps: 1 * 2^20. */
        if (h[0] != (float)(1 << 20)) {
          if (s->bad < 5) fprintf(stderr, "set %d dev %d iter %d: got %f want %f\n", s->id, d, i, h[0], (float)(1 << 20));
          s->bad++;
        }
        for (size_t k = 0; k < s->max_count; k++) h[k] = 1.0f;
        /* The peer's constant came in; the all-gather holds both ranks' in rank order. */
        float got[SMALL], all[NDEV * GATHER];
        CHECK_CUDA(cudaMemcpy(got, s->small_recv[d], sizeof got, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(all, s->gathered[d], sizeof all, cudaMemcpyDeviceToHost));
        for (int k = 0; k < SMALL; k++)
          if (got[k] != small_value(s->id, 1 - d)) {
            if (s->bad < 5) fprintf(stderr, "set %d dev %d iter %d: small receive [%d] = %f\n", s->id, d, i, k, got[k]);
            s->bad++;
            break;
          }
        for (int k = 0; k < NDEV * GATHER; k++)
          if (all[k] != small_value(s->id, k / GATHER)) {
            if (s->bad < 5) fprintf(stderr, "set %d dev %d iter %d: small all-gather [%d] = %f\n", s->id, d, i, k, all[k]);
            s->bad++;
            break;
          }
        CHECK_CUDA(cudaMemset(s->small_recv[d], 0, SMALL * sizeof(float)));
        CHECK_CUDA(cudaMemset(s->gathered[d], 0, NDEV * GATHER * sizeof(float)));
        CHECK_CUDA(cudaMemcpy(s->buf[d], h, s->max_count * sizeof(float), cudaMemcpyHostToDevice));
        free(h);
      }
    }
  }
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    CHECK_CUDA(cudaStreamSynchronize(s->streams[d]));
  }
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  const char msg[] = "FAIL two_comms: watchdog fired (deadlock or far too slow)\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(3);
}

int main(int argc, char **argv) {
  if (argc > 1) iters = atoi(argv[1]);
  const char *t = getenv("TWO_COMMS_TIMEOUT_S");
  signal(SIGALRM, on_alarm);
  alarm(t ? atoi(t) : 300);
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  one_gpu = getenv("TWO_COMMS_ONE_GPU") && atoi(getenv("TWO_COMMS_ONE_GPU")) == 1;
  if (ndev < NDEV && !one_gpu) {
    printf("SKIP two_comms: %d GPU(s)\n", ndev);
    return 0;
  }
  struct set sets[2];
  int devs[NDEV] = {gpu(0), gpu(1)};
  for (int k = 0; k < 2; k++) {
    struct set *s = &sets[k];
    memset(s, 0, sizeof *s);
    s->id = k;
    s->max_count = 4 << 20;
    CHECK_NCCL(ncclCommInitAll(s->comms, NDEV, devs));
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaStreamCreateWithFlags(&s->streams[d], cudaStreamNonBlocking));
      CHECK_CUDA(cudaMalloc((void **)&s->buf[d], s->max_count * sizeof(float)));
      float *h = malloc(s->max_count * sizeof(float));
      for (size_t i = 0; i < s->max_count; i++) h[i] = 1.0f;
      CHECK_CUDA(cudaMemcpy(s->buf[d], h, s->max_count * sizeof(float), cudaMemcpyHostToDevice));
      free(h);
      float v[SMALL];
      for (int k = 0; k < SMALL; k++) v[k] = small_value(s->id, d);
      CHECK_CUDA(cudaMalloc((void **)&s->small_send[d], sizeof v));
      CHECK_CUDA(cudaMalloc((void **)&s->small_recv[d], sizeof v));
      CHECK_CUDA(cudaMalloc((void **)&s->gathered[d], NDEV * GATHER * sizeof(float)));
      CHECK_CUDA(cudaMemcpy(s->small_send[d], v, sizeof v, cudaMemcpyHostToDevice));
      /* The runtime loads its memset kernel at the first cudaMemset; a module load waits for
       * the whole device and holds up other threads' driver calls, so it must not first happen
       * in a checking thread while the other thread's ranks wait on each other (one GPU). */
      CHECK_CUDA(cudaMemset(s->small_recv[d], 0, sizeof v));
      CHECK_CUDA(cudaMemset(s->gathered[d], 0, NDEV * GATHER * sizeof(float)));
    }
  }
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, drive, &sets[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  long bad = sets[0].bad + sets[1].bad;
  printf("%s two_comms: 2 communicator sets x %d all-reduces, small send/receives and small all-gathers on 2 GPUs concurrently, %ld wrong\n",
         bad ? "FAIL" : "PASS", iters, bad);

  /* Graph capture: both ranks' in-place all-reduces captured in one group (each rank's stream
   * captures its own graph; libccl captures the two communicators on threads of their own, as
   * they meet at capture), each graph launched three times on new inputs: exact. */
  cudaStream_t cs[NDEV];
  cudaGraph_t g[NDEV];
  cudaGraphExec_t ge[NDEV];
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs[d], cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamBeginCapture(cs[d], cudaStreamCaptureModeRelaxed));
  }
  ncclResult_t r = ncclGroupStart();
  for (int d = 0; d < NDEV && r == ncclSuccess; d++)
    r = ncclAllReduce(sets[0].buf[d], sets[0].buf[d], 16, ncclFloat, ncclSum, sets[0].comms[d], cs[d]);
  ncclResult_t re = ncclGroupEnd();
  if (r == ncclSuccess) r = re;
  cudaError_t ce = cudaSuccess;
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    cudaError_t e = cudaStreamEndCapture(cs[d], &g[d]);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&ge[d], g[d], 0);
    if (ce == cudaSuccess) ce = e;
  }
  long cap_bad = 0;
  for (int it = 0; it < 3 && r == ncclSuccess && ce == cudaSuccess; it++) {
    float in[16], out[16];
    for (int d = 0; d < NDEV; d++) {
      for (int i = 0; i < 16; i++) in[i] = (float)(100 * it + 10 * d + i);
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaMemcpy(sets[0].buf[d], in, sizeof in, cudaMemcpyHostToDevice));
    }
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaGraphLaunch(ge[d], cs[d]));
    }
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaStreamSynchronize(cs[d]));
      CHECK_CUDA(cudaMemcpy(out, sets[0].buf[d], sizeof out, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 16; i++) {
        float want = 0;
        for (int q = 0; q < NDEV; q++) want += (float)(100 * it + 10 * q + i);
        cap_bad += out[i] != want;
      }
    }
  }
  int cap_ok = r == ncclSuccess && ce == cudaSuccess && cap_bad == 0;
  printf("%s capture: both ranks' all-reduce captured in one group returned %d (%s), end/instantiate: %s, 3 launches, %ld wrong\n",
         cap_ok ? "PASS" : "FAIL", r, r == ncclSuccess ? "" : ncclGetLastError(NULL), cudaGetErrorString(ce), cap_bad);

  /* A captured group over two streams per rank: the all-reduce on the capturing stream, an
   * all-gather on a second stream forked from it and joined back. */
  cudaStream_t cs2[NDEV];
  cudaEvent_t fork_ev[NDEV], join_ev[NDEV];
  cudaGraph_t g2[NDEV];
  cudaGraphExec_t ge2[NDEV];
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs2[d], cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&fork_ev[d], cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&join_ev[d], cudaEventDisableTiming));
    CHECK_CUDA(cudaMemset(sets[0].gathered[d], 0, NDEV * GATHER * sizeof(float)));
    CHECK_CUDA(cudaStreamBeginCapture(cs[d], cudaStreamCaptureModeRelaxed));
    CHECK_CUDA(cudaEventRecord(fork_ev[d], cs[d]));
    CHECK_CUDA(cudaStreamWaitEvent(cs2[d], fork_ev[d], 0));
  }
  ncclResult_t r2 = ncclGroupStart();
  for (int d = 0; d < NDEV && r2 == ncclSuccess; d++) {
    r2 = ncclAllReduce(sets[0].buf[d], sets[0].buf[d], 16, ncclFloat, ncclSum, sets[0].comms[d], cs[d]);
    if (r2 == ncclSuccess)
      r2 = ncclAllGather(sets[0].small_send[d], sets[0].gathered[d], GATHER, ncclFloat, sets[0].comms[d], cs2[d]);
  }
  re = ncclGroupEnd();
  if (r2 == ncclSuccess) r2 = re;
  cudaError_t ce2 = cudaSuccess;
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    CHECK_CUDA(cudaEventRecord(join_ev[d], cs2[d]));
    CHECK_CUDA(cudaStreamWaitEvent(cs[d], join_ev[d], 0));
    cudaError_t e = cudaStreamEndCapture(cs[d], &g2[d]);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&ge2[d], g2[d], 0);
    if (ce2 == cudaSuccess) ce2 = e;
  }
  long two_bad = 0;
  if (r2 == ncclSuccess && ce2 == cudaSuccess) {
    float in[16], out[16], all[NDEV * GATHER];
    for (int d = 0; d < NDEV; d++) {
      for (int i = 0; i < 16; i++) in[i] = (float)(7 * d + i);
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaMemcpy(sets[0].buf[d], in, sizeof in, cudaMemcpyHostToDevice));
    }
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaGraphLaunch(ge2[d], cs[d]));
    }
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(gpu(d)));
      CHECK_CUDA(cudaStreamSynchronize(cs[d]));
      CHECK_CUDA(cudaMemcpy(out, sets[0].buf[d], sizeof out, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(all, sets[0].gathered[d], sizeof all, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 16; i++) {
        float want = 0;
        for (int q = 0; q < NDEV; q++) want += (float)(7 * q + i);
        two_bad += out[i] != want;
      }
      for (int k = 0; k < NDEV * GATHER; k++) two_bad += all[k] != small_value(0, k / GATHER);
    }
  }
  int two_ok = r2 == ncclSuccess && ce2 == cudaSuccess && two_bad == 0;
  printf("%s capture over two streams per rank: all-reduce and all-gather in one group returned %d (%s), end/instantiate: %s, %ld wrong\n",
         two_ok ? "PASS" : "FAIL", r2, r2 == ncclSuccess ? "" : ncclGetLastError(NULL), cudaGetErrorString(ce2), two_bad);
  cap_ok = cap_ok && two_ok;
  /* Eager calls after the captured ones: the pair still works. */
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < NDEV; d++)
    CHECK_NCCL(ncclAllReduce(sets[0].buf[d], sets[0].buf[d], 16, ncclFloat, ncclSum, sets[0].comms[d], sets[0].streams[d]));
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(gpu(d)));
    CHECK_CUDA(cudaStreamSynchronize(sets[0].streams[d]));
  }
  printf("PASS after capture: communicator still works\n");
  for (int k = 0; k < 2; k++)
    for (int d = 0; d < NDEV; d++) CHECK_NCCL(ncclCommDestroy(sets[k].comms[d]));
  return bad || !cap_ok;
}
