/*
 * nccl.h -- the C interface of libccl, a drop-in replacement for NVIDIA's libnccl.so.2.
 *
 * Written for libccl from the ABI facts in shared/NCCL_ABI.md (enum values, struct layouts,
 * function signatures); it is not derived from NVIDIA's header text.
 *
 * API level: NCCL 2.28.9 (NCCL_VERSION_CODE 22809, what ncclGetVersion reports). Every function
 * added up to NCCL 2.30.7 is declared and exported too, so programs built against newer headers
 * still link. Every function exists twice: nccl<Name> and the profiling twin pnccl<Name>.
 * symbols.txt next to this file lists the base names of all exported functions.
 *
 * ncclConfig_t: by default this header declares the 2.28 layout (80 bytes on x86-64), exactly
 * what NVIDIA's 2.28.9 header declares, and NCCL_CONFIG_INITIALIZER stamps version 22809; the
 * library copies min(config->size, its own size) bytes and resets fields newer than
 * config->version, so such a program is read correctly by libccl and by NVIDIA 2.28+.
 * Define CCL_CONFIG_V2_30 before including this header to get the 2.30 layout (96 bytes:
 * graphUsageMode, numRmaCtx, maxP2pPeers, graphStreamOrdering); the initializer then stamps
 * version NCCL_VERSION(2,30,7) so the library honours those four fields (with version 22809
 * they would be reset to defaults by the version gates). Either way `size` tells the library
 * how many bytes the caller owns.
 *
 * cudaStream_t: taken from <cuda_runtime.h> when the compiler can find it (__has_include);
 * otherwise declared here with CUDA's own definition (pointer to struct CUstream_st), guarded
 * by CUDA's driver_types.h include guard so the two never disagree. Define CCL_NO_CUDA_RUNTIME
 * to never include <cuda_runtime.h> (builds without CUDA; the host backend).
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <stddef.h> /* size_t, NULL */
#include <stdint.h> /* uint64_t and the fixed-width types of the param API */
#include <limits.h> /* INT_MIN */

/* ---------------------------------------------------------------- CUDA stream type ------ */
#if !defined(CCL_NO_CUDA_RUNTIME) && defined(__has_include)
#  if __has_include(<cuda_runtime.h>)
#    include <cuda_runtime.h>
#    define CCL_HAVE_CUDA_RUNTIME_H 1
#  endif
#endif
#if !defined(CCL_HAVE_CUDA_RUNTIME_H) && !defined(__DRIVER_TYPES_H__) && \
    !defined(CCL_CUDA_STREAM_T_DECLARED)
#  define CCL_CUDA_STREAM_T_DECLARED 1
/* Same type as CUDA's driver_types.h: an opaque pointer; NULL is the legacy default stream. */
typedef struct CUstream_st* cudaStream_t;
#endif

/* ---------------------------------------------------------------- version --------------- */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

/* X*1000+Y*100+Z up to 2.8.x, X*10000+Y*100+Z from 2.9 on (2.28.9 -> 22809). */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22809

/* libccl identification (not part of NVIDIA's API). */
#define CCL_LIBCCL 1

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- basic types ----------- */
/* Communicator: pointer to an opaque struct. */
typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

/* Symmetric-memory window: opaque pointer. */
typedef struct ncclWindow_vidmem* ncclWindow_t;

#define NCCL_UNIQUE_ID_BYTES 128
/* Opaque bootstrap token, 128 bytes, passed by value to ncclCommInitRank*. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* All enums below are 4-byte ints. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

/* Reduction operations. Values >= ncclNumOps are per-communicator PreMulSum ops returned by
 * ncclRedOpCreatePreMulSum. ncclMaxRedOp pins the enum to a 32-bit int. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the PreMulSum scalar lives: device memory (read when the op executes) or host memory
 * (read once, during ncclRedOpCreatePreMulSum). */
typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;

/* ---------------------------------------------------------------- constants ------------- */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR (-1)
#define NCCL_UNDEF_FLOAT (-1.0f)
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
/* Required alignment of symmetric window buffers. */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags. */
#define NCCL_REVOKE_DEFAULT 0x00

/* ---------------------------------------------------------------- ncclConfig_t ---------- */
/* Field order is the ABI. x86-64 offsets: size 0, magic 8, version 12, blocking 16,
 * cgaClusterSize 20, minCTAs 24, maxCTAs 28, netName 32, splitShare 40, trafficClass 44,
 * commName 48, collnetEnable 56, CTAPolicy 60, shrinkShare 64, nvlsCTAs 68,
 * nChannelsPerNetPeer 72, nvlinkCentricSched 76 (2.28 size 80); graphUsageMode 80,
 * numRmaCtx 84 (2.29 size 88); maxP2pPeers 88, graphStreamOrdering 92 (2.30 size 96). */
typedef struct ncclConfig_v {
  size_t size;                /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;         /* NCCL_API_MAGIC */
  unsigned int version;       /* version code of the caller's header */
  int blocking;               /* 2.14 */
  int cgaClusterSize;         /* 2.17 */
  int minCTAs;                /* 2.17 */
  int maxCTAs;                /* 2.17 */
  const char* netName;        /* 2.17 */
  int splitShare;             /* 2.18 */
  int trafficClass;           /* 2.25 */
  const char* commName;       /* 2.26 */
  int collnetEnable;          /* 2.27 */
  int CTAPolicy;              /* 2.27 */
  int shrinkShare;            /* 2.27 */
  int nvlsCTAs;               /* 2.27 */
  int nChannelsPerNetPeer;    /* 2.28 */
  int nvlinkCentricSched;     /* 2.28 */
#if defined(CCL_CONFIG_V2_30)
  int graphUsageMode;         /* 2.29 */
  int numRmaCtx;              /* 2.29 */
  int maxP2pPeers;            /* 2.30.0 */
  int graphStreamOrdering;    /* 2.30.5 */
#endif
} ncclConfig_t;

#if defined(CCL_CONFIG_V2_30)
#  define CCL_CONFIG_VERSION_CODE NCCL_VERSION(2, 30, 7)
#  define CCL_CONFIG_TAIL_INIT_ \
    , NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT
#else
#  define CCL_CONFIG_VERSION_CODE NCCL_VERSION_CODE
#  define CCL_CONFIG_TAIL_INIT_
#endif

/* Positional so that it works in C89..C23 and C++98..C++23 alike. */
#define NCCL_CONFIG_INITIALIZER {                                                         \
    sizeof(ncclConfig_t),    /* size */                                                  \
    NCCL_API_MAGIC,          /* magic */                                                 \
    CCL_CONFIG_VERSION_CODE, /* version */                                               \
    NCCL_CONFIG_UNDEF_INT,   /* blocking */                                              \
    NCCL_CONFIG_UNDEF_INT,   /* cgaClusterSize */                                        \
    NCCL_CONFIG_UNDEF_INT,   /* minCTAs */                                               \
    NCCL_CONFIG_UNDEF_INT,   /* maxCTAs */                                               \
    NCCL_CONFIG_UNDEF_PTR,   /* netName */                                               \
    NCCL_CONFIG_UNDEF_INT,   /* splitShare */                                            \
    NCCL_CONFIG_UNDEF_INT,   /* trafficClass */                                          \
    NCCL_CONFIG_UNDEF_PTR,   /* commName */                                              \
    NCCL_CONFIG_UNDEF_INT,   /* collnetEnable */                                         \
    NCCL_CONFIG_UNDEF_INT,   /* CTAPolicy */                                             \
    NCCL_CONFIG_UNDEF_INT,   /* shrinkShare */                                           \
    NCCL_CONFIG_UNDEF_INT,   /* nvlsCTAs */                                              \
    NCCL_CONFIG_UNDEF_INT,   /* nChannelsPerNetPeer */                                   \
    NCCL_CONFIG_UNDEF_INT    /* nvlinkCentricSched */                                    \
    CCL_CONFIG_TAIL_INIT_                                                                 \
  }

/* ---------------------------------------------------------------- other structs --------- */
#define CCL_SIM_INFO_MAGIC 0x74685283
/* ncclGroupSimulateEnd output (24 bytes on x86-64). */
typedef struct ncclSimInfo_v {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds; NCCL_UNDEF_FLOAT until simulated */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER {                                                       \
    sizeof(ncclSimInfo_t), CCL_SIM_INFO_MAGIC, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT        \
  }

/* One signal to wait for in ncclWaitSignal (2.29). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

/* Handle to one library parameter (2.30 param API). */
typedef struct ncclParamHandle_st* ncclParamHandle_t;

/* ---------------------------------------------------------------- declarations ---------- */
/* NCCL_API_DECL(ret, name, params) declares `name` and its profiling twin `p##name`. */
#define NCCL_API_DECL(ret, name, params) ret name params; ret p##name params

/* Memory and ids */
NCCL_API_DECL(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size));
NCCL_API_DECL(ncclResult_t, ncclMemFree, (void* ptr));
NCCL_API_DECL(ncclResult_t, ncclGetVersion, (int* version));
NCCL_API_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId));
NCCL_API_DECL(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId));

/* Communicators */
NCCL_API_DECL(ncclResult_t, ncclCommInitRank,
              (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank));
NCCL_API_DECL(ncclResult_t, ncclCommInitRankConfig,
              (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
               ncclConfig_t* config));
NCCL_API_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t* comms, int ndev, const int* devlist));
NCCL_API_DECL(ncclResult_t, ncclCommInitRankScalable,
              (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
               ncclConfig_t* config));
NCCL_API_DECL(ncclResult_t, ncclCommSplit,
              (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config));
NCCL_API_DECL(ncclResult_t, ncclCommShrink,
              (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
               ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags));
NCCL_API_DECL(ncclResult_t, ncclCommGrow,
              (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
               ncclComm_t* newcomm, ncclConfig_t* config));
NCCL_API_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm));
NCCL_API_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm));
NCCL_API_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm));
NCCL_API_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
NCCL_API_DECL(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags));
NCCL_API_DECL(ncclResult_t, ncclCommResume, (ncclComm_t comm));
NCCL_API_DECL(ncclResult_t, ncclCommMemStats,
              (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value));

/* Queries and errors */
NCCL_API_DECL(const char*, ncclGetErrorString, (ncclResult_t result));
/* comm may be NULL; returns the calling thread's / the communicator's last error message. */
NCCL_API_DECL(const char*, ncclGetLastError, (ncclComm_t comm));
NCCL_API_DECL(void, ncclResetDebugInit, (void));
NCCL_API_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError));
NCCL_API_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count));
NCCL_API_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device));
NCCL_API_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank));

/* Buffer registration and symmetric windows */
NCCL_API_DECL(ncclResult_t, ncclCommRegister,
              (const ncclComm_t comm, void* buff, size_t size, void** handle));
NCCL_API_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle));
NCCL_API_DECL(ncclResult_t, ncclCommWindowRegister,
              (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
NCCL_API_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
NCCL_API_DECL(ncclResult_t, ncclWinGetUserPtr,
              (ncclComm_t comm, ncclWindow_t win, void** outUserPtr));

/* Reduction operators */
NCCL_API_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
              (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
               ncclScalarResidence_t residence, ncclComm_t comm));
NCCL_API_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

/* Collectives. In-place: AllReduce/Broadcast/Reduce/AlltoAll with sendbuff == recvbuff;
 * AllGather and Gather (at root) with sendbuff == recvbuff + rank*count; ReduceScatter with
 * recvbuff == sendbuff + rank*recvcount; Scatter (at root) with recvbuff == sendbuff +
 * root*count. */
NCCL_API_DECL(ncclResult_t, ncclAllReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclBroadcast,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               int root, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclBcast,
              (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
               cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclAllGather,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
               ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclReduceScatter,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclAlltoAll,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclGather,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               int root, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclScatter,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               int root, ncclComm_t comm, cudaStream_t stream));

/* Point to point */
NCCL_API_DECL(ncclResult_t, ncclSend,
              (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
               ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclRecv,
              (void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
               ncclComm_t comm, cudaStream_t stream));

/* One-sided operations on registered windows (2.29) */
NCCL_API_DECL(ncclResult_t, ncclPutSignal,
              (const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
               ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
               unsigned int flags, ncclComm_t comm, cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclSignal,
              (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
               cudaStream_t stream));
NCCL_API_DECL(ncclResult_t, ncclWaitSignal,
              (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
               cudaStream_t stream));

/* Groups */
NCCL_API_DECL(ncclResult_t, ncclGroupStart, (void));
NCCL_API_DECL(ncclResult_t, ncclGroupEnd, (void));
NCCL_API_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo));

/* Parameters (2.30) */
NCCL_API_DECL(ncclResult_t, ncclParamBind, (ncclParamHandle_t* handle, const char* key));
NCCL_API_DECL(ncclResult_t, ncclParamGetI8, (ncclParamHandle_t handle, int8_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetI16, (ncclParamHandle_t handle, int16_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetI32, (ncclParamHandle_t handle, int32_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetI64, (ncclParamHandle_t handle, int64_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetU8, (ncclParamHandle_t handle, uint8_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetU16, (ncclParamHandle_t handle, uint16_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetU32, (ncclParamHandle_t handle, uint32_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetU64, (ncclParamHandle_t handle, uint64_t* value));
NCCL_API_DECL(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t handle, const char** value));
NCCL_API_DECL(ncclResult_t, ncclParamGet,
              (ncclParamHandle_t handle, void* value, int maxLen, int* len));
NCCL_API_DECL(ncclResult_t, ncclParamGetParameter,
              (const char* key, const char** value, int* len));
NCCL_API_DECL(ncclResult_t, ncclParamGetAllParameterKeys, (const char*** keys, int* nKeys));
NCCL_API_DECL(void, ncclParamDumpAll, (void));

/* ---------------------------------------------------------------- device-API host side -- */
/*
 * Host functions of NVIDIA's device API (declared by NVIDIA in its nccl_device headers, not in
 * nccl.h). libccl exports them so that such programs link; they MAY RETURN ncclInvalidUsage
 * (or, for the non-ncclResult_t ones, an empty team / -1 / 0):
 *   ncclCommQueryProperties, ncclDevCommCreate, ncclDevCommDestroy, ncclGetLsaDevicePointer,
 *   ncclGetPeerDevicePointer, ncclGetMultimemDevicePointer, ncclGetLsaMultimemDevicePointer,
 *   ncclTeamWorld, ncclTeamLsa, ncclTeamRail, ncclTeamRankToWorld, ncclTeamRankToLsa,
 *   ncclLsaBarrierCreateRequirement, ncclGinBarrierCreateRequirement,
 *   ncclLLA2ACreateRequirement, ncclLLA2ACalcSlots.
 * The prototypes use the C-linkage (2.29+) forms. Types passed by value are complete here
 * (ncclTeam_t: three ints; ncclMultimemHandle_t: one pointer); the others are opaque.
 * Skipped when NVIDIA's device headers are being processed (their guard _NCCL_DEVICE_CORE_H_
 * is defined before they include nccl.h) or when CCL_NO_DEVICE_API is defined.
 */
#if !defined(_NCCL_DEVICE_CORE_H_) && !defined(CCL_NO_DEVICE_API)
struct ncclDevComm;
typedef struct ncclDevComm ncclDevComm_t;
struct ncclDevCommRequirements;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
struct ncclDevResourceRequirements;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
struct ncclCommProperties;
typedef struct ncclCommProperties ncclCommProperties_t;
struct ncclLsaBarrierHandle;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
struct ncclGinBarrierHandle;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
struct ncclLLA2AHandle;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;
struct ncclTeam {
  int nRanks, rank, stride;
};
typedef struct ncclTeam ncclTeam_t;
struct ncclMultimemHandle {
  void* mcBasePtr;
};
typedef struct ncclMultimemHandle ncclMultimemHandle_t;

NCCL_API_DECL(ncclResult_t, ncclCommQueryProperties,
              (ncclComm_t comm, ncclCommProperties_t* props));
NCCL_API_DECL(ncclResult_t, ncclDevCommCreate,
              (ncclComm_t comm, const ncclDevCommRequirements_t* reqs, ncclDevComm_t* outDevComm));
NCCL_API_DECL(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const ncclDevComm_t* devComm));
NCCL_API_DECL(ncclResult_t, ncclGetLsaDevicePointer,
              (ncclWindow_t window, size_t offset, int lsaRank, void** outPtr));
NCCL_API_DECL(ncclResult_t, ncclGetPeerDevicePointer,
              (ncclWindow_t window, size_t offset, int peer, void** outPtr));
NCCL_API_DECL(ncclResult_t, ncclGetMultimemDevicePointer,
              (ncclWindow_t window, size_t offset, ncclMultimemHandle_t multimem, void** outPtr));
NCCL_API_DECL(ncclResult_t, ncclGetLsaMultimemDevicePointer,
              (ncclWindow_t window, size_t offset, void** outPtr));
NCCL_API_DECL(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm));
NCCL_API_DECL(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm));
NCCL_API_DECL(ncclTeam_t, ncclTeamRail, (ncclComm_t comm));
NCCL_API_DECL(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank));
NCCL_API_DECL(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank));
NCCL_API_DECL(ncclResult_t, ncclLsaBarrierCreateRequirement,
              (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,
               ncclDevResourceRequirements_t* outReq));
NCCL_API_DECL(ncclResult_t, ncclGinBarrierCreateRequirement,
              (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,
               ncclDevResourceRequirements_t* outReq));
NCCL_API_DECL(ncclResult_t, ncclLLA2ACreateRequirement,
              (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
               ncclDevResourceRequirements_t* outReq));
NCCL_API_DECL(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize));
#endif /* device-API host side */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
