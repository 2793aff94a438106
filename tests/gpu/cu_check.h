/* cu_check.h -- CK(x) for the driver-API probes of tests/gpu: a CUresult other than
 * CUDA_SUCCESS prints where and what, and exits 1. Include after <cuda.h>, <stdio.h> and
 * <stdlib.h>; found beside the including file, so the probes' gcc lines need no -I for it. */
#ifndef CCL_CU_CHECK_H
#define CCL_CU_CHECK_H

#define CK(x)                                                        \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      const char *s_ = "?";                                          \
      cuGetErrorString(r_, &s_);                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                       \
    }                                                                \
  } while (0)

#endif
