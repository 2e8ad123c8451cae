/* store._kernels.GroupFlush: the group commit's flushes with neither Python nor the GIL between them
 * (docs/native.md "The group flush").
 *
 * SYNC_FLUSH puts ask for the log up to their end offset (`ask`, under the GIL, a mutex held for a few
 * stores); the group commit thread calls `serve` with the mapped file that holds the flushed offset and,
 * without the GIL, sleeps until asked, msyncs the pages from the flushed offset to the highest offset
 * asked, publishes the new flushed offset and wakes the threads blocked in `wait`, as many times as it is
 * allowed. It comes back to Python when the file cannot serve the request (the log moved on to the next
 * file), when nothing was asked for `idle_s`, after `max_flushes` flushes (the store's bookkeeping:
 * positions, checkpoint time, resident pages), when Python called it back (`call`: a request that waits
 * with a callback, or a shutdown), or when a flush failed.
 *
 * A wait may lead (`wait` with `lead_to`): it asks for the log up to `lead_to` and, while no flush is under
 * way and the file serve() holds covers what is asked, makes the flush itself on its own thread, as a
 * committing thread flushes its log in PostgreSQL or LevelDB. No thread is woken to flush and none to be told
 * (on a VM each wake-up of a sleeping CPU is an interrupt the waker pays for: most of what a flush handed to
 * the group commit thread cost beyond the msync). Waits that arrive meanwhile sleep; the leader's flush covers
 * every offset asked before it began, and when asks remain past it the leader hands the next flush to one
 * leading waiter it did not reach (else to serve()). serve() keeps its file pinned and flushes only when no
 * leader does; before it returns, no leader may start and the one under way has finished.
 *
 * Invariants, each kept under `mu`: `flushed` never moves back except by `reset` (no serve under way);
 * it moves forward only past bytes an msync returned 0 for, or by `advance` (Python flushed them); a
 * `wait` answers 1 only when `flushed` covers its offset, -1 when a flush failed or the object closed
 * after it began, 0 when its timeout passed first. `mu` is never held across a system call but the
 * condition waits, so `ask` and `wait` never wait behind a disk.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "group_flush_binding.h"
#include "mapping_binding.h"

/* Why serve() came back (store.logfile.group_commit_service.ServeEnd names them). */
enum serve_end { SERVE_IDLE = 0, SERVE_WINDOW = 1, SERVE_BUDGET = 2, SERVE_CALLED = 3, SERVE_FAILED = 4, SERVE_CLOSED = 5 };

/* A thread blocked in wait(): its node lives on its own stack, linked into `waiting` while it sleeps, so a
 * flush wakes only the threads whose offset it reached (no herd of every waiter at every flush). */
struct waiter {
    struct waiter *next;
    int64_t offset;
    pthread_cond_t cond;
};

/* The mapped file a serve() flushes: data[0, size) holds log offsets [from, from + size). */
struct flush_window {
    uint8_t *data; /* NULL: no file to flush (serve only waits) */
    int64_t from;
    int64_t size;
    int unmap_first;     /* drop whole pages from the mapping before their msync (MappedFile.flush's unmap_first) */
    long max_flushes;
    double idle_s;
};

/* What the flushes through one lent window share (serve()'s and the leaders'), changed only by the one flushing. */
struct serve_state {
    int64_t dropped_to; /* pages below it are out of the mapping already (page aligned, <= size) */
    long count;         /* flushes made by this serve() */
    int unmap;          /* drop pages first (cleared when madvise refuses: pages locked by warm-up) */
};

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;           /* guards every field below */
    pthread_cond_t bell;          /* serve() sleeps here until asked */
    struct waiter *waiting;       /* the threads in wait(), each on its own condition */
    int64_t requested;            /* the highest end offset asked for */
    int64_t flushed;              /* every byte of the log below it is on disk */
    unsigned long long failures;  /* flushes that failed, plus `fail` calls */
    unsigned long long asks;      /* ask() calls */
    unsigned long long flushes;   /* msyncs serve() made */
    int last_errno;               /* of the last failed msync */
    int called;                   /* Python wants serve() back (call, ask with python) */
    int idle;                     /* serve() sleeps on bell */
    int serving;                  /* a serve() is under way (one at a time) */
    int waiters;                  /* threads in wait() */
    int closed;                   /* close(): waits answer -1, serve() returns at once */
    const struct flush_window *lent; /* serve()'s file while it serves one (pinned): leaders flush through it */
    struct serve_state *lent_state;  /* the state of its flushes */
    int flushing;                 /* a flush through `lent` is under way (serve()'s or a leader's) */
    int releasing;                /* serve() is returning: no leader starts, it waits for the flush under way */
    int lead_failed;              /* a leader's flush failed: serve() answers SERVE_FAILED at its next wake */
    unsigned long long led;       /* msyncs made by leading waits (counted in `flushes` too) */
    int last_answered;            /* the sleeping waits the last flush answered (a leader's own not counted) */
    int injected_errno;           /* inject_failure(): the next flush fails with it, no msync made */
} GroupFlush;

static int64_t page_bytes(void) {
    long sz = sysconf(_SC_PAGESIZE);
    return sz > 0 ? (int64_t)sz : 4096;
}

static struct timespec deadline_after(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(long long)seconds;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec += 1;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static int init_cond(pthread_cond_t *c) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return -1;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 && pthread_cond_init(c, &attr) == 0 ? 0 : -1;
    pthread_condattr_destroy(&attr);
    return rc;
}

static PyObject *group_flush_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return NULL;
    GroupFlush *self = (GroupFlush *)type->tp_alloc(type, 0); /* zeroed */
    if (self == NULL) return NULL;
    if (pthread_mutex_init(&self->mu, NULL) != 0) {
        Py_TYPE(self)->tp_free((PyObject *)self);
        return PyErr_NoMemory();
    }
    if (init_cond(&self->bell) < 0) {
        pthread_mutex_destroy(&self->mu);
        Py_TYPE(self)->tp_free((PyObject *)self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void group_flush_dealloc(GroupFlush *self) {
    /* A serve() or wait() holds a reference to self while it runs: none is under way here. */
    pthread_cond_destroy(&self->bell);
    pthread_mutex_destroy(&self->mu);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_offset(PyObject *o, int64_t *v) {
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < 0) {
        PyErr_SetString(PyExc_ValueError, "a log offset is never negative");
        return -1;
    }
    *v = (int64_t)x;
    return 0;
}

/* ask(offset, python=False): the log up to `offset` is wanted on disk; `python`: serve() comes back after
 * its next flush (a request waits in Python's list). */
static PyObject *group_flush_ask(GroupFlush *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "ask takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t offset;
    if (parse_offset(args[0], &offset) < 0) return NULL;
    int python = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (python < 0) return NULL;
    pthread_mutex_lock(&self->mu);
    self->asks++;
    if (offset > self->requested) self->requested = offset;
    if (python) self->called = 1;
    if (self->idle && (python || offset > self->flushed)) pthread_cond_signal(&self->bell);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* Wake the waiters whose offset the flushed offset reached, or (`all`: a failure, a close) every waiter. */
static int wake_locked(GroupFlush *self, int all) {
    int woken = 0;
    for (struct waiter *w = self->waiting; w != NULL; w = w->next)
        if (all || w->offset <= self->flushed) {
            pthread_cond_signal(&w->cond);
            woken++;
        }
    return woken;
}

/* msync of the window's bytes [start, end) (offsets in the file), whole pages; after the whole pages below
 * `end` left the mapping when the window asks for it. 0, or the msync's errno. */
static int flush_span(const struct flush_window *w, struct serve_state *st, int64_t start, int64_t end) {
    int64_t page = page_bytes();
    assert(0 <= start && start <= end && end <= w->size);
    if (st->unmap) {
        int64_t floor = end - end % page;
        if (floor > st->dropped_to) {
            if (madvise(w->data + st->dropped_to, (size_t)(floor - st->dropped_to), MADV_DONTNEED) == 0)
                st->dropped_to = floor;
            else
                st->unmap = 0; /* refused (pages locked by warm-up): they stay mapped, the msync still writes them */
        }
    }
    int64_t aligned = start - start % page;
    return msync(w->data + aligned, (size_t)(end - aligned), MS_SYNC) == 0 ? 0 : errno;
}

/* Work for serve(): a request past flushed that no leader is flushing, a call, a leader's failure, close, or its
 * budget of flushes spent by leaders (Python's bookkeeping is due). */
static int has_work_locked(const GroupFlush *self) {
    int spent = self->lent_state != NULL && self->lent_state->count >= self->lent->max_flushes;
    return (self->requested > self->flushed && !self->flushing) || self->called || self->closed || self->lead_failed || spent;
}

/* Sleep until there is work or `deadline`; 1: work, 0: none came. */
static int wait_for_work_locked(GroupFlush *self, const struct timespec *deadline) {
    while (!has_work_locked(self)) {
        self->idle = 1;
        int rc = pthread_cond_timedwait(&self->bell, &self->mu, deadline);
        self->idle = 0;
        if (rc == ETIMEDOUT) return has_work_locked(self);
    }
    return 1;
}

/* One flush through the lent window from the flushed offset to `target`, `mu` released around it; the flushed
 * offset and the waiters follow. 0, or the msync's errno (every waiter then woken to answer -1). */
static int flush_to_locked(GroupFlush *self, int64_t target) {
    const struct flush_window *w = self->lent; /* both read under `mu`: serve() clears them when it returns, */
    struct serve_state *st = self->lent_state; /* after this flush ends (`flushing`) */
    int64_t start = self->flushed;
    assert(w != NULL && st != NULL && w->data != NULL && !self->flushing);
    assert(w->from <= start && start < target && target <= w->from + w->size);
    int err = self->injected_errno; /* a test's fault (inject_failure): this flush fails without its msync */
    self->injected_errno = 0;
    self->flushing = 1;
    pthread_mutex_unlock(&self->mu);
    if (err == 0) err = flush_span(w, st, start - w->from, target - w->from);
    pthread_mutex_lock(&self->mu);
    self->flushing = 0;
    if (err != 0) {
        self->failures++;
        self->last_errno = err;
        wake_locked(self, 1);
        return err;
    }
    if (target > self->flushed) self->flushed = target;
    self->flushes++;
    self->last_answered = wake_locked(self, 0);
    return 0;
}

/* The flushes of one serve() call, the GIL released; returns its serve_end. */
static int serve_loop_locked(GroupFlush *self, const struct flush_window *w, struct serve_state *st) {
    struct timespec deadline = deadline_after(w->idle_s);
    unsigned long long seen = self->flushes; /* idle means no flush by anyone, leaders included */
    for (;;) {
        if (!wait_for_work_locked(self, &deadline)) {
            if (self->flushes == seen) return SERVE_IDLE;
            seen = self->flushes;
            deadline = deadline_after(w->idle_s);
            continue;
        }
        if (self->closed) return SERVE_CLOSED;
        if (self->lead_failed) {
            self->lead_failed = 0;
            return SERVE_FAILED;
        }
        int64_t target = self->requested, start = self->flushed;
        if (target > start && !self->flushing) {
            if (w->data == NULL || start < w->from || target > w->from + w->size) return SERVE_WINDOW;
            if (flush_to_locked(self, target) != 0) return SERVE_FAILED;
            st->count++;
        }
        if (self->called) {
            self->called = 0;
            return SERVE_CALLED;
        }
        if (st->count >= w->max_flushes) return SERVE_BUDGET;
        seen = self->flushes;
        deadline = deadline_after(w->idle_s);
    }
}

/* serve_loop_locked with its file lent to the leaders meanwhile; it returns once no leader flushes through it. */
static int serve_locked(GroupFlush *self, const struct flush_window *w, struct serve_state *st) {
    if (w->data != NULL) {
        self->lent = w;
        self->lent_state = st;
    }
    int end = serve_loop_locked(self, w, st);
    self->lent = NULL;
    self->lent_state = NULL;
    self->releasing = 1;
    while (self->flushing) {
        self->idle = 1;
        pthread_cond_wait(&self->bell, &self->mu);
        self->idle = 0;
    }
    self->releasing = 0;
    return end;
}

static int parse_window(PyObject *const *args, struct flush_window *w, struct serve_state *st) {
    long long from, dropped_to;
    int unmap_first;
    long max_flushes;
    double idle_s;
    from = PyLong_AsLongLong(args[1]);
    dropped_to = PyLong_AsLongLong(args[2]);
    unmap_first = PyObject_IsTrue(args[3]);
    max_flushes = PyLong_AsLong(args[4]);
    idle_s = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred() || unmap_first < 0) return -1;
    if (from < 0 || max_flushes < 1 || !(idle_s >= 0.0 && idle_s <= 60.0)) {
        PyErr_SetString(PyExc_ValueError, "serve needs file_from >= 0, max_flushes >= 1 and 0 <= idle_s <= 60");
        return -1;
    }
    int boundary = dropped_to % page_bytes() == 0 || dropped_to == w->size; /* the file's last page may be partial */
    if (w->data != NULL && (dropped_to < 0 || dropped_to > w->size || !boundary)) {
        PyErr_Format(PyExc_ValueError, "dropped_to %lld is not a page boundary inside a mapping of %lld bytes", dropped_to, (long long)w->size);
        return -1;
    }
    w->from = (int64_t)from;
    w->unmap_first = unmap_first;
    w->max_flushes = max_flushes;
    w->idle_s = idle_s;
    st->dropped_to = (int64_t)dropped_to;
    st->count = 0;
    st->unmap = unmap_first;
    return 0;
}

/* serve(mapping, file_from, dropped_to, unmap_first, max_flushes, idle_s) -> (serve_end, dropped_to).
 * `mapping` None: no file to flush; the call waits for work and answers SERVE_WINDOW when asked. */
static PyObject *group_flush_serve(GroupFlush *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "serve takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    struct flush_window w = {0};
    struct serve_state st = {0};
    Py_ssize_t size = 0;
    int pinned = args[0] != Py_None;
    if (pinned && mapping_pin(args[0], &w.data, &size) < 0) return NULL;
    w.size = (int64_t)size;
    if (parse_window(args, &w, &st) < 0) {
        if (pinned) mapping_unpin(args[0]);
        return NULL;
    }
    if (self->serving) { /* under the GIL: set and cleared only here */
        if (pinned) mapping_unpin(args[0]);
        PyErr_SetString(PyExc_RuntimeError, "serve() is under way on another thread");
        return NULL;
    }
    self->serving = 1;
    int end;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->mu);
    end = serve_locked(self, &w, &st);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS self->serving = 0;
    if (pinned) mapping_unpin(args[0]);
    return Py_BuildValue("iL", end, (long long)st.dropped_to);
}

/* A leader may flush now: it waits alone (`others`: the other threads in wait()), nothing is under way, and
 * serve() holds a file covering all that is asked past flushed. Waits that are not alone leave the flushes to
 * serve(), which flushes again as soon as one ends while asks remain, without a thread woken for each. */
static int can_lead_locked(const GroupFlush *self, int others) {
    const struct flush_window *w = self->lent;
    return w != NULL && others == 0 && !self->flushing && !self->releasing && !self->closed &&
           self->requested > self->flushed && self->flushed >= w->from && self->requested <= w->from + w->size;
}

/* After a leader's flush: serve() is woken when it has work (asks the flush did not reach, a call, a failure, its
 * budget spent) or is returning and waits for the flush to end. */
static void hand_on_locked(GroupFlush *self) {
    if (self->idle && (self->releasing || has_work_locked(self))) pthread_cond_signal(&self->bell);
}

/* The leader's flush of everything asked; a failure is serve()'s to report (SERVE_FAILED). */
static void lead_locked(GroupFlush *self) {
    if (flush_to_locked(self, self->requested) == 0) {
        self->led++;
        if (self->lent_state != NULL) self->lent_state->count++; /* NULL: serve() began returning meanwhile */
    } else {
        self->lead_failed = 1;
    }
    hand_on_locked(self);
}

/* The wait itself, the GIL released: see group_flush_wait. */
static int wait_flushed(GroupFlush *self, int64_t offset, double timeout_s, int64_t lead_to) {
    struct timespec deadline = deadline_after(timeout_s > 0 ? timeout_s : 0);
    struct waiter me = {.next = NULL, .offset = offset};
    int lead = lead_to > 0;
    pthread_mutex_lock(&self->mu);
    unsigned long long failures = self->failures;
    int linked = 0, timed_out = 0;
    if (lead) {
        self->asks++;
        if (lead_to > self->requested) self->requested = lead_to;
    }
    while (self->flushed < offset && self->failures == failures && !self->closed && !timed_out && timeout_s != 0) {
        if (lead && can_lead_locked(self, self->waiters - linked)) {
            lead_locked(self);
            continue;
        }
        if (lead && self->idle && has_work_locked(self)) pthread_cond_signal(&self->bell); /* serve() flushes it */
        if (!linked) {
            if (init_cond(&me.cond) != 0) break;
            me.next = self->waiting;
            self->waiting = &me;
            self->waiters++;
            linked = 1;
        }
        if (timeout_s < 0)
            pthread_cond_wait(&me.cond, &self->mu);
        else
            timed_out = pthread_cond_timedwait(&me.cond, &self->mu, &deadline) == ETIMEDOUT;
    }
    if (linked) {
        struct waiter **at = &self->waiting;
        while (*at != &me) at = &(*at)->next;
        *at = me.next;
        self->waiters--;
        pthread_cond_destroy(&me.cond);
    }
    int answer = self->flushed >= offset ? 1 : (self->failures != failures || self->closed) ? -1 : 0;
    pthread_mutex_unlock(&self->mu);
    return answer;
}

/* wait(offset, timeout_s, lead_to=0) -> 1 flushed through offset, 0 the timeout passed (negative: none), -1 a
 * flush failed or the object closed first; the GIL released. `lead_to` > 0: the log up to it is asked for and
 * the wait flushes it itself when it can (the file comment); a leader's flush ends past its timeout when the
 * disk is that slow. */
static PyObject *group_flush_wait(GroupFlush *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "wait takes 2 or 3 arguments (%zd given)", nargs);
        return NULL;
    }
    int64_t offset, lead_to = 0;
    if (parse_offset(args[0], &offset) < 0) return NULL;
    double timeout_s = PyFloat_AsDouble(args[1]);
    if (timeout_s == -1.0 && PyErr_Occurred()) return NULL;
    if (nargs == 3 && parse_offset(args[2], &lead_to) < 0) return NULL;
    if (lead_to > 0 && lead_to < offset) {
        PyErr_SetString(PyExc_ValueError, "a leading wait asks for at least its own offset");
        return NULL;
    }
    int answer;
    Py_BEGIN_ALLOW_THREADS answer = wait_flushed(self, offset, timeout_s, lead_to);
    Py_END_ALLOW_THREADS return PyLong_FromLong(answer);
}

/* One of the methods that change the state under `mu` and wake whoever the change concerns. */
enum change { CHANGE_ADVANCE, CHANGE_RESET, CHANGE_FAIL, CHANGE_CALL, CHANGE_CLOSE };

static PyObject *change(GroupFlush *self, enum change what, int64_t offset) {
    pthread_mutex_lock(&self->mu);
    switch (what) {
    case CHANGE_ADVANCE: /* Python flushed the log up to offset */
        if (offset > self->flushed) self->flushed = offset;
        break;
    case CHANGE_RESET: /* the service starts: the log is on disk up to offset, nothing is asked */
        self->flushed = self->requested = offset;
        self->closed = 0;
        self->called = 0;
        break;
    case CHANGE_FAIL: /* Python answered a request not durable */
        self->failures++;
        break;
    case CHANGE_CALL:
        self->called = 1;
        break;
    case CHANGE_CLOSE:
        self->closed = 1;
        break;
    }
    wake_locked(self, what != CHANGE_ADVANCE);
    if (self->idle) pthread_cond_signal(&self->bell);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *group_flush_advance(GroupFlush *self, PyObject *arg) {
    int64_t offset;
    if (parse_offset(arg, &offset) < 0) return NULL;
    return change(self, CHANGE_ADVANCE, offset);
}

static PyObject *group_flush_reset(GroupFlush *self, PyObject *arg) {
    int64_t offset;
    if (parse_offset(arg, &offset) < 0) return NULL;
    if (self->serving) {
        PyErr_SetString(PyExc_RuntimeError, "reset() while serve() is under way");
        return NULL;
    }
    return change(self, CHANGE_RESET, offset);
}

static PyObject *group_flush_fail(GroupFlush *self, PyObject *Py_UNUSED(ignored)) { return change(self, CHANGE_FAIL, 0); }

/* inject_failure(errno): the next flush through a lent file (serve()'s or a leader's) fails with `errno` instead of
 * making its msync: the tests' fault, since no disk fails on demand. */
static PyObject *group_flush_inject_failure(GroupFlush *self, PyObject *arg) {
    long err = PyLong_AsLong(arg);
    if (err == -1 && PyErr_Occurred()) return NULL;
    if (err <= 0 || err > 4095) {
        PyErr_SetString(PyExc_ValueError, "inject_failure takes an errno (1..4095)");
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    self->injected_errno = (int)err;
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}
static PyObject *group_flush_call(GroupFlush *self, PyObject *Py_UNUSED(ignored)) { return change(self, CHANGE_CALL, 0); }
static PyObject *group_flush_close(GroupFlush *self, PyObject *Py_UNUSED(ignored)) { return change(self, CHANGE_CLOSE, 0); }

/* The counters and offsets, read under `mu`. */
enum field { F_REQUESTED, F_FLUSHED, F_FAILURES, F_ASKS, F_FLUSHES, F_LAST_ERRNO, F_CLOSED, F_WAITERS, F_SERVING, F_LED, F_LENDING, F_LONE };

static PyObject *group_flush_get(GroupFlush *self, void *closure) {
    long long v = 0;
    pthread_mutex_lock(&self->mu);
    switch ((enum field)(intptr_t)closure) {
    case F_REQUESTED: v = self->requested; break;
    case F_FLUSHED: v = self->flushed; break;
    case F_FAILURES: v = (long long)self->failures; break;
    case F_ASKS: v = (long long)self->asks; break;
    case F_FLUSHES: v = (long long)self->flushes; break;
    case F_LAST_ERRNO: v = self->last_errno; break;
    case F_CLOSED: v = self->closed; break;
    case F_WAITERS: v = self->waiters; break;
    case F_SERVING: v = self->serving; break;
    case F_LED: v = (long long)self->led; break;
    case F_LENDING: v = self->lent != NULL; break;
    case F_LONE: v = self->last_answered <= 1 && self->waiters == 0; break;
    }
    pthread_mutex_unlock(&self->mu);
    intptr_t f = (intptr_t)closure;
    return f == F_CLOSED || f == F_SERVING || f == F_LENDING || f == F_LONE ? PyBool_FromLong((long)v) : PyLong_FromLongLong(v);
}

static PyMethodDef group_flush_methods[] = {
    {"ask", (PyCFunction)(void (*)(void))group_flush_ask, METH_FASTCALL, "ask(offset, python=False): the log up to offset is wanted on disk"},
    {"serve", (PyCFunction)(void (*)(void))group_flush_serve, METH_FASTCALL,
     "serve(mapping, file_from, dropped_to, unmap_first, max_flushes, idle_s) -> (serve_end, dropped_to)"},
    {"wait", (PyCFunction)(void (*)(void))group_flush_wait, METH_FASTCALL,
     "wait(offset, timeout_s, lead_to=0) -> 1 flushed, 0 timed out, -1 failed or closed; lead_to > 0: ask and flush itself"},
    {"advance", (PyCFunction)group_flush_advance, METH_O, "advance(offset): Python flushed the log up to offset"},
    {"reset", (PyCFunction)group_flush_reset, METH_O, "reset(offset): flushed and requested both offset, open again"},
    {"fail", (PyCFunction)group_flush_fail, METH_NOARGS, "fail(): the waits under way answer -1"},
    {"inject_failure", (PyCFunction)group_flush_inject_failure, METH_O, "inject_failure(errno): the next flush fails with errno (tests)"},
    {"call", (PyCFunction)group_flush_call, METH_NOARGS, "call(): serve() comes back (at once when it sleeps)"},
    {"close", (PyCFunction)group_flush_close, METH_NOARGS, "close(): waits answer -1 unless flushed; serve() returns"},
    {NULL, NULL, 0, NULL},
};

#define FIELD(name, f, doc) {name, (getter)group_flush_get, NULL, doc, (void *)(intptr_t)(f)}
static PyGetSetDef group_flush_getset[] = {
    FIELD("requested", F_REQUESTED, "the highest offset asked for"),
    FIELD("flushed", F_FLUSHED, "every byte of the log below it is on disk"),
    FIELD("failures", F_FAILURES, "failed flushes and fail() calls"),
    FIELD("asks", F_ASKS, "ask() calls"),
    FIELD("flushes", F_FLUSHES, "msyncs made by serve() and by leading waits"),
    FIELD("led", F_LED, "msyncs made by leading waits"),
    FIELD("lending", F_LENDING, "True while serve() holds a file that a leading wait may flush through"),
    FIELD("lone", F_LONE, "True when no thread waits and the last flush woke at most one (one put at a time: its wait may lead)"),
    FIELD("last_errno", F_LAST_ERRNO, "errno of the last failed msync (0: none)"),
    FIELD("closed", F_CLOSED, "True after close() until reset()"),
    FIELD("waiters", F_WAITERS, "threads blocked in wait()"),
    FIELD("serving", F_SERVING, "True while a serve() is under way"),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GroupFlushType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "store._kernels.GroupFlush",
    .tp_basicsize = sizeof(GroupFlush),
    .tp_dealloc = (destructor)group_flush_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "GroupFlush(): the group commit's requests, flushed offset and flushes (docs/native.md)",
    .tp_methods = group_flush_methods,
    .tp_getset = group_flush_getset,
    .tp_new = group_flush_new,
};

int add_group_flush(PyObject *module) {
    if (PyType_Ready(&GroupFlushType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "GroupFlush", (PyObject *)&GroupFlushType) < 0) return -1;
    static const struct {
        const char *name;
        int value;
    } ends[] = {{"SERVE_IDLE", SERVE_IDLE},     {"SERVE_WINDOW", SERVE_WINDOW}, {"SERVE_BUDGET", SERVE_BUDGET},
                {"SERVE_CALLED", SERVE_CALLED}, {"SERVE_FAILED", SERVE_FAILED}, {"SERVE_CLOSED", SERVE_CLOSED}};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        if (PyModule_AddIntConstant(module, ends[i].name, ends[i].value) < 0) return -1;
    return 0;
}
