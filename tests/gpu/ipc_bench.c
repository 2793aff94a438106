// Copy-engine throughput between two processes through CUDA IPC mappings (mpirun -np 2):
// push (write the peer's buffer), pull (read the peer's buffer), both directions at once, and
// one process doing both directions. Build: mpicc ipc_bench.c -I/usr/local/cuda/include
// -L/usr/local/cuda/lib64 -lcudart
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static int rank;
static char *src, *dst, *psrc, *pdst;
static cudaStream_t s[2];

// who: bitmask of ranks that copy; how: 0 push, 1 pull, 2 both directions from this rank.
static void once(size_t bytes, int who, int how) {
  if (!(who & (1 << rank))) return;
  if (how == 0 || how == 2) CK(cudaMemcpyAsync(pdst, src, bytes, cudaMemcpyDefault, s[0]));
  if (how == 1 || how == 2) CK(cudaMemcpyAsync(dst, psrc, bytes, cudaMemcpyDefault, s[1]));
}

static void bench(const char *name, size_t bytes, int who, int how) {
  for (int i = 0; i < 2; i++) once(bytes, who, how);
  CK(cudaDeviceSynchronize()); MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime(); int reps = 10;
  for (int i = 0; i < reps; i++) once(bytes, who, how);
  CK(cudaDeviceSynchronize()); MPI_Barrier(MPI_COMM_WORLD);
  double t = (MPI_Wtime() - t0) / reps;
  if (rank == 0) printf("%-28s %zu bytes: %.1f us, %.1f GB/s per copy\n", name, bytes, t * 1e6, bytes / t / 1e9);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t big = 512ul << 20;
  CK(cudaSetDevice(rank));
  CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&src, big)); CK(cudaMalloc((void **)&dst, big));
  cudaIpcMemHandle_t h[2], ph[2];
  CK(cudaIpcGetMemHandle(&h[0], src)); CK(cudaIpcGetMemHandle(&h[1], dst));
  MPI_Sendrecv(h, sizeof h, MPI_BYTE, 1 - rank, 0, ph, sizeof ph, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CK(cudaIpcOpenMemHandle((void **)&psrc, ph[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&pdst, ph[1], cudaIpcMemLazyEnablePeerAccess));
  size_t sizes[] = {512ul << 20, 8ul << 20};
  for (int z = 0; z < 2; z++) {
    size_t b = sizes[z];
    bench("push, rank 0 only", b, 1, 0);
    bench("pull, rank 1 only", b, 2, 1);
    bench("push, both ranks", b, 3, 0);
    bench("pull, both ranks", b, 3, 1);
    bench("rank 0 pushes and pulls", b, 1, 2);
  }
  MPI_Finalize();
  return 0;
}
