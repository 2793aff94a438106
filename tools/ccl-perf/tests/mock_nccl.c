/* A test double of libnccl.so.2 for ccl-perf's own tests (never shipped).
 *
 * Host memory only, synchronous: an operation (or a group) runs when the call (or the outer
 * ncclGroupEnd) returns. Ranks share a file in /dev/shm named after the unique id: each rank
 * publishes the data it sends into its slot, all ranks meet at a barrier, each computes its
 * own outputs from the slots, and they meet again. Works across processes (mpirun, or
 * CCL_RANK + NCCL_COMM_ID, which the id is derived from) and for several comms in one
 * process (ncclCommInitAll / grouped init).
 *
 * Arithmetic follows NCCL's: every step rounded to the data type; Avg on floating types is
 * sum(x * (1/n)) with 1/n rounded to the type; integer Avg divides the sum (truncating);
 * PreMulSum multiplies each input by the scalar first.
 *
 * Fault injection: MOCK_NCCL_CORRUPT=1 flips one output element of rank 0 in every
 * all_reduce; MOCK_NCCL_FAIL=<name> makes that call return ncclInternalError.
 * Build with -DNO_NATIVE to leave out ncclAlltoAll/ncclGather/ncclScatter.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
enum { OK = 0, INTERNAL = 3, INVALID_ARG = 4, INVALID_USAGE = 5 };
enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_RS, K_A2A, K_GATHER, K_SCATTER, K_SEND, K_RECV };

#define MAX_META 4096
typedef struct {
  int kind, dtype, op, root, peer;
  size_t count, off; /* off: byte offset of the published data in the rank's data area */
  double scalar;     /* PreMulSum scalar, 0 otherwise */
} meta_t;

typedef struct {
  _Atomic int count;
  _Atomic int gen;
  int nranks;
} header_t;

typedef struct {
  header_t *h;
  char *base;
  size_t slot;
  int nranks;
  int unlinked;
  char name[96];
} seg_t;

typedef struct comm {
  seg_t *seg;
  int rank, nranks;
  double premul[64];
  int premul_used[64];
  /* per-round state */
  int nmeta;
  meta_t meta[MAX_META];
} comm_t;

static __thread char last_error[256];
static int group_depth;

typedef struct {
  comm_t *comm;
  int kind, dtype, op, root, peer;
  size_t count;
  const void *send;
  void *recv;
} qop_t;
static qop_t *queue;
static size_t nqueue, capqueue;

static size_t slot_bytes(void) {
  const char *e = getenv("MOCK_SLOT_BYTES");
  return e ? strtoull(e, NULL, 0) : ((size_t)64 << 20);
}
static size_t meta_bytes(void) { return sizeof(meta_t) * MAX_META; }
static meta_t *slot_meta(seg_t *s, int r) {
  return (meta_t *)(s->base + 4096 + (size_t)r * (meta_bytes() + s->slot));
}
static char *slot_data(seg_t *s, int r) { return (char *)slot_meta(s, r) + meta_bytes(); }

static int failing(const char *call) {
  const char *f = getenv("MOCK_NCCL_FAIL");
  if (f && strcmp(f, call) == 0) {
    snprintf(last_error, sizeof last_error, "mock: injected failure in %s", call);
    return 1;
  }
  return 0;
}

/* ---- element types ---- */
static size_t tsize(int t) {
  switch (t) {
  case 0: case 1: case 10: case 11: return 1;
  case 6: case 9: return 2;
  case 2: case 3: case 7: return 4;
  default: return 8;
  }
}

static double fp8_table[2][256];
static int fp8_ready;
static void fp8_init(void) {
  for (int b = 0; b < 256; b++) {
    int s = b >> 7;
    /* e4m3 (bias 7, no inf, S.1111.111 NaN) */
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    if (e == 15 && m == 7) v = NAN;
    fp8_table[0][b] = s ? -v : v;
    /* e5m2 (bias 15, IEEE-like) */
    e = (b >> 2) & 31; m = b & 3;
    v = e == 0 ? ldexp(m, -16) : ldexp(4 + m, e - 17);
    if (e == 31) v = m ? NAN : INFINITY;
    fp8_table[1][b] = s ? -v : v;
  }
  fp8_ready = 1;
}
/* Nearest finite pattern by search, ties to the even pattern; saturating. */
static uint8_t fp8_enc(int which, double v) {
  if (!fp8_ready) fp8_init();
  if (isnan(v)) return which ? 0x7e : 0x7f;
  int best = -1;
  for (int b = 0; b < 256; b++) {
    double x = fp8_table[which][b];
    if (!isfinite(x)) continue;
    if (x == 0 && signbit(x) != signbit(v)) continue;
    if (best < 0) { best = b; continue; }
    double d = fabs(x - v), db = fabs(fp8_table[which][best] - v);
    if (d < db || (d == db && (b & 1) == 0 && (best & 1))) best = b;
  }
  return (uint8_t)best;
}
static uint16_t bf16_enc(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static double load(int t, const void *p, size_t i) {
  const char *c = (const char *)p + i * tsize(t);
  switch (t) {
  case 0: return *(const int8_t *)c;
  case 1: return *(const uint8_t *)c;
  case 2: return *(const int32_t *)c;
  case 3: return *(const uint32_t *)c;
  case 4: return (double)*(const int64_t *)c;
  case 5: return (double)*(const uint64_t *)c;
  case 6: return (double)*(const _Float16 *)c;
  case 7: return *(const float *)c;
  case 8: return *(const double *)c;
  case 9: { uint32_t u = (uint32_t)*(const uint16_t *)c << 16; float f; memcpy(&f, &u, 4); return f; }
  case 10: if (!fp8_ready) fp8_init(); return fp8_table[0][*(const uint8_t *)c];
  default: if (!fp8_ready) fp8_init(); return fp8_table[1][*(const uint8_t *)c];
  }
}
static void store(int t, void *p, size_t i, double v) {
  char *c = (char *)p + i * tsize(t);
  switch (t) {
  case 0: *(int8_t *)c = (int8_t)(int64_t)v; break;
  case 1: *(uint8_t *)c = (uint8_t)(int64_t)v; break;
  case 2: *(int32_t *)c = (int32_t)(int64_t)v; break;
  case 3: *(uint32_t *)c = (uint32_t)(int64_t)v; break;
  case 4: *(int64_t *)c = (int64_t)v; break;
  case 5: *(uint64_t *)c = (uint64_t)v; break;
  case 6: *(_Float16 *)c = (_Float16)v; break;
  case 7: *(float *)c = (float)v; break;
  case 8: *(double *)c = v; break;
  case 9: *(uint16_t *)c = bf16_enc(v); break;
  case 10: *(uint8_t *)c = fp8_enc(0, v); break;
  default: *(uint8_t *)c = fp8_enc(1, v); break;
  }
}
static double rnd(int t, double v) {
  char b[8];
  store(t, b, 0, v);
  return load(t, b, 0);
}
static int is_float(int t) { return t >= 6; }

/* ---- shared segment ---- */
static void barrier(seg_t *s, int arrivals) {
  int gen = atomic_load(&s->h->gen);
  if (atomic_fetch_add(&s->h->count, arrivals) + arrivals == s->nranks) {
    atomic_store(&s->h->count, 0);
    atomic_fetch_add(&s->h->gen, 1);
  } else {
    while (atomic_load(&s->h->gen) == gen) sched_yield();
  }
}

static seg_t *attach(uint64_t key, int nranks) {
  seg_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->slot = slot_bytes();
  s->nranks = nranks;
  snprintf(s->name, sizeof s->name, "/ccl-perf-mock-%016llx", (unsigned long long)key);
  int fd = shm_open(s->name, O_RDWR | O_CREAT, 0600);
  if (fd < 0) { free(s); return NULL; }
  size_t total = 4096 + (size_t)nranks * (meta_bytes() + s->slot);
  if (ftruncate(fd, (off_t)total) != 0) { close(fd); free(s); return NULL; }
  s->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->base == MAP_FAILED) { free(s); return NULL; }
  s->h = (header_t *)s->base;
  return s;
}

static uint64_t fnv(const char *p) {
  uint64_t h = 1469598103934665603ull;
  for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* ---- API ---- */
ncclResult_t ncclGetVersion(int *v) {
  if (!v) return INVALID_ARG;
  const char *e = getenv("MOCK_NCCL_VERSION");
  *v = e ? atoi(e) : 22809;
  return OK;
}
const char *ncclGetErrorString(ncclResult_t r) {
  static const char *s[] = {"no error", "unhandled cuda error", "unhandled system error",
                            "internal error", "invalid argument", "invalid usage",
                            "remote process exited or there was a network error", "in progress",
                            "timeout"};
  return (r >= 0 && r < 9) ? s[r] : "unknown result code";
}
const char *ncclGetLastError(void *comm) { (void)comm; return last_error; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return INVALID_ARG;
  if (failing("ncclGetUniqueId")) return INTERNAL;
  memset(id, 0, sizeof *id);
  uint64_t key;
  const char *env = getenv("NCCL_COMM_ID");
  if (env) {
    key = fnv(env);
  } else {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&key, sizeof key, 1, f) != 1) { if (f) fclose(f); return INTERNAL; }
    fclose(f);
  }
  memcpy(id->internal, "MOCKNCCL", 8);
  memcpy(id->internal + 8, &key, 8);
  return OK;
}

ncclResult_t ncclCommInitRank(comm_t **out, int nranks, ncclUniqueId id, int rank) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return INVALID_ARG;
  if (failing("ncclCommInitRank")) return INTERNAL;
  if (memcmp(id.internal, "MOCKNCCL", 8) != 0) {
    snprintf(last_error, sizeof last_error, "mock: bad unique id");
    return INVALID_ARG;
  }
  uint64_t key;
  memcpy(&key, id.internal + 8, 8);
  comm_t *c = calloc(1, sizeof *c);
  if (!c) return INTERNAL;
  c->seg = attach(key, nranks);
  if (!c->seg) { free(c); return INTERNAL; }
  c->rank = rank;
  c->nranks = nranks;
  *out = c;
  return OK;
}

ncclResult_t ncclCommInitAll(comm_t **comms, int n, const int *devlist) {
  (void)devlist;
  ncclUniqueId id;
  unsetenv("NCCL_COMM_ID");
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r) return r;
  for (int i = 0; i < n; i++) {
    r = ncclCommInitRank(&comms[i], n, id, i);
    if (r) return r;
  }
  return OK;
}

ncclResult_t ncclCommFinalize(comm_t *c) { return c ? OK : INVALID_ARG; }
ncclResult_t ncclCommDestroy(comm_t *c) {
  if (!c) return INVALID_ARG;
  if (c->rank == 0 && !c->seg->unlinked) shm_unlink(c->seg->name);
  munmap(c->seg->base, 4096 + (size_t)c->nranks * (meta_bytes() + c->seg->slot));
  free(c->seg);
  free(c);
  return OK;
}
ncclResult_t ncclCommCount(const comm_t *c, int *n) { *n = c->nranks; return OK; }
ncclResult_t ncclCommUserRank(const comm_t *c, int *r) { *r = c->rank; return OK; }
ncclResult_t ncclCommGetAsyncError(comm_t *c, ncclResult_t *e) { (void)c; *e = OK; return OK; }

ncclResult_t ncclRedOpCreatePreMulSum(int *op, void *scalar, int dtype, int residence, comm_t *c) {
  (void)residence;
  for (int i = 0; i < 64; i++) {
    if (!c->premul_used[i]) {
      c->premul_used[i] = 1;
      c->premul[i] = load(dtype, scalar, 0);
      *op = 5 + i;
      return OK;
    }
  }
  return INTERNAL;
}
ncclResult_t ncclRedOpDestroy(int op, comm_t *c) {
  if (op < 5 || op >= 69 || !c->premul_used[op - 5]) return INVALID_ARG;
  c->premul_used[op - 5] = 0;
  return OK;
}

static size_t send_elems(const qop_t *q) {
  switch (q->kind) {
  case K_RS: case K_A2A: case K_SCATTER: return q->count * (size_t)q->comm->nranks;
  case K_RECV: return 0;
  default: return q->count;
  }
}

/* Reduction over all ranks of element i of each rank's published data (index i). */
static double reduce_elem(comm_t *c, int k, size_t i) {
  seg_t *s = c->seg;
  int n = c->nranks;
  meta_t *m0 = &slot_meta(s, c->rank)[k];
  int t = m0->dtype, op = m0->op;
  double acc = 0;
  for (int j = 0; j < n; j++) {
    meta_t *m = &slot_meta(s, j)[k];
    double x = load(t, slot_data(s, j) + m->off, i);
    if (op >= 5) x = rnd(t, x * rnd(t, m->scalar));
    else if (op == 4 && is_float(t)) x = rnd(t, x * rnd(t, 1.0 / n));
    if (j == 0) { acc = x; continue; }
    switch (op) {
    case 1: acc = rnd(t, acc * x); break;
    case 2: acc = acc > x ? acc : x; break;
    case 3: acc = acc < x ? acc : x; break;
    default: acc = rnd(t, acc + x); break;
    }
  }
  if (op == 4 && !is_float(t)) acc = trunc(acc / n);
  return acc;
}

static void compute(comm_t *c, qop_t *q, int k, int *recv_seen) {
  seg_t *s = c->seg;
  int n = c->nranks, r = c->rank, t = q->dtype;
  size_t ts = tsize(t), cnt = q->count;
  switch (q->kind) {
  case K_ALLREDUCE:
  case K_REDUCE:
    if (q->kind == K_REDUCE && r != q->root) break;
    for (size_t i = 0; i < cnt; i++) store(t, q->recv, i, reduce_elem(c, k, i));
    if (q->kind == K_ALLREDUCE && r == 0 && cnt > 0 && getenv("MOCK_NCCL_CORRUPT"))
      store(t, q->recv, cnt / 2, load(t, q->recv, cnt / 2) + 1);
    break;
  case K_RS:
    for (size_t i = 0; i < cnt; i++) store(t, q->recv, i, reduce_elem(c, k, (size_t)r * cnt + i));
    break;
  case K_BCAST:
    memcpy(q->recv, slot_data(s, q->root) + slot_meta(s, q->root)[k].off, cnt * ts);
    break;
  case K_ALLGATHER:
  case K_GATHER:
    if (q->kind == K_GATHER && r != q->root) break;
    for (int j = 0; j < n; j++)
      memcpy((char *)q->recv + (size_t)j * cnt * ts, slot_data(s, j) + slot_meta(s, j)[k].off, cnt * ts);
    break;
  case K_A2A:
    for (int j = 0; j < n; j++)
      memcpy((char *)q->recv + (size_t)j * cnt * ts,
             slot_data(s, j) + slot_meta(s, j)[k].off + (size_t)r * cnt * ts, cnt * ts);
    break;
  case K_SCATTER:
    memcpy(q->recv, slot_data(s, q->root) + slot_meta(s, q->root)[k].off + (size_t)r * cnt * ts, cnt * ts);
    break;
  case K_RECV: {
    int p = q->peer, want = recv_seen[p]++, seen = 0;
    meta_t *pm = slot_meta(s, p);
    int np = pm[MAX_META - 1].peer;
    for (int i = 0; i < np; i++) {
      if (pm[i].kind == K_SEND && pm[i].peer == r) {
        if (seen++ == want) { memcpy(q->recv, slot_data(s, p) + pm[i].off, cnt * ts); return; }
      }
    }
    fprintf(stderr, "mock: rank %d: no matching send from %d\n", r, p);
    abort();
  }
  default:
    break;
  }
}

/* Runs every queued op: publish, barrier, compute, barrier. */
static ncclResult_t run_queue(void) {
  if (nqueue == 0) return OK;
  comm_t *comms[256];
  int ncomms = 0;
  for (size_t i = 0; i < nqueue; i++) {
    int found = 0;
    for (int j = 0; j < ncomms; j++) found |= comms[j] == queue[i].comm;
    if (!found && ncomms < 256) comms[ncomms++] = queue[i].comm;
  }
  for (int j = 0; j < ncomms; j++) {
    comm_t *c = comms[j];
    meta_t *mm = slot_meta(c->seg, c->rank);
    size_t off = 0;
    int k = 0;
    for (size_t i = 0; i < nqueue; i++) {
      qop_t *q = &queue[i];
      if (q->comm != c) continue;
      if (k >= MAX_META - 1) return INTERNAL;
      size_t bytes = send_elems(q) * tsize(q->dtype);
      if (off + bytes > c->seg->slot) {
        snprintf(last_error, sizeof last_error, "mock: group sends more than MOCK_SLOT_BYTES");
        return INTERNAL;
      }
      meta_t m = {q->kind, q->dtype, q->op, q->root, q->peer, q->count, off,
                  q->op >= 5 ? c->premul[q->op - 5] : 0};
      if (bytes) memcpy(slot_data(c->seg, c->rank) + off, q->send, bytes);
      off += bytes;
      mm[k++] = m;
    }
    mm[MAX_META - 1].peer = k; /* number of entries this round */
  }
  barrier(comms[0]->seg, ncomms);
  /* Every rank has attached by now: the name can go (nothing is left behind on a crash). */
  for (int j = 0; j < ncomms; j++) {
    if (comms[j]->rank == 0 && !comms[j]->seg->unlinked) {
      shm_unlink(comms[j]->seg->name);
      comms[j]->seg->unlinked = 1;
    }
  }
  for (int j = 0; j < ncomms; j++) {
    comm_t *c = comms[j];
    int recv_seen[4096] = {0};
    int k = 0;
    for (size_t i = 0; i < nqueue; i++) {
      if (queue[i].comm != c) continue;
      compute(c, &queue[i], k++, recv_seen);
    }
  }
  barrier(comms[0]->seg, ncomms);
  nqueue = 0;
  return OK;
}

static ncclResult_t enqueue(const char *name, comm_t *c, int kind, const void *send, void *recv,
                            size_t count, int dtype, int op, int root, int peer) {
  if (!c || dtype < 0 || dtype > 11) return INVALID_ARG;
  if (failing(name)) {
    shm_unlink(c->seg->name); /* the caller gives up: leave nothing behind */
    return INTERNAL;
  }
  if (nqueue == capqueue) {
    capqueue = capqueue ? capqueue * 2 : 64;
    queue = realloc(queue, capqueue * sizeof *queue);
    if (!queue) return INTERNAL;
  }
  qop_t q = {c, kind, dtype, op, root, peer, count, send, recv};
  queue[nqueue++] = q;
  return group_depth ? OK : run_queue();
}

ncclResult_t ncclGroupStart(void) { group_depth++; return OK; }
ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return INVALID_USAGE;
  return --group_depth ? OK : run_queue();
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, comm_t *c, void *st) {
  (void)st; return enqueue("ncclAllReduce", c, K_ALLREDUCE, s, r, n, t, op, 0, 0);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, comm_t *c, void *st) {
  (void)st; return enqueue("ncclBroadcast", c, K_BCAST, s, r, n, t, 0, root, 0);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, comm_t *c, void *st) {
  (void)st; return enqueue("ncclReduce", c, K_REDUCE, s, r, n, t, op, root, 0);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, comm_t *c, void *st) {
  (void)st; return enqueue("ncclAllGather", c, K_ALLGATHER, s, r, n, t, 0, 0, 0);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, comm_t *c, void *st) {
  (void)st; return enqueue("ncclReduceScatter", c, K_RS, s, r, n, t, op, 0, 0);
}
ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, comm_t *c, void *st) {
  (void)st; return enqueue("ncclSend", c, K_SEND, s, NULL, n, t, 0, 0, peer);
}
ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, comm_t *c, void *st) {
  (void)st; return enqueue("ncclRecv", c, K_RECV, NULL, r, n, t, 0, 0, peer);
}
#ifndef NO_NATIVE
ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int t, comm_t *c, void *st) {
  (void)st; return enqueue("ncclAlltoAll", c, K_A2A, s, r, n, t, 0, 0, 0);
}
ncclResult_t ncclGather(const void *s, void *r, size_t n, int t, int root, comm_t *c, void *st) {
  (void)st; return enqueue("ncclGather", c, K_GATHER, s, r, n, t, 0, root, 0);
}
ncclResult_t ncclScatter(const void *s, void *r, size_t n, int t, int root, comm_t *c, void *st) {
  (void)st; return enqueue("ncclScatter", c, K_SCATTER, s, r, n, t, 0, root, 0);
}
#endif
