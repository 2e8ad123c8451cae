/* Gather a pull: consume-queue entries -> the stored messages, concatenated. */
#include "kernels.h"

#include "bytes.h"

static int code_wanted(const struct gather_args *a, int64_t code) {
    size_t lo = 0, hi = a->n_codes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->codes[mid] == code) return 1;
        if (a->codes[mid] < code) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* Whether phys is below the end of the last damaged range starting at or before it (ranges in
 * ascending (start, end) order: CommitLog.damaged_range_end's rule). */
static int in_damaged_range(const struct gather_args *a, int64_t phys) {
    size_t lo = 0, hi = a->n_ranges; /* becomes the number of ranges starting at or before phys */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (get_h64(a->ranges + 16 * mid) <= phys) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && phys < get_h64(a->ranges + 16 * (lo - 1) + 8);
}

/* The segment holding [phys, phys + size), or NULL. */
static const struct segment *find_segment(const struct gather_args *a, int64_t phys, int64_t size) {
    for (size_t i = 0; i < a->n_segs; i++) {
        const struct segment *s = &a->segs[i];
        if (phys >= s->base && phys - s->base <= (int64_t)s->data.n && size <= (int64_t)s->data.n - (phys - s->base)) return s;
    }
    return NULL;
}

int stored_properties(struct span m, struct span *props) {
    *props = (struct span){m.p, 0};
    if (m.n < HEADER_BYTES + 1) return -1;
    size_t header = HEADER_BYTES + hosts_extra(rd_i32(m.p + POS_SYS_FLAG));
    if (m.n < header + 1) return -1;
    int64_t body_len = rd_i32(m.p + header - 4);
    if (body_len < 0 || (uint64_t)body_len > m.n - header - 1) return -1;
    size_t topic_at = header + (size_t)body_len;
    size_t props_at = topic_at + 1 + m.p[topic_at];
    if (props_at + 2 > m.n) return -1;
    int64_t props_len = rd_i16(m.p + props_at);
    if (props_len < 0 || (uint64_t)props_len > m.n - props_at - 2) return -1;
    *props = (struct span){m.p + props_at + 2, (size_t)props_len};
    return 0;
}

/* The TAGS value (last occurrence) of the stored message m; -1 when its lengths leave it. */
static int stored_tag(struct span m, struct span *tag) {
    struct span props;
    tag->p = m.p;
    tag->n = 0;
    if (stored_properties(m, &props) < 0) return -1;
    size_t i = 0, end = props.n;
    while (i < end) {
        const uint8_t *item = props.p + i, *stop = memchr(item, 0x02, end - i);
        size_t len = stop ? (size_t)(stop - item) : end - i;
        const uint8_t *sep = memchr(item, 0x01, len);
        if (sep && sep - item == 4 && memcmp(item, "TAGS", 4) == 0) *tag = (struct span){sep + 1, len - 5};
        i += len + 1;
    }
    return 0;
}

static int tag_wanted(const struct gather_args *a, struct span tag) {
    for (size_t i = 0; i < a->n_tags; i++)
        if (a->tags[i].n == tag.n && memcmp(a->tags[i].p, tag.p, tag.n) == 0) return 1;
    return 0;
}

/* MessageGetter._batch_full: never before the first message, then count and byte limits. */
static int batch_full(const struct gather_args *a, const struct gather_state *st, int64_t phys, int64_t size) {
    if (st->bytes == 0 || st->count == 0) return 0;
    if ((int64_t)st->count >= a->max_count) return 1;
    int disk = phys < a->disk_below_phy;
    int64_t count_limit = disk ? a->count_disk : a->count_mem, bytes_limit = disk ? a->bytes_disk : a->bytes_mem;
    return (int64_t)st->bytes + size > bytes_limit || (int64_t)st->count >= count_limit;
}

static void copy_out(const struct gather_args *a, struct gather_state *st, struct span m, int64_t phys) {
    assert(m.n <= a->out_n - st->bytes && "gather_one checked the room in out");
    assert((a->meta == NULL || st->count < a->meta_n / META_BYTES) && "gather_one checked the room in meta");
    memcpy(a->out + st->bytes, m.p, m.n);
    if (a->meta != NULL) {
        uint8_t *meta = a->meta + META_BYTES * st->count;
        put_h64(meta, phys);
        put_h32(meta + 8, (int32_t)st->examined);
        put_h32(meta + 12, (int32_t)m.n);
    }
    st->count += 1;
    st->bytes += m.n;
    st->skip_below = -1;
}

/* One entry: STOP_DONE to go on (taken or skipped), or why the gather stops before it. */
static int gather_one(const struct gather_args *a, struct gather_state *st, const uint8_t *e) {
    int64_t phys = rd_i64(e), size = rd_i32(e + 8), code = rd_i64(e + 12);
    if (size <= 0) return STOP_DONE; /* a gap entry */
    if (a->ranges != NULL && in_damaged_range(a, phys)) return STOP_DONE; /* its message lies in damaged bytes */
    if (size > a->max_size || phys < 0 || phys > a->max_phy - size) {
        st->damaged += 1; /* points outside the log: skipped alone */
        return STOP_DONE;
    }
    if (phys < a->min_phy || phys < st->skip_below) {
        st->removed_seen |= st->count == 0;
        return STOP_DONE;
    }
    if (batch_full(a, st, phys, size)) return STOP_COUNT_LIMIT;
    if (a->codes != NULL && !code_wanted(a, code)) return STOP_DONE;
    const struct segment *s = find_segment(a, phys, size);
    if (s == NULL) return STOP_SEGMENT_MISS;
    assert(phys >= s->base && (size_t)(phys - s->base) + (size_t)size <= s->data.n && "find_segment answers a segment holding the message");
    struct span m = {s->data.p + (phys - s->base), (size_t)size}, tag;
    if (size < 8 || rd_i32(m.p) != size || rd_u32(m.p + 4) != MESSAGE_MAGIC_CODE) {
        st->damaged += 1; /* not the start of a message of this size: skipped alone */
        return STOP_DONE;
    }
    if (a->tags != NULL) {
        if (stored_tag(m, &tag) < 0) return STOP_BAD_PARTS;
        if (!tag_wanted(a, tag)) return STOP_DONE;
    }
    if (a->sql != NULL && (int64_t)st->examined != st->filter_passed) {
        struct span props;
        if (stored_properties(m, &props) < 0) return STOP_BAD_PARTS;
        int outcome = sql_eval(a->sql, props);
        if (outcome == SQL_DEFER) return STOP_FILTER_DEFER;
        if (outcome != SQL_TRUE) return STOP_DONE;
    }
    if ((size_t)size > a->out_n - st->bytes || (a->meta != NULL && a->meta_n / META_BYTES <= st->count)) return STOP_OUT_FULL;
    copy_out(a, st, m, phys);
    return STOP_DONE;
}

int gather(const struct gather_args *a, struct gather_state *st) {
    while (st->examined < a->n_entries) {
        int stop = gather_one(a, st, a->entries.p + CQ_UNIT_BYTES * st->examined);
        if (stop != STOP_DONE) return stop;
        st->examined += 1;
        assert(st->bytes <= a->out_n && "the output never overflows");
    }
    return STOP_DONE;
}
