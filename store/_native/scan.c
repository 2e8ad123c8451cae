/* Dispatch scan: stored messages -> consume-queue records and index keys. */
#include "kernels.h"

#include "bytes.h"

/* The checks of store.message_codec.check_message, in its order; STOP_DONE for a message. */
int check_message_at(struct span buf, size_t pos, size_t limit, int check_crc, size_t *total) {
    assert(pos <= limit && limit <= buf.n && "the binding checked the range");
    *total = 0;
    if (limit - pos < 8) return STOP_END;
    const uint8_t *p = buf.p + pos;
    int64_t size = rd_i32(p);
    uint32_t magic = rd_u32(p + 4);
    if (size == 0 && magic == 0) return STOP_END;
    if (magic == BLANK_MAGIC_CODE) {
        if (size < END_FILE_MIN_BLANK_LENGTH || (uint64_t)size > limit - pos) return STOP_BAD_BLANK;
        *total = (size_t)size;
        return STOP_BLANK;
    }
    if (magic != MESSAGE_MAGIC_CODE) return STOP_BAD_MAGIC;
    if (size < FIXED_PART_BYTES) return STOP_BAD_TOTAL;
    if ((uint64_t)size > limit - pos) return STOP_PARTIAL;
    int64_t extra = (int64_t)hosts_extra(rd_i32(p + POS_SYS_FLAG)), header = HEADER_BYTES + extra;
    if (size < FIXED_PART_BYTES + extra) return STOP_BAD_TOTAL;
    int64_t body_len = rd_i32(p + POS_BODY_LEN + extra);
    if (body_len < 0 || header + body_len + 3 > size) return STOP_BAD_BODY;
    int64_t topic_len = p[header + body_len];
    int64_t props_at = header + body_len + 1 + topic_len;
    if (props_at + 2 > size) return STOP_BAD_TOPIC;
    int64_t props_len = rd_i16(p + props_at);
    if (props_len < 0 || FIXED_PART_BYTES + extra + body_len + topic_len + props_len != size) return STOP_BAD_PARTS;
    if (check_crc && body_crc31((struct span){p + header, (size_t)body_len}) != rd_u32(p + 8)) return STOP_BAD_CRC;
    *total = (size_t)size;
    assert(*total >= FIXED_PART_BYTES && *total <= limit - pos && "a checked message lies below the limit");
    return STOP_DONE;
}

/* The properties dispatch needs; each the last occurrence, as decode_properties keeps. */
struct props {
    struct span tags, keys, uniq, delay;
    int has_delay;
};

static int name_is(struct span name, const char *lit, size_t n) { return name.n == n && memcmp(name.p, lit, n) == 0; }

static void take_prop(struct props *out, struct span name, struct span value) {
    if (name_is(name, "TAGS", 4)) out->tags = value;
    else if (name_is(name, "KEYS", 4)) out->keys = value;
    else if (name_is(name, "UNIQ_KEY", 8)) out->uniq = value;
    else if (name_is(name, "DELAY", 5)) {
        out->delay = value;
        out->has_delay = 1;
    }
}

/* `name \x01 value \x02` items; an item without \x01 is skipped (decode_properties). */
static void parse_props(struct span s, struct props *out) {
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < s.n) {
        const uint8_t *item = s.p + i;
        const uint8_t *end = memchr(item, 0x02, s.n - i);
        size_t len = end ? (size_t)(end - item) : s.n - i;
        const uint8_t *sep = memchr(item, 0x01, len);
        if (sep) {
            size_t nl = (size_t)(sep - item);
            take_prop(out, (struct span){item, nl}, (struct span){sep + 1, len - nl - 1});
        }
        i += len + 1;
    }
}

/* Index keys of a message: UNIQ_KEY (when enabled and set), then every non-empty KEYS word. */
static size_t count_keys(const struct props *pr, int uniq_enable) {
    size_t n = (uniq_enable && pr->uniq.n > 0) ? 1 : 0;
    int in_word = 0;
    for (size_t i = 0; i < pr->keys.n; i++) {
        int space = pr->keys.p[i] == ' ';
        if (!space && !in_word) n++;
        in_word = !space;
    }
    return n;
}

static int32_t index_hash(int32_t topic_hash, struct span key) {
    int32_t h = java_hash_utf8(topic_hash, key);
    return h == INT32_MIN ? 0 : (h < 0 ? -h : h); /* abs; Java's abs(MIN_VALUE) maps to 0 in RocketMQ */
}

static void put_key(uint8_t *k, int32_t hash, size_t rec_no, int64_t phys, int64_t store_ts) {
    put_h32(k, hash);
    put_h32(k + 4, (int32_t)rec_no);
    put_h64(k + 8, phys);
    put_h64(k + 16, store_ts);
}

static size_t emit_keys(uint8_t *k, const struct props *pr, int uniq_enable, int32_t topic_hash, size_t rec_no, int64_t phys,
                        int64_t ts) {
    size_t n = 0;
    if (uniq_enable && pr->uniq.n > 0) put_key(k + KEY_BYTES * n++, index_hash(topic_hash, pr->uniq), rec_no, phys, ts);
    size_t i = 0;
    while (i < pr->keys.n) {
        while (i < pr->keys.n && pr->keys.p[i] == ' ') i++;
        size_t start = i;
        while (i < pr->keys.n && pr->keys.p[i] != ' ') i++;
        if (i > start) {
            struct span word = {pr->keys.p + start, i - start};
            put_key(k + KEY_BYTES * n++, index_hash(topic_hash, word), rec_no, phys, ts);
        }
    }
    return n;
}

/* Due time of a schedule-topic message (delay_due_time_ms); 0 when Python must compute it. */
static int delay_due(const struct scan_args *a, const struct props *pr, int64_t store_ts, int64_t *due) {
    struct span v = pr->delay;
    int64_t level = 0;
    if (v.n > 9 || a->n_levels == 0) return 0;
    for (size_t i = 0; i < v.n; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') return 0;
        level = level * 10 + (v.p[i] - '0');
    }
    if (v.n == 0 || level <= 0) {
        *due = store_ts; /* int("") raises and counts as level 0 too */
        return 1;
    }
    if ((size_t)level > a->n_levels) level = (int64_t)a->n_levels;
    *due = store_ts + a->delay_levels[level - 1];
    return 1;
}

static const char SCHEDULE_TOPIC[] = "SCHEDULE_TOPIC_XXXX";

static int32_t tags_code_of(const struct scan_args *a, struct span topic, const struct props *pr, int64_t ts, int64_t *code) {
    *code = java_hash_utf8(0, pr->tags);
    if (a->delay_levels == NULL || !pr->has_delay || !name_is(topic, SCHEDULE_TOPIC, sizeof SCHEDULE_TOPIC - 1)) return 0;
    return delay_due(a, pr, ts, code) ? 0 : REC_FLAG_DELAY_FALLBACK;
}

/* What emit_message read of one message, for its record. */
struct msg_facts {
    int32_t sys_flag;
    int64_t store_ts, code;
    size_t topic_pos, topic_len, props_len; /* topic_pos: in the scanned buffer */
};

static void put_record(uint8_t *r, const uint8_t *m, size_t total, const struct msg_facts *f, int32_t flags, size_t key_count) {
    int64_t phys = rd_i64(m + 28);
    wr_i64(r + REC_CQ_ENTRY, phys);
    wr_u32(r + REC_CQ_ENTRY + 8, (uint32_t)total);
    wr_i64(r + REC_CQ_ENTRY + 12, f->code);
    put_h32(r + REC_QUEUE_ID, rd_i32(m + 12));
    put_h64(r + REC_QUEUE_OFFSET, rd_i64(m + 20));
    put_h64(r + REC_STORE_TS, f->store_ts);
    put_h64(r + REC_PHYS, phys);
    put_h64(r + REC_TAGS_CODE, f->code);
    put_h64(r + REC_TOPIC_POS, (int64_t)f->topic_pos);
    put_h64(r + REC_PROPS_POS, (int64_t)(f->topic_pos + f->topic_len + 2));
    put_h32(r + REC_SIZE, (int32_t)total);
    put_h32(r + REC_SYS_FLAG, f->sys_flag);
    put_h32(r + REC_TOPIC_LEN, (int32_t)f->topic_len);
    put_h32(r + REC_PROPS_LEN, (int32_t)f->props_len);
    put_h32(r + REC_FLAGS, flags);
    put_h32(r + REC_KEY_COUNT, (int32_t)key_count);
}

/* Emit the record and keys of the checked message at pos; STOP_OUT_FULL when they do not fit.
 * A prepared or rolled-back transaction message (both have bit 0x4 of the type) gets a
 * REC_FLAG_NO_QUEUE record: no consume-queue entry (DefaultMessageStore's
 * CommitLogDispatcherBuildConsumeQueue); a rolled-back one no index keys either, a prepared one
 * is indexed (IndexService.buildIndex skips only rollbacks). */
static int emit_message(const struct scan_args *a, struct scan_state *st, size_t total) {
    const uint8_t *m = a->buf.p + st->pos;
    struct msg_facts f;
    f.sys_flag = rd_i32(m + POS_SYS_FLAG);
    size_t header = HEADER_BYTES + hosts_extra(f.sys_flag);
    size_t body_len = (size_t)rd_i32(m + header - 4);
    struct span topic = {m + header + body_len + 1, m[header + body_len]};
    struct span props_raw = {topic.p + topic.n + 2, (size_t)rd_i16(topic.p + topic.n)};
    f.topic_pos = st->pos + header + body_len + 1;
    f.topic_len = topic.n;
    f.props_len = props_raw.n;
    struct props pr;
    parse_props(props_raw, &pr);
    int uniq = (a->flags & SCAN_UNIQ_KEY) != 0, no_queue = (f.sys_flag & TRANSACTION_PREPARED_TYPE) != 0;
    size_t nk = (f.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE ? 0 : count_keys(&pr, uniq);
    if (a->recs_n / REC_BYTES <= st->n_recs || a->keys_n / KEY_BYTES - st->n_keys < nk) return STOP_OUT_FULL;
    f.store_ts = rd_i64(m + POS_STORE_TS + born_extra(f.sys_flag));
    int32_t flags = REC_FLAG_NO_QUEUE;
    if (no_queue) f.code = java_hash_utf8(0, pr.tags);
    else flags = tags_code_of(a, topic, &pr, f.store_ts, &f.code);
    put_record(a->recs + REC_BYTES * st->n_recs, m, total, &f, flags, nk);
    if (nk > 0) {
        int32_t th = java_hash_utf8(java_hash_utf8(0, topic), (struct span){(const uint8_t *)"#", 1});
        size_t emitted = emit_keys(a->keys + KEY_BYTES * st->n_keys, &pr, uniq, th, st->n_recs, rd_i64(m + 28), f.store_ts);
        assert(emitted == nk && "emit_keys writes what count_keys reserved");
        (void)emitted;
    }
    st->n_recs += 1;
    st->n_keys += nk;
    return STOP_DONE;
}

int dispatch_scan(const struct scan_args *a, struct scan_state *st) {
    while (st->pos < a->limit) {
        size_t total;
        int stop = check_message_at(a->buf, st->pos, a->limit, (a->flags & SCAN_CHECK_CRC) != 0, &total);
        if (stop != STOP_DONE) return stop;
        stop = emit_message(a, st, total);
        if (stop != STOP_DONE) return stop;
        st->pos += total;
        assert(st->pos <= a->limit && "the scan never passes its limit");
    }
    return STOP_DONE;
}
