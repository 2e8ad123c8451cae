/* store._kernels.put_packed: a packed batch to one queue appended in one call (CommitLog.put_packed,
 * store/logfile/commit_log.py), included by kernels.c after its helpers.
 *
 * It does what CommitLog.put_batch does for the common case, with no Python frame: check the batch
 * (batch_check: limits, properties, BODYCRCs), take the put lock without waiting, encode the batch
 * into the last file's mapping (batch_encode: the same bytes put_batch writes), move the file's
 * positions and the queue's next offset, and let go of the lock. Whenever anything else holds (the
 * lock is taken, no last file, a write buffer, a reservation to extend, a file too full, a batch the
 * check refuses or with a dedup id) it declines: it answers None having changed nothing, and the
 * caller takes the general path, which answers that case as always. Bytes written past the file's
 * wrote position before a decline are invisible: nothing reads past it, and the next put writes there.
 *
 * The attributes it reads and writes (put_names) are the CommitLog's and its MappedFile's; their
 * classes say so where they are defined.
 */
#ifndef TIDEMQ_PUT_LANE_BINDING_H
#define TIDEMQ_PUT_LANE_BINDING_H

#include <time.h>

enum put_name {
    PN_PUT_LOCK, PN_LAST_FILE, PN_QUEUE_TABLE, PN_STORE_HOST, PN_FILE_SIZE, PN_BEGIN_TIME, PN_CLOCK, PN_WRITE_BUFFER, PN_WROTE,
    PN_RESERVED_TO, PN_FROM, PN_MM, PN_COMMITTED, PN_STORE_TS, PN_ACQUIRE, PN_RELEASE, PN_COUNT
};
static const char *const put_name_text[PN_COUNT] = {
    "put_lock", "_last_file", "topic_queue_table", "store_host", "file_size", "begin_time_in_lock_ms", "clock", "write_buffer",
    "wrote_position", "reserved_to", "file_from_offset", "mm", "committed_position", "store_timestamp", "acquire", "release",
};
static PyObject *put_names[PN_COUNT]; /* interned once per process (kernels_exec) */

static int make_put_names(void) {
    for (int i = 0; i < PN_COUNT; i++)
        if (put_names[i] == NULL && (put_names[i] = PyUnicode_InternFromString(put_name_text[i])) == NULL) return -1;
    return 0;
}

/* put_packed's positional arguments. */
enum { PP_LOG, PP_BATCH, PP_TOPIC, PP_TOPIC_BYTES, PP_QUEUE_ID, PP_BORN_HOST, PP_MAX_BODY, PP_MAX_COUNT, PP_MAX_PROPS, PP_NARGS };

/* An int attribute of `obj` as int64; -1 with an exception when it is missing or not an int. */
static int int64_attr(PyObject *obj, enum put_name name, int64_t *v) {
    PyObject *o = PyObject_GetAttr(obj, put_names[name]);
    if (o == NULL) return -1;
    long long x = PyLong_AsLongLong(o);
    Py_DECREF(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = (int64_t)x;
    return 0;
}

static int set_int64_attr(PyObject *obj, enum put_name name, int64_t v) {
    PyObject *o = PyLong_FromLongLong((long long)v);
    if (o == NULL) return -1;
    int r = PyObject_SetAttr(obj, put_names[name], o);
    Py_DECREF(o);
    return r;
}

static int64_t wall_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A buffer of the attribute `name` of `obj` (the exporter stays alive through view->obj); -1 with an exception. */
static int attr_buffer(PyObject *obj, enum put_name name, Py_buffer *view, int flags) {
    PyObject *o = PyObject_GetAttr(obj, put_names[name]);
    if (o == NULL) return -1;
    int got = PyObject_GetBuffer(o, view, flags);
    Py_DECREF(o);
    return got;
}

/* What one put_packed call holds; released by put_release. */
struct packed_put {
    Py_buffer batch, topic, born, store_host, dest;
    int held_batch, held_topic, held_born, held_host, held_dest;
    PyObject *log, *lock, *file, *table, *key, *offsets, *crcs;
    int locked;
    int64_t file_size, start, reserved_to, from, queue_offset, now;
    size_t count, stored;
};

static void put_release(struct packed_put *p) {
    if (p->held_dest) PyBuffer_Release(&p->dest);
    if (p->held_host) PyBuffer_Release(&p->store_host);
    if (p->held_born) PyBuffer_Release(&p->born);
    if (p->held_topic) PyBuffer_Release(&p->topic);
    if (p->held_batch) PyBuffer_Release(&p->batch);
    Py_XDECREF(p->file), Py_XDECREF(p->table), Py_XDECREF(p->key), Py_XDECREF(p->offsets), Py_XDECREF(p->crcs);
}

/* The batch checked as CommitLog.check_batch checks it, its BODYCRCs kept for the encode; 1: it may take
 * the lane, 0: decline (a refusal or a dedup id, which the general path answers), -1: an error. */
static int put_check(struct packed_put *p, PyObject *const *a) {
    long long max_body = PyLong_AsLongLong(a[PP_MAX_BODY]), max_props = PyLong_AsLongLong(a[PP_MAX_PROPS]);
    Py_ssize_t max_count = PyLong_AsSsize_t(a[PP_MAX_COUNT]);
    if (PyErr_Occurred()) return -1;
    if (max_count <= 0 || max_body < 0 || max_props < 0) {
        PyErr_SetString(PyExc_ValueError, "put_packed: the limits must be positive");
        return -1;
    }
    struct batch_limits lim = {max_body, max_props, (size_t)max_count, 1};
    struct crc_list l;
    if ((p->crcs = new_crc_list(p->batch.len, max_count, &l)) == NULL) return -1;
    size_t pos, stored;
    int has_dedup_id;
    if (batch_check(span_of(&p->batch), &lim, &p->count, &pos, &stored, l, &has_dedup_id) != BATCH_OK) return 0;
    return p->count > 0 && !has_dedup_id;
}

/* The put lock taken without waiting, the last file and its positions read; 1: go on, 0: decline, -1: error. */
static int put_begin(struct packed_put *p) {
    PyObject *clock = PyObject_GetAttr(p->log, put_names[PN_CLOCK]);
    if (clock == NULL) return -1;
    int faked = clock != Py_None; /* a store clock (tests): the general path reads it */
    Py_DECREF(clock);
    if (faked) return 0;
    PyObject *took = PyObject_CallMethodOneArg(p->lock, put_names[PN_ACQUIRE], Py_False);
    if (took == NULL) return -1;
    p->locked = took == Py_True;
    Py_DECREF(took);
    if (!p->locked) return 0;
    if ((p->file = PyObject_GetAttr(p->log, put_names[PN_LAST_FILE])) == NULL) return -1;
    if (p->file == Py_None) return 0;
    PyObject *buffer = PyObject_GetAttr(p->file, put_names[PN_WRITE_BUFFER]);
    if (buffer == NULL) return -1;
    int pooled = buffer != Py_None;
    Py_DECREF(buffer);
    if (pooled) return 0;
    if (int64_attr(p->log, PN_FILE_SIZE, &p->file_size) < 0 || int64_attr(p->file, PN_WROTE, &p->start) < 0 ||
        int64_attr(p->file, PN_RESERVED_TO, &p->reserved_to) < 0 || int64_attr(p->file, PN_FROM, &p->from) < 0)
        return -1;
    /* What the items can take at most and the end marker (CommitLog._encode_locked's bound). */
    int64_t need = p->start + (int64_t)p->batch.len +
                   (int64_t)p->count * ((int64_t)p->topic.len + FIXED_PART_BYTES + 2 * V6_EXTRA_BYTES) + END_FILE_MIN_BLANK_LENGTH;
    return need <= p->reserved_to && p->reserved_to <= p->file_size;
}

/* The queue's next offset (0 for a queue not yet in the table). */
static int put_queue_offset(struct packed_put *p, PyObject *topic, PyObject *queue_id) {
    if ((p->table = PyObject_GetAttr(p->log, put_names[PN_QUEUE_TABLE])) == NULL) return -1;
    if (!PyDict_Check(p->table)) {
        PyErr_SetString(PyExc_TypeError, "put_packed: topic_queue_table must be a dict");
        return -1;
    }
    if ((p->key = PyTuple_Pack(2, topic, queue_id)) == NULL) return -1;
    PyObject *next = PyDict_GetItemWithError(p->table, p->key);
    if (next == NULL) {
        p->queue_offset = 0;
        return PyErr_Occurred() ? -1 : 0;
    }
    long long v = PyLong_AsLongLong(next);
    if (v == -1 && PyErr_Occurred()) return -1;
    p->queue_offset = (int64_t)v;
    return 0;
}

/* The batch encoded into the file's mapping from its wrote position; 1: all of it, 0: decline, -1: error. */
static int put_encode(struct packed_put *p, int32_t queue_id) {
    if (attr_buffer(p->file, PN_MM, &p->dest, PyBUF_WRITABLE) < 0) return -1;
    p->held_dest = 1;
    if (p->dest.len < p->file_size || overlaps(&p->dest, &p->batch)) return 0;
    if ((p->offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(16 * p->count))) == NULL) return -1;
    int32_t sys_flag = (p->born.len == 20 ? BORNHOST_V6_FLAG : 0) | (p->store_host.len == 20 ? STOREHOSTADDRESS_V6_FLAG : 0);
    struct batch_common c = {span_of(&p->topic), p->born.buf, p->store_host.buf, p->now, p->now, p->queue_offset, p->from + p->start,
                             0, queue_id, sys_flag, 0};
    struct crc_list carried = {(uint8_t *)PyBytes_AS_STRING(p->crcs), 4 * p->count};
    struct encode_state st = {0, (size_t)p->start, 0, BATCH_OK};
    PyThreadState *ts = release_gil_for(p->batch.len);
    batch_encode(span_of(&p->batch), p->dest.buf, (size_t)p->file_size, (uint8_t *)PyBytes_AS_STRING(p->offsets), 16 * p->count, &c,
                 p->count, &st, carried);
    restore_gil(ts);
    if (st.error != BATCH_OK || st.count != p->count) return 0; /* nothing marked written: the general path writes there */
    p->stored = st.dest_pos - (size_t)p->start;
    return 1;
}

/* The file's positions, its store timestamp and the queue's next offset moved past the batch. */
static int put_commit(struct packed_put *p) {
    int64_t end = p->start + (int64_t)p->stored;
    assert(p->start < end && end <= p->reserved_to && end <= p->file_size); /* MappedFile.mark_written's invariant */
    /* In CommitLog._encode_locked's order: the file's positions, then the queue's next offset. */
    if (set_int64_attr(p->file, PN_WROTE, end) < 0 || set_int64_attr(p->file, PN_COMMITTED, end) < 0 ||
        set_int64_attr(p->file, PN_STORE_TS, p->now) < 0)
        return -1;
    PyObject *next = PyLong_FromLongLong((long long)(p->queue_offset + (int64_t)p->count));
    if (next == NULL) return -1;
    int r = PyDict_SetItem(p->table, p->key, next);
    Py_DECREF(next);
    return r;
}

static int put_unlock(struct packed_put *p) {
    if (!p->locked) return 0;
    p->locked = 0;
    PyObject *type, *value, *trace; /* an error of the locked part, kept while the lock is let go */
    PyErr_Fetch(&type, &value, &trace);
    int r = set_int64_attr(p->log, PN_BEGIN_TIME, 0);
    PyObject *done = PyObject_CallMethodNoArgs(p->lock, put_names[PN_RELEASE]);
    if (type != NULL) PyErr_Restore(type, value, trace);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return r;
}

static int put_buffers(struct packed_put *p, PyObject *const *a) {
    if (PyObject_GetBuffer(a[PP_BATCH], &p->batch, PyBUF_SIMPLE) < 0) return -1;
    p->held_batch = 1;
    if (PyObject_GetBuffer(a[PP_TOPIC_BYTES], &p->topic, PyBUF_SIMPLE) < 0) return -1;
    p->held_topic = 1;
    if (PyObject_GetBuffer(a[PP_BORN_HOST], &p->born, PyBUF_SIMPLE) < 0) return -1;
    p->held_born = 1;
    if (attr_buffer(p->log, PN_STORE_HOST, &p->store_host, PyBUF_SIMPLE) < 0) return -1;
    p->held_host = 1;
    if (p->topic.len == 0 || p->topic.len > MAX_TOPIC_BYTES || (p->born.len != 8 && p->born.len != 20) ||
        (p->store_host.len != 8 && p->store_host.len != 20)) {
        PyErr_SetString(PyExc_ValueError, "put_packed: a topic of 1..255 bytes and hosts of 8 or 20 bytes");
        return -1;
    }
    return 0;
}

/* The locked part: begin, queue offset, encode, commit; 1: stored, 0: declined, -1: error. */
static int put_locked(struct packed_put *p, PyObject *const *a, int32_t queue_id) {
    int r = put_begin(p);
    if (r <= 0) return r;
    p->now = wall_clock_ms();
    if (set_int64_attr(p->log, PN_BEGIN_TIME, p->now) < 0 || put_queue_offset(p, a[PP_TOPIC], a[PP_QUEUE_ID]) < 0) return -1;
    if ((r = put_encode(p, queue_id)) <= 0) return r;
    return put_commit(p) < 0 ? -1 : 1;
}

static PyObject *py_put_packed(PyObject *Py_UNUSED(self), PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != PP_NARGS) {
        PyErr_Format(PyExc_TypeError, "put_packed takes %d positional arguments (%zd given)", PP_NARGS, nargs);
        return NULL;
    }
    if (!PyUnicode_Check(a[PP_TOPIC])) {
        PyErr_SetString(PyExc_TypeError, "put_packed: the topic must be a str");
        return NULL;
    }
    long qid = PyLong_AsLong(a[PP_QUEUE_ID]);
    if (qid == -1 && PyErr_Occurred()) return NULL;
    if (qid < 0 || qid > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "put_packed: a queue id is 0..2**31-1");
        return NULL;
    }
    struct packed_put p = {0};
    p.log = a[PP_LOG];
    PyObject *result = NULL;
    int r = put_buffers(&p, a);
    if (r == 0 && (r = put_check(&p, a)) == 1) {
        if ((p.lock = PyObject_GetAttr(p.log, put_names[PN_PUT_LOCK])) == NULL) r = -1;
        else {
            r = put_locked(&p, a, (int32_t)qid);
            if (put_unlock(&p) < 0) r = -1;
            Py_DECREF(p.lock);
        }
    }
    if (r == 1) {
        result = Py_BuildValue("OLLLnn", p.offsets, (long long)p.queue_offset, (long long)p.now,
                               (long long)(p.from + p.start + (int64_t)p.stored), (Py_ssize_t)p.count, (Py_ssize_t)p.stored);
    } else if (r == 0) {
        result = Py_NewRef(Py_None);
    }
    put_release(&p);
    return result;
}

#endif
