// Which driver calls of one host thread wait while another thread of the process is blocked in
// a kernel launch on a full queue? (Issue 5, 2026-11-23: beside overlap.py's GEMM thread, a
// libccl send/receive call took 631 us of host time at the median against NVIDIA NCCL's 66,
// while libccl's own queueing took 20-40 us.) Thread A launches 1 ms kernels on its stream
// without end, so it soon sits in cuLaunchKernel waiting for queue space; thread B times each
// kind of call many times, then the same with thread A idle.
// nvcc -O2 -arch=sm_90 -o /tmp/lock_probe tests/gpu/driver_lock_probe.cu -lcuda && /tmp/lock_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <atomic>
#include <time.h>
#include <vector>

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

static std::atomic<bool> stop{false};
static cudaStream_t sa, sb;

static void* launcher(void*) {
  cudaSetDevice(0);
  while (!stop.load()) spin<<<1, 1, 0, sa>>>(1800000);  // ~1 ms at 1.8 GHz
  return nullptr;
}

static void report(const char* what, std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  printf("  %-34s p50 %8.1f  p90 %8.1f  p99 %8.1f  max %8.1f us\n", what, v[v.size() / 2],
         v[v.size() * 9 / 10], v[v.size() * 99 / 100], v.back());
}

static void probe(const char* label, void* dptr, cudaEvent_t ev) {
  printf("%s\n", label);
  const int n = 400;
  std::vector<double> t[9];
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    unsigned mt = 0;
    cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)dptr);
    double t1 = now_us();
    cudaEventRecord(ev, sb);
    double t2 = now_us();
    cudaStreamWaitEvent(sb, ev, 0);
    double t3 = now_us();
    cudaMemcpyAsync((char*)dptr + 64, dptr, 8, cudaMemcpyDeviceToDevice, sb);
    double t4 = now_us();
    cuStreamWriteValue32((CUstream)sb, (CUdeviceptr)dptr, i, 0);
    double t5 = now_us();
    cudaStreamQuery(sb);
    double t6 = now_us();
    // torch.cuda.Event creates its CUDA event lazily, in its first record(): a timing event
    // made and recorded per call, as overlap.py's loops do.
    cudaEvent_t fresh;
    cudaEventCreateWithFlags(&fresh, cudaEventDefault);
    double t7 = now_us();
    cudaEventRecord(fresh, sb);
    double t8 = now_us();
    cudaEventDestroy(fresh);
    double t9 = now_us();
    t[6].push_back(t7 - t6);
    t[7].push_back(t8 - t7);
    t[8].push_back(t9 - t8);
    t[0].push_back(t1 - t0);
    t[1].push_back(t2 - t1);
    t[2].push_back(t3 - t2);
    t[3].push_back(t4 - t3);
    t[4].push_back(t5 - t4);
    t[5].push_back(t6 - t5);
    struct timespec d = {0, 200000};
    nanosleep(&d, nullptr);
  }
  report("cuPointerGetAttribute", t[0]);
  report("cudaEventRecord (other stream)", t[1]);
  report("cudaStreamWaitEvent (other stream)", t[2]);
  report("cudaMemcpyAsync 8 B (other stream)", t[3]);
  report("cuStreamWriteValue32 (other stream)", t[4]);
  report("cudaStreamQuery (other stream)", t[5]);
  report("cudaEventCreate (timing)", t[6]);
  report("cudaEventRecord (fresh event)", t[7]);
  report("cudaEventDestroy", t[8]);
  cudaStreamSynchronize(sb);
}

int main() {
  cudaSetDevice(0);
  cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking);
  void* d;
  cudaMalloc(&d, 1 << 20);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  probe("thread A idle:", d, ev);
  pthread_t th;
  pthread_create(&th, nullptr, launcher, nullptr);
  struct timespec w = {1, 500000000};  // let A fill its queue
  nanosleep(&w, nullptr);
  probe("thread A blocked in launches on a full queue:", d, ev);
  stop = true;
  pthread_join(th, nullptr);
  cudaDeviceSynchronize();
  return 0;
}
