/* mpi_allreduce: MPI_Allreduce (float, sum, out of place) measured the way ccl-perf measures
 * ncclAllReduce, so the two tables line up column for column.
 *
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce [-b 8] [-e 64M] [-f 4] [-n 20] [-w 5] [-c 1]
 *
 * Per size: count = size / 4 floats; -w warmup calls, a barrier, -n timed calls; time = mean
 * per call, maximum over ranks; algbw = size / time (1e9 B/s); busbw = algbw * 2(n-1)/n.
 * With -c 1 one more call on fresh inputs (small integers, so every sum is exact) is checked
 * element by element on every rank; #wrong is the sum over ranks. Exit status 1 on any wrong
 * element.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t parse_size(const char *s) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  switch (end && *end ? *end : 0) {
  case 'k': case 'K': v <<= 10; break;
  case 'm': case 'M': v <<= 20; break;
  case 'g': case 'G': v <<= 30; break;
  case 0: break;
  default: fprintf(stderr, "mpi_allreduce: bad size '%s'\n", s); exit(2);
  }
  return (size_t)v;
}

/* Input element i of `rank` (seed distinguishes the timed and the checked run). */
static float input(int rank, size_t i, unsigned seed) {
  unsigned long long h = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((unsigned long long)(rank + 1) << 32 ^ seed) * 0xd1b54a32d192ed03ull;
  h ^= h >> 31;
  return (float)(h % 1001); /* n * 1000 stays far below 2^24: sums are exact */
}

static void fmt_time(char *out, double us) {
  if (us >= 10000.0) sprintf(out, "%7.0f", us);
  else if (us >= 100.0) sprintf(out, "%7.1f", us);
  else sprintf(out, "%7.2f", us);
}

int main(int argc, char **argv) {
  size_t min_bytes = 8, max_bytes = (size_t)64 << 20, factor = 4;
  int iters = 20, warmup = 5, check = 1, opt;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:c:h")) != -1) {
    switch (opt) {
    case 'b': min_bytes = parse_size(optarg); break;
    case 'e': max_bytes = parse_size(optarg); break;
    case 'f': factor = strtoull(optarg, NULL, 10); break;
    case 'n': iters = atoi(optarg); break;
    case 'w': warmup = atoi(optarg); break;
    case 'c': check = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-c 0|1]\n", argv[0]);
      return 2;
    }
  }
  if (factor < 2) factor = 2;
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  size_t maxcount = max_bytes / sizeof(float);
  float *send = malloc((maxcount + 1) * sizeof(float));
  float *recv = malloc((maxcount + 1) * sizeof(float));
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (rank == 0) {
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    char *nl = strchr(ver, '\n');
    if (nl) *nl = 0;
    char *comma = strchr(ver, ',');
    if (comma) *comma = 0;
    printf("# mpi_allreduce: %s, %d ranks, MPI_Allreduce float sum out of place\n", ver, n);
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
           min_bytes, max_bytes, factor, warmup, iters, check);
    printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place\n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)");
  }
  double bw_sum = 0;
  int bw_count = 0;
  long long wrong_total = 0;
  for (size_t size = min_bytes; size <= max_bytes; size *= factor) {
    size_t count = size / sizeof(float);
    for (size_t i = 0; i < count; i++) send[i] = input(rank, i, 1);
    for (int w = 0; w < warmup; w++)
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++)
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double local = iters > 0 ? (MPI_Wtime() - t0) / iters : 0.0, secs = 0;
    MPI_Allreduce(&local, &secs, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    long long wrong = 0, wrong_sum = 0;
    if (check) {
      for (size_t i = 0; i < count; i++) {
        send[i] = input(rank, i, 2);
        recv[i] = NAN;
      }
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < n; r++) want += input(r, i, 2);
        if (recv[i] != (float)want) wrong++;
      }
      MPI_Allreduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
    wrong_total += wrong_sum;
    double algbw = secs > 0 ? (double)(count * sizeof(float)) / 1e9 / secs : 0;
    double busbw = algbw * 2.0 * (n - 1) / n;
    bw_sum += busbw;
    bw_count++;
    if (rank == 0) {
      char t[32];
      fmt_time(t, secs * 1e6);
      if (check)
        printf("%12zu  %12zu  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5lld\n", count * sizeof(float), count,
               "float", "sum", -1, t, algbw, busbw, wrong_sum);
      else
        printf("%12zu  %12zu  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5s\n", count * sizeof(float), count,
               "float", "sum", -1, t, algbw, busbw, "N/A");
      fflush(stdout);
    }
    if (size == 0) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", bw_count ? bw_sum / bw_count : 0.0);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return wrong_total ? 1 : 0;
}
