/*
 * reuse.c -- direct (zero-copy) transfers map the peer's user buffers and cache the mappings;
 * a buffer freed and reallocated (usually at the same address) must never be reached through
 * a stale mapping. Two processes (mpirun -np 2), one GPU each: for 40 rounds rank 0 allocates
 * a buffer (cudaMalloc, ncclMemAlloc, or a cudaMalloc registered with ncclCommRegister, in
 * turn), fills it with the round's pattern, sends it; rank 1 receives into a buffer it also
 * reallocates every round, checks every element, and frees it. Then an all-gather and an
 * all-to-all over freshly allocated buffers. Prints PASS/FAIL on rank 0. Build with mpicc,
 * -I ffi/include -I/usr/local/cuda/include, linking libnccl.so.2 and libcudart.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

#define N (1 << 22) /* floats: 16 MiB */

static int rank;

static float *alloc(int round, ncclComm_t comm, void **reg) {
  float *p = NULL;
  *reg = NULL;
  switch (round % 3) {
    case 0: cudaMalloc((void **)&p, N * sizeof(float)); break;
    case 1: ncclMemAlloc((void **)&p, N * sizeof(float)); break;
    default:
      cudaMalloc((void **)&p, N * sizeof(float));
      ncclCommRegister(comm, p, N * sizeof(float), reg);
  }
  return p;
}

static void release(int round, ncclComm_t comm, float *p, void *reg) {
  if (reg) ncclCommDeregister(comm, reg);
  if (round % 3 == 1) ncclMemFree(p);
  else cudaFree(p);
}

static void fill(float *d, float v, cudaStream_t s) {
  float *h = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) h[i] = v + (float)(i % 1000);
  cudaMemcpyAsync(d, h, N * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
  free(h);
}

static long wrong(const float *d, float v, long n, long stride_base) {
  float *h = malloc(n * sizeof(float));
  cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
  long bad = 0;
  for (long i = 0; i < n; i++)
    if (h[i] != v + (float)((i + stride_base) % 1000)) bad++;
  free(h);
  return bad;
}

/* ONE_GPU=1: every rank on GPU 0 (libccl allows it; NVIDIA's NCCL refuses two ranks on one
 * GPU), so a one-GPU machine runs this test too. */
static int gpu_of(int rank) {
  const char *v = getenv("ONE_GPU");
  return v && atoi(v) == 1 ? 0 : rank;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaSetDevice(gpu_of(rank));
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    printf("FAIL reuse: init on rank %d: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  cudaStream_t s;
  cudaStreamCreate(&s);
  long bad = 0;
  int rounds = 40;
  for (int r = 0; r < rounds; r++) {
    void *reg;
    float *buf = alloc(r, comm, &reg);
    if (rank == 0) fill(buf, (float)(r * 1000), s);
    else cudaMemset(buf, 0, N * sizeof(float));
    ncclGroupStart();
    if (rank == 0) ncclSend(buf, N, ncclFloat, 1, comm, s);
    else ncclRecv(buf, N, ncclFloat, 0, comm, s);
    ncclGroupEnd();
    cudaStreamSynchronize(s);
    if (rank == 1) bad += wrong(buf, (float)(r * 1000), N, 0);
    release(r, comm, buf, reg);
  }
  /* Collectives over fresh buffers each round: each rank contributes its own pattern. */
  for (int r = 0; r < 10; r++) {
    float *in, *out;
    cudaMalloc((void **)&in, N / 2 * sizeof(float));
    cudaMalloc((void **)&out, N * sizeof(float));
    float v = (float)(r * 100 + rank * 10);
    float *h = malloc(N / 2 * sizeof(float));
    for (int i = 0; i < N / 2; i++) h[i] = v + (float)(i % 1000);
    cudaMemcpy(in, h, N / 2 * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    ncclAllGather(in, out, N / 2, ncclFloat, comm, s);
    cudaStreamSynchronize(s);
    for (int q = 0; q < 2; q++) bad += wrong(out + (long)q * N / 2, (float)(r * 100 + q * 10), N / 2, 0);
    cudaFree(in);
    cudaFree(out);
  }
  long total = 0;
  MPI_Reduce(&bad, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s reuse: %d rounds of free/reallocate/send (cudaMalloc, ncclMemAlloc, registered) and 10 all-gathers over fresh buffers: %ld wrong\n",
           total == 0 ? "PASS" : "FAIL", rounds, total);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return total != 0;
}
