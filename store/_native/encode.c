/* Java String.hashCode over UTF-8 text, the body CRC (crc32.c), and RocketMQ batch -> stored messages. */
#include "kernels.h"

#include "bytes.h"

static int32_t fold(int32_t h, uint32_t unit) { return (int32_t)((uint32_t)h * 31u + unit); }

/* Fold one code point as UTF-16 code units (a surrogate pair above the BMP). */
static int32_t fold_cp(int32_t h, uint32_t cp) {
    if (cp < 0x10000) return fold(h, cp);
    cp -= 0x10000;
    return fold(fold(h, 0xD800 + (cp >> 10)), 0xDC00 + (cp & 0x3FF));
}

/* Valid range of the second byte after lead `b` (Unicode table 3-7); 0 when `b` leads nothing. */
static int utf8_expect(uint8_t b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* Decode one code point at s.p[*i]; an ill-formed maximal subpart becomes U+FFFD, as
 * Python's bytes.decode("utf-8", "replace") does. Advances *i by at least one. */
static uint32_t next_cp(struct span s, size_t *i) {
    assert(*i < s.n && "called only with bytes left");
    uint8_t b = s.p[*i], lo, hi;
    if (b < 0x80) {
        *i += 1;
        return b;
    }
    int need = utf8_expect(b, &lo, &hi);
    *i += 1;
    if (need == 0) return 0xFFFD;
    uint32_t cp = b & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
    for (int k = 1; k < need; k++) {
        if (*i >= s.n || s.p[*i] < lo || s.p[*i] > hi) return 0xFFFD;
        cp = (cp << 6) | (s.p[*i] & 0x3F);
        *i += 1;
        lo = 0x80;
        hi = 0xBF;
    }
    return cp;
}

int32_t java_hash_utf8(int32_t h, struct span s) {
    size_t i = 0;
    while (i < s.n) {
        if (s.p[i] < 0x80) {
            h = fold(h, s.p[i++]);
            continue;
        }
        h = fold_cp(h, next_cp(s, &i));
    }
    return h;
}

uint32_t body_crc31(struct span body) { return crc32_ieee(0, body.p, body.n) & 0x7FFFFFFFu; }

/* The code point at s.p[*i], advancing *i past it; -1 when the bytes there are not well-formed
 * UTF-8 (a truncated sequence, a bad continuation, an overlong form or a surrogate). */
static int64_t strict_cp(struct span s, size_t *i) {
    assert(*i < s.n && "called only with bytes left");
    uint8_t b = s.p[*i], lo, hi;
    if (b < 0x80) {
        *i += 1;
        return b;
    }
    int need = utf8_expect(b, &lo, &hi);
    if (need == 0 || s.n - *i < (size_t)need) return -1;
    uint32_t cp = b & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
    for (int k = 1; k < need; k++) {
        uint8_t c = s.p[*i + (size_t)k];
        if (c < lo || c > hi) return -1;
        cp = (cp << 6) | (c & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *i += (size_t)need;
    return cp;
}

static int is_control(int64_t cp) { return cp < 0x20 || (cp >= 0x7F && cp < 0xA0); }

/* The 8 bytes at p (p has at least 8). */
static uint64_t word_at(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

#define HIGH_BITS 0x8080808080808080ULL
#define ONES 0x0101010101010101ULL

/* Where the first byte of s from `i` on that is not ASCII is (s.n when there is none): 8 bytes a step,
 * as property names and values (UNIQ_KEYs, tags, keys) are nearly always ASCII. */
static size_t ascii_end(struct span s, size_t i) {
    while (s.n - i >= 8 && (word_at(s.p + i) & HIGH_BITS) == 0) i += 8;
    while (i < s.n && s.p[i] < 0x80) i++;
    return i;
}

/* Where the first byte \x01 or \x02 of s from `i` on is (s.n when there is none): 8 bytes a step
 * while a word holds no byte below 3 (the classic "has a byte less than n" test). */
static size_t separator_at(struct span s, size_t i) {
    while (s.n - i >= 8) {
        uint64_t w = word_at(s.p + i);
        if (((w - 3 * ONES) & ~w & HIGH_BITS) != 0) break;
        i += 8;
    }
    while (i < s.n && s.p[i] != 1 && s.p[i] != 2) i++;
    return i;
}

/* name equals the string literal `lit` (its length known at compile time). */
#define NAME_IS(name, lit) ((name).n == sizeof(lit) - 1 && memcmp((name).p, (lit), sizeof(lit) - 1) == 0)

/* A TAGS value (well-formed UTF-8) as the JSON produce accepts a tag: at most 255 characters,
 * not '*', without '||' or control characters (empty: no tag). */
static int check_tags(struct span v) {
    size_t i = 0, chars = 0;
    int64_t prev = -1;
    if (v.n == 1 && v.p[0] == '*') return BATCH_BAD_TAGS;
    if (ascii_end(v, 0) == v.n) { /* the usual tag: one character a byte */
        if (v.n > 255) return BATCH_BAD_TAGS;
        for (size_t k = 0; k < v.n; k++)
            if (v.p[k] < 0x20 || v.p[k] == 0x7F || (v.p[k] == '|' && k > 0 && v.p[k - 1] == '|')) return BATCH_BAD_TAGS;
        return BATCH_OK;
    }
    while (i < v.n) {
        int64_t cp = strict_cp(v, &i);
        if (cp < 0) return BATCH_BAD_PROPERTY;
        if (is_control(cp) || (cp == '|' && prev == '|') || ++chars > 255) return BATCH_BAD_TAGS;
        prev = cp;
    }
    return BATCH_OK;
}

/* A UNIQ_KEY value (well-formed UTF-8) as the JSON produce accepts a msg_id: 1..128 characters
 * without a space. */
static int check_uniq_key(struct span v) {
    size_t i = 0, chars = 0;
    if (v.n == 0) return BATCH_BAD_UNIQ_KEY;
    if (ascii_end(v, 0) == v.n) /* the usual key: hex digits, one character a byte */
        return v.n > 128 || memchr(v.p, ' ', v.n) != NULL ? BATCH_BAD_UNIQ_KEY : BATCH_OK;
    while (i < v.n) {
        int64_t cp = strict_cp(v, &i);
        if (cp < 0) return BATCH_BAD_PROPERTY;
        if (cp == ' ' || ++chars > 128) return BATCH_BAD_UNIQ_KEY;
    }
    return BATCH_OK;
}

int utf8_well_formed(struct span v) {
    size_t i = ascii_end(v, 0);
    while (i < v.n) {
        if (strict_cp(v, &i) < 0) return 0;
        i = ascii_end(v, i);
    }
    return 1;
}

static int check_utf8(struct span v) { return utf8_well_formed(v) ? BATCH_OK : BATCH_BAD_PROPERTY; }

/* Names a batch item may not carry (store.native.RESERVED_BATCH_PROPERTIES): a delay, which a batch
 * takes as a whole (delay_ms, deliver_at_ms); the real destination the put path sets; the timer's
 * own marks (a message carrying TIMER_OUT_MS is taken for a timer copy and never delayed); and the
 * transaction's (a producer group is named by the request's header). */
static int is_reserved(struct span name) {
    return NAME_IS(name, "DELAY") || NAME_IS(name, "TIMER_DELIVER_MS") || NAME_IS(name, "TIMER_DELAY_MS") ||
           NAME_IS(name, "TIMER_DELAY_SEC") || NAME_IS(name, "REAL_TOPIC") || NAME_IS(name, "REAL_QID") ||
           NAME_IS(name, "TIMER_OUT_MS") || NAME_IS(name, "TIMER_ENQUEUE_MS") || NAME_IS(name, "TIMER_DEQUEUE_MS") ||
           NAME_IS(name, "TIMER_ROLL_TIMES") || NAME_IS(name, "TRAN_MSG") || NAME_IS(name, "PGROUP") ||
           NAME_IS(name, "TRANSACTION_CHECK_TIMES") || NAME_IS(name, "TIDEMQ_TRAN_ACTION");
}

/* One property's name and value (neither holds \x01 or \x02). */
static int check_property(struct span name, struct span value) {
    if (name.n == 0) return BATCH_BAD_PROPERTY;
    int err = check_utf8(name);
    if (err != BATCH_OK) return err;
    if (is_reserved(name)) return BATCH_RESERVED_PROPERTY;
    err = check_utf8(value);
    if (err != BATCH_OK) return err;
    if (NAME_IS(name, "TAGS")) return check_tags(value);
    if (NAME_IS(name, "UNIQ_KEY")) return check_uniq_key(value);
    return BATCH_OK;
}

int check_properties(struct span props, int *has_dedup_id) {
    size_t i = 0;
    while (i < props.n) {
        size_t sep = separator_at(props, i);
        if (sep == props.n || props.p[sep] != 1) return BATCH_BAD_PROPERTY;
        size_t end = separator_at(props, sep + 1);
        if (end == props.n || props.p[end] != 2) return BATCH_BAD_PROPERTY;
        struct span name = {props.p + i, sep - i};
        int err = check_property(name, (struct span){props.p + sep + 1, end - sep - 1});
        if (err != BATCH_OK) return err;
        if (NAME_IS(name, DEDUP_ID_PROPERTY)) *has_dedup_id = 1;
        i = end + 1;
    }
    return BATCH_OK;
}

/* One batch item at `pos`: its body and properties, or a batch_error. */
struct batch_item {
    struct span body, props;
    int32_t flag;
    uint32_t crc;
    size_t size;
};

static int parse_item(struct span b, size_t pos, int64_t max_body, struct batch_item *it) {
    assert(pos <= b.n && "an item starts inside the batch");
    if (b.n - pos < BATCH_FIXED_BYTES) return BATCH_TRUNCATED;
    const uint8_t *p = b.p + pos;
    int64_t total = rd_i32(p), body_len = rd_i32(p + 16);
    if (rd_u32(p + 4) != 0) return BATCH_BAD_MAGIC;
    if (body_len < 0) return BATCH_BAD_BODY;
    if (total < BATCH_FIXED_BYTES + body_len || (uint64_t)total > b.n - pos) return BATCH_TRUNCATED;
    if (body_len > max_body) return BATCH_BODY_TOO_LARGE;
    int64_t props_len = (uint16_t)((p[20 + body_len] << 8) | p[21 + body_len]);
    if (props_len > MAX_PROPERTIES_BYTES) return BATCH_BAD_PROPERTIES;
    if (total != BATCH_FIXED_BYTES + body_len + props_len) return BATCH_BAD_TOTAL;
    it->size = (size_t)total;
    assert(it->size >= BATCH_FIXED_BYTES && it->size <= b.n - pos && "a parsed item lies in the batch and moves the walk on");
    it->crc = rd_u32(p + 8);
    it->flag = rd_i32(p + 12);
    it->body = (struct span){p + 20, (size_t)body_len};
    it->props = (struct span){p + 22 + body_len, (size_t)props_len};
    return BATCH_OK;
}

static int check_crc(struct batch_item *it) {
    uint32_t crc = body_crc31(it->body);
    if (it->crc != 0 && it->crc != crc) return BATCH_BAD_CRC;
    it->crc = crc;
    return BATCH_OK;
}

static void put_crc(struct crc_list l, size_t i, uint32_t crc) {
    if (l.p != NULL && l.n / 4 > i) memcpy(l.p + 4 * i, &crc, 4);
}

/* Item i's carried BODYCRC into it->crc; 0 when there is none to take. */
static int take_crc(struct crc_list l, size_t i, struct batch_item *it) {
    if (l.p == NULL || l.n / 4 <= i) return 0;
    memcpy(&it->crc, l.p + 4 * i, 4);
    return 1;
}

int batch_check(struct span batch, const struct batch_limits *lim, size_t *count, size_t *pos, size_t *stored_without_topic,
                struct crc_list crcs, int *has_dedup_id) {
    struct batch_item it;
    *count = 0;
    *stored_without_topic = 0;
    *has_dedup_id = 0;
    for (*pos = 0; *pos < batch.n; *pos += it.size) {
        if (*count >= lim->max_count) return BATCH_TOO_MANY;
        int err = parse_item(batch, *pos, lim->max_body, &it);
        if (err == BATCH_OK && (int64_t)it.props.n > lim->max_props) err = BATCH_PROPERTIES_TOO_LARGE;
        if (err == BATCH_OK && lim->check_props) err = check_properties(it.props, has_dedup_id);
        if (err == BATCH_OK) err = check_crc(&it);
        if (err != BATCH_OK) return err;
        put_crc(crcs, *count, it.crc);
        *count += 1;
        *stored_without_topic += FIXED_PART_BYTES + it.body.n + it.props.n;
    }
    assert(*pos == batch.n && "the items tile the batch exactly");
    return BATCH_OK;
}

/* The 17 fields of one message at d (the caller checked `total` bytes fit). */
static void write_stored(uint8_t *d, size_t total, const struct batch_item *it, const struct batch_common *c, int64_t qoff,
                         int64_t phys) {
    uint8_t *const start = d;
    wr_u32(d, (uint32_t)total);
    wr_u32(d + 4, MESSAGE_MAGIC_CODE);
    wr_u32(d + 8, it->crc);
    wr_u32(d + 12, (uint32_t)c->queue_id);
    wr_u32(d + 16, (uint32_t)it->flag);
    wr_i64(d + 20, qoff);
    wr_i64(d + 28, phys);
    wr_u32(d + 36, (uint32_t)c->sys_flag);
    wr_i64(d + 40, c->born_ts);
    size_t born = 8 + born_extra(c->sys_flag), store = 8 + hosts_extra(c->sys_flag) - born_extra(c->sys_flag);
    memcpy(d + 48, c->born_host, born);
    d += born - 8; /* the fields after BORNHOST at their IPv4 positions from here */
    wr_i64(d + 56, c->store_ts);
    memcpy(d + 64, c->store_host, store);
    d += store - 8; /* likewise after STOREHOST */
    wr_u32(d + 72, (uint32_t)c->reconsume_times);
    wr_i64(d + 76, c->prepared_offset);
    wr_u32(d + 84, (uint32_t)it->body.n);
    d += HEADER_BYTES;
    memcpy(d, it->body.p, it->body.n);
    d += it->body.n;
    *d++ = (uint8_t)c->topic.n;
    memcpy(d, c->topic.p, c->topic.n);
    d += c->topic.n;
    d[0] = (uint8_t)(it->props.n >> 8);
    d[1] = (uint8_t)it->props.n;
    memcpy(d + 2, it->props.p, it->props.n);
    assert((size_t)(d + 2 + it->props.n - start) == total && "the 17 fields fill exactly TOTALSIZE");
    (void)start;
}

int batch_encode(struct span batch, uint8_t *dest, size_t dest_limit, uint8_t *out, size_t out_n,
                 const struct batch_common *c, size_t max_count, struct encode_state *st, struct crc_list carried) {
    size_t start = st->dest_pos;
    struct batch_item it;
    while (st->batch_pos < batch.n && st->count < max_count) {
        st->error = parse_item(batch, st->batch_pos, INT32_MAX, &it);
        if (st->error == BATCH_OK && !take_crc(carried, st->count, &it)) st->error = check_crc(&it);
        if (st->error != BATCH_OK) return STOP_DONE;
        size_t total = FIXED_PART_BYTES + hosts_extra(c->sys_flag) + it.body.n + c->topic.n + it.props.n;
        if (total > INT32_MAX || dest_limit < st->dest_pos || total + END_FILE_MIN_BLANK_LENGTH > dest_limit - st->dest_pos)
            return STOP_FILE_FULL;
        if (out_n / 16 <= st->count) return STOP_OUT_FULL;
        int64_t phys = c->phys_offset + (int64_t)(st->dest_pos - start);
        write_stored(dest + st->dest_pos, total, &it, c, c->queue_offset + (int64_t)st->count, phys);
        put_h64(out + 16 * st->count, phys);
        put_h64(out + 16 * st->count + 8, (int64_t)total);
        st->count += 1;
        st->dest_pos += total;
        st->batch_pos += it.size;
        assert(st->dest_pos + END_FILE_MIN_BLANK_LENGTH <= dest_limit && "room for the end marker is kept");
        assert(st->batch_pos <= batch.n && st->count <= out_n / 16 && "the walk stays inside its buffers");
    }
    return STOP_DONE;
}
