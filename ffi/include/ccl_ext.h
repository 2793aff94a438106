/*
 * ccl_ext.h -- libccl's own functions, beyond NCCL's API (kept out of nccl.h so that header
 * stays NCCL's). Link with -lnccl as usual; these symbols exist only in libccl's
 * libnccl.so.2, so a program that may run on NVIDIA's library should look them up with
 * dlsym(RTLD_DEFAULT, "cclMonitorSnapshot") instead of calling them directly.
 */
#ifndef CCL_EXT_H_
#define CCL_EXT_H_

#include <stddef.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The throughput monitor's state (CCL_MONITOR=1) as one JSON object, NUL-terminated:
 *   {"enabled":true,"keys":[{"key":{"peer":1},"tput_bps":..,"baseline_bps":..,"bytes":..,
 *    "completions":..,"outstanding":..,"anomalies":..,"stalls":..,"anomalous":false,
 *    "stalled":false},...],"transitions":..,"records":..,"dropped":..}
 * Keys are peers, then paths, then NICs; figures are as of the monitor's latest pass (at
 * most a few milliseconds old). With the monitor off, or before any communicator started
 * it, "enabled" is false and "keys" is empty.
 *
 * *needed receives the text's size including the NUL. buf may be NULL with len 0 to ask
 * for the size only (ncclSuccess). If len is smaller than *needed, nothing is written and
 * ncclInvalidArgument is returned; needed must not be NULL.
 */
ncclResult_t cclMonitorSnapshot(char* buf, size_t len, size_t* needed);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CCL_EXT_H_ */
