/* store._kernels: the Python binding of the data-path kernels (docs/native.md).
 *
 * Each function acquires its buffers, checks every position and length against them,
 * releases the GIL for the loop and returns a tuple whose first item is a stop code.
 * Buffers stay exported for the whole call, so none can be resized or closed under it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>

#include "kernels.h"
#include "group_flush_binding.h"
#include "mapping_binding.h"

static PyObject *BatchError;

/* Whether the kernels' assert() calls are compiled in (store._kernels.ASSERTIONS). */
#ifdef NDEBUG
#define ASSERTIONS_ON 0
#else
#define ASSERTIONS_ON 1
#endif

static int overlaps(const Py_buffer *a, const Py_buffer *b) {
    const char *pa = a->buf, *pb = b->buf;
    return a->len > 0 && b->len > 0 && pa < pb + b->len && pb < pa + a->len;
}

static int check_range(Py_ssize_t pos, Py_ssize_t limit, Py_ssize_t len, const char *what) {
    if (pos < 0 || limit < pos || limit > len) {
        PyErr_Format(PyExc_ValueError, "%s: position %zd and limit %zd do not lie in a buffer of %zd bytes", what, pos, limit, len);
        return -1;
    }
    return 0;
}

static struct span span_of(const Py_buffer *b) { return (struct span){(const uint8_t *)b->buf, (size_t)b->len}; }

static PyObject *py_java_hash(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer text;
    int32_t prefix = 0;
    if (!PyArg_ParseTuple(args, "y*|i", &text, &prefix)) return NULL;
    int32_t h = java_hash_utf8(prefix, span_of(&text));
    PyBuffer_Release(&text);
    return PyLong_FromLong(h);
}

/* BatchError(message, code, position) with `index`: the item's number in the call. */
static PyObject *batch_error(int code, size_t pos, size_t index) {
    PyObject *exc = PyObject_CallFunction(BatchError, "sin", "malformed batch", code, (Py_ssize_t)pos);
    if (exc != NULL) {
        PyObject *n = PyLong_FromSsize_t((Py_ssize_t)index);
        if (n != NULL && PyObject_SetAttrString(exc, "index", n) == 0) PyErr_SetObject(BatchError, exc);
        Py_XDECREF(n);
        Py_DECREF(exc);
    }
    return NULL;
}

static unsigned long long gil_releases; /* times a binding released the GIL (tests check the threshold) */

/* The GIL is released only for inputs of at least GIL_RELEASE_MIN_BYTES (kernels.h). */
static PyThreadState *release_gil_for(Py_ssize_t bytes) {
    if (bytes < GIL_RELEASE_MIN_BYTES) return NULL;
    gil_releases++;
    return PyEval_SaveThread();
}

static void restore_gil(PyThreadState *ts) {
    if (ts != NULL) PyEval_RestoreThread(ts);
}

/* A bytes object for the BODYCRCs of a batch's items (at most one per BATCH_FIXED_BYTES). */
static PyObject *new_crc_list(Py_ssize_t batch_len, Py_ssize_t max_count, struct crc_list *l) {
    Py_ssize_t items = batch_len / BATCH_FIXED_BYTES;
    if (max_count >= 0 && max_count < items) items = max_count;
    PyObject *crcs = PyBytes_FromStringAndSize(NULL, 4 * items);
    if (crcs != NULL) *l = (struct crc_list){(uint8_t *)PyBytes_AS_STRING(crcs), (size_t)(4 * items)};
    return crcs;
}

static PyObject *py_check_batch(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer batch;
    long long max_body, max_props = MAX_PROPERTIES_BYTES;
    Py_ssize_t max_count = -1;
    int check_props = 0, with_crcs = 0;
    if (!PyArg_ParseTuple(args, "y*L|nLpp", &batch, &max_body, &max_count, &max_props, &check_props, &with_crcs)) return NULL;
    struct batch_limits lim = {max_body, max_props, max_count < 0 ? SIZE_MAX : (size_t)max_count, check_props};
    struct crc_list l = {NULL, 0};
    PyObject *crcs = with_crcs ? new_crc_list(batch.len, max_count, &l) : NULL;
    if (with_crcs && crcs == NULL) {
        PyBuffer_Release(&batch);
        return NULL;
    }
    size_t count, pos, stored;
    int has_dedup_id;
    PyThreadState *ts = release_gil_for(batch.len);
    int err = batch_check(span_of(&batch), &lim, &count, &pos, &stored, l, &has_dedup_id);
    restore_gil(ts);
    PyBuffer_Release(&batch);
    if (err != BATCH_OK) {
        Py_XDECREF(crcs);
        return batch_error(err, pos, count);
    }
    if (!with_crcs) return Py_BuildValue("nn", (Py_ssize_t)count, (Py_ssize_t)stored);
    if (_PyBytes_Resize(&crcs, (Py_ssize_t)(4 * count)) < 0) return NULL;
    return Py_BuildValue("nnNO", (Py_ssize_t)count, (Py_ssize_t)stored, crcs, has_dedup_id ? Py_True : Py_False);
}

/* Bytes of at most `max_count` items from `pos` as their TOTALSIZE fields say, counted until `enough`:
 * what encode_batch will copy, for the GIL decision only (the kernel checks every item itself). */
static Py_ssize_t items_span(struct span b, size_t pos, size_t max_count, size_t enough) {
    size_t start = pos;
    for (size_t i = 0; i < max_count && pos - start < enough && b.n - pos >= 4; i++) {
        int32_t total = (int32_t)(((uint32_t)b.p[pos] << 24) | ((uint32_t)b.p[pos + 1] << 16) | ((uint32_t)b.p[pos + 2] << 8) | b.p[pos + 3]);
        if (total <= 0 || (size_t)total > b.n - pos) break;
        pos += (size_t)total;
    }
    return (Py_ssize_t)(pos - start);
}

static int check_encode_args(Py_buffer *dest, Py_ssize_t dest_pos, Py_ssize_t dest_limit, Py_buffer *batch, Py_ssize_t batch_pos,
                             Py_buffer *out, Py_buffer *topic, Py_buffer *hosts) {
    if (check_range(dest_pos, dest_limit, dest->len, "dest") < 0 || check_range(batch_pos, batch->len, batch->len, "batch") < 0)
        return -1;
    if (topic->len > MAX_TOPIC_BYTES) {
        PyErr_SetString(PyExc_ValueError, "topic is longer than 255 bytes");
        return -1;
    }
    if ((hosts[0].len != 8 && hosts[0].len != 20) || (hosts[1].len != 8 && hosts[1].len != 20)) {
        PyErr_SetString(PyExc_ValueError, "a host is 8 bytes (IPv4 and port) or 20 (IPv6 and port)");
        return -1;
    }
    if (overlaps(dest, batch) || overlaps(dest, out) || overlaps(out, batch) || overlaps(dest, topic)) {
        PyErr_SetString(PyExc_ValueError, "dest, batch, out and topic must not overlap");
        return -1;
    }
    return 0;
}

/* encode_batch's positional arguments (store.native.encode_batch names them); E_CRCS is optional. */
enum {
    E_DEST, E_DEST_POS, E_DEST_LIMIT, E_BATCH, E_BATCH_POS, E_OUT, E_MAX_COUNT, E_TOPIC, E_QUEUE_ID, E_SYS_FLAG, E_BORN_TS,
    E_BORN_HOST, E_STORE_TS, E_STORE_HOST, E_RECONSUME, E_PREPARED, E_QUEUE_OFFSET, E_PHYS, E_CRCS, E_NARGS
};

static int as_int32(PyObject *o, int32_t *v) {
    long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < INT32_MIN || x > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an int32 argument is out of range");
        return -1;
    }
    *v = (int32_t)x;
    return 0;
}

static int as_int64(PyObject *o, int64_t *v) {
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = (int64_t)x;
    return 0;
}

static int as_ssize(PyObject *o, Py_ssize_t *v) {
    *v = PyLong_AsSsize_t(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The buffers of encode_batch, acquired in order; `held` counts those to release. */
struct encode_buffers {
    Py_buffer dest, batch, out, topic, hosts[2], crcs;
    int held;
};

static void release_encode_buffers(struct encode_buffers *b) {
    Py_buffer *views[] = {&b->dest, &b->batch, &b->out, &b->topic, &b->hosts[0], &b->hosts[1], &b->crcs};
    for (int i = 0; i < b->held; i++) PyBuffer_Release(views[i]);
}

/* The carried BODYCRCs (E_CRCS): none when the argument is absent or None. */
static int carried_crcs(PyObject *const *a, Py_ssize_t nargs, struct encode_buffers *b, struct crc_list *l) {
    *l = (struct crc_list){NULL, 0};
    if (nargs <= E_CRCS || a[E_CRCS] == Py_None) return 0;
    if (PyObject_GetBuffer(a[E_CRCS], &b->crcs, PyBUF_SIMPLE) < 0) return -1;
    b->held++;
    if (overlaps(&b->dest, &b->crcs)) {
        PyErr_SetString(PyExc_ValueError, "dest and crcs must not overlap");
        return -1;
    }
    *l = (struct crc_list){b->crcs.buf, (size_t)b->crcs.len};
    return 0;
}

/* Converts the arguments as PyArg_ParseTuple's "w*nny*nw*ny*iiLy*Ly*iLLL" would (one call costs
 * less this way, and a single put makes one). */
static int parse_encode_args(PyObject *const *a, struct encode_buffers *b, Py_ssize_t *pos, struct batch_common *c,
                             Py_ssize_t *max_count) {
    b->held = 0;
    Py_buffer *views[] = {&b->dest, &b->batch, &b->out, &b->topic, &b->hosts[0], &b->hosts[1]};
    const int slots[] = {E_DEST, E_BATCH, E_OUT, E_TOPIC, E_BORN_HOST, E_STORE_HOST};
    for (int i = 0; i < 6; i++) {
        int writable = slots[i] == E_DEST || slots[i] == E_OUT;
        if (!writable && PyUnicode_Check(a[slots[i]])) {
            PyErr_SetString(PyExc_TypeError, "a bytes-like object is required, not str");
            return -1;
        }
        if (PyObject_GetBuffer(a[slots[i]], views[i], writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
        b->held++;
    }
    if (as_ssize(a[E_DEST_POS], &pos[0]) < 0 || as_ssize(a[E_DEST_LIMIT], &pos[1]) < 0 || as_ssize(a[E_BATCH_POS], &pos[2]) < 0 ||
        as_ssize(a[E_MAX_COUNT], max_count) < 0)
        return -1;
    if (as_int32(a[E_QUEUE_ID], &c->queue_id) < 0 || as_int32(a[E_SYS_FLAG], &c->sys_flag) < 0 ||
        as_int32(a[E_RECONSUME], &c->reconsume_times) < 0)
        return -1;
    if (as_int64(a[E_BORN_TS], &c->born_ts) < 0 || as_int64(a[E_STORE_TS], &c->store_ts) < 0 ||
        as_int64(a[E_PREPARED], &c->prepared_offset) < 0 || as_int64(a[E_QUEUE_OFFSET], &c->queue_offset) < 0 ||
        as_int64(a[E_PHYS], &c->phys_offset) < 0)
        return -1;
    return 0;
}

static PyObject *py_encode_batch(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != E_NARGS && nargs != E_NARGS - 1) {
        PyErr_Format(PyExc_TypeError, "encode_batch takes %d or %d positional arguments (%zd given)", E_NARGS - 1, E_NARGS, nargs);
        return NULL;
    }
    struct encode_buffers b;
    struct batch_common c;
    struct crc_list carried;
    Py_ssize_t pos[3], max_count; /* dest_pos, dest_limit, batch_pos */
    PyObject *result = NULL;
    if (parse_encode_args(args, &b, pos, &c, &max_count) < 0 || carried_crcs(args, nargs, &b, &carried) < 0) goto done;
    if (max_count < 0) {
        PyErr_SetString(PyExc_ValueError, "max_count must be >= 0");
        goto done;
    }
    if (check_encode_args(&b.dest, pos[0], pos[1], &b.batch, pos[2], &b.out, &b.topic, b.hosts) < 0) goto done;
    /* The v6 bits follow the hosts given, as the put path sets them (CommitLog.asyncPutMessage). */
    c.sys_flag = (int32_t)(((uint32_t)c.sys_flag & ~(uint32_t)(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) |
                           (b.hosts[0].len == 20 ? BORNHOST_V6_FLAG : 0) | (b.hosts[1].len == 20 ? STOREHOSTADDRESS_V6_FLAG : 0));
    c.topic = span_of(&b.topic);
    c.born_host = b.hosts[0].buf;
    c.store_host = b.hosts[1].buf;
    struct encode_state st = {(size_t)pos[2], (size_t)pos[0], 0, BATCH_OK};
    PyThreadState *ts = release_gil_for(items_span(span_of(&b.batch), (size_t)pos[2], (size_t)max_count, GIL_RELEASE_MIN_BYTES));
    int stop = batch_encode(span_of(&b.batch), b.dest.buf, (size_t)pos[1], b.out.buf, (size_t)b.out.len, &c, (size_t)max_count, &st,
                            carried);
    restore_gil(ts);
    if (st.error != BATCH_OK) batch_error(st.error, st.batch_pos, st.count);
    else result = Py_BuildValue("innn", stop, (Py_ssize_t)st.count, (Py_ssize_t)st.batch_pos, (Py_ssize_t)st.dest_pos);
done:
    release_encode_buffers(&b);
    return result;
}

/* An optional int64 array argument (None -> no buffer). */
static int optional_int64s(PyObject *obj, Py_buffer *view, const char *what) {
    view->buf = NULL;
    view->len = 0;
    view->obj = NULL;
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (view->len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s must hold int64 values (a multiple of 8 bytes)", what);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void release_optional(Py_buffer *view) {
    if (view->obj != NULL) PyBuffer_Release(view);
}

static PyObject *py_dispatch_scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, recs, keys, levels;
    Py_ssize_t pos, limit;
    int flags;
    PyObject *levels_obj, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nnw*w*iO", &buf, &pos, &limit, &recs, &keys, &flags, &levels_obj)) return NULL;
    if (optional_int64s(levels_obj, &levels, "delay_levels") < 0) goto release;
    if (check_range(pos, limit, buf.len, "buf") < 0) goto done;
    if (overlaps(&buf, &recs) || overlaps(&buf, &keys) || overlaps(&recs, &keys)) {
        PyErr_SetString(PyExc_ValueError, "buf, recs and keys must not overlap");
        goto done;
    }
    struct scan_args a = {span_of(&buf), (size_t)limit, recs.buf, (size_t)recs.len, keys.buf, (size_t)keys.len,
                          levels.obj ? levels.buf : NULL, (size_t)levels.len / 8, flags};
    struct scan_state st = {(size_t)pos, 0, 0};
    PyThreadState *ts = release_gil_for(limit - pos);
    int stop = dispatch_scan(&a, &st);
    restore_gil(ts);
    result = Py_BuildValue("innn", stop, (Py_ssize_t)st.pos, (Py_ssize_t)st.n_recs, (Py_ssize_t)st.n_keys);
done:
    release_optional(&levels);
release:
    PyBuffer_Release(&buf), PyBuffer_Release(&recs), PyBuffer_Release(&keys);
    return result;
}

static PyObject *py_check_message(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, limit;
    int check_crc;
    if (!PyArg_ParseTuple(args, "y*nnp", &buf, &pos, &limit, &check_crc)) return NULL;
    PyObject *result = NULL;
    if (check_range(pos, limit, buf.len, "buf") == 0) {
        size_t total;
        int stop = check_message_at(span_of(&buf), (size_t)pos, (size_t)limit, check_crc, &total);
        result = Py_BuildValue("in", stop, (Py_ssize_t)total);
    }
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *py_prefault(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, length;
    if (!PyArg_ParseTuple(args, "w*nn", &buf, &pos, &length)) return NULL;
    PyObject *result = NULL;
    if (pos < 0 || length < 0 || length > buf.len || pos > buf.len - length) {
        PyErr_Format(PyExc_ValueError, "position %zd and length %zd do not lie in a buffer of %zd bytes", pos, length, buf.len);
    } else {
        int how;
        Py_BEGIN_ALLOW_THREADS
        how = prefault_range((uint8_t *)buf.buf + pos, (size_t)length);
        Py_END_ALLOW_THREADS
        if (how < 0) {
            errno = -how;
            PyErr_SetFromErrno(PyExc_OSError);
        } else {
            result = PyLong_FromLong(how);
        }
    }
    PyBuffer_Release(&buf);
    return result;
}

/* Two passes over data (both without the GIL past GIL_RELEASE_MIN_BYTES): the first measures, the
 * second writes into a bytes object of exactly that size. */
static PyObject *py_render_views(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    PyObject *result = NULL;
    size_t need = 0, wrote = 0;
    PyThreadState *ts = release_gil_for(data.len);
    int outcome = render_views(span_of(&data), NULL, 0, &need);
    restore_gil(ts);
    if (outcome == VIEW_PYTHON) {
        result = Py_NewRef(Py_None);
    } else if (need > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
    } else if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need)) != NULL) {
        ts = release_gil_for(data.len);
        outcome = render_views(span_of(&data), (uint8_t *)PyBytes_AS_STRING(result), need, &wrote);
        restore_gil(ts);
        if (outcome != VIEW_OK || wrote != need) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_ValueError, "render_views: the buffer changed between the measuring and the writing pass");
        }
    }
    PyBuffer_Release(&data);
    return result;
}

/* One message, so the GIL is kept (a receive renders at most max messages of one request). */
static PyObject *py_render_received(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer message, topic, handle;
    int reconsume_times;
    long long until;
    if (!PyArg_ParseTuple(args, "y*y*iy*L", &message, &topic, &reconsume_times, &handle, &until)) return NULL;
    struct received r = {span_of(&topic), span_of(&handle), reconsume_times, until};
    PyObject *result = NULL;
    size_t need = 0, wrote = 0;
    int outcome = render_received(span_of(&message), &r, NULL, 0, &need);
    if (outcome == VIEW_PYTHON) {
        result = Py_NewRef(Py_None);
    } else if (need > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
    } else if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need)) != NULL) {
        outcome = render_received(span_of(&message), &r, (uint8_t *)PyBytes_AS_STRING(result), need, &wrote);
        if (outcome != VIEW_OK || wrote != need) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_ValueError, "render_received: the buffer changed between the measuring and the writing pass");
        }
    }
    PyBuffer_Release(&message);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&handle);
    return result;
}

static PyObject *py_crc32(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    unsigned int crc = 0;
    int portable = 0;
    if (!PyArg_ParseTuple(args, "y*|Ip", &data, &crc, &portable)) return NULL;
    const uint8_t *p = data.buf;
    size_t n = (size_t)data.len;
    PyThreadState *ts = release_gil_for(data.len);
    uint32_t v = portable ? crc32_portable(crc, p, n) : crc32_ieee(crc, p, n);
    restore_gil(ts);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(v);
}

static PyObject *py_crc32_method(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) { return PyLong_FromLong(crc32_method()); }

static PyObject *py_gil_releases(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) { return PyLong_FromUnsignedLongLong(gil_releases); }

#include "sql_binding.h"
#include "gather_binding.h"
#include "apply_binding.h"
#include "produce_binding.h"
#include "put_lane_binding.h"
#include "properties_binding.h"

static PyMethodDef methods[] = {
    {"java_hash", py_java_hash, METH_VARARGS, "java_hash(utf8, prefix=0) -> Java String.hashCode of the decoded text, folded onto prefix"},
    {"check_batch", py_check_batch, METH_VARARGS,
     "check_batch(batch, max_body, max_count=-1, max_props=32767, check_properties=False, with_crcs=False) -> (count, stored bytes "
     "without topics[, BODYCRCs as host-order uint32s, whether an item has TIDEMQ_DEDUP_ID])"},
    {"encode_batch", (PyCFunction)(void (*)(void))py_encode_batch, METH_FASTCALL,
     "encode_batch(...) -> (stop, count, batch_pos, dest_pos); see store.native"},
    {"dispatch_scan", py_dispatch_scan, METH_VARARGS, "dispatch_scan(buf, pos, limit, recs, keys, flags, levels) -> (stop, pos, n_recs, n_keys)"},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data, value=0, portable=False) -> zlib.crc32(data, value); portable: the table method"},
    {"crc32_method", py_crc32_method, METH_NOARGS, "crc32_method() -> 1: slice-by-8 tables, 2: carry-less multiplication folding"},
    {"gil_releases", py_gil_releases, METH_NOARGS, "gil_releases() -> times a kernel released the GIL (GIL_RELEASE_MIN_BYTES)"},
    {"prefault", py_prefault, METH_VARARGS, "prefault(buf, pos, length) -> 1 (MADV_POPULATE_WRITE) or 2 (one write per page)"},
    {"check_message", py_check_message, METH_VARARGS, "check_message(buf, pos, limit, check_crc) -> (stop, size)"},
    {"render_views", py_render_views, METH_VARARGS, "render_views(data) -> the messages' JSON views joined by ',', or None"},
    {"render_received", py_render_received, METH_VARARGS,
     "render_received(message, topic, reconsume_times, handle, invisible_until_ms) -> a received message's JSON view, or None"},
    {"json_produce", py_json_produce, METH_VARARGS,
     "json_produce(body, max_messages, max_body, reserved, reserve) -> (packed, count, queue_id, is_batch, reserve(count)) or None"},
    {"raw_item", (PyCFunction)(void (*)(void))py_raw_item, METH_FASTCALL,
     "raw_item(body, properties, head, first) -> a raw produce's batch item with its UNIQ_KEY (head + first's 4 hex digits)"},
    {"render_produce_reply", py_render_produce_reply, METH_VARARGS,
     "render_produce_reply(head, first, host_hex, queue_id, first_queue_offset, store_timestamp, offsets, is_batch) -> the reply's JSON"},
    {"put_packed", (PyCFunction)(void (*)(void))py_put_packed, METH_FASTCALL,
     "put_packed(log, batch, topic, topic_bytes, queue_id, born_host, max_body, max_count, max_props) -> (offsets, first queue "
     "offset, store timestamp, end offset, count, stored bytes), or None: declined (CommitLog.put_packed)"},
    {"queue_runs", py_queue_runs, METH_VARARGS, "queue_runs(buf, recs, n_recs, rec_from, runs, entries, scratch) -> (stop, rec_pos, n_runs, n_fallback)"},
    {"index_put", py_index_put, METH_VARARGS, "index_put(file, slots, entries, header, keys, key_from, key_to, current_rec) -> (stop, key_pos, current_rec, last_put_rec, header)"},
    {"gather", py_gather, METH_VARARGS, "gather(entries, n, segments, out, meta, limits, codes, tags, ranges=None, state=None, sql=None) -> (stop, examined, count, bytes, removed, damaged)"},
    {"decode_properties", py_decode_properties, METH_O, "decode_properties(data) -> {name: value} of a property string (UTF-8, U+FFFD for what is not)"},
    {"encode_properties", py_encode_properties, METH_O,
     "encode_properties(properties) -> b'name\\x01value\\x02...' (UTF-8, the dict's order), or None for another mapping or a name or value that is not a str"},
    {"sql_eval", py_sql_eval, METH_VARARGS, "sql_eval(program, properties) -> outcome: 0 FALSE, 1 TRUE, 2 null, 3 aborted, 4 left to the caller"},
    {NULL, NULL, 0, NULL},
};

/* BatchError, made once per process: the kernels raise it from C (batch_error), so every module
 * instance answers the same class. A StoreError, in tidemq's one exception tree (store/errors.py,
 * a module without imports). */
static int make_batch_error(void) {
    if (BatchError != NULL) return 0;
    PyObject *errors = PyImport_ImportModule("store.errors");
    PyObject *base = errors != NULL ? PyObject_GetAttrString(errors, "StoreError") : NULL;
    Py_XDECREF(errors);
    if (base == NULL) return -1;
    BatchError = PyErr_NewExceptionWithDoc("store._kernels.BatchError",
                                           "Raised when a batch is malformed; args are (message, error code, byte position).", base, NULL);
    Py_DECREF(base);
    return BatchError == NULL ? -1 : 0;
}

/* The module's execution step (PEP 489 multi-phase initialisation): the process-wide tables and
 * the locale first (each made once), then the module's names. */
static int kernels_exec(PyObject *m) {
    static int process_ready; /* crc32 tables and the SQL locale; under the GIL, like every import */
    if (!process_ready) {
        crc32_init();
        if (sql_init() < 0) {
            PyErr_NoMemory();
            return -1;
        }
        process_ready = 1;
    }
    if (make_batch_error() < 0 || PyModule_AddObjectRef(m, "BatchError", BatchError) < 0 ||
        PyModule_AddIntConstant(m, "GIL_RELEASE_MIN_BYTES", GIL_RELEASE_MIN_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "ASSERTIONS", ASSERTIONS_ON) < 0 || add_mapping(m) < 0 || add_group_flush(m) < 0 || make_put_names() < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)kernels_exec},
#ifdef Py_mod_multiple_interpreters
    /* One BatchError and one Mapping type (static) per process: no other interpreter may import it. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

/* m_size 0: no per-module state (multi-phase initialisation refuses a negative size). */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "store._kernels", "tidemq data-path kernels (docs/native.md)", 0, methods, slots, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModuleDef_Init(&module); }
