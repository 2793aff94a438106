/* graph_nodes.c -- what a captured collective costs and is made of. NRANKS processes (default
 * 2; forked before any CUDA call, GPUs by rank, ONE_GPU=1 all on GPU 0, under MPS with
 * tests/gpu/mps.sh) each capture ITERS (20) calls of OP (all_reduce, all_gather, alltoall,
 * broadcast) on COUNT floats per rank (16384) into one graph; rank 0 prints the graph's nodes
 * by type (and writes GRAPH_DOT, if set, with cudaGraphDebugDotPrint); then every rank times
 * REPS (50) launches of the graph and REPS x ITERS eager calls, and rank 0 prints microseconds
 * per call for both and checks the last result (all-reduce: the sum of every rank's ones). */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static ncclResult_t call(const char *op, float *in, float *out, size_t count, ncclComm_t comm,
                         cudaStream_t st) {
  if (!strcmp(op, "all_gather")) return ncclAllGather(in, out, count, ncclFloat, comm, st);
  if (!strcmp(op, "broadcast")) return ncclBroadcast(in, out, count, ncclFloat, 0, comm, st);
  if (!strcmp(op, "alltoall")) {
    int n = 0;
    ncclCommCount(comm, &n);
    size_t each = count / n;
    ncclGroupStart();
    for (int p = 0; p < n; ++p) {
      ncclSend(in + p * each, each, ncclFloat, p, comm, st);
      ncclRecv(out + p * each, each, ncclFloat, p, comm, st);
    }
    return ncclGroupEnd();
  }
  return ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, st);
}

static void print_nodes(cudaGraph_t g) {
  size_t n = 0;
  cudaGraphGetNodes(g, NULL, &n);
  cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes);
  cudaGraphGetNodes(g, nodes, &n);
  int counts[32] = {0};
  for (size_t i = 0; i < n; ++i) {
    enum cudaGraphNodeType t;
    if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && (int)t >= 0 && (int)t < 32)
      counts[t]++;
  }
  static const char *names[] = {"kernel", "memcpy", "memset", "host", "graph", "empty",
                                "wait_event", "event_record", "ext_sem_signal",
                                "ext_sem_wait", "mem_alloc", "mem_free", "batch_mem_op",
                                "conditional"};
  printf("graph_nodes: %zu nodes:", n);
  for (int t = 0; t < 32; ++t)
    if (counts[t]) printf(" %s %d", t < 14 ? names[t] : "other", counts[t]);
  printf("\n");
  free(nodes);
}

static int run(int rank, int nranks, ncclUniqueId id) {
  const char *op = getenv("OP") ? getenv("OP") : "all_reduce";
  int iters = env_int("ITERS", 20), reps = env_int("REPS", 50);
  size_t count = (size_t)env_int("COUNT", 16384);
  size_t out_count = strcmp(op, "all_gather") ? count : count * nranks;
  ncclComm_t comm;
  float *in;
  cudaStream_t st;
  int started = start_rank("graph_nodes", nranks, id, rank, 1, count, &comm, &in, &st);
  if (started >= 0) return started;
  float *out, *host = malloc(out_count * sizeof(float));
  cudaMalloc((void **)&out, out_count * sizeof(float));
  for (size_t i = 0; i < count; ++i) host[i] = 1.0f;
  cudaMemcpy(in, host, count * sizeof(float), cudaMemcpyHostToDevice);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
  for (int i = 0; i < iters; ++i) call(op, in, out, count, comm, st);
  if (cudaStreamEndCapture(st, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
    printf("FAIL graph_nodes: rank %d: capture: %s\n", rank, ncclGetLastError(comm));
    return 1;
  }
  if (rank == 0) {
    print_nodes(g);
    if (getenv("GRAPH_DOT")) cudaGraphDebugDotPrint(g, getenv("GRAPH_DOT"), 0);
  }
  cudaGraphLaunch(ge, st); /* warm-up */
  cudaStreamSynchronize(st);
  double t0 = now();
  for (int r = 0; r < reps; ++r) cudaGraphLaunch(ge, st);
  cudaStreamSynchronize(st);
  double graph_us = (now() - t0) / ((double)reps * iters) * 1e6;
  for (int i = 0; i < iters; ++i) call(op, in, out, count, comm, st);
  cudaStreamSynchronize(st);
  t0 = now();
  for (int r = 0; r < reps * iters; ++r) call(op, in, out, count, comm, st);
  cudaStreamSynchronize(st);
  double eager_us = (now() - t0) / ((double)reps * iters) * 1e6;
  cudaMemcpy(host, out, out_count * sizeof(float), cudaMemcpyDeviceToHost);
  float want = strcmp(op, "all_reduce") ? 1.0f : (float)nranks;
  size_t wrong = 0;
  for (size_t i = 0; i < out_count; ++i) wrong += host[i] != want;
  if (rank == 0)
    printf("%s graph_nodes: %s %zu floats, %d ranks: graph %.1f us per call, eager %.1f us, "
           "graph/eager %.2f, %zu wrong\n",
           wrong ? "FAIL" : "PASS", op, count, nranks, graph_us, eager_us, graph_us / eager_us,
           wrong);
  ncclCommDestroy(comm);
  return wrong != 0;
}

int main(void) {
  int nranks = env_int("NRANKS", 2), rank = 0;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  pid_t kids[8] = {0};
  for (int r = 1; r < nranks && r < 8; ++r) {
    pid_t p = fork();
    if (p == 0) {
      rank = r;
      break;
    }
    kids[r] = p;
  }
  int rc = run(rank, nranks, id);
  if (rank != 0) _exit(rc);
  for (int r = 1; r < nranks && r < 8; ++r) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    rc |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return rc;
}
