/*
 * ext_check.c -- libccl's own C functions (ffi/include/ccl_ext.h) against the library. Build
 * and run (tests/abi/run.sh does both):
 *
 *   gcc -std=gnu11 -Wall -Wextra -Werror -I ffi/include tests/abi/ext_check.c \
 *       -L target/debug -Wl,-rpath,$PWD/target/debug -lnccl -o target/abi/ext_check
 *   NCCL_SOCKET_IFNAME=lo target/abi/ext_check
 *
 * Checks cclMonitorSnapshot: with no monitor (enabled false, no keys); the size protocol
 * (NULL/0 asks the size, a short buffer is refused and left alone, NULL needed is refused);
 * then two ranks in two processes (forked; each its own CCL_HOSTID, so they talk over the
 * multipath transport on lo) with CCL_MONITOR=1 all-reduce 4 MiB of host memory, and rank
 * 0's snapshot must name peer 1 with its 4 MiB completed (to 1%) and nothing outstanding.
 * Prints "ext_check: N passed, M failed"; exits 1 when anything failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl_ext.h"

static int passed, failed;
#define CHECK(cond, what)                                   \
  do {                                                      \
    if (cond) {                                             \
      passed++;                                             \
    } else {                                                \
      failed++;                                             \
      fprintf(stderr, "FAIL ext_check: %s (%s)\n", what, #cond); \
    }                                                       \
  } while (0)

/* The snapshot as a malloc'ed string (NULL on failure). The collector may add to it between
   asking for the size and filling the buffer, so there is room to spare and a few tries. */
static char* snapshot(void) {
  for (int tries = 0; tries < 16; tries++) {
    size_t need = 0;
    if (cclMonitorSnapshot(NULL, 0, &need) != ncclSuccess || need == 0) return NULL;
    size_t len = need + 65536;
    char* buf = malloc(len);
    size_t got = 0;
    if (buf != NULL && cclMonitorSnapshot(buf, len, &got) == ncclSuccess && got <= len &&
        strlen(buf) + 1 == got)
      return buf;
    free(buf);
  }
  return NULL;
}

/* The number after "\"name\":" in the peer-1 object of a snapshot, or -1. */
static long long peer1_field(const char* snap, const char* name) {
  const char* k = strstr(snap, "{\"key\":{\"peer\":1}");
  if (k == NULL) return -1;
  const char* end = strchr(k + 1, '}');
  end = end ? strchr(end + 1, '}') : NULL;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", name);
  const char* f = strstr(k, pat);
  if (f == NULL || (end && f > end)) return -1;
  return atoll(f + strlen(pat));
}

static void without_monitor(void) {
  char* s = snapshot();
  CHECK(s != NULL, "snapshot with the monitor off");
  if (s) {
    CHECK(strstr(s, "\"enabled\":false") != NULL, "off: enabled false");
    CHECK(strstr(s, "\"keys\":[]") != NULL, "off: no keys");
  }
  size_t need = 0;
  CHECK(cclMonitorSnapshot(NULL, 0, &need) == ncclSuccess && s && need == strlen(s) + 1,
        "size query");
  char small[4] = {'x', 'x', 'x', 'x'};
  size_t got = 0;
  CHECK(cclMonitorSnapshot(small, sizeof small, &got) == ncclInvalidArgument, "short buffer");
  CHECK(got == need && small[0] == 'x', "short buffer: size told, nothing written");
  CHECK(cclMonitorSnapshot(small, sizeof small, NULL) == ncclInvalidArgument, "needed NULL");
  free(s);
}

/* One rank: all-reduce, then (rank 0) check the snapshot. Returns the failures. */
static int rank_main(int rank, ncclUniqueId id) {
  char host[32];
  snprintf(host, sizeof host, "ext-check-%d", rank);
  setenv("CCL_HOSTID", host, 1);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    fprintf(stderr, "FAIL ext_check: rank %d init: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  size_t count = 1 << 20;
  float* buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
  int bad = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL) != ncclSuccess;
  bad |= buf[0] != 3.0f || buf[count - 1] != 3.0f;
  /* The ranks finish the all-reduce together; acknowledgements of the last chunks may
     still be arriving, and the monitor's collector drains every millisecond or so. */
  if (rank == 0) {
    long long bytes = -1, open = -1;
    /* Over the multipath transport a chunk declared lost whose first copy is acknowledged
       late after all is counted by a remembered size, which reordering on loopback can
       misstate by part of a chunk (60,000 bytes): 1% of slack for that, no more. */
    long long want = (long long)(count * 4) - (long long)(count * 4) / 100;
    for (int i = 0; i < 200 && !(bytes >= want && open == 0); i++) {
      usleep(10000);
      char* s = snapshot();
      if (s == NULL) continue;
      if (strstr(s, "\"enabled\":true") == NULL) bad = 1;
      bytes = peer1_field(s, "bytes");
      open = peer1_field(s, "outstanding");
      free(s);
    }
    if (bytes < want || open != 0) {
      char* s = snapshot();
      const char* d = s ? strstr(s, "\"dropped\":") : NULL;
      fprintf(stderr, "FAIL ext_check: peer 1: %lld bytes, %lld outstanding (%.24s)\n", bytes,
              open, d ? d : "no dropped count");
      if (getenv("EXT_CHECK_DUMP")) fprintf(stderr, "%s\n", s ? s : "(no snapshot)");
      free(s);
      bad = 1;
    }
  }
  /* A second all-reduce keeps rank 1 alive until rank 0 has looked. */
  bad |= ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, NULL) != ncclSuccess;
  ncclCommDestroy(comm);
  free(buf);
  return bad;
}

static void with_monitor(void) {
  setenv("CCL_MONITOR", "1", 1);
  setenv("CCL_NET", "mpt", 1);
  /* Not the one-exchange all-reduce a caller may have set for coll_check: both ranks then
     send their whole 4 MiB at once over loopback UDP, where a chunk declared lost and
     acknowledged late is counted by its path's average lost size, not its own, so the
     byte count this checks exactly can come out a few KiB short. */
  unsetenv("CCL_ALLREDUCE_EXCHANGE_BYTES");
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    CHECK(0, "ncclGetUniqueId");
    return;
  }
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(r, id));
  }
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    char what[64];
    snprintf(what, sizeof what, "rank %d: all-reduce and snapshot", r);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, what);
  }
}

int main(void) {
  without_monitor();
  with_monitor();
  printf("ext_check: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
