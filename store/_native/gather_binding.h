/* gather()'s binding: segments and tags are Python sequences, turned into C arrays once. */

#include "bytes.h"

struct gather_inputs {
    Py_buffer entries, out, meta, codes, ranges;
    struct sql_copy sql;
    Py_buffer *seg_views;
    struct segment *segs;
    struct span *tags;
    Py_ssize_t n_segs, n_tags;
};

static int take_segments(PyObject *seq_obj, struct gather_inputs *in) {
    PyObject *seq = PySequence_Fast(seq_obj, "segments must be a sequence of (base offset, buffer)");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    in->seg_views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    in->segs = PyMem_Calloc((size_t)n + 1, sizeof(struct segment));
    int rc = (in->seg_views && in->segs) ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        long long base;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "Ly*", &base, &in->seg_views[i])) rc = -1;
        else {
            in->n_segs = i + 1;
            in->segs[i] = (struct segment){base, span_of(&in->seg_views[i])};
        }
    }
    if (in->seg_views == NULL || in->segs == NULL) PyErr_NoMemory();
    Py_DECREF(seq);
    return rc;
}

/* Tags borrow the bytes objects of the tuple, which the call's args keep alive. */
static int take_tags(PyObject *obj, struct gather_inputs *in) {
    if (obj == Py_None) return 0;
    if (!PyTuple_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "tags must be None or a tuple of bytes");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(obj);
    in->tags = PyMem_Calloc((size_t)n + 1, sizeof(struct span));
    if (in->tags == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(obj, i);
        if (!PyBytes_Check(t)) {
            PyErr_SetString(PyExc_TypeError, "tags must be None or a tuple of bytes");
            return -1;
        }
        in->tags[i] = (struct span){(const uint8_t *)PyBytes_AS_STRING(t), (size_t)PyBytes_GET_SIZE(t)};
    }
    in->n_tags = n;
    return 0;
}

static void release_gather(struct gather_inputs *in) {
    for (Py_ssize_t i = 0; i < in->n_segs; i++) PyBuffer_Release(&in->seg_views[i]);
    PyMem_Free(in->seg_views), PyMem_Free(in->segs), PyMem_Free(in->tags);
    release_optional(&in->codes);
    release_optional(&in->ranges);
    release_optional(&in->meta);
    release_sql(&in->sql);
    if (in->out.obj) PyBuffer_Release(&in->out);
    if (in->entries.obj) PyBuffer_Release(&in->entries);
}

/* Whether an output (out, meta) overlaps an input or the other output. */
static int written_over(const struct gather_inputs *in, const Py_buffer *input) {
    return input->obj && (overlaps(input, &in->out) || (in->meta.obj && overlaps(input, &in->meta)));
}

static int gather_overlaps(const struct gather_inputs *in) {
    for (Py_ssize_t i = 0; i < in->n_segs; i++)
        if (written_over(in, &in->seg_views[i])) return 1;
    return written_over(in, &in->entries) || written_over(in, &in->codes) || written_over(in, &in->ranges) || written_over(in, &in->sql.view) ||
           (in->meta.obj && overlaps(&in->out, &in->meta));
}

static int take_meta(PyObject *obj, Py_buffer *view) {
    view->obj = NULL;
    view->buf = NULL;
    view->len = 0;
    return obj == Py_None ? 0 : PyObject_GetBuffer(obj, view, PyBUF_WRITABLE);
}

/* Damaged ranges: non-empty int64 [start, end) pairs in ascending (start, end) order, which the
 * binary search relies on. */
static int take_ranges(PyObject *obj, Py_buffer *view) {
    if (optional_int64s(obj, view, "damaged ranges") < 0) return -1;
    const uint8_t *p = view->buf;
    size_t n = (size_t)view->len / 16;
    int ok = view->len % 16 == 0;
    for (size_t i = 0; ok && i < n; i++) {
        int64_t start = get_h64(p + 16 * i), end = get_h64(p + 16 * i + 8);
        ok = start < end;
        if (ok && i > 0) {
            int64_t prev_start = get_h64(p + 16 * i - 16), prev_end = get_h64(p + 16 * i - 8);
            ok = prev_start < start || (prev_start == start && prev_end <= end);
        }
    }
    if (!ok) PyErr_SetString(PyExc_ValueError, "damaged ranges must be non-empty int64 (start, end) pairs in ascending order");
    return ok ? 0 : -1;
}

/* The state a resumed call starts from (None: the start); checked against the buffers. */
static int take_state(PyObject *obj, const struct gather_inputs *in, Py_ssize_t n, struct gather_state *st) {
    Py_ssize_t examined = 0, count = 0, bytes = 0, damaged = 0;
    int removed = 0;
    long long skip_below = -1, filter_passed = -1;
    if (obj != Py_None && !PyArg_ParseTuple(obj, "nnnpnL|L", &examined, &count, &bytes, &removed, &damaged, &skip_below, &filter_passed))
        return -1;
    if (examined < 0 || examined > n || count < 0 || bytes < 0 || bytes > in->out.len || damaged < 0 ||
        (in->meta.obj && count > in->meta.len / META_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "the start state does not fit the entries, out or meta");
        return -1;
    }
    *st = (struct gather_state){(size_t)examined, (size_t)count, (size_t)bytes, (size_t)damaged, removed, skip_below, filter_passed};
    return 0;
}

static int gather_prepare(PyObject *args, struct gather_inputs *in, struct gather_args *a, struct gather_state *st) {
    PyObject *segs, *meta, *codes, *tags, *ranges = Py_None, *state = Py_None, *sql = Py_None;
    Py_ssize_t n;
    long long lim[9];
    if (!PyArg_ParseTuple(args, "y*nOw*O(LLLLLLLLL)OO|OOO", &in->entries, &n, &segs, &in->out, &meta, &lim[0], &lim[1], &lim[2], &lim[3],
                          &lim[4], &lim[5], &lim[6], &lim[7], &lim[8], &codes, &tags, &ranges, &state, &sql))
        return -1;
    if (take_meta(meta, &in->meta) < 0 || optional_int64s(codes, &in->codes, "codes") < 0 || take_ranges(ranges, &in->ranges) < 0 ||
        take_segments(segs, in) < 0 || take_tags(tags, in) < 0 || (sql != Py_None && take_program(sql, &in->sql) < 0))
        return -1;
    if (n < 0 || n > in->entries.len / CQ_UNIT_BYTES) {
        PyErr_Format(PyExc_ValueError, "%zd entries do not fit a buffer of %zd bytes", n, in->entries.len);
        return -1;
    }
    if (take_state(state, in, n, st) < 0) return -1;
    if (gather_overlaps(in)) {
        PyErr_SetString(PyExc_ValueError, "out and meta must not overlap the inputs or each other");
        return -1;
    }
    *a = (struct gather_args){span_of(&in->entries), (size_t)n, in->segs, (size_t)in->n_segs, in->out.buf, (size_t)in->out.len,
                              in->meta.obj ? in->meta.buf : NULL, (size_t)in->meta.len, in->codes.obj ? in->codes.buf : NULL,
                              (size_t)in->codes.len / 8, tags == Py_None ? NULL : in->tags, (size_t)in->n_tags,
                              in->ranges.obj ? in->ranges.buf : NULL, (size_t)in->ranges.len / 16,
                              sql == Py_None ? NULL : &in->sql.prog, lim[0], lim[1], lim[2], lim[3], lim[4], lim[5], lim[6], lim[7], lim[8]};
    return 0;
}

static PyObject *py_gather(PyObject *Py_UNUSED(self), PyObject *args) {
    struct gather_inputs in;
    memset(&in, 0, sizeof in);
    struct gather_args a;
    PyObject *result = NULL;
    struct gather_state st;
    if (gather_prepare(args, &in, &a, &st) == 0) {
        /* The GIL is kept for a small read (kernels.c release_gil_for): the entries examined and the output
         * bound the work. A receive or pull of a few messages on the event loop then never hands the GIL to
         * another thread and waits for it back. */
        PyThreadState *ts = release_gil_for((Py_ssize_t)(a.n_entries * CQ_UNIT_BYTES + a.out_n));
        int stop = gather(&a, &st);
        restore_gil(ts);
        result = Py_BuildValue("innnin", stop, (Py_ssize_t)st.examined, (Py_ssize_t)st.count, (Py_ssize_t)st.bytes, st.removed_seen,
                               (Py_ssize_t)st.damaged);
    }
    release_gather(&in);
    return result;
}
