/* SQL92 filter programs (store/sql_program.py): checked against their buffer and the bounds of
 * kernels.h once per call, and copied into aligned arrays the evaluator indexes without checks. */

#include "bytes.h"

#define SQL_HEADER_BYTES 20
#define SQL_NODE_BYTES 16
#define SQL_NAME_BYTES 8
#define SQL_CONST_BYTES 16

struct sql_copy {
    Py_buffer view;
    struct sql_program prog;
    struct sql_node *nodes;
    struct span *names;
    struct sql_value *consts;
    int32_t *list;
    uint8_t *depth;
};

static void release_sql(struct sql_copy *c) {
    PyMem_Free(c->nodes), PyMem_Free(c->names), PyMem_Free(c->consts), PyMem_Free(c->list), PyMem_Free(c->depth);
    c->nodes = NULL, c->names = NULL, c->consts = NULL, c->list = NULL, c->depth = NULL;
    if (c->view.obj) PyBuffer_Release(&c->view);
    c->view.obj = NULL;
}

static int sql_invalid(const char *why) {
    PyErr_Format(PyExc_ValueError, "SQL92 program: %s", why);
    return -1;
}

/* A pool range [at, at + n) as a span; -1 when it leaves the pool. */
static int pool_span(struct span pool, int32_t at, int32_t n, struct span *out) {
    if (at < 0 || n < 0 || (size_t)at > pool.n || (size_t)n > pool.n - (size_t)at) return -1;
    *out = (struct span){pool.p + at, (size_t)n};
    return 0;
}

static int take_constants(struct sql_copy *c, const uint8_t *at, struct span pool) {
    for (size_t k = 0; k < c->prog.n_consts; k++, at += SQL_CONST_BYTES) {
        int32_t type = get_h32(at), len = get_h32(at + 4);
        int64_t payload = get_h64(at + 8);
        struct sql_value v = {type, payload, 0.0, {NULL, 0}};
        if (type == SQL_STRING) {
            if (payload < INT32_MIN || payload > INT32_MAX || pool_span(pool, (int32_t)payload, len, &v.s) < 0 || !utf8_well_formed(v.s))
                return sql_invalid("a string constant is not UTF-8 inside the pool");
        } else if (type == SQL_DOUBLE) {
            memcpy(&v.d, at + 8, 8);
        } else if ((type == SQL_BOOL && payload != 0 && payload != 1) || (type == SQL_INT && (payload < INT32_MIN || payload > INT32_MAX)) ||
                   type < SQL_NULL || type > SQL_STRING) {
            return sql_invalid("a constant's type or value is out of range");
        }
        c->consts[k] = v;
    }
    return 0;
}

/* Whether list[at .. at + n) lies in the list and each entry is below `below`; with `strings`, a
 * string constant's index. */
static int list_ok(const struct sql_copy *c, int32_t at, int32_t n, int32_t below, int strings) {
    if (at < 0 || n < 1 || (size_t)at > c->prog.n_list || (size_t)n > c->prog.n_list - (size_t)at) return 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t e = c->list[at + k];
        if (e < 0 || e >= below || (strings && c->consts[e].type != SQL_STRING)) return 0;
    }
    return 1;
}

/* Node i's operands all precede it (so the last node is the root and nothing loops); its depth. */
static int check_node(struct sql_copy *c, int32_t i) {
    const struct sql_node *n = &c->nodes[i];
    int32_t nc = (int32_t)c->prog.n_consts, deepest = 0, ok;
    int op = n->op;
    if (op == SQL_CONST) ok = n->a >= 0 && n->a < nc;
    else if (op == SQL_PROP) ok = n->a >= 0 && (size_t)n->a < c->prog.n_names;
    else if (op == SQL_AND || op == SQL_OR) ok = list_ok(c, n->a, n->b, i, 0);
    else if (op == SQL_EQ || (op >= SQL_GT && op <= SQL_LE)) ok = n->a >= 0 && n->a < i && n->b >= 0 && n->b < i;
    else if (op == SQL_IN || op == SQL_NOT_IN) ok = n->a >= 0 && n->a < i && list_ok(c, n->b, n->c, nc, 1);
    else if (op >= SQL_CONTAINS && op < SQL_OP_END) ok = n->a >= 0 && n->a < i && n->b >= 0 && n->b < nc && c->consts[n->b].type == SQL_STRING;
    else ok = op >= SQL_NEG && op <= SQL_BOOL_CAST && n->a >= 0 && n->a < i;
    if (!ok) return sql_invalid("a node's operation or operands are out of range");
    if (op == SQL_AND || op == SQL_OR)
        for (int32_t k = 0; k < n->b; k++) deepest = c->depth[c->list[n->a + k]] > deepest ? c->depth[c->list[n->a + k]] : deepest;
    else if (op != SQL_CONST && op != SQL_PROP) {
        deepest = c->depth[n->a];
        if ((op == SQL_EQ || (op >= SQL_GT && op <= SQL_LE)) && c->depth[n->b] > deepest) deepest = c->depth[n->b];
    }
    if (deepest + 1 > SQL_MAX_DEPTH) return sql_invalid("the tree is deeper than SQL_MAX_DEPTH");
    c->depth[i] = (uint8_t)(deepest + 1);
    return 0;
}

static int take_program(PyObject *obj, struct sql_copy *c) {
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_SIMPLE) < 0) return -1;
    const uint8_t *p = c->view.buf;
    size_t len = (size_t)c->view.len;
    if (len < SQL_HEADER_BYTES) return sql_invalid("shorter than its header");
    int32_t nn = get_h32(p), np = get_h32(p + 4), nc = get_h32(p + 8), nl = get_h32(p + 12), pool_n = get_h32(p + 16);
    if (nn < 1 || nn > SQL_MAX_NODES || np < 0 || np > SQL_MAX_PROPS || nc < 0 || nl < 0 || pool_n < 0)
        return sql_invalid("a count is out of range");
    size_t need = SQL_HEADER_BYTES + (size_t)nn * SQL_NODE_BYTES + (size_t)np * SQL_NAME_BYTES + (size_t)nc * SQL_CONST_BYTES +
                  (size_t)nl * 4 + (size_t)pool_n;
    if (need != len) return sql_invalid("its counts do not add up to its length");
    c->prog = (struct sql_program){NULL, (size_t)nn, NULL, (size_t)np, NULL, (size_t)nc, NULL, (size_t)nl};
    c->nodes = PyMem_Calloc((size_t)nn, sizeof *c->nodes), c->names = PyMem_Calloc((size_t)np + 1, sizeof *c->names);
    c->consts = PyMem_Calloc((size_t)nc + 1, sizeof *c->consts), c->list = PyMem_Calloc((size_t)nl + 1, sizeof *c->list);
    c->depth = PyMem_Calloc((size_t)nn, 1);
    if (!c->nodes || !c->names || !c->consts || !c->list || !c->depth) return PyErr_NoMemory(), -1;
    const uint8_t *at = p + SQL_HEADER_BYTES;
    for (int32_t i = 0; i < nn; i++, at += SQL_NODE_BYTES) c->nodes[i] = (struct sql_node){get_h32(at), get_h32(at + 4), get_h32(at + 8), get_h32(at + 12)};
    const uint8_t *names = at, *consts = names + (size_t)np * SQL_NAME_BYTES, *list = consts + (size_t)nc * SQL_CONST_BYTES;
    struct span pool = {list + (size_t)nl * 4, (size_t)pool_n};
    for (int32_t k = 0; k < np; k++)
        if (pool_span(pool, get_h32(names + 8 * k), get_h32(names + 8 * k + 4), &c->names[k]) < 0) return sql_invalid("a name leaves the pool");
    for (int32_t k = 0; k < nl; k++) c->list[k] = get_h32(list + 4 * k);
    if (take_constants(c, consts, pool) < 0) return -1;
    for (int32_t i = 0; i < nn; i++)
        if (check_node(c, i) < 0) return -1;
    c->prog.nodes = c->nodes, c->prog.names = c->names, c->prog.consts = c->consts, c->prog.list = c->list;
    return 0;
}

static PyObject *py_sql_eval(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *program;
    Py_buffer props;
    if (!PyArg_ParseTuple(args, "Oy*", &program, &props)) return NULL;
    struct sql_copy c;
    memset(&c, 0, sizeof c);
    PyObject *result = NULL;
    if (take_program(program, &c) == 0) result = PyLong_FromLong(sql_eval(&c.prog, span_of(&props)));
    release_sql(&c);
    PyBuffer_Release(&props);
    return result;
}
