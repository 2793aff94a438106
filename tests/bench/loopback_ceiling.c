// What loopback itself carries, with no libccl in the way: N independent sender/receiver thread
// pairs, each over its own socket pair, for DURATION seconds; prints the total one-way GB/s
// received. It bounds what the mpt transport (UDP) and the socket transport (TCP) can reach on
// a machine, so a libccl figure can be read against it. Also a plain N-thread copy between
// large buffers (the memory bandwidth a receive copy competes for).
//
//   cc -O2 -pthread -o loopback_ceiling tests/bench/loopback_ceiling.c
//   ./loopback_ceiling udp|tcp|copy PAIRS [MSG_BYTES=32768] [SECONDS=3] [LAND=0|1]
//
// udp: each sender sends MSG_BYTES datagrams with sendmmsg (batches of 16) read from its own
//      256 MiB buffer, cycling through it (cold reads, as a large user buffer is); each receiver
//      takes them with recvmmsg into a small reused ring. Datagrams the receiver's socket
//      drops are not counted. LAND=1: the receiver also copies each datagram into its own
//      256 MiB buffer (the executor's copy into the destination).
// tcp: the same over one TCP connection per pair, with send/recv of MSG_BYTES.
// copy: PAIRS threads each memcpy 256 MiB -> 256 MiB in 1 MiB pieces, repeatedly.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BIG (256ul << 20)
#define BATCH 16

static int mode_udp, mode_tcp, land;
static size_t msg;
static double secs;
static atomic_int stop;
static atomic_ulong received;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) { perror(what); exit(1); }

static char *big_buffer(void) {
  char *b = malloc(BIG);
  if (!b) die("malloc");
  memset(b, 1, BIG);  // fault every page in before the clock starts
  return b;
}

struct pair { int tx, rx; };

static void *udp_sender(void *arg) {
  struct pair *p = arg;
  char *src = big_buffer();
  struct mmsghdr m[BATCH];
  struct iovec v[BATCH];
  size_t off = 0;
  while (!atomic_load(&stop)) {
    for (int i = 0; i < BATCH; i++) {
      if (off + msg > BIG) off = 0;
      v[i].iov_base = src + off; v[i].iov_len = msg; off += msg;
      memset(&m[i], 0, sizeof m[i]);
      m[i].msg_hdr.msg_iov = &v[i]; m[i].msg_hdr.msg_iovlen = 1;
    }
    if (sendmmsg(p->tx, m, BATCH, 0) < 0) usleep(10);
  }
  free(src);
  return NULL;
}

static void *udp_receiver(void *arg) {
  struct pair *p = arg;
  char *ring = malloc(BATCH * msg), *dst = land ? big_buffer() : NULL;
  struct mmsghdr m[BATCH];
  struct iovec v[BATCH];
  struct timeval tv = {0, 100000};
  setsockopt(p->rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t off = 0;
  while (!atomic_load(&stop)) {
    for (int i = 0; i < BATCH; i++) {
      v[i].iov_base = ring + i * msg; v[i].iov_len = msg;
      memset(&m[i], 0, sizeof m[i]);
      m[i].msg_hdr.msg_iov = &v[i]; m[i].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(p->rx, m, BATCH, MSG_WAITFORONE, NULL);
    if (n <= 0) continue;
    unsigned long got = 0;
    for (int i = 0; i < n; i++) {
      got += m[i].msg_len;
      if (dst) {
        if (off + m[i].msg_len > BIG) off = 0;
        memcpy(dst + off, ring + i * msg, m[i].msg_len); off += m[i].msg_len;
      }
    }
    atomic_fetch_add(&received, got);
  }
  free(ring); free(dst);
  return NULL;
}

static void *tcp_sender(void *arg) {
  struct pair *p = arg;
  char *src = big_buffer();
  size_t off = 0;
  while (!atomic_load(&stop)) {
    if (off + msg > BIG) off = 0;
    ssize_t n = send(p->tx, src + off, msg, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += (size_t)n;
  }
  free(src);
  return NULL;
}

static void *tcp_receiver(void *arg) {
  struct pair *p = arg;
  char *dst = big_buffer();
  size_t off = 0;
  struct timeval tv = {0, 100000};
  setsockopt(p->rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (!atomic_load(&stop)) {
    // LAND=0 receives into one reused piece (hot); LAND=1 walks the big buffer (cold).
    if (off + msg > BIG || !land) off = 0;
    ssize_t n = recv(p->rx, dst + off, msg, 0);
    if (n <= 0) continue;
    off += (size_t)n;
    atomic_fetch_add(&received, (unsigned long)n);
  }
  free(dst);
  return NULL;
}

static void *copier(void *arg) {
  (void)arg;
  char *a = big_buffer(), *b = big_buffer();
  while (!atomic_load(&stop)) {
    for (size_t off = 0; off < BIG && !atomic_load(&stop); off += 1 << 20) {
      memcpy(b + off, a + off, 1 << 20);
      atomic_fetch_add(&received, 1ul << 20);
    }
  }
  free(a); free(b);
  return NULL;
}

static struct sockaddr_in lo(unsigned short port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

static void make_pair(struct pair *p) {
  struct sockaddr_in a = lo(0);
  socklen_t len = sizeof a;
  int big = 64 << 20;
  if (mode_udp) {
    p->rx = socket(AF_INET, SOCK_DGRAM, 0); p->tx = socket(AF_INET, SOCK_DGRAM, 0);
    if (p->rx < 0 || p->tx < 0) die("socket");
    // As root the forced size ignores rmem_max; otherwise the plain one is capped by it.
    if (setsockopt(p->rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
      setsockopt(p->rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (bind(p->rx, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (getsockname(p->rx, (struct sockaddr *)&a, &len) < 0) die("getsockname");
    if (connect(p->tx, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    return;
  }
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0) die("listen");
  if (getsockname(l, (struct sockaddr *)&a, &len) < 0) die("getsockname");
  p->tx = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(p->tx, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
  p->rx = accept(l, NULL, NULL);
  if (p->rx < 0) die("accept");
  close(l);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s udp|tcp|copy PAIRS [MSG_BYTES] [SECONDS] [LAND]\n", argv[0]);
    return 2;
  }
  mode_udp = !strcmp(argv[1], "udp"); mode_tcp = !strcmp(argv[1], "tcp");
  int pairs = atoi(argv[2]);
  msg = argc > 3 ? strtoul(argv[3], NULL, 0) : 32768;
  secs = argc > 4 ? atof(argv[4]) : 3.0;
  land = argc > 5 ? atoi(argv[5]) : 0;
  if (pairs < 1 || pairs > 256 || msg < 1 || msg > (mode_udp ? 65000ul : BIG)) { fprintf(stderr, "bad arguments\n"); return 2; }
  pthread_t th[512];
  struct pair ps[256];
  int nth = 0;
  for (int i = 0; i < pairs; i++) {
    if (mode_udp || mode_tcp) {
      make_pair(&ps[i]);
      pthread_create(&th[nth++], NULL, mode_udp ? udp_sender : tcp_sender, &ps[i]);
      pthread_create(&th[nth++], NULL, mode_udp ? udp_receiver : tcp_receiver, &ps[i]);
    } else {
      pthread_create(&th[nth++], NULL, copier, NULL);
    }
  }
  sleep(1);  // buffers faulted in, sockets warm
  unsigned long r0 = atomic_load(&received);
  double t0 = now();
  usleep((useconds_t)(secs * 1e6));
  unsigned long r1 = atomic_load(&received);
  double t1 = now();
  atomic_store(&stop, 1);
  if (mode_tcp) for (int i = 0; i < pairs; i++) shutdown(ps[i].tx, SHUT_RDWR);
  for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  printf("%s pairs=%d msg=%zu land=%d: %.2f GB/s\n", argv[1], pairs, msg, land, (r1 - r0) / (t1 - t0) / 1e9);
  return 0;
}
