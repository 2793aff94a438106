/* A profiler plugin for tests: writes every call it receives, one line each, to
 * $RECORD_PLUGIN_FILE.<rank>. Built by tests/tests/profiler.rs with `cc -shared -fPIC`; with
 * -DRECORD_V4 it exports the version-4 interface instead of version 5.
 *
 * Environment: RECORD_PLUGIN_FILE (path prefix, required), RECORD_PLUGIN_MASK (activation mask,
 * default Group|Coll|P2p|KernelCh), RECORD_PLUGIN_INIT_FAIL=1 (init returns an error).
 *
 * The structures below follow the profiler ABI as docs/PROFILER.md lays it out (64-bit). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*logger_t)(int level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...);

struct coll_d {
  uint64_t seq;
  const char *func;
  const void *send;
  void *recv;
  size_t count;
  int root;
  const char *dtype;
  uint8_t nch;
  uint8_t nwarps;
  const char *algo;
  const char *proto;
  void *group; /* not in version 4 */
};

struct p2p_d {
  const char *func;
  void *buff;
  const char *dtype;
  size_t count;
  int peer;
  uint8_t nch;
  void *group; /* not in version 4 */
};

struct kch_d {
  uint8_t ch;
  uint64_t t0;
};

struct group_api_d {
  bool captured;
  int depth;
};

struct coll_api_d {
  const char *func;
  size_t count;
  const char *dtype;
  int root;
  void *stream;
  bool captured;
};

struct p2p_api_d {
  const char *func;
  size_t count;
  const char *dtype;
  void *stream;
  bool captured;
};

struct descr {
  uint64_t type; /* version 4: a uint8_t; its byte is this word's first (little-endian) */
  void *parent;
  int rank;
  union {
    struct group_api_d group_api;
    struct coll_api_d coll_api;
    struct p2p_api_d p2p_api;
    struct coll_d coll;
    struct p2p_d p2p;
    struct kch_d kch;
    uint64_t pad[11];
  } u;
};

/* An event handle: the first word is the type, as NCCL's own plugins lay theirs out. */
struct ctx {
  FILE *out;
  int rank;
};

struct event {
  uint64_t type;
  unsigned long id;
  struct ctx *c;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long next_id = 1;

static unsigned long id_of(void *h) { return h ? ((struct event *)h)->id : 0; }

static int do_init(void **context, int *mask, const char *name, uint64_t hash, int nnodes,
                   int nranks, int rank, logger_t log) {
  const char *prefix = getenv("RECORD_PLUGIN_FILE");
  const char *m = getenv("RECORD_PLUGIN_MASK");
  const char *fail = getenv("RECORD_PLUGIN_INIT_FAIL");
  char path[4096];
  struct ctx *c;
  *context = NULL;
  if (log) log(3, 0, __FILE__, __LINE__, "record plugin: init rank %d of %d", rank, nranks);
  if (fail && strcmp(fail, "1") == 0) return 1;
  if (!prefix) return 1;
  snprintf(path, sizeof path, "%s.%d", prefix, rank);
  c = calloc(1, sizeof *c);
  if (!c) return 1;
  c->out = fopen(path, "w");
  if (!c->out) {
    free(c);
    return 1;
  }
  c->rank = rank;
  *mask = m ? (int)strtol(m, NULL, 0) : (1 << 0) | (1 << 1) | (1 << 2) | (1 << 6);
  fprintf(c->out, "init rank=%d nranks=%d nnodes=%d name=%s hash=%llu\n", rank, nranks, nnodes,
          name ? name : "(null)", (unsigned long long)hash);
  fflush(c->out);
  *context = c;
  return 0;
}

static int start_event(void *context, void **handle, struct descr *d) {
  struct ctx *c = context;
  struct event *e;
  uint64_t type;
  *handle = NULL;
  if (!c || !d) return 0;
#ifdef RECORD_V4
  type = *(uint8_t *)&d->type;
#else
  type = d->type;
#endif
  e = calloc(1, sizeof *e);
  if (!e) return 0;
  pthread_mutex_lock(&lock);
  e->type = type;
  e->id = next_id++;
  e->c = c;
  if (type == (1 << 0)) {
    fprintf(c->out, "start id=%lu type=group\n", e->id);
  } else if (type == (1 << 1)) {
    struct coll_d *x = &d->u.coll;
#ifdef RECORD_V4
    void *group = d->parent;
#else
    void *group = x->group;
#endif
    fprintf(c->out,
            "start id=%lu type=coll func=%s count=%zu dtype=%s root=%d seq=%llu nch=%u algo=%s "
            "proto=%s group=%lu rank=%d parent=%lu\n",
            e->id, x->func, x->count, x->dtype, x->root, (unsigned long long)x->seq, x->nch,
            x->algo, x->proto, id_of(group), d->rank, id_of(d->parent));
  } else if (type == (1 << 2)) {
    struct p2p_d *x = &d->u.p2p;
#ifdef RECORD_V4
    void *group = d->parent;
#else
    void *group = x->group;
#endif
    fprintf(c->out,
            "start id=%lu type=p2p func=%s count=%zu dtype=%s peer=%d nch=%u group=%lu "
            "parent=%lu\n",
            e->id, x->func, x->count, x->dtype, x->peer, x->nch, id_of(group), id_of(d->parent));
  } else if (type == (1 << 6)) {
    fprintf(c->out, "start id=%lu type=kernel parent=%lu ch=%u t0=%llu\n", e->id,
            id_of(d->parent), d->u.kch.ch, (unsigned long long)d->u.kch.t0);
  } else if (type == (1 << 8)) {
    fprintf(c->out, "start id=%lu type=groupapi depth=%d captured=%d\n", e->id,
            d->u.group_api.depth, d->u.group_api.captured);
  } else if (type == (1 << 9)) {
    struct coll_api_d *x = &d->u.coll_api;
    fprintf(c->out, "start id=%lu type=collapi func=%s count=%zu dtype=%s root=%d parent=%lu\n",
            e->id, x->func, x->count, x->dtype, x->root, id_of(d->parent));
  } else if (type == (1 << 10)) {
    struct p2p_api_d *x = &d->u.p2p_api;
    fprintf(c->out, "start id=%lu type=p2papi func=%s count=%zu dtype=%s parent=%lu\n", e->id,
            x->func, x->count, x->dtype, id_of(d->parent));
  } else {
    fprintf(c->out, "start id=%lu type=other%llu\n", e->id, (unsigned long long)type);
  }
  fflush(c->out);
  pthread_mutex_unlock(&lock);
  *handle = e;
  return 0;
}

static int stop_event(void *handle) {
  struct event *e = handle;
  if (!e) return 0;
  pthread_mutex_lock(&lock);
  fprintf(e->c->out, "stop id=%lu\n", e->id);
  fflush(e->c->out);
  pthread_mutex_unlock(&lock);
  /* Not freed: a stopped API event stays the parent of later events (as in NCCL), so its
   * handle must stay readable; a test run is short. */
  return 0;
}

static int record_state(void *handle, int state, uint64_t *args) {
  struct event *e = handle;
  if (!e) return 0;
  pthread_mutex_lock(&lock);
  fprintf(e->c->out, "record id=%lu state=%d t1=%llu\n", e->id, state,
          args ? (unsigned long long)*args : 0ULL);
  fflush(e->c->out);
  pthread_mutex_unlock(&lock);
  return 0;
}

static int finalize(void *context) {
  struct ctx *c = context;
  if (!c) return 0;
  pthread_mutex_lock(&lock);
  fprintf(c->out, "finalize\n");
  fclose(c->out);
  pthread_mutex_unlock(&lock);
  free(c);
  return 0;
}

#ifdef RECORD_V4
static int init_v4(void **context, int *mask, const char *name, uint64_t hash, int nnodes,
                   int nranks, int rank, logger_t log) {
  return do_init(context, mask, name, hash, nnodes, nranks, rank, log);
}

struct {
  const char *name;
  void *init, *start, *stop, *record, *finalize;
} ncclProfiler_v4 = {"record-v4", (void *)init_v4, (void *)start_event, (void *)stop_event,
                     (void *)record_state, (void *)finalize};
#else
static int init_v5(void **context, uint64_t hash, int *mask, const char *name, int nnodes,
                   int nranks, int rank, logger_t log) {
  return do_init(context, mask, name, hash, nnodes, nranks, rank, log);
}

struct {
  const char *name;
  void *init, *start, *stop, *record, *finalize;
} ncclProfiler_v5 = {"record-v5", (void *)init_v5, (void *)start_event, (void *)stop_event,
                     (void *)record_state, (void *)finalize};
#endif
