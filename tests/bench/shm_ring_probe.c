/*
 * shm_ring_probe.c -- what two processes move one way through a ring in shared memory with no
 * library: the sender memcpy's each chunk of a private buffer into the next free slot and
 * publishes it, the receiver spins for it, memcpy's it out into its own buffer and frees the
 * slot -- the shape of libccl's shared-memory transport (transports/src/shm.rs), as a ceiling
 * to compare it with. Prints GB/s for several slot sizes; checks the bytes.
 * Build: gcc -O2 -o shm_ring_probe tests/bench/shm_ring_probe.c
 * Env: MIB (the message, 64), ROUNDS (16), SLOTS (16).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ctl {
  _Alignas(128) volatile uint64_t head; /* chunks published */
  _Alignas(128) volatile uint64_t tail; /* chunks consumed */
  _Alignas(128) volatile uint64_t go;
};

static size_t env_or(const char *k, size_t d) {
  const char *v = getenv(k);
  return v ? (size_t)atol(v) : d;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
  size_t msg = env_or("MIB", 64) << 20, rounds = env_or("ROUNDS", 16), slots = env_or("SLOTS", 16);
  static const size_t slot_sizes[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
  for (unsigned v = 0; v < sizeof slot_sizes / sizeof *slot_sizes; v++) {
    size_t slot = slot_sizes[v];
    size_t bytes = 4096 + slots * slot;
    char *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED) return 1;
    memset(shm, 0, bytes);
    struct ctl *c = (struct ctl *)shm;
    char *ring = shm + 4096;
    size_t chunks = msg / slot;
    pid_t child = fork();
    if (child == 0) { /* receiver */
      char *dst = malloc(msg);
      memset(dst, 0, msg);
      uint64_t k = 0;
      size_t wrong = 0;
      for (size_t r = 0; r < rounds; r++) {
        for (size_t i = 0; i < chunks; i++, k++) {
          while (__atomic_load_n(&c->head, __ATOMIC_ACQUIRE) <= k) {
          }
          memcpy(dst + i * slot, ring + (k % slots) * slot, slot);
          __atomic_store_n(&c->tail, k + 1, __ATOMIC_RELEASE);
        }
      }
      for (size_t i = 0; i < msg; i += 4096) wrong += dst[i] != (char)(i / 4096 * 7 + 1);
      free(dst);
      _exit(wrong ? 1 : 0);
    }
    char *src = malloc(msg);
    for (size_t i = 0; i < msg; i++) src[i] = (char)(i / 4096 * 7 + 1);
    uint64_t k = 0;
    double t0 = 0;
    for (size_t r = 0; r < rounds; r++) {
      if (r == 1) t0 = now_s(); /* the first round warms both sides */
      for (size_t i = 0; i < chunks; i++, k++) {
        while (k >= slots && __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE) <= k - slots) {
        }
        memcpy(ring + (k % slots) * slot, src + i * slot, slot);
        __atomic_store_n(&c->head, k + 1, __ATOMIC_RELEASE);
      }
    }
    while (__atomic_load_n(&c->tail, __ATOMIC_ACQUIRE) < k) {
    }
    double dt = now_s() - t0;
    int st = 0;
    waitpid(child, &st, 0);
    printf("shm_ring_probe: %zu MiB x %zu, %zu slots of %zu KiB: %.2f GB/s one way, %s\n", msg >> 20,
           rounds - 1, slots, slot >> 10, (double)msg * (rounds - 1) / dt / 1e9,
           WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "checked" : "WRONG");
    free(src);
    munmap(shm, bytes);
  }
  return 0;
}
