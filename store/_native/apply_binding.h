/* queue_runs() and index_put()'s bindings: every count and position is checked against its buffer. */

static int check_runs_args(const Py_buffer *v, Py_ssize_t n_recs, Py_ssize_t rec_from) {
    const Py_buffer *recs = &v[1], *entries = &v[3], *scratch = &v[4];
    if (n_recs < 0 || n_recs > recs->len / REC_BYTES || n_recs > INT32_MAX || rec_from < 0 || rec_from > n_recs) {
        PyErr_Format(PyExc_ValueError, "records %zd..%zd do not lie in a buffer of %zd bytes", rec_from, n_recs, recs->len);
        return -1;
    }
    size_t n = (size_t)(n_recs - rec_from);
    if ((size_t)entries->len / CQ_UNIT_BYTES < n || (size_t)scratch->len / 4 < n + runs_table_slots(n) ||
        (uintptr_t)scratch->buf % 4 != 0) {
        PyErr_Format(PyExc_ValueError, "entries need %zu bytes and scratch %zu aligned bytes for %zu records", n * CQ_UNIT_BYTES,
                     4 * (n + runs_table_slots(n)), n);
        return -1;
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (j >= 2 && overlaps(&v[i], &v[j])) {
                PyErr_SetString(PyExc_ValueError, "runs, entries and scratch must not overlap each other or the inputs");
                return -1;
            }
    return 0;
}

static PyObject *py_queue_runs(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer v[5]; /* buf, recs, runs, entries, scratch */
    Py_ssize_t n_recs, rec_from;
    if (!PyArg_ParseTuple(args, "y*y*nnw*w*w*", &v[0], &v[1], &n_recs, &rec_from, &v[2], &v[3], &v[4])) return NULL;
    PyObject *result = NULL;
    if (check_runs_args(v, n_recs, rec_from) == 0) {
        struct runs_args a = {span_of(&v[0]), v[1].buf, (size_t)n_recs, v[2].buf, (size_t)v[2].len, v[3].buf, v[4].buf};
        struct runs_state st = {(size_t)rec_from, 0, 0};
        PyThreadState *ts = release_gil_for((n_recs - rec_from) * REC_BYTES);
        int stop = queue_runs(&a, &st);
        restore_gil(ts);
        if (stop == STOP_BAD_RECORD) PyErr_Format(PyExc_ValueError, "record %zu does not describe a message of buf", st.rec_pos);
        else result = Py_BuildValue("innn", stop, (Py_ssize_t)st.rec_pos, (Py_ssize_t)st.n_runs, (Py_ssize_t)st.n_fallback);
    }
    for (int i = 0; i < 5; i++) PyBuffer_Release(&v[i]);
    return result;
}

static int check_index_args(const Py_buffer *file, const Py_buffer *keys, long long slot_num, long long index_num, long long count,
                            Py_ssize_t key_from, Py_ssize_t key_to) {
    if (slot_num < 1 || slot_num > INT32_MAX || index_num < 1 || index_num > INT32_MAX || count < 0) {
        PyErr_SetString(PyExc_ValueError, "slot and entry counts must be in 1..2**31-1 and the index count >= 0");
        return -1;
    }
    size_t need = INDEX_HEADER_BYTES + (size_t)slot_num * 4 + (size_t)index_num * INDEX_ENTRY_BYTES;
    if ((size_t)file->len < need || key_from < 0 || key_to < key_from || key_to > keys->len / KEY_BYTES) {
        PyErr_Format(PyExc_ValueError, "an index file of %zu bytes and keys %zd..%zd do not fit the buffers given", need, key_from, key_to);
        return -1;
    }
    if (overlaps(file, keys)) {
        PyErr_SetString(PyExc_ValueError, "file and keys must not overlap");
        return -1;
    }
    return 0;
}

static PyObject *py_index_put(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer file, keys;
    long long slot_num, index_num, current_rec;
    Py_ssize_t key_from, key_to;
    struct index_state st;
    memset(&st, 0, sizeof st);
    long long s[6];
    if (!PyArg_ParseTuple(args, "w*LL(LLLLLL)y*nnL", &file, &slot_num, &index_num, &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &keys,
                          &key_from, &key_to, &current_rec))
        return NULL;
    PyObject *result = NULL;
    if (check_index_args(&file, &keys, slot_num, index_num, s[5], key_from, key_to) == 0) {
        struct index_args a = {file.buf, (size_t)slot_num, (size_t)index_num, keys.buf, (size_t)key_to};
        st.begin_ts = s[0], st.end_ts = s[1], st.begin_phy = s[2], st.end_phy = s[3], st.slot_count = s[4], st.index_count = s[5];
        st.key_pos = (size_t)key_from, st.current_rec = current_rec, st.last_put_rec = -1;
        PyThreadState *ts = release_gil_for((key_to - key_from) * KEY_BYTES);
        int stop = index_put(&a, &st);
        restore_gil(ts);
        result = Py_BuildValue("inLL(LLLLLL)", stop, (Py_ssize_t)st.key_pos, (long long)st.current_rec, (long long)st.last_put_rec,
                               (long long)st.begin_ts, (long long)st.end_ts, (long long)st.begin_phy, (long long)st.end_phy,
                               (long long)st.slot_count, (long long)st.index_count);
    }
    PyBuffer_Release(&file), PyBuffer_Release(&keys);
    return result;
}
