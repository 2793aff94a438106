/*
 * coll_check.c -- MPI-driven correctness test of every libccl collective through the C ABI.
 *
 *   mpicc -std=gnu11 -O2 -Wall -Wextra -I ffi/include tests/abi/coll_check.c \
 *         -L target/debug -Wl,-rpath,$PWD/target/debug -lnccl -lm -ldl -o target/abi/coll_check
 *   mpirun --allow-run-as-root --oversubscribe -np 4 target/abi/coll_check
 *
 * One communicator over all MPI ranks (ncclUniqueId from rank 0 via MPI_Bcast). Then:
 *   * AllReduce, Broadcast, Bcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter
 *     x all 12 dtypes x ops {Sum, Prod, Max, Min, Avg, PreMulSum(host-immediate scalar),
 *     PreMulSum(device-resident scalar)} x {out-of-place, in-place} x counts {0,1,7,1000,100003}
 *     x roots {0, 1, n-1}. Buffers are host memory (malloc), stream NULL.
 *     In-place means NCCL's aliasing: AllReduce/Broadcast/Reduce sendbuff == recvbuff;
 *     AllGather sendbuff = recvbuff + rank*count; ReduceScatter recvbuff = sendbuff +
 *     rank*recvcount; Gather (root) sendbuff = recvbuff + root*count; Scatter (root) recvbuff =
 *     sendbuff + root*count. AlltoAll is tested out-of-place only (NCCL defines no in-place
 *     alltoall). Bcast is in-place by definition.
 *   * Send/Recv: ring shifts by every distance (incl. self) in a group, send-first and
 *     recv-first; all peers in one group (sends first / recvs first / interleaved); ungrouped
 *     pairs; several collectives aggregated in one group.
 *   * Extra semantics: the output must not be written outside its range (guard bytes), the
 *     input must not be modified (out-of-place), the recvbuff of non-roots (Reduce, Gather) and
 *     the sendbuff of non-roots (Broadcast, Scatter) are never touched and may be NULL.
 *   * Count/UserRank/GetAsyncError; bad arguments return the right code without hanging and
 *     leave a message in ncclGetLastError; the communicator still works afterwards.
 *
 * Exactness: inputs are small integers chosen per dtype so that every partial sum/product in
 * any order is exactly representable (e4m3: |x| <= 16 exact, e5m2: 8, bf16: 256, fp16: 2048),
 * so results are compared exactly (-0 == +0). PreMulSum uses scalar 0.5 (float types) or 2
 * (integer types), also exact. Avg on integer types must equal the sum divided by nranks
 * truncated toward zero (exact check). Avg on float types is checked with a tolerance of
 * nranks+1 ulp of the destination type at the larger of the expected value and the mean of the
 * inputs' magnitudes, because sum-then-divide and
 * pre-multiply-by-1/n round differently when 1/n is not a power of two (with 4 ranks the
 * tolerance is never needed).
 *
 * Completion: on the host backend a "stream" is the calling thread, so an operation is complete
 * when its call (or ncclGroupEnd) returns. If a function named by COLL_CHECK_SYNC_FN (default
 * "cudaStreamSynchronize") is present in the process, it is called with the NULL stream after
 * every operation.
 *
 * Environment: COLL_CHECK_QUICK=1 (counts {0,1,7,1000}, root 0 only), COLL_CHECK_ONLY=<name>
 * (run only collectives whose name contains <name>), COLL_CHECK_TIMEOUT=<s> (per-test watchdog,
 * default 120), COLL_CHECK_VERBOSE=1.
 *
 * Output: failures as "FAIL ...", then on rank 0 "coll_check: N passed, M failed"; exit 1 on any
 * failure (every rank).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

/* ===================================================================== global state ===== */
static int g_rank, g_nranks;
static ncclComm_t g_comm;
static long g_pass, g_fail;
static int g_verbose, g_quick;
static const char* g_only;
static unsigned g_timeout = 120;
static char g_current[256] = "startup";
static int (*g_sync_fn)(void*) = NULL;

#define MAX_FAIL_PRINTS 40
static int g_fail_prints;

static void failf(const char* fmt, ...) {
  if (g_fail_prints >= MAX_FAIL_PRINTS) return;
  g_fail_prints++;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL rank %d: ", g_rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

static void on_alarm(int sig) {
  (void)sig;
  char buf[400];
  int n = snprintf(buf, sizeof buf, "TIMEOUT rank %d after %us in: %s\n", g_rank, g_timeout,
                   g_current);
  if (n > 0) {
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
  }
  _exit(3);
}

static void begin_test(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_current, sizeof g_current, fmt, ap);
  va_end(ap);
  alarm(g_timeout);
  if (g_verbose && g_rank == 0) {
    printf("  %s\n", g_current);
    fflush(stdout);
  }
}

static int sync_stream(void) {
  if (g_sync_fn) return g_sync_fn(NULL) == 0;
  return 1;
}

/* ===================================================================== dtypes =========== */
typedef struct {
  ncclDataType_t dt;
  const char* name;
  int size;
  int isfloat;
  int issigned;
  double exact; /* every integer in [-exact, exact] is representable (and no overflow) */
  int ebits, mbits, bias; /* for fp16/bf16/fp8 */
  int fn;                 /* e4m3 "fn": no infinities, S.1111.111 is NaN, max 448 */
} DT;

static const DT DTS[12] = {
    {ncclInt8, "int8", 1, 0, 1, 127, 0, 0, 0, 0},
    {ncclUint8, "uint8", 1, 0, 0, 255, 0, 0, 0, 0},
    {ncclInt32, "int32", 4, 0, 1, 2147483647.0, 0, 0, 0, 0},
    {ncclUint32, "uint32", 4, 0, 0, 4294967295.0, 0, 0, 0, 0},
    {ncclInt64, "int64", 8, 0, 1, 9007199254740992.0, 0, 0, 0, 0},
    {ncclUint64, "uint64", 8, 0, 0, 9007199254740992.0, 0, 0, 0, 0},
    {ncclFloat16, "half", 2, 1, 1, 2048, 5, 10, 15, 0},
    {ncclFloat32, "float", 4, 1, 1, 16777216.0, 8, 23, 127, 0},
    {ncclFloat64, "double", 8, 1, 1, 9007199254740992.0, 11, 52, 1023, 0},
    {ncclBfloat16, "bfloat16", 2, 1, 1, 256, 8, 7, 127, 0},
    {ncclFloat8e4m3, "f8e4m3", 1, 1, 1, 16, 4, 3, 7, 1},
    {ncclFloat8e5m2, "f8e5m2", 1, 1, 1, 8, 5, 2, 15, 0},
};

/* ---- small-float codec (fp16, bf16, e4m3, e5m2), round to nearest even ---- */
static uint32_t mf_encode(double v, int ebits, int mbits, int bias, int fn) {
  uint32_t sign = 0;
  uint32_t emax_field = (1u << ebits) - 1;
  if (isnan(v)) return fn ? ((emax_field << mbits) | ((1u << mbits) - 1))
                          : ((emax_field << mbits) | (1u << (mbits - 1)));
  if (signbit(v)) {
    sign = 1u << (ebits + mbits);
    v = -v;
  }
  if (v == 0) return sign;
  /* largest finite */
  int max_biased = fn ? (int)emax_field : (int)emax_field - 1;
  double max_man = fn ? (2.0 - 2.0 * ldexp(1.0, -mbits)) : (2.0 - ldexp(1.0, -mbits));
  double maxval = ldexp(max_man, max_biased - bias);
  int e;
  (void)frexp(v, &e); /* v = m * 2^e, m in [0.5,1) */
  int E = e - 1;      /* v = 1.f * 2^E */
  uint32_t bits;
  if (E + bias >= 1) {
    double frac = (v / ldexp(1.0, E) - 1.0) * ldexp(1.0, mbits);
    double q = rint(frac);
    uint32_t biased = (uint32_t)(E + bias);
    if (q >= ldexp(1.0, mbits)) {
      q = 0;
      biased++;
    }
    bits = (biased << mbits) | (uint32_t)q;
  } else {
    double q = rint(v / ldexp(1.0, 1 - bias - mbits));
    bits = (uint32_t)q; /* may carry into the exponent field: that is the right encoding */
  }
  /* overflow */
  double back;
  {
    uint32_t b = bits;
    uint32_t ef = b >> mbits, mf = b & ((1u << mbits) - 1);
    back = ef ? ldexp(1.0 + mf / ldexp(1.0, mbits), (int)ef - bias) : ldexp((double)mf, 1 - bias - mbits);
    if (!fn && ef == emax_field) back = INFINITY;
    if (fn && ef == emax_field && mf == (1u << mbits) - 1) back = INFINITY;
  }
  if (back > maxval) {
    if (fn) return sign | (emax_field << mbits) | ((1u << mbits) - 1); /* NaN */
    return sign | (emax_field << mbits);                                  /* inf */
  }
  return sign | bits;
}

static double mf_decode(uint32_t b, int ebits, int mbits, int bias, int fn) {
  uint32_t emax_field = (1u << ebits) - 1;
  int neg = (b >> (ebits + mbits)) & 1;
  uint32_t ef = (b >> mbits) & emax_field, mf = b & ((1u << mbits) - 1);
  double v;
  if (fn) {
    if (ef == emax_field && mf == (1u << mbits) - 1) return NAN;
  } else if (ef == emax_field) {
    return mf ? NAN : (neg ? -INFINITY : INFINITY);
  }
  if (ef == 0)
    v = ldexp((double)mf, 1 - bias - mbits);
  else
    v = ldexp(1.0 + mf / ldexp(1.0, mbits), (int)ef - bias);
  return neg ? -v : v;
}

static void put(const DT* d, void* buf, size_t i, double v) {
  unsigned char* p = (unsigned char*)buf + i * (size_t)d->size;
  switch (d->dt) {
    case ncclInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case ncclFloat64: { memcpy(p, &v, 8); break; }
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t x = (uint16_t)mf_encode(v, d->ebits, d->mbits, d->bias, d->fn);
      memcpy(p, &x, 2);
      break;
    }
    default: {
      uint8_t x = (uint8_t)mf_encode(v, d->ebits, d->mbits, d->bias, d->fn);
      memcpy(p, &x, 1);
      break;
    }
  }
}

static double get(const DT* d, const void* buf, size_t i) {
  const unsigned char* p = (const unsigned char*)buf + i * (size_t)d->size;
  switch (d->dt) {
    case ncclInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; memcpy(&x, p, 8); return x; }
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return mf_decode(x, d->ebits, d->mbits, d->bias, d->fn);
    }
    default: {
      uint8_t x;
      memcpy(&x, p, 1);
      return mf_decode(x, d->ebits, d->mbits, d->bias, d->fn);
    }
  }
}

/* value as stored in dtype d (rounding to the type) */
static double as_type(const DT* d, double v) {
  unsigned char tmp[8];
  put(d, tmp, 0, v);
  return get(d, tmp, 0);
}

static double ulp_of(const DT* d, double x) {
  if (!d->isfloat) return 0;
  int e;
  x = fabs(x);
  int E = (x == 0) ? (1 - d->bias) : (frexp(x, &e), e - 1);
  if (E < 1 - d->bias) E = 1 - d->bias;
  return ldexp(1.0, E - d->mbits);
}

/* Self-test of the codec against known encodings (runs on every rank, counts as tests). */
static void codec_selftest(void) {
  struct { int dti; double v; uint32_t bits; } cases[] = {
      {6, 1.0, 0x3c00}, {6, -2.0, 0xc000}, {6, 65504.0, 0x7bff}, {6, 0.5, 0x3800},
      {6, ldexp(1.0, -24), 0x0001}, {6, 2049.0, 0x6800}, /* ties to even: 2048 */
      {9, 1.0, 0x3f80}, {9, -3.0, 0xc040}, {9, 257.0, 0x4380}, {9, 0.5, 0x3f00},
      {10, 1.0, 0x38}, {10, 448.0, 0x7e}, {10, -2.0, 0xc0}, {10, 0.5, 0x30},
      {10, ldexp(1.0, -9), 0x01}, {10, 17.0, 0x58} /* tie -> 16 */, {10, 3.5, 0x46},
      {11, 1.0, 0x3c}, {11, 57344.0, 0x7b}, {11, -0.5, 0xb8}, {11, ldexp(1.0, -16), 0x01},
      {11, 9.0, 0x48} /* 8 */, {11, 3.0, 0x42},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const DT* d = &DTS[cases[k].dti];
    uint32_t b = mf_encode(cases[k].v, d->ebits, d->mbits, d->bias, d->fn);
    double back = mf_decode(cases[k].bits, d->ebits, d->mbits, d->bias, d->fn);
    if (b != cases[k].bits) {
      g_fail++;
      failf("codec %s encode(%g) = %#x, want %#x", d->name, cases[k].v, b, cases[k].bits);
    } else {
      g_pass++;
    }
    (void)back;
  }
  /* round trip of every small integer within the exact range */
  for (int t = 6; t < 12; t++) {
    const DT* d = &DTS[t];
    int lim = d->exact > 4096 ? 4096 : (int)d->exact;
    int bad = 0;
    for (int v = -lim; v <= lim; v++)
      if (as_type(d, v) != v) bad++;
    if (bad) {
      g_fail++;
      failf("codec %s: %d integers in [-%d,%d] do not round-trip", d->name, bad, lim, lim);
    } else {
      g_pass++;
    }
  }
}

/* ===================================================================== ops / inputs ===== */
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS_HOST, OP_PMS_DEV, OP_NONE };
static const char* OPNAME[] = {"sum", "prod", "max", "min", "avg", "premulsum_host",
                               "premulsum_dev", "none"};
#define N_REAL_OPS 7

static double pms_scalar(const DT* d) { return d->isfloat ? 0.5 : 2.0; }

/* Half-range H of the inputs for this dtype/op so that nothing ever rounds or overflows. */
static double half_range(const DT* d, int op) {
  double cap = 1000;
  double n = g_nranks;
  double h;
  switch (op) {
    case OP_SUM:
    case OP_AVG: h = floor(d->exact / n); break;
    case OP_PMS_HOST:
    case OP_PMS_DEV: h = d->isfloat ? floor(d->exact / n) : floor(d->exact / (2 * n)); break;
    default: h = d->exact; break; /* max/min/data movement: no accumulation */
  }
  if (h > cap) h = cap;
  return h;
}

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = (a + 1) * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

/* Input element j of rank r. */
static double input_val(const DT* d, int op, int r, size_t j) {
  if (op == OP_PROD) {
    double v = ((j + (size_t)r) % 3 == 0) ? 2 : 1;
    if (d->issigned && (j * 5 + (size_t)r * 3) % 7 == 1) v = -v;
    return v;
  }
  double h = half_range(d, op);
  uint64_t x = mix((uint64_t)r, (uint64_t)j);
  if (d->issigned) {
    uint64_t span = (uint64_t)(2 * h + 1);
    return (double)(x % span) - h;
  } else {
    uint64_t span = (uint64_t)(h + 1);
    return (double)(x % span);
  }
}

/* Expected reduction of element j over all ranks (j is the index into the inputs). */
static double expected_reduce(const DT* d, int op, size_t j) {
  int n = g_nranks;
  double acc = input_val(d, op, 0, j);
  if (op == OP_PMS_HOST || op == OP_PMS_DEV) acc *= pms_scalar(d);
  for (int r = 1; r < n; r++) {
    double x = input_val(d, op, r, j);
    switch (op) {
      case OP_SUM:
      case OP_AVG: acc += x; break;
      case OP_PROD: acc *= x; break;
      case OP_MAX: acc = x > acc ? x : acc; break;
      case OP_MIN: acc = x < acc ? x : acc; break;
      default: acc += x * pms_scalar(d); break;
    }
  }
  if (op == OP_AVG) {
    if (d->isfloat) {
      acc = acc / n;
    } else {
      long long s = (long long)acc;
      acc = (double)(s / n); /* C division truncates toward zero */
    }
  }
  return as_type(d, acc);
}

/* Sum of |input| / nranks of element j: the scale of a float average's rounding. Scaling each
 * input by 1/n (as NCCL and libccl do) rounds every term and partial sum at that scale, which
 * can exceed the result's own when the inputs cancel (3 ranks: 1/3 is not exact). */
static double avg_magnitude(const DT* d, int op, size_t j) {
  double m = 0;
  for (int r = 0; r < g_nranks; r++) m += fabs(input_val(d, op, r, j));
  return m / g_nranks;
}

/* Compare element i of buf with value e (mag: avg_magnitude for float averages). Returns 1
 * when acceptable. */
static int value_ok(const DT* d, int op, double got, double e, double mag) {
  if (op == OP_AVG && d->isfloat) {
    if (isnan(got)) return 0;
    return fabs(got - e) <= (g_nranks + 1) * ulp_of(d, fmax(fabs(e), mag));
  }
  return got == e;
}

/* ===================================================================== buffers ========== */
#define GUARD 64
#define CANARY 0xA5

typedef struct {
  unsigned char* p;
  size_t bytes; /* usable bytes; GUARD bytes follow */
} Buf;

static Buf buf_alloc(size_t bytes) {
  Buf b;
  b.bytes = bytes;
  b.p = (unsigned char*)malloc(bytes + GUARD + 1);
  if (!b.p) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(b.p, CANARY, bytes + GUARD);
  return b;
}

static int guard_ok(const unsigned char* p, size_t from, size_t to) {
  for (size_t k = from; k < to; k++)
    if (p[k] != CANARY) return 0;
  return 1;
}

/* ===================================================================== collectives ====== */
typedef enum {
  C_ALLREDUCE, C_BROADCAST, C_BCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL,
  C_GATHER, C_SCATTER, C_NCOLL
} Coll;
static const char* CNAME[] = {"AllReduce", "Broadcast", "Bcast", "Reduce", "AllGather",
                              "ReduceScatter", "AlltoAll", "Gather", "Scatter"};
static const int C_REDUCING[] = {1, 0, 0, 1, 0, 1, 0, 0, 0};
static const int C_ROOTED[] = {0, 1, 1, 1, 0, 0, 0, 1, 1};

static int want(const char* name) { return !g_only || strstr(name, g_only) != NULL; }

static Buf g_send, g_recv, g_save; /* big enough for n * maxcount * 8 */

/* Build the op handle: builtin or PreMulSum (host / device scalar). */
static unsigned char g_dev_scalar[8]; /* "device-resident" scalar: host memory on host backend */

static ncclResult_t make_op(const DT* d, int op, ncclRedOp_t* out, int* created) {
  *created = 0;
  switch (op) {
    case OP_SUM: *out = ncclSum; return ncclSuccess;
    case OP_PROD: *out = ncclProd; return ncclSuccess;
    case OP_MAX: *out = ncclMax; return ncclSuccess;
    case OP_MIN: *out = ncclMin; return ncclSuccess;
    case OP_AVG: *out = ncclAvg; return ncclSuccess;
    case OP_PMS_HOST: {
      unsigned char s[8];
      put(d, s, 0, pms_scalar(d));
      ncclResult_t r = ncclRedOpCreatePreMulSum(out, s, d->dt, ncclScalarHostImmediate, g_comm);
      /* Host-immediate: the value is read during the call; clobber it to prove that. */
      put(d, s, 0, 3);
      if (r == ncclSuccess) *created = 1;
      return r;
    }
    default: {
      /* Device-resident: read when the op runs; set the real value only after creation. */
      put(d, g_dev_scalar, 0, 3);
      ncclResult_t r =
          ncclRedOpCreatePreMulSum(out, g_dev_scalar, d->dt, ncclScalarDevice, g_comm);
      put(d, g_dev_scalar, 0, pms_scalar(d));
      if (r == ncclSuccess) *created = 1;
      return r;
    }
  }
}

/* Run one collective test and verify. Returns 1 if passed. */
static int run_coll(Coll c, const DT* d, int op, int inplace, size_t count, int root) {
  const int n = g_nranks, me = g_rank;
  const size_t es = (size_t)d->size;
  const int vop = C_REDUCING[c] ? op : OP_NONE;
  char desc[200];
  snprintf(desc, sizeof desc, "%s dt=%s op=%s %s count=%zu root=%d", CNAME[c], d->name,
           C_REDUCING[c] ? OPNAME[op] : "-", inplace ? "in-place" : "out-of-place", count,
           C_ROOTED[c] ? root : -1);
  begin_test("%s", desc);

  /* element counts of the send and recv regions */
  size_t scount = count, rcount = count;
  switch (c) {
    case C_ALLGATHER: rcount = (size_t)n * count; break;
    case C_REDUCESCATTER: scount = (size_t)n * count; break;
    case C_ALLTOALL: scount = rcount = (size_t)n * count; break;
    case C_GATHER: rcount = (size_t)n * count; break;
    case C_SCATTER: scount = (size_t)n * count; break;
    default: break;
  }

  memset(g_send.p, CANARY, g_send.bytes + GUARD);
  memset(g_recv.p, CANARY, g_recv.bytes + GUARD);

  /* Inputs of this rank: index j of the "input array" of length scount. For Scatter the input
   * only exists at root; for Broadcast/Bcast only the root's matters. */
  const void* sendp = NULL;
  void* recvp = NULL;
  unsigned char* in = g_send.p;
  for (size_t j = 0; j < scount; j++) put(d, in, j, input_val(d, vop, me, j));

  /* region the output occupies inside the buffer that contains it */
  unsigned char* outbase = g_recv.p; /* buffer holding the result (for checking) */
  size_t out_lo = 0;                 /* first result element in outbase */
  size_t out_elems = rcount;         /* result elements at outbase + out_lo */
  int check_result = 1;
  int check_untouched_recv = 0; /* non-root: recv buffer must be untouched */

  if (!inplace) {
    sendp = g_send.p;
    recvp = g_recv.p;
    memcpy(g_save.p, g_send.p, scount * es);
  } else {
    switch (c) {
      case C_ALLREDUCE:
      case C_BROADCAST:
      case C_BCAST:
      case C_REDUCE:
      case C_ALLTOALL:
        sendp = recvp = g_send.p;
        outbase = g_send.p;
        break;
      case C_ALLGATHER:
        /* recv = whole buffer; my input sits at rank*count */
        memmove(g_send.p + (size_t)me * count * es, g_send.p, count * es);
        memset(g_send.p, CANARY, (size_t)me * count * es);
        recvp = g_send.p;
        sendp = g_send.p + (size_t)me * count * es;
        outbase = g_send.p;
        break;
      case C_REDUCESCATTER:
        sendp = g_send.p;
        recvp = g_send.p + (size_t)me * count * es;
        outbase = g_send.p;
        out_lo = (size_t)me * count;
        break;
      case C_GATHER:
        if (me == root) {
          memmove(g_recv.p + (size_t)root * count * es, g_send.p, count * es);
          recvp = g_recv.p;
          sendp = g_recv.p + (size_t)root * count * es;
        } else {
          sendp = g_send.p;
          recvp = g_recv.p;
        }
        break;
      case C_SCATTER:
        if (me == root) {
          sendp = g_send.p;
          recvp = g_send.p + (size_t)root * count * es;
          outbase = g_send.p;
          out_lo = (size_t)root * count;
        } else {
          sendp = g_send.p;
          recvp = g_recv.p;
        }
        break;
      default: break;
    }
  }

  if (C_ROOTED[c] && me != root) {
    if (c == C_REDUCE || c == C_GATHER) {
      check_result = 0;
      check_untouched_recv = (recvp == (void*)g_recv.p); /* separate recv buffer */
      if (inplace && c == C_REDUCE) check_untouched_recv = 0;
    }
  }

  ncclRedOp_t rop = ncclSum;
  int created = 0;
  ncclResult_t res = ncclSuccess;
  if (C_REDUCING[c]) {
    res = make_op(d, op, &rop, &created);
    if (res != ncclSuccess) {
      failf("%s: ncclRedOpCreatePreMulSum -> %d (%s)", desc, (int)res,
            ncclGetLastError(g_comm));
      /* keep the ranks in step: every rank fails the same way */
      return 0;
    }
  }

  switch (c) {
    case C_ALLREDUCE: res = ncclAllReduce(sendp, recvp, count, d->dt, rop, g_comm, NULL); break;
    case C_BROADCAST: res = ncclBroadcast(sendp, recvp, count, d->dt, root, g_comm, NULL); break;
    case C_BCAST: res = ncclBcast(g_send.p, count, d->dt, root, g_comm, NULL); break;
    case C_REDUCE: res = ncclReduce(sendp, recvp, count, d->dt, rop, root, g_comm, NULL); break;
    case C_ALLGATHER: res = ncclAllGather(sendp, recvp, count, d->dt, g_comm, NULL); break;
    case C_REDUCESCATTER:
      res = ncclReduceScatter(sendp, recvp, count, d->dt, rop, g_comm, NULL);
      break;
    case C_ALLTOALL: res = ncclAlltoAll(sendp, recvp, count, d->dt, g_comm, NULL); break;
    case C_GATHER: res = ncclGather(sendp, recvp, count, d->dt, root, g_comm, NULL); break;
    case C_SCATTER: res = ncclScatter(sendp, recvp, count, d->dt, root, g_comm, NULL); break;
    default: break;
  }
  if (res == ncclSuccess && !sync_stream()) {
    failf("%s: stream synchronize failed", desc);
    res = ncclInternalError;
  }
  if (created) {
    ncclResult_t r2 = ncclRedOpDestroy(rop, g_comm);
    if (r2 != ncclSuccess) failf("%s: ncclRedOpDestroy -> %d", desc, (int)r2);
  }
  if (res != ncclSuccess) {
    failf("%s: returned %d (%s)", desc, (int)res, ncclGetLastError(g_comm));
    return 0;
  }

  /* ---- verify ---- */
  if (c == C_BCAST || (inplace && (c == C_ALLREDUCE || c == C_BROADCAST || c == C_REDUCE))) {
    outbase = g_send.p;
  }
  int ok = 1;
  size_t bad = 0, first_bad = 0;
  double first_got = 0, first_exp = 0;

  if (check_result) {
    for (size_t i = 0; i < out_elems; i++) {
      double e, mag = 0;
      switch (c) {
        case C_ALLREDUCE:
        case C_REDUCE:
          e = expected_reduce(d, op, i);
          mag = avg_magnitude(d, op, i);
          break;
        case C_REDUCESCATTER:
          e = expected_reduce(d, op, (size_t)me * count + i);
          mag = avg_magnitude(d, op, (size_t)me * count + i);
          break;
        case C_BROADCAST:
        case C_BCAST: e = as_type(d, input_val(d, vop, root, i)); break;
        case C_ALLGATHER:
        case C_GATHER: e = as_type(d, input_val(d, vop, (int)(i / (count ? count : 1)), i % (count ? count : 1))); break;
        case C_ALLTOALL: {
          int src = (int)(i / count);
          e = as_type(d, input_val(d, vop, src, (size_t)me * count + i % count));
          break;
        }
        case C_SCATTER: e = as_type(d, input_val(d, vop, root, (size_t)me * count + i)); break;
        default: e = 0; break;
      }
      double got = get(d, outbase, out_lo + i);
      if (!value_ok(d, op, got, e, mag)) {
        if (!bad) {
          first_bad = i;
          first_got = got;
          first_exp = e;
        }
        bad++;
      }
    }
    if (bad) {
      ok = 0;
      failf("%s: %zu/%zu wrong, first at %zu: got %.9g expected %.9g", desc, bad, out_elems,
            first_bad, first_got, first_exp);
    }
    /* nothing written past the result (only meaningful where the result ends its buffer) */
    size_t end = (out_lo + out_elems) * es;
    if (outbase == g_recv.p && !guard_ok(g_recv.p, end, g_recv.bytes + GUARD)) {
      ok = 0;
      failf("%s: bytes written past the end of recvbuff", desc);
    }
    if (outbase == g_send.p) {
      /* in-place: nothing written past the end of the whole in-place buffer */
      size_t extent = (scount > rcount ? scount : rcount) * es;
      if (!guard_ok(g_send.p, extent, g_send.bytes + GUARD)) {
        ok = 0;
        failf("%s: bytes written past the end of the in-place buffer", desc);
      }
    }
  }
  if (check_untouched_recv && !guard_ok(g_recv.p, 0, g_recv.bytes + GUARD)) {
    ok = 0;
    failf("%s: non-root recvbuff was written", desc);
  }
  if (C_ROOTED[c] && me != root && inplace && c == C_REDUCE) {
    /* non-root in-place Reduce: the buffer is its input and must be unchanged */
    for (size_t j = 0; j < count; j++)
      if (get(d, g_send.p, j) != as_type(d, input_val(d, vop, me, j))) {
        ok = 0;
        failf("%s: non-root in-place buffer modified at %zu", desc, j);
        break;
      }
  }
  if (!inplace && c != C_BCAST && memcmp(g_save.p, g_send.p, scount * es) != 0) {
    ok = 0;
    failf("%s: sendbuff was modified", desc);
  }
  return ok;
}

static void record(int ok) {
  if (ok)
    g_pass++;
  else
    g_fail++;
}

static void test_collectives(void) {
  static const size_t counts_full[] = {0, 1, 7, 1000, 100003};
  static const size_t counts_quick[] = {0, 1, 7, 1000};
  const size_t* counts = g_quick ? counts_quick : counts_full;
  int ncounts = g_quick ? 4 : 5;
  int roots[3], nroots = 0;
  roots[nroots++] = 0;
  if (!g_quick) {
    if (g_nranks > 2) roots[nroots++] = 1;
    if (g_nranks > 1) roots[nroots++] = g_nranks - 1;
  }

  for (int c = 0; c < C_NCOLL; c++) {
    if (!want(CNAME[c])) continue;
    long p0 = g_pass, f0 = g_fail;
    for (int t = 0; t < 12; t++) {
      const DT* d = &DTS[t];
      int nops = C_REDUCING[c] ? N_REAL_OPS : 1;
      for (int op = 0; op < nops; op++) {
        for (int inplace = 0; inplace < 2; inplace++) {
          if (c == C_ALLTOALL && inplace) continue;
          if (c == C_BCAST && !inplace) continue;
          for (int k = 0; k < ncounts; k++) {
            int nr = C_ROOTED[c] ? nroots : 1;
            for (int ri = 0; ri < nr; ri++) {
              record(run_coll((Coll)c, d, op, inplace, counts[k], roots[ri]));
            }
          }
        }
      }
    }
    if (g_rank == 0) {
      printf("  %-14s %6ld passed, %ld failed (rank 0)\n", CNAME[c], g_pass - p0, g_fail - f0);
      fflush(stdout);
    }
  }
}

/* ===================================================================== send / recv ====== */
/* value of element i of the message that rank src sends to rank dst */
static double msg_val(const DT* d, int src, int dst, size_t i) {
  return input_val(d, OP_NONE, src * 1000 + dst, i);
}

static void fill_msg(const DT* d, unsigned char* p, int src, int dst, size_t count) {
  for (size_t i = 0; i < count; i++) put(d, p, i, msg_val(d, src, dst, i));
}

static int check_msg(const DT* d, const unsigned char* p, int src, int dst, size_t count,
                     const char* desc) {
  for (size_t i = 0; i < count; i++) {
    double e = as_type(d, msg_val(d, src, dst, i));
    double g = get(d, p, i);
    if (g != e) {
      failf("%s: message %d->%d element %zu got %.9g expected %.9g", desc, src, dst, i, g, e);
      return 0;
    }
  }
  return 1;
}

/* Ring shift by k in a group; order 0: send then recv, 1: recv then send. */
static int p2p_shift(const DT* d, size_t count, int k, int order) {
  const int n = g_nranks, me = g_rank;
  const size_t es = (size_t)d->size;
  int to = (me + k) % n, from = (me - k + n) % n;
  char desc[160];
  snprintf(desc, sizeof desc, "SendRecv shift=%d order=%s dt=%s count=%zu", k,
           order ? "recv-first" : "send-first", d->name, count);
  begin_test("%s", desc);
  memset(g_recv.p, CANARY, count * es + GUARD);
  fill_msg(d, g_send.p, me, to, count);
  ncclResult_t r1, r2 = ncclSuccess, r3, r4 = ncclSuccess;
  r1 = ncclGroupStart();
  if (order == 0) {
    r3 = ncclSend(g_send.p, count, d->dt, to, g_comm, NULL);
    if (r3 == ncclSuccess) r4 = ncclRecv(g_recv.p, count, d->dt, from, g_comm, NULL);
  } else {
    r3 = ncclRecv(g_recv.p, count, d->dt, from, g_comm, NULL);
    if (r3 == ncclSuccess) r4 = ncclSend(g_send.p, count, d->dt, to, g_comm, NULL);
  }
  r2 = ncclGroupEnd();
  if (r1 || r2 || r3 || r4 || !sync_stream()) {
    failf("%s: returned %d/%d/%d/%d (%s)", desc, r1, r3, r4, r2, ncclGetLastError(g_comm));
    return 0;
  }
  int ok = check_msg(d, g_recv.p, from, me, count, desc);
  if (!guard_ok(g_recv.p, count * es, count * es + GUARD)) {
    failf("%s: written past the end of recvbuff", desc);
    ok = 0;
  }
  return ok;
}

/* All peers (incl. self) in one group. order 0: all sends then all recvs; 1: all recvs then
 * all sends; 2: per peer send+recv interleaved, peers in descending order. */
static int p2p_allpeers(const DT* d, size_t count, int order) {
  const int n = g_nranks, me = g_rank;
  const size_t es = (size_t)d->size;
  static const char* ON[] = {"sends-first", "recvs-first", "interleaved"};
  char desc[160];
  snprintf(desc, sizeof desc, "SendRecv all-peers order=%s dt=%s count=%zu", ON[order],
           d->name, count);
  begin_test("%s", desc);
  memset(g_recv.p, CANARY, (size_t)n * count * es + GUARD);
  for (int p = 0; p < n; p++) fill_msg(d, g_send.p + (size_t)p * count * es, me, p, count);
  ncclResult_t r = ncclGroupStart(), rr = ncclSuccess;
  if (order == 0 || order == 1) {
    for (int pass = 0; pass < 2 && rr == ncclSuccess; pass++) {
      int sends = (pass == 0) == (order == 0);
      for (int p = 0; p < n && rr == ncclSuccess; p++) {
        int peer = (me + p) % n;
        rr = sends ? ncclSend(g_send.p + (size_t)peer * count * es, count, d->dt, peer, g_comm, NULL)
                   : ncclRecv(g_recv.p + (size_t)peer * count * es, count, d->dt, peer, g_comm, NULL);
      }
    }
  } else {
    for (int p = n - 1; p >= 0 && rr == ncclSuccess; p--) {
      rr = ncclSend(g_send.p + (size_t)p * count * es, count, d->dt, p, g_comm, NULL);
      if (rr == ncclSuccess)
        rr = ncclRecv(g_recv.p + (size_t)p * count * es, count, d->dt, p, g_comm, NULL);
    }
  }
  ncclResult_t re = ncclGroupEnd();
  if (r || rr || re || !sync_stream()) {
    failf("%s: returned %d/%d/%d (%s)", desc, r, rr, re, ncclGetLastError(g_comm));
    return 0;
  }
  int ok = 1;
  for (int p = 0; p < n && ok; p++)
    ok = check_msg(d, g_recv.p + (size_t)p * count * es, p, me, count, desc);
  if (!guard_ok(g_recv.p, (size_t)n * count * es, (size_t)n * count * es + GUARD)) {
    failf("%s: written past the end of recvbuff", desc);
    ok = 0;
  }
  return ok;
}

/* Ungrouped pairs (0,1), (2,3), ...: even ranks send then receive, odd ranks receive then
 * send, each call on its own. An odd last rank sits out. */
static int p2p_pairs(const DT* d, size_t count) {
  const int me = g_rank;
  const size_t es = (size_t)d->size;
  char desc[160];
  snprintf(desc, sizeof desc, "SendRecv ungrouped pairs dt=%s count=%zu", d->name, count);
  begin_test("%s", desc);
  int peer = (me % 2 == 0) ? me + 1 : me - 1;
  if (peer >= g_nranks) return 1;
  memset(g_recv.p, CANARY, count * es + GUARD);
  fill_msg(d, g_send.p, me, peer, count);
  ncclResult_t a, b = ncclSuccess;
  if (me % 2 == 0) {
    a = ncclSend(g_send.p, count, d->dt, peer, g_comm, NULL);
    if (a == ncclSuccess && sync_stream()) b = ncclRecv(g_recv.p, count, d->dt, peer, g_comm, NULL);
  } else {
    a = ncclRecv(g_recv.p, count, d->dt, peer, g_comm, NULL);
    if (a == ncclSuccess && sync_stream()) b = ncclSend(g_send.p, count, d->dt, peer, g_comm, NULL);
  }
  if (a || b || !sync_stream()) {
    failf("%s: returned %d/%d (%s)", desc, a, b, ncclGetLastError(g_comm));
    return 0;
  }
  return check_msg(d, g_recv.p, peer, me, count, desc);
}

static void test_p2p(void) {
  if (!want("SendRecv")) return;
  static const size_t counts_full[] = {0, 1, 7, 1000, 100003};
  int ncounts = g_quick ? 4 : 5;
  long p0 = g_pass, f0 = g_fail;
  for (int t = 0; t < 12; t++) {
    const DT* d = &DTS[t];
    for (int k = 0; k < ncounts; k++) {
      size_t count = counts_full[k];
      for (int shift = 0; shift < g_nranks; shift++)
        for (int order = 0; order < 2; order++) record(p2p_shift(d, count, shift, order));
      for (int order = 0; order < 3; order++) record(p2p_allpeers(d, count, order));
      record(p2p_pairs(d, count));
    }
  }
  if (g_rank == 0) {
    printf("  %-14s %6ld passed, %ld failed (rank 0)\n", "SendRecv", g_pass - p0, g_fail - f0);
    fflush(stdout);
  }
}

/* ===================================================================== aggregated ======= */
/* Several collectives in one group (PyTorch coalescing), and root-only buffers as NULL. */
static void test_grouped_and_nullbufs(void) {
  if (!want("Grouped")) return;
  const int n = g_nranks, me = g_rank;
  const size_t count = 1000;
  const DT* di = &DTS[2]; /* int32 */
  const DT* df = &DTS[7]; /* float */
  const DT* db = &DTS[9]; /* bf16 */
  begin_test("Grouped AllReduce(int32)+Broadcast(float)+AllGather(bf16)+ReduceScatter(int32)");
  unsigned char* a_in = malloc(count * 4);
  unsigned char* a_out = malloc(count * 4);
  unsigned char* b_buf = malloc(count * 4);
  unsigned char* g_in = malloc(count * 2);
  unsigned char* g_out = malloc((size_t)n * count * 2);
  unsigned char* rs_in = malloc((size_t)n * count * 4);
  unsigned char* rs_out = malloc(count * 4);
  if (!a_in || !a_out || !b_buf || !g_in || !g_out || !rs_in || !rs_out) MPI_Abort(MPI_COMM_WORLD, 2);
  for (size_t i = 0; i < count; i++) {
    put(di, a_in, i, input_val(di, OP_SUM, me, i));
    put(df, b_buf, i, input_val(df, OP_NONE, me, i));
    put(db, g_in, i, input_val(db, OP_NONE, me, i));
  }
  for (size_t j = 0; j < (size_t)n * count; j++) put(di, rs_in, j, input_val(di, OP_MAX, me, j));
  int root = n - 1;
  ncclResult_t r0 = ncclGroupStart();
  ncclResult_t r1 = ncclAllReduce(a_in, a_out, count, ncclInt32, ncclSum, g_comm, NULL);
  ncclResult_t r2 = ncclBroadcast(b_buf, b_buf, count, ncclFloat32, root, g_comm, NULL);
  ncclResult_t r3 = ncclAllGather(g_in, g_out, count, ncclBfloat16, g_comm, NULL);
  ncclResult_t r4 = ncclReduceScatter(rs_in, rs_out, count, ncclInt32, ncclMax, g_comm, NULL);
  ncclResult_t r5 = ncclGroupEnd();
  int ok = 1;
  if (r0 || r1 || r2 || r3 || r4 || r5 || !sync_stream()) {
    failf("grouped: returned %d %d %d %d %d %d (%s)", r0, r1, r2, r3, r4, r5,
          ncclGetLastError(g_comm));
    ok = 0;
  } else {
    for (size_t i = 0; i < count && ok; i++) {
      if (get(di, a_out, i) != expected_reduce(di, OP_SUM, i)) {
        failf("grouped: AllReduce element %zu", i);
        ok = 0;
      }
      if (get(df, b_buf, i) != as_type(df, input_val(df, OP_NONE, root, i))) {
        failf("grouped: Broadcast element %zu", i);
        ok = 0;
      }
      if (get(di, rs_out, i) != expected_reduce(di, OP_MAX, (size_t)me * count + i)) {
        failf("grouped: ReduceScatter element %zu", i);
        ok = 0;
      }
    }
    for (size_t j = 0; j < (size_t)n * count && ok; j++)
      if (get(db, g_out, j) != as_type(db, input_val(db, OP_NONE, (int)(j / count), j % count))) {
        failf("grouped: AllGather element %zu", j);
        ok = 0;
      }
  }
  record(ok);
  free(a_in); free(a_out); free(b_buf); free(g_in); free(g_out); free(rs_in); free(rs_out);

  /* Root-only buffers passed as NULL on the other ranks (NCCL ignores them there). */
  {
    const DT* d = di;
    unsigned char* sb = malloc((size_t)n * count * 4);
    unsigned char* rb = malloc((size_t)n * count * 4);
    if (!sb || !rb) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int root2 = 0; root2 < n; root2 += (n > 1 ? n - 1 : 1)) {
      int isroot = me == root2;
      /* Reduce: recvbuff NULL on non-roots */
      begin_test("Reduce with NULL recvbuff on non-roots, root %d", root2);
      for (size_t i = 0; i < count; i++) put(d, sb, i, input_val(d, OP_SUM, me, i));
      ncclResult_t r = ncclReduce(sb, isroot ? rb : NULL, count, d->dt, ncclSum, root2, g_comm, NULL);
      ok = (r == ncclSuccess) && sync_stream();
      for (size_t i = 0; ok && isroot && i < count; i++)
        if (get(d, rb, i) != expected_reduce(d, OP_SUM, i)) ok = 0;
      if (!ok) failf("Reduce NULL non-root recvbuff root %d: %d (%s)", root2, r, ncclGetLastError(g_comm));
      record(ok);
      /* Gather: recvbuff NULL on non-roots */
      begin_test("Gather with NULL recvbuff on non-roots, root %d", root2);
      for (size_t i = 0; i < count; i++) put(d, sb, i, input_val(d, OP_NONE, me, i));
      r = ncclGather(sb, isroot ? rb : NULL, count, d->dt, root2, g_comm, NULL);
      ok = (r == ncclSuccess) && sync_stream();
      for (size_t j = 0; ok && isroot && j < (size_t)n * count; j++)
        if (get(d, rb, j) != as_type(d, input_val(d, OP_NONE, (int)(j / count), j % count))) ok = 0;
      if (!ok) failf("Gather NULL non-root recvbuff root %d: %d (%s)", root2, r, ncclGetLastError(g_comm));
      record(ok);
      /* Broadcast: sendbuff NULL on non-roots */
      begin_test("Broadcast with NULL sendbuff on non-roots, root %d", root2);
      for (size_t i = 0; i < count; i++) put(d, sb, i, input_val(d, OP_NONE, me, i));
      r = ncclBroadcast(isroot ? sb : NULL, rb, count, d->dt, root2, g_comm, NULL);
      ok = (r == ncclSuccess) && sync_stream();
      for (size_t i = 0; ok && i < count; i++)
        if (get(d, rb, i) != as_type(d, input_val(d, OP_NONE, root2, i))) ok = 0;
      if (!ok) failf("Broadcast NULL non-root sendbuff root %d: %d (%s)", root2, r, ncclGetLastError(g_comm));
      record(ok);
      /* Scatter: sendbuff NULL on non-roots */
      begin_test("Scatter with NULL sendbuff on non-roots, root %d", root2);
      for (size_t j = 0; j < (size_t)n * count; j++) put(d, sb, j, input_val(d, OP_NONE, me, j));
      r = ncclScatter(isroot ? sb : NULL, rb, count, d->dt, root2, g_comm, NULL);
      ok = (r == ncclSuccess) && sync_stream();
      for (size_t i = 0; ok && i < count; i++)
        if (get(d, rb, i) != as_type(d, input_val(d, OP_NONE, root2, (size_t)me * count + i))) ok = 0;
      if (!ok) failf("Scatter NULL non-root sendbuff root %d: %d (%s)", root2, r, ncclGetLastError(g_comm));
      record(ok);
      if (n == 1) break;
    }
    free(sb);
    free(rb);
  }
}

/* ===================================================================== queries/errors === */
static void expect_code(const char* what, ncclResult_t got, ncclResult_t want_code, ncclComm_t comm) {
  begin_test("bad argument: %s", what);
  int ok = (got == want_code);
  if (!ok) failf("%s: returned %d, expected %d", what, (int)got, (int)want_code);
  record(ok);
  const char* msg = ncclGetLastError(comm);
  int mok = msg != NULL && msg[0] != '\0';
  if (!mok) failf("%s: ncclGetLastError(%s) is %s", what, comm ? "comm" : "NULL", msg ? "empty" : "NULL");
  record(mok);
  if (g_verbose && g_rank == 0 && msg) printf("    %s -> %d: \"%s\"\n", what, (int)got, msg);
}

static int good_allreduce(const char* when) {
  begin_test("good allreduce %s", when);
  int32_t in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = g_rank + i;
  ncclResult_t r = ncclAllReduce(in, out, 64, ncclInt32, ncclSum, g_comm, NULL);
  int ok = r == ncclSuccess && sync_stream();
  int n = g_nranks;
  for (int i = 0; ok && i < 64; i++)
    if (out[i] != n * (n - 1) / 2 + n * i) ok = 0;
  if (!ok) failf("good allreduce %s: %d (%s)", when, (int)r, ncclGetLastError(g_comm));
  record(ok);
  return ok;
}

static void test_queries_and_errors(void) {
  const int n = g_nranks;
  int v = -1;
  begin_test("queries");
  record(ncclCommCount(g_comm, &v) == ncclSuccess && v == n);
  if (v != n) failf("ncclCommCount = %d, want %d", v, n);
  v = -1;
  record(ncclCommUserRank(g_comm, &v) == ncclSuccess && v == g_rank);
  if (v != g_rank) failf("ncclCommUserRank = %d, want %d", v, g_rank);
  ncclResult_t ae = ncclNumResults;
  record(ncclCommGetAsyncError(g_comm, &ae) == ncclSuccess && ae == ncclSuccess);
  if (ae != ncclSuccess) failf("ncclCommGetAsyncError async = %d", (int)ae);
  int ver = 0;
  record(ncclGetVersion(&ver) == ncclSuccess && ver == NCCL_VERSION_CODE);

  if (!want("BadArgs")) return;
  int32_t sb[16] = {0}, rb[16 * 64];
  const size_t huge = SIZE_MAX / 4 + 1;                  /* huge * 4 bytes overflows */
  const size_t huge_n = SIZE_MAX / (4 * (size_t)n) + 1;  /* * 4 fits, * 4 * n overflows (n>1) */

  expect_code("AllReduce NULL comm", ncclAllReduce(sb, rb, 8, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument, NULL);
  expect_code("Send NULL comm", ncclSend(sb, 8, ncclInt32, 0, NULL, NULL), ncclInvalidArgument, NULL);
  expect_code("CommCount NULL comm", ncclCommCount(NULL, &v), ncclInvalidArgument, NULL);
  expect_code("AllReduce NULL sendbuff", ncclAllReduce(NULL, rb, 8, ncclInt32, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllReduce NULL recvbuff", ncclAllReduce(sb, NULL, 8, ncclInt32, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllGather NULL recvbuff", ncclAllGather(sb, NULL, 8, ncclInt32, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Send NULL sendbuff", ncclSend(NULL, 8, ncclInt32, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Recv NULL recvbuff", ncclRecv(NULL, 8, ncclInt32, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllReduce dtype 12", ncclAllReduce(sb, rb, 8, (ncclDataType_t)12, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllReduce dtype -1", ncclAllReduce(sb, rb, 8, (ncclDataType_t)-1, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Broadcast dtype 12", ncclBroadcast(sb, rb, 8, (ncclDataType_t)12, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Send dtype -1", ncclSend(sb, 8, (ncclDataType_t)-1, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllReduce op 99", ncclAllReduce(sb, rb, 8, ncclInt32, (ncclRedOp_t)99, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("ReduceScatter op 99", ncclReduceScatter(sb, rb, 2, ncclInt32, (ncclRedOp_t)99, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Broadcast root nranks", ncclBroadcast(sb, rb, 8, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Broadcast root -1", ncclBroadcast(sb, rb, 8, ncclInt32, -1, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Bcast root nranks", ncclBcast(rb, 8, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Reduce root nranks", ncclReduce(sb, rb, 8, ncclInt32, ncclSum, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Gather root nranks", ncclGather(sb, rb, 8, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Scatter root nranks", ncclScatter(sb, rb, 2, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Send peer nranks", ncclSend(sb, 8, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Recv peer nranks", ncclRecv(rb, 8, ncclInt32, n, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Send peer -1", ncclSend(sb, 8, ncclInt32, -1, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("AllReduce count*size overflows", ncclAllReduce(sb, rb, huge, ncclInt32, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Broadcast count*size overflows", ncclBroadcast(sb, rb, huge, ncclInt32, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  expect_code("Send count*size overflows", ncclSend(sb, huge, ncclInt32, 0, g_comm, NULL), ncclInvalidArgument, g_comm);
  if (n > 1) {
    expect_code("AllGather count*size*nranks overflows", ncclAllGather(sb, rb, huge_n, ncclInt32, g_comm, NULL), ncclInvalidArgument, g_comm);
    expect_code("ReduceScatter count*size*nranks overflows", ncclReduceScatter(sb, rb, huge_n, ncclInt32, ncclSum, g_comm, NULL), ncclInvalidArgument, g_comm);
    expect_code("AlltoAll count*size*nranks overflows", ncclAlltoAll(sb, rb, huge_n, ncclInt32, g_comm, NULL), ncclInvalidArgument, g_comm);
  }
  {
    ncclRedOp_t op;
    int32_t s = 2;
    expect_code("PreMulSum NULL scalar", ncclRedOpCreatePreMulSum(&op, NULL, ncclInt32, ncclScalarHostImmediate, g_comm), ncclInvalidArgument, g_comm);
    expect_code("PreMulSum dtype 12", ncclRedOpCreatePreMulSum(&op, &s, (ncclDataType_t)12, ncclScalarHostImmediate, g_comm), ncclInvalidArgument, g_comm);
    expect_code("RedOpDestroy builtin op", ncclRedOpDestroy(ncclSum, g_comm), ncclInvalidArgument, g_comm);
  }
  begin_test("async error after bad arguments");
  ae = ncclNumResults;
  int ok = ncclCommGetAsyncError(g_comm, &ae) == ncclSuccess && ae == ncclSuccess;
  if (!ok) failf("async error after bad args = %d", (int)ae);
  record(ok);
  good_allreduce("after bad arguments");
}

/* ===================================================================== main ============= */
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_verbose = getenv("COLL_CHECK_VERBOSE") && atoi(getenv("COLL_CHECK_VERBOSE"));
  g_quick = getenv("COLL_CHECK_QUICK") && atoi(getenv("COLL_CHECK_QUICK"));
  g_only = getenv("COLL_CHECK_ONLY");
  if (getenv("COLL_CHECK_TIMEOUT")) g_timeout = (unsigned)atoi(getenv("COLL_CHECK_TIMEOUT"));
  {
    const char* fn = getenv("COLL_CHECK_SYNC_FN");
    void* sym = dlsym(RTLD_DEFAULT, fn ? fn : "cudaStreamSynchronize");
    if (sym) memcpy(&g_sync_fn, &sym, sizeof sym);
  }
  signal(SIGALRM, on_alarm);

  int ver = 0;
  ncclGetVersion(&ver);
  if (g_rank == 0)
    printf("coll_check: %d ranks, library version %d, header %d%s\n", g_nranks, ver,
           NCCL_VERSION_CODE, g_quick ? ", quick" : "");

  codec_selftest();

  /* communicator */
  begin_test("ncclGetUniqueId / MPI_Bcast / ncclCommInitRank");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = ncclSuccess;
  if (g_rank == 0) r = ncclGetUniqueId(&id);
  MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (r != ncclSuccess) {
    if (g_rank == 0) printf("FAIL ncclGetUniqueId -> %d (%s)\ncoll_check: 0 passed, 1 failed\n", r, ncclGetLastError(NULL));
    MPI_Finalize();
    return 1;
  }
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  r = ncclCommInitRank(&g_comm, g_nranks, id, g_rank);
  int init_ok = (r == ncclSuccess && g_comm != NULL), all_ok = 0;
  if (!init_ok) failf("ncclCommInitRank -> %d (%s)", (int)r, ncclGetLastError(NULL));
  MPI_Allreduce(&init_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (g_rank == 0) printf("coll_check: 0 passed, 1 failed (communicator init failed)\n");
    MPI_Finalize();
    return 1;
  }
  record(1);

  size_t maxcount = 100003;
  size_t maxbytes = (size_t)g_nranks * maxcount * 8;
  g_send = buf_alloc(maxbytes);
  g_recv = buf_alloc(maxbytes);
  g_save = buf_alloc(maxbytes);

  test_queries_and_errors();
  test_collectives();
  test_p2p();
  test_grouped_and_nullbufs();
  test_queries_and_errors(); /* again at the end: still healthy */

  begin_test("ncclCommFinalize / ncclCommDestroy");
  r = ncclCommFinalize(g_comm);
  if (r != ncclSuccess) failf("ncclCommFinalize -> %d (%s)", (int)r, ncclGetLastError(g_comm));
  record(r == ncclSuccess);
  r = ncclCommDestroy(g_comm);
  if (r != ncclSuccess) failf("ncclCommDestroy -> %d", (int)r);
  record(r == ncclSuccess);
  alarm(0);

  long mine[2] = {g_pass, g_fail}, tot[2] = {0, 0};
  MPI_Allreduce(mine, tot, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_fail) printf("rank %d: %ld passed, %ld failed\n", g_rank, g_pass, g_fail);
  if (g_rank == 0)
    printf("coll_check: %ld passed, %ld failed (summed over %d ranks)\n", tot[0], tot[1],
           g_nranks);
  free(g_send.p);
  free(g_recv.p);
  free(g_save.p);
  MPI_Finalize();
  return tot[1] ? 1 : 0;
}
