/* common.h -- what the forked multi-process GPU tests (peer_dies.c, abort_recovers.c) share:
 * a monotonic clock and the GPU a rank runs on. */
#ifndef CCL_GPU_TEST_COMMON_H
#define CCL_GPU_TEST_COMMON_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ONE_GPU=1: every rank on GPU 0 (libccl allows it; NVIDIA's NCCL refuses two ranks on one
 * GPU), so a one-GPU machine runs the test too. Otherwise GPU `rank`, or with `wrap` the
 * ranks dealt round the visible GPUs (a test of more ranks than GPUs). */
static int gpu_of(int rank, int wrap) {
  const char *v = getenv("ONE_GPU");
  int n = 1;
  if (v && atoi(v) == 1) return 0;
  if (!wrap) return rank;
  cudaGetDeviceCount(&n);
  return rank % (n > 0 ? n : 1);
}

/* Rank `rank` of `nranks` on its GPU (gpu_of with `wrap`): a communicator, a buffer of `n`
 * floats and a stream, after one small all-reduce (every rank connected). 0 when ready; else
 * the test's exit status, having printed SKIP (no such GPU: 0) or FAIL (1). */
static int start_rank(const char *test, int nranks, ncclUniqueId id, int rank, int wrap,
                      size_t n, ncclComm_t *comm, float **buf, cudaStream_t *st) {
  if (cudaSetDevice(gpu_of(rank, wrap)) != cudaSuccess) {
    printf("SKIP %s: no GPU %d\n", test, gpu_of(rank, wrap));
    return 0;
  }
  if (ncclCommInitRank(comm, nranks, id, rank) != ncclSuccess) {
    printf("FAIL %s: rank %d init: %s\n", test, rank, ncclGetLastError(NULL));
    return 1;
  }
  cudaMalloc((void **)buf, n * sizeof(float));
  cudaStreamCreate(st);
  ncclAllReduce(*buf, *buf, 1024, ncclFloat, ncclSum, *comm, *st);
  cudaStreamSynchronize(*st);
  return -1;
}

#endif
