/*
 * peer_dies.c -- on the GPU path, a peer that dies while an operation waits for it must turn
 * into an async error promptly (PyTorch's watchdog polls ncclCommGetAsyncError and aborts),
 * not a silent hang. Two processes (fork before any CUDA call), GPU 0 and GPU 1: both do one
 * all-reduce; then the child exits without destroying its communicator while the parent
 * queues a 64 MiB all-reduce that can never finish. The parent polls ncclCommGetAsyncError
 * for up to 20 s and expects an error, then aborts the communicator. Build like two_comms.c.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "nccl.h"

int main(void) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  pid_t pid = fork();
  int rank = pid == 0 ? 1 : 0;
  size_t n = 16 << 20;
  ncclComm_t comm;
  float *buf;
  cudaStream_t st;
  int started = start_rank("peer_dies", 2, id, rank, 0, n, &comm, &buf, &st);
  if (started >= 0) return started;
  if (rank == 1) _exit(0); /* dies: no destroy, no goodbye */
  int status;
  waitpid(pid, &status, 0);
  ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, st);
  double t0 = now();
  ncclResult_t a = ncclSuccess;
  while (now() - t0 < 20) {
    ncclCommGetAsyncError(comm, &a);
    if (a != ncclSuccess && a != ncclInProgress) break;
    usleep(10000);
  }
  int pass = a == ncclRemoteError || a == ncclSystemError;
  printf("%s peer_dies: async error %d after %.2f s: %s\n", pass ? "PASS" : "FAIL", a, now() - t0,
         ncclGetLastError(comm));
  ncclCommAbort(comm);
  return !pass;
}
