// The kernel tests/gpu/module_load_probe.cu loads as a module of its own.
extern "C" __global__ void probe_kernel(int* f) {
  if (f == nullptr) *f = 0;
}
