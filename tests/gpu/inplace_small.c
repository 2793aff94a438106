/*
 * inplace_small.c -- small sends past the point-to-point kernel's 8 slots, received in place.
 * Two processes (mpirun -np 2), one GPU each, both doing the same group: MSGS sends of BYTES to
 * the peer, each from its own place of `buf`, then MSGS receives from the peer: the first into
 * the place of send 9 (past the slots: libccl reads that send from a snapshot taken before the
 * group), the second into the place of send 2 (held until sends 0-2 have read), the rest into
 * `out`. Every send must carry what its place held before the group. Before the snapshots such
 * a group could hang (each rank's held receive waiting for a send that waited for the other's
 * credit). Rounds of it with fresh patterns; a hang is caught by the caller's timeout. Prints
 * PASS/FAIL on rank 0. Build with mpicc, -I ffi/include -I/usr/local/cuda/include, linking
 * libnccl.so.2 and libcudart.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

#define MSGS 12
#define BYTES (32 << 10)
#define PAST 9 /* a send past the slots */
#define NEAR 2 /* a send within them */

static unsigned char pattern(int rank, int round, int msg, long i) {
  return (unsigned char)(rank * 101 + round * 37 + msg * 13 + i * 7 + 1);
}

/* Where receive j lands: the place of send PAST, of send NEAR, or its own place in `out`. */
static unsigned char *landing(int j, unsigned char *buf, unsigned char *out) {
  if (j == 0) return buf + (long)PAST * BYTES;
  if (j == 1) return buf + (long)NEAR * BYTES;
  return out + (long)j * BYTES;
}

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    printf("FAIL inplace_small: init on rank %d: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  int peer = 1 - rank, rounds = 50;
  long size = (long)MSGS * BYTES, bad = 0;
  unsigned char *buf, *out, *h = malloc(size), *got = malloc(size);
  cudaMalloc((void **)&buf, size);
  cudaMalloc((void **)&out, size);
  cudaStream_t s;
  cudaStreamCreate(&s);
  for (int r = 0; r < rounds; r++) {
    for (int m = 0; m < MSGS; m++)
      for (long i = 0; i < BYTES; i++) h[(long)m * BYTES + i] = pattern(rank, r, m, i);
    cudaMemcpy(buf, h, size, cudaMemcpyHostToDevice);
    cudaMemset(out, 0, size);
    ncclGroupStart();
    for (int m = 0; m < MSGS; m++) ncclSend(buf + (long)m * BYTES, BYTES, ncclUint8, peer, comm, s);
    for (int j = 0; j < MSGS; j++) ncclRecv(landing(j, buf, out), BYTES, ncclUint8, peer, comm, s);
    if (ncclGroupEnd() != ncclSuccess) {
      printf("FAIL inplace_small: group on rank %d: %s\n", rank, ncclGetLastError(comm));
      return 1;
    }
    cudaStreamSynchronize(s);
    for (int j = 0; j < MSGS; j++) {
      cudaMemcpy(got, landing(j, buf, out), BYTES, cudaMemcpyDeviceToHost);
      for (long i = 0; i < BYTES; i++) bad += got[i] != pattern(peer, r, j, i);
    }
  }
  long total = 0;
  MPI_Reduce(&bad, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s inplace_small: %d rounds of %d sends of %d bytes each way, receives in place into "
           "sends %d and %d: %ld wrong bytes\n",
           total == 0 ? "PASS" : "FAIL", rounds, MSGS, BYTES, PAST, NEAR, total);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return total != 0;
}
