/* The raw copy and read baselines of bench/store_bench.py: memcpy of consecutive messages, one call
   for all of them (so no interpreter work per message is measured, only the copy).

   copy_messages(dst, src, sizes, count): copies `count` messages, the i-th of sizes[i] bytes,
   from consecutive places in `src` to consecutive places in `dst`; returns the bytes copied.
   The caller owns both buffers and sizes them to the sum of `sizes`. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

size_t copy_messages(char *dst, const char *src, const uint32_t *sizes, size_t count) {
    size_t pos = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(dst + pos, src + pos, sizes[i]);
        pos += sizes[i];
    }
    return pos;
}
