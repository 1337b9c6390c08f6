/* Guest workload for scripts/qemu-vhost-user.sh: 4 KiB O_DIRECT I/O on a virtio-blk disk.
 * Built static by the harness and run from the initramfs's /init.
 *
 *   guest-io pattern DEV NBLK SEED         write NBLK blocks of pattern SEED, read back, verify
 *   guest-io verify  DEV NBLK SEED [SEED2 COUNT]   verify (with COUNT scattered SEED2 blocks)
 *   guest-io scatter DEV NBLK SEED SEED2 COUNT     rewrite COUNT scattered blocks with SEED2,
 *                                                   then verify the whole range
 *   guest-io iops    DEV read|write SECS CPU BASE NBLK   QD1 random I/O pinned to CPU
 *   guest-io hammer  DEV CPU BASE NBLK     write forever (the harness kills the VM)
 *   guest-io churn   DEV CPU BASE NBLK SECS  pinned to CPU, for SECS: pass after pass,
 *                                           write NBLK blocks from BASE (a new seed each
 *                                           pass), read them all back and verify; reports
 *                                           the passes, the slowest I/O (the harness
 *                                           restarts the backend in the middle) and any
 *                                           bad block
 *   guest-io zero    DEV BASE NBLK SEED    pattern on NBLK (>= 72) blocks from BASE, then
 *                                           BLKZEROOUT of blocks 8..16 (a write-zeroes
 *                                           request), fallocate PUNCH_HOLE of 32..40 (write
 *                                           zeroes with unmap), BLKDISCARD of 64..72; verify
 *                                           zeros there (a discarded block may also keep its
 *                                           data) and the pattern everywhere else
 *   guest-io rocheck DEV                   a read-only disk: a block reads; a write to it
 *                                           fails (at open, or in the device) and changes
 *                                           nothing
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
#include <sys/ioctl.h>
#include <unistd.h>

#ifndef BLKDISCARD
#define BLKDISCARD _IO(0x12, 119)
#endif
#ifndef BLKZEROOUT
#define BLKZEROOUT _IO(0x12, 127)
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

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

static int is_zero(const uint8_t *b) {
  for (int i = 0; i < BS; i++)
    if (b[i]) return 0;
  return 1;
}

/* Blocks BASE+8..16 zeroed out, BASE+32..40 punched, BASE+64..72 discarded. */
static int zero_range(int fd, uint64_t base, uint64_t n, uint64_t seed) {
  uint8_t *b = aligned_alloc(BS, BS);
  for (uint64_t i = 0; i < n; i++) { fill(b, base + i, seed); if (xpwrite(fd, b, base + i)) return 1; }
  uint64_t r[2] = {(base + 8) * BS, 8 * BS};
  if (ioctl(fd, BLKZEROOUT, r)) { perror("BLKZEROOUT"); return 1; }
  if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)((base + 32) * BS), 8 * BS)) {
    perror("fallocate PUNCH_HOLE");
    return 1;
  }
  r[0] = (base + 64) * BS;
  if (ioctl(fd, BLKDISCARD, r)) { perror("BLKDISCARD"); return 1; }
  uint64_t bad = 0, dz = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (xpread(fd, b, base + i)) return 1;
    int zeroed = (i >= 8 && i < 16) || (i >= 32 && i < 40);
    int discarded = i >= 64 && i < 72;
    int ok = zeroed ? is_zero(b) : check(b, base + i, seed) || (discarded && is_zero(b));
    if (discarded && is_zero(b)) dz++;
    if (!ok) {
      if (bad < 5) fprintf(stderr, "block %llu: wrong contents\n", (unsigned long long)(base + i));
      bad++;
    }
  }
  printf("zeroout 8, punch 8, discard 8 blocks (%llu read back as zeros), %llu blocks verified, %llu bad\n",
         (unsigned long long)dz, (unsigned long long)n, (unsigned long long)bad);
  return bad != 0;
}

static int rocheck(const char *dev) {
  int fd = open(dev, O_RDONLY | O_DIRECT);
  if (fd < 0) { perror(dev); return 1; }
  uint8_t *b = aligned_alloc(BS, BS), *was = aligned_alloc(BS, BS);
  if (xpread(fd, was, 0)) return 1;
  /* Linux may open a read-only disk for writing and send the write on (it only warns):
   * then the device must fail it and keep the block. */
  char how[96];
  int w = open(dev, O_RDWR | O_DIRECT);
  if (w < 0) {
    snprintf(how, sizeof how, "refused at open (%s)", strerror(errno));
  } else {
    memset(b, 0xa5, BS);
    if (pwrite(w, b, BS, 0) == BS) { fprintf(stderr, "a write to the read-only disk succeeded\n"); return 1; }
    snprintf(how, sizeof how, "the write failed (%s)", strerror(errno));
    close(w);
  }
  if (xpread(fd, b, 0)) return 1;
  if (memcmp(b, was, BS)) { fprintf(stderr, "block 0 changed\n"); return 1; }
  printf("a block read; writing: %s; block 0 unchanged\n", how);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: see the source\n"); return 2; }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "rocheck") && argc == 3) return rocheck(argv[2]);
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
  if (!strcmp(cmd, "zero") && argc == 6) {
    uint64_t base = strtoull(argv[3], 0, 0), n = strtoull(argv[4], 0, 0), seed = strtoull(argv[5], 0, 0);
    if (n < 72) { fprintf(stderr, "zero: NBLK must be at least 72\n"); return 2; }
    return zero_range(fd, base, n, seed);
  }
  if (!strcmp(cmd, "churn") && argc == 7) {
    int cpu = atoi(argv[3]);
    uint64_t base = strtoull(argv[4], 0, 0), n = strtoull(argv[5], 0, 0), pass = 0, bad = 0, ios = 0;
    double secs = atof(argv[6]), slowest = 0, t0 = now(), t = t0;
    pin(cpu);
    /* One pass: write every block with this pass's seed, then read every block back. */
    while (t - t0 < secs && !bad) {
      uint64_t seed = 1000000 + (uint64_t)cpu * 100000 + pass;
      for (int rd = 0; rd < 2; rd++) {
        for (uint64_t i = 0; i < n; i++) {
          double s0 = now();
          if (rd ? xpread(fd, b, base + i) : (fill(b, base + i, seed), xpwrite(fd, b, base + i))) return 1;
          double s1 = now();
          if (s1 - s0 > slowest) slowest = s1 - s0;
          ios++;
          if (rd && !check(b, base + i, seed)) {
            if (bad < 5) fprintf(stderr, "pass %llu block %llu: wrong contents\n", (unsigned long long)pass,
                                 (unsigned long long)(base + i));
            bad++;
          }
        }
      }
      pass++;
      t = now();
    }
    printf("cpu%d: %llu passes of %llu blocks (%llu I/Os, each pass verified), slowest I/O %.3f s, %llu bad\n", cpu,
           (unsigned long long)pass, (unsigned long long)n, (unsigned long long)ios, slowest, (unsigned long long)bad);
    return bad != 0;
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
