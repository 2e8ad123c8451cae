/* The reply to a put of a JSON produce body json_produce packed (docs/native.md "JSON produce"): a SendResult per
 * message, or {"kind": "batch", "results": [...]} of them, as orjson writes app.routes_produce.packed_reply. */
#include <string.h>

#include "bytes.h"
#include "kernels.h"

static size_t put_decimal(uint8_t *p, int64_t v) {
    char digits[DECIMAL_MAX_CHARS];
    size_t at = format_decimal(v, digits);
    memcpy(p, digits + at, sizeof digits - at);
    return sizeof digits - at;
}

static size_t put_text(uint8_t *p, const char *lit) {
    size_t k = strlen(lit);
    memcpy(p, lit, k);
    return k;
}

/* One SendResult: msg_id (the i-th key), offset_msg_id (store host and offset in hex), queue, offsets, time. */
static size_t put_send_result(uint8_t *p, const struct produce_reply *r, size_t i, int64_t offset) {
    size_t n = put_text(p, "{\"kind\":\"message\",\"msg_id\":\"");
    memcpy(p + n, r->head.p, r->head.n);
    n += r->head.n;
    put_hex4(p + n, (r->first + (uint32_t)i) & 0xFFFF);
    n += 4;
    n += put_text(p + n, "\",\"offset_msg_id\":\"");
    memcpy(p + n, r->host_hex.p, r->host_hex.n);
    n += r->host_hex.n;
    for (int k = 3; k >= 0; k--) put_hex4(p + n + (size_t)(3 - k) * 4, (uint32_t)(((uint64_t)offset >> (16 * k)) & 0xFFFF));
    n += 16;
    n += put_text(p + n, "\",\"queue_id\":");
    n += put_decimal(p + n, r->queue_id);
    n += put_text(p + n, ",\"queue_offset\":");
    n += put_decimal(p + n, r->first_queue_offset + (int64_t)i);
    n += put_text(p + n, ",\"commitlog_offset\":");
    n += put_decimal(p + n, offset);
    n += put_text(p + n, ",\"store_timestamp\":");
    n += put_decimal(p + n, r->store_timestamp);
    p[n++] = '}';
    return n;
}

size_t produce_reply_bound(const struct produce_reply *r, size_t count) {
    return 40 + count * (PRODUCE_RESULT_FIXED_BYTES + r->head.n + r->host_hex.n);
}

size_t render_produce_reply(const struct produce_reply *r, const uint8_t *offsets, size_t count, uint8_t *out, size_t cap) {
    if (cap < produce_reply_bound(r, count)) return 0; /* the binding passes the bound: never */
    assert(count == 1 || r->is_batch);
    size_t n = r->is_batch ? put_text(out, "{\"kind\":\"batch\",\"results\":[") : 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0) out[n++] = ',';
        n += put_send_result(out + n, r, i, get_h64(offsets + 16 * i));
    }
    if (r->is_batch) n += put_text(out + n, "]}");
    return n;
}
