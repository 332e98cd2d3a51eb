/* Longest paths of many small weighted DAGs in one pass (tracekit.native._dag).
 *
 * The critical path takes, for every step, the longest path of the step's dependency graph
 * and, for every what-if, the longest path's length under re-weighted edges.  The pure
 * Python path does this with one networkx graph per step (a Python object per node and
 * edge); this module does the same on flat int64 arrays and gives the same answers,
 * tie-breaking included:
 *
 *   - nodes are numbered in order of first appearance (an edge's source, then its target),
 *     which is the order networkx's DiGraph.add_edges_from inserts them;
 *   - the topological order is Kahn's algorithm with a FIFO queue seeded with the nodes of
 *     in-degree 0 in that order, children visited in edge order: the order of
 *     networkx.topological_sort (its generations, concatenated);
 *   - a node's distance is the first maximal (distance of predecessor + weight) over its
 *     incoming edges in edge order, or 0 (the path starts there) when that is negative or
 *     there is none: networkx.dag_longest_path; the path ends at the first node of the
 *     topological order with the greatest distance.
 *
 * A graph with a cycle, or whose sums would overflow int64, is reported and left to the
 * caller (the networkx path breaks cycles; Python integers do not overflow).  Repeated
 * (src, dst) pairs are the caller's to rule out.  Every input is bounds-checked; nothing
 * is global; the GIL is released while the graphs are processed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* status of a graph */
#define DAG_OK 0
#define DAG_CYCLE 1
#define DAG_OVERFLOW 2
#define DAG_NOMEM 3

typedef struct {
    const int64_t *src;
    const int64_t *dst;
    const int64_t **w; /* k weight arrays */
    Py_ssize_t k;
    const int64_t *offsets; /* ngroups + 1 */
    Py_ssize_t ngroups;
    int want_path;
    /* outputs */
    int64_t *lengths; /* ngroups * k */
    int64_t *nodes;   /* ngroups */
    int64_t *status;  /* ngroups */
    int64_t *path;    /* room for every group's nodes */
    int64_t *path_off; /* ngroups + 1 */
} Job;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* the local number of node id ``key``, inserting it as node ``*n`` when new */
static int64_t intern(int64_t *keys, int64_t *vals, uint64_t mask, int64_t key, int64_t *n, int64_t *ids) {
    uint64_t h = mix((uint64_t)key) & mask;
    for (;;) {
        if (vals[h] < 0) {
            keys[h] = key;
            vals[h] = *n;
            ids[*n] = key;
            return (*n)++;
        }
        if (keys[h] == key) {
            return vals[h];
        }
        h = (h + 1) & mask;
    }
}

/* the group [lo, hi) of the edges; returns its status, writes lengths, node count, path */
static int one_graph(const Job *job, Py_ssize_t g, int64_t *path_out, int64_t *path_len) {
    const int64_t lo = job->offsets[g], hi = job->offsets[g + 1];
    const int64_t m = hi - lo;
    const Py_ssize_t k = job->k;
    int status = DAG_OK;
    *path_len = 0;
    job->nodes[g] = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        job->lengths[g * k + i] = 0;
    }
    if (m == 0) {
        return DAG_OK;
    }
    uint64_t cap = 1;
    while (cap < (uint64_t)(4 * m)) {
        cap <<= 1;
    }
    const int64_t nmax = 2 * m;
    int64_t *keys = malloc(cap * sizeof(int64_t));
    int64_t *vals = malloc(cap * sizeof(int64_t));
    int64_t *ids = malloc((size_t)nmax * sizeof(int64_t));
    int64_t *u = malloc((size_t)m * sizeof(int64_t));
    int64_t *v = malloc((size_t)m * sizeof(int64_t));
    int64_t *out_start = calloc((size_t)nmax + 1, sizeof(int64_t));
    int64_t *in_start = calloc((size_t)nmax + 1, sizeof(int64_t));
    int64_t *out_edge = malloc((size_t)m * sizeof(int64_t));
    int64_t *in_edge = malloc((size_t)m * sizeof(int64_t));
    int64_t *fill = malloc(((size_t)nmax + 1) * sizeof(int64_t));
    int64_t *order = malloc((size_t)nmax * sizeof(int64_t));
    int64_t *indeg = malloc((size_t)nmax * sizeof(int64_t));
    int64_t *dist = malloc((size_t)nmax * sizeof(int64_t));
    int64_t *prev = malloc((size_t)nmax * sizeof(int64_t));
    if (!keys || !vals || !ids || !u || !v || !out_start || !in_start || !out_edge || !in_edge || !fill || !order || !indeg ||
        !dist || !prev) {
        status = DAG_NOMEM;
        goto done;
    }
    for (uint64_t h = 0; h < cap; h++) {
        vals[h] = -1;
    }
    int64_t n = 0;
    for (int64_t e = 0; e < m; e++) {
        u[e] = intern(keys, vals, cap - 1, job->src[lo + e], &n, ids);
        v[e] = intern(keys, vals, cap - 1, job->dst[lo + e], &n, ids);
    }
    job->nodes[g] = n;
    /* successor and predecessor lists, each in edge order */
    for (int64_t e = 0; e < m; e++) {
        out_start[u[e] + 1]++;
        in_start[v[e] + 1]++;
    }
    for (int64_t x = 0; x < n; x++) {
        out_start[x + 1] += out_start[x];
        in_start[x + 1] += in_start[x];
    }
    memcpy(fill, out_start, (size_t)(n + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < m; e++) {
        out_edge[fill[u[e]]++] = e;
    }
    memcpy(fill, in_start, (size_t)(n + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < m; e++) {
        in_edge[fill[v[e]]++] = e;
    }
    /* topological order: Kahn, FIFO, seeded in node order */
    int64_t head = 0, tail = 0;
    for (int64_t x = 0; x < n; x++) {
        indeg[x] = in_start[x + 1] - in_start[x];
        if (indeg[x] == 0) {
            order[tail++] = x;
        }
    }
    while (head < tail) {
        const int64_t x = order[head++];
        for (int64_t j = out_start[x]; j < out_start[x + 1]; j++) {
            const int64_t c = v[out_edge[j]];
            if (--indeg[c] == 0) {
                order[tail++] = c;
            }
        }
    }
    if (tail < n) {
        status = DAG_CYCLE;
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        const int64_t *w = job->w[i] + lo;
        const int track = (i == 0 && job->want_path);
        int64_t best = 0, end = -1, best_end = -1;
        for (int64_t t = 0; t < n; t++) {
            const int64_t x = order[t];
            int64_t d = 0, from = x;
            int have = 0;
            for (int64_t j = in_start[x]; j < in_start[x + 1]; j++) {
                const int64_t e = in_edge[j];
                int64_t s;
                if (__builtin_add_overflow(dist[u[e]], w[e], &s)) {
                    status = DAG_OVERFLOW;
                    goto done;
                }
                if (!have || s > d) {
                    d = s;
                    from = u[e];
                    have = 1;
                }
            }
            if (!have || d < 0) {
                d = 0;
                from = x;
            }
            dist[x] = d;
            prev[x] = from;
            if (end < 0 || d > best_end) {
                best_end = d;
                end = x;
            }
            if (d > best) {
                best = d;
            }
        }
        job->lengths[g * k + i] = best;
        if (track) {
            int64_t len = 0, x = end;
            for (;;) {
                if (len >= n) { /* cannot happen in a DAG; never write past the room */
                    status = DAG_CYCLE;
                    goto done;
                }
                path_out[len++] = ids[x];
                if (prev[x] == x) {
                    break;
                }
                x = prev[x];
            }
            for (int64_t a = 0, b = len - 1; a < b; a++, b--) {
                const int64_t tmp = path_out[a];
                path_out[a] = path_out[b];
                path_out[b] = tmp;
            }
            *path_len = len;
        }
    }
done:
    if (status != DAG_OK) {
        *path_len = 0;
    }
    free(keys);
    free(vals);
    free(ids);
    free(u);
    free(v);
    free(out_start);
    free(in_start);
    free(out_edge);
    free(in_edge);
    free(fill);
    free(order);
    free(indeg);
    free(dist);
    free(prev);
    return status;
}

static void run_job(Job *job) {
    int64_t at = 0;
    job->path_off[0] = 0;
    for (Py_ssize_t g = 0; g < job->ngroups; g++) {
        int64_t len = 0;
        job->status[g] = one_graph(job, g, job->path + at, &len);
        at += len;
        job->path_off[g + 1] = at;
    }
}

/* a read-only int64 view of ``obj`` with ``n`` items (n < 0: any length) */
static int get_int64(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    /* an empty buffer is never read: its address may be anything (an empty array.array's is) */
    if (view->len % (Py_ssize_t)sizeof(int64_t) != 0 || (view->len > 0 && ((uintptr_t)view->buf % sizeof(int64_t)) != 0) ||
        (n >= 0 && view->len / (Py_ssize_t)sizeof(int64_t) != n)) {
        if (n >= 0) {
            PyErr_Format(PyExc_ValueError, "%s: expected %zd aligned int64 values in a buffer of %zd bytes", what, n, view->len);
        } else {
            PyErr_Format(PyExc_ValueError, "%s: expected aligned int64 values in a buffer of %zd bytes", what, view->len);
        }
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *new_bytes(const int64_t *data, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)data, n * (Py_ssize_t)sizeof(int64_t));
}

PyDoc_STRVAR(longest_paths_doc,
             "longest_paths(src, dst, weights, offsets, want_path) -> (lengths, nodes, status, path, path_offsets)\n\n"
             "Edges are int64 buffers src, dst and one buffer per weight in ``weights``; graph g is the\n"
             "edges offsets[g]:offsets[g+1].  Every result is bytes of int64: lengths (graph-major, one per\n"
             "weight), node counts, status (0 ok, 1 cycle, 2 overflow, 3 out of memory), the node ids of\n"
             "every graph's longest path under the first weight (when want_path) and their offsets.");

static PyObject *longest_paths(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src_obj, *dst_obj, *weights_obj, *off_obj;
    int want_path;
    if (!PyArg_ParseTuple(args, "OOOOp", &src_obj, &dst_obj, &weights_obj, &off_obj, &want_path)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_buffer src = {0}, dst = {0}, off = {0};
    Py_buffer *wv = NULL;
    const int64_t **wp = NULL;
    Py_ssize_t k = 0, got_w = 0;
    int have_src = 0, have_dst = 0, have_off = 0;
    Job job;
    memset(&job, 0, sizeof(job));

    PyObject *weights = PySequence_Fast(weights_obj, "weights must be a sequence of buffers");
    if (!weights) {
        return NULL;
    }
    k = PySequence_Fast_GET_SIZE(weights);
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "at least one weight is needed");
        goto fail;
    }
    if (get_int64(src_obj, &src, -1, "src") < 0) {
        goto fail;
    }
    have_src = 1;
    const Py_ssize_t m = src.len / (Py_ssize_t)sizeof(int64_t);
    if (get_int64(dst_obj, &dst, m, "dst") < 0) {
        goto fail;
    }
    have_dst = 1;
    wv = calloc((size_t)k, sizeof(Py_buffer));
    wp = calloc((size_t)k, sizeof(int64_t *));
    if (!wv || !wp) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (get_int64(PySequence_Fast_GET_ITEM(weights, i), &wv[i], m, "weight") < 0) {
            goto fail;
        }
        got_w++;
        wp[i] = (const int64_t *)wv[i].buf;
    }
    if (get_int64(off_obj, &off, -1, "offsets") < 0) {
        goto fail;
    }
    have_off = 1;
    const Py_ssize_t ng = off.len / (Py_ssize_t)sizeof(int64_t) - 1;
    const int64_t *offsets = (const int64_t *)off.buf;
    if (ng < 0 || offsets[0] != 0 || offsets[ng] != m) {
        PyErr_SetString(PyExc_ValueError, "offsets must run from 0 to the number of edges");
        goto fail;
    }
    for (Py_ssize_t g = 0; g < ng; g++) {
        if (offsets[g + 1] < offsets[g]) {
            PyErr_SetString(PyExc_ValueError, "offsets must not decrease");
            goto fail;
        }
    }
    job.src = (const int64_t *)src.buf;
    job.dst = (const int64_t *)dst.buf;
    job.w = wp;
    job.k = k;
    job.offsets = offsets;
    job.ngroups = ng;
    job.want_path = want_path;
    job.lengths = malloc(((size_t)ng * (size_t)k + 1) * sizeof(int64_t));
    job.nodes = malloc(((size_t)ng + 1) * sizeof(int64_t));
    job.status = malloc(((size_t)ng + 1) * sizeof(int64_t));
    job.path = malloc(((size_t)want_path * 2 * (size_t)m + 1) * sizeof(int64_t));
    job.path_off = malloc(((size_t)ng + 1) * sizeof(int64_t));
    if (!job.lengths || !job.nodes || !job.status || !job.path || !job.path_off) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    run_job(&job);
    Py_END_ALLOW_THREADS
    PyObject *parts[5] = {new_bytes(job.lengths, ng * k), new_bytes(job.nodes, ng), new_bytes(job.status, ng),
                          new_bytes(job.path, job.path_off[ng]), new_bytes(job.path_off, ng + 1)};
    if (parts[0] && parts[1] && parts[2] && parts[3] && parts[4]) {
        result = PyTuple_Pack(5, parts[0], parts[1], parts[2], parts[3], parts[4]);
    }
    for (int i = 0; i < 5; i++) {
        Py_XDECREF(parts[i]);
    }
fail:
    free(job.lengths);
    free(job.nodes);
    free(job.status);
    free(job.path);
    free(job.path_off);
    for (Py_ssize_t i = 0; i < got_w; i++) {
        PyBuffer_Release(&wv[i]);
    }
    free(wv);
    free(wp);
    if (have_src) {
        PyBuffer_Release(&src);
    }
    if (have_dst) {
        PyBuffer_Release(&dst);
    }
    if (have_off) {
        PyBuffer_Release(&off);
    }
    Py_DECREF(weights);
    return result;
}

static PyMethodDef methods[] = {
    {"longest_paths", longest_paths, METH_VARARGS, longest_paths_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dag", "Longest paths of many small DAGs (the critical path's native kernel).", 0, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dag(void) { return PyModule_Create(&module); }
