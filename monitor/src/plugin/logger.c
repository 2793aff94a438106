/* The logger libccl hands to profiler plugins. NCCL's logger type is a C variadic function,
 * which stable Rust cannot define, so this file formats the message and passes the finished
 * line to the sink libccl installs (a Rust function). Until a sink is installed, lines are
 * dropped. */
#include <stdarg.h>
#include <stdio.h>

typedef void (*ccl_profiler_sink_t)(int level, unsigned long flags, const char *file, int line,
                                    const char *msg);

static ccl_profiler_sink_t volatile ccl_profiler_sink;

void ccl_profiler_set_sink(ccl_profiler_sink_t sink) { ccl_profiler_sink = sink; }

void ccl_profiler_logger(int level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...) {
  ccl_profiler_sink_t sink = ccl_profiler_sink;
  char msg[1024];
  va_list ap;
  if (sink == NULL) return;
  msg[0] = '\0';
  if (fmt != NULL) {
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  sink(level, flags, file, line, msg);
}
