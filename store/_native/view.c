/* JSON views of stored messages (docs/native.md "Message views").
 *
 * A view is what app.message_view.message_json shows of a message store.decode_message decoded
 * (without host texts), serialised as orjson serialises it: the same keys in the same order, strings
 * escaped as orjson escapes them (", \ and the controls below 0x20; everything else as it is).
 * The kernel renders only what it can render exactly; a message with a compressed body, a topic or
 * properties that are not well-formed UTF-8, a property name given twice or more than
 * VIEW_MAX_PROPERTIES properties answers VIEW_PYTHON, and the caller renders the whole call's
 * messages with the Python path. A message whose lengths disagree with its TOTALSIZE does too.
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "bytes.h"
#include "kernels.h"

#define COMPRESSED_FLAG 0x1 /* MessageSysFlag.COMPRESSED_FLAG */
#define VIEW_MAX_PROPERTIES 64

struct view_property {
    struct span name, value;
};

/* The fields a view shows, located in one message's bytes. */
struct message_view {
    struct span body, topic, store_host, tags, keys, uniq;
    int has_tags, has_keys, has_uniq, body_text;
    int32_t queue_id, reconsume_times;
    int64_t queue_offset, phys, born_ts, store_ts;
    struct view_property props[VIEW_MAX_PROPERTIES]; /* shown as "properties": TAGS, KEYS, UNIQ_KEY left out */
    size_t n_props;
};

/* Where output goes: p NULL only counts (the measuring pass); a write past cap is refused and remembered. */
struct sink {
    uint8_t *p;
    size_t cap, n;
    int overflow;
};

static void put(struct sink *s, const void *bytes, size_t k) {
    if (s->p != NULL) {
        if (k > s->cap - s->n) {
            s->overflow = 1;
            return;
        }
        memcpy(s->p + s->n, bytes, k);
    }
    s->n += k;
}

#define PUT_LIT(s, lit) put((s), (lit), sizeof(lit) - 1)

static void put_int(struct sink *s, int64_t v) {
    char digits[DECIMAL_MAX_CHARS];
    size_t at = format_decimal(v, digits);
    put(s, digits + at, sizeof digits - at);
}

/* Whether none of the 8 bytes of w is below 0x20, '"' or '\\' (a byte above 0x7F is plain here: UTF-8 goes out as
 * it is). A byte below 0x20 is the only one whose subtraction borrows, so a borrow never hides one. */
static int plain8(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t control = (w - ones * 0x20) & ~w & highs;
    uint64_t quotes = (quote - ones) & ~quote & highs, slashes = (slash - ones) & ~slash & highs;
    return (control | quotes | slashes) == 0;
}

/* How many bytes from p[0..n) on need no escape in a JSON string: 16 a step with SSE2, 8 without, then one. */
static size_t plain_run(const uint8_t *p, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), below = _mm_set1_epi8(0x1F);
    for (; n - i >= 16; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        /* Unsigned v <= 0x1F where min(v, 0x1F) == v. */
        __m128i special = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(v, below), v), _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)));
        if (_mm_movemask_epi8(special) != 0) break;
    }
#endif
    for (; n - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (!plain8(w)) break;
    }
    while (i < n && p[i] >= 0x20 && p[i] != '"' && p[i] != '\\') i++;
    return i;
}

/* A JSON string as orjson writes one: the bytes as they are (well-formed UTF-8), runs copied whole. */
static void put_string(struct sink *s, struct span v) {
    static const char hex[] = "0123456789abcdef";
    PUT_LIT(s, "\"");
    size_t i = 0;
    for (;;) {
        size_t run = plain_run(v.p + i, v.n - i);
        put(s, v.p + i, run);
        i += run;
        if (i >= v.n) break;
        uint8_t c = v.p[i++];
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\t': esc[1] = 't'; break;
        case '\n': esc[1] = 'n'; break;
        case '\f': esc[1] = 'f'; break;
        case '\r': esc[1] = 'r'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 0xF];
            k = 6;
        }
        put(s, esc, k);
    }
    PUT_LIT(s, "\"");
}

/* base64.b64encode's text (standard alphabet, padded), quoted. */
static void put_base64(struct sink *s, struct span v) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    PUT_LIT(s, "\"");
    size_t i = 0;
    for (; v.n - i >= 3; i += 3) {
        uint32_t w = ((uint32_t)v.p[i] << 16) | ((uint32_t)v.p[i + 1] << 8) | v.p[i + 2];
        char quad[4] = {alphabet[w >> 18], alphabet[(w >> 12) & 63], alphabet[(w >> 6) & 63], alphabet[w & 63]};
        put(s, quad, 4);
    }
    if (i < v.n) {
        uint32_t w = (uint32_t)v.p[i] << 16;
        if (v.n - i == 2) w |= (uint32_t)v.p[i + 1] << 8;
        char quad[4] = {alphabet[w >> 18], alphabet[(w >> 12) & 63], v.n - i == 2 ? alphabet[(w >> 6) & 63] : '=', '='};
        put(s, quad, 4);
    }
    PUT_LIT(s, "\"");
}

/* RocketMQ's offset message id: the store host (8 or 20 bytes) and the commitlog offset, upper-case hex, quoted. */
static void put_offset_id(struct sink *s, struct span host, int64_t phys) {
    static const char hex[] = "0123456789ABCDEF";
    uint8_t raw[28];
    char text[56];
    assert(host.n <= 20);
    memcpy(raw, host.p, host.n);
    wr_i64(raw + host.n, phys);
    size_t k = host.n + 8;
    for (size_t i = 0; i < k; i++) {
        text[2 * i] = hex[raw[i] >> 4];
        text[2 * i + 1] = hex[raw[i] & 0xF];
    }
    PUT_LIT(s, "\"");
    put(s, text, 2 * k);
    PUT_LIT(s, "\"");
}

/* KEYS split at spaces, empty parts dropped (store.codec.message.split_keys), as a JSON array. */
static void put_keys(struct sink *s, const struct message_view *v) {
    PUT_LIT(s, "[");
    int first = 1;
    size_t i = 0;
    while (v->has_keys && i < v->keys.n) {
        size_t end = i;
        while (end < v->keys.n && v->keys.p[end] != ' ') end++;
        if (end > i) {
            if (!first) PUT_LIT(s, ",");
            put_string(s, (struct span){v->keys.p + i, end - i});
            first = 0;
        }
        i = end + 1;
    }
    PUT_LIT(s, "]");
}

#define NAME_IS(name, lit) ((name).n == sizeof(lit) - 1 && memcmp((name).p, (lit), sizeof(lit) - 1) == 0)

static int same_name(struct span a, struct span b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

/* Takes one `name \x01 value` item; VIEW_PYTHON for a name seen before or one property too many. */
static int take_property(struct message_view *v, struct span name, struct span value, struct span *seen, size_t *n_seen) {
    for (size_t k = 0; k < *n_seen; k++)
        if (same_name(seen[k], name)) return VIEW_PYTHON; /* a dict keeps the last value at the first place */
    if (*n_seen == VIEW_MAX_PROPERTIES) return VIEW_PYTHON;
    seen[(*n_seen)++] = name;
    if (NAME_IS(name, "TAGS")) {
        v->tags = value;
        v->has_tags = 1;
    } else if (NAME_IS(name, "KEYS")) {
        v->keys = value;
        v->has_keys = 1;
    } else if (NAME_IS(name, "UNIQ_KEY")) {
        v->uniq = value;
        v->has_uniq = 1;
    } else {
        v->props[v->n_props++] = (struct view_property){name, value};
    }
    return VIEW_OK;
}

/* The properties as store.codec.message.decode_properties reads them: items split at \x02, empty
 * ones skipped, each split at its first \x01, one without \x01 skipped. */
static int parse_properties(struct span props, struct message_view *v) {
    struct span seen[VIEW_MAX_PROPERTIES];
    size_t n_seen = 0, i = 0;
    if (!utf8_well_formed(props)) return VIEW_PYTHON;
    while (i < props.n) {
        size_t end = i;
        while (end < props.n && props.p[end] != 2) end++;
        size_t sep = i;
        while (sep < end && props.p[sep] != 1) sep++;
        if (sep < end) {
            struct span name = {props.p + i, sep - i}, value = {props.p + sep + 1, end - sep - 1};
            if (take_property(v, name, value, seen, &n_seen) != VIEW_OK) return VIEW_PYTHON;
        }
        i = end + 1;
    }
    return VIEW_OK;
}

/* Locates the view's fields of the message at the start of m; *total: its TOTALSIZE. */
static int locate_view(struct span m, struct message_view *v, size_t *total) {
    if (m.n < FIXED_PART_BYTES) return VIEW_PYTHON;
    int32_t size = rd_i32(m.p), sys_flag = rd_i32(m.p + POS_SYS_FLAG);
    if (rd_u32(m.p + 4) != MESSAGE_MAGIC_CODE || size < FIXED_PART_BYTES || (size_t)size > m.n) return VIEW_PYTHON;
    if (sys_flag & COMPRESSED_FLAG) return VIEW_PYTHON; /* inflated (and limited) by the Python path */
    size_t be = born_extra(sys_flag), he = hosts_extra(sys_flag), n = (size_t)size;
    if (n < FIXED_PART_BYTES + he) return VIEW_PYTHON;
    int32_t body_len = rd_i32(m.p + POS_BODY_LEN + he);
    size_t body_at = HEADER_BYTES + he;
    if (body_len < 0 || (size_t)body_len > n - FIXED_PART_BYTES - he) return VIEW_PYTHON;
    size_t topic_at = body_at + (size_t)body_len + 1, topic_len = m.p[topic_at - 1];
    if (topic_len > n - topic_at || n - topic_at - topic_len < 2) return VIEW_PYTHON;
    int16_t props_len = rd_i16(m.p + topic_at + topic_len);
    size_t props_at = topic_at + topic_len + 2;
    if (props_len < 0 || (size_t)props_len != n - props_at) return VIEW_PYTHON; /* the parts sum to TOTALSIZE */
    v->queue_id = rd_i32(m.p + 12);
    v->queue_offset = rd_i64(m.p + 20);
    v->phys = rd_i64(m.p + 28);
    v->born_ts = rd_i64(m.p + 40);
    v->store_ts = rd_i64(m.p + POS_STORE_TS + be);
    v->store_host = (struct span){m.p + 64 + be, (sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8};
    v->reconsume_times = rd_i32(m.p + 72 + he);
    v->body = (struct span){m.p + body_at, (size_t)body_len};
    v->topic = (struct span){m.p + topic_at, topic_len};
    v->tags = v->keys = v->uniq = (struct span){NULL, 0};
    v->has_tags = v->has_keys = v->has_uniq = 0;
    v->n_props = 0;
    if (!utf8_well_formed(v->topic)) return VIEW_PYTHON; /* decoded with replacement characters there */
    v->body_text = utf8_well_formed(v->body);
    *total = n;
    return parse_properties((struct span){m.p + props_at, (size_t)props_len}, v);
}

static void put_properties(struct sink *s, const struct message_view *v) {
    PUT_LIT(s, "{");
    for (size_t k = 0; k < v->n_props; k++) {
        if (k) PUT_LIT(s, ",");
        put_string(s, v->props[k].name);
        PUT_LIT(s, ":");
        put_string(s, v->props[k].value);
    }
    PUT_LIT(s, "}");
}

/* One view, its keys in message_json's order; with `r`, as a receive shows it (received_json): the topic
 * asked for and the reconsume times in their places, the receipt handle and the invisible time last. */
static void put_view(struct sink *s, const struct message_view *v, const struct received *r) {
    PUT_LIT(s, "{\"msg_id\":");
    if (v->has_uniq && v->uniq.n > 0) put_string(s, v->uniq);
    else put_offset_id(s, v->store_host, v->phys);
    PUT_LIT(s, ",\"offset_msg_id\":");
    put_offset_id(s, v->store_host, v->phys);
    PUT_LIT(s, ",\"topic\":");
    put_string(s, r != NULL ? r->topic : v->topic);
    PUT_LIT(s, ",\"queue_id\":");
    put_int(s, v->queue_id);
    PUT_LIT(s, ",\"queue_offset\":");
    put_int(s, v->queue_offset);
    PUT_LIT(s, ",\"commitlog_offset\":");
    put_int(s, v->phys);
    PUT_LIT(s, ",\"body\":");
    if (v->body_text) {
        put_string(s, v->body);
        PUT_LIT(s, ",\"encoding\":\"utf-8\"");
    } else {
        put_base64(s, v->body);
        PUT_LIT(s, ",\"encoding\":\"base64\"");
    }
    PUT_LIT(s, ",\"tags\":");
    if (v->has_tags) put_string(s, v->tags);
    else PUT_LIT(s, "null");
    PUT_LIT(s, ",\"keys\":");
    put_keys(s, v);
    PUT_LIT(s, ",\"properties\":");
    put_properties(s, v);
    PUT_LIT(s, ",\"born_timestamp\":");
    put_int(s, v->born_ts);
    PUT_LIT(s, ",\"store_timestamp\":");
    put_int(s, v->store_ts);
    PUT_LIT(s, ",\"reconsume_times\":");
    put_int(s, r != NULL ? r->reconsume_times : v->reconsume_times);
    if (r != NULL) {
        PUT_LIT(s, ",\"receipt_handle\":");
        put_string(s, r->handle);
        PUT_LIT(s, ",\"invisible_until_ms\":");
        put_int(s, r->invisible_until_ms);
    }
    PUT_LIT(s, "}");
}

int render_views(struct span data, uint8_t *out, size_t cap, size_t *len) {
    struct sink s = {out, cap, 0, 0};
    struct message_view v;
    size_t pos = 0;
    while (pos < data.n) {
        size_t total = 0;
        if (locate_view((struct span){data.p + pos, data.n - pos}, &v, &total) != VIEW_OK) return VIEW_PYTHON;
        assert(total >= FIXED_PART_BYTES && total <= data.n - pos);
        if (pos) PUT_LIT(&s, ",");
        put_view(&s, &v, NULL);
        pos += total;
    }
    if (s.overflow) return VIEW_OVERFLOW;
    *len = s.n;
    return VIEW_OK;
}

int render_received(struct span message, const struct received *r, uint8_t *out, size_t cap, size_t *len) {
    struct sink s = {out, cap, 0, 0};
    struct message_view v;
    size_t total = 0;
    if (!utf8_well_formed(r->topic) || !utf8_well_formed(r->handle)) return VIEW_PYTHON;
    if (locate_view(message, &v, &total) != VIEW_OK || total != message.n) return VIEW_PYTHON;
    put_view(&s, &v, r);
    if (s.overflow) return VIEW_OVERFLOW;
    *len = s.n;
    return VIEW_OK;
}
