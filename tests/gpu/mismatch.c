/*
 * mismatch.c -- on the GPU path (cuda-ipc) a mismatched collective must fail with
 * ncclInvalidUsage and a message naming both calls, not hang. One process, two GPUs
 * (ncclCommInitAll): a group with AllReduce(count 100) on GPU 0 and AllReduce(count 200) on
 * GPU 1. Then both communicators report the error through ncclCommGetAsyncError and can be
 * aborted. Build like two_comms.c.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    printf("SKIP mismatch: fewer than 2 GPUs\n");
    return 0;
  }
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    printf("FAIL mismatch: init: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float *buf[2];
  cudaStream_t st[2];
  for (int d = 0; d < 2; d++) {
    cudaSetDevice(d);
    cudaMalloc((void **)&buf[d], 1024 * sizeof(float));
    cudaStreamCreate(&st[d]);
  }
  /* A matching one first: the board must not report a false mismatch. */
  ncclGroupStart();
  for (int d = 0; d < 2; d++) ncclAllReduce(buf[d], buf[d], 100, ncclFloat, ncclSum, comms[d], st[d]);
  ncclResult_t ok = ncclGroupEnd();
  ncclGroupStart();
  ncclAllReduce(buf[0], buf[0], 100, ncclFloat, ncclSum, comms[0], st[0]);
  ncclAllReduce(buf[1], buf[1], 200, ncclFloat, ncclSum, comms[1], st[1]);
  ncclResult_t r = ncclGroupEnd();
  const char *msg = ncclGetLastError(NULL);
  ncclResult_t a0 = ncclSuccess, a1 = ncclSuccess;
  ncclCommGetAsyncError(comms[0], &a0);
  ncclCommGetAsyncError(comms[1], &a1);
  int pass = ok == ncclSuccess && r == ncclInvalidUsage && strstr(msg, "mismatched collectives") &&
             a0 == ncclInvalidUsage && a1 == ncclInvalidUsage;
  printf("%s mismatch: matching group %d, mismatched group returned %d, async errors %d/%d, message: %s\n",
         pass ? "PASS" : "FAIL", ok, r, a0, a1, msg);
  for (int d = 0; d < 2; d++) ncclCommAbort(comms[d]);
  return !pass;
}
