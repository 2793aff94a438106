/*
 * mock_nccl.c -- a stand-in libnccl.so built on MPI, used ONLY to validate the test programs
 * (abi_check.c, coll_check.c) and run.sh before the real library exists:
 *
 *   tests/abi/run.sh --mock
 *
 * It implements the subset coll_check uses, with NCCL's semantics as coll_check expects them
 * (in-place aliasing, root-only buffers, PreMulSum scalar residence, Avg truncation, argument
 * checks). Mutations for checking that coll_check catches bugs: build with -DMUT_AVG_FLOOR,
 * -DMUT_SCALAR_ALWAYS_IMM, -DMUT_SCALAR_ALWAYS_PTR, -DMUT_AG_OVERRUN, -DMUT_REDUCE_NONROOT_WRITE,
 * -DMUT_NO_OVERFLOW_CHECK, -DMUT_RS_WRONG_SEGMENT (each must make coll_check fail).
 * Reductions go through double, which is exact for coll_check's inputs. It is not a
 * reference implementation and is never part of libccl.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

struct ncclComm {
  MPI_Comm mc;
  int rank, n;
  struct {
    int used;
    ncclDataType_t dt;
    ncclScalarResidence_t res;
    unsigned char imm[8];
    void* ptr;
  } ops[64];
};

static __thread char last_err[256] = "";
static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
  return r;
}

static const int SZ[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

/* --- codec (fp16/bf16/e4m3/e5m2) --- */
static const int EB[12] = {0, 0, 0, 0, 0, 0, 5, 8, 11, 8, 4, 5};
static const int MB[12] = {0, 0, 0, 0, 0, 0, 10, 23, 52, 7, 3, 2};
static const int BI[12] = {0, 0, 0, 0, 0, 0, 15, 127, 1023, 127, 7, 15};

static uint32_t enc(double v, int t) {
  int eb = EB[t], mb = MB[t], bias = BI[t];
  uint32_t sign = 0;
  if (signbit(v)) { sign = 1u << (eb + mb); v = -v; }
  if (v == 0) return sign;
  int e; frexp(v, &e); int E = e - 1;
  if (E + bias >= 1) {
    double q = rint((v / ldexp(1.0, E) - 1.0) * ldexp(1.0, mb));
    uint32_t b = (uint32_t)(E + bias);
    if (q >= ldexp(1.0, mb)) { q = 0; b++; }
    return sign | (b << mb) | (uint32_t)q;
  }
  return sign | (uint32_t)rint(v / ldexp(1.0, 1 - bias - mb));
}
static double dec(uint32_t b, int t) {
  int eb = EB[t], mb = MB[t], bias = BI[t];
  int neg = (b >> (eb + mb)) & 1;
  uint32_t ef = (b >> mb) & ((1u << eb) - 1), mf = b & ((1u << mb) - 1);
  double v = ef ? ldexp(1.0 + mf / ldexp(1.0, mb), (int)ef - bias) : ldexp((double)mf, 1 - bias - mb);
  return neg ? -v : v;
}
static double ld(int t, const void* p, size_t i) {
  const unsigned char* q = (const unsigned char*)p + i * SZ[t];
  switch (t) {
    case 0: { int8_t x; memcpy(&x, q, 1); return x; }
    case 1: { uint8_t x; memcpy(&x, q, 1); return x; }
    case 2: { int32_t x; memcpy(&x, q, 4); return x; }
    case 3: { uint32_t x; memcpy(&x, q, 4); return x; }
    case 4: { int64_t x; memcpy(&x, q, 8); return (double)x; }
    case 5: { uint64_t x; memcpy(&x, q, 8); return (double)x; }
    case 7: { float x; memcpy(&x, q, 4); return x; }
    case 8: { double x; memcpy(&x, q, 8); return x; }
    case 6: case 9: { uint16_t x; memcpy(&x, q, 2); return dec(x, t); }
    default: { uint8_t x; memcpy(&x, q, 1); return dec(x, t); }
  }
}
static void st(int t, void* p, size_t i, double v) {
  unsigned char* q = (unsigned char*)p + i * SZ[t];
  switch (t) {
    case 0: { int8_t x = (int8_t)v; memcpy(q, &x, 1); break; }
    case 1: { uint8_t x = (uint8_t)v; memcpy(q, &x, 1); break; }
    case 2: { int32_t x = (int32_t)v; memcpy(q, &x, 4); break; }
    case 3: { uint32_t x = (uint32_t)v; memcpy(q, &x, 4); break; }
    case 4: { int64_t x = (int64_t)v; memcpy(q, &x, 8); break; }
    case 5: { uint64_t x = (uint64_t)v; memcpy(q, &x, 8); break; }
    case 7: { float x = (float)v; memcpy(q, &x, 4); break; }
    case 8: memcpy(q, &v, 8); break;
    case 6: case 9: { uint16_t x = (uint16_t)enc(v, t); memcpy(q, &x, 2); break; }
    default: { uint8_t x = (uint8_t)enc(v, t); memcpy(q, &x, 1); break; }
  }
}

/* --- checks --- */
static ncclResult_t chk_comm(ncclComm_t c) { return c ? ncclSuccess : fail(ncclInvalidArgument, "comm is NULL"); }
static ncclResult_t chk_dt(ncclDataType_t d) {
  return ((int)d >= 0 && (int)d < 12) ? ncclSuccess : fail(ncclInvalidArgument, "invalid datatype %d", (int)d);
}
static ncclResult_t chk_op(ncclComm_t c, ncclRedOp_t op) {
  if ((int)op >= 0 && (int)op < ncclNumOps) return ncclSuccess;
  if ((int)op >= ncclNumOps && (int)op < ncclNumOps + 64 && c->ops[op - ncclNumOps].used) return ncclSuccess;
  return fail(ncclInvalidArgument, "invalid op %d", (int)op);
}
static ncclResult_t chk_bytes(size_t count, ncclDataType_t d, size_t mult, size_t* out) {
  size_t es = (size_t)SZ[d];
#ifndef MUT_NO_OVERFLOW_CHECK
  if (count > SIZE_MAX / es / mult) return fail(ncclInvalidArgument, "count %zu overflows", count);
#endif
  *out = count * es * mult;
  return ncclSuccess;
}
static ncclResult_t chk_root(ncclComm_t c, int root) {
  return (root >= 0 && root < c->n) ? ncclSuccess : fail(ncclInvalidArgument, "invalid root/peer %d", root);
}
static ncclResult_t chk_ptr(const void* p, size_t count, const char* what) {
  return (p || count == 0) ? ncclSuccess : fail(ncclInvalidArgument, "%s is NULL", what);
}
#define TRY(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) return r_; } while (0)

/* --- library --- */
ncclResult_t ncclGetVersion(int* v) { if (!v) return fail(ncclInvalidArgument, "version is NULL"); *v = NCCL_VERSION_CODE; return ncclSuccess; }
const char* ncclGetErrorString(ncclResult_t r) {
  static const char* s[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                            "invalid argument", "invalid usage", "remote process exited or there was a network error",
                            "operation in progress", "timeout", "unknown result code"};
  return ((int)r >= 0 && (int)r <= 9) ? s[r] : "unknown result code";
}
const char* ncclGetLastError(ncclComm_t c) { (void)c; return last_err; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { if (!id) return fail(ncclInvalidArgument, "id NULL"); memset(id, 7, sizeof *id); return ncclSuccess; }
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int n, ncclUniqueId id, int rank) {
  (void)id;
  if (!comm) return fail(ncclInvalidArgument, "comm ptr NULL");
  if (n < 1 || rank < 0 || rank >= n) return fail(ncclInvalidArgument, "bad rank %d/%d", rank, n);
  ncclComm_t c = calloc(1, sizeof *c);
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Comm_dup(n == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD, &c->mc);
  else if (n == 1) c->mc = MPI_COMM_NULL; /* abi_check: one rank, no MPI */
  else return fail(ncclInvalidUsage, "mock needs MPI for nranks > 1");
  c->rank = rank; c->n = n;
  *comm = c;
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t c) { return chk_comm(c); }
ncclResult_t ncclCommDestroy(ncclComm_t c) { TRY(chk_comm(c)); if (c->mc != MPI_COMM_NULL) MPI_Comm_free(&c->mc); free(c); return ncclSuccess; }
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int n, ncclUniqueId id, int rank, ncclConfig_t* cfg) {
  if (cfg && cfg->magic != NCCL_API_MAGIC) return fail(ncclInvalidArgument, "bad config magic");
  return ncclCommInitRank(comm, n, id, rank);
}
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* d) { TRY(chk_comm(c)); *d = 0; return ncclSuccess; }
ncclResult_t pncclGetVersion(int* v) { return ncclGetVersion(v); }
const char* pncclGetErrorString(ncclResult_t r) { return ncclGetErrorString(r); }
ncclResult_t ncclCommCount(const ncclComm_t c, int* n) { TRY(chk_comm(c)); if (!n) return fail(ncclInvalidArgument, "NULL"); *n = c->n; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) { TRY(chk_comm(c)); if (!r) return fail(ncclInvalidArgument, "NULL"); *r = c->rank; return ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* e) { TRY(chk_comm(c)); *e = ncclSuccess; return ncclSuccess; }

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t d, ncclScalarResidence_t res, ncclComm_t c) {
  TRY(chk_comm(c)); TRY(chk_dt(d));
  if (!op || !scalar) return fail(ncclInvalidArgument, "NULL op or scalar");
  for (int i = 0; i < 64; i++)
    if (!c->ops[i].used) {
      c->ops[i].used = 1; c->ops[i].dt = d; c->ops[i].res = res; c->ops[i].ptr = scalar;
      memcpy(c->ops[i].imm, scalar, (size_t)SZ[d]);
      *op = (ncclRedOp_t)(ncclNumOps + i);
      return ncclSuccess;
    }
  return fail(ncclInternalError, "too many ops");
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
  TRY(chk_comm(c));
  if ((int)op < ncclNumOps) return fail(ncclInvalidArgument, "builtin op");
  TRY(chk_op(c, op));
  c->ops[op - ncclNumOps].used = 0;
  return ncclSuccess;
}

/* reduce n contributions laid out at stride `stride` elements in `all` into out[0..count) */
static void reduce_into(ncclComm_t c, int t, ncclRedOp_t op, const unsigned char* all, size_t stride_bytes, size_t count, void* out) {
  double scal = 1;
  int pms = (int)op >= ncclNumOps;
  if (pms) {
    int k = op - ncclNumOps;
#if defined(MUT_SCALAR_ALWAYS_IMM)
    scal = ld(t, c->ops[k].imm, 0);
#elif defined(MUT_SCALAR_ALWAYS_PTR)
    scal = ld(t, c->ops[k].ptr, 0);
#else
    scal = c->ops[k].res == ncclScalarHostImmediate ? ld(t, c->ops[k].imm, 0) : ld(t, c->ops[k].ptr, 0);
#endif
  }
  for (size_t i = 0; i < count; i++) {
    double acc = 0;
    for (int r = 0; r < c->n; r++) {
      double x = ld(t, all + r * stride_bytes, i);
      if (pms) x *= scal;
      if (r == 0) { acc = x; continue; }
      switch (pms ? ncclSum : op) {
        case ncclProd: acc *= x; break;
        case ncclMax: acc = x > acc ? x : acc; break;
        case ncclMin: acc = x < acc ? x : acc; break;
        default: acc += x; break;
      }
    }
#ifdef MUT_AVG_FLOOR
    if (op == ncclAvg) acc = (t >= 6) ? acc / c->n : floor(acc / c->n);
#else
    if (op == ncclAvg) acc = (t >= 6) ? acc / c->n : (double)((long long)acc / c->n);
#endif
    st(t, out, i, acc);
  }
}

static int in_group;
typedef struct { int send; void* buf; size_t bytes; int peer; ncclComm_t c; } P2p;
static P2p pend[4096];
static int npend;

ncclResult_t ncclGroupStart(void) { in_group++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
  if (in_group <= 0) return fail(ncclInvalidUsage, "GroupEnd without GroupStart");
  if (--in_group) return ncclSuccess;
  MPI_Request req[4096];
  for (int i = 0; i < npend; i++) {
    P2p* p = &pend[i];
    if (p->send) MPI_Isend(p->buf, (int)p->bytes, MPI_BYTE, p->peer, 99, p->c->mc, &req[i]);
    else MPI_Irecv(p->buf, (int)p->bytes, MPI_BYTE, p->peer, 99, p->c->mc, &req[i]);
  }
  MPI_Waitall(npend, req, MPI_STATUSES_IGNORE);
  npend = 0;
  return ncclSuccess;
}
static ncclResult_t p2p(int send, const void* buf, size_t count, ncclDataType_t d, int peer, ncclComm_t c) {
  size_t bytes = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_root(c, peer)); TRY(chk_bytes(count, d, 1, &bytes));
  TRY(chk_ptr(buf, count, send ? "sendbuff" : "recvbuff"));
  if (bytes == 0) return ncclSuccess;
  pend[npend++] = (P2p){send, (void*)buf, bytes, peer, c};
  if (!in_group) { in_group = 1; return ncclGroupEnd(); }
  return ncclSuccess;
}
ncclResult_t ncclSend(const void* b, size_t n, ncclDataType_t d, int peer, ncclComm_t c, cudaStream_t s) { (void)s; return p2p(1, b, n, d, peer, c); }
ncclResult_t ncclRecv(void* b, size_t n, ncclDataType_t d, int peer, ncclComm_t c, cudaStream_t s) { (void)s; return p2p(0, b, n, d, peer, c); }

/* Collectives run immediately, even inside a group (coll_check's grouped collectives are
 * issued in the same order on every rank, which is enough for MPI). */
ncclResult_t ncclAllReduce(const void* sb, void* rb, size_t count, ncclDataType_t d, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_op(c, op)); TRY(chk_bytes(count, d, 1, &bytes));
  TRY(chk_ptr(sb, count, "sendbuff")); TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* all = malloc(bytes * c->n);
  if (c->mc == MPI_COMM_NULL) memcpy(all, sb, bytes);
  else MPI_Allgather(sb, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->mc);
  reduce_into(c, d, op, all, bytes, count, rb);
  free(all);
  return ncclSuccess;
}
ncclResult_t ncclReduce(const void* sb, void* rb, size_t count, ncclDataType_t d, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_op(c, op)); TRY(chk_root(c, root)); TRY(chk_bytes(count, d, 1, &bytes));
  TRY(chk_ptr(sb, count, "sendbuff")); if (c->rank == root) TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* all = malloc(bytes * c->n);
  MPI_Gather(sb, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, root, c->mc);
  if (c->rank == root) reduce_into(c, d, op, all, bytes, count, rb);
#ifdef MUT_REDUCE_NONROOT_WRITE
  else if (rb) memset(rb, 0, bytes);
#endif
  free(all);
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* sb, void* rb, size_t count, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_root(c, root)); TRY(chk_bytes(count, d, 1, &bytes));
  if (c->rank == root) TRY(chk_ptr(sb, count, "sendbuff"));
  TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  if (c->rank == root && sb != rb) memmove(rb, sb, bytes);
  MPI_Bcast(rb, (int)bytes, MPI_BYTE, root, c->mc);
  return ncclSuccess;
}
ncclResult_t ncclBcast(void* b, size_t count, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t s) { return ncclBroadcast(b, b, count, d, root, c, s); }
ncclResult_t ncclAllGather(const void* sb, void* rb, size_t count, ncclDataType_t d, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0, total = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_bytes(count, d, 1, &bytes)); TRY(chk_bytes(count, d, (size_t)c->n, &total));
  TRY(chk_ptr(sb, count, "sendbuff")); TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* tmp = malloc(bytes); memcpy(tmp, sb, bytes);
  MPI_Allgather(tmp, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE, c->mc);
#ifdef MUT_AG_OVERRUN
  ((unsigned char*)rb)[total] = 0;
#endif
  free(tmp);
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void* sb, void* rb, size_t count, ncclDataType_t d, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0, total = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_op(c, op)); TRY(chk_bytes(count, d, 1, &bytes)); TRY(chk_bytes(count, d, (size_t)c->n, &total));
  TRY(chk_ptr(sb, count, "sendbuff")); TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* all = malloc(total * c->n);
  MPI_Allgather(sb, (int)total, MPI_BYTE, all, (int)total, MPI_BYTE, c->mc);
#ifdef MUT_RS_WRONG_SEGMENT
  reduce_into(c, d, op, all + (size_t)((c->rank + 1) % c->n) * bytes, total, count, rb);
#else
  reduce_into(c, d, op, all + (size_t)c->rank * bytes, total, count, rb);
#endif
  free(all);
  return ncclSuccess;
}
ncclResult_t ncclAlltoAll(const void* sb, void* rb, size_t count, ncclDataType_t d, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0, total = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_bytes(count, d, 1, &bytes)); TRY(chk_bytes(count, d, (size_t)c->n, &total));
  TRY(chk_ptr(sb, count, "sendbuff")); TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* tmp = malloc(total); memcpy(tmp, sb, total);
  MPI_Alltoall(tmp, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE, c->mc);
  free(tmp);
  return ncclSuccess;
}
ncclResult_t ncclGather(const void* sb, void* rb, size_t count, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0, total = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_root(c, root)); TRY(chk_bytes(count, d, 1, &bytes)); TRY(chk_bytes(count, d, (size_t)c->n, &total));
  TRY(chk_ptr(sb, count, "sendbuff")); if (c->rank == root) TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* tmp = malloc(bytes); memcpy(tmp, sb, bytes);
  MPI_Gather(tmp, (int)bytes, MPI_BYTE, rb, (int)bytes, MPI_BYTE, root, c->mc);
  free(tmp);
  return ncclSuccess;
}
ncclResult_t ncclScatter(const void* sb, void* rb, size_t count, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t s) {
  (void)s; size_t bytes = 0, total = 0;
  TRY(chk_comm(c)); TRY(chk_dt(d)); TRY(chk_root(c, root)); TRY(chk_bytes(count, d, 1, &bytes)); TRY(chk_bytes(count, d, (size_t)c->n, &total));
  if (c->rank == root) TRY(chk_ptr(sb, count, "sendbuff"));
  TRY(chk_ptr(rb, count, "recvbuff"));
  if (!count) return ncclSuccess;
  unsigned char* tmp = NULL;
  if (c->rank == root) { tmp = malloc(total); memcpy(tmp, sb, total); }
  unsigned char* out = malloc(bytes);
  MPI_Scatter(tmp, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, root, c->mc);
  memcpy(rb, out, bytes);
  free(out); free(tmp);
  return ncclSuccess;
}
