/* Fault the pages of a mapping in for writing before the writer reaches them. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"

/* One atomic read-modify-write adding 0 per page: the page is faulted in writable and no byte
 * changes, even where a writer stores into the same page at the same time. */
static void touch_pages(uint8_t *p, size_t n, size_t page) {
    uintptr_t a = (uintptr_t)p, end = (uintptr_t)p + n;
    while (a < end) {
        __atomic_fetch_add((uint8_t *)a, 0, __ATOMIC_RELAXED);
        a = a - a % page + page;
    }
}

int prefault_range(uint8_t *p, size_t n) {
    long sz = sysconf(_SC_PAGESIZE);
    size_t page = sz > 0 ? (size_t)sz : 4096;
    if (n == 0) return 1;
#ifdef MADV_POPULATE_WRITE
    /* madvise takes page-aligned ranges: the whole pages inside [p, p+n), the partial ones are touched. */
    uintptr_t start = ((uintptr_t)p + page - 1) / page * page, end = ((uintptr_t)p + n) / page * page;
    if (start < end) {
        /* Read the range into the page cache first (for blocks reserved and never written: zeroed pages,
         * no I/O). Without it each fault of MADV_POPULATE_WRITE reads around itself by the device's
         * read-ahead, which on a device set to megabytes costs twice the CPU a page (docs/performance.md,
         * "The prefault's read-ahead"). Advice only: a refusal leaves the faults to read as before. */
        (void)madvise((void *)start, end - start, MADV_WILLNEED);
        if (madvise((void *)start, end - start, MADV_POPULATE_WRITE) == 0) {
            touch_pages(p, start - (uintptr_t)p, page);
            touch_pages((uint8_t *)end, (uintptr_t)p + n - end, page);
            return 1;
        }
        if (errno != EINVAL) return -errno; /* EINVAL: a kernel before 5.14 that lacks the advice */
    }
#endif
    touch_pages(p, n, page);
    return 2;
}
