/*
 * group_vs_lone.c -- on the staged GPU path (run with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1,
 * so the two ranks talk over the network transport), a large all-reduce, all-to-all,
 * broadcast and reduce that rank 0 calls alone and rank 1 calls in a group with a send to itself must
 * still meet: whether a rank runs an operation whole on piece gates or cut into pieces may not
 * depend on what else its group holds. Likewise a 40 MiB send and receive between rank 0's
 * host memory (the host path, one message) and rank 1's GPU memory (the staged path, which
 * must not cut it into messages). One process, two ranks (ncclCommInitAll; ONE_GPU=1
 * puts both on GPU 0). Results checked exactly (int32 sums and blocks). Build like
 * two_comms.c.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

static int gpu_of(int rank) {
  const char *v = getenv("ONE_GPU");
  return v && atoi(v) == 1 ? 0 : rank;
}

#define CHECK(what, call)                                                                  \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      printf("FAIL group_vs_lone: %s returned %d: %s\n", what, (int)r_, ncclGetLastError(NULL)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2 - (gpu_of(1) == 0)) {
    printf("SKIP group_vs_lone: fewer than 2 GPUs\n");
    return 0;
  }
  ncclComm_t comms[2];
  int devs[2] = {gpu_of(0), gpu_of(1)};
  CHECK("init", ncclCommInitAll(comms, 2, devs));
  /* All-reduce of 40 MiB and all-to-all of 36 MiB blocks: above the 32 MiB pieces. */
  const size_t ar = 10u << 20, blk = 9u << 20, small = 1024;
  int *in[2], *out[2], *self_s[2], *self_r[2];
  cudaStream_t st[2];
  int *host = malloc(2 * blk * sizeof(int));
  /* Rank 0's host-memory send and receive buffers (pass 4). */
  int *h_send = malloc(ar * sizeof(int)), *h_recv = malloc(ar * sizeof(int));
  if (!host || !h_send || !h_recv) {
    printf("FAIL group_vs_lone: out of host memory\n");
    return 1;
  }
  for (int d = 0; d < 2; d++) {
    cudaSetDevice(gpu_of(d));
    cudaMalloc((void **)&in[d], 2 * blk * sizeof(int));
    cudaMalloc((void **)&out[d], 2 * blk * sizeof(int));
    cudaMalloc((void **)&self_s[d], small * sizeof(int));
    cudaMalloc((void **)&self_r[d], small * sizeof(int));
    cudaStreamCreate(&st[d]);
  }
  static const char *what[5] = {"all-reduce of 40 MiB", "all-to-all of 36 MiB blocks",
                                "broadcast of 40 MiB from rank 0", "reduce of 40 MiB to rank 1",
                                "send/receive of 40 MiB, rank 0's host memory, rank 1's GPU's"};
  for (size_t i = 0; i < ar; i++) h_send[i] = (int)(i % 1000000);
  for (int pass = 0; pass < 5; pass++) {
    memset(h_recv, 0xff, ar * sizeof(int));
    /* Inputs: rank d's element i is d * 1000003 + i (all-to-all: block q of rank d is what
     * rank q receives in block d). */
    for (int d = 0; d < 2; d++) {
      for (size_t i = 0; i < 2 * blk; i++) host[i] = (int)(d * 1000003 + i % 1000000);
      cudaSetDevice(gpu_of(d));
      cudaMemcpy(in[d], host, 2 * blk * sizeof(int), cudaMemcpyHostToDevice);
      cudaMemset(out[d], 0xff, 2 * blk * sizeof(int));
    }
    CHECK("group start", ncclGroupStart());
    for (int d = 0; d < 2; d++) {
      if (pass == 0) {
        CHECK("all-reduce", ncclAllReduce(in[d], out[d], ar, ncclInt32, ncclSum, comms[d], st[d]));
      } else if (pass == 1) {
        CHECK("all-to-all", ncclAlltoAll(in[d], out[d], blk, ncclInt32, comms[d], st[d]));
      } else if (pass == 2) {
        CHECK("broadcast", ncclBroadcast(in[d], out[d], ar, ncclInt32, 0, comms[d], st[d]));
      } else if (pass == 3) {
        CHECK("reduce", ncclReduce(in[d], out[d], ar, ncclInt32, ncclSum, 1, comms[d], st[d]));
      } else {
        CHECK("send", ncclSend(d ? (void *)in[d] : h_send, ar, ncclInt32, 1 - d, comms[d], st[d]));
        CHECK("recv", ncclRecv(d ? (void *)out[d] : h_recv, ar, ncclInt32, 1 - d, comms[d], st[d]));
      }
      if (d == 1) {
        /* Only rank 1's group holds more: a send to itself and its receive. */
        CHECK("self send", ncclSend(self_s[d], small, ncclInt32, 1, comms[d], st[d]));
        CHECK("self recv", ncclRecv(self_r[d], small, ncclInt32, 1, comms[d], st[d]));
      }
    }
    CHECK("group end", ncclGroupEnd());
    long wrong = 0;
    for (int d = 0; d < 2; d++) {
      cudaSetDevice(gpu_of(d));
      if (cudaStreamSynchronize(st[d]) != cudaSuccess) {
        printf("FAIL group_vs_lone: stream of rank %d\n", d);
        return 1;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comms[d], &async);
      if (async != ncclSuccess) {
        printf("FAIL group_vs_lone: pass %d rank %d async error %d: %s\n", pass, d, (int)async,
               ncclGetLastError(comms[d]));
        return 1;
      }
      if (pass == 4 && d == 0) {
        memcpy(host, h_recv, ar * sizeof(int));
      } else {
        cudaMemcpy(host, out[d], 2 * blk * sizeof(int), cudaMemcpyDeviceToHost);
      }
      size_t n = pass == 1 ? 2 * blk : ar;
      if (pass == 3 && d == 0) continue; /* a reduce writes only the root's output */
      for (size_t i = 0; i < n; i++) {
        int want;
        if (pass == 4) {
          want = (int)((1 - d) * 1000003 + i % 1000000);
        } else if (pass == 0 || pass == 3) {
          want = (int)(1000003 + 2 * (i % 1000000));
        } else if (pass == 2) {
          want = (int)(i % 1000000);
        } else {
          size_t q = i / blk, j = i % blk; /* block q came from rank q: its block d */
          want = (int)(q * 1000003 + (d * blk + j) % 1000000);
        }
        wrong += host[i] != want;
      }
    }
    printf("%s group_vs_lone: %s%s: %ld wrong\n", wrong ? "FAIL" : "PASS", what[pass],
           pass == 4 ? "" : ", rank 0 alone, rank 1 in a group", wrong);
    if (wrong) return 1;
  }
  for (int d = 0; d < 2; d++) ncclCommDestroy(comms[d]);
  return 0;
}
