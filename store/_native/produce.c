/* JSON produce bodies packed into RocketMQ's batch encoding (docs/native.md "JSON produce").
 *
 * The reference is app.produce_parse.parse_json followed by store.put.put_batch.packed_fields: for
 * a body the kernel takes, it writes exactly the bytes they write, with each UNIQ_KEY value left as
 * a placeholder that fill_uniq_keys writes once the caller has drawn the keys. It takes only the
 * common shape: a message object, or {"messages": [...]} of them, whose members are body (a string),
 * encoding ("utf-8"), queue_id (an integer >= 0), tags (a string), keys (an array of strings) and
 * properties (an object of strings), each passing the reference's checks, every message naming the
 * same queue or none. Anything else (another member, a null, a fraction, a base64 body, a name given
 * twice, a lone surrogate escape, invalid JSON or UTF-8, a check the reference refuses, a limit
 * passed) answers PRODUCE_PYTHON: the caller parses the body with the reference, which answers
 * what it is (its refusal or its messages).
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "bytes.h"
#include "kernels.h"

#define ITEM_HEAD_BYTES 20 /* TOTALSIZE MAGIC BODYCRC FLAG BODYLEN */
#define MAX_TAG_CHARS 255  /* app.produce_parse.MAX_TAG_CHARS */
#define MAX_QUEUE_DIGITS 18
#define MAX_PROPERTIES 64 /* more user properties go the reference's way (the duplicate check is quadratic) */

static const char UNIQ_PREFIX[] = "UNIQ_KEY\x01";

/* The JSON text, read from i on. */
struct cursor {
    const uint8_t *p;
    size_t n, i;
};

/* Output: n bytes written of cap. */
struct out {
    uint8_t *p;
    size_t cap, n;
};

/* One message's members besides the body: where their values start in the text (0: not given). */
struct members {
    size_t tags, keys, properties;
    int64_t queue_id; /* -1: not given */
    unsigned seen;    /* MEMBER_* bits: a name given twice goes the reference's way */
    size_t body_len;
};

enum member {
    MEMBER_BODY = 1,
    MEMBER_ENCODING = 2,
    MEMBER_QUEUE_ID = 4,
    MEMBER_TAGS = 8,
    MEMBER_KEYS = 16,
    MEMBER_PROPERTIES = 32,
};

static void skip_ws(struct cursor *c) {
    while (c->i < c->n) {
        uint8_t b = c->p[c->i];
        if (b != ' ' && b != '\t' && b != '\n' && b != '\r') return;
        c->i++;
    }
}

/* Skip whitespace, then take `ch`; 0 when the next byte is another. */
static int take(struct cursor *c, uint8_t ch) {
    skip_ws(c);
    if (c->i >= c->n || c->p[c->i] != ch) return 0;
    c->i++;
    return 1;
}

static int room(const struct out *o, size_t k) { return k <= o->cap - o->n; }

static int emit(struct out *o, const void *bytes, size_t k) {
    if (!room(o, k)) return 0;
    memcpy(o->p + o->n, bytes, k);
    o->n += k;
    return 1;
}

static int hex_value(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

/* The four hex digits at c->i (after "\u"), consumed; -1 when they are not four hex digits. */
static int32_t hex4(struct cursor *c) {
    if (c->n - c->i < 4) return -1;
    int32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int d = hex_value(c->p[c->i + (size_t)k]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    c->i += 4;
    return v;
}

/* A \u escape's code point (c->i after the 'u'), a surrogate pair joined; -1 for a lone surrogate or bad digits. */
static int32_t unicode_escape(struct cursor *c) {
    int32_t hi = hex4(c);
    if (hi < 0 || (hi >= 0xDC00 && hi <= 0xDFFF)) return -1;
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    if (c->n - c->i < 2 || c->p[c->i] != '\\' || c->p[c->i + 1] != 'u') return -1;
    c->i += 2;
    int32_t lo = hex4(c);
    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
}

static int emit_code_point(struct out *o, int32_t cp) {
    uint8_t u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xC0 | (cp >> 6));
        u[1] = (uint8_t)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xE0 | (cp >> 12));
        u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (uint8_t)(0xF0 | (cp >> 18));
        u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (uint8_t)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return emit(o, u, k);
}

static int emit_escape(struct cursor *c, struct out *o) {
    if (c->i >= c->n) return 0;
    uint8_t e = c->p[c->i++];
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *at = e != 0 ? memchr(from, e, sizeof from - 1) : NULL;
    if (at != NULL) return emit(o, &to[at - from], 1);
    if (e != 'u') return 0;
    int32_t cp = unicode_escape(c);
    return cp >= 0 && emit_code_point(o, cp);
}

/* The length of the well-formed UTF-8 sequence starting with lead byte p[0] (>= 0x80) in p[0..n); 0 when it is not. */
static size_t utf8_sequence(const uint8_t *p, size_t n) {
    uint8_t b = p[0], lo = 0x80, hi = 0xBF;
    size_t k;
    if (b >= 0xC2 && b <= 0xDF) {
        k = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        k = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        k = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t j = 2; j < k; j++)
        if ((p[j] & 0xC0) != 0x80) return 0;
    return k;
}

/* Whether none of the 8 bytes of w is below 0x20, '"', '\\' or above 0x7F. */
static int plain8(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t control = (w - ones * 0x20) & ~w & highs; /* exact once no byte is above 0x7F */
    uint64_t quotes = (quote - ones) & ~quote & highs, slashes = (slash - ones) & ~slash & highs;
    return ((w & highs) | control | quotes | slashes) == 0;
}

/* How many bytes from p[0..n) on are plain (none below 0x20, '"', '\\' or above 0x7F), copied to dst[0..cap) as
 * they are checked: 16 bytes a step with SSE2, 8 without. */
static size_t copy_plain(const uint8_t *p, size_t n, uint8_t *dst, size_t cap) {
    size_t i = 0, most = n < cap ? n : cap;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (; most - i >= 16; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        /* Signed: a byte above 0x7F is negative, so one comparison finds it and the controls. */
        __m128i special = _mm_or_si128(_mm_cmplt_epi8(v, space), _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)));
        if (_mm_movemask_epi8(special) != 0) break;
        _mm_storeu_si128((__m128i *)(dst + i), v);
    }
#endif
    for (; most - i >= 8; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (!plain8(w)) break;
        memcpy(dst + i, &w, 8);
    }
    return i;
}

/* The string whose opening quote is at c->i, decoded into o; c->i past its closing quote. 0 for what is not a
 * JSON string of well-formed UTF-8 without lone surrogates, or when o has no room. */
static int decode_string(struct cursor *c, struct out *o) {
    if (c->i >= c->n || c->p[c->i] != '"') return 0;
    c->i++;
    for (;;) {
        size_t plain = copy_plain(c->p + c->i, c->n - c->i, o->p + o->n, o->cap - o->n);
        c->i += plain;
        o->n += plain;
        if (c->i >= c->n) return 0;
        uint8_t b = c->p[c->i];
        if (b == '"') {
            c->i++;
            return 1;
        }
        if (b < 0x20) return 0;
        if (b == '\\') {
            c->i++;
            if (!emit_escape(c, o)) return 0;
        } else if (b < 0x80) {
            if (!emit(o, &b, 1)) return 0;
            c->i++;
        } else {
            size_t k = utf8_sequence(c->p + c->i, c->n - c->i);
            if (k == 0 || !emit(o, c->p + c->i, k)) return 0;
            c->i += k;
        }
    }
}

/* Step over the string whose opening quote is at c->i (checked when decoded); 0 when it does not end. */
static int skip_string(struct cursor *c) {
    if (c->i >= c->n || c->p[c->i] != '"') return 0;
    for (c->i++; c->i < c->n; c->i++) {
        uint8_t b = c->p[c->i];
        if (b == '\\') {
            c->i++;
        } else if (b == '"') {
            c->i++;
            return 1;
        }
    }
    return 0;
}

/* A member name without escapes (an escaped one goes the reference's way): its span, c->i past the ':'. */
static int member_name(struct cursor *c, struct span *name) {
    skip_ws(c);
    size_t start = c->i + 1;
    if (!skip_string(c)) return 0;
    name->p = c->p + start;
    name->n = c->i - 1 - start;
    if (memchr(name->p, '\\', name->n) != NULL) return 0;
    return take(c, ':');
}

static int name_is(struct span name, const char *lit) {
    size_t k = strlen(lit);
    return name.n == k && memcmp(name.p, lit, k) == 0;
}

/* An integer >= 0 of at most MAX_QUEUE_DIGITS digits, without fraction or exponent; -1 otherwise. */
static int64_t queue_number(struct cursor *c) {
    skip_ws(c);
    size_t start = c->i;
    int64_t v = 0;
    while (c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9' && c->i - start < MAX_QUEUE_DIGITS) v = v * 10 + (c->p[c->i++] - '0');
    size_t digits = c->i - start;
    if (digits == 0 || (digits > 1 && c->p[start] == '0')) return -1;
    if (c->i < c->n) {
        uint8_t b = c->p[c->i];
        if ((b >= '0' && b <= '9') || b == '.' || b == 'e' || b == 'E') return -1;
    }
    return v;
}

/* Step over an array of strings (c->i at its '['); its elements are checked when decoded. */
static int skip_string_array(struct cursor *c) {
    if (!take(c, '[')) return 0;
    if (take(c, ']')) return 1;
    do {
        skip_ws(c);
        if (!skip_string(c)) return 0;
    } while (take(c, ','));
    return take(c, ']');
}

/* Step over an object of string values (c->i at its '{'); names and values are checked when decoded. */
static int skip_string_object(struct cursor *c) {
    if (!take(c, '{')) return 0;
    if (take(c, '}')) return 1;
    size_t members = 0;
    do {
        skip_ws(c);
        if (!skip_string(c) || !take(c, ':')) return 0;
        skip_ws(c);
        if (!skip_string(c) || ++members > MAX_PROPERTIES) return 0;
    } while (take(c, ','));
    return take(c, '}');
}

/* Where a member's value starts, after whitespace, recorded once (a name given twice: 0). */
static int record(struct cursor *c, struct members *m, unsigned bit, size_t *at) {
    if (m->seen & bit) return 0;
    m->seen |= bit;
    skip_ws(c);
    *at = c->i;
    return 1;
}

/* One member of a message object; the body is decoded where the message's item puts it (body_at). */
static int member(struct cursor *c, struct members *m, struct out *o, size_t body_at, size_t max_body) {
    struct span name;
    if (!member_name(c, &name)) return 0;
    size_t at;
    if (name_is(name, "body")) {
        if (m->seen & MEMBER_BODY) return 0;
        m->seen |= MEMBER_BODY;
        skip_ws(c);
        struct out body = {o->p + body_at, o->cap - body_at < max_body ? o->cap - body_at : max_body, 0};
        if (!decode_string(c, &body)) return 0;
        m->body_len = body.n;
        return 1;
    }
    if (name_is(name, "encoding")) {
        if (!record(c, m, MEMBER_ENCODING, &at)) return 0;
        static const char utf8[] = "\"utf-8\"";
        if (c->n - c->i < sizeof utf8 - 1 || memcmp(c->p + c->i, utf8, sizeof utf8 - 1) != 0) return 0;
        c->i += sizeof utf8 - 1;
        return 1;
    }
    if (name_is(name, "queue_id")) return record(c, m, MEMBER_QUEUE_ID, &at) && (m->queue_id = queue_number(c)) >= 0;
    if (name_is(name, "tags")) return record(c, m, MEMBER_TAGS, &m->tags) && skip_string(c);
    if (name_is(name, "keys")) return record(c, m, MEMBER_KEYS, &m->keys) && skip_string_array(c);
    if (name_is(name, "properties")) return record(c, m, MEMBER_PROPERTIES, &m->properties) && skip_string_object(c);
    return 0;
}

/* Whether the decoded bytes s hold one of the bytes in `bad`. */
static int holds_any(struct span s, const char *bad) {
    for (const char *b = bad; *b != '\0'; b++)
        if (memchr(s.p, *b, s.n) != NULL) return 1;
    return 0;
}

/* A name among `reserved` (names separated by NUL bytes). */
static int is_reserved_name(struct span name, struct span reserved) {
    size_t i = 0;
    while (i < reserved.n) {
        const uint8_t *end = memchr(reserved.p + i, 0, reserved.n - i);
        size_t k = end != NULL ? (size_t)(end - reserved.p) - i : reserved.n - i;
        if (k == name.n && memcmp(reserved.p + i, name.p, k) == 0) return 1;
        i += k + 1;
    }
    return 0;
}

/* The user properties as `name \x01 value \x02` pairs (app.produce_parse.check_properties' rules). */
static int emit_properties(struct cursor *c, struct out *o, struct span reserved) {
    struct span names[MAX_PROPERTIES];
    size_t count = 0;
    take(c, '{');
    if (take(c, '}')) return 1;
    do {
        skip_ws(c);
        size_t at = o->n;
        if (!decode_string(c, o)) return 0;
        struct span name = {o->p + at, o->n - at};
        if (name.n == 0 || holds_any(name, "\x01\x02") || is_reserved_name(name, reserved)) return 0;
        for (size_t k = 0; k < count; k++)
            if (names[k].n == name.n && memcmp(names[k].p, name.p, name.n) == 0) return 0;
        assert(count < MAX_PROPERTIES); /* skip_string_object counted them */
        names[count++] = name;
        take(c, ':');
        skip_ws(c);
        if (!emit(o, "\x01", 1)) return 0;
        at = o->n;
        if (!decode_string(c, o)) return 0;
        struct span value = {o->p + at, o->n - at};
        if (holds_any(value, "\x01\x02") || !emit(o, "\x02", 1)) return 0;
    } while (take(c, ','));
    return 1;
}

/* Whether a decoded tag passes app.produce_parse.check_tag: at most MAX_TAG_CHARS characters, not "*", without
 * "||" or a control character (C0, DEL, C1). */
static int tag_ok(struct span t) {
    size_t chars = 0;
    for (size_t i = 0; i < t.n; i++) {
        uint8_t b = t.p[i];
        if ((b & 0xC0) != 0x80) chars++;
        if (b < 0x20 || b == 0x7F || (b == 0xC2 && i + 1 < t.n && t.p[i + 1] >= 0x80 && t.p[i + 1] <= 0x9F)) return 0;
        if (b == '|' && i + 1 < t.n && t.p[i + 1] == '|') return 0;
    }
    return chars <= MAX_TAG_CHARS && !(t.n == 1 && t.p[0] == '*');
}

/* TAGS, unless the tag is empty (the reference leaves it out). */
static int emit_tags(struct cursor *c, struct out *o) {
    size_t start = o->n;
    if (!emit(o, "TAGS\x01", 5)) return 0;
    size_t at = o->n;
    if (!decode_string(c, o)) return 0;
    struct span tag = {o->p + at, o->n - at};
    if (tag.n == 0) {
        o->n = start;
        return 1;
    }
    return tag_ok(tag) && emit(o, "\x02", 1);
}

/* KEYS joined by spaces, unless the array is empty; each key non-empty, without a space, \x01 or \x02. */
static int emit_keys(struct cursor *c, struct out *o) {
    take(c, '[');
    if (take(c, ']')) return 1;
    if (!emit(o, "KEYS\x01", 5)) return 0;
    for (;;) {
        skip_ws(c);
        size_t at = o->n;
        if (!decode_string(c, o)) return 0;
        struct span key = {o->p + at, o->n - at};
        if (key.n == 0 || holds_any(key, " \x01\x02")) return 0;
        if (!take(c, ',')) break;
        if (!emit(o, " ", 1)) return 0;
    }
    return take(c, ']') && emit(o, "\x02", 1);
}

/* A recorded member's value decoded into o with `emitter` (the text is re-read from where it was recorded). */
static int emit_recorded(struct cursor *c, size_t at, struct out *o, int (*emitter)(struct cursor *, struct out *)) {
    if (at == 0) return 1;
    struct cursor again = {c->p, c->n, at};
    return emitter(&again, o);
}

/* The properties of a message item: user properties, TAGS, KEYS, then UNIQ_KEY's placeholder. */
static int emit_item_properties(struct cursor *c, const struct members *m, struct out *o, struct span reserved) {
    if (m->properties != 0) {
        struct cursor again = {c->p, c->n, m->properties};
        if (!emit_properties(&again, o, reserved)) return 0;
    }
    if (!emit_recorded(c, m->tags, o, emit_tags) || !emit_recorded(c, m->keys, o, emit_keys)) return 0;
    if (!emit(o, UNIQ_PREFIX, sizeof UNIQ_PREFIX - 1) || !room(o, UNIQ_KEY_CHARS + 1)) return 0;
    memset(o->p + o->n, '0', UNIQ_KEY_CHARS);
    o->n += UNIQ_KEY_CHARS;
    return emit(o, "\x02", 1);
}

/* One message object (c->i at its '{') as one batch item at o->n; its queue in *queue_id (-1: none given). */
static int message(struct cursor *c, struct out *o, const struct produce_limits *lim, int64_t *queue_id) {
    struct members m = {0, 0, 0, -1, 0, 0};
    size_t item = o->n;
    if (!take(c, '{') || !room(o, ITEM_HEAD_BYTES)) return 0;
    size_t body_at = item + ITEM_HEAD_BYTES;
    do {
        if (!member(c, &m, o, body_at, lim->max_body)) return 0;
    } while (take(c, ','));
    if (!take(c, '}') || !(m.seen & MEMBER_BODY)) return 0;
    o->n = body_at + m.body_len;
    if (!room(o, 2)) return 0;
    size_t props_at = o->n + 2;
    o->n = props_at;
    if (!emit_item_properties(c, &m, o, lim->reserved)) return 0;
    size_t props_len = o->n - props_at;
    if (props_len > MAX_PROPERTIES_BYTES) return 0;
    o->p[props_at - 2] = (uint8_t)(props_len >> 8);
    o->p[props_at - 1] = (uint8_t)props_len;
    wr_u32(o->p + item, (uint32_t)(BATCH_FIXED_BYTES + m.body_len + props_len));
    memset(o->p + item + 4, 0, 12); /* MAGICCODE, BODYCRC, FLAG */
    wr_u32(o->p + item + 16, (uint32_t)m.body_len);
    *queue_id = m.queue_id;
    return 1;
}

/* The messages of {"messages": [...]} (c->i past the name's ':'), every one naming the same queue or none. */
static int messages(struct cursor *c, struct out *o, const struct produce_limits *lim, struct produce_result *r) {
    if (!take(c, '[')) return 0;
    do {
        int64_t queue_id;
        skip_ws(c);
        if (r->count == lim->max_messages || !message(c, o, lim, &queue_id)) return 0;
        if (r->count > 0 && queue_id != r->queue_id) return 0;
        r->queue_id = queue_id;
        r->count++;
    } while (take(c, ','));
    return take(c, ']') && take(c, '}');
}

int json_produce(struct span json, const struct produce_limits *lim, uint8_t *out, size_t cap, struct produce_result *r) {
    struct cursor c = {json.p, json.n, 0};
    struct out o = {out, cap, 0};
    *r = (struct produce_result){0, 0, -1, 0};
    if (!take(&c, '{')) return PRODUCE_PYTHON;
    size_t first_member = c.i;
    struct span name;
    int ok;
    if (member_name(&c, &name) && name_is(name, "messages")) {
        r->is_batch = 1;
        ok = messages(&c, &o, lim, r);
    } else {
        c.i = first_member - 1; /* at the '{': the object is one message */
        ok = message(&c, &o, lim, &r->queue_id);
        r->count = 1;
    }
    skip_ws(&c);
    if (!ok || c.i != c.n || r->count == 0) return PRODUCE_PYTHON;
    r->len = o.n;
    return PRODUCE_PACKED;
}

/* Upper bound of json_produce's output for `json`: each message is an object, so there are at most as many as '{'
 * bytes and never more than max_messages (more go the reference's way), and its item is the text's bytes it was
 * decoded from (never more) plus PRODUCE_ITEM_EXTRA_BYTES. */
size_t json_produce_bound(struct span json, size_t max_messages) {
    size_t objects = 0;
    for (const uint8_t *p = json.p, *end = json.p + json.n; objects < max_messages && (p = memchr(p, '{', (size_t)(end - p))) != NULL; p++)
        objects++;
    return json.n + objects * PRODUCE_ITEM_EXTRA_BYTES;
}

int fill_uniq_keys(uint8_t *data, size_t len, struct span head, uint32_t first) {
    if (head.n != UNIQ_KEY_CHARS - 4) return -1;
    size_t pos = 0;
    for (uint32_t k = first; pos < len; k++) {
        if (len - pos < BATCH_FIXED_BYTES) return -1;
        size_t total = rd_u32(data + pos);
        if (total < BATCH_FIXED_BYTES + UNIQ_KEY_CHARS + 1 || total > len - pos) return -1;
        uint8_t *key = data + pos + total - 1 - UNIQ_KEY_CHARS;
        memcpy(key, head.p, head.n);
        put_hex4(key + head.n, k & 0xFFFF);
        pos += total;
    }
    return 0;
}

