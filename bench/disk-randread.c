/* A disk's raw 4 KiB random-read latency and IOPS, for machines where fio cannot be
 * installed (the lent 16-core device has no fio and cannot reach a package mirror); where fio
 * is present, strata-bench's --fio-secs runs fio instead.
 *
 *   cc -O2 -pthread -o disk-randread bench/disk-randread.c
 *   disk-randread FILE SIZE_MIB SECS
 *
 * Writes FILE whole (SIZE_MIB, O_DIRECT, so no read below is served from unwritten extents or
 * the page cache), then reads 4 KiB blocks at uniform random aligned offsets with O_DIRECT
 * pread: SECS seconds from one thread (queue depth 1: latency p50/p99/p99.9 and IOPS), then
 * SECS seconds from 32 threads (queue depth 32: IOPS). Prints one line per phase. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define THREADS_MAX 32
#define SAMPLES_MAX (1 << 22)

static int fd;
static uint64_t blocks;
static double secs;
static uint64_t *latencies_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t next_random(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15u;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

struct reader { uint64_t seed, reads; int record; };

static void *read_loop(void *arg) {
    struct reader *r = arg;
    void *buf;
    if (posix_memalign(&buf, BLOCK, BLOCK)) exit(1);
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
    for (;;) {
        uint64_t start = now_ns();
        if (start >= end) break;
        off_t at = (off_t)(next_random(&r->seed) % blocks) * BLOCK;
        if (pread(fd, buf, BLOCK, at) != BLOCK) { perror("pread"); exit(1); }
        if (r->record && r->reads < SAMPLES_MAX) latencies_ns[r->reads] = now_ns() - start;
        r->reads++;
    }
    free(buf);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s FILE SIZE_MIB SECS\n", argv[0]); return 2; }
    uint64_t size = strtoull(argv[2], NULL, 10) << 20;
    secs = atof(argv[3]);
    blocks = size / BLOCK;
    fd = open(argv[1], O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0) { perror("open (O_DIRECT)"); return 1; }
    void *chunk;
    size_t chunk_len = 1 << 20;
    if (posix_memalign(&chunk, BLOCK, chunk_len)) return 1;
    memset(chunk, 0xA5, chunk_len);
    for (uint64_t at = 0; at < size; at += chunk_len)
        if (pwrite(fd, chunk, chunk_len, (off_t)at) != (ssize_t)chunk_len) { perror("pwrite"); return 1; }
    fsync(fd);
    latencies_ns = malloc(sizeof(uint64_t) * SAMPLES_MAX);
    struct reader one = { .seed = 1, .reads = 0, .record = 1 };
    read_loop(&one);
    uint64_t n = one.reads < SAMPLES_MAX ? one.reads : SAMPLES_MAX;
    qsort(latencies_ns, n, sizeof(uint64_t), by_value);
    printf("qd1: %.0f IOPS, p50 %.1f us, p99 %.1f us, p99.9 %.1f us (%llu reads)\n",
           one.reads / secs, latencies_ns[n / 2] / 1e3, latencies_ns[n * 99 / 100] / 1e3,
           latencies_ns[n * 999 / 1000] / 1e3, (unsigned long long)one.reads);
    struct reader many[THREADS_MAX];
    pthread_t threads[THREADS_MAX];
    for (int i = 0; i < THREADS_MAX; i++) {
        many[i] = (struct reader){ .seed = 100 + (uint64_t)i, .reads = 0, .record = 0 };
        pthread_create(&threads[i], NULL, read_loop, &many[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < THREADS_MAX; i++) { pthread_join(threads[i], NULL); total += many[i].reads; }
    printf("qd32 (32 threads): %.0f IOPS\n", total / secs);
    close(fd);
    unlink(argv[1]);
    return 0;
}
