/* Applying a dispatch scan: records -> per-queue runs of consume-queue entries; keys -> an index file. */
#include "kernels.h"

#include "bytes.h"

/* The smallest power of two >= 2 * n (at least 2): the open-addressing table of queue_runs. */
size_t runs_table_slots(size_t n) {
    size_t t = 2;
    while (t < 2 * n) t <<= 1;
    return t;
}

static uint32_t queue_key_hash(struct span topic, int32_t queue_id) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < topic.n; i++) h = (h ^ topic.p[i]) * 16777619u;
    return (h ^ (uint32_t)queue_id) * 16777619u;
}

static struct span run_topic(const struct runs_args *a, const uint8_t *run) {
    return (struct span){a->buf.p + get_h64(run + RUN_TOPIC_POS), (size_t)get_h32(run + RUN_TOPIC_LEN)};
}

static int same_queue(const struct runs_args *a, const uint8_t *run, struct span topic, int32_t queue_id) {
    struct span t = run_topic(a, run);
    return get_h32(run + RUN_QUEUE_ID) == queue_id && t.n == topic.n && memcmp(t.p, topic.p, topic.n) == 0;
}

/* True when the record is the next message of the run: the next queue offset, past the run's end in the log. */
static int continues_run(const uint8_t *run, const uint8_t *rec) {
    int64_t first = get_h64(run + RUN_FIRST_QOFF), qoff = get_h64(rec + REC_QUEUE_OFFSET);
    return qoff > first && (uint64_t)qoff - (uint64_t)first == (uint64_t)get_h32(run + RUN_COUNT) &&
           get_h64(rec + REC_PHYS) >= get_h64(run + RUN_END_PHYS);
}

static int64_t end_of(const uint8_t *rec) {
    int64_t phys = get_h64(rec + REC_PHYS), size = get_h32(rec + REC_SIZE);
    return phys > INT64_MAX - size ? INT64_MAX : phys + size;
}

static void add_code(uint8_t *run, int64_t code, int fallback) {
    int32_t n = get_h32(run + RUN_N_CODES);
    if (n > RUN_CODES) return; /* already more than the run can list */
    if (fallback) {
        put_h32(run + RUN_N_CODES, RUN_CODES + 1); /* the code is computed later: listeners must not filter on it */
        return;
    }
    for (int32_t i = 0; i < n; i++)
        if (get_h64(run + RUN_CODES_AT + 8 * i) == code) return;
    if (n < RUN_CODES) put_h64(run + RUN_CODES_AT + 8 * n, code);
    put_h32(run + RUN_N_CODES, n + 1);
}

static void start_run(uint8_t *run, const uint8_t *rec, int32_t rec_no) {
    memset(run, 0, RUN_BYTES);
    put_h64(run + RUN_FIRST_QOFF, get_h64(rec + REC_QUEUE_OFFSET));
    put_h64(run + RUN_FIRST_PHYS, get_h64(rec + REC_PHYS));
    put_h64(run + RUN_TOPIC_POS, get_h64(rec + REC_TOPIC_POS));
    put_h32(run + RUN_TOPIC_LEN, get_h32(rec + REC_TOPIC_LEN));
    put_h32(run + RUN_QUEUE_ID, get_h32(rec + REC_QUEUE_ID));
    put_h32(run + RUN_FIRST_REC, rec_no);
}

static void extend_run(uint8_t *run, const uint8_t *rec, int32_t rec_no) {
    put_h64(run + RUN_END_PHYS, end_of(rec));
    put_h64(run + RUN_LAST_TS, get_h64(rec + REC_STORE_TS));
    put_h32(run + RUN_COUNT, get_h32(run + RUN_COUNT) + 1);
    put_h32(run + RUN_LAST_REC, rec_no);
    add_code(run, get_h64(rec + REC_TAGS_CODE), (get_h32(rec + REC_FLAGS) & REC_FLAG_DELAY_FALLBACK) != 0);
}

/* Pass 1: the run of each record (into run_of); stops before a record needing a run past the output. */
static int assign_runs(const struct runs_args *a, struct runs_state *st, size_t n, size_t *done) {
    int32_t *run_of = a->scratch, *table = a->scratch + n;
    size_t mask = runs_table_slots(n) - 1, max_runs = a->runs_n / RUN_BYTES;
    memset(table, 0xff, (mask + 1) * sizeof *table); /* -1: empty slot */
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = a->recs + (st->rec_pos + i) * REC_BYTES;
        int64_t topic_pos = get_h64(rec + REC_TOPIC_POS), topic_len = get_h32(rec + REC_TOPIC_LEN);
        if (topic_pos < 0 || topic_len < 0 || topic_len > MAX_TOPIC_BYTES || (uint64_t)topic_pos > a->buf.n ||
            (uint64_t)topic_len > a->buf.n - (uint64_t)topic_pos || get_h32(rec + REC_SIZE) <= 0) {
            *done = i;
            return STOP_BAD_RECORD;
        }
        if (get_h32(rec + REC_FLAGS) & REC_FLAG_NO_QUEUE) { /* a transaction message the queues do not get */
            run_of[i] = -1;
            continue;
        }
        struct span topic = {a->buf.p + topic_pos, (size_t)topic_len};
        int32_t queue_id = get_h32(rec + REC_QUEUE_ID);
        size_t slot = queue_key_hash(topic, queue_id) & mask;
        while (table[slot] >= 0 && !same_queue(a, a->runs + (size_t)table[slot] * RUN_BYTES, topic, queue_id)) slot = (slot + 1) & mask;
        int32_t id = table[slot];
        if (id < 0 || !continues_run(a->runs + (size_t)id * RUN_BYTES, rec)) {
            if (st->n_runs >= max_runs) {
                *done = i;
                return STOP_OUT_FULL;
            }
            id = (int32_t)st->n_runs++;
            assert(st->n_runs <= max_runs && "a new run fits the runs buffer");
            start_run(a->runs + (size_t)id * RUN_BYTES, rec, (int32_t)(st->rec_pos + i));
            table[slot] = id; /* the queue's open run is the new one from here on */
        }
        extend_run(a->runs + (size_t)id * RUN_BYTES, rec, (int32_t)(st->rec_pos + i));
        if (get_h32(rec + REC_FLAGS) & REC_FLAG_DELAY_FALLBACK) st->n_fallback++;
        run_of[i] = id;
    }
    *done = n;
    return STOP_DONE;
}

int queue_runs(const struct runs_args *a, struct runs_state *st) {
    size_t n = a->n_recs - st->rec_pos, done;
    int stop = assign_runs(a, st, n, &done);
    if (stop == STOP_BAD_RECORD) return stop;
    /* Pass 2: each run's first entry; the hash table is not needed any more and counts the entries placed. */
    int32_t *run_of = a->scratch, *placed = a->scratch + n;
    size_t at = 0;
    for (size_t r = 0; r < st->n_runs; r++) {
        uint8_t *run = a->runs + r * RUN_BYTES;
        put_h32(run + RUN_ENTRIES_AT, (int32_t)at);
        at += (size_t)get_h32(run + RUN_COUNT);
        placed[r] = 0;
    }
    assert(at <= done && "every record is in at most one run");
    /* Pass 3: copy the entries, grouped by run; run_of[i] becomes the entry index of record i. */
    for (size_t i = 0; i < done; i++) {
        int32_t id = run_of[i];
        if (id < 0) continue; /* no entry; its scratch slot stays -1 */
        size_t e = (size_t)get_h32(a->runs + (size_t)id * RUN_BYTES + RUN_ENTRIES_AT) + (size_t)placed[id]++;
        assert(placed[id] <= get_h32(a->runs + (size_t)id * RUN_BYTES + RUN_COUNT) && e < at && "a run's entries stay in its place");
        memcpy(a->entries + e * CQ_UNIT_BYTES, a->recs + (st->rec_pos + i) * REC_BYTES + REC_CQ_ENTRY, CQ_UNIT_BYTES);
        run_of[i] = (int32_t)e;
    }
    st->rec_pos += done;
    return stop;
}

/* Index ------------------------------------------------------------------------------------- */

static int32_t time_diff_s(int64_t ts, int64_t begin) {
    if (ts <= begin) return 0;
    uint64_t s = ((uint64_t)ts - (uint64_t)begin) / 1000;
    return s > 0x7FFFFFFF ? 0x7FFFFFFF : (int32_t)s;
}

static void put_index_entry(const struct index_args *a, struct index_state *st, int32_t hash, int64_t phys, int64_t ts) {
    int64_t slot_no = (int64_t)hash % (int64_t)a->slot_num;
    if (slot_no < 0) slot_no += (int64_t)a->slot_num; /* Python's modulo, for a hash given negative */
    assert(slot_no >= 0 && (size_t)slot_no < a->slot_num && "the slot lies in the slot table");
    assert(st->index_count >= 0 && st->index_count < (int64_t)a->index_num && "index_put rolls before a full file");
    uint8_t *slot = a->file + INDEX_HEADER_BYTES + (size_t)slot_no * 4;
    int64_t count = st->index_count;
    int32_t prev = rd_i32(slot);
    if (prev <= 0 || prev > count) {
        prev = 0;
        st->slot_count++;
    }
    if (count <= 1) {
        st->begin_ts = ts;
        st->begin_phy = phys;
    }
    uint8_t *e = a->file + INDEX_HEADER_BYTES + a->slot_num * 4 + (size_t)count * INDEX_ENTRY_BYTES;
    wr_u32(e, (uint32_t)hash);
    wr_i64(e + 4, phys);
    wr_u32(e + 12, (uint32_t)time_diff_s(ts, st->begin_ts));
    wr_u32(e + 16, (uint32_t)prev);
    /* A reader following the slot must find the entry complete. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    wr_u32(slot, (uint32_t)count);
    st->index_count = count + 1;
    st->end_phy = phys;
    st->end_ts = ts;
}

static void write_index_header(const struct index_args *a, const struct index_state *st) {
    wr_i64(a->file, st->begin_ts);
    wr_i64(a->file + 8, st->end_ts);
    wr_i64(a->file + 16, st->begin_phy);
    wr_i64(a->file + 24, st->end_phy);
    wr_u32(a->file + 32, (uint32_t)st->slot_count);
    wr_u32(a->file + 36, (uint32_t)st->index_count);
}

int index_put(const struct index_args *a, struct index_state *st) {
    int stop = STOP_DONE;
    for (; st->key_pos < a->key_to; st->key_pos++) {
        const uint8_t *k = a->keys + st->key_pos * KEY_BYTES;
        int64_t rec = get_h32(k + 4), phys = get_h64(k + 8);
        int full = st->index_count >= (int64_t)a->index_num;
        if (rec != st->current_rec) {
            if (full) { /* IndexService rolls before it looks at the next message */
                stop = STOP_FILE_FULL;
                break;
            }
            st->current_rec = rec;
            st->skipping = phys < st->end_phy || (st->index_count > 1 && phys == st->end_phy); /* indexed before */
        }
        if (st->skipping) continue;
        if (full) { /* the rest of this message's keys go to the next file */
            stop = STOP_FILE_FULL;
            break;
        }
        put_index_entry(a, st, get_h32(k), phys, get_h64(k + 16));
        st->last_put_rec = rec;
    }
    write_index_header(a, st);
    return stop;
}
