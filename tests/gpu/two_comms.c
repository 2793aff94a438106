/*
 * two_comms.c -- issue 4's stream-order check on the GPU machine: one process, two GPUs, two
 * communicator sets (ncclCommInitAll twice), each driven by its own thread on its own streams,
 * 10,000 all-reduces each (small and large sizes mixed, so both the low-latency kernel and the
 * copy-engine pipeline run), each followed by a 256-byte send/receive exchange and a 64-byte
 * all-gather (the point-to-point and exchange kernels), all at once. It must finish (a watchdog fails it after
 * TWO_COMMS_TIMEOUT_S seconds) and every result must be exact. Then a CUDA graph capture of
 * an all-reduce must fail with ncclInvalidUsage and leave the stream and communicator usable.
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
        CHECK_CUDA(cudaSetDevice(d));
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
    CHECK_CUDA(cudaSetDevice(d));
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
  if (ndev < NDEV) {
    printf("SKIP two_comms: %d GPU(s)\n", ndev);
    return 0;
  }
  struct set sets[2];
  int devs[NDEV] = {0, 1};
  for (int k = 0; k < 2; k++) {
    struct set *s = &sets[k];
    memset(s, 0, sizeof *s);
    s->id = k;
    s->max_count = 4 << 20;
    CHECK_NCCL(ncclCommInitAll(s->comms, NDEV, devs));
    for (int d = 0; d < NDEV; d++) {
      CHECK_CUDA(cudaSetDevice(d));
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
    }
  }
  pthread_t th[2];
  for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, drive, &sets[k]);
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  long bad = sets[0].bad + sets[1].bad;
  printf("%s two_comms: 2 communicator sets x %d all-reduces, small send/receives and small all-gathers on 2 GPUs concurrently, %ld wrong\n",
         bad ? "FAIL" : "PASS", iters, bad);

  /* Graph capture: refused with ncclInvalidUsage, the capture can be ended, the stream and
   * the communicator still work. */
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t cs;
  CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
  ncclResult_t r = ncclAllReduce(sets[0].buf[0], sets[0].buf[0], 16, ncclFloat, ncclSum, sets[0].comms[0], cs);
  cudaGraph_t g;
  cudaError_t ce = cudaStreamEndCapture(cs, &g);
  if (ce == cudaSuccess) cudaGraphDestroy(g);
  int cap_ok = r == ncclInvalidUsage;
  printf("%s capture: ncclAllReduce during capture returned %d (%s), end capture: %s\n",
         cap_ok ? "PASS" : "FAIL", r, ncclGetLastError(NULL), cudaGetErrorString(ce));
  /* The refused call took no sequence number: the pair still works. */
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < NDEV; d++)
    CHECK_NCCL(ncclAllReduce(sets[0].buf[d], sets[0].buf[d], 16, ncclFloat, ncclSum, sets[0].comms[d], sets[0].streams[d]));
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < NDEV; d++) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamSynchronize(sets[0].streams[d]));
  }
  printf("PASS after capture: communicator still works\n");
  for (int k = 0; k < 2; k++)
    for (int d = 0; d < NDEV; d++) CHECK_NCCL(ncclCommDestroy(sets[k].comms[d]));
  return bad || !cap_ok;
}
