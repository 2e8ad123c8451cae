/* Data-path kernels over RocketMQ 4.x byte layouts (docs/layouts.md, docs/native.md).
 *
 * Pure C, no Python objects: the binding in kernels.c acquires the buffers, checks the
 * arguments, releases the GIL and calls these. Every read and write is checked against
 * the bound passed with its pointer; a kernel never allocates.
 *
 * assert() states internal invariants only (what the binding's checks and the kernel's own
 * length checks already guarantee); input is never validated by an assert, it is answered with
 * a stop code, a batch error or ValueError. The asserts are compiled in where NDEBUG is not
 * defined (the ASan build), out of the normal build (docs/native.md "Assertions").
 */
#ifndef TIDEMQ_KERNELS_H
#define TIDEMQ_KERNELS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define MESSAGE_MAGIC_CODE 0xDAA320A7u
#define BLANK_MAGIC_CODE 0xCBD43194u
#define END_FILE_MIN_BLANK_LENGTH 8
#define FIXED_PART_BYTES 91 /* every stored field but body, topic and properties bytes */
#define HEADER_BYTES 88     /* fields 1..14 and the body length */
/* SYSFLAG bits (RocketMQ's MessageSysFlag): a 20-byte IPv6 host in place of an 8-byte IPv4 one
 * moves every later field by V6_EXTRA_BYTES; the transaction type is SYSFLAG & TRANSACTION_TYPE_MASK. */
#define POS_SYS_FLAG 36
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
#define V6_EXTRA_BYTES 12
#define TRANSACTION_TYPE_MASK 0xC
#define TRANSACTION_PREPARED_TYPE 0x4
#define TRANSACTION_ROLLBACK_TYPE 0xC
/* Field positions with IPv4 hosts; add born_extra (STORETIMESTAMP) or hosts_extra (later fields). */
#define POS_STORE_TS 56
#define POS_BODY_LEN 84

static inline size_t born_extra(int32_t sys_flag) { return (sys_flag & BORNHOST_V6_FLAG) ? V6_EXTRA_BYTES : 0; }
static inline size_t hosts_extra(int32_t sys_flag) {
    return born_extra(sys_flag) + ((sys_flag & STOREHOSTADDRESS_V6_FLAG) ? V6_EXTRA_BYTES : 0);
}
#define BATCH_FIXED_BYTES 22 /* batch item: TOTALSIZE MAGIC BODYCRC FLAG BODYLEN 4 each, PROPLEN 2 */
#define CQ_UNIT_BYTES 20
#define MAX_PROPERTIES_BYTES 0x7FFF
#define MAX_TOPIC_BYTES 255
#define DEDUP_ID_PROPERTY "TIDEMQ_DEDUP_ID" /* store.put.put_batch.DEDUP_PROPERTY: an idempotent produce's id */

/* Where a kernel stopped (the first element of every kernel's result). */
enum stop_code {
    STOP_DONE = 0,          /* input exhausted / limit reached exactly */
    STOP_FILE_FULL = 1,     /* encode: next message + end marker does not fit the file */
    STOP_OUT_FULL = 2,      /* an output buffer cannot take the next item; call again */
    STOP_BLANK = 3,         /* scan: end-of-file marker at pos; continue in the next file */
    STOP_END = 4,           /* scan: nothing (whole) written at pos: < 8 bytes or zeros */
    STOP_PARTIAL = 5,       /* scan: a message whose TOTALSIZE reaches past the limit */
    STOP_BAD_MAGIC = 6,     /* corrupt: magic code neither message nor blank */
    STOP_BAD_BLANK = 7,     /* corrupt: blank marker of bad length */
    STOP_BAD_TOTAL = 8,     /* corrupt: TOTALSIZE below the fixed part */
    STOP_BAD_BODY = 9,      /* corrupt: body length negative or past TOTALSIZE */
    STOP_BAD_TOPIC = 10,    /* corrupt: topic length past TOTALSIZE */
    STOP_BAD_PARTS = 11,    /* corrupt: TOTALSIZE disagrees with its parts */
    STOP_BAD_CRC = 12,      /* corrupt: BODYCRC mismatch (only when asked to check) */
    STOP_COUNT_LIMIT = 13,  /* gather: a transfer limit (count or bytes) is reached */
    STOP_SEGMENT_MISS = 14, /* gather: the entry's bytes are not in any given segment */
    STOP_BAD_RECORD = 15,   /* queue_runs: a record's topic or size does not describe bytes of buf */
    STOP_FILTER_DEFER = 16, /* gather: the SQL92 filter leaves this message to the caller (SQL_DEFER) */
};

/* Why a batch (RocketMQ's encodeMessages format) is malformed. */
enum batch_error {
    BATCH_OK = 0,
    BATCH_TRUNCATED = 1,     /* fewer bytes left than the item's fixed part or TOTALSIZE */
    BATCH_BAD_TOTAL = 2,     /* TOTALSIZE disagrees with the body and properties lengths */
    BATCH_BAD_MAGIC = 3,     /* MAGICCODE is not 0 */
    BATCH_BAD_CRC = 4,       /* non-zero BODYCRC that does not match the body */
    BATCH_BAD_BODY = 5,      /* body length negative */
    BATCH_BAD_PROPERTIES = 6, /* properties longer than 32767 bytes */
    BATCH_BODY_TOO_LARGE = 7, /* body length above the limit */
    /* check_batch with limits and property checks only: */
    BATCH_PROPERTIES_TOO_LARGE = 8, /* properties longer than the limit */
    BATCH_BAD_PROPERTY = 9,         /* properties not `name \x01 value \x02` pairs of UTF-8 with a non-empty name */
    BATCH_RESERVED_PROPERTY = 10,   /* a name encode.c's is_reserved lists (a delay, REAL_TOPIC, the timer's or transaction's) */
    BATCH_BAD_TAGS = 11,            /* TAGS '*', over 255 characters, with '||' or a control character */
    BATCH_BAD_UNIQ_KEY = 12,        /* UNIQ_KEY empty, over 128 characters or with a space */
    BATCH_TOO_MANY = 13             /* more items than the limit */
};

/* What check_batch enforces beyond the layout. */
struct batch_limits {
    int64_t max_body;  /* longest body */
    int64_t max_props; /* longest properties */
    size_t max_count;  /* most items */
    int check_props;   /* parse the properties (BATCH_BAD_PROPERTY .. BATCH_BAD_UNIQ_KEY) */
};

/* Below this many input bytes a binding keeps the GIL: a thread that takes it (a dispatcher
 * running Python) may keep it for a whole switch interval (5 ms by default; the broker sets
 * gil_switch_interval_us), so releasing pays only for work that takes about as long itself
 * (1 MiB is 0.3-1 ms of copying and CRC at 1-3 GB/s). */
#define GIL_RELEASE_MIN_BYTES (1024 * 1024)

/* A bounded byte range. */
struct span {
    const uint8_t *p;
    size_t n;
};

/* Scan output record (host byte order except the consume-queue entry), 96 bytes. */
#define REC_BYTES 96
#define REC_CQ_ENTRY 0 /* 20 B big-endian: phys 8 | size 4 | tags code 8 */
#define REC_QUEUE_ID 20
#define REC_QUEUE_OFFSET 24
#define REC_STORE_TS 32
#define REC_PHYS 40
#define REC_TAGS_CODE 48
#define REC_TOPIC_POS 56
#define REC_PROPS_POS 64
#define REC_SIZE 72
#define REC_SYS_FLAG 76
#define REC_TOPIC_LEN 80
#define REC_PROPS_LEN 84
#define REC_FLAGS 88
#define REC_KEY_COUNT 92
#define REC_FLAG_DELAY_FALLBACK 1 /* schedule topic DELAY value the kernel did not parse */
#define REC_FLAG_NO_QUEUE 2       /* a prepared or rolled-back transaction message: no consume-queue entry */

/* Scan index output, 24 bytes host order: key hash 4 | record number 4 | phys 8 | store ts 8. */
#define KEY_BYTES 24

#define SCAN_UNIQ_KEY 1 /* index UNIQ_KEY as well (message_index_uniq_key_enable) */
#define SCAN_CHECK_CRC 2

/* Gather meta output, 16 bytes host order per message: phys 8 | entry index 4 | size 4. */
#define META_BYTES 16

int32_t java_hash_utf8(int32_t h, struct span s);
/* Whether s is well-formed UTF-8 (what Python's strict decoding accepts). */
int utf8_well_formed(struct span s);
uint32_t body_crc31(struct span body);

/* render_views (view.c): JSON views of stored messages, joined by commas. */
enum view_outcome {
    VIEW_OK = 0,
    VIEW_PYTHON = 1,  /* a message the kernel does not render exactly: the caller renders the call's messages */
    VIEW_OVERFLOW = 2 /* the output did not take the views (the input changed since the measuring pass) */
};
/* With out NULL measures (*len: the bytes the views take); else writes at most cap bytes to out. */
int render_views(struct span data, uint8_t *out, size_t cap, size_t *len);
/* What a receive shows of a message besides its view: the topic asked for, the reconsume times, the receipt handle and
 * the end of its invisible time. render_received renders one message (exactly `message`) so, as render_views does. */
struct received {
    struct span topic, handle;
    int32_t reconsume_times;
    int64_t invisible_until_ms;
};
int render_received(struct span message, const struct received *r, uint8_t *out, size_t cap, size_t *len);

/* json_produce (produce.c): a JSON produce body packed into RocketMQ's batch encoding, as the reference
 * (app.produce_parse.parse_json + store.put.put_batch.packed_fields) packs it, UNIQ_KEY values left as
 * placeholders; or PRODUCE_PYTHON for a body the caller parses with the reference. */
enum produce_outcome {
    PRODUCE_PACKED = 0,
    PRODUCE_PYTHON = 1
};
#define UNIQ_KEY_CHARS 32 /* a UNIQ_KEY made by store.codec.message.UniqKeyGenerator */
/* The most bytes a message's item takes beyond the text it was decoded from: the item's head and
 * properties length, TAGS and KEYS' names and separators, UNIQ_KEY's name, value and separators. */
#define PRODUCE_ITEM_EXTRA_BYTES (BATCH_FIXED_BYTES + 6 + 6 + 9 + UNIQ_KEY_CHARS + 1)
struct produce_limits {
    size_t max_messages; /* more go the reference's way */
    size_t max_body;     /* a longer body does */
    struct span reserved; /* property names a producer may not set, separated by NUL bytes */
};
struct produce_result {
    size_t count, len;  /* messages, bytes written */
    int64_t queue_id;   /* the queue every message named; -1: none did */
    int is_batch;       /* {"messages": [...]} */
};
int json_produce(struct span json, const struct produce_limits *lim, uint8_t *out, size_t cap, struct produce_result *r);
/* The bytes json_produce writes for `json` at most (max_messages: its limit's). */
size_t json_produce_bound(struct span json, size_t max_messages);
/* Each item's UNIQ_KEY placeholder in data[0..len) (json_produce's output) set to head + the item's 16-bit
 * counter in hex (first, first + 1, ...), as UniqKeyGenerator writes keys; -1 when an item is not such an item. */
int fill_uniq_keys(uint8_t *data, size_t len, struct span head, uint32_t first);

/* render_produce_reply (produce.c): the reply to a put json_produce packed, as orjson writes app.routes_produce's
 * packed_reply: a SendResult, or {"kind": "batch", "results": [...]} of them. */
struct produce_reply {
    struct span head;     /* the UNIQ_KEY head the keys were written with (fill_uniq_keys) */
    struct span host_hex; /* the store host in upper-case hex (an offset message id's prefix) */
    uint32_t first;       /* the first key's counter value */
    int32_t queue_id;
    int64_t first_queue_offset, store_timestamp;
    int is_batch;
};
/* A SendResult's bytes besides its key's head and the host: literals, 4 + 16 hex digits, four numbers of at most 20. */
#define PRODUCE_RESULT_FIXED_BYTES 240
size_t produce_reply_bound(const struct produce_reply *r, size_t count);
/* Writes the reply for `count` messages whose commitlog offsets are offsets[16 * i] (host-order int64, as
 * EncodedItems holds them) into out; the bytes written (0 when cap is below produce_reply_bound). */
size_t render_produce_reply(const struct produce_reply *r, const uint8_t *offsets, size_t count, uint8_t *out, size_t cap);

/* CRC-32 as zlib's crc32(crc, p, n) (crc32.c); crc32_init() builds its tables and picks the method
 * (before any other call); crc32_method(): 1 slice-by-8 tables, 2 carry-less multiplication folding. */
void crc32_init(void);
uint32_t crc32_ieee(uint32_t crc, const uint8_t *p, size_t n);
uint32_t crc32_portable(uint32_t crc, const uint8_t *p, size_t n);
int crc32_method(void);

struct batch_common {
    struct span topic;
    const uint8_t *born_host;  /* 8 bytes, 20 with BORNHOST_V6_FLAG in sys_flag */
    const uint8_t *store_host; /* 8 bytes, 20 with STOREHOSTADDRESS_V6_FLAG in sys_flag */
    int64_t born_ts, store_ts, queue_offset, phys_offset, prepared_offset;
    int32_t queue_id, sys_flag, reconsume_times;
};

struct encode_state {
    size_t batch_pos, dest_pos, count;
    int error; /* enum batch_error, when the stop was a malformed item */
};

/* BODYCRCs a check computed, host-order uint32 each, item i at 4*i; NULL p: none. */
struct crc_list {
    uint8_t *p;
    size_t n; /* bytes */
};

/* Checks a batch; with crcs.p, item i's BODYCRC goes to crcs.p[4i] while 4i+4 <= crcs.n. */
/* *has_dedup_id: 1 when an item has the DEDUP_ID_PROPERTY (looked for only with lim->check_props). */
int batch_check(struct span batch, const struct batch_limits *lim, size_t *count, size_t *pos, size_t *stored_without_topic,
                struct crc_list crcs, int *has_dedup_id);
int check_properties(struct span props, int *has_dedup_id);

/* Fault [p, p+n) in for writing; 1: MADV_POPULATE_WRITE, 2: one write per page, -errno on failure. */
int prefault_range(uint8_t *p, size_t n);
/* With carried.p, item i of the call (from st->batch_pos) takes carried.p[4i] as its BODYCRC,
 * unchecked (check_batch computed it over the same immutable bytes); items past carried.n are
 * checked and computed as without. */
int batch_encode(struct span batch, uint8_t *dest, size_t dest_limit, uint8_t *out, size_t out_n,
                 const struct batch_common *c, size_t max_count, struct encode_state *st, struct crc_list carried);

struct scan_args {
    struct span buf;
    size_t limit;
    uint8_t *recs;
    size_t recs_n;
    uint8_t *keys;
    size_t keys_n;
    const int64_t *delay_levels; /* NULL: no delay handling */
    size_t n_levels;
    int flags;
};

struct scan_state {
    size_t pos, n_recs, n_keys;
};

int dispatch_scan(const struct scan_args *a, struct scan_state *st);
int check_message_at(struct span buf, size_t pos, size_t limit, int check_crc, size_t *total);

struct segment {
    int64_t base;
    struct span data;
};

/* SQL92 filter programs (store/sql_program.py, docs/native.md "sql_eval"). The binding checks a
 * program against these bounds and copies it into the arrays below before any evaluation. */
#define SQL_MAX_NODES 4096
#define SQL_MAX_PROPS 128   /* distinct property names: the evaluator resolves them into a stack table */
#define SQL_MAX_DEPTH 64    /* levels of the tree: the evaluator's recursion */
#define SQL_NUMBER_CHARS 256 /* longest decimal text converted here; a longer one is left to the caller */

enum sql_op {
    SQL_CONST = 1, SQL_PROP = 2, SQL_NEG = 3, SQL_NOT = 4, SQL_BOOL_CAST = 5, SQL_AND = 6, SQL_OR = 7, SQL_EQ = 8,
    SQL_GT = 9, SQL_GE = 10, SQL_LT = 11, SQL_LE = 12, SQL_IN = 13, SQL_NOT_IN = 14, SQL_CONTAINS = 15, SQL_NOT_CONTAINS = 16,
    SQL_STARTS_WITH = 17, SQL_NOT_STARTS_WITH = 18, SQL_ENDS_WITH = 19, SQL_NOT_ENDS_WITH = 20, SQL_OP_END = 21
};

/* A value's Java class (store.sql_values.JType); SQL_NULL is Java's null. */
enum sql_type { SQL_NULL = 0, SQL_BOOL = 1, SQL_INT = 2, SQL_LONG = 3, SQL_DOUBLE = 4, SQL_STRING = 5 };

/* What evaluating a program over one message's properties gives. */
enum sql_outcome {
    SQL_FALSE = 0,
    SQL_TRUE = 1,    /* the only outcome that passes the filter */
    SQL_UNKNOWN = 2, /* null */
    SQL_ABORTED = 3, /* RocketMQ's evaluation throws (a failed number conversion, ...) */
    SQL_DEFER = 4    /* the caller decides: digits outside ASCII, a hexadecimal float, a long number, invalid UTF-8 */
};

struct sql_value {
    int32_t type; /* enum sql_type */
    int64_t i;    /* BOOL (0/1), INT, LONG */
    double d;     /* DOUBLE */
    struct span s; /* STRING: UTF-8 bytes */
};

struct sql_node {
    int32_t op, a, b, c; /* operands as store/sql_program.py writes them; node operands precede the node */
};

struct sql_program {
    const struct sql_node *nodes; /* the root is the last */
    size_t n_nodes;
    const struct span *names; /* property names */
    size_t n_names;
    const struct sql_value *consts;
    size_t n_consts;
    const int32_t *list; /* AND/OR operands (node indexes), IN items (constant indexes) */
    size_t n_list;
};

int sql_init(void);
/* enum sql_outcome of the program over `props`, a stored message's `name \x01 value \x02` bytes. */
int sql_eval(const struct sql_program *p, struct span props);
/* The properties of the stored message m; -1 when its lengths leave it. */
int stored_properties(struct span m, struct span *props);

struct gather_args {
    struct span entries;
    size_t n_entries;
    const struct segment *segs;
    size_t n_segs;
    uint8_t *out;
    size_t out_n;
    uint8_t *meta; /* NULL or META_BYTES per message */
    size_t meta_n;
    const int64_t *codes; /* sorted; NULL: no tag filter */
    size_t n_codes;
    const struct span *tags; /* exact tags (UTF-8); NULL: hash only */
    size_t n_tags;
    const uint8_t *ranges; /* NULL or n_ranges host-order int64 [start, end) pairs, ascending */
    size_t n_ranges;
    const struct sql_program *sql; /* NULL: no SQL92 filter */
    int64_t max_count, count_mem, bytes_mem, count_disk, bytes_disk, disk_below_phy, min_phy, max_phy, max_size;
};

/* Also the start state of a resumed call: out holds `bytes` and meta `count` records already. */
struct gather_state {
    size_t examined, count, bytes, damaged;
    int removed_seen;
    int64_t skip_below; /* entries below it count as removed until a message is taken; -1: none */
    int64_t filter_passed; /* entry index whose SQL92 filter the caller decided TRUE after STOP_FILTER_DEFER; -1: none */
};

int gather(const struct gather_args *a, struct gather_state *st);

/* queue_runs output, 136 bytes host order: the entries of consecutive queue offsets of one queue. */
#define RUN_BYTES 136
#define RUN_FIRST_QOFF 0
#define RUN_FIRST_PHYS 8
#define RUN_END_PHYS 16 /* offset + size of the last message */
#define RUN_LAST_TS 24
#define RUN_TOPIC_POS 32
#define RUN_TOPIC_LEN 40
#define RUN_QUEUE_ID 44
#define RUN_COUNT 48
#define RUN_ENTRIES_AT 52 /* index of the run's first entry in the entries output */
#define RUN_FIRST_REC 56
#define RUN_LAST_REC 60
#define RUN_N_CODES 64 /* distinct tags codes listed; RUN_CODES + 1: more than listed (or one not known yet) */
#define RUN_CODES_AT 72
#define RUN_CODES 8

struct runs_args {
    struct span buf; /* the scanned bytes: records point into it */
    const uint8_t *recs;
    size_t n_recs;
    uint8_t *runs;
    size_t runs_n;
    uint8_t *entries; /* CQ_UNIT_BYTES per record */
    int32_t *scratch; /* n records + runs_table_slots(n) */
};

struct runs_state {
    size_t rec_pos, n_runs, n_fallback;
};

size_t runs_table_slots(size_t n);
int queue_runs(const struct runs_args *a, struct runs_state *st);

#define INDEX_HEADER_BYTES 40
#define INDEX_ENTRY_BYTES 20

struct index_args {
    uint8_t *file; /* a whole index file: header, slots, entries (bounds checked by the binding) */
    size_t slot_num, index_num;
    const uint8_t *keys; /* dispatch_scan's keys */
    size_t key_to;
};

struct index_state {
    int64_t begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count;
    size_t key_pos;
    int64_t current_rec; /* record whose keys are being put (its skip check is done), -1 for none */
    int64_t last_put_rec;
    int skipping;
};

int index_put(const struct index_args *a, struct index_state *st);

#endif
