/* Longest-path sweeps and a topological order over the replay's dependency graphs.
 *
 * The replay (tracekit/analysis/replay.py) relaxes every edge of a group's graph once per
 * scenario, in the topological order of the edges' heads; in Python that loop is the
 * replay's floor.  This module does the same arithmetic on int64 arrays, with the GIL
 * released around the loops.  Columns arrive through the Arrow C stream interface (a polars
 * Series' __arrow_c_stream__ capsule, copied into a buffer by read_int64), so neither numpy
 * nor pyarrow is needed.
 * tracekit/analysis/sweep.py holds the pure-Python versions, which give identical results
 * and stay the fallback (TRACEKIT_PURE_PYTHON=1, or an install without a compiler).
 *
 * Every index read from a buffer is checked against the node count, sizes are checked
 * before anything is allocated, and an addition that would leave int64 is reported to the
 * caller (which then runs the Python version, whose integers do not overflow).  No global
 * state.  C99, nothing beyond Python.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "arrow_abi.h" /* tracekit/native/arrow_abi.h: the Arrow C data interface */

/* An int64 view of a buffer argument: contiguous, whole 8-byte items, 8-byte aligned. */
typedef struct {
    Py_buffer view;
    const int64_t *data;
    Py_ssize_t len;
    int held;
} I64;

static int
i64_get(PyObject *obj, I64 *out, int writable, const char *what)
{
    out->held = 0;
    if (PyObject_GetBuffer(obj, &out->view, writable ? (PyBUF_SIMPLE | PyBUF_WRITABLE) : PyBUF_SIMPLE) < 0) {
        return -1;
    }
    out->held = 1;
    if (out->view.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of int64 items", what, out->view.len);
        return -1;
    }
    if (out->view.len > 0 && ((uintptr_t)out->view.buf) % sizeof(int64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffer is not 8-byte aligned", what);
        return -1;
    }
    out->data = (const int64_t *)out->view.buf;
    out->len = out->view.len / (Py_ssize_t)sizeof(int64_t);
    return 0;
}

static void
i64_release(I64 *b)
{
    if (b->held) {
        PyBuffer_Release(&b->view);
        b->held = 0;
    }
}


static void
stream_error(struct ArrowArrayStream *stream, int code, const char *what)
{
    const char *msg = stream->get_last_error != NULL ? stream->get_last_error(stream) : NULL;
    PyErr_Format(PyExc_ValueError, "read_int64: %s failed (%d): %s", what, code, msg != NULL ? msg : "no message");
}

/* read_int64(capsule, out) -> None
 *
 * Copies the int64 values of an Arrow C stream (an "arrow_array_stream" capsule, e.g. a
 * polars Series' __arrow_c_stream__()) into out, which must hold exactly as many items.
 * Refuses any other type, nulls, and chunks whose buffers do not match their length.  The
 * stream is released when done. */
static PyObject *
sweep_read_int64(PyObject *self, PyObject *args)
{
    PyObject *capsule, *o_out;
    I64 out = {0};
    PyObject *result = NULL;
    struct ArrowSchema schema;
    struct ArrowArray chunk;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:read_int64", &capsule, &o_out)) {
        return NULL;
    }
    struct ArrowArrayStream *stream = (struct ArrowArrayStream *)PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (stream == NULL) {
        return NULL;
    }
    if (stream->release == NULL || stream->get_schema == NULL || stream->get_next == NULL) {
        PyErr_SetString(PyExc_ValueError, "read_int64: the stream was released already");
        return NULL;
    }
    if (i64_get(o_out, &out, 1, "read_int64: out") < 0) {
        goto done;
    }
    memset(&schema, 0, sizeof schema);
    int code = stream->get_schema(stream, &schema);
    if (code != 0) {
        stream_error(stream, code, "get_schema");
        goto done;
    }
    int is_int64 = schema.format != NULL && strcmp(schema.format, "l") == 0;
    if (schema.release != NULL) {
        schema.release(&schema);
    }
    if (!is_int64) {
        PyErr_SetString(PyExc_ValueError, "read_int64: the stream is not of int64 values");
        goto done;
    }
    int64_t *dest = (int64_t *)out.view.buf;
    Py_ssize_t filled = 0;
    for (;;) {
        memset(&chunk, 0, sizeof chunk);
        code = stream->get_next(stream, &chunk);
        if (code != 0) {
            stream_error(stream, code, "get_next");
            goto done;
        }
        if (chunk.release == NULL) {
            break; /* end of stream */
        }
        const char *bad = NULL;
        if (chunk.length < 0 || chunk.offset < 0 || chunk.n_buffers != 2 || chunk.buffers == NULL) {
            bad = "a chunk has an invalid layout";
        }
        else if (chunk.null_count != 0) {
            bad = "a chunk holds nulls";
        }
        else if (chunk.length > (int64_t)(out.len - filled)) {
            bad = "more values than the output holds";
        }
        else if (chunk.length > 0 && chunk.buffers[1] == NULL) {
            bad = "a chunk has no data buffer";
        }
        if (bad == NULL && chunk.length > 0) {
            memcpy(dest + filled, (const int64_t *)chunk.buffers[1] + chunk.offset, (size_t)chunk.length * sizeof(int64_t));
            filled += (Py_ssize_t)chunk.length;
        }
        chunk.release(&chunk);
        if (bad != NULL) {
            PyErr_Format(PyExc_ValueError, "read_int64: %s", bad);
            goto done;
        }
    }
    if (filled != out.len) {
        PyErr_Format(PyExc_ValueError, "read_int64: %zd values for an output of %zd", filled, out.len);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (stream->release != NULL) {
        stream->release(stream); /* sets stream->release to NULL: the capsule will not release it again */
    }
    i64_release(&out);
    return result;
}

/* longest(n, src, dst, weights, out) -> bool
 *
 * src, dst: m edges (node indices in [0, n)), in the order they are relaxed.
 * weights: k scenarios of m weights each, scenario after scenario (k * m items).
 * out: k * n items, written scenario after scenario: every node's longest distance from a
 * source (every node starts at 0; an edge u -> v of weight w raises dist[v] to dist[u] + w).
 * Returns False (out unspecified) when a sum leaves int64. */
static PyObject *
sweep_longest(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *o_src, *o_dst, *o_w, *o_out;
    I64 src = {0}, dst = {0}, w = {0}, out = {0};
    PyObject *result = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "nOOOO:longest", &n, &o_src, &o_dst, &o_w, &o_out)) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "longest: negative node count");
        return NULL;
    }
    if (i64_get(o_src, &src, 0, "longest: src") < 0 || i64_get(o_dst, &dst, 0, "longest: dst") < 0
        || i64_get(o_w, &w, 0, "longest: weights") < 0 || i64_get(o_out, &out, 1, "longest: out") < 0) {
        goto done;
    }
    Py_ssize_t m = src.len;
    if (dst.len != m) {
        PyErr_Format(PyExc_ValueError, "longest: %zd sources but %zd destinations", m, dst.len);
        goto done;
    }
    Py_ssize_t k = 0;
    if (m > 0) {
        if (w.len % m != 0) {
            PyErr_Format(PyExc_ValueError, "longest: %zd weights is not a multiple of %zd edges", w.len, m);
            goto done;
        }
        k = w.len / m;
    }
    else if (w.len != 0) {
        PyErr_SetString(PyExc_ValueError, "longest: weights given for no edges");
        goto done;
    }
    if (m == 0) {
        /* no edges: the caller tells the scenario count by the output's size */
        if (n > 0 && out.len % n != 0) {
            PyErr_SetString(PyExc_ValueError, "longest: output is not a whole number of scenarios");
            goto done;
        }
        memset(out.view.buf, 0, (size_t)out.view.len);
        result = Py_NewRef(Py_True);
        goto done;
    }
    if (n == 0 || out.len / n != k || out.len % n != 0) {
        PyErr_Format(PyExc_ValueError, "longest: output holds %zd items, not %zd scenarios x %zd nodes", out.len, k, n);
        goto done;
    }
    const int64_t *s = src.data, *d = dst.data;
    int64_t *dist_all = (int64_t *)out.view.buf;
    Py_ssize_t bad = -1;
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) {
        if (s[i] < 0 || s[i] >= n || d[i] < 0 || d[i] >= n) {
            bad = i;
            break;
        }
    }
    if (bad < 0) {
        memset(dist_all, 0, (size_t)n * (size_t)k * sizeof(int64_t));
        for (Py_ssize_t j = 0; j < k && !overflow; j++) {
            int64_t *dist = dist_all + (size_t)j * (size_t)n;
            const int64_t *wj = w.data + (size_t)j * (size_t)m;
            for (Py_ssize_t i = 0; i < m; i++) {
                int64_t a = dist[s[i]], b = wj[i];
                if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {
                    overflow = 1;
                    break;
                }
                int64_t t = a + b;
                if (t > dist[d[i]]) {
                    dist[d[i]] = t;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "longest: edge %zd names a node outside [0, %zd)", bad, n);
        goto done;
    }
    result = Py_NewRef(overflow ? Py_False : Py_True);
done:
    i64_release(&src);
    i64_release(&dst);
    i64_release(&w);
    i64_release(&out);
    return result;
}

/* topological(n, src, dst, pos) -> bool
 *
 * Kahn's algorithm exactly as tracekit.analysis.sweep.kahn_positions runs it: the nodes
 * without predecessors in ascending order form a stack, the last one is taken, and each
 * successor that becomes ready (successors in edge order) is pushed.  Writes every node's
 * position into pos (n items) and returns True, or returns False when the graph has a cycle. */
static PyObject *
sweep_topological(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *o_src, *o_dst, *o_pos;
    I64 src = {0}, dst = {0}, pos = {0};
    PyObject *result = NULL;
    Py_ssize_t *indeg = NULL, *first = NULL, *succ = NULL, *ready = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "nOOO:topological", &n, &o_src, &o_dst, &o_pos)) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "topological: negative node count");
        return NULL;
    }
    if (i64_get(o_src, &src, 0, "topological: src") < 0 || i64_get(o_dst, &dst, 0, "topological: dst") < 0
        || i64_get(o_pos, &pos, 1, "topological: pos") < 0) {
        goto done;
    }
    Py_ssize_t m = src.len;
    if (dst.len != m) {
        PyErr_Format(PyExc_ValueError, "topological: %zd sources but %zd destinations", m, dst.len);
        goto done;
    }
    if (pos.len != n) {
        PyErr_Format(PyExc_ValueError, "topological: output holds %zd items, not %zd", pos.len, n);
        goto done;
    }
    if ((size_t)n >= PY_SSIZE_T_MAX / sizeof(Py_ssize_t) - 1 || (size_t)m >= PY_SSIZE_T_MAX / sizeof(Py_ssize_t)) {
        PyErr_NoMemory();
        goto done;
    }
    indeg = (Py_ssize_t *)calloc((size_t)n + 1, sizeof(Py_ssize_t));
    first = (Py_ssize_t *)calloc((size_t)n + 1, sizeof(Py_ssize_t));
    succ = (Py_ssize_t *)malloc(((size_t)m + 1) * sizeof(Py_ssize_t));
    ready = (Py_ssize_t *)malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    if (indeg == NULL || first == NULL || succ == NULL || ready == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *s = src.data, *d = dst.data;
    int64_t *p = (int64_t *)pos.view.buf;
    Py_ssize_t bad = -1, k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) {
        if (s[i] < 0 || s[i] >= n || d[i] < 0 || d[i] >= n) {
            bad = i;
            break;
        }
        indeg[d[i]]++;
        first[s[i] + 1]++;
    }
    if (bad < 0) {
        /* successors of u are succ[first[u] .. first[u + 1]), in edge order */
        for (Py_ssize_t u = 0; u < n; u++) {
            first[u + 1] += first[u];
        }
        Py_ssize_t *fill = ready; /* borrowed as the fill cursor, reset below */
        for (Py_ssize_t u = 0; u < n; u++) {
            fill[u] = first[u];
        }
        for (Py_ssize_t i = 0; i < m; i++) {
            succ[fill[s[i]]++] = (Py_ssize_t)d[i];
        }
        Py_ssize_t top = 0;
        for (Py_ssize_t u = 0; u < n; u++) {
            if (indeg[u] == 0) {
                ready[top++] = u;
            }
        }
        while (top > 0) {
            Py_ssize_t u = ready[--top];
            p[u] = (int64_t)k++;
            for (Py_ssize_t e = first[u]; e < first[u + 1]; e++) {
                Py_ssize_t v = succ[e];
                if (--indeg[v] == 0) {
                    ready[top++] = v;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "topological: edge %zd names a node outside [0, %zd)", bad, n);
        goto done;
    }
    result = Py_NewRef(k == n ? Py_True : Py_False);
done:
    free(indeg);
    free(first);
    free(succ);
    free(ready);
    i64_release(&src);
    i64_release(&dst);
    i64_release(&pos);
    return result;
}

static PyMethodDef sweep_methods[] = {
    {"read_int64", sweep_read_int64, METH_VARARGS,
     "read_int64(arrow_array_stream capsule, out) -> None: the stream's int64 values copied into out"},
    {"longest", sweep_longest, METH_VARARGS,
     "longest(n, src, dst, weights, out) -> bool: longest distances of every node, one sweep per scenario"},
    {"topological", sweep_topological, METH_VARARGS,
     "topological(n, src, dst, pos) -> bool: Kahn's positions of every node; False on a cycle"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sweep_module = {
    PyModuleDef_HEAD_INIT, "_sweep", "Native longest-path sweeps for tracekit's replay.", 0, sweep_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sweep(void)
{
    return PyModule_Create(&sweep_module);
}
