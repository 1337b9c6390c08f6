/* Guest workload for scripts/qemu-vhost-user.sh: 4 KiB O_DIRECT I/O on a virtio-blk disk.
 * Built static by the harness and run from the initramfs's /init.
 *
 *   guest-io pattern DEV NBLK SEED         write NBLK blocks of pattern SEED, read back, verify
 *   guest-io verify  DEV NBLK SEED [SEED2 COUNT]   verify (with COUNT scattered SEED2 blocks)
 *   guest-io scatter DEV NBLK SEED SEED2 COUNT     rewrite COUNT scattered blocks with SEED2,
 *                                                   then verify the whole range
 *   guest-io iops    DEV read|write SECS CPU BASE NBLK   QD1 random I/O pinned to CPU
 *   guest-io hammer  DEV CPU BASE NBLK     write forever (the harness kills the VM)
 *
 * Each block holds its block number and seed in every 16-byte cell, so a block that lands
 * at the wrong offset or carries stale data is caught. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BS 4096

static void fill(uint8_t *b, uint64_t blk, uint64_t seed) {
  for (int i = 0; i < BS; i += 16) {
    memcpy(b + i, &blk, 8);
    memcpy(b + i + 8, &seed, 8);
  }
}

static int check(const uint8_t *b, uint64_t blk, uint64_t seed) {
  uint8_t want[BS];
  fill(want, blk, seed);
  return memcmp(b, want, BS) == 0;
}

/* Block i of the scatter set k (deterministic, distinct enough for a check). */
static uint64_t scatter_blk(uint64_t k, uint64_t nblk) { return (k * 2654435761u + 7) % nblk; }

static int in_scatter(uint64_t blk, uint64_t nblk, uint64_t count) {
  for (uint64_t k = 0; k < count; k++)
    if (scatter_blk(k, nblk) == blk) return 1;
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity");
}

static int xpwrite(int fd, const void *b, uint64_t blk) {
  ssize_t n = pwrite(fd, b, BS, (off_t)(blk * BS));
  if (n != BS) { fprintf(stderr, "pwrite blk %llu: %zd %s\n", (unsigned long long)blk, n, strerror(errno)); return -1; }
  return 0;
}

static int xpread(int fd, void *b, uint64_t blk) {
  ssize_t n = pread(fd, b, BS, (off_t)(blk * BS));
  if (n != BS) { fprintf(stderr, "pread blk %llu: %zd %s\n", (unsigned long long)blk, n, strerror(errno)); return -1; }
  return 0;
}

static int verify(int fd, uint64_t nblk, uint64_t seed, uint64_t seed2, uint64_t count) {
  uint8_t *b = aligned_alloc(BS, BS);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < nblk; i++) {
    if (xpread(fd, b, i)) return 1;
    uint64_t s = (count && in_scatter(i, nblk, count)) ? seed2 : seed;
    if (!check(b, i, s)) {
      if (bad < 5) fprintf(stderr, "block %llu: wrong contents\n", (unsigned long long)i);
      bad++;
    }
  }
  printf("verified %llu blocks, %llu bad\n", (unsigned long long)nblk, (unsigned long long)bad);
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: see the source\n"); return 2; }
  const char *cmd = argv[1];
  int fd = open(argv[2], O_RDWR | O_DIRECT);
  if (fd < 0) { perror(argv[2]); return 1; }
  uint8_t *b = aligned_alloc(BS, BS);
  if (!strcmp(cmd, "pattern") && argc == 5) {
    uint64_t n = strtoull(argv[3], 0, 0), seed = strtoull(argv[4], 0, 0);
    for (uint64_t i = 0; i < n; i++) { fill(b, i, seed); if (xpwrite(fd, b, i)) return 1; }
    return verify(fd, n, seed, 0, 0);
  }
  if (!strcmp(cmd, "verify") && (argc == 5 || argc == 7)) {
    uint64_t n = strtoull(argv[3], 0, 0), seed = strtoull(argv[4], 0, 0);
    uint64_t s2 = argc == 7 ? strtoull(argv[5], 0, 0) : 0, c = argc == 7 ? strtoull(argv[6], 0, 0) : 0;
    return verify(fd, n, seed, s2, c);
  }
  if (!strcmp(cmd, "scatter") && argc == 7) {
    uint64_t n = strtoull(argv[3], 0, 0), seed = strtoull(argv[4], 0, 0);
    uint64_t s2 = strtoull(argv[5], 0, 0), c = strtoull(argv[6], 0, 0);
    for (uint64_t k = 0; k < c; k++) {
      uint64_t blk = scatter_blk(k, n);
      fill(b, blk, s2);
      if (xpwrite(fd, b, blk)) return 1;
    }
    return verify(fd, n, seed, s2, c);
  }
  if (!strcmp(cmd, "iops") && argc == 8) {
    int wr = !strcmp(argv[3], "write");
    double secs = atof(argv[4]);
    int cpu = atoi(argv[5]);
    uint64_t base = strtoull(argv[6], 0, 0), n = strtoull(argv[7], 0, 0);
    pin(cpu);
    uint64_t x = 88172645463325252ull ^ (uint64_t)cpu, ops = 0;
    memset(b, 0x5a, BS);
    double t0 = now(), t;
    do {
      for (int j = 0; j < 16; j++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t blk = base + x % n;
        if (wr ? xpwrite(fd, b, blk) : xpread(fd, b, blk)) return 1;
        ops++;
      }
      t = now();
    } while (t - t0 < secs);
    printf("iops %s cpu%d %llu ops %.3f s %.0f\n", argv[3], cpu, (unsigned long long)ops, t - t0, ops / (t - t0));
    return 0;
  }
  if (!strcmp(cmd, "hammer") && argc == 6) {
    int cpu = atoi(argv[3]);
    uint64_t base = strtoull(argv[4], 0, 0), n = strtoull(argv[5], 0, 0), i = 0;
    pin(cpu);
    for (;;) { fill(b, base + i % n, 99); if (xpwrite(fd, b, base + i % n)) return 1; i++; }
  }
  fprintf(stderr, "bad command line\n");
  return 2;
}
