// Does loading a module (or a function's first launch under lazy loading) wait for kernels and
// stream waits already running on the device, and does it hold up other threads' launches?
// Session 19 saw tests/gpu/two_comms.c hang about 1 run in 3 with all four ranks of two
// communicator sets on one GPU, two threads; libccl compiles kernels on first use and held its
// kernel table's lock while loading one. Each case below starts something that only ends when
// a flag is set (a spinning kernel or a stream wait), then times the call under test; a
// watchdog thread sets the flag after 2 s, so a call that waits for the device returns at
// ~2000 ms instead of hanging.
//
//   nvcc -cubin -arch=sm_90 -o /tmp/probe_k.cubin tests/gpu/module_load_probe_k.cu
//   nvcc -O2 -arch=sm_90 -o /tmp/load_probe tests/gpu/module_load_probe.cu -lcuda -lpthread
//   /tmp/load_probe /tmp/probe_k.cubin            (CUDA_MODULE_LOADING=EAGER / LAZY to compare)
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char* s_ = nullptr;                                                \
      cuGetErrorString(r_, &s_);                                               \
      fprintf(stderr, "%s:%d %s: %d %s\n", __FILE__, __LINE__, #x, r_, s_);   \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

__global__ void spin_on(volatile int* f) {
  while (*f == 0) {
  }
}
__global__ void set_flag(volatile int* f) { *f = 1; }

static volatile int* hflag;
static int* dflag;
static std::vector<char> image;
static std::atomic<double> released{0};
static CUcontext ctx;

static void* watchdog(void*) {
  usleep(2000 * 1000);
  if (*hflag == 0) {
    released = now_ms();
    *hflag = 1;
  }
  return nullptr;
}

static void start_blocker(bool kernel, cudaStream_t s) {
  *hflag = 0;
  released = 0;
  if (kernel) {
    spin_on<<<1, 1, 0, s>>>(dflag);
  } else {
    CK(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ));
  }
  usleep(50 * 1000);  // let it start
}

static CUfunction load(CUmodule* m) {
  CK(cuModuleLoadData(m, image.data()));
  CUfunction f;
  CK(cuModuleGetFunction(&f, *m, "probe_kernel"));
  return f;
}

static void launch(CUfunction f, cudaStream_t s) {
  void* args[] = {&dflag};
  CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, nullptr));
}

static void verdict(const char* what, double t0, double t1) {
  double r = released.load();
  printf("%-62s %8.2f ms  %s\n", what, t1 - t0,
         r != 0 && t1 >= r ? "WAITED for the blocker (returned after the watchdog released it)"
                           : "did not wait");
}

struct loader_arg {
  double t0, t1;
};
static void* loader(void* p) {
  loader_arg* a = (loader_arg*)p;
  CK(cuCtxSetCurrent(ctx));
  CUmodule m;
  a->t0 = now_ms();
  CUfunction f = load(&m);
  (void)f;
  a->t1 = now_ms();
  return nullptr;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s probe_k.cubin\n", argv[0]);
    return 2;
  }
  FILE* fp = fopen(argv[1], "rb");
  if (!fp) return 2;
  int c;
  while ((c = fgetc(fp)) != EOF) image.push_back((char)c);
  fclose(fp);
  cudaSetDevice(0);
  cudaFree(0);
  CK(cuCtxGetCurrent(&ctx));
  CUmoduleLoadingMode mode;
  CK(cuModuleGetLoadingMode(&mode));
  printf("loading mode: %s\n", mode == CU_MODULE_LAZY_LOADING ? "LAZY" : "EAGER");
  cudaHostAlloc((void**)&hflag, 4, cudaHostAllocMapped);
  cudaHostGetDevicePointer((void**)&dflag, (void*)hflag, 0);
  cudaStream_t s1, s2, s3;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking);
  // Warm the runtime's own kernels so their lazy loads are not what we time.
  *hflag = 1;
  spin_on<<<1, 1, 0, s1>>>(dflag);
  set_flag<<<1, 1, 0, s1>>>(dflag);
  cudaDeviceSynchronize();

  for (int kernel = 1; kernel >= 0; kernel--) {
    const char* b = kernel ? "spinning kernel" : "stream wait";
    char what[128];
    pthread_t w;
    // 1. cuModuleLoadData + cuModuleGetFunction while the blocker runs.
    start_blocker(kernel, s1);
    pthread_create(&w, nullptr, watchdog, nullptr);
    CUmodule m;
    double t0 = now_ms();
    CUfunction f = load(&m);
    double t1 = now_ms();
    snprintf(what, sizeof what, "[%s] module load + get function", b);
    verdict(what, t0, t1);
    // 2. That function's first launch while the blocker still runs (lazy loading loads here).
    t0 = now_ms();
    launch(f, s2);
    t1 = now_ms();
    snprintf(what, sizeof what, "[%s] first launch of the new function", b);
    verdict(what, t0, t1);
    pthread_join(w, nullptr);
    *hflag = 1;
    cudaDeviceSynchronize();

    // 3. Function loaded while idle, first launched while the blocker runs.
    CUmodule m2;
    CUfunction f2 = load(&m2);
    start_blocker(kernel, s1);
    pthread_create(&w, nullptr, watchdog, nullptr);
    t0 = now_ms();
    launch(f2, s2);
    t1 = now_ms();
    snprintf(what, sizeof what, "[%s] first launch, module loaded while idle", b);
    verdict(what, t0, t1);
    pthread_join(w, nullptr);
    *hflag = 1;
    cudaDeviceSynchronize();

    // 4. Another thread loads a module while the blocker runs; this thread then launches an
    // already-used kernel that releases the blocker: is that launch held up by the load?
    start_blocker(kernel, s1);
    pthread_create(&w, nullptr, watchdog, nullptr);
    loader_arg la{};
    pthread_t lt;
    pthread_create(&lt, nullptr, loader, &la);
    usleep(20 * 1000);
    t0 = now_ms();
    set_flag<<<1, 1, 0, s3>>>(dflag);
    t1 = now_ms();
    snprintf(what, sizeof what, "[%s] launch (releases the blocker) beside a load", b);
    verdict(what, t0, t1);
    pthread_join(lt, nullptr);
    snprintf(what, sizeof what, "[%s] ... the other thread's load", b);
    verdict(what, la.t0, la.t1);
    pthread_join(w, nullptr);
    *hflag = 1;
    cudaDeviceSynchronize();
    cuModuleUnload(m);
    cuModuleUnload(m2);
  }
  printf("done\n");
  return 0;
}
