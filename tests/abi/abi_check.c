/*
 * abi_check.c -- compile-time and run-time checks of libccl's C ABI against the NCCL 2.28.9
 * facts (shared/NCCL_ABI.md). Build (tests/abi/run.sh does this):
 *
 *   gcc -std=c11 -Wall -Wextra -Werror -I ffi/include tests/abi/abi_check.c \
 *       -L target/debug -Wl,-rpath,$PWD/target/debug -lnccl -o target/abi/abi_check
 *
 * Add -DCCL_CONFIG_V2_30 to check the 96-byte 2.30 ncclConfig_t layout instead of the 2.28 one.
 * Add -DABI_CHECK_NO_LIB to build only the compile-time part (no library needed).
 * Prints "abi_check: N passed, M failed"; exits 1 when anything failed.
 *
 * Checks: every enum value, sizeof/offsetof of ncclUniqueId, ncclConfig_t, ncclSimInfo_t,
 * ncclWaitSignalDesc_t; the initializers; NCCL_VERSION; then against the library:
 * ncclGetVersion, ncclGetVersion(NULL), ncclGetErrorString for every code, ncclGetLastError(NULL),
 * and a one-rank communicator: config handling (NULL, current, old 2.19-sized, bad magic),
 * Count/UserRank/CuDevice/GetAsyncError, a 1-rank AllReduce, buffer and window registration
 * (and a registration refused after finalize), Finalize/Destroy.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>

#include "nccl.h"

#define SA(cond) _Static_assert(cond, #cond)

/* ------------------------------------------------------------ compile-time checks --------- */
SA(sizeof(ncclResult_t) == 4);
SA(sizeof(ncclRedOp_t) == 4);
SA(sizeof(ncclDataType_t) == 4);
SA(sizeof(ncclScalarResidence_t) == 4);
SA(sizeof(ncclCommMemStat_t) == 4);

SA(ncclSuccess == 0);
SA(ncclUnhandledCudaError == 1);
SA(ncclSystemError == 2);
SA(ncclInternalError == 3);
SA(ncclInvalidArgument == 4);
SA(ncclInvalidUsage == 5);
SA(ncclRemoteError == 6);
SA(ncclInProgress == 7);
SA(ncclTimeout == 8);
SA(ncclNumResults == 9);

SA(ncclSum == 0);
SA(ncclProd == 1);
SA(ncclMax == 2);
SA(ncclMin == 3);
SA(ncclAvg == 4);
SA(ncclNumOps == 5);
SA(ncclMaxRedOp == 0x7fffffff);

SA(ncclInt8 == 0 && ncclChar == 0);
SA(ncclUint8 == 1);
SA(ncclInt32 == 2 && ncclInt == 2);
SA(ncclUint32 == 3);
SA(ncclInt64 == 4);
SA(ncclUint64 == 5);
SA(ncclFloat16 == 6 && ncclHalf == 6);
SA(ncclFloat32 == 7 && ncclFloat == 7);
SA(ncclFloat64 == 8 && ncclDouble == 8);
SA(ncclBfloat16 == 9);
SA(ncclFloat8e4m3 == 10);
SA(ncclFloat8e5m2 == 11);
SA(ncclNumTypes == 12);

SA(ncclScalarDevice == 0);
SA(ncclScalarHostImmediate == 1);

SA(ncclStatGpuMemSuspend == 0);
SA(ncclStatGpuMemSuspended == 1);
SA(ncclStatGpuMemPersist == 2);
SA(ncclStatGpuMemTotal == 3);

SA(NCCL_MAJOR == 2 && NCCL_MINOR == 28 && NCCL_PATCH == 9);
SA(NCCL_VERSION_CODE == 22809);
SA(NCCL_VERSION(2, 28, 9) == 22809);
SA(NCCL_VERSION(2, 30, 7) == 23007);
SA(NCCL_VERSION(2, 8, 4) == 2804);   /* old rule up to 2.8 */
SA(NCCL_VERSION(2, 9, 6) == 20906);  /* new rule from 2.9 */
SA(NCCL_VERSION(3, 0, 0) == 30000);
SA(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE);

SA(NCCL_UNIQUE_ID_BYTES == 128);
SA(sizeof(ncclUniqueId) == 128);
SA(sizeof(ncclComm_t) == sizeof(void*));
SA(sizeof(ncclWindow_t) == sizeof(void*));
SA(sizeof(ncclParamHandle_t) == sizeof(void*));
SA(sizeof(cudaStream_t) == sizeof(void*));

SA(NCCL_CONFIG_UNDEF_INT == INT_MIN);
SA(NCCL_SPLIT_NOCOLOR == -1);
SA(NCCL_API_MAGIC == 0xcafebeef);
SA(NCCL_WIN_DEFAULT == 0 && NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_WIN_STRICT_ORDERING == 2);
SA(NCCL_WIN_REQUIRED_ALIGNMENT == 4096);
SA(NCCL_CTA_POLICY_DEFAULT == 0 && NCCL_CTA_POLICY_EFFICIENCY == 1 && NCCL_CTA_POLICY_ZERO == 2);
SA(NCCL_SHRINK_DEFAULT == 0 && NCCL_SHRINK_ABORT == 1);

#if defined(__x86_64__) || defined(__aarch64__)
/* LP64 layout (NCCL_ABI.md gives the x86-64 numbers; aarch64 Linux is the same). */
SA(offsetof(ncclConfig_t, size) == 0);
SA(offsetof(ncclConfig_t, magic) == 8);
SA(offsetof(ncclConfig_t, version) == 12);
SA(offsetof(ncclConfig_t, blocking) == 16);
SA(offsetof(ncclConfig_t, cgaClusterSize) == 20);
SA(offsetof(ncclConfig_t, minCTAs) == 24);
SA(offsetof(ncclConfig_t, maxCTAs) == 28);
SA(offsetof(ncclConfig_t, netName) == 32);
SA(offsetof(ncclConfig_t, splitShare) == 40);
SA(offsetof(ncclConfig_t, trafficClass) == 44);  /* end of 2.19..2.26 layout: 48 bytes */
SA(offsetof(ncclConfig_t, commName) == 48);
SA(offsetof(ncclConfig_t, collnetEnable) == 56);
SA(offsetof(ncclConfig_t, CTAPolicy) == 60);
SA(offsetof(ncclConfig_t, shrinkShare) == 64);
SA(offsetof(ncclConfig_t, nvlsCTAs) == 68);       /* end of 2.27 layout: 72 bytes */
SA(offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72);
SA(offsetof(ncclConfig_t, nvlinkCentricSched) == 76);  /* end of 2.28 layout: 80 bytes */
#if defined(CCL_CONFIG_V2_30)
SA(offsetof(ncclConfig_t, graphUsageMode) == 80);
SA(offsetof(ncclConfig_t, numRmaCtx) == 84);          /* end of 2.29 layout: 88 bytes */
SA(offsetof(ncclConfig_t, maxP2pPeers) == 88);
SA(offsetof(ncclConfig_t, graphStreamOrdering) == 92);
SA(sizeof(ncclConfig_t) == 96);
#else
SA(sizeof(ncclConfig_t) == 80);
#endif
SA(sizeof(ncclSimInfo_t) == 24);
SA(offsetof(ncclSimInfo_t, magic) == 8);
SA(offsetof(ncclSimInfo_t, version) == 12);
SA(offsetof(ncclSimInfo_t, estimatedTime) == 16);
#endif
SA(sizeof(ncclWaitSignalDesc_t) == 16);
SA(offsetof(ncclWaitSignalDesc_t, opCnt) == 0);
SA(offsetof(ncclWaitSignalDesc_t, peer) == 4);
SA(offsetof(ncclWaitSignalDesc_t, sigIdx) == 8);
SA(offsetof(ncclWaitSignalDesc_t, ctx) == 12);

/* ------------------------------------------------------------ run-time checks ------------ */
static int g_pass, g_fail;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (cond) {                                                            \
      g_pass++;                                                            \
    } else {                                                               \
      g_fail++;                                                            \
      printf("FAIL %s:%d: %s -- ", __FILE__, __LINE__, #cond);             \
      printf(__VA_ARGS__);                                                 \
      printf("\n");                                                        \
    }                                                                      \
  } while (0)

static void check_initializers(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  CHECK(c.size == sizeof(ncclConfig_t), "size %zu", c.size);
  CHECK(c.magic == 0xcafebeefu, "magic %#x", c.magic);
#if defined(CCL_CONFIG_V2_30)
  CHECK(c.version == 23007u, "version %u", c.version);
  CHECK(c.graphUsageMode == INT_MIN && c.numRmaCtx == INT_MIN && c.maxP2pPeers == INT_MIN &&
            c.graphStreamOrdering == INT_MIN, "2.29/2.30 fields not UNDEF");
#else
  CHECK(c.version == 22809u, "version %u", c.version);
#endif
  CHECK(c.blocking == INT_MIN && c.cgaClusterSize == INT_MIN && c.minCTAs == INT_MIN &&
            c.maxCTAs == INT_MIN && c.splitShare == INT_MIN && c.trafficClass == INT_MIN &&
            c.collnetEnable == INT_MIN && c.CTAPolicy == INT_MIN && c.shrinkShare == INT_MIN &&
            c.nvlsCTAs == INT_MIN && c.nChannelsPerNetPeer == INT_MIN &&
            c.nvlinkCentricSched == INT_MIN,
        "int fields not NCCL_CONFIG_UNDEF_INT");
  CHECK(c.netName == NULL && c.commName == NULL, "pointer fields not NULL");

  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  CHECK(s.size == sizeof(ncclSimInfo_t) && s.size == 24, "siminfo size %zu", s.size);
  CHECK(s.magic == 0x74685283u, "siminfo magic %#x", s.magic);
  CHECK(s.version == 22809u, "siminfo version %u", s.version);
  CHECK(s.estimatedTime == -1.0f && NCCL_UNDEF_FLOAT == -1.0f, "siminfo time %f",
        (double)s.estimatedTime);
}

#ifndef ABI_CHECK_NO_LIB
static void check_library_basics(void) {
  int v = -1;
  ncclResult_t r = ncclGetVersion(&v);
  CHECK(r == ncclSuccess, "ncclGetVersion -> %d", (int)r);
  CHECK(v == 22809, "ncclGetVersion reported %d", v);
  v = -1;
  r = pncclGetVersion(&v);
  CHECK(r == ncclSuccess && v == 22809, "pncclGetVersion -> %d, %d", (int)r, v);
  r = ncclGetVersion(NULL);
  CHECK(r == ncclInvalidArgument, "ncclGetVersion(NULL) -> %d", (int)r);

  for (int code = 0; code <= (int)ncclNumResults; code++) {
    const char* s = ncclGetErrorString((ncclResult_t)code);
    CHECK(s != NULL && s[0] != '\0', "ncclGetErrorString(%d) is %s", code,
          s ? "empty" : "NULL");
    const char* ps = pncclGetErrorString((ncclResult_t)code);
    CHECK(ps != NULL && ps[0] != '\0', "pncclGetErrorString(%d)", code);
  }
  /* Distinct messages for the real codes. */
  for (int a = 0; a < (int)ncclNumResults; a++)
    for (int b = a + 1; b < (int)ncclNumResults; b++) {
      const char* sa = ncclGetErrorString((ncclResult_t)a);
      const char* sb = ncclGetErrorString((ncclResult_t)b);
      if (sa && sb) CHECK(strcmp(sa, sb) != 0, "codes %d and %d share message '%s'", a, b, sa);
    }
  {
    const char* s = ncclGetErrorString((ncclResult_t)1234);
    CHECK(s != NULL, "ncclGetErrorString(1234) is NULL");
  }
  const char* le = ncclGetLastError(NULL);
  CHECK(le != NULL, "ncclGetLastError(NULL) is NULL");
  /* After a failing call there is a message. */
  (void)ncclGetVersion(NULL);
  le = ncclGetLastError(NULL);
  CHECK(le != NULL, "ncclGetLastError(NULL) after a failure is NULL");
  if (le) printf("  last error after ncclGetVersion(NULL): \"%s\"\n", le);
}

/* A one-rank communicator (no peers needed). */
static ncclResult_t init1(ncclComm_t* comm, ncclConfig_t* cfg) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  return ncclCommInitRankConfig(comm, 1, id, 0, cfg);
}

/* ncclCommRegister / ncclCommWindowRegister on a live communicator: handles and windows come
 * back, a window gives its user pointer back, the registered buffer still works in an
 * operation, and bad arguments fail with ncclInvalidArgument and a message. */
static void check_registration(ncclComm_t comm, int32_t* buf, size_t bytes) {
  void* h = NULL;
  ncclResult_t r = ncclCommRegister(comm, buf, bytes, &h);
  CHECK(r == ncclSuccess && h != NULL, "ncclCommRegister -> %d (%s)", (int)r,
        ncclGetLastError(NULL));
  int32_t out[5] = {0};
  r = ncclAllReduce(buf, out, 5, ncclInt32, ncclSum, comm, NULL);
  CHECK(r == ncclSuccess && memcmp(buf, out, sizeof out) == 0, "allreduce on a registered buffer");
  CHECK(ncclCommDeregister(comm, h) == ncclSuccess, "ncclCommDeregister");
  CHECK(ncclCommDeregister(comm, NULL) == ncclInvalidArgument, "ncclCommDeregister(NULL)");
  CHECK(ncclCommRegister(comm, NULL, 16, &h) == ncclInvalidArgument, "register NULL buffer");
  CHECK(ncclCommRegister(comm, buf, bytes, NULL) == ncclInvalidArgument, "register NULL handle");
  CHECK(ncclCommRegister(NULL, buf, bytes, &h) == ncclInvalidArgument, "register NULL comm");
  const char* msg = ncclGetLastError(NULL);
  CHECK(msg != NULL && msg[0] != '\0', "no message after a failed register");
  ncclWindow_t win = NULL;
  r = ncclCommWindowRegister(comm, buf, bytes, &win, 0);
  CHECK(r == ncclSuccess && win != NULL, "ncclCommWindowRegister -> %d", (int)r);
  void* user = NULL;
  CHECK(ncclWinGetUserPtr(comm, win, &user) == ncclSuccess && user == (void*)buf,
        "ncclWinGetUserPtr gives %p for %p", user, (void*)buf);
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess, "ncclCommWindowDeregister");
  /* A symmetric window (NCCL_WIN_COLL_SYMMETRIC, 1): registered, usable, deregistered. */
  r = ncclCommWindowRegister(comm, buf, bytes, &win, 1);
  CHECK(r == ncclSuccess && win != NULL, "symmetric ncclCommWindowRegister -> %d (%s)", (int)r,
        ncclGetLastError(NULL));
  memset(out, 0, sizeof out);
  r = ncclAllGather(buf, out, 5, ncclInt32, comm, NULL);
  CHECK(r == ncclSuccess && memcmp(buf, out, sizeof out) == 0, "allgather on a symmetric window");
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess, "symmetric ncclCommWindowDeregister");
  /* Inside a group (as nccl-tests registers) the window is agreed at ncclGroupEnd. */
  CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  r = ncclCommWindowRegister(comm, buf, bytes, &win, 1);
  CHECK(r == ncclSuccess && win != NULL, "symmetric ncclCommWindowRegister in a group -> %d", (int)r);
  CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd after a window registration (%s)",
        ncclGetLastError(NULL));
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess, "ncclCommWindowDeregister");
}

static void check_one_rank_comm(void) {
  ncclComm_t comm = NULL;
  ncclResult_t r;

  /* NULL config = defaults. */
  r = init1(&comm, NULL);
  CHECK(r == ncclSuccess && comm != NULL, "1-rank init, NULL config -> %d (%s)", (int)r,
        ncclGetLastError(NULL));
  if (r != ncclSuccess || comm == NULL) return;
  int n = -1, rank = -1, dev = -2;
  CHECK(ncclCommCount(comm, &n) == ncclSuccess && n == 1, "count %d", n);
  CHECK(ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0, "rank %d", rank);
  r = ncclCommCuDevice(comm, &dev);
  CHECK(r == ncclSuccess, "ncclCommCuDevice -> %d (dev %d)", (int)r, dev);
  ncclResult_t ae = ncclNumResults;
  CHECK(ncclCommGetAsyncError(comm, &ae) == ncclSuccess && ae == ncclSuccess, "async %d",
        (int)ae);
  CHECK(ncclCommCount(NULL, &n) == ncclInvalidArgument, "ncclCommCount(NULL)");
  CHECK(ncclCommCount(comm, NULL) == ncclInvalidArgument, "ncclCommCount(comm, NULL)");

  int32_t in[5] = {1, -2, 3, -4, 5}, out[5] = {0};
  r = ncclAllReduce(in, out, 5, ncclInt32, ncclSum, comm, NULL);
  CHECK(r == ncclSuccess, "1-rank allreduce -> %d", (int)r);
  CHECK(memcmp(in, out, sizeof in) == 0, "1-rank allreduce result differs");
  check_registration(comm, in, sizeof in);
  CHECK(ncclCommFinalize(comm) == ncclSuccess, "finalize");
  void* late = NULL;
  r = ncclCommRegister(comm, in, sizeof in, &late);
  CHECK(r == ncclInvalidUsage && late == NULL, "register after finalize -> %d", (int)r);
  CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");

  /* Current config, blocking. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.commName = "abi_check";
  comm = NULL;
  r = init1(&comm, &cfg);
  CHECK(r == ncclSuccess && comm != NULL, "init with NCCL_CONFIG_INITIALIZER -> %d", (int)r);
  if (comm) {
    CHECK(ncclCommFinalize(comm) == ncclSuccess, "finalize");
    CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  }

  /* An old caller: 2.19-sized config (48 bytes), version 2.19.3. Bytes past 48 are garbage the
   * library must not read. */
  {
    union {
      ncclConfig_t c;
      unsigned char raw[256];
    } u;
    memset(u.raw, 0x5a, sizeof u.raw);
    ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    memcpy(&u.c, &init, 48);
    u.c.size = 48;
    u.c.version = NCCL_VERSION(2, 19, 3);
    u.c.blocking = 1;
    comm = NULL;
    r = init1(&comm, &u.c);
    CHECK(r == ncclSuccess && comm != NULL, "init with 48-byte 2.19 config -> %d (%s)", (int)r,
          ncclGetLastError(NULL));
    if (comm) {
      CHECK(ncclCommFinalize(comm) == ncclSuccess, "finalize");
      CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    }
  }

  /* A newer caller: 2.30-sized config (96 bytes), version 2.30.7. */
  {
    union {
      ncclConfig_t c;
      unsigned char raw[96];
      int ints[24];
    } u;
    ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    memset(u.raw, 0, sizeof u.raw);
    memcpy(&u.c, &init, 80);
    for (int i = 80 / 4; i < 96 / 4; i++) u.ints[i] = INT_MIN;
    u.c.size = 96;
    u.c.version = NCCL_VERSION(2, 30, 7);
    comm = NULL;
    r = init1(&comm, &u.c);
    CHECK(r == ncclSuccess && comm != NULL, "init with 96-byte 2.30 config -> %d (%s)", (int)r,
          ncclGetLastError(NULL));
    if (comm) {
      CHECK(ncclCommFinalize(comm) == ncclSuccess, "finalize");
      CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    }
  }

  /* Wrong magic -> ncclInvalidArgument, no communicator. */
  {
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0x12345678u;
    comm = NULL;
    r = init1(&comm, &bad);
    CHECK(r == ncclInvalidArgument, "init with bad magic -> %d", (int)r);
    const char* msg = ncclGetLastError(NULL);
    CHECK(msg != NULL && msg[0] != '\0', "no last-error message after bad magic");
    if (r == ncclSuccess && comm) {
      ncclCommFinalize(comm);
      ncclCommDestroy(comm);
    }
  }

  /* Bad init arguments. */
  {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    CHECK(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL)");
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(ncclCommInitRank(NULL, 1, id, 0) == ncclInvalidArgument, "InitRank(NULL comm ptr)");
    comm = NULL;
    CHECK(ncclCommInitRank(&comm, 1, id, 1) == ncclInvalidArgument, "InitRank(rank==nranks)");
    CHECK(ncclCommInitRank(&comm, 1, id, -1) == ncclInvalidArgument, "InitRank(rank -1)");
    CHECK(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument, "InitRank(nranks 0)");
  }
}
#endif /* ABI_CHECK_NO_LIB */

int main(void) {
  check_initializers();
#ifndef ABI_CHECK_NO_LIB
  check_library_basics();
  check_one_rank_comm();
#endif
  /* The _Static_asserts above already passed, or this program would not exist. */
  printf("abi_check: %d passed, %d failed (compile-time layout/enum assertions: all passed)\n",
         g_pass, g_fail);
  return g_fail ? 1 : 0;
}
