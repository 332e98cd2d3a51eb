/* The cache's column files, memory-mapped and handed to polars without a copy.
 *
 * tracekit/cache.py writes a cache entry as one file: a JSON header that describes every
 * column of every table (Arrow format string, length, null count, and where each buffer
 * lies in the file), followed by the raw Arrow buffers, each 64-byte aligned.  This module
 * maps such a file read-only and exports each table as an Arrow C Data Interface struct
 * array (a pair of PyCapsules, as ``__arrow_c_array__`` returns them) whose buffers point
 * into the mapping, so polars imports the columns without decoding or copying them: the
 * pages are read from the page cache when an analysis first touches them.  A column that
 * holds only nulls has no buffers in the file (its description's ``buffers`` is None): its
 * buffers all point at one read-only anonymous mapping, as long as the largest of them,
 * that nothing writes, so the kernel backs it with its shared zero page (no memory).
 *
 * The file may be damaged (or hostile), so before anything is exported every buffer is
 * checked to lie inside the mapping and to be large enough for its column's length, every
 * validity bitmap's null count is recounted, every string view that points outside its
 * inline bytes is checked against its data buffer, and every dictionary index against
 * the dictionary's length: polars can then never read outside the mapping.  A file that
 * fails a check raises ValueError (the cache then drops the entry and parses again).
 *
 * The mapping (with the zero mapping) is shared by every exported array and schema through
 * an atomic reference count; both are unmapped when the last one is released (polars may release from any
 * thread, without the GIL).  No global state; the checks run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "arrow_abi.h" /* tracekit/native/arrow_abi.h: the Arrow C data interface */


/* ---- the shared mapping */
typedef struct {
    void *base;
    size_t size;
    void *zero; /* a read-only anonymous mapping, never written (it costs no memory): the
                 * buffers of every column that holds only nulls; NULL when none does */
    size_t zero_size;
    long refs; /* atomic */
} Mapping;

static void mapping_ref(Mapping *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED); }

static void mapping_unref(Mapping *m) {
    if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        munmap(m->base, m->size);
        if (m->zero != NULL) munmap(m->zero, m->zero_size);
        free(m);
    }
}

/* ---- a column as the header describes it */
#define MAX_BUFFERS 4096
#define MAX_CHILDREN 4096
#define MAX_LENGTH ((int64_t)1 << 40)

enum Layout { FIXED, BITS, VIEWS, OFFSETS };

typedef struct Col {
    char *name;
    char *format;
    char *metadata; /* Arrow's binary metadata blob, or NULL */
    int64_t flags;
    int64_t length, null_count, offset;
    int64_t n_buffers; /* as given (views: validity, views, then the data buffers) */
    uint64_t *buf_off, *buf_size; /* buf_size[i] == UINT64_MAX: no buffer (None) */
    struct Col *dictionary;
    enum Layout layout;
    int width; /* bytes per value (FIXED) */
    int zero;  /* nulls only, no stored buffers: each buffer is the shared zero region */
} Col;

static void col_free(Col *c) {
    if (c == NULL) return;
    free(c->name);
    free(c->format);
    free(c->metadata);
    free(c->buf_off);
    free(c->buf_size);
    col_free(c->dictionary);
    free(c);
}

static int layout_of(Col *c) {
    const char *f = c->format;
    if (f[0] != '\0' && f[1] == '\0') {
        switch (f[0]) {
            case 'c': case 'C': c->layout = FIXED; c->width = 1; return 0;
            case 's': case 'S': c->layout = FIXED; c->width = 2; return 0;
            case 'i': case 'I': case 'f': c->layout = FIXED; c->width = 4; return 0;
            case 'l': case 'L': case 'g': c->layout = FIXED; c->width = 8; return 0;
            case 'b': c->layout = BITS; c->width = 0; return 0;
            case 'u': c->layout = OFFSETS; c->width = 4; return 0;
            case 'U': c->layout = OFFSETS; c->width = 8; return 0;
            default: break;
        }
    }
    if (strcmp(f, "vu") == 0 || strcmp(f, "vz") == 0) {
        c->layout = VIEWS;
        c->width = 16;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "unsupported column format %R", PyUnicode_FromString(f));
    return -1;
}

/* A header's column description (the dict cache.py writes: name, format, metadata, flags,
 * length, null_count, buffers, dictionary) as a Col; buffer offsets are relative to
 * ``start``.  ``buffers`` None: a column of nulls only, backed by the shared zero region. */
static PyObject *desc_get(PyObject *desc, const char *key) {
    PyObject *v = PyDict_GetItemString(desc, key); /* borrowed; NULL without an error when absent */
    if (v == NULL && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "a column without %s", key);
    return v;
}

static int desc_int(PyObject *desc, const char *key, long long *out) {
    PyObject *v = desc_get(desc, key);
    if (v == NULL) return -1;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "a column's %s is not an integer", key);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* a str's UTF-8 bytes, copied (NUL-terminated; an embedded NUL is refused) */
static char *dup_text(PyObject *obj, Py_ssize_t *len_out) {
    Py_ssize_t len;
    if (!PyUnicode_Check(obj)) {
        PyErr_SetString(PyExc_ValueError, "a column's name, format or metadata is not text");
        return NULL;
    }
    const char *data = PyUnicode_AsUTF8AndSize(obj, &len);
    if (data == NULL) return NULL;
    if (memchr(data, '\0', (size_t)len) != NULL) {
        PyErr_SetString(PyExc_ValueError, "a column's text holds a NUL byte");
        return NULL;
    }
    char *copy = malloc((size_t)len + 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, data, (size_t)len + 1);
    if (len_out) *len_out = len;
    return copy;
}

/* [[key, value], ...] as Arrow's binary metadata blob: int32 count, then int32 length +
 * bytes per key and value; NULL (no error) for an empty list */
static char *metadata_blob(PyObject *pairs, int *failed) {
    *failed = 1;
    if (!PyList_Check(pairs)) {
        PyErr_SetString(PyExc_ValueError, "metadata must be a list of pairs");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    if (n == 0) {
        *failed = 0;
        return NULL;
    }
    if (n > 4096) {
        PyErr_SetString(PyExc_ValueError, "too much metadata");
        return NULL;
    }
    size_t total = 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyList_Check(pair) || PyList_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "metadata must be a list of pairs");
            return NULL;
        }
        for (int k = 0; k < 2; k++) {
            Py_ssize_t len;
            PyObject *text = PyList_GET_ITEM(pair, k);
            if (!PyUnicode_Check(text) || PyUnicode_AsUTF8AndSize(text, &len) == NULL) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "metadata must be text");
                return NULL;
            }
            if (len > INT32_MAX - 8 || total > (size_t)INT32_MAX) {
                PyErr_SetString(PyExc_ValueError, "metadata too long");
                return NULL;
            }
            total += 4 + (size_t)len;
        }
    }
    char *blob = malloc(total);
    if (blob == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    int32_t count = (int32_t)n;
    memcpy(blob, &count, 4);
    size_t at = 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            Py_ssize_t len;
            const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(PyList_GET_ITEM(pairs, i), k), &len);
            int32_t len32 = (int32_t)len;
            memcpy(blob + at, &len32, 4);
            memcpy(blob + at + 4, text, (size_t)len);
            at += 4 + (size_t)len;
        }
    }
    *failed = 0;
    return blob;
}

/* bytes a zero-backed column's largest buffer needs */
static uint64_t zero_need(const Col *c) {
    uint64_t n = (uint64_t)c->length;
    switch (c->layout) {
        case FIXED: return n * (uint64_t)c->width;
        case VIEWS: return n * 16;
        case OFFSETS: return (n + 1) * (uint64_t)c->width;
        default: return (n + 7) / 8;
    }
}

static Col *col_parse(PyObject *desc, uint64_t start, int depth) {
    if (depth > 2) {
        PyErr_SetString(PyExc_ValueError, "dictionary nested too deeply");
        return NULL;
    }
    if (!PyDict_Check(desc)) {
        PyErr_SetString(PyExc_ValueError, "a column must be described by a mapping");
        return NULL;
    }
    PyObject *name, *format, *metadata, *buffers, *dictionary;
    long long flags, length, null_count;
    if ((name = desc_get(desc, "name")) == NULL || (format = desc_get(desc, "format")) == NULL ||
        (metadata = desc_get(desc, "metadata")) == NULL || (buffers = desc_get(desc, "buffers")) == NULL ||
        (dictionary = desc_get(desc, "dictionary")) == NULL || desc_int(desc, "flags", &flags) < 0 ||
        desc_int(desc, "length", &length) < 0 || desc_int(desc, "null_count", &null_count) < 0)
        return NULL;
    Col *c = calloc(1, sizeof(Col));
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    int failed;
    if ((c->name = dup_text(name, NULL)) == NULL || (c->format = dup_text(format, NULL)) == NULL) goto fail;
    c->metadata = metadata_blob(metadata, &failed);
    if (failed) goto fail;
    if (layout_of(c) < 0) goto fail;
    if (length < 0 || length > MAX_LENGTH || null_count < 0 || null_count > length) {
        PyErr_SetString(PyExc_ValueError, "column length or null count out of range");
        goto fail;
    }
    c->flags = flags;
    c->length = length;
    c->null_count = null_count;
    c->offset = 0;
    if (buffers == Py_None) { /* nulls only: every buffer is the shared zero region */
        if (null_count != length) {
            PyErr_SetString(PyExc_ValueError, "a column without buffers must hold only nulls");
            goto fail;
        }
        c->zero = 1;
        c->n_buffers = c->layout == OFFSETS ? 3 : 2; /* views: no data buffers */
    } else {
        if (!PyList_Check(buffers)) {
            PyErr_SetString(PyExc_ValueError, "buffers must be a list");
            goto fail;
        }
        c->n_buffers = PyList_GET_SIZE(buffers);
    }
    int64_t nb = c->n_buffers;
    if (nb < 2 || nb > MAX_BUFFERS || (c->layout == OFFSETS && nb != 3) || ((c->layout == FIXED || c->layout == BITS) && nb != 2)) {
        PyErr_SetString(PyExc_ValueError, "wrong number of buffers for the column's format");
        goto fail;
    }
    c->buf_off = calloc((size_t)nb, sizeof(uint64_t));
    c->buf_size = calloc((size_t)nb, sizeof(uint64_t));
    if (c->buf_off == NULL || c->buf_size == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t i = 0; !c->zero && i < nb; i++) {
        PyObject *b = PyList_GET_ITEM(buffers, i);
        if (b == Py_None) {
            c->buf_size[i] = UINT64_MAX;
            continue;
        }
        unsigned long long off = 0, size = 0;
        if (!PyList_Check(b) || PyList_GET_SIZE(b) != 2 || !PyLong_Check(PyList_GET_ITEM(b, 0)) ||
            !PyLong_Check(PyList_GET_ITEM(b, 1))) {
            PyErr_SetString(PyExc_ValueError, "a buffer must be [offset, size]");
            goto fail;
        }
        off = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(b, 0));
        if (off == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
        size = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(b, 1));
        if (size == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
        if (size == UINT64_MAX || off > UINT64_MAX - start) {
            PyErr_SetString(PyExc_ValueError, "buffer offset or size out of range");
            goto fail;
        }
        c->buf_off[i] = start + off;
        c->buf_size[i] = size;
    }
    if (c->zero) {
        uint64_t need = zero_need(c);
        c->buf_size[0] = (uint64_t)(length + 7) / 8;
        c->buf_size[1] = need;
        if (c->layout == OFFSETS) c->buf_size[2] = 0;
    }
    if (dictionary != Py_None) {
        if (c->layout != FIXED || c->format[0] == 'f' || c->format[0] == 'g') {
            PyErr_SetString(PyExc_ValueError, "dictionary indices must be integers");
            goto fail;
        }
        if ((c->dictionary = col_parse(dictionary, start, depth + 1)) == NULL) goto fail;
        if (c->dictionary->zero) {
            PyErr_SetString(PyExc_ValueError, "a dictionary must be stored");
            goto fail;
        }
    }
    return c;
fail:
    col_free(c);
    return NULL;
}

/* ---- the checks (no GIL: they only read the mapping and the Col) */
static const char *check_buffers(const Col *c, const uint8_t *base, uint64_t size) {
    for (int64_t i = 0; i < c->n_buffers; i++) {
        if (c->buf_size[i] == UINT64_MAX) {
            if (i != 0) return "only the validity buffer may be missing";
            continue;
        }
        if (c->buf_off[i] > size || c->buf_size[i] > size - c->buf_off[i]) return "a buffer lies outside the file";
        if (c->buf_off[i] % 8 != 0) return "a buffer is not aligned";
    }
    (void)base;
    return NULL;
}

/* 1 when data[0, n) is well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF): polars takes a string column's bytes as valid UTF-8 without looking */
static int utf8_ok(const uint8_t *data, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* eight ASCII bytes at a time */
            uint64_t word;
            memcpy(&word, data + i, 8);
            if ((word & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        uint8_t b = data[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        uint64_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < need) return 0;
        if (data[i + 1] < lo || data[i + 1] > hi) return 0;
        for (uint64_t k = 2; k <= need; k++) {
            if ((data[i + k] & 0xC0) != 0x80) return 0;
        }
        i += need + 1;
    }
    return 1;
}

/* 1 when every dictionary index in [from, to) of ``data`` (Arrow integer ``format``) lies
 * in [0, n): one pass for the smallest and largest index, no branch per row */
#define INDEX_SCAN(T)                                                   \
    T lo, hi, v;                                                        \
    memcpy(&lo, data + sizeof(T) * from, sizeof(T));                    \
    hi = lo;                                                            \
    for (uint64_t i = from + 1; i < to; i++) {                          \
        memcpy(&v, data + sizeof(T) * i, sizeof(T));                    \
        lo = v < lo ? v : lo;                                           \
        hi = v > hi ? v : hi;                                           \
    }
#define UNSIGNED_RANGE(T)                                               \
    do {                                                                \
        INDEX_SCAN(T)                                                   \
        (void)lo;                                                       \
        return (uint64_t)hi < (uint64_t)n;                              \
    } while (0)
#define SIGNED_RANGE(T)                                                 \
    do {                                                                \
        INDEX_SCAN(T)                                                   \
        return lo >= 0 && (uint64_t)hi < (uint64_t)n;                   \
    } while (0)

static int indices_ok(const uint8_t *data, uint64_t from, uint64_t to, char format, int64_t n) {
    if (from >= to) return 1;
    if (n <= 0) return 0;
    switch (format) {
        case 'c': SIGNED_RANGE(int8_t);
        case 'C':
            if (n <= 128) { /* eight codes a word: a byte x < 128 gets its high bit from x + 128 - n iff x >= n */
                const uint64_t high = 0x8080808080808080ULL, add = 0x0101010101010101ULL * (uint64_t)(128 - n);
                uint64_t i = from, word;
                for (; i + 8 <= to; i += 8) {
                    memcpy(&word, data + i, 8);
                    if (((word + add) | word) & high) return 0;
                }
                for (; i < to; i++) {
                    if (data[i] >= n) return 0;
                }
                return 1;
            }
            UNSIGNED_RANGE(uint8_t);
        case 's': SIGNED_RANGE(int16_t);
        case 'S': UNSIGNED_RANGE(uint16_t);
        case 'i': SIGNED_RANGE(int32_t);
        case 'I': UNSIGNED_RANGE(uint32_t);
        case 'l': SIGNED_RANGE(int64_t);
        default: UNSIGNED_RANGE(uint64_t);
    }
}
#undef INDEX_SCAN
#undef UNSIGNED_RANGE
#undef SIGNED_RANGE

/* the number of set bits of ``x`` (portable: no popcnt instruction is assumed) */
static inline int64_t popcount64(uint64_t x) {
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (int64_t)((x * 0x0101010101010101ULL) >> 56);
}

static const char *check_col(const Col *c, const uint8_t *base, uint64_t size) {
    const char *err;
    if (c->zero) { /* our zero buffers, sized for the column: only a dictionary to check */
        if (c->dictionary != NULL) {
            const Col *d = c->dictionary;
            if (d->offset != 0 || d->dictionary != NULL) return "malformed dictionary";
            if ((err = check_col(d, base, size)) != NULL) return err;
            if (c->length > 0 && d->length == 0) return "dictionary index out of range";
        }
        return NULL;
    }
    err = check_buffers(c, base, size);
    if (err) return err;
    uint64_t end = (uint64_t)c->offset + (uint64_t)c->length; /* both <= 2^40 */
    /* validity: present when there are nulls, and its null count must be the column's */
    if (c->buf_size[0] == UINT64_MAX) {
        if (c->null_count != 0) return "nulls without a validity bitmap";
    } else {
        if (c->buf_size[0] < (end + 7) / 8) return "validity bitmap too short";
        const uint8_t *bits = base + c->buf_off[0];
        int64_t valid = 0;
        uint64_t i = (uint64_t)c->offset;
        for (; i < end && (i & 7) != 0; i++) valid += (bits[i >> 3] >> (i & 7)) & 1;
        for (; i + 64 <= end; i += 64) { /* whole 64-bit words (i is a multiple of 8 here) */
            uint64_t word;
            memcpy(&word, bits + (i >> 3), 8);
            valid += popcount64(word);
        }
        for (; i < end; i++) valid += (bits[i >> 3] >> (i & 7)) & 1;
        if (c->length - valid != c->null_count) return "null count does not match the validity bitmap";
    }
    const uint8_t *data = base + c->buf_off[1];
    uint64_t dsize = c->buf_size[1];
    if (c->layout == BITS) {
        if (dsize < (end + 7) / 8) return "boolean buffer too short";
    } else if (c->layout == FIXED) {
        if (dsize / (uint64_t)c->width < end) return "value buffer too short";
    } else if (c->layout == OFFSETS) { /* (length + 1) offsets, never decreasing, into the data buffer */
        if (dsize / (uint64_t)c->width < end + 1) return "offset buffer too short";
        uint64_t prev = 0;
        for (uint64_t i = (uint64_t)c->offset; i <= end; i++) {
            int64_t o;
            if (c->width == 4) {
                int32_t o32;
                memcpy(&o32, data + 4 * i, 4);
                o = o32;
            } else {
                memcpy(&o, data + 8 * i, 8);
            }
            if (o < 0 || (i > (uint64_t)c->offset && (uint64_t)o < prev)) return "string offsets out of order";
            prev = (uint64_t)o;
        }
        if (prev > c->buf_size[2]) return "string offsets point past their data";
        /* the data between the first and last offsets must be UTF-8, and every offset a
         * character boundary (then each string is UTF-8) */
        const uint8_t *chars = base + c->buf_off[2];
        for (uint64_t i = (uint64_t)c->offset; i <= end; i++) {
            int64_t o;
            if (c->width == 4) {
                int32_t o32;
                memcpy(&o32, data + 4 * i, 4);
                o = o32;
            } else {
                memcpy(&o, data + 8 * i, 8);
            }
            if ((uint64_t)o < c->buf_size[2] && (chars[o] & 0xC0) == 0x80) return "a string starts inside a character";
        }
        int64_t first;
        if (c->width == 4) {
            int32_t o32;
            memcpy(&o32, data + 4 * (uint64_t)c->offset, 4);
            first = o32;
        } else {
            memcpy(&first, data + 8 * (uint64_t)c->offset, 8);
        }
        if (!utf8_ok(chars + first, prev - (uint64_t)first)) return "strings that are not UTF-8";
    } else { /* VIEWS: 16 bytes each; a long string's view is (len, prefix, buffer index, offset) */
        if (dsize / 16 < end) return "view buffer too short";
        int64_t n_data = c->n_buffers - 2;
        int utf8 = strcmp(c->format, "vu") == 0; /* "vz": binary, any bytes */
        for (uint64_t i = (uint64_t)c->offset; i < end; i++) {
            const uint8_t *v = data + 16 * i;
            int32_t len, idx, off;
            memcpy(&len, v, 4);
            if (len < 0) return "negative string length";
            if (len <= 12) { /* inline: the string is in the view */
                if (utf8) {
                    uint64_t head, tail; /* the view's bytes 0-7 and 8-15: ASCII throughout is UTF-8 */
                    memcpy(&head, v, 8);
                    memcpy(&tail, v + 8, 8);
                    if (((head & 0x8080808000000000ULL) | (tail & 0x8080808080808080ULL)) != 0 &&
                        !utf8_ok(v + 4, (uint64_t)len))
                        return "strings that are not UTF-8";
                }
                continue;
            }
            memcpy(&idx, v + 8, 4);
            memcpy(&off, v + 12, 4);
            if (idx < 0 || idx >= n_data || off < 0) return "string view points outside its buffers";
            uint64_t bsize = c->buf_size[2 + idx];
            if ((uint64_t)off + (uint64_t)len > bsize) return "string view points past its buffer";
            const uint8_t *str = base + c->buf_off[2 + idx] + off;
            if (memcmp(str, v + 4, 4) != 0) return "string view's prefix is not its string's";
            /* each data buffer is checked whole below: a string that starts and ends on
             * character boundaries of a UTF-8 buffer is UTF-8 */
            if (utf8 && ((str[0] & 0xC0) == 0x80 || ((uint64_t)off + (uint64_t)len < bsize && (str[len] & 0xC0) == 0x80)))
                return "a string starts or ends inside a character";
        }
        for (int64_t k = 0; utf8 && k < n_data; k++) {
            if (!utf8_ok(base + c->buf_off[2 + k], c->buf_size[2 + k])) return "strings that are not UTF-8";
        }
    }
    if (c->dictionary != NULL) {
        const Col *d = c->dictionary;
        if (d->offset != 0 || d->dictionary != NULL) return "malformed dictionary";
        if ((err = check_col(d, base, size)) != NULL) return err;
        if (!indices_ok(data, (uint64_t)c->offset, end, c->format[0], d->length)) return "dictionary index out of range";
    }
    return NULL;
}

/* ---- exporting: every node owns its private block and a reference to the mapping */
typedef struct {
    Mapping *map;
    struct ArrowSchema **child_ptrs;
    struct ArrowSchema *child_structs;
    char *format, *name, *metadata;
} SchemaPriv;

typedef struct {
    Mapping *map;
    struct ArrowArray **child_ptrs;
    struct ArrowArray *child_structs;
    const void **buffers;
    int64_t *variadic_sizes;
} ArrayPriv;

static void release_schema(struct ArrowSchema *s) {
    if (s == NULL || s->release == NULL) return;
    SchemaPriv *p = s->private_data;
    for (int64_t i = 0; i < s->n_children; i++) {
        if (s->children[i]->release) s->children[i]->release(s->children[i]);
    }
    if (s->dictionary) {
        if (s->dictionary->release) s->dictionary->release(s->dictionary);
        free(s->dictionary);
    }
    free(p->child_ptrs);
    free(p->child_structs);
    free(p->format);
    free(p->name);
    free(p->metadata);
    mapping_unref(p->map);
    free(p);
    s->release = NULL;
}

static void release_array(struct ArrowArray *a) {
    if (a == NULL || a->release == NULL) return;
    ArrayPriv *p = a->private_data;
    for (int64_t i = 0; i < a->n_children; i++) {
        if (a->children[i]->release) a->children[i]->release(a->children[i]);
    }
    if (a->dictionary) {
        if (a->dictionary->release) a->dictionary->release(a->dictionary);
        free(a->dictionary);
    }
    free(p->child_ptrs);
    free(p->child_structs);
    free(p->buffers);
    free(p->variadic_sizes);
    mapping_unref(p->map);
    free(p);
    a->release = NULL;
}

static size_t metadata_len(const char *m) {
    /* the blob's layout was checked by metadata_ok when it was parsed */
    int32_t n, len;
    size_t at = 4;
    memcpy(&n, m, 4);
    for (int32_t i = 0; i < 2 * n; i++) {
        memcpy(&len, m + at, 4);
        at += 4 + (size_t)len;
    }
    return at;
}

static char *copy_or_null(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

/* fill *out (a leaf column, or a dictionary's values); 0 on success, -1 on no memory */
/* A dictionary (Enum) column of nulls only is exported as Arrow's null type: polars would
 * convert an Enum's codes row by row on import; the caller casts the null column instead */
static int as_null(const Col *c) { return c->zero && c->dictionary != NULL; }

static int export_col_schema(const Col *c, Mapping *map, struct ArrowSchema *out) {
    memset(out, 0, sizeof *out);
    SchemaPriv *p = calloc(1, sizeof *p);
    if (p == NULL) return -1;
    p->map = map;
    mapping_ref(map);
    const char *format = as_null(c) ? "n" : c->format;
    const char *metadata = as_null(c) ? NULL : c->metadata;
    p->format = copy_or_null(format, strlen(format));
    p->name = copy_or_null(c->name, strlen(c->name));
    if (metadata) p->metadata = copy_or_null(metadata, metadata_len(metadata));
    out->format = p->format;
    out->name = p->name;
    out->metadata = p->metadata;
    out->flags = as_null(c) ? (c->flags & 2) : c->flags; /* no dictionary: only "nullable" */
    out->private_data = p;
    out->release = release_schema;
    if (p->format == NULL || p->name == NULL || (metadata && p->metadata == NULL)) {
        release_schema(out);
        return -1;
    }
    if (c->dictionary && !as_null(c)) {
        struct ArrowSchema *d = malloc(sizeof *d);
        if (d == NULL) {
            release_schema(out);
            return -1;
        }
        out->dictionary = d;
        if (export_col_schema(c->dictionary, map, d) < 0) {
            d->release = NULL;
            release_schema(out);
            return -1;
        }
    }
    return 0;
}

static int export_col_array(const Col *c, Mapping *map, struct ArrowArray *out) {
    memset(out, 0, sizeof *out);
    ArrayPriv *p = calloc(1, sizeof *p);
    if (p == NULL) return -1;
    p->map = map;
    mapping_ref(map);
    out->length = c->length;
    out->null_count = c->null_count;
    out->offset = c->offset;
    out->private_data = p;
    out->release = release_array;
    int64_t n = as_null(c) ? 0 : c->n_buffers + (c->layout == VIEWS ? 1 : 0);
    p->buffers = calloc((size_t)(n > 0 ? n : 1), sizeof(void *));
    if (p->buffers == NULL) {
        release_array(out);
        return -1;
    }
    const uint8_t *base = c->zero ? map->zero : map->base;
    for (int64_t i = 0; i < n && i < c->n_buffers; i++) {
        p->buffers[i] = c->buf_size[i] == UINT64_MAX ? NULL : base + c->buf_off[i];
    }
    if (c->layout == VIEWS && n > 0) { /* the last buffer: the data buffers' sizes, as int64 */
        int64_t n_data = c->n_buffers - 2;
        p->variadic_sizes = calloc((size_t)(n_data > 0 ? n_data : 1), sizeof(int64_t));
        if (p->variadic_sizes == NULL) {
            release_array(out);
            return -1;
        }
        for (int64_t i = 0; i < n_data; i++) p->variadic_sizes[i] = (int64_t)c->buf_size[2 + i];
        p->buffers[n - 1] = p->variadic_sizes;
    }
    out->n_buffers = n;
    out->buffers = p->buffers;
    if (c->dictionary && !as_null(c)) {
        struct ArrowArray *d = malloc(sizeof *d);
        if (d == NULL) {
            release_array(out);
            return -1;
        }
        out->dictionary = d;
        if (export_col_array(c->dictionary, map, d) < 0) {
            d->release = NULL;
            release_array(out);
            return -1;
        }
    }
    return 0;
}

static void capsule_schema_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s) {
        if (s->release) s->release(s);
        free(s);
    }
}

static void capsule_array_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a) {
        if (a->release) a->release(a);
        free(a);
    }
}

/* one table: a struct array of its columns, as (schema capsule, array capsule) */
static PyObject *export_table(Col **cols, int64_t ncols, int64_t rows, Mapping *map) {
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    SchemaPriv *sp = calloc(1, sizeof *sp);
    ArrayPriv *ap = calloc(1, sizeof *ap);
    PyObject *cs = NULL, *ca = NULL, *pair = NULL;
    if (!s || !a || !sp || !ap) goto nomem;
    sp->map = map;
    mapping_ref(map);
    ap->map = map;
    mapping_ref(map);
    s->format = "+s";
    s->name = "";
    s->private_data = sp;
    s->release = release_schema;
    a->length = rows;
    a->n_buffers = 1;
    a->private_data = ap;
    a->release = release_array;
    sp = NULL;
    ap = NULL;
    SchemaPriv *ssp = s->private_data;
    ArrayPriv *aap = a->private_data;
    size_t nc = (size_t)(ncols > 0 ? ncols : 1);
    ssp->child_ptrs = calloc(nc, sizeof(void *));
    ssp->child_structs = calloc(nc, sizeof(struct ArrowSchema));
    aap->child_ptrs = calloc(nc, sizeof(void *));
    aap->child_structs = calloc(nc, sizeof(struct ArrowArray));
    aap->buffers = calloc(1, sizeof(void *));
    if (!ssp->child_ptrs || !ssp->child_structs || !aap->child_ptrs || !aap->child_structs || !aap->buffers)
        goto nomem;
    s->children = ssp->child_ptrs;
    a->children = aap->child_ptrs;
    a->buffers = aap->buffers;
    for (int64_t i = 0; i < ncols; i++) {
        ssp->child_ptrs[i] = &ssp->child_structs[i];
        aap->child_ptrs[i] = &aap->child_structs[i];
        s->n_children = i + 1;
        a->n_children = i + 1;
        if (export_col_schema(cols[i], map, &ssp->child_structs[i]) < 0) goto nomem;
        if (export_col_array(cols[i], map, &aap->child_structs[i]) < 0) goto nomem;
    }
    cs = PyCapsule_New(s, "arrow_schema", capsule_schema_free);
    if (cs == NULL) goto fail;
    s = NULL;
    ca = PyCapsule_New(a, "arrow_array", capsule_array_free);
    if (ca == NULL) goto fail;
    a = NULL;
    pair = PyTuple_Pack(2, cs, ca);
    Py_DECREF(cs);
    Py_DECREF(ca);
    return pair;
nomem:
    PyErr_NoMemory();
fail:
    Py_XDECREF(cs);
    Py_XDECREF(ca);
    free(sp);
    free(ap);
    if (s) {
        if (s->release) s->release(s);
        free(s);
    }
    if (a) {
        if (a->release) a->release(a);
        free(a);
    }
    return NULL;
}

/* map_tables(path, start, tables) -> list of (schema capsule, array capsule)
 * tables: a sequence of (rows, columns), columns a sequence of the header's column
 * descriptions (see col_parse), their buffer offsets relative to ``start`` */
static PyObject *map_tables(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj, *tables;
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "O&KO", PyUnicode_FSConverter, &path_obj, &start, &tables)) return NULL;
    PyObject *seq = PySequence_Fast(tables, "tables must be a sequence");
    if (seq == NULL) {
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_ssize_t ntables = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL;
    Mapping *map = NULL;
    Col ***cols = calloc((size_t)(ntables > 0 ? ntables : 1), sizeof(Col **));
    Py_ssize_t *ncols = calloc((size_t)(ntables > 0 ? ntables : 1), sizeof(Py_ssize_t));
    int64_t *rows = calloc((size_t)(ntables > 0 ? ntables : 1), sizeof(int64_t));
    if (!cols || !ncols || !rows) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t t = 0; t < ntables; t++) {
        long long nrows;
        PyObject *colspecs;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, t);
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "LO", &nrows, &colspecs)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a table spec must be (rows, columns)");
            goto done;
        }
        if (nrows < 0 || nrows > MAX_LENGTH) {
            PyErr_SetString(PyExc_ValueError, "row count out of range");
            goto done;
        }
        rows[t] = nrows;
        PyObject *cseq = PySequence_Fast(colspecs, "columns must be a sequence");
        if (cseq == NULL) goto done;
        Py_ssize_t nc = PySequence_Fast_GET_SIZE(cseq);
        if (nc < 1 || nc > MAX_CHILDREN) {
            Py_DECREF(cseq);
            PyErr_SetString(PyExc_ValueError, "no columns, or too many");
            goto done;
        }
        cols[t] = calloc((size_t)(nc > 0 ? nc : 1), sizeof(Col *));
        if (cols[t] == NULL) {
            Py_DECREF(cseq);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < nc; i++) {
            Col *c = col_parse(PySequence_Fast_GET_ITEM(cseq, i), (uint64_t)start, 0);
            if (c == NULL) {
                Py_DECREF(cseq);
                goto done;
            }
            cols[t][i] = c;
            ncols[t] = i + 1;
            if (c->length != nrows || c->offset != 0) {
                Py_DECREF(cseq);
                PyErr_SetString(PyExc_ValueError, "a column's length is not its table's row count");
                goto done;
            }
            if (i == 0 && c->zero) { /* the stored first column bounds the rows by the file's size */
                Py_DECREF(cseq);
                PyErr_SetString(PyExc_ValueError, "a table's first column must be stored");
                goto done;
            }
        }
        Py_DECREF(cseq);
    }

    /* map the file */
    const char *path = PyBytes_AS_STRING(path_obj);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        goto done;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        close(fd);
        goto done;
    }
    if (st.st_size <= 0) {
        close(fd);
        PyErr_SetString(PyExc_ValueError, "the cache file is empty");
        goto done;
    }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        goto done;
    }
    map = malloc(sizeof *map);
    if (map == NULL) {
        munmap(base, (size_t)st.st_size);
        PyErr_NoMemory();
        goto done;
    }
    map->base = base;
    map->size = (size_t)st.st_size;
    map->zero = NULL;
    map->zero_size = 0;
    map->refs = 1; /* ours, dropped at the end */

    const char *err = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < ntables && err == NULL; t++) {
        for (Py_ssize_t i = 0; i < ncols[t] && err == NULL; i++) err = check_col(cols[t][i], base, map->size);
    }
    Py_END_ALLOW_THREADS
    if (err != NULL) {
        PyErr_Format(PyExc_ValueError, "damaged cache file: %s", err);
        goto done;
    }
    /* the zero region: as long as the largest buffer of a column of nulls (its rows are
     * bounded by the stored first column's, checked above to lie inside the file) */
    uint64_t zero_size = 0;
    int any_zero = 0;
    for (Py_ssize_t t = 0; t < ntables; t++) {
        for (Py_ssize_t i = 0; i < ncols[t]; i++) {
            if (!cols[t][i]->zero) continue;
            any_zero = 1;
            if (zero_need(cols[t][i]) > zero_size) zero_size = zero_need(cols[t][i]);
        }
    }
    if (any_zero) {
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        if (zero_size > (uint64_t)SIZE_MAX - 2 * page) {
            PyErr_SetString(PyExc_ValueError, "damaged cache file: too many rows");
            goto done;
        }
        zero_size = (zero_size + page) / page * page; /* at least a page: never an empty mapping */
        void *zero = mmap(NULL, (size_t)zero_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (zero == MAP_FAILED) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        map->zero = zero;
        map->zero_size = (size_t)zero_size;
    }
    result = PyList_New(ntables);
    if (result == NULL) goto done;
    for (Py_ssize_t t = 0; t < ntables; t++) {
        PyObject *pair = export_table(cols[t], ncols[t], rows[t], map);
        if (pair == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, t, pair);
    }
done:
    if (map) mapping_unref(map);
    for (Py_ssize_t t = 0; cols && t < ntables; t++) {
        for (Py_ssize_t i = 0; cols[t] && i < ncols[t]; i++) col_free(cols[t][i]);
        free(cols[t]);
    }
    free(cols);
    free(ncols);
    free(rows);
    Py_DECREF(seq);
    Py_DECREF(path_obj);
    return result;
}

/* ---- writing: one copy of each distinct long string */
#define DATA_LIMIT ((uint64_t)1 << 30) /* a data buffer never passes 1 GiB (views hold int32 offsets) */

typedef struct {
    uint8_t *data;
    uint64_t size, cap;
} Out;

static int out_append(Out *o, const uint8_t *src, uint64_t n) {
    if (o->size + n > o->cap) {
        uint64_t cap = o->cap ? o->cap : 65536;
        while (cap < o->size + n) cap *= 2;
        uint8_t *grown = realloc(o->data, cap);
        if (grown == NULL) return -1;
        o->data = grown;
        o->cap = cap;
    }
    memcpy(o->data + o->size, src, n);
    o->size += n;
    return 0;
}

static uint64_t hash_bytes(const uint8_t *p, uint64_t n) {
    uint64_t h = 1469598103934665603ULL ^ n; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* compact_views(views, data_buffers) -> (views, [data buffer, ...])
 * views: the 16-byte views of a string column (offset 0); data_buffers: its data buffers.
 * Returns views whose long strings point into new data buffers that hold each distinct
 * string once (the column reads back the same).  Every view is checked as map_tables does. */
static PyObject *compact_views(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer views;
    PyObject *datas_obj;
    if (!PyArg_ParseTuple(args, "y*O", &views, &datas_obj)) return NULL;
    PyObject *result = NULL, *datas = NULL;
    Py_buffer *bufs = NULL;
    Py_ssize_t nbufs = 0, got = 0;
    uint8_t *newviews = NULL;
    uint64_t *slots = NULL; /* (index of the first row with that string) + 1, or 0 */
    Out *outs = NULL;
    Py_ssize_t nouts = 0;
    const char *err = NULL;
    int nomem = 0;
    if (views.len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "views must be 16 bytes each");
        goto done;
    }
    datas = PySequence_Fast(datas_obj, "data buffers must be a sequence");
    if (datas == NULL) goto done;
    nbufs = PySequence_Fast_GET_SIZE(datas);
    bufs = calloc((size_t)(nbufs > 0 ? nbufs : 1), sizeof(Py_buffer));
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < nbufs; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(datas, got), &bufs[got], PyBUF_SIMPLE) < 0) goto done;
    }
    uint64_t n = (uint64_t)views.len / 16;
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    newviews = malloc(n ? n * 16 : 1);
    slots = calloc(cap, sizeof(uint64_t));
    outs = calloc(1, sizeof(Out));
    if (newviews == NULL || slots == NULL || outs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    nouts = 1;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *vin = views.buf;
    for (uint64_t i = 0; i < n && err == NULL && !nomem; i++) {
        const uint8_t *v = vin + 16 * i;
        uint8_t *w = newviews + 16 * i;
        int32_t len, idx, off;
        memcpy(w, v, 16);
        memcpy(&len, v, 4);
        if (len < 0) {
            err = "negative string length";
            break;
        }
        if (len <= 12) continue;
        memcpy(&idx, v + 8, 4);
        memcpy(&off, v + 12, 4);
        if (idx < 0 || idx >= nbufs || off < 0 || (uint64_t)off + (uint64_t)len > (uint64_t)bufs[idx].len) {
            err = "string view points outside its buffers";
            break;
        }
        const uint8_t *str = (const uint8_t *)bufs[idx].buf + off;
        uint64_t slot = hash_bytes(str, (uint64_t)len) & (cap - 1);
        for (;;) {
            if (slots[slot] == 0) { /* first time: copy it out */
                Out *o = &outs[nouts - 1];
                if (o->size + (uint64_t)len > DATA_LIMIT) {
                    Out *grown = realloc(outs, (size_t)(nouts + 1) * sizeof(Out));
                    if (grown == NULL) {
                        nomem = 1;
                        break;
                    }
                    outs = grown;
                    memset(&outs[nouts], 0, sizeof(Out));
                    nouts++;
                    o = &outs[nouts - 1];
                }
                int32_t nidx = (int32_t)(nouts - 1), noff = (int32_t)o->size;
                if (out_append(o, str, (uint64_t)len) < 0) {
                    nomem = 1;
                    break;
                }
                memcpy(w + 8, &nidx, 4);
                memcpy(w + 12, &noff, 4);
                slots[slot] = i + 1;
                break;
            }
            const uint8_t *seen = newviews + 16 * (slots[slot] - 1);
            int32_t slen, sidx, soff;
            memcpy(&slen, seen, 4);
            memcpy(&sidx, seen + 8, 4);
            memcpy(&soff, seen + 12, 4);
            if (slen == len && memcmp(outs[sidx].data + soff, str, (size_t)len) == 0) {
                memcpy(w + 8, seen + 8, 8);
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (err != NULL) {
        PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    PyObject *list = PyList_New(nouts);
    if (list == NULL) goto done;
    for (Py_ssize_t k = 0; k < nouts; k++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)outs[k].data, (Py_ssize_t)outs[k].size);
        if (b == NULL) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, k, b);
    }
    PyObject *vb = PyBytes_FromStringAndSize((const char *)newviews, (Py_ssize_t)(n * 16));
    if (vb == NULL) {
        Py_DECREF(list);
        goto done;
    }
    result = PyTuple_Pack(2, vb, list);
    Py_DECREF(vb);
    Py_DECREF(list);
done:
    for (Py_ssize_t k = 0; outs && k < nouts; k++) free(outs[k].data);
    free(outs);
    free(slots);
    free(newviews);
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&bufs[k]);
    free(bufs);
    Py_XDECREF(datas);
    PyBuffer_Release(&views);
    return result;
}

static PyMethodDef methods[] = {
    {"compact_views", compact_views, METH_VARARGS,
     "compact_views(views, data_buffers) -> (views, [data, ...]): a string column's views, "
     "each distinct long string stored once."},
    {"map_tables", map_tables, METH_VARARGS,
     "map_tables(path, start, tables) -> [(schema capsule, array capsule)]: the tables of a cache file, "
     "memory-mapped and checked, as Arrow C Data Interface struct arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_colmap", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__colmap(void) { return PyModule_Create(&module); }
