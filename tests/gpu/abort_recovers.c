/*
 * abort_recovers.c -- PyTorch's in-process recovery on the GPU path: one rank of three dies
 * while the others' all-reduce waits for it; each survivor sees the async error, calls
 * ncclCommAbort (timed: it must return within 1 s), checks that its stream with the dead
 * operation on it drains (the GPU is usable again), then the survivors make a new
 * communicator of two in the same processes and run exact all-reduces, on the old stream and
 * on a new one. Three processes forked before any CUDA call, GPUs by rank (ONE_GPU=1: all on
 * GPU 0). ABORT_OP / ABORT_COUNT choose the operation left waiting (see pending_op).
 * REVOKE=1: NCCL 2.28's way instead of the abort and a new communicator: ncclCommRevoke (timed
 * the same), then ncclCommShrink of the dead rank with NCCL_SHRINK_DEFAULT. Prints one line
 * per survivor and PASS / FAIL. Build like two_comms.c.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "nccl.h"

/* Polls a stream for up to `secs`: its seconds to drain, or -1 if it did not. */
static double drain(cudaStream_t st, double secs) {
  double t0 = now();
  while (now() - t0 < secs) {
    cudaError_t e = cudaStreamQuery(st);
    if (e == cudaSuccess) return now() - t0;
    if (e != cudaErrorNotReady) return -2;
    usleep(1000);
  }
  return -1;
}

/* An all-reduce of `n` floats of value rank+1 on `st` over `comm`: 1 if exact. */
static int exact_all_reduce(ncclComm_t comm, int rank, float *buf, size_t n, cudaStream_t st) {
  float *h = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1);
  cudaMemcpy(buf, h, n * sizeof(float), cudaMemcpyHostToDevice);
  if (ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st) != ncclSuccess) return 0;
  if (drain(st, 20) < 0) return 0;
  cudaMemcpy(h, buf, n * sizeof(float), cudaMemcpyDeviceToHost);
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) ok = h[i] == 3.0f; /* ranks 0 and 1: 1 + 2 */
  free(h);
  return ok;
}

/* The operation left waiting for the dead rank: ABORT_OP=all_gather, or an all-reduce;
 * ABORT_COUNT floats (per rank for the all-gather), by default the whole buffer (a copy-engine
 * path); a few thousand take the low-latency kernels, which spin on the GPU instead. */
static void pending_op(ncclComm_t comm, float *buf, size_t n, cudaStream_t st) {
  const char *op = getenv("ABORT_OP"), *c = getenv("ABORT_COUNT");
  size_t count = c ? strtoull(c, NULL, 10) : n;
  if (op && strcmp(op, "all_gather") == 0) {
    if (count * 4 > n) count = n / 4;
    ncclAllGather(buf, buf + count, count, ncclFloat, comm, st);
  } else {
    ncclAllReduce(buf, buf, count < n ? count : n, ncclFloat, ncclSum, comm, st);
  }
}

static int survivor(int rank, ncclComm_t comm, float *buf, size_t n, cudaStream_t st, int fd[2]) {
  pending_op(comm, buf, n, st);
  double t0 = now();
  ncclResult_t a = ncclSuccess;
  while (now() - t0 < 20) {
    ncclCommGetAsyncError(comm, &a);
    if (a != ncclSuccess && a != ncclInProgress) break;
    usleep(1000);
  }
  double detect = now() - t0;
  int revoke = getenv("REVOKE") != NULL;
  double t1 = now();
  int ended = revoke ? ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclSuccess
                     : (ncclCommAbort(comm), 1);
  double abort_s = now() - t1;
  double drained = drain(st, 5);
  ncclComm_t c2;
  int init;
  if (revoke) {
    int dead = 2;
    init = ncclCommShrink(comm, &dead, 1, &c2, NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess;
  } else {
    ncclUniqueId id;
    if (rank == 0) {
      ncclGetUniqueId(&id);
      if (write(fd[1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    } else if (read(fd[0], &id, sizeof id) != (ssize_t)sizeof id) {
      return 1;
    }
    init = ncclCommInitRank(&c2, 2, id, rank) == ncclSuccess;
  }
  cudaStream_t st2;
  cudaStreamCreate(&st2);
  int on_new = init && exact_all_reduce(c2, rank, buf, n, st2);
  int on_old = init && drained >= 0 && exact_all_reduce(c2, rank, buf, 1024, st);
  int pass = a != ncclSuccess && ended && abort_s <= 1.0 && on_new && on_old;
  printf("%s abort_recovers rank %d: async error %d after %.2f s, %s returned in %.3f s, "
         "old stream drained %s (%.3f s), %s %s, exact all-reduce on a new stream %s, "
         "on the old stream %s\n",
         pass ? "PASS" : "FAIL", rank, (int)a, detect, revoke ? "revoke" : "abort", abort_s,
         drained >= 0 ? "yes" : "no", drained, revoke ? "shrunk communicator" : "new communicator",
         init ? "made" : "failed", on_new ? "yes" : "no", on_old ? "yes" : "no");
  fflush(stdout);
  if (init) ncclCommDestroy(c2);
  if (revoke) ncclCommDestroy(comm);
  return pass ? 0 : 1;
}

int main(void) {
  ncclUniqueId id;
  int fd[2];
  if (ncclGetUniqueId(&id) != ncclSuccess || pipe(fd) != 0) return 2;
  pid_t one = fork();
  pid_t two = one == 0 ? -1 : fork();
  int rank = one == 0 ? 1 : two == 0 ? 2 : 0;
  size_t n = 16 << 20;
  ncclComm_t comm;
  float *buf;
  cudaStream_t st;
  int started = start_rank("abort_recovers", 3, id, rank, 1, n, &comm, &buf, &st);
  if (started >= 0) return started;
  if (rank == 2) _exit(0); /* dies: no destroy, no goodbye */
  if (rank == 0) waitpid(two, NULL, 0);
  int rc = survivor(rank, comm, buf, n, st, fd);
  if (rank == 1) _exit(rc);
  int status = 0;
  waitpid(one, &status, 0);
  return rc || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
