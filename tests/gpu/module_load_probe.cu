// Does loading a module (or a function's first launch under lazy loading), or another driver
// call libccl makes after setup (allocations, frees, registrations, streams, events, VMM maps),
// wait for kernels and stream waits already running on the device, and does it hold up other
// threads' launches?
// On 2026-11-23 tests/gpu/two_comms.c hung about 1 run in 3 with all four ranks of two
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
#include <functional>
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

// Starts the blocker and the watchdog that releases it 2 s later.
static pthread_t arm(bool kernel, cudaStream_t s) {
  start_blocker(kernel, s);
  pthread_t w;
  pthread_create(&w, nullptr, watchdog, nullptr);
  return w;
}

// Waits for the watchdog, releases the blocker if still held, and lets the device drain.
static void disarm(pthread_t w) {
  pthread_join(w, nullptr);
  *hflag = 1;
  cudaDeviceSynchronize();
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

// Other driver calls libccl makes after setup, each timed while a blocker runs (the set-up
// step runs while the device is idle), then again with another thread launching the kernel
// that releases the blocker while the call is in progress.
struct Action {
  const char* name;
  std::function<void()> setup, call;
};
static std::vector<Action> actions() {
  static CUdeviceptr dptr;
  static void *hptr, *reg;
  static CUstream st;
  static CUevent ev;
  static CUmemGenericAllocationHandle vh;
  static CUdeviceptr va;
  static size_t gran;
  auto vmm_prop = [] {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
  };
  // Creates one granule, reserves an address for it, maps it and grants this device access.
  auto vmm_map = [vmm_prop] {
    CUmemAllocationProp p = vmm_prop();
    CK(cuMemCreate(&vh, gran, &p, 0));
    CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    CK(cuMemMap(va, gran, 0, vh, 0));
    CUmemAccessDesc a = {};
    a.location = p.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, gran, &a, 1));
  };
  return {
      {"cuMemAlloc 1 MiB", [] {}, [] { CK(cuMemAlloc(&dptr, 1 << 20)); }},
      {"cuMemFree 1 MiB", [] { CK(cuMemAlloc(&dptr, 1 << 20)); }, [] { CK(cuMemFree(dptr)); }},
      {"cuMemAlloc 1 GiB", [] {}, [] { CK(cuMemAlloc(&dptr, 1ull << 30)); }},
      {"cuMemFree 1 GiB", [] { CK(cuMemAlloc(&dptr, 1ull << 30)); }, [] { CK(cuMemFree(dptr)); }},
      {"cuMemHostAlloc 1 MiB", [] {}, [] { CK(cuMemHostAlloc(&hptr, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP)); }},
      {"cuMemFreeHost 1 MiB", [] { CK(cuMemHostAlloc(&hptr, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP)); },
       [] { CK(cuMemFreeHost(hptr)); }},
      {"cuMemHostRegister 1 MiB", [] { reg = aligned_alloc(4096, 1 << 20); },
       [] { CK(cuMemHostRegister(reg, 1 << 20, CU_MEMHOSTREGISTER_DEVICEMAP)); }},
      {"cuMemHostUnregister 1 MiB",
       [] {
         reg = aligned_alloc(4096, 1 << 20);
         CK(cuMemHostRegister(reg, 1 << 20, CU_MEMHOSTREGISTER_DEVICEMAP));
       },
       [] { CK(cuMemHostUnregister(reg)); }},
      {"cuStreamCreate", [] {}, [] { CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING)); }},
      {"cuStreamDestroy", [] { CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING)); }, [] { CK(cuStreamDestroy(st)); }},
      {"cuEventCreate", [] {}, [] { CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)); }},
      {"cuEventDestroy", [] { CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)); }, [] { CK(cuEventDestroy(ev)); }},
      {"cuIpcGetMemHandle", [] { CK(cuMemAlloc(&dptr, 1 << 20)); },
       [] {
         CUipcMemHandle h;
         CK(cuIpcGetMemHandle(&h, dptr));
       }},
      {"VMM create+reserve+map+access 2 MiB",
       [vmm_prop] {
         CUmemAllocationProp p = vmm_prop();
         CK(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
       },
       vmm_map},
      {"VMM unmap+release+free 2 MiB", vmm_map,
       [] {
         CK(cuMemUnmap(va, gran));
         CK(cuMemRelease(vh));
         CK(cuMemAddressFree(va, gran));
       }},
  };
}

struct act_arg {
  const Action* a;
  double t0, t1;
};
static void* run_action(void* p) {
  act_arg* x = (act_arg*)p;
  CK(cuCtxSetCurrent(ctx));
  x->t0 = now_ms();
  x->a->call();
  x->t1 = now_ms();
  return nullptr;
}

// Another thread makes `a`'s call while the blocker runs; this one then launches the kernel
// that releases the blocker and reports, as `label`, whether that launch waited for the call.
// Returns the call's own times.
static act_arg launch_beside(const Action& a, cudaStream_t s3, const char* label) {
  act_arg x{&a, 0, 0};
  pthread_t t;
  pthread_create(&t, nullptr, run_action, &x);
  usleep(20 * 1000);
  double t0 = now_ms();
  set_flag<<<1, 1, 0, s3>>>(dflag);
  double t1 = now_ms();
  pthread_join(t, nullptr);
  verdict(label, t0, t1);
  return x;
}

static void probe_actions(cudaStream_t s1, cudaStream_t s3) {
  for (const Action& a : actions()) {
    char what[160];
    // Same thread, the blocker (a spinning kernel) running.
    a.setup();
    pthread_t w = arm(true, s1);
    double t0 = now_ms();
    a.call();
    double t1 = now_ms();
    snprintf(what, sizeof what, "[spinning kernel] %s", a.name);
    verdict(what, t0, t1);
    disarm(w);
    // Another thread makes the call: does this thread's launch wait for it?
    a.setup();
    w = arm(true, s1);
    snprintf(what, sizeof what, "[spinning kernel] launch beside another thread's %s", a.name);
    launch_beside(a, s3, what);
    disarm(w);
  }
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

  for (int kernel = 1; kernel >= 0 && !getenv("PROBE_ACTIONS_ONLY"); kernel--) {
    const char* b = kernel ? "spinning kernel" : "stream wait";
    char what[128];
    // 1. cuModuleLoadData + cuModuleGetFunction while the blocker runs.
    pthread_t w = arm(kernel, s1);
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
    disarm(w);

    // 3. Function loaded while idle, first launched while the blocker runs.
    CUmodule m2;
    CUfunction f2 = load(&m2);
    w = arm(kernel, s1);
    t0 = now_ms();
    launch(f2, s2);
    t1 = now_ms();
    snprintf(what, sizeof what, "[%s] first launch, module loaded while idle", b);
    verdict(what, t0, t1);
    disarm(w);

    // 4. Another thread loads a module while the blocker runs; this thread then launches an
    // already-used kernel that releases the blocker: is that launch held up by the load?
    const Action module_load{"module load", [] {}, [] {
                               CUmodule lm;
                               load(&lm);
                             }};
    w = arm(kernel, s1);
    snprintf(what, sizeof what, "[%s] launch (releases the blocker) beside a load", b);
    act_arg la = launch_beside(module_load, s3, what);
    snprintf(what, sizeof what, "[%s] ... the other thread's load", b);
    verdict(what, la.t0, la.t1);
    disarm(w);
    cuModuleUnload(m);
    cuModuleUnload(m2);
  }
  if (!getenv("PROBE_MODULES_ONLY")) probe_actions(s1, s3);
  printf("done\n");
  return 0;
}
