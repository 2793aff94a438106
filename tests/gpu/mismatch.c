/*
 * mismatch.c -- on the GPU path (cuda-ipc) a mismatched collective must fail with
 * ncclInvalidUsage and a message naming both calls, not hang. One process, two GPUs
 * (ncclCommInitAll): a group with AllReduce(count 100) on GPU 0 and AllReduce(count 200) on
 * GPU 1. Then both communicators report the error through ncclCommGetAsyncError and can be
 * aborted. Then a small send meeting a larger receive: the receiver's async error says so.
 * Build like two_comms.c.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

/* ONE_GPU=1: every rank on GPU 0 (libccl allows it; NVIDIA's NCCL refuses two ranks on one
 * GPU), so a one-GPU machine runs this test too. */
static int gpu_of(int rank) {
  const char *v = getenv("ONE_GPU");
  return v && atoi(v) == 1 ? 0 : rank;
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2 - (gpu_of(1) == 0)) {
    printf("SKIP mismatch: fewer than 2 GPUs\n");
    return 0;
  }
  ncclComm_t comms[2];
  int devs[2] = {gpu_of(0), gpu_of(1)};
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    printf("FAIL mismatch: init: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float *buf[2];
  cudaStream_t st[2];
  for (int d = 0; d < 2; d++) {
    cudaSetDevice(gpu_of(d));
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
  /* The direct paths' call board finds the mismatch inside the group call; the staged path
   * (NCCL_P2P_DISABLE=1 with both ranks on one GPU in one process) when the operations' headers
   * meet, after it: the async errors, polled as NCCL users poll them (10 s at most). */
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
    ncclCommGetAsyncError(comms[0], &a0);
    ncclCommGetAsyncError(comms[1], &a1);
    if (a0 != ncclSuccess && a0 != ncclInProgress && a1 != ncclSuccess && a1 != ncclInProgress) break;
    usleep(10000);
  }
  if (r == ncclSuccess) msg = ncclGetLastError(comms[1]);
  int pass = ok == ncclSuccess && a0 == ncclInvalidUsage && a1 == ncclInvalidUsage &&
             ((r == ncclInvalidUsage && strstr(msg, "mismatched collectives")) ||
              (r == ncclSuccess && strstr(msg, "mismatched operations")));
  printf("%s mismatch: matching group %d, mismatched group returned %d, async errors %d/%d, message: %s\n",
         pass ? "PASS" : "FAIL", ok, r, a0, a1, msg);
  for (int d = 0; d < 2; d++) ncclCommAbort(comms[d]);

  /* A small send of 8 floats meeting a receive of 16 (both through libccl's point-to-point
   * kernel): the receiver's ncclCommGetAsyncError reports ncclInvalidUsage naming the sender,
   * and nothing hangs. */
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    printf("FAIL mismatch: second init: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  ncclGroupStart();
  ncclSend(buf[0], 8, ncclFloat, 1, comms[0], st[0]);
  ncclRecv(buf[1], 16, ncclFloat, 0, comms[1], st[1]);
  ncclResult_t g = ncclGroupEnd();
  for (int d = 0; d < 2; d++) {
    cudaSetDevice(gpu_of(d));
    cudaStreamSynchronize(st[d]);
  }
  ncclResult_t p1 = ncclSuccess;
  ncclCommGetAsyncError(comms[1], &p1);
  const char *pmsg = ncclGetLastError(comms[1]);
  /* The direct path (host-only mode: no point-to-point kernel) finds the mismatch when the
   * second rank posts, inside its group call: that call returns ncclInvalidUsage naming both
   * byte counts, and nothing hangs either way. */
  const char *gmsg = ncclGetLastError(NULL);
  /* The staged path (P2P off, both ranks on one GPU in one process) names both operations. */
  int ppass = (g == ncclSuccess && p1 == ncclInvalidUsage &&
               (strstr(pmsg, "did not match") || strstr(pmsg, "mismatched operations"))) ||
              (g == ncclInvalidUsage && strstr(gmsg, "which receives"));
  if (g != ncclSuccess) pmsg = gmsg;
  printf("%s small p2p mismatch: group returned %d, receiver's async error %d, message: %s\n",
         ppass ? "PASS" : "FAIL", g, p1, pmsg);
  for (int d = 0; d < 2; d++) ncclCommAbort(comms[d]);
  return !(pass && ppass);
}
