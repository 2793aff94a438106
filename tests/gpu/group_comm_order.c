/*
 * group_comm_order.c -- a group holding operations of two communicators, every rank grouping
 * them the same way on one stream, must finish with exact results whatever order each process
 * happens to keep its communicators in. N processes (mpirun -np N, 2 by default in the device
 * rounds): communicators A and B over all; even ranks initialise them as A then B, odd ranks
 * as B then A (in one group each, so the handles lie in memory in opposite orders). Then
 * ROUNDS (GROUP_ORDER_ROUNDS) groups of {AllReduce on A, AllReduce on B, AllGather on A, send
 * to the next rank and receive from the previous on B} on one stream, at a small and a large
 * size, and every result is checked (GROUP_ORDER_MIXED=1: every rank but 0 calls the
 * collectives one by one instead). A watchdog fails the run after
 * GROUP_ORDER_TIMEOUT_S seconds (a hang is what this looks for). Prints PASS/FAIL on rank 0.
 * Build like reuse.c (mpicc).
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nccl.h"

#define ROUNDS 20

static int rank, nranks;

static void watchdog(int sig) {
  (void)sig;
  const char msg[] = "FAIL group_comm_order: watchdog fired (hung)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(3);
}

#define CHECK(what, x)                                                                  \
  do {                                                                                  \
    if ((x) != 0) {                                                                     \
      fprintf(stderr, "FAIL group_comm_order: rank %d: %s: %s\n", rank, what,          \
              ncclGetLastError(NULL));                                                  \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                     \
    }                                                                                   \
  } while (0)

/* A CUDA call that failed (under MPS on one GPU a client's allocation can), named as such
 * rather than passed on as a NULL buffer. */
#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "FAIL group_comm_order: rank %d: %s: %s\n", rank, #x,            \
              cudaGetErrorString(e_));                                                  \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                     \
    }                                                                                   \
  } while (0)

/* Counts the elements of `d` that are not `want`, printing the first (which check, size,
 * round, index, value) and the span of the wrong ones. */
static long count_wrong(const char *what, int k, const float *d, size_t n,
                        float (*want)(size_t, void *), void *arg) {
  float *h = malloc(n * sizeof(float));
  cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
  long bad = 0;
  size_t first = 0, last = 0;
  for (size_t i = 0; i < n; i++)
    if (h[i] != want(i, arg)) {
      if (bad++ == 0) first = i;
      last = i;
    }
  if (bad)
    fprintf(stderr,
            "rank %d: %s of %zu floats, round %d: %ld wrong in [%zu, %zu]; [%zu] = %g, not %g\n",
            rank, what, n, k, bad, first, last, first, h[first], want(first, arg));
  free(h);
  return bad;
}

/* Rank r's all-reduce input on communicator c (0: A, 1: B) in round k: small integers, so the
 * float sums are exact. */
static float input(int c, int r, int k, size_t i) { return (float)((i % 97) + 10 * c + r + k % 5); }

struct want_sum { int c, k; };
static float sum_of(size_t i, void *a) {
  struct want_sum *w = a;
  float sum = 0;
  for (int r = 0; r < nranks; r++) sum += input(w->c, r, w->k, i);
  return sum;
}
struct want_gather { size_t per; int k; };
static float gathered(size_t i, void *a) {
  struct want_gather *w = a;
  return (float)(i / w->per * 1000 + i % w->per % 89 + w->k % 3);
}
struct want_p2p { int from, k; };
static float received(size_t i, void *a) {
  struct want_p2p *w = a;
  return (float)(i % 83 + 7 * w->from + w->k % 4);
}

static void fill(float *d, size_t n, float (*f)(size_t, void *), void *arg) {
  float *h = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = f(i, arg);
  cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
  /* From pageable memory cudaMemcpy may return before the bytes reach the GPU, and the
   * group's stream does not wait for the legacy stream. */
  cudaDeviceSynchronize();
  free(h);
}
struct fill_in { int c, r, k; };
static float fill_input(size_t i, void *a) {
  struct fill_in *w = a;
  return input(w->c, w->r, w->k, i);
}
static float fill_block(size_t i, void *a) {
  struct want_gather *w = a;
  return (float)(rank * 1000 + i % 89 + w->k % 3);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *nr = getenv("GROUP_ORDER_ROUNDS");
  int rounds = nr ? atoi(nr) : ROUNDS;
  const char *one = getenv("ONE_GPU");
  cudaSetDevice(one && atoi(one) == 1 ? 0 : rank);
  const char *t = getenv("GROUP_ORDER_TIMEOUT_S");
  signal(SIGALRM, watchdog);
  alarm(t ? (unsigned)atoi(t) : 120);

  ncclUniqueId ids[2];
  if (rank == 0) {
    CHECK("ncclGetUniqueId", ncclGetUniqueId(&ids[0]));
    CHECK("ncclGetUniqueId", ncclGetUniqueId(&ids[1]));
  }
  MPI_Bcast(ids, sizeof ids, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comms[2];
  /* GROUP_ORDER_SAME=1: both ranks initialise A then B (the handles' order then usually
   * agrees), to tell an ordering fault from one of two communicators on a stream. */
  const char *same = getenv("GROUP_ORDER_SAME");
  int same_order = same && atoi(same) == 1;
  const char *mix = getenv("GROUP_ORDER_MIXED");
  int mixed = mix && atoi(mix) == 1;
  CHECK("ncclGroupStart", ncclGroupStart());
  for (int j = 0; j < 2; j++) {
    int c = rank % 2 == 0 || same_order ? j : 1 - j;
    CHECK("ncclCommInitRank", ncclCommInitRank(&comms[c], nranks, ids[c], rank));
  }
  CHECK("ncclGroupEnd", ncclGroupEnd());
  printf("rank %d: handles A %p B %p\n", rank, (void *)comms[0], (void *)comms[1]);

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t sizes[2] = {256, (size_t)16 << 20}; /* floats: 1 KiB and 64 MiB */
  long bad = 0;
  for (int z = 0; z < 2; z++) {
    size_t n = sizes[z];
    float *ar[2], *ag_in, *ag_out, *tx, *rx;
    CHECK_CUDA(cudaMalloc((void **)&ar[0], n * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&ar[1], n * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&ag_in, n * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&ag_out, nranks * n * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&tx, n * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&rx, n * sizeof(float)));
    for (int k = 0; k < rounds; k++) {
      for (int c = 0; c < 2; c++) {
        struct fill_in f = {c, rank, k};
        fill(ar[c], n, fill_input, &f);
      }
      struct want_gather g = {n, k};
      fill(ag_in, n, fill_block, &g);
      struct want_p2p p = {rank, k};
      fill(tx, n, received, &p);
      /* Rank 1 of a mixed run calls the collectives one by one (the send/receive pair still
       * grouped): NCCL runs a group's communicators side by side, so that must match too. */
      int grouped = !(mixed && rank != 0);
      if (grouped) CHECK("ncclGroupStart", ncclGroupStart());
      CHECK("AllReduce A", ncclAllReduce(ar[0], ar[0], n, ncclFloat, ncclSum, comms[0], s));
      CHECK("AllReduce B", ncclAllReduce(ar[1], ar[1], n, ncclFloat, ncclSum, comms[1], s));
      CHECK("AllGather A", ncclAllGather(ag_in, ag_out, n, ncclFloat, comms[0], s));
      if (!grouped) CHECK("ncclGroupStart", ncclGroupStart());
      CHECK("Send B", ncclSend(tx, n, ncclFloat, (rank + 1) % nranks, comms[1], s));
      CHECK("Recv B", ncclRecv(rx, n, ncclFloat, (rank + nranks - 1) % nranks, comms[1], s));
      CHECK("ncclGroupEnd", ncclGroupEnd());
      if (cudaStreamSynchronize(s) != cudaSuccess) {
        fprintf(stderr, "FAIL group_comm_order: rank %d: stream failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      for (int c = 0; c < 2; c++) {
        struct want_sum w = {c, k};
        bad += count_wrong(c ? "AllReduce B" : "AllReduce A", k, ar[c], n, sum_of, &w);
      }
      bad += count_wrong("AllGather A", k, ag_out, nranks * n, gathered, &g);
      struct want_p2p from = {(rank + nranks - 1) % nranks, k};
      bad += count_wrong("Recv B", k, rx, n, received, &from);
    }
    cudaFree(ar[0]);
    cudaFree(ar[1]);
    cudaFree(ag_in);
    cudaFree(ag_out);
    cudaFree(tx);
    cudaFree(rx);
  }
  long all = 0;
  MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  for (int c = 0; c < 2; c++) ncclCommDestroy(comms[c]);
  if (rank == 0) {
    if (all == 0)
      printf("PASS group_comm_order: %d ranks, %d groups of two communicators%s, 0 wrong\n",
             nranks, 2 * rounds, mixed ? " (ranks but 0 calling one by one)" : "");
    else printf("FAIL group_comm_order: %ld wrong elements\n", all);
  }
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
