// Can one process drive both directions of a two-GPU exchange at full speed, by queueing the
// peer's direction on the PEER GPU's copy engine (a stream of its own on that GPU, in a second
// context of this process)? (Issue 5, measured 2026-11-23: a send waits for its peer's receive so each
// side can push its own data, because one GPU pushing and pulling at once halves both
// directions; that wait ties the two hosts together.) MPI, 2 ranks, rank r on GPU r.
//
//   1. each rank pushes its own 256 MiB (the baseline, both copy engines busy);
//   2. rank 0 pushes its own and pulls rank 1's on its own GPU (two streams);
//   3. rank 0 pushes its own on GPU 0 and queues rank 1's on a stream of GPU 1 in a context of
//      its own there (the source mapped from rank 1 through an IPC handle, the destination
//      reached through peer access), rank 1 idle;
//   4. as 3 while rank 1 runs a kernel that holds every SM of GPU 1 (does a second context's
//      copy wait for another process's kernel? time-slicing);
// and what the second context costs: free memory on GPU 1 before and after it is made.
//
// nvcc -O2 -arch=sm_90 -o /tmp/cross_issue tests/gpu/cross_issue.cu -lcuda -lmpi \
//   -I/usr/lib/x86_64-linux-gnu/openmpi/include -L/usr/lib/x86_64-linux-gnu/openmpi/lib
// mpirun --allow-run-as-root --bind-to none -np 2 /tmp/cross_issue
#include <cuda.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    CUresult r_ = (x);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char* s_ = 0;                                                              \
      cuGetErrorString(r_, &s_);                                                       \
      fprintf(stderr, "rank %d: %s failed: %s (line %d)\n", rank, #x, s_, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

static const size_t N = 256u << 20;
static const int REPS = 20;
static int rank;

static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

__global__ void spin(unsigned long long cycles) {
  unsigned long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CK(cuInit(0));
  CUdevice dev[2];
  CK(cuDeviceGet(&dev[0], 0));
  CK(cuDeviceGet(&dev[1], 1));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev[rank]));
  CK(cuCtxSetCurrent(ctx));
  CUdeviceptr src, dst;
  CK(cuMemAlloc(&src, N));
  CK(cuMemAlloc(&dst, N));
  CK(cuMemsetD8(src, 1 + rank, N));
  CUipcMemHandle h[2][2];  // [rank][src, dst]
  CK(cuIpcGetMemHandle(&h[rank][0], src));
  CK(cuIpcGetMemHandle(&h[rank][1], dst));
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, h, sizeof(h[0]), MPI_BYTE, MPI_COMM_WORLD);
  CUdeviceptr peer_dst, peer_src;
  CK(cuIpcOpenMemHandle(&peer_dst, h[1 - rank][1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CK(cuIpcOpenMemHandle(&peer_src, h[1 - rank][0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CUstream s_a, s_b;
  CK(cuStreamCreate(&s_a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s_b, CU_STREAM_NON_BLOCKING));

  // 1. Each pushes its own.
  for (int pass = 0; pass < 2; pass++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < REPS; i++) CK(cuMemcpyAsync(peer_dst, src, N, s_a));
    CK(cuStreamSynchronize(s_a));
    double t = now() - t0;
    if (pass == 1) printf("rank %d: 1. each rank pushes its own: %.1f GB/s\n", rank, REPS * N / t / 1e9);
  }
  // 2. Rank 0 pushes its own and pulls rank 1's.
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int pass = 0; pass < 2; pass++) {
      double t0 = now();
      for (int i = 0; i < REPS; i++) {
        CK(cuMemcpyAsync(peer_dst, src, N, s_a));
        CK(cuMemcpyAsync(dst, peer_src, N, s_b));
      }
      CK(cuStreamSynchronize(s_a));
      CK(cuStreamSynchronize(s_b));
      double t = now() - t0;
      if (pass == 1) printf("rank 0: 2. pushes its own and pulls the peer's on GPU 0: %.1f GB/s each way\n", REPS * N / t / 1e9);
    }
  }
  // The second context: rank 1 reads its free memory before and after rank 0 makes it.
  size_t free_before = 0, free_after = 0, total = 0;
  if (rank == 1) CK(cuMemGetInfo(&free_before, &total));
  MPI_Barrier(MPI_COMM_WORLD);
  CUcontext ctx1 = 0;
  CUdeviceptr src1_in_ctx1 = 0;
  CUstream s_1 = 0;
  if (rank == 0) {
    CK(cuDevicePrimaryCtxRetain(&ctx1, dev[1]));
    CK(cuCtxSetCurrent(ctx1));
    CK(cuIpcOpenMemHandle(&src1_in_ctx1, h[1][0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CUresult pr = cuCtxEnablePeerAccess(ctx, 0);  // our GPU 0 memory from GPU 1's context
    if (pr != CUDA_SUCCESS && pr != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CK(pr);
    CK(cuStreamCreate(&s_1, CU_STREAM_NON_BLOCKING));
    CK(cuCtxSetCurrent(ctx));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    CK(cuMemGetInfo(&free_after, &total));
    printf("rank 1: GPU 1 free memory %.1f MiB before rank 0's context there, %.1f after (%.1f MiB taken)\n",
           free_before / 1048576.0, free_after / 1048576.0, ((double)free_before - free_after) / 1048576.0);
  }
  // 3. and 4.
  for (int with_kernel = 0; with_kernel < 2; with_kernel++) {
    CUevent k_done = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1 && with_kernel) {
      CK(cuEventCreate(&k_done, CU_EVENT_DEFAULT));
      int sms = 0;
      CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev[1]));
      spin<<<sms * 8, 1024, 0, (cudaStream_t)s_a>>>(2000000000ull);  // ~1 s at ~1.9 GHz
      CK(cuEventRecord(k_done, s_a));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      for (int pass = 0; pass < 2; pass++) {
        double t0 = now();
        for (int i = 0; i < REPS / 2; i++) {
          CK(cuMemcpyAsync(peer_dst, src, N, s_a));
          CK(cuCtxSetCurrent(ctx1));
          CK(cuMemcpyAsync(dst, src1_in_ctx1, N, s_1));
          CK(cuCtxSetCurrent(ctx));
        }
        CK(cuStreamSynchronize(s_a));
        double ta = now() - t0;
        CK(cuCtxSetCurrent(ctx1));
        CK(cuStreamSynchronize(s_1));
        CK(cuCtxSetCurrent(ctx));
        double tb = now() - t0;
        printf("rank 0: %s. pushes its own on GPU 0 (%.1f GB/s) and queues rank 1's on GPU 1's engine "
               "(%.1f GB/s)%s\n", with_kernel ? "4" : "3", REPS / 2 * N / ta / 1e9, REPS / 2 * N / tb / 1e9,
               with_kernel ? ", while rank 1's kernel holds every SM of GPU 1" : "");
      }
    }
    if (rank == 1 && with_kernel) {
      double t0 = now();
      CK(cuEventSynchronize(k_done));
      printf("rank 1: its spin kernel ended %.3f s after rank 0's copies began\n", now() - t0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // 5. The same copy on GPU 1's stream, but through the addresses of GPU 0's context (rank 1's
  // buffer as rank 0's context mapped it, a flag written into rank 1's memory likewise): can
  // the second context use the first one's mappings, with peer access?
  if (rank == 0) {
    CK(cuMemsetD8(dst, 0, N));
    CK(cuCtxSetCurrent(ctx1));
    CUresult w = cuStreamWriteValue32(s_1, peer_dst + N - 4, 0x07070707u, 0);
    CUresult c = cuMemcpyAsync(dst, peer_src, N, s_1);
    CUresult y = cuStreamSynchronize(s_1);
    CK(cuCtxSetCurrent(ctx));
    unsigned char last = 0;
    CK(cuMemcpyDtoH(&last, dst + N - 1, 1));
    printf("rank 0: 5. GPU 1's stream through GPU 0's context's mappings: flag write %d, copy %d, sync %d, "
           "last byte %u (expect 2)\n", (int)w, (int)c, (int)y, last);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    unsigned int v = 0;
    CK(cuMemcpyDtoH(&v, dst + N - 4, 4));
    printf("rank 1: flag word written from rank 0's second context: %#x (expect 0x7070707)\n", v);
    CK(cuMemsetD8(dst + N - 4, 1, 4));
  }
  // 6. A smaller stack for the second context: does its memory come back?
  if (rank == 1) CK(cuMemGetInfo(&free_before, &total));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    CK(cuCtxSetCurrent(ctx1));
    size_t st = 0;
    CK(cuCtxGetLimit(&st, CU_LIMIT_STACK_SIZE));
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 256));
    CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 << 20));
    CK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 16));
    CK(cuCtxSetCurrent(ctx));
    printf("rank 0: second context's stack was %zu B, now 256\n", st);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    CK(cuMemGetInfo(&free_after, &total));
    printf("rank 1: GPU 1 free memory %.1f MiB -> %.1f after shrinking the second context's limits\n",
           free_before / 1048576.0, free_after / 1048576.0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Data check: rank 0's dst holds rank 1's bytes (2), rank 1's dst rank 0's (1).
  unsigned char b = 0;
  CK(cuMemcpyDtoH(&b, dst + N - 1, 1));
  printf("rank %d: last byte received %u (expect %d)\n", rank, b, 2 - rank);
  MPI_Finalize();
  return 0;
}
