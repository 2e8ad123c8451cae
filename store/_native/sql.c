/* SQL92 filter evaluation over a stored message's properties, as RocketMQ's expression classes
 * evaluate (store/sql_eval.py is the reference; docs/native.md "sql_eval").
 *
 * Values are Java's: null, Boolean, Integer, Long, Double, String (UTF-8 bytes here). Evaluation
 * follows Java's order; what throws in Java aborts the whole evaluation (SQL_ABORTED). What this
 * file does not decide exactly is left to the caller (SQL_DEFER): a property value that is not
 * well-formed UTF-8, digits outside ASCII met by Integer/Long.valueOf, a hexadecimal float and a
 * decimal longer than SQL_NUMBER_CHARS met by Double.valueOf. Nothing is allocated: property values
 * are resolved into a table on the stack, and the recursion is bounded by the program's depth
 * (at most SQL_MAX_DEPTH, checked by the binding).
 */
#define _GNU_SOURCE
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

enum { EV_OK = 0, EV_ABORT = 1, EV_DEFER = 2 };

static locale_t c_locale; /* strtod_l's: a decimal point whatever the process's locale */

int sql_init(void) {
    if (c_locale != (locale_t)0) return 0; /* made once per process, whatever number of module instances */
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    return c_locale == (locale_t)0 ? -1 : 0;
}

struct sql_ctx {
    const struct sql_program *p;
    struct span vals[SQL_MAX_PROPS];
    uint8_t found[SQL_MAX_PROPS];
};

static struct sql_value null_value(void) { return (struct sql_value){SQL_NULL, 0, 0.0, {NULL, 0}}; }
static struct sql_value bool_value(int b) { return (struct sql_value){SQL_BOOL, b != 0, 0.0, {NULL, 0}}; }

/* Each named property's value in `props`, the last occurrence winning (store.message.decode_properties);
 * EV_DEFER when a value found is not well-formed UTF-8 (Python decodes it with replacements). */
static int resolve(struct sql_ctx *c, struct span props) {
    const struct sql_program *p = c->p;
    assert(p->n_names <= SQL_MAX_PROPS && "the binding bounds the names by the stack table");
    memset(c->found, 0, p->n_names);
    size_t i = 0;
    while (i < props.n) {
        const uint8_t *item = props.p + i, *stop = memchr(item, 0x02, props.n - i);
        size_t len = stop ? (size_t)(stop - item) : props.n - i;
        const uint8_t *sep = memchr(item, 0x01, len);
        if (sep != NULL) {
            size_t name_n = (size_t)(sep - item);
            for (size_t k = 0; k < p->n_names; k++)
                if (p->names[k].n == name_n && memcmp(p->names[k].p, item, name_n) == 0) {
                    c->vals[k] = (struct span){sep + 1, len - name_n - 1};
                    c->found[k] = 1;
                }
        }
        i += len + 1;
    }
    for (size_t k = 0; k < p->n_names; k++)
        if (c->found[k] && !utf8_well_formed(c->vals[k])) return EV_DEFER;
    return EV_OK;
}

/* Integer.parseInt / Long.parseLong in radix 10 within [min, max]. */
static int parse_java_integer(struct span s, int64_t min, int64_t max, int64_t *out) {
    if (s.n == 0) return EV_ABORT;
    int negative = s.p[0] == '-';
    size_t i = (s.p[0] == '-' || s.p[0] == '+') ? 1 : 0;
    if (i == s.n) return EV_ABORT;
    uint64_t limit = negative ? (uint64_t)(-(min + 1)) + 1 : (uint64_t)max, v = 0;
    for (; i < s.n; i++) {
        uint8_t b = s.p[i];
        if (b >= 0x80) return EV_DEFER; /* Character.digit takes every Unicode decimal digit */
        if (b < '0' || b > '9') return EV_ABORT;
        uint64_t d = (uint64_t)(b - '0');
        if (v > (limit - d) / 10) return EV_ABORT;
        v = v * 10 + d;
    }
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return EV_OK;
}

static size_t digits_at(struct span s, size_t i) {
    size_t j = i;
    while (j < s.n && s.p[j] >= '0' && s.p[j] <= '9') j++;
    return j - i;
}

/* The end of Double.valueOf's decimal form in s from i (digits with at most one point, at least one
 * digit, an exponent), or 0 when it is not one. */
static size_t decimal_end(struct span s, size_t i) {
    size_t whole = digits_at(s, i), j = i + whole, fraction = 0;
    if (j < s.n && s.p[j] == '.') {
        fraction = digits_at(s, j + 1);
        j += 1 + fraction;
    }
    if (whole + fraction == 0) return 0;
    if (j < s.n && (s.p[j] == 'e' || s.p[j] == 'E')) {
        j += 1;
        if (j < s.n && (s.p[j] == '+' || s.p[j] == '-')) j += 1;
        size_t exp = digits_at(s, j);
        if (exp == 0) return 0;
        j += exp;
    }
    return j;
}

/* Double.valueOf: String.trim, a sign, NaN, Infinity or the decimal form with one optional type suffix. */
static int parse_java_double(struct span s, double *out) {
    while (s.n > 0 && s.p[0] <= 0x20) s.p++, s.n--;
    while (s.n > 0 && s.p[s.n - 1] <= 0x20) s.n--;
    if (s.n == 0) return EV_ABORT;
    size_t i = (s.p[0] == '-' || s.p[0] == '+') ? 1 : 0;
    double sign = s.p[0] == '-' ? -1.0 : 1.0;
    struct span rest = {s.p + i, s.n - i};
    if (rest.n == 3 && memcmp(rest.p, "NaN", 3) == 0) return *out = __builtin_nan(""), EV_OK;
    if (rest.n == 8 && memcmp(rest.p, "Infinity", 8) == 0) return *out = sign * __builtin_inf(), EV_OK;
    if (rest.n >= 2 && rest.p[0] == '0' && (rest.p[1] == 'x' || rest.p[1] == 'X')) return EV_DEFER;
    size_t end = decimal_end(s, i);
    if (end == 0) return EV_ABORT;
    if (end < s.n) {
        uint8_t suffix = s.p[end];
        if (end + 1 != s.n || (suffix != 'f' && suffix != 'F' && suffix != 'd' && suffix != 'D')) return EV_ABORT;
    }
    char text[SQL_NUMBER_CHARS + 1];
    if (end > SQL_NUMBER_CHARS) return EV_DEFER;
    memcpy(text, s.p, end);
    text[end] = '\0';
    *out = strtod_l(text, NULL, c_locale); /* correctly rounded; out of range gives the infinity or zero Java gives */
    return EV_OK;
}

/* Boolean.valueOf(String). */
static int java_boolean(struct span s) {
    static const char t[4] = {'t', 'r', 'u', 'e'};
    if (s.n != 4) return 0;
    for (int k = 0; k < 4; k++)
        if ((s.p[k] | 0x20) != t[k]) return 0;
    return 1;
}

/* Double.doubleToLongBits, every NaN the canonical one. */
static int64_t double_bits(double x) {
    if (x != x) return INT64_C(0x7ff8000000000000);
    int64_t v;
    memcpy(&v, &x, 8);
    return v;
}

/* Double.compare. */
static int double_compare(double a, double b) {
    if (a < b) return -1;
    if (a > b) return 1;
    int64_t x = double_bits(a), y = double_bits(b);
    return (x > y) - (x < y);
}

static int span_equal(struct span a, struct span b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }

/* Object.equals of two non-null values. */
static int java_equals(const struct sql_value *l, const struct sql_value *r) {
    if (l->type != r->type) return 0;
    if (l->type == SQL_DOUBLE) return double_bits(l->d) == double_bits(r->d);
    if (l->type == SQL_STRING) return span_equal(l->s, r->s);
    return l->i == r->i;
}

/* A String converted to the class `to` (Integer, Long or Double) as __compare converts it. */
static int from_string(struct span s, int32_t to, struct sql_value *v) {
    v->type = to;
    if (to == SQL_INT) return parse_java_integer(s, INT32_MIN, INT32_MAX, &v->i);
    if (to == SQL_LONG) return parse_java_integer(s, INT64_MIN, INT64_MAX, &v->i);
    return parse_java_double(s, &v->d);
}

/* Both values in one class as ComparisonExpression.__compare brings them; *answer set (and 1
 * returned) when it answers without comparing. */
static int convert(struct sql_value *l, struct sql_value *r, int *answer, int *decided) {
    *decided = 0;
    if (l->type == r->type) return EV_OK;
    if (l->type == SQL_BOOL) {
        if (r->type == SQL_STRING) return EV_ABORT; /* a ClassCastException in Java */
        return *answer = -1, *decided = 1, EV_OK;
    }
    if (l->type == SQL_STRING) {
        if (r->type == SQL_BOOL) return *l = bool_value(java_boolean(l->s)), EV_OK;
        return from_string(l->s, r->type, l);
    }
    if (r->type == SQL_STRING) return from_string(r->s, l->type, r);
    if (r->type == SQL_BOOL) return *answer = -1, *decided = 1, EV_OK;
    if (l->type == SQL_DOUBLE || r->type == SQL_DOUBLE) {
        if (l->type != SQL_DOUBLE) l->d = (double)l->i, l->type = SQL_DOUBLE;
        if (r->type != SQL_DOUBLE) r->d = (double)r->i, r->type = SQL_DOUBLE;
        return EV_OK;
    }
    l->type = r->type = SQL_LONG; /* Integer against Long */
    return EV_OK;
}

/* ComparisonExpression.__compare of two non-null values into *order (-1, 0, 1). Two Strings only
 * meet here through =, where only equality counts: their order is not computed. */
static int java_compare(struct sql_value l, struct sql_value r, int *order) {
    int decided;
    int st = convert(&l, &r, order, &decided);
    if (st != EV_OK || decided) return st;
    if (l.type == SQL_DOUBLE) *order = double_compare(l.d, r.d);
    else if (l.type == SQL_STRING) *order = !span_equal(l.s, r.s);
    else *order = (l.i > r.i) - (l.i < r.i);
    return EV_OK;
}

static int eval(const struct sql_ctx *c, int32_t at, struct sql_value *out);

/* The `(Boolean)` cast of AND, OR and NOT operands. */
static int eval_boolean(const struct sql_ctx *c, int32_t at, struct sql_value *out) {
    int st = eval(c, at, out);
    return st != EV_OK ? st : (out->type == SQL_NULL || out->type == SQL_BOOL) ? EV_OK : EV_ABORT;
}

/* LogicExpression.createAND / createOR over a flattened chain. */
static int eval_logic(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    int deciding = n->op == SQL_OR, saw_null = 0;
    for (int32_t k = 0; k < n->b; k++) {
        struct sql_value v;
        int st = eval_boolean(c, c->p->list[n->a + k], &v);
        if (st != EV_OK) return st;
        if (v.type == SQL_BOOL && v.i == deciding) return *out = bool_value(deciding), EV_OK;
        saw_null |= v.type == SQL_NULL;
    }
    *out = saw_null ? null_value() : bool_value(!deciding);
    return EV_OK;
}

/* ComparisonExpression.doCreateEqual. */
static int eval_equal(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    struct sql_value l, r;
    int st = eval(c, n->a, &l);
    if (st == EV_OK) st = eval(c, n->b, &r);
    if (st != EV_OK) return st;
    if ((l.type == SQL_NULL) != (r.type == SQL_NULL)) return *out = l.type == SQL_NULL ? null_value() : bool_value(0), EV_OK;
    if (l.type == SQL_NULL || java_equals(&l, &r)) return *out = bool_value(1), EV_OK;
    int order;
    st = java_compare(l, r, &order);
    if (st == EV_OK) *out = bool_value(order == 0);
    return st;
}

/* ComparisonExpression.evaluate for >, >=, <, <=. */
static int eval_relation(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    struct sql_value l, r;
    int st = eval(c, n->a, &l);
    if (st != EV_OK || l.type == SQL_NULL) return *out = null_value(), st;
    st = eval(c, n->b, &r);
    if (st != EV_OK || r.type == SQL_NULL) return *out = null_value(), st;
    int order;
    if (l.type == SQL_STRING && r.type == SQL_STRING) {
        double x, y;
        st = parse_java_double(l.s, &x);
        if (st == EV_OK) st = parse_java_double(r.s, &y);
        if (st == EV_OK) order = double_compare(x, y);
    } else {
        st = java_compare(l, r, &order);
    }
    if (st != EV_OK) return st;
    int op = n->op;
    *out = bool_value(op == SQL_GT ? order > 0 : op == SQL_GE ? order >= 0 : op == SQL_LT ? order < 0 : order <= 0);
    return EV_OK;
}

/* UnaryExpression.createInExpression. */
static int eval_in(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    struct sql_value v;
    int st = eval(c, n->a, &v);
    if (st != EV_OK || v.type != SQL_STRING) return *out = null_value(), st;
    int found = 0;
    for (int32_t k = 0; k < n->c && !found; k++) found = span_equal(v.s, c->p->consts[c->p->list[n->b + k]].s);
    *out = bool_value(found != (n->op == SQL_NOT_IN));
    return EV_OK;
}

/* ComparisonExpression's CONTAINS, STARTSWITH, ENDSWITH and NOT forms: FALSE for an empty search,
 * a null and anything but a String. */
static int eval_text(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    struct span search = c->p->consts[n->b].s;
    *out = bool_value(0);
    if (search.n == 0) return EV_OK;
    struct sql_value v;
    int st = eval(c, n->a, &v);
    if (st != EV_OK || v.type != SQL_STRING) return st;
    int op = n->op, found;
    if (op == SQL_CONTAINS || op == SQL_NOT_CONTAINS) found = memmem(v.s.p, v.s.n, search.p, search.n) != NULL;
    else if (v.s.n < search.n) found = 0;
    else if (op == SQL_STARTS_WITH || op == SQL_NOT_STARTS_WITH) found = memcmp(v.s.p, search.p, search.n) == 0;
    else found = memcmp(v.s.p + v.s.n - search.n, search.p, search.n) == 0;
    *out = bool_value(found != (op == SQL_NOT_CONTAINS || op == SQL_NOT_STARTS_WITH || op == SQL_NOT_ENDS_WITH));
    return EV_OK;
}

/* UnaryExpression.createNegate: a number negated in its class (wrapping as Java's), else null. */
static int eval_negate(const struct sql_ctx *c, const struct sql_node *n, struct sql_value *out) {
    int st = eval(c, n->a, out);
    if (st != EV_OK) return st;
    if (out->type == SQL_DOUBLE) out->d = -out->d;
    else if (out->type == SQL_LONG) out->i = (int64_t)(0 - (uint64_t)out->i);
    else if (out->type == SQL_INT) out->i = (int32_t)(0 - (uint32_t)out->i);
    else *out = null_value();
    return EV_OK;
}

static int eval(const struct sql_ctx *c, int32_t at, struct sql_value *out) {
    assert(at >= 0 && (size_t)at < c->p->n_nodes && "the binding checked every operand index");
    const struct sql_node *n = &c->p->nodes[at];
    struct sql_value v;
    int st;
    switch (n->op) {
    case SQL_CONST: return *out = c->p->consts[n->a], EV_OK;
    case SQL_PROP:
        *out = c->found[n->a] ? (struct sql_value){SQL_STRING, 0, 0.0, c->vals[n->a]} : null_value();
        return EV_OK;
    case SQL_NEG: return eval_negate(c, n, out);
    case SQL_NOT:
        st = eval_boolean(c, n->a, &v);
        if (st == EV_OK) *out = v.type == SQL_BOOL ? bool_value(!v.i) : null_value();
        return st;
    case SQL_BOOL_CAST:
        st = eval(c, n->a, &v);
        if (st == EV_OK) *out = v.type == SQL_NULL ? null_value() : v.type == SQL_BOOL ? v : bool_value(0);
        return st;
    case SQL_AND:
    case SQL_OR: return eval_logic(c, n, out);
    case SQL_EQ: return eval_equal(c, n, out);
    case SQL_IN:
    case SQL_NOT_IN: return eval_in(c, n, out);
    case SQL_GT:
    case SQL_GE:
    case SQL_LT:
    case SQL_LE: return eval_relation(c, n, out);
    default: return eval_text(c, n, out);
    }
}

int sql_eval(const struct sql_program *p, struct span props) {
    struct sql_ctx c;
    assert(p->n_nodes > 0 && p->n_nodes <= SQL_MAX_NODES && "the binding checked the program");
    c.p = p;
    int st = resolve(&c, props);
    struct sql_value v = null_value();
    if (st == EV_OK) st = eval(&c, (int32_t)p->n_nodes - 1, &v);
    if (st == EV_DEFER) return SQL_DEFER;
    if (st == EV_ABORT) return SQL_ABORTED;
    if (v.type == SQL_NULL) return SQL_UNKNOWN;
    return v.type == SQL_BOOL && v.i ? SQL_TRUE : SQL_FALSE;
}
