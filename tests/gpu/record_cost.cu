// Host time of ending each kernel with a completion marker, on a stream the GPU is running
// (host_costs.cu times calls on a stream held idle, where cuEventRecord took 0.20 us). An
// eager libccl group is one short kernel followed by an event record; with the record every
// 64th group instead, nccl-tests -C 1 (two H200s, 2026-12-01) took 6.6-7.5 us per all-reduce
// call against 10.0-10.9. Each mode below launches N kernels of about SPIN_NS each, with:
//   plain       nothing else
//   record      cuEventRecord after every kernel (a timing-free event)
//   record+q    that, and cuEventQuery of it before the next launch (a health check)
//   write-host  cuStreamWriteValue32 of a counter into pinned host memory
//   write-dev   the same into device memory
//   prog-event  the launch records the event itself (cudaLaunchAttributeProgrammaticEvent,
//               fired when every block has exited)
// and prints host us per kernel (best of 5 runs), then checks that a programmatic event is
// usable: another stream waits on it, and a query after the stream drains says done.
// nvcc -O2 -arch=sm_90 -o record_cost record_cost.cu -lcuda && ./record_cost [N] [SPIN_NS]
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CU(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char *s = 0; cuGetErrorString(e, &s); \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s ? s : "?"); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__global__ void spin(unsigned long long ns, unsigned *out) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(out, 1u);
}

enum mode { PLAIN, RECORD, RECORD_QUERY, WRITE_HOST, WRITE_DEV, PROG_EVENT, MODES };
static const char *names[MODES] = {"plain", "record", "record+q", "write-host", "write-dev", "prog-event"};

static cudaStream_t st;
static cudaEvent_t ev;
static unsigned *count, *host_word, *dev_word;
static CUdeviceptr host_word_dev;

static void launch(enum mode m, unsigned long long ns, unsigned i) {
  if (m == PROG_EVENT) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(32); cfg.blockDim = dim3(512); cfg.stream = st;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticEvent;
    a[0].val.programmaticEvent.event = ev;
    a[0].val.programmaticEvent.flags = 0;
    a[0].val.programmaticEvent.triggerAtBlockStart = 0;
    cfg.attrs = a; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, spin, ns, count));
    return;
  }
  spin<<<32, 512, 0, st>>>(ns, count);
  CK(cudaGetLastError());
  switch (m) {
    case RECORD: CK(cudaEventRecord(ev, st)); break;
    case RECORD_QUERY: {
      cudaError_t q = cudaEventQuery(ev);
      if (q != cudaErrorNotReady) CK(q);
      CK(cudaEventRecord(ev, st));
      break;
    }
    case WRITE_HOST: CU(cuStreamWriteValue32((CUstream)st, host_word_dev, i, 0)); break;
    case WRITE_DEV: CU(cuStreamWriteValue32((CUstream)st, (CUdeviceptr)dev_word, i, 0)); break;
    default: break;
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  unsigned long long ns = argc > 2 ? strtoull(argv[2], 0, 10) : 3000;
  CU(cuInit(0));
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaMalloc(&count, 64)); CK(cudaMalloc(&dev_word, 64));
  CK(cudaHostAlloc(&host_word, 64, cudaHostAllocMapped));
  CU(cuMemHostGetDevicePointer(&host_word_dev, host_word, 0));
  printf("%d kernels of %llu ns (32 blocks x 512 threads) per run, host us per kernel, best of 5:\n", n, ns);
  for (int m = 0; m < MODES; m++) {
    double best = 1e9, gpu = 0;
    for (int rep = 0; rep < 5; rep++) {
      CK(cudaStreamSynchronize(st));
      double t0 = now();
      for (int i = 0; i < n; i++) launch((enum mode)m, ns, (unsigned)i + 1);
      double t = (now() - t0) / n * 1e6;
      CK(cudaStreamSynchronize(st));
      double g = (now() - t0) / n * 1e6;
      if (t < best) { best = t; gpu = g; }
    }
    printf("  %-11s %6.2f us host, %6.2f us until the stream drained\n", names[m], best, gpu);
  }
  // A programmatic event orders another stream and reads done once its kernel has exited.
  cudaStream_t other;
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  launch(PROG_EVENT, 200000, 0);
  CK(cudaStreamWaitEvent(other, ev, 0));
  spin<<<1, 32, 0, other>>>(0, count);
  CK(cudaGetLastError());
  cudaError_t q = cudaEventQuery(ev);
  CK(cudaStreamSynchronize(other));
  cudaError_t q2 = cudaEventQuery(ev);
  printf("prog-event: query while running: %s, after the other stream drained: %s\n",
         cudaGetErrorName(q), cudaGetErrorName(q2));
  return 0;
}
