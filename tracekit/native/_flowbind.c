/* Flow endpoints bound to their slices (tracekit.native._flowbind).
 *
 * The Kineto reader binds every flow endpoint (a "s" or "f" row of a flow arrow) to the
 * innermost slice that starts at the endpoint's timestamp on the endpoint's track: among
 * the timed events with the same (pid, tid, start), the one with the largest event id
 * (the canonical order puts the longest of the slices that start together first).  The
 * pure Python path (parsers/kineto.py, _bind_endpoints) does this with a polars hash join
 * and a grouping; this module does the same with one hash table over the endpoints'
 * distinct (pid, tid, start) keys and gives the same answer: for each endpoint the largest
 * event id of a slice with exactly its key, or null, where a null pid, tid or start never
 * matches anything.
 *
 * Columns arrive and leave through the Arrow PyCapsule interface: every input is a polars
 * int64 column exported as an Arrow stream (any number of chunks, nulls allowed), the
 * result an int64 Arrow array with a validity bitmap that polars takes over without a
 * copy.  Every buffer read is bounds-checked against the lengths the producer declares;
 * nothing is global; the GIL is released while the table is built and probed.  The table
 * is seeded from its own address so a hostile trace cannot choose keys that all collide.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "arrow_abi.h" /* tracekit/native/arrow_abi.h: the Arrow C data interface */


/* ---- one int64 column: its exported chunks, read in place (never copied) */
typedef struct {
    int64_t n; /* rows in all chunks */
    char format; /* the Arrow format: 'l' int64, or where the caller allows narrower ones 'i' int32, 'I' uint32, 'C' uint8 */
    int64_t count, cap;
    struct ArrowArray *chunks; /* moved out of the stream; released by column_free */
} Column;

static void column_free(Column *c) {
    for (int64_t i = 0; i < c->count; i++)
        if (c->chunks[i].release != NULL)
            c->chunks[i].release(&c->chunks[i]);
    free(c->chunks);
    memset(c, 0, sizeof(*c));
}

/* Check one chunk's layout as far as its producer declares it.  Returns 0, or -1 with a
 * Python error set. */
static int chunk_check(const struct ArrowArray *a) {
    if (a->length < 0 || a->offset < 0 || a->n_buffers != 2 || a->buffers == NULL
        || a->length > INT64_MAX / 8 - a->offset || a->null_count < -1 || a->null_count > a->length) {
        PyErr_SetString(PyExc_ValueError, "flow binding: an int64 column chunk has an invalid layout");
        return -1;
    }
    if (a->length > 0 && (a->buffers[1] == NULL || (a->null_count != 0 && a->buffers[0] == NULL))) {
        PyErr_SetString(PyExc_ValueError, "flow binding: an int64 column chunk lacks a buffer");
        return -1;
    }
    return 0;
}

/* Read an object exporting an int64 Arrow stream (a polars Series) into ``c``; with
 * ``narrow``, also an int32, uint32 or uint8 one (``c->format`` says which). */
static int column_read_as(PyObject *obj, Column *c, int narrow) {
    memset(c, 0, sizeof(*c));
    PyObject *capsule = PyObject_CallMethod(obj, "__arrow_c_stream__", NULL);
    if (capsule == NULL)
        return -1;
    struct ArrowArrayStream *exported = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (exported == NULL || exported->release == NULL) {
        Py_DECREF(capsule);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "flow binding: the column's Arrow stream was already consumed");
        return -1;
    }
    /* moved out of the capsule: this function releases it */
    struct ArrowArrayStream stream = *exported;
    exported->release = NULL;
    Py_DECREF(capsule);

    int rc = -1;
    struct ArrowSchema schema;
    memset(&schema, 0, sizeof(schema));
    if (stream.get_schema(&stream, &schema) != 0) {
        PyErr_SetString(PyExc_ValueError, "flow binding: the column's Arrow schema could not be read");
        goto done;
    }
    const char *f = schema.format;
    int ok_format = f != NULL && f[0] != '\0' && f[1] == '\0'
        && (f[0] == 'l' || (narrow && (f[0] == 'i' || f[0] == 'I' || f[0] == 'C')));
    c->format = ok_format ? f[0] : '\0';
    if (schema.release != NULL)
        schema.release(&schema);
    if (!ok_format) {
        PyErr_SetString(PyExc_TypeError, narrow ? "flow binding: every column must be int64, int32, uint32 or uint8"
                                                : "flow binding: every column must be int64");
        goto done;
    }
    for (;;) {
        struct ArrowArray chunk;
        memset(&chunk, 0, sizeof(chunk));
        if (stream.get_next(&stream, &chunk) != 0) {
            PyErr_SetString(PyExc_ValueError, "flow binding: a chunk of the column could not be read");
            goto done;
        }
        if (chunk.release == NULL)
            break; /* end of the stream */
        if (chunk_check(&chunk) != 0 || c->n > INT64_MAX / 16 - chunk.length) {
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            chunk.release(&chunk);
            goto done;
        }
        if (c->count == c->cap) {
            int64_t want = c->cap ? 2 * c->cap : 8;
            struct ArrowArray *grown = realloc(c->chunks, (size_t)want * sizeof(*grown));
            if (grown == NULL) {
                PyErr_NoMemory();
                chunk.release(&chunk);
                goto done;
            }
            c->chunks = grown;
            c->cap = want;
        }
        c->chunks[c->count++] = chunk;
        c->n += chunk.length;
    }
    rc = 0;
done:
    stream.release(&stream);
    if (rc != 0)
        column_free(c);
    return rc;
}

static int column_read(PyObject *obj, Column *c) { return column_read_as(obj, c, 0); }

/* Reads a column's values in order across its chunks. */
typedef struct {
    const Column *col;
    int64_t chunk; /* the chunk being read */
    int64_t pos, end; /* its next and end positions (offset included) */
    const int64_t *data;
    const uint8_t *bits; /* NULL: no nulls in the chunk */
} Cursor;

static void cursor_init(Cursor *k, const Column *col) {
    memset(k, 0, sizeof(*k));
    k->col = col;
    k->chunk = -1;
}

/* Moves the cursor to the next chunk that has values left; 0 when the column is done. */
static inline int cursor_ready(Cursor *k) {
    while (k->pos >= k->end) {
        if (k->chunk + 1 >= k->col->count) return 0;
        const struct ArrowArray *a = &k->col->chunks[++k->chunk];
        k->data = (const int64_t *)a->buffers[1];
        k->bits = a->null_count == 0 ? NULL : (const uint8_t *)a->buffers[0];
        k->pos = a->offset;
        k->end = a->offset + a->length;
    }
    return 1;
}

/* The next value (the caller reads at most ``col->n`` of them); returns whether it is
 * valid (not null). */
static inline int cursor_next(Cursor *k, int64_t *value) {
    if (!cursor_ready(k)) {
        *value = 0;
        return 0;
    }
    int64_t i = k->pos++;
    *value = k->data[i];
    return k->bits == NULL || ((k->bits[i >> 3] >> (i & 7)) & 1);
}

/* cursor_next for a column read with ``narrow`` (column_read_as): an int32, uint32 or uint8
 * value widened to int64, an int64 one as it is. */
static inline int cursor_next_any(Cursor *k, int64_t *value) {
    if (!cursor_ready(k)) {
        *value = 0;
        return 0;
    }
    int64_t i = k->pos++;
    const void *data = k->data;
    switch (k->col->format) {
    case 'i': *value = ((const int32_t *)data)[i]; break;
    case 'I': *value = ((const uint32_t *)data)[i]; break;
    case 'C': *value = ((const uint8_t *)data)[i]; break;
    default: *value = ((const int64_t *)data)[i]; break;
    }
    return k->bits == NULL || ((k->bits[i >> 3] >> (i & 7)) & 1);
}

/* ---- the hash table over the endpoints' distinct keys */
/* splitmix64's finaliser: every output bit depends on every input bit */
static inline uint64_t avalanche(uint64_t h) {
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

static inline uint64_t mix(uint64_t seed, int64_t p, int64_t t, int64_t s) {
    uint64_t h = avalanche(seed ^ (uint64_t)p);
    h = avalanche(h ^ (uint64_t)t);
    return avalanche(h ^ (uint64_t)s);
}

/* A slot holds its key beside its answer, so a probe reads one cache line. */
#define SLOT_EMPTY (-2)
typedef struct {
    int64_t p, t, s;
    int64_t best; /* the largest event id seen for the key, -1 before any, SLOT_EMPTY if unused */
} Slot;

/* The slot of key (p, t, s): the one holding it, or the empty one where it would go (the
 * table is at least twice the number of keys put in it, so an empty slot is always found). */
static inline int64_t slot_probe(const Slot *tb, int64_t mask, int64_t i, int64_t p, int64_t t, int64_t s) {
    for (;;) {
        const Slot *e = &tb[i];
        if (e->best == SLOT_EMPTY || (e->p == p && e->t == t && e->s == s))
            return i;
        i = (i + 1) & mask;
    }
}

#if defined(__GNUC__)
#define PREFETCH(addr) __builtin_prefetch(addr)
#else
#define PREFETCH(addr) ((void)(addr))
#endif

/* Rows are taken BLOCK at a time: every row's first slot is computed and prefetched before
 * any is probed, so the table's cache misses (it is larger than the caches on big traces)
 * overlap instead of following one another. */
#define BLOCK 16
typedef struct {
    int64_t p[BLOCK], t[BLOCK], s[BLOCK], id[BLOCK], home[BLOCK];
    uint8_t ok[BLOCK];
} Block;

/* The slots of an open-addressing table for `keys` keys: a power of two, at least 16 and at
 * least 4/3 of the keys (at most three quarters full, so probes stay short, and no more
 * fresh pages touched than that needs: the table is written once and freed); -1, with
 * MemoryError set, when that could not fit size_t (a slot is at most 32 bytes). */
static int64_t table_slots(int64_t keys) {
    if (keys > (INT64_MAX >> 8)) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t size = 16;
    while (3 * size < 4 * keys)
        size *= 2;
    return size;
}

static PyObject *export_fixed(void *values, uint8_t *bits, int64_t n, int64_t nulls, const char *name, const char *format);
#define export_int64(values, bits, n, nulls, name) export_fixed(values, bits, n, nulls, name, "l")

static PyObject *flowbind_bind(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:bind", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6]))
        return NULL;
    /* endpoints: pid, tid, start; slices: pid, tid, start, event id */
    Column col[7];
    memset(col, 0, sizeof(col));
    Slot *table = NULL;
    uint64_t *bloom = NULL;
    int64_t *where = NULL, *out = NULL;
    uint8_t *bits = NULL;
    PyObject *result = NULL;
    for (int k = 0; k < 7; k++)
        if (column_read(objs[k], &col[k]) != 0)
            goto done;
    int64_t nf = col[0].n, ns = col[3].n;
    if (col[1].n != nf || col[2].n != nf || col[4].n != ns || col[5].n != ns || col[6].n != ns) {
        PyErr_SetString(PyExc_ValueError, "flow binding: columns of one table differ in length");
        goto done;
    }
    int64_t size = table_slots(nf);
    if (size < 0)
        goto done;
    table = malloc((size_t)size * sizeof(Slot));
    /* a one-hash Bloom filter of the endpoints' keys, 16 bits a key: most slices of a trace
     * with few flows are ruled out there, in a few cache lines, before the table is probed */
    int64_t bloom_bits = 512;
    int bloom_shift = 64 - 9;
    while (bloom_bits < 16 * nf) {
        bloom_bits *= 2;
        bloom_shift--;
    }
    bloom = calloc((size_t)(bloom_bits / 64), sizeof(uint64_t));
    where = malloc((size_t)(nf ? nf : 1) * sizeof(int64_t));
    out = malloc((size_t)(nf ? nf : 1) * sizeof(int64_t));
    bits = calloc((size_t)(nf / 8 + 1), 1);
    if (table == NULL || bloom == NULL || where == NULL || out == NULL || bits == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t nulls = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t mask = size - 1;
    /* seeded from the table's address: a trace cannot choose keys that collide */
    uint64_t seed = mix((uint64_t)(uintptr_t)table, (int64_t)(uintptr_t)where, nf, ns);
    for (int64_t i = 0; i < size; i++)
        table[i].best = SLOT_EMPTY;
    Block blk;
    Cursor fp, ft, fs;
    cursor_init(&fp, &col[0]);
    cursor_init(&ft, &col[1]);
    cursor_init(&fs, &col[2]);
    for (int64_t i0 = 0; i0 < nf; i0 += BLOCK) {
        int m = nf - i0 < BLOCK ? (int)(nf - i0) : BLOCK;
        for (int b = 0; b < m; b++) {
            blk.ok[b] = (uint8_t)(cursor_next(&fp, &blk.p[b]) & cursor_next(&ft, &blk.t[b]) & cursor_next(&fs, &blk.s[b]));
            uint64_t h = mix(seed, blk.p[b], blk.t[b], blk.s[b]);
            blk.home[b] = (int64_t)(h & (uint64_t)mask);
            PREFETCH(&table[blk.home[b]]);
            if (blk.ok[b]) {
                uint64_t at = h >> bloom_shift;
                bloom[at >> 6] |= (uint64_t)1 << (at & 63);
            }
        }
        for (int b = 0; b < m; b++) {
            int64_t i = i0 + b;
            where[i] = -1;
            if (!blk.ok[b])
                continue; /* a null never matches */
            int64_t k = slot_probe(table, mask, blk.home[b], blk.p[b], blk.t[b], blk.s[b]);
            if (table[k].best == SLOT_EMPTY) {
                table[k].p = blk.p[b];
                table[k].t = blk.t[b];
                table[k].s = blk.s[b];
                table[k].best = -1;
            }
            where[i] = k;
        }
    }
    Cursor sp, st, ss, se;
    cursor_init(&sp, &col[3]);
    cursor_init(&st, &col[4]);
    cursor_init(&ss, &col[5]);
    cursor_init(&se, &col[6]);
    for (int64_t j0 = 0; j0 < ns; j0 += BLOCK) {
        int m = ns - j0 < BLOCK ? (int)(ns - j0) : BLOCK;
        for (int b = 0; b < m; b++) {
            blk.ok[b] = (uint8_t)(cursor_next(&sp, &blk.p[b]) & cursor_next(&st, &blk.t[b]) & cursor_next(&ss, &blk.s[b])
                                  & cursor_next(&se, &blk.id[b]));
            uint64_t h = mix(seed, blk.p[b], blk.t[b], blk.s[b]);
            uint64_t at = h >> bloom_shift;
            if (!((bloom[at >> 6] >> (at & 63)) & 1)) {
                blk.ok[b] = 0; /* certainly no endpoint's key */
                continue;
            }
            blk.home[b] = (int64_t)(h & (uint64_t)mask);
            PREFETCH(&table[blk.home[b]]);
        }
        for (int b = 0; b < m; b++) {
            if (!blk.ok[b])
                continue;
            Slot *e = &table[slot_probe(table, mask, blk.home[b], blk.p[b], blk.t[b], blk.s[b])];
            if (e->best != SLOT_EMPTY && blk.id[b] > e->best)
                e->best = blk.id[b];
        }
    }
    for (int64_t i = 0; i < nf; i++) {
        if (i + BLOCK < nf && where[i + BLOCK] >= 0)
            PREFETCH(&table[where[i + BLOCK]]);
        /* event ids are row numbers (never negative): below zero is "no slice" */
        int64_t found = where[i] >= 0 ? table[where[i]].best : -1;
        if (found >= 0) {
            out[i] = found;
            bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            out[i] = 0;
            nulls++;
        }
    }
    Py_END_ALLOW_THREADS
    result = export_int64(out, bits, nf, nulls, "event_id");
    out = NULL; /* owned by the exported array now (or freed with it) */
    bits = NULL;
done:
    for (int k = 0; k < 7; k++)
        column_free(&col[k]);
    free(table);
    free(bloom);
    free(where);
    free(out);
    free(bits);
    return result;
}

/* ---- the result as an Arrow array (int64 or uint32) polars takes over */
typedef struct {
    const void *buffers[2];
} Owned;

static void release_array(struct ArrowArray *a) {
    if (a->release == NULL)
        return;
    Owned *o = a->private_data;
    free((void *)o->buffers[0]);
    free((void *)o->buffers[1]);
    free(o);
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s) { s->release = NULL; }

static void capsule_free_array(PyObject *capsule) {
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, "arrow_array");
    if (a != NULL && a->release != NULL)
        a->release(a);
    free(a);
}

static void capsule_free_schema(PyObject *capsule) {
    struct ArrowSchema *s = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (s != NULL && s->release != NULL)
        s->release(s);
    free(s);
}

/* A fixed-width Arrow array of ``format`` (a static string: "l" int64, "I" uint32).  Takes
 * ownership of ``values`` and ``bits``, also when it fails. */
static PyObject *export_fixed(void *values, uint8_t *bits, int64_t n, int64_t nulls, const char *name, const char *format) {
    struct ArrowSchema *s = calloc(1, sizeof(*s));
    struct ArrowArray *a = calloc(1, sizeof(*a));
    Owned *o = calloc(1, sizeof(*o));
    if (s == NULL || a == NULL || o == NULL) {
        free(s);
        free(a);
        free(o);
        free(values);
        free(bits);
        return PyErr_NoMemory();
    }
    s->format = format;
    s->name = name;
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = release_schema;
    o->buffers[0] = bits;
    o->buffers[1] = values;
    a->length = n;
    a->null_count = nulls;
    a->n_buffers = 2;
    a->buffers = o->buffers;
    a->private_data = o;
    a->release = release_array;
    PyObject *sc = PyCapsule_New(s, "arrow_schema", capsule_free_schema);
    if (sc == NULL) {
        free(s);
        release_array(a);
        free(a);
        return NULL;
    }
    PyObject *ac = PyCapsule_New(a, "arrow_array", capsule_free_array);
    if (ac == NULL) {
        Py_DECREF(sc);
        release_array(a);
        free(a);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, sc, ac);
    Py_DECREF(sc);
    Py_DECREF(ac); /* on failure this releases the array and its buffers */
    return pair;
}

/* ---- the events' canonical order (parsers/kineto.py, _canonical_order)
 *
 * A stable sort of the rows by (start ascending, duration descending, then up to six keys
 * ascending), nulls last in every key and equal to one another, ties kept in row order;
 * schema.canonical_order's polars sort gives the same permutation.  The rows are first put
 * in order of start alone by an LSD radix sort of the start values (stable; a byte that is
 * the same in every value costs no pass), the null starts after them in row order; only
 * the rows that share their start with a neighbour are then sorted by every key, within
 * their run, from a compact copy of just those rows' keys. */
#define ORDER_KEYS 8
#define RADIX_BITS 11
#define RADIX_SIZE (1 << RADIX_BITS)
typedef struct {
    int64_t v[ORDER_KEYS]; /* keys 1.. (key 0, the start, is equal within a run) */
    uint8_t valid[ORDER_KEYS];
    int64_t row;
} TieRow;

/* compares two tied rows: key 1 (the duration) descending, the others ascending, nulls last */
static int tie_cmp(const TieRow *a, const TieRow *b, int nkeys) {
    for (int k = 1; k < nkeys; k++) {
        if (a->valid[k] != b->valid[k])
            return a->valid[k] ? -1 : 1; /* nulls last */
        if (!a->valid[k] || a->v[k] == b->v[k])
            continue;
        int less = a->v[k] < b->v[k];
        if (k == 1)
            less = !less;
        return less ? -1 : 1;
    }
    return a->row < b->row ? -1 : (a->row > b->row ? 1 : 0);
}

/* insertion sort for short runs, merge sort (with ``tmp``) for long ones */
static void tie_sort(TieRow *r, TieRow *tmp, int64_t n, int nkeys) {
    if (n <= 16) {
        for (int64_t i = 1; i < n; i++) {
            TieRow x = r[i];
            int64_t j = i;
            while (j > 0 && tie_cmp(&x, &r[j - 1], nkeys) < 0) {
                r[j] = r[j - 1];
                j--;
            }
            r[j] = x;
        }
        return;
    }
    int64_t h = n / 2;
    tie_sort(r, tmp, h, nkeys);
    tie_sort(r + h, tmp, n - h, nkeys);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        tmp[o++] = tie_cmp(&r[j], &r[i], nkeys) < 0 ? r[j++] : r[i++];
    while (i < h)
        tmp[o++] = r[i++];
    while (j < n)
        tmp[o++] = r[j++];
    memcpy(r, tmp, (size_t)n * sizeof(TieRow));
}

static PyObject *flowbind_order(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 2 || nargs > ORDER_KEYS) {
        PyErr_SetString(PyExc_TypeError, "order: takes the start, the duration and up to six more key columns");
        return NULL;
    }
    int nkeys = (int)nargs;
    Column col[ORDER_KEYS];
    memset(col, 0, sizeof(col));
    uint64_t *keys = NULL, *keys2 = NULL;
    uint32_t *rows = NULL, *rows2 = NULL, *out = NULL; /* row numbers: n is checked to fit */
    int32_t *slot = NULL;
    int64_t *radix = NULL;
    uint8_t *valid0 = NULL;
    TieRow *ties = NULL, *tmp = NULL;
    int64_t *tied_rows = NULL, *event_id = NULL;
    PyObject *result = NULL;
    for (int k = 0; k < nkeys; k++)
        if (column_read_as(PyTuple_GET_ITEM(args, k), &col[k], k >= 2) != 0) /* start and duration: int64 */
            goto done;
    int64_t n = col[0].n;
    for (int k = 1; k < nkeys; k++)
        if (col[k].n != n) {
            PyErr_SetString(PyExc_ValueError, "order: the key columns differ in length");
            goto done;
        }
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "order: more rows than a 32-bit row number holds");
        goto done;
    }
    size_t m = (size_t)(n ? n : 1);
    keys = malloc(m * sizeof(uint64_t));
    keys2 = malloc(m * sizeof(uint64_t));
    rows = malloc(m * sizeof(uint32_t));
    rows2 = malloc(m * sizeof(uint32_t));
    valid0 = malloc(m);
    radix = malloc(RADIX_SIZE * sizeof(int64_t));
    if (keys == NULL || keys2 == NULL || rows == NULL || rows2 == NULL || valid0 == NULL || radix == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t ntied = 0, nvalid = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    /* the valid starts as offsets from the smallest, which sort as the values do */
    Cursor c0;
    cursor_init(&c0, &col[0]);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    int rising = 1; /* the valid starts never fall in row order: no pass is needed */
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        valid0[i] = (uint8_t)cursor_next(&c0, &v);
        if (valid0[i]) {
            rising &= nvalid == 0 || v >= hi;
            keys[nvalid] = (uint64_t)v;
            rows[nvalid++] = (uint32_t)i;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    }
    /* LSD radix passes of RADIX_BITS bits, only as many as the range of the starts needs */
    uint64_t span = nvalid ? (uint64_t)hi - (uint64_t)lo : 0;
    int passes = 0;
    while (!rising && passes * RADIX_BITS < 64 && (span >> (passes * RADIX_BITS)) != 0)
        passes++;
    for (int64_t i = 0; i < nvalid; i++)
        keys[i] -= (uint64_t)lo;
    for (int b = 0; b < passes; b++) {
        int shift = b * RADIX_BITS;
        memset(radix, 0, RADIX_SIZE * sizeof(int64_t));
        for (int64_t i = 0; i < nvalid; i++)
            radix[(keys[i] >> shift) & (RADIX_SIZE - 1)]++;
        int64_t pos = 0;
        for (int d = 0; d < RADIX_SIZE; d++) {
            int64_t c = radix[d];
            radix[d] = pos;
            pos += c;
        }
        for (int64_t i = 0; i < nvalid; i++) {
            int64_t to = radix[(keys[i] >> shift) & (RADIX_SIZE - 1)]++;
            keys2[to] = keys[i];
            rows2[to] = rows[i];
        }
        uint64_t *tk = keys; keys = keys2; keys2 = tk;
        uint32_t *tr = rows; rows = rows2; rows2 = tr;
    }
    /* the null starts last, in row order */
    int64_t at = nvalid;
    for (int64_t i = 0; i < n; i++)
        if (!valid0[i])
            rows[at++] = (uint32_t)i;
    /* the second buffers of the passes and the null flags are done with: freed before the
     * tied rows' keys and the inverse are allocated, which keeps the peak lower */
    free(keys2);
    free(rows2);
    free(valid0);
    keys2 = NULL;
    rows2 = NULL;
    valid0 = NULL;
    slot = malloc(m * sizeof(int32_t));
    if (slot == NULL)
        failed = 1;
    else {
        /* the rows in a run of equal starts (the null starts are one run) get a compact slot,
         * in sorted order, so each run's slots are contiguous */
        for (int64_t i = 0; i < n; i++)
            slot[i] = -1;
        for (int64_t p = 0; p < n; p++) {
            int tied;
            if (p < nvalid)
                tied = (p > 0 && keys[p - 1] == keys[p]) || (p + 1 < nvalid && keys[p + 1] == keys[p]);
            else
                tied = n - nvalid > 1;
            if (tied)
                slot[rows[p]] = (int32_t)ntied++;
        }
        if (ntied > 0) {
            ties = malloc((size_t)ntied * sizeof(TieRow));
            tmp = malloc((size_t)ntied * sizeof(TieRow));
            tied_rows = malloc((size_t)ntied * sizeof(int64_t));
            if (ties == NULL || tmp == NULL || tied_rows == NULL)
                failed = 1;
        }
        if (!failed && ntied > 0) {
            /* the tied rows in row order (``tied``), then each other key read at just those rows,
             * walking the column's chunks forward */
            int64_t t = 0;
            for (int64_t i = 0; i < n; i++)
                if (slot[i] >= 0) {
                    ties[slot[i]].row = i;
                    tied_rows[t++] = i;
                }
            for (int k = 1; k < nkeys; k++) {
                const Column *c = &col[k];
                int64_t chunk = 0, base = 0; /* the chunk holding row ``base`` onwards */
                for (int64_t j = 0; j < ntied; j++) {
                    int64_t i = tied_rows[j];
                    while (chunk < c->count && i >= base + c->chunks[chunk].length)
                        base += c->chunks[chunk++].length;
                    int64_t v = 0;
                    int ok = 0;
                    if (chunk < c->count) { /* always: the column has n rows */
                        const struct ArrowArray *a = &c->chunks[chunk];
                        int64_t at = a->offset + (i - base);
                        const uint8_t *bits = a->null_count == 0 ? NULL : (const uint8_t *)a->buffers[0];
                        ok = bits == NULL || ((bits[at >> 3] >> (at & 7)) & 1);
                        if (ok) {
                            const void *data = a->buffers[1];
                            switch (c->format) {
                            case 'i': v = ((const int32_t *)data)[at]; break;
                            case 'I': v = ((const uint32_t *)data)[at]; break;
                            case 'C': v = ((const uint8_t *)data)[at]; break;
                            default: v = ((const int64_t *)data)[at]; break;
                            }
                        }
                    }
                    int64_t sl = slot[i];
                    ties[sl].v[k] = v;
                    ties[sl].valid[k] = (uint8_t)ok;
                }
            }
            /* each run sorted by every key; a run's rows fill the positions it holds */
            int64_t p = 0;
            while (p < n) {
                if (slot[rows[p]] < 0) {
                    p++;
                    continue;
                }
                int64_t q = p + 1;
                int null_run = p >= nvalid;
                while (q < n && (null_run || q < nvalid) && slot[rows[q]] >= 0
                       && (null_run || keys[q] == keys[p]))
                    q++;
                int64_t first = slot[rows[p]];
                tie_sort(ties + first, tmp, q - p, nkeys);
                for (int64_t j = p; j < q; j++)
                    rows[j] = (uint32_t)ties[first + (j - p)].row;
                p = q;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    /* the event id each row gets: the inverse of the order (what the sort needed is freed
     * first) */
    free(keys);
    free(slot);
    free(ties);
    free(tmp);
    free(tied_rows);
    keys = NULL;
    slot = NULL;
    ties = tmp = NULL;
    tied_rows = NULL;
    event_id = malloc(m * sizeof(int64_t));
    if (event_id == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t p = 0; p < n; p++)
        event_id[rows[p]] = p;
    out = rows;
    rows = NULL;
    PyObject *order = export_fixed(out, NULL, n, 0, "order", "I");
    PyObject *ids = export_int64(event_id, NULL, n, 0, "event_id");
    event_id = NULL; /* owned by ``ids`` now, also when it failed */
    if (order != NULL && ids != NULL)
        result = PyTuple_Pack(2, order, ids);
    Py_XDECREF(order);
    Py_XDECREF(ids);
done:
    for (int k = 0; k < nkeys; k++)
        column_free(&col[k]);
    free(keys);
    free(keys2);
    free(rows);
    free(rows2);
    free(valid0);
    free(radix);
    free(slot);
    free(ties);
    free(tmp);
    free(tied_rows);
    free(event_id);
    return result;
}

/* ---- launch -> GPU activity links by correlation id
 *
 * Rows are events in canonical order (a row's position is its event id).  A launch row
 * (its kind's bit set in launch_mask) with a correlation id is trusted only when no other
 * launch row has that id; every GPU row (its kind's bit in target_mask) with the id of a
 * trusted launch is linked to it.  The links come in GPU row order, as the pure Python
 * path's join (parsers/kineto.py, _links) gives them.  A null kind or id matches nothing. */
typedef struct {
    int64_t corr;
    int64_t row;   /* the launch row; -1 once a second launch row has the id */
    int64_t used;  /* 0: empty slot */
} CorrSlot;

static inline int64_t corr_probe(const CorrSlot *tb, int64_t mask, uint64_t seed, int64_t corr) {
    int64_t i = (int64_t)(avalanche(seed ^ (uint64_t)corr) & (uint64_t)mask);
    while (tb[i].used && tb[i].corr != corr)
        i = (i + 1) & mask;
    return i;
}

static inline int kind_in(int64_t kind, uint64_t mask) { return kind >= 0 && kind < 64 && ((mask >> kind) & 1); }

static PyObject *flowbind_links(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[2];
    unsigned long long launch_mask, target_mask;
    if (!PyArg_ParseTuple(args, "OOKK:links", &objs[0], &objs[1], &launch_mask, &target_mask))
        return NULL;
    Column col[2];
    memset(col, 0, sizeof(col));
    CorrSlot *table = NULL;
    int64_t *launch = NULL, *gpu = NULL, *corr = NULL;
    PyObject *result = NULL, *a = NULL, *b = NULL, *c = NULL;
    /* the kind as any integer column (an enum's uint8 codes), the ids as int64 */
    for (int k = 0; k < 2; k++)
        if (column_read_as(objs[k], &col[k], k == 0) != 0)
            goto done;
    int64_t n = col[0].n;
    if (col[1].n != n) {
        PyErr_SetString(PyExc_ValueError, "link pairing: the kind and correlation columns differ in length");
        goto done;
    }
    /* the launch rows are counted first: the table holds only their ids */
    int64_t launches = 0, targets = 0;
    Cursor ck, cc;
    Py_BEGIN_ALLOW_THREADS
    cursor_init(&ck, &col[0]);
    cursor_init(&cc, &col[1]);
    for (int64_t i = 0; i < n; i++) {
        int64_t kind, id;
        int ok = cursor_next_any(&ck, &kind) & cursor_next(&cc, &id);
        if (ok && kind_in(kind, launch_mask))
            launches++;
        if (ok && kind_in(kind, target_mask))
            targets++;
    }
    Py_END_ALLOW_THREADS
    int64_t size = table_slots(launches);
    if (size < 0)
        goto done;
    table = calloc((size_t)size, sizeof(CorrSlot));
    launch = malloc((size_t)(targets ? targets : 1) * sizeof(int64_t));
    gpu = malloc((size_t)(targets ? targets : 1) * sizeof(int64_t));
    corr = malloc((size_t)(targets ? targets : 1) * sizeof(int64_t));
    if (table == NULL || launch == NULL || gpu == NULL || corr == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t m = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t mask = size - 1;
    /* seeded from the table's address: a trace cannot choose ids that collide */
    uint64_t seed = avalanche((uint64_t)(uintptr_t)table ^ avalanche((uint64_t)(uintptr_t)gpu ^ (uint64_t)n));
    cursor_init(&ck, &col[0]);
    cursor_init(&cc, &col[1]);
    for (int64_t i = 0; i < n; i++) {
        int64_t kind, id;
        int ok = cursor_next_any(&ck, &kind) & cursor_next(&cc, &id);
        if (!ok || !kind_in(kind, launch_mask))
            continue;
        CorrSlot *e = &table[corr_probe(table, mask, seed, id)];
        if (e->used)
            e->row = -1; /* a second launch row with this id: not trusted */
        else {
            e->used = 1;
            e->corr = id;
            e->row = i;
        }
    }
    cursor_init(&ck, &col[0]);
    cursor_init(&cc, &col[1]);
    for (int64_t i = 0; i < n && m < targets; i++) {
        int64_t kind, id;
        int ok = cursor_next_any(&ck, &kind) & cursor_next(&cc, &id);
        if (!ok || !kind_in(kind, target_mask))
            continue;
        const CorrSlot *e = &table[corr_probe(table, mask, seed, id)];
        if (e->used && e->row >= 0) {
            launch[m] = e->row;
            gpu[m] = i;
            corr[m] = id;
            m++;
        }
    }
    Py_END_ALLOW_THREADS
    /* each export takes its buffer over, also when it fails */
    a = export_int64(launch, NULL, m, 0, "launch_event_id");
    launch = NULL;
    if (a == NULL)
        goto done;
    b = export_int64(gpu, NULL, m, 0, "gpu_event_id");
    gpu = NULL;
    if (b == NULL)
        goto done;
    c = export_int64(corr, NULL, m, 0, "correlation");
    corr = NULL;
    if (c != NULL)
        result = PyTuple_Pack(3, a, b, c);
done:
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    for (int k = 0; k < 2; k++)
        column_free(&col[k]);
    free(table);
    free(launch);
    free(gpu);
    free(corr);
    return result;
}

/* ---- flows paired by (kind, id)
 *
 * Rows are flow endpoints in file order: end 1 a source ("s"), 2 a destination ("f"),
 * anything else a step that pairs with nothing; kind a small code; id the flow id; event
 * the endpoint's bound slice (null where none).  Each distinct (kind, id) of a source or
 * destination row is one flow, whose source (destination) is the event of its first
 * source (destination) row in file order, null where it has none.  The flows come in
 * order of (kind, id), both ascending (each pair is one flow, so the order is total).  A
 * null end, kind or id pairs nothing. */
typedef struct {
    int64_t id;
    int64_t kind; /* -1: empty slot */
    int64_t flow; /* its index in the output */
} FlowSlot;

/* whether flow a comes before flow b: by kind, then by id */
static inline int flow_before(const int64_t *kinds, const int64_t *ids, int64_t a, int64_t b) {
    return kinds[a] < kinds[b] || (kinds[a] == kinds[b] && ids[a] < ids[b]);
}

static inline int bit_get(const uint8_t *bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

static inline void bit_put(uint8_t *bits, int64_t i, int v) {
    bits[i >> 3] = (uint8_t)((bits[i >> 3] & ~(1u << (i & 7))) | ((unsigned)(v != 0) << (i & 7)));
}

/* Puts the flows (found in order of first appearance) in order of (kind, id), in place.
 * A bottom-up merge sort of their positions, which copies a pair of runs already in order
 * as it is (flows mostly appear in id order, so it costs a few passes over the positions),
 * then each cycle of the permutation rotated through the six arrays.  ``scratch`` holds
 * 2 * flows positions; ``done`` flows / 8 + 1 bytes, zeroed. */
static void flows_sort(int64_t flows, int64_t *ids, int64_t *kinds, int64_t *src, int64_t *dst, uint8_t *src_bits,
                       uint8_t *dst_bits, int64_t *scratch, uint8_t *done) {
    int64_t f = 1;
    while (f < flows && !flow_before(kinds, ids, f, f - 1))
        f++;
    if (f >= flows)
        return; /* in order already */
    int64_t *perm = scratch, *tmp = scratch + flows;
    for (int64_t i = 0; i < flows; i++)
        perm[i] = i;
    for (int64_t width = 1; width < flows; width *= 2) {
        for (int64_t lo = 0; lo < flows; lo += 2 * width) {
            int64_t mid = lo + width < flows ? lo + width : flows;
            int64_t hi = lo + 2 * width < flows ? lo + 2 * width : flows;
            int64_t i = lo, j = mid, k = lo;
            if (mid < hi && flow_before(kinds, ids, perm[mid], perm[mid - 1]))
                while (i < mid && j < hi)
                    tmp[k++] = flow_before(kinds, ids, perm[j], perm[i]) ? perm[j++] : perm[i++];
            while (i < mid)
                tmp[k++] = perm[i++];
            while (j < hi)
                tmp[k++] = perm[j++];
        }
        int64_t *t = perm;
        perm = tmp;
        tmp = t;
    }
    /* position p takes flow perm[p]: each cycle moved once, its first value held aside */
    for (int64_t p = 0; p < flows; p++) {
        if (bit_get(done, p) || perm[p] == p)
            continue;
        int64_t id = ids[p], kind = kinds[p], s = src[p], d = dst[p];
        int sb = bit_get(src_bits, p), db = bit_get(dst_bits, p);
        int64_t q = p;
        for (;;) {
            bit_put(done, q, 1);
            int64_t k = perm[q];
            if (k == p) {
                ids[q] = id;
                kinds[q] = kind;
                src[q] = s;
                dst[q] = d;
                bit_put(src_bits, q, sb);
                bit_put(dst_bits, q, db);
                break;
            }
            ids[q] = ids[k];
            kinds[q] = kinds[k];
            src[q] = src[k];
            dst[q] = dst[k];
            bit_put(src_bits, q, bit_get(src_bits, k));
            bit_put(dst_bits, q, bit_get(dst_bits, k));
            q = k;
        }
    }
}

static PyObject *flowbind_pair(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO:pair", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    Column col[4];
    memset(col, 0, sizeof(col));
    FlowSlot *table = NULL;
    int64_t *ids = NULL, *kinds = NULL, *src = NULL, *dst = NULL;
    uint8_t *src_bits = NULL, *dst_bits = NULL, *src_seen = NULL, *dst_seen = NULL;
    PyObject *result = NULL, *o[4] = {NULL, NULL, NULL, NULL};
    /* the end and the kind as any integer column (uint8 flags, uint32 codes), the ids as int64 */
    for (int k = 0; k < 4; k++)
        if (column_read_as(objs[k], &col[k], k < 2) != 0)
            goto done;
    int64_t n = col[0].n;
    if (col[1].n != n || col[2].n != n || col[3].n != n) {
        PyErr_SetString(PyExc_ValueError, "flow pairing: the columns differ in length");
        goto done;
    }
    int64_t size = table_slots(n);
    if (size < 0)
        goto done;
    size_t rows = (size_t)(n ? n : 1);
    table = malloc((size_t)size * sizeof(FlowSlot));
    ids = malloc(rows * sizeof(int64_t));
    kinds = malloc(rows * sizeof(int64_t));
    src = calloc(rows, sizeof(int64_t));
    dst = calloc(rows, sizeof(int64_t));
    src_bits = calloc(rows / 8 + 1, 1);
    dst_bits = calloc(rows / 8 + 1, 1);
    src_seen = calloc(rows / 8 + 1, 1);
    dst_seen = calloc(rows / 8 + 1, 1);
    if (table == NULL || ids == NULL || kinds == NULL || src == NULL || dst == NULL || src_bits == NULL
        || dst_bits == NULL || src_seen == NULL || dst_seen == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t flows = 0, src_nulls = 0, dst_nulls = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t mask = size - 1;
    /* seeded from the table's address: a trace cannot choose ids that collide */
    uint64_t seed = avalanche((uint64_t)(uintptr_t)table ^ avalanche((uint64_t)(uintptr_t)ids ^ (uint64_t)n));
    for (int64_t i = 0; i < size; i++)
        table[i].kind = -1;
    Cursor ce, ck, ci, cv;
    cursor_init(&ce, &col[0]);
    cursor_init(&ck, &col[1]);
    cursor_init(&ci, &col[2]);
    cursor_init(&cv, &col[3]);
    for (int64_t r = 0; r < n; r++) {
        int64_t end, kind, id, event;
        int ok = cursor_next_any(&ce, &end) & cursor_next_any(&ck, &kind) & cursor_next(&ci, &id);
        int bound = cursor_next(&cv, &event);
        if (!ok || (end != 1 && end != 2) || kind < 0)
            continue;
        int64_t i = (int64_t)(mix(seed, kind, id, 0) & (uint64_t)mask);
        while (table[i].kind >= 0 && (table[i].kind != kind || table[i].id != id))
            i = (i + 1) & mask;
        FlowSlot *e = &table[i];
        if (e->kind < 0) { /* at most one new flow a row: flows < n */
            e->kind = kind;
            e->id = id;
            e->flow = flows;
            ids[flows] = id;
            kinds[flows] = kind;
            flows++;
        }
        int64_t f = e->flow;
        uint8_t bit = (uint8_t)(1u << (f & 7));
        /* only the flow's first row of this end counts, bound or not */
        uint8_t *seen = end == 1 ? src_seen : dst_seen;
        if (seen[f >> 3] & bit)
            continue;
        seen[f >> 3] |= bit;
        if (bound) {
            (end == 1 ? src : dst)[f] = event;
            (end == 1 ? src_bits : dst_bits)[f >> 3] |= bit;
        }
    }
    for (int64_t f = 0; f < flows; f++) {
        src_nulls += !((src_bits[f >> 3] >> (f & 7)) & 1);
        dst_nulls += !((dst_bits[f >> 3] >> (f & 7)) & 1);
    }
    /* the table is done with: its memory (at least 24 bytes a slot, at least a slot a row)
     * is the sort's scratch of two positions a flow, and the seen bits its cycle marks */
    memset(src_seen, 0, rows / 8 + 1);
    flows_sort(flows, ids, kinds, src, dst, src_bits, dst_bits, (int64_t *)(void *)table, src_seen);
    Py_END_ALLOW_THREADS
    o[0] = export_int64(ids, NULL, flows, 0, "flow_id");
    ids = NULL;
    if (o[0] == NULL)
        goto done;
    o[1] = export_int64(kinds, NULL, flows, 0, "flow_kind");
    kinds = NULL;
    if (o[1] == NULL)
        goto done;
    o[2] = export_int64(src, src_bits, flows, src_nulls, "src_event_id");
    src = NULL;
    src_bits = NULL;
    if (o[2] == NULL)
        goto done;
    o[3] = export_int64(dst, dst_bits, flows, dst_nulls, "dst_event_id");
    dst = NULL;
    dst_bits = NULL;
    if (o[3] != NULL)
        result = PyTuple_Pack(4, o[0], o[1], o[2], o[3]);
done:
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(o[k]);
        column_free(&col[k]);
    }
    free(table);
    free(ids);
    free(kinds);
    free(src);
    free(dst);
    free(src_bits);
    free(dst_bits);
    free(src_seen);
    free(dst_seen);
    return result;
}

static PyMethodDef flowbind_methods[] = {
    {"bind", flowbind_bind, METH_VARARGS,
     "bind(flow_pid, flow_tid, flow_start, slice_pid, slice_tid, slice_start, slice_event_id) -> "
     "(schema capsule, array capsule): per flow endpoint, the largest event id of a slice with "
     "its (pid, tid, start), or null."},
    {"links", flowbind_links, METH_VARARGS,
     "links(kind, correlation, launch_mask, target_mask) -> three (schema capsule, array capsule) "
     "pairs: launch row, GPU row and correlation id of every GPU row whose id names exactly one "
     "launch row, in GPU row order (kind: int64, int32, uint32 or uint8; correlation: int64)."},
    {"pair", flowbind_pair, METH_VARARGS,
     "pair(end, kind, flow_id, event_id) -> four (schema capsule, array capsule) pairs: flow id, "
     "kind, source and destination event of every distinct (kind, id), in order of (kind, id) "
     "(end and kind: int64, int32, uint32 or uint8; flow_id and event_id: int64)."},
    {"order", flowbind_order, METH_VARARGS,
     "order(start, duration, *keys) -> two (schema capsule, array capsule) pairs: the row order "
     "(uint32) of a stable sort by start, duration descending, then each key, nulls last (up to "
     "six more keys), and its inverse, the position (int64) each row is sorted to."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef flowbind_module = {
    PyModuleDef_HEAD_INIT, "_flowbind", "Flow endpoints bound to slices, and the events' canonical order (see tracekit/native/_flowbind.c).", 0,
    flowbind_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__flowbind(void) { return PyModule_Create(&flowbind_module); }
