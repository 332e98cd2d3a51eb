/* Native scanner for chunks of a Kineto traceEvents array.
 *
 * scan(chunk) reads a JSON array text of whole events ("[{...},{...}]") once and
 * writes typed columns for exactly the fields the Kineto reader keeps (see Event
 * and the args structs in parsers/_kineto_fields.py).  It answers None whenever the
 * chunk holds anything it is not certain to decode exactly as the msgspec path does (a value
 * of an unexpected type, an integer outside int64, a duplicate key, NaN, invalid
 * UTF-8, a lone surrogate, invalid JSON ...): the caller then decodes that chunk
 * with the msgspec path, which also decides whether the text is valid at all.
 *
 * Every read is bounds-checked against the end of the buffer; the heavy loop
 * runs without the GIL; there is no global mutable state.
 *
 * Speed (docs/performance.md, Kineto section): string bodies and runs of whitespace are
 * passed 16 bytes at a time with SSE2 where the compiler targets it (x86-64's
 * baseline; the byte loops do the same work elsewhere), a number's leading digits up
 * to eight at a time as one little-endian word, args keys and categories through an
 * open-addressing index built per call; a large chunk's column buffers start at a
 * capacity estimated from the chunk's size (mapped pages: never-written pages cost
 * nothing), and a field with no value in the chunk has no buffers at all (None).
 * The text between two members of an object (separator, key, colon and their
 * whitespace) is remembered per call in a small tree per kind of object and recognised
 * again by one compare of its bytes (next_member), so a repeated key is neither scanned
 * nor looked up; an event's category is remembered with its args group; integers of up to
 * 16 digits and decimals of up to 19 are found 16 bytes at a time; a row is written by one
 * loop per kind of column.  scan(..., categories) also codes each row's category by its
 * position among the caller's (the cut's enum cast of every row's text, done here on the
 * bytes in hand; see cat_put).
 */
/* KINETO_SCAN_MALLOC_ONLY: every buffer from malloc (a sanitizer build, so that
 * AddressSanitizer guards them all) */
#if defined(__linux__) && !defined(KINETO_SCAN_MALLOC_ONLY)
#define KINETO_SCAN_MMAP 1
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap */
#endif
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "arrow_abi.h" /* tracekit/native/arrow_abi.h: the Arrow C data interface */
#ifdef KINETO_SCAN_MMAP
#include <sys/mman.h>
#endif
/* SSE2 (the x86-64 baseline) passes over string bodies and whitespace 16 bytes at a time;
 * elsewhere the portable byte loops below do the same work */
#if defined(__SSE2__) && defined(__GNUC__)
#define KINETO_SCAN_SSE2 1
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------ columns */

/* K_TIME_NS is never a field's kind: a K_TIME column handed over in nanoseconds (times_to_ns) */
enum { K_STR, K_INT, K_TIME, K_FLOAT, K_DIM, K_RAW, K_RANKS, K_TIME_NS };

typedef struct {
    const char *name;
    int kind;
} ColDef;

enum {
    C_PH, C_CAT, C_NAME, C_PID, C_TID, C_TS, C_DUR, C_ID,
    C_EXTERNAL_ID, C_EXTERNAL_ID_V1, C_CORRELATION, C_STREAM, C_DEVICE, C_BYTES, C_KIND_ARG,
    C_GRID, C_BLOCK, C_REGISTERS, C_SHARED_MEMORY, C_OCCUPANCY, C_SYNC_KIND, C_WAIT_ON_STREAM,
    C_WAIT_CORR, C_COLLECTIVE, C_PG_NAME, C_PG_RANKS, C_GROUP_SIZE, C_COLL_SEQ, C_COLL_SEQ_V2,
    C_MSG_ELEMS, C_SEQUENCE_NR, C_INPUT_DIMS, C_INPUT_TYPES, C_CONCRETE_INPUTS, C_PYTHON_ID,
    C_PYTHON_PARENT_ID, C_MEM_DEVICE_TYPE, C_MEM_DEVICE_ID, C_MEM_ADDR, C_MEM_BYTES,
    C_MEM_TOTAL_ALLOCATED, C_MEM_TOTAL_RESERVED, C_LABEL,
    N_COLS
};

static const ColDef COLS[N_COLS] = {
    {"ph", K_STR}, {"cat", K_STR}, {"name", K_STR}, {"pid", K_INT}, {"tid", K_INT},
    {"ts", K_TIME}, {"dur", K_TIME}, {"id", K_INT},
    {"external_id", K_INT}, {"external_id_v1", K_INT}, {"correlation", K_INT}, {"stream", K_INT},
    {"device", K_INT}, {"bytes", K_INT}, {"kind_arg", K_STR}, {"grid", K_DIM}, {"block", K_DIM},
    {"registers", K_INT}, {"shared_memory", K_INT}, {"occupancy", K_FLOAT}, {"sync_kind", K_STR},
    {"wait_on_stream", K_INT}, {"wait_corr", K_INT}, {"collective", K_STR}, {"pg_name", K_STR},
    {"pg_ranks", K_RANKS}, {"group_size", K_INT}, {"coll_seq", K_INT}, {"coll_seq_v2", K_INT},
    {"msg_elems", K_INT}, {"sequence_nr", K_INT}, {"input_dims", K_RAW}, {"input_types", K_RAW},
    {"concrete_inputs", K_RAW}, {"python_id", K_INT}, {"python_parent_id", K_INT},
    {"mem_device_type", K_INT}, {"mem_device_id", K_INT}, {"mem_addr", K_INT}, {"mem_bytes", K_INT},
    {"mem_total_allocated", K_INT}, {"mem_total_reserved", K_INT}, {"label", K_STR},
};

typedef struct {
    const char *key;
    size_t len;
    int col;
} KeyDef;

#define KD(text, col) {text, sizeof(text) - 1, col}
#define KD_END {NULL, 0, 0}


static const KeyDef GPU_KEYS[] = {
    KD("External id", C_EXTERNAL_ID), KD("external id", C_EXTERNAL_ID_V1), KD("correlation", C_CORRELATION),
    KD("stream", C_STREAM), KD("device", C_DEVICE), KD("bytes", C_BYTES), KD("kind", C_KIND_ARG),
    KD("grid", C_GRID), KD("block", C_BLOCK), KD("registers per thread", C_REGISTERS),
    KD("shared memory", C_SHARED_MEMORY), KD("est. achieved occupancy %", C_OCCUPANCY),
    KD("cuda_sync_kind", C_SYNC_KIND), KD("wait_on_stream", C_WAIT_ON_STREAM),
    KD("wait_on_cuda_event_record_corr_id", C_WAIT_CORR), KD("Collective name", C_COLLECTIVE),
    KD("Process Group Name", C_PG_NAME), KD("Process Group Ranks", C_PG_RANKS),
    KD("Group size", C_GROUP_SIZE), KD("Seq", C_COLL_SEQ), KD("seq", C_COLL_SEQ_V2),
    KD("In msg nelems", C_MSG_ELEMS), KD_END,
};
static const KeyDef LAUNCH_KEYS[] = {
    KD("External id", C_EXTERNAL_ID), KD("external id", C_EXTERNAL_ID_V1), KD("correlation", C_CORRELATION),
    KD_END,
};
static const KeyDef OP_KEYS[] = {
    KD("External id", C_EXTERNAL_ID), KD("external id", C_EXTERNAL_ID_V1), KD("Sequence number", C_SEQUENCE_NR),
    KD("Input Dims", C_INPUT_DIMS), KD("Input type", C_INPUT_TYPES), KD("Concrete Inputs", C_CONCRETE_INPUTS),
    KD("Collective name", C_COLLECTIVE), KD("Process Group Name", C_PG_NAME),
    KD("Process Group Ranks", C_PG_RANKS), KD("Group size", C_GROUP_SIZE), KD("Seq", C_COLL_SEQ),
    KD("seq", C_COLL_SEQ_V2), KD("In msg nelems", C_MSG_ELEMS), KD_END,
};
static const KeyDef PY_KEYS[] = {
    KD("Python id", C_PYTHON_ID), KD("Python parent id", C_PYTHON_PARENT_ID), KD_END,
};
static const KeyDef MEM_KEYS[] = {
    KD("Device Type", C_MEM_DEVICE_TYPE), KD("Device Id", C_MEM_DEVICE_ID), KD("Addr", C_MEM_ADDR),
    KD("Bytes", C_MEM_BYTES), KD("Total Allocated", C_MEM_TOTAL_ALLOCATED),
    KD("Total Reserved", C_MEM_TOTAL_RESERVED), KD_END,
};
static const KeyDef META_KEYS[] = {KD("name", C_LABEL), KD_END};

enum { G_NONE, G_GPU, G_LAUNCH, G_OP, G_PY, G_MEM, G_META, G_UNKNOWN };


/* lower-cased category of a complete ("X") event -> args group (_kineto_fields.CATEGORY_GROUP) */
static const KeyDef CATEGORY_GROUP[] = {
    KD("kernel", G_GPU), KD("gpu_memcpy", G_GPU), KD("gpu_memset", G_GPU), KD("memcpy", G_GPU),
    KD("memset", G_GPU), KD("cuda_sync", G_GPU), KD("xpu_sync", G_GPU), KD("mtia_ccp_events", G_GPU),
    KD("cuda_runtime", G_LAUNCH), KD("runtime", G_LAUNCH), KD("cuda_driver", G_LAUNCH),
    KD("mtia_runtime", G_LAUNCH), KD("xpu_runtime", G_LAUNCH), KD("xpu_driver", G_LAUNCH),
    KD("privateuse1_runtime", G_LAUNCH), KD("privateuse1_driver", G_LAUNCH), KD("glow_runtime", G_LAUNCH),
    KD("cpu_op", G_OP), KD("operator", G_OP), KD("user_annotation", G_OP), KD("gpu_user_annotation", G_OP),
    KD("python_function", G_PY), KD_END,
};

/* the key tables: table g is the args keys of group g (1-6), table 0 the categories */
#define N_TABLES 7
static const KeyDef *const KEY_TABLES[N_TABLES] = {CATEGORY_GROUP, GPU_KEYS,  LAUNCH_KEYS, OP_KEYS,
                                                   PY_KEYS,        MEM_KEYS,  META_KEYS};
#define T_CATEGORY 0

/* an open-addressing index of each key table: slot -> position in the table, or -1; every
 * table has far fewer keys than slots, so a probe always ends at an empty slot */
#define KEY_SLOTS 128
typedef struct {
    signed char slot[N_TABLES][KEY_SLOTS];
} KeyIndex;

/* ------------------------------------------------------------------ buffers */

struct Pool;

typedef struct {
    unsigned char *p;
    size_t len, cap;
    size_t hint;       /* the first capacity to take (from the chunk's size), or 0 */
    struct Pool *pool; /* where its mapped pages come from and go back to, or NULL */
} Buf;

/* Column memory.  Large blocks are mapped pages of their own on Linux (grown with mremap,
 * without a copy), so freed chunk buffers do not stay in the C heap as fragments; small
 * ones come from malloc.  A 64-byte header before the data says which, and how big.
 *
 * A parse's chunks have buffers of the same few sizes, and a fresh mapping is faulted in
 * 4 KB at a time on first write: so a mapped block freed
 * (when polars releases the column) goes back to its Pool, if the scan had one, and the
 * next chunk's buffers are taken from there, the pages already in memory.  A Pool is one
 * parse's own object (no global state), locked since columns are released on polars'
 * threads, and capped; what it cannot keep is unmapped.  The bytes of a reused block that
 * were ever written are zeroed again (growth is zeroed: bitmaps and nulls rely on it). */
#define MEM_HEADER 64
#define MEM_MAP_MIN (256 * 1024)

typedef struct {
    size_t total;       /* the whole block, header included */
    size_t dirty;       /* from this offset of the data on, every byte is zero */
    struct Pool *pool;  /* mapped: the Pool it goes back to, or NULL */
    int mapped;
} MemHeader;

#ifdef KINETO_SCAN_MMAP
#include <pthread.h>
#define POOL_SLOTS 96
#ifndef POOL_MAX_MB
#define POOL_MAX_MB 128
#endif
#define POOL_MAX_BYTES ((size_t)POOL_MAX_MB * 1024 * 1024) /* mapped bytes kept free: the column buffers of about 11 chunks of 4 MB, 3 of 16 MB */

typedef struct Pool {
    pthread_mutex_t lock;
    size_t refs;  /* the Python object's, and one per block out of the pool */
    int closed;   /* the Python object is gone: blocks are unmapped when freed */
    int n;        /* free blocks */
    size_t held;  /* their mapped bytes */
    MemHeader *free[POOL_SLOTS];
    size_t taken, fresh; /* counters: blocks reused, blocks newly mapped */
} Pool;

static void pool_unref(Pool *pool) { /* called with the lock held; unlocks it */
    int last = --pool->refs == 0;
    pthread_mutex_unlock(&pool->lock);
    if (last) {
        pthread_mutex_destroy(&pool->lock);
        free(pool);
    }
}

/* a free block of at least `total` mapped bytes and no more than twice `total`, or NULL;
 * counted as out of the pool.  Of those, the one with the most of the wanted size already
 * written (its pages in memory: a chunk's first columns, the dense ones, would otherwise fault
 * in the untouched pages of a block a sparse column had), then the smallest. */
static MemHeader *pool_take(Pool *pool, size_t total) {
    pthread_mutex_lock(&pool->lock);
    int best = -1;
    size_t best_warm = 0;
    for (int k = 0; k < pool->n; k++) {
        size_t t = pool->free[k]->total;
        if (t < total || t / 2 > total) continue;
        size_t warm = pool->free[k]->dirty < total ? pool->free[k]->dirty : total;
        if (best < 0 || warm > best_warm || (warm == best_warm && t < pool->free[best]->total)) {
            best = k;
            best_warm = warm;
        }
    }
    MemHeader *h = NULL;
    if (best >= 0) {
        h = pool->free[best];
        pool->free[best] = pool->free[--pool->n];
        pool->held -= h->total;
        pool->taken++;
    } else {
        pool->fresh++;
    }
    pool->refs++; /* the block handed out (reused, or about to be mapped by the caller) */
    pthread_mutex_unlock(&pool->lock);
    return h;
}

/* a mapped block of `pool` freed: kept for reuse when there is room, else unmapped */
static void pool_put(Pool *pool, MemHeader *h) {
    pthread_mutex_lock(&pool->lock);
    int keep = !pool->closed && pool->n < POOL_SLOTS && h->total <= POOL_MAX_BYTES - pool->held;
    if (keep) {
        pool->free[pool->n++] = h;
        pool->held += h->total;
    }
    pool_unref(pool);
    if (!keep) munmap(h, h->total);
}
#else
typedef struct Pool {
    int unused; /* malloc-only build: nothing pooled */
} Pool;
#endif

/* record that the first `used` bytes of `data` may have been written (the rest of a buffer,
 * its len on, is always zero) */
static void mem_mark(void *data, size_t used) {
    if (data == NULL) return;
    MemHeader *h = (MemHeader *)((unsigned char *)data - MEM_HEADER);
    if (used > h->dirty) h->dirty = used;
}

static void mem_free(void *data) {
    if (data == NULL) return;
    MemHeader *h = (MemHeader *)((unsigned char *)data - MEM_HEADER);
#ifdef KINETO_SCAN_MMAP
    if (h->mapped) {
        if (h->pool != NULL)
            pool_put(h->pool, h);
        else
            munmap(h, h->total);
        return;
    }
#endif
    free(h);
}

/* Grow `data` (old_cap usable bytes, or NULL) to cap bytes; the new bytes are zero.  A
 * mapped block comes from `pool` when it has one to spare. */
static unsigned char *mem_grow(Pool *pool, unsigned char *data, size_t old_cap, size_t cap) {
    size_t total = cap + MEM_HEADER;
    MemHeader *h = data != NULL ? (MemHeader *)(data - MEM_HEADER) : NULL;
#ifdef KINETO_SCAN_MMAP
    if (total >= MEM_MAP_MIN) {
        if (h != NULL && h->mapped) {
            /* a reused block may be larger than old_cap, written past it before: zero that */
            size_t upto = h->dirty < cap ? h->dirty : cap;
            if (upto > old_cap) memset(data + old_cap, 0, upto - old_cap);
            if (total <= h->total) return data; /* room enough in the block */
            void *base = mremap(h, h->total, total, MREMAP_MAYMOVE); /* new pages are zero */
            if (base == MAP_FAILED) return NULL;
            ((MemHeader *)base)->total = total;
            return (unsigned char *)base + MEM_HEADER;
        }
        MemHeader *n = pool != NULL ? pool_take(pool, total) : NULL;
        unsigned char *out;
        if (n != NULL) {
            out = (unsigned char *)n + MEM_HEADER;
            size_t upto = n->dirty < cap ? n->dirty : cap;
            memset(out, 0, upto);
            /* the pages written past cap before go back (they read as zero again): a column
             * kept alive keeps no more memory than its own */
            size_t keep = (MEM_HEADER + cap + 4095) & ~(size_t)4095;
            if (MEM_HEADER + n->dirty > keep && madvise((unsigned char *)n + keep, MEM_HEADER + n->dirty - keep, MADV_DONTNEED) == 0)
                n->dirty = keep - MEM_HEADER;
            if (n->dirty <= cap) n->dirty = 0;
        } else {
            void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (base == MAP_FAILED) {
                if (pool != NULL) { /* the block pool_take counted as out */
                    pthread_mutex_lock(&pool->lock);
                    pool_unref(pool);
                }
                return NULL;
            }
            n = (MemHeader *)base;
            n->total = total;
            n->dirty = 0;
            n->pool = pool;
            n->mapped = 1;
            out = (unsigned char *)base + MEM_HEADER;
        }
        if (h != NULL) {
            memcpy(out, data, old_cap);
            if (old_cap > n->dirty) n->dirty = old_cap;
            free(h);
        }
        return out;
    }
#else
    (void)pool;
#endif
    MemHeader *n = (MemHeader *)realloc(h, total);
    if (n == NULL) return NULL;
    n->total = total;
    n->dirty = 0;
    n->pool = NULL;
    n->mapped = 0;
    unsigned char *out = (unsigned char *)n + MEM_HEADER;
    memset(out + old_cap, 0, cap - old_cap);
    return out;
}

static int buf_grow(Buf *b, size_t extra) {
    if (extra > SIZE_MAX / 4 - b->len) return -1;
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : (b->hint > 256 ? b->hint : 256);
    while (cap < need) cap *= 2;
    unsigned char *p = mem_grow(b->pool, b->p, b->cap, cap); /* zeroed growth: bitmaps and nulls rely on it */
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* room for `extra` more bytes (the common case, room already there, inline) */
static inline int buf_reserve(Buf *b, size_t extra) {
    if (extra <= b->cap - b->len) return 0;
    return buf_grow(b, extra);
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }

/* set bit `row` of a bitmap, growing it (zeroed) as needed */
static inline int bit_set(Buf *b, size_t row) {
    size_t byte = row >> 3;
    if (byte >= b->len) {
        if (buf_reserve(b, byte + 1 - b->len) < 0) return -1;
        b->len = byte + 1;
    }
    b->p[byte] |= (unsigned char)(1u << (row & 7));
    return 0;
}

typedef struct {
    Buf val;    /* int64 (INT, TIME, DIM), float64 (FLOAT), int64 offsets (STR, RAW, RANKS) */
    Buf fval;   /* TIME: the value as float64, written from the first float of the chunk on */
    Buf data;   /* string bytes (STR, RAW, RANKS; INT: labels) */
    Buf loff;   /* INT: label offsets, filled lazily */
    Buf valid;  /* bitmap of the main value */
    Buf lvalid; /* INT: bitmap of labels */
    size_t nvalid, nlabels, nfloat;
    int ns; /* TIME: the integers are nanoseconds (times_to_ns) */
} Col;

/* ------------------------------------------------------------------ values */

enum { V_NONE, V_INT, V_FLOAT, V_STR, V_RAW };

typedef struct {
    int type;
    int esc;            /* V_STR: holds backslash escapes */
    int64_t i;
    double d;
    const unsigned char *s; /* V_STR: between the quotes; V_RAW: the whole value */
    size_t n;
} Val;

/* The text between one value of an object and the next member's value (the separator, the
 * key and its colon, with their whitespace), remembered to recognise the next such text by
 * one comparison of its bytes.  A trace's events repeat a few shapes, so the text after a
 * given member of an object is usually exactly the bytes that followed the same member last
 * time (or the time before).  The remembered texts form a tree per kind of object (an event,
 * the args of each group): a state holds the last two texts seen there, each leading to a
 * state of its own for the member after it, so the shapes an object takes (a kernel or a
 * flow event, args with or without an optional key) each get their own path.  The
 * remembered bytes were read and checked the long way once; the same bytes read the same
 * way again, so a match gives the same key, column and position as reading them would. */
#define GAP_MAX 48 /* longest text remembered: three 16-byte compares */
#define GAP_STATES 512 /* states per scan() call; past that, texts are read the long way */
#define GAP_ROOTS 7 /* state 1: an event's first member; 2-7: the args of groups G_GPU..G_META */
#define GAP_END (-3) /* the text closes the object: whitespace, then '}' */
#define GAP_EMPTY ((uint64_t)1 << 63) /* an empty way's need: no text matches it */
typedef struct {
    uint64_t need;      /* the low len bits set; bit 63 alone when empty */
    unsigned char text[GAP_MAX];
    unsigned char len;  /* 0: nothing remembered */
    signed char col;    /* the key's column, -1 (a key not kept), KEY_ARGS or GAP_END */
    unsigned short next; /* the state of the member after it, 0 when none */
} Gap;
typedef struct {
    Gap way[2];
    unsigned char last; /* the way written or matched last */
} GapState;
typedef struct {
    GapState state[GAP_STATES]; /* 0: none (never written) */
    unsigned nstates;
    GapState cat; /* the last two categories of complete events: col is their args group */
} Gaps;

/* a read position in the chunk */
typedef struct {
    const unsigned char *p, *end;
    /* set when the text is certainly not JSON, even to Python's lenient json module (which
     * also takes NaN, Infinity, big numbers, lone surrogates): the chunk cannot decode */
    int syntax;
    const KeyIndex *ix;
    Gaps *gaps; /* this scan() call's remembered member texts */
} Scan;

#define SYNTAX(sc) return ((sc)->syntax = 1, FAIL)

/* the columns being written */
typedef struct {
    Col cols[N_COLS];
    size_t rows;
    /* events left to the msgspec path: (start, end, index in the chunk) as int64 triples */
    Buf fallback;
    size_t nfallback;
    int oom; /* a row was half written: the chunk cannot be used */
    uint64_t kmask[5]; /* the columns of each kind of value (kind_masks) */
    /* scan(..., categories): each row's category as its position among them (uint8), null
     * where the cat column is null; given up (cat_miss) at a category that is none of them */
    const struct CatTable *cats; /* NULL: not asked for */
    Buf cat_code, cat_valid;
    size_t ncat;
    int cat_miss;
    int cat_last; /* the last category matched (consecutive events mostly share one) */
} Out;

/* The categories scan() codes: their UTF-8 texts, copied (read without the GIL) */
#define CAT_MAX 250
#define CAT_TEXT 64
typedef struct CatTable {
    int n;
    size_t len[CAT_MAX];
    unsigned char text[CAT_MAX][CAT_TEXT];
} CatTable;

#define FAIL (-1)

/* the per-value steps, inlined into the event loops (a call and a dispatch less per value) */
#ifdef __GNUC__
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

static inline int is_ws(unsigned c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* the rest of a run of whitespace (a line break and its indentation) */
static const unsigned char *ws_run(const unsigned char *p, const unsigned char *end) {
#ifdef KINETO_SCAN_SSE2
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'),
                  tab = _mm_set1_epi8('\t');
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, sp), _mm_cmpeq_epi8(x, nl)),
                                 _mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFFu;
        if (other) return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && is_ws(*p)) p++;
    return p;
}

static inline void skip_ws(Scan *sc) {
    /* most tokens follow no whitespace or one space */
    if (sc->p < sc->end && *sc->p > ' ') return;
    if (sc->p + 1 < sc->end && *sc->p == ' ' && sc->p[1] > ' ') {
        sc->p++;
        return;
    }
    sc->p = ws_run(sc->p, sc->end);
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return FAIL;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return FAIL;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* PLAIN[c]: byte c stands for itself inside a JSON string and needs no check (0x20-0x7F but '"' and '\\') */
#define PL16 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
#define NO16 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
static const unsigned char PLAIN[256] = {
    NO16, NO16,                                                  /* 0x00-0x1F: control */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,              /* 0x20-0x2F: '"' */
    PL16, PL16,                                                  /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,              /* 0x50-0x5F: '\\' */
    PL16, PL16,                                                  /* 0x60-0x7F */
    NO16, NO16, NO16, NO16, NO16, NO16, NO16, NO16,              /* 0x80-0xFF: UTF-8, checked */
};
#undef PL16
#undef NO16

/* Length of a valid UTF-8 sequence at p (first byte >= 0x80), or 0 when invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t avail = (size_t)(end - p);
    if (c >= 0xC2 && c <= 0xDF) {
        return (avail >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

/* The first byte at or after p that is not PLAIN (or end): the usual bytes of a string,
 * printable ASCII but the quote and the backslash, passed in one tight loop. */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *end) {
#ifdef KINETO_SCAN_SSE2
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        /* signed: bytes 0x80-0xFF are negative, so "below ' '" also takes every non-ASCII byte */
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                    _mm_cmplt_epi8(x, space));
        unsigned mask = (unsigned)_mm_movemask_epi8(stop);
        if (mask) return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && PLAIN[*p]) p++;
    return p;
}

/* A string at sc->p (which is '"'); validates escapes, surrogate pairs and UTF-8. */
static int scan_string_slow(Scan *sc, Val *v) {
    const unsigned char *p = sc->p + 1, *end = sc->end;
    int esc = 0;
    while (1) {
        p = plain_run(p, end);
        if (p >= end) SYNTAX(sc);
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) SYNTAX(sc);
        if (c == '\\') {
            esc = 1;
            if (p + 1 >= end) SYNTAX(sc);
            unsigned e = p[1];
            if (e == 'u') {
                unsigned u;
                if (read_hex4(p + 2, end, &u) < 0) SYNTAX(sc);
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) return FAIL; /* lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 2 || p[0] != '\\' || p[1] != 'u') return FAIL;
                    if (read_hex4(p + 2, end, &lo) < 0) return FAIL;
                    if (lo < 0xDC00 || lo > 0xDFFF) return FAIL;
                    p += 6;
                }
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            SYNTAX(sc);
        }
        if (c >= 0x80) {
            size_t k = utf8_len(p, end);
            if (k == 0) return FAIL;
            p += k;
            continue;
        }
        p++;
    }
    if (v != NULL) {
        v->type = V_STR;
        v->esc = esc;
        v->s = sc->p + 1;
        v->n = (size_t)(p - (sc->p + 1));
    }
    sc->p = p + 1;
    return 0;
}

/* A string at sc->p (which is '"'): plain text up to its closing quote here, anything else
 * (escapes, UTF-8, control bytes, the end of the buffer) in scan_string_slow. */
static inline int scan_string(Scan *sc, Val *v) {
    const unsigned char *p = plain_run(sc->p + 1, sc->end);
    if (p < sc->end && *p == '"') {
        if (v != NULL) {
            v->type = V_STR;
            v->esc = 0;
            v->s = sc->p + 1;
            v->n = (size_t)(p - (sc->p + 1));
        }
        sc->p = p + 1;
        return 0;
    }
    return scan_string_slow(sc, v);
}

/* Write the unescaped text of a validated string into b. */
static int unescape_into(Buf *b, const unsigned char *s, size_t n) {
    const unsigned char *p = s, *end = s + n;
    while (p < end) {
        const unsigned char *run = p;
        while (p < end && *p != '\\') p++;
        if (buf_put(b, run, (size_t)(p - run)) < 0) return FAIL;
        if (p >= end) break;
        if (p + 1 >= end) return FAIL;
        unsigned e = p[1];
        unsigned char ch;
        switch (e) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                unsigned u, lo;
                if (read_hex4(p + 2, end, &u) < 0) return FAIL;
                p += 6;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &lo) < 0) return FAIL;
                    if (lo < 0xDC00 || lo > 0xDFFF) return FAIL;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return FAIL;
                }
                unsigned char out[4];
                size_t k;
                if (u < 0x80) {
                    out[0] = (unsigned char)u;
                    k = 1;
                } else if (u < 0x800) {
                    out[0] = (unsigned char)(0xC0 | (u >> 6));
                    out[1] = (unsigned char)(0x80 | (u & 0x3F));
                    k = 2;
                } else if (u < 0x10000) {
                    out[0] = (unsigned char)(0xE0 | (u >> 12));
                    out[1] = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                    out[2] = (unsigned char)(0x80 | (u & 0x3F));
                    k = 3;
                } else {
                    out[0] = (unsigned char)(0xF0 | (u >> 18));
                    out[1] = (unsigned char)(0x80 | ((u >> 12) & 0x3F));
                    out[2] = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                    out[3] = (unsigned char)(0x80 | (u & 0x3F));
                    k = 4;
                }
                if (buf_put(b, out, k) < 0) return FAIL;
                continue;
            }
            default: return FAIL;
        }
        if (buf_put(b, &ch, 1) < 0) return FAIL;
        p += 2;
    }
    return 0;
}

static const uint64_t POW10_U64[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* The run of ASCII digits at the start of the 8 readable bytes at p, at most 8 of them:
 * its length in *k and its value, read as one little-endian word.  Elsewhere *k = 0 and the
 * digit loops read them. */
static inline uint64_t leading_digits(const unsigned char *p, int *k) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
    uint64_t x;
    memcpy(&x, p, 8);
    const uint64_t lo4 = 0x0F0F0F0F0F0F0F0FULL, hi4 = 0xF0F0F0F0F0F0F0F0ULL;
    /* a byte is a digit when its high nibble is 3 and so is that of the byte plus 6; each
     * byte of t is zero exactly then (a carry out of a byte comes only from a byte >= 0xFA,
     * which is no digit itself, so it can only make a later byte look wrong, never right) */
    uint64_t t = ((x & hi4) | (((x + 0x0606060606060606ULL) & hi4) >> 4)) ^ 0x3333333333333333ULL;
    /* bit 4 of each byte: the byte of t is not zero (nibble sums stay inside their byte) */
    uint64_t other = (((t & lo4) + lo4) | (((t >> 4) & lo4) + lo4)) & 0x1010101010101010ULL;
    int n = other ? __builtin_ctzll(other) >> 3 : 8;
    *k = n;
    if (n == 0) return 0;
    x -= 0x3030303030303030ULL;
    x <<= 8 * (8 - n); /* the n digits last, zeros (leading zeros) before them */
    x = x * 10 + (x >> 8); /* bytes 0, 2, 4, 6: the two-digit numbers, first digit first */
    uint64_t pairs02 = x & 0x000000FF000000FFULL, pairs13 = (x >> 16) & 0x000000FF000000FFULL;
    return (pairs02 * (100 + (1000000ULL << 32)) + pairs13 * (1 + (10000ULL << 32))) >> 32;
#else
    (void)p;
    *k = 0;
    return 0;
#endif
}

#if defined(KINETO_SCAN_SSE2) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KINETO_SCAN_DIGITS16 1
static const uint64_t POW10_U64_16[17] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
};

/* The number of ASCII digits that start the 16 readable bytes at p (16: all of them). */
static ALWAYS_INLINE int digit_run16(const unsigned char *p) {
    __m128i d = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8('0'));
    /* a digit is a byte whose difference from '0' is at most 9, unsigned */
    unsigned digit = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d));
    return __builtin_ctz(~digit); /* bit 16 of ~digit is set: at most 16 */
}

/* The value of the n ASCII digits at p (1 <= n <= 8; 8 bytes readable at p). */
static ALWAYS_INLINE uint64_t digits8(const unsigned char *p, int n) {
    uint64_t x;
    memcpy(&x, p, 8);
    x -= 0x3030303030303030ULL;
    x <<= 8 * (8 - n); /* the n digits last, zeros (leading zeros) before them */
    x = x * 10 + (x >> 8); /* bytes 0, 2, 4, 6: the two-digit numbers, first digit first */
    uint64_t pairs02 = x & 0x000000FF000000FFULL, pairs13 = (x >> 16) & 0x000000FF000000FFULL;
    return (pairs02 * (100 + (1000000ULL << 32)) + pairs13 * (1 + (10000ULL << 32))) >> 32;
}

/* The value of the n ASCII digits at p (1 <= n <= 16; 16 bytes readable at p). */
static ALWAYS_INLINE uint64_t digits_value(const unsigned char *p, int n) {
    if (n <= 8) return digits8(p, n);
    return digits8(p, 8) * POW10_U64_16[n - 8] + digits8(p + 8, n - 8);
}
#endif

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* A number at sc->p: an int64 (V_INT) or a finite double (V_FLOAT), correctly rounded. */
static int scan_number(Scan *sc, Val *v) {
    const unsigned char *start = sc->p, *p = sc->p, *end = sc->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p < end && *p == 'I') return FAIL; /* -Infinity: Python's json takes it */
    if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
    uint64_t mant = 0;
    int digits = 0;      /* significant digits accumulated in mant */
    int dropped = 0;     /* digits that did not fit */
    int exp10 = 0;
    int is_float = 0;
#ifdef KINETO_SCAN_DIGITS16
    /* the usual shapes, an integer part of 1-16 digits not starting with 0, then maybe a
     * fraction of 1-15 digits (19 digits in all at most), no exponent: their digits found 16
     * bytes at a time and read as words, the same mant and exp10 as the digit loops below */
    if (end - p >= 16 && *p != '0') {
        int k = digit_run16(p);
        if (k < 16 || (end - p > 16 && (p[16] < '0' || p[16] > '9'))) { /* 16: a time in microseconds */
            const unsigned char *q = p + k;
            uint64_t m = digits_value(p, k);
            if (*q == '.' && end - (q + 1) >= 16) {
                int f = digit_run16(q + 1);
                if (f > 0 && f < 16 && k + f <= 19 && q[1 + f] != 'e' && q[1 + f] != 'E') {
                    mant = m * POW10_U64_16[f] + digits_value(q + 1, f);
                    digits = k + f;
                    exp10 = -f;
                    is_float = 1;
                    p = q + 1 + f;
                    goto number_read;
                }
            } else if (*q != '.' && *q != 'e' && *q != 'E') {
                mant = m;
                digits = k;
                p = q;
                goto number_read;
            }
        }
    }
#endif
    if (*p == '0') {
        p++;
    } else {
        /* the first digit is not 0, so every digit counts: up to eight at a time while
         * they fit (the loop below takes the rest, and any past the 19th) */
        while (end - p >= 8) {
            int k;
            uint64_t run = leading_digits(p, &k);
            if (k == 0 || digits + k > 19) break;
            mant = mant * POW10_U64[k] + run;
            digits += k;
            p += k;
            if (k < 8) break;
        }
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                if (mant) digits++;
            } else {
                dropped = 1;
                exp10++;
            }
            p++;
        }
    }
    if (p < end && *p == '.') {
        is_float = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
        /* after a significant digit every digit counts: several at a time, as above */
        while (mant != 0 && end - p >= 8) {
            int k;
            uint64_t run = leading_digits(p, &k);
            if (k == 0 || digits + k > 19) break;
            mant = mant * POW10_U64[k] + run;
            digits += k;
            exp10 -= k;
            p += k;
            if (k < 8) break;
        }
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                if (mant) digits++;
                exp10--;
            } else if (*p != '0') {
                dropped = 1;
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_float = 1;
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
        int e = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (e < 100000) e = e * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -e : e;
    }
#ifdef KINETO_SCAN_DIGITS16
number_read:
#endif
    sc->p = p;
    if (!is_float) {
        if (dropped) return FAIL; /* more than 19 digits: outside int64 */
        if (neg) {
            if (mant > (uint64_t)INT64_MAX + 1) return FAIL;
            v->i = mant == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mant;
        } else {
            if (mant > (uint64_t)INT64_MAX) return FAIL;
            v->i = (int64_t)mant;
        }
        v->type = V_INT;
        v->d = (double)v->i;
        return 0;
    }
    double d;
    if (!dropped && mant <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        /* exact operands, one correctly rounded operation */
        d = (double)mant;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        if (neg) d = -d;
    } else { /* strtod reads the sign itself */
        char tmp[128];
        size_t len = (size_t)(p - start);
        if (len >= sizeof tmp) return FAIL;
        memcpy(tmp, start, len);
        tmp[len] = 0;
        char *stop = NULL;
        d = strtod(tmp, &stop);
        if (stop != tmp + len) return FAIL;
    }
    if (!(d - d == 0)) return FAIL; /* not finite */
    v->type = V_FLOAT;
    v->d = d;
    return 0;
}

static int skip_value(Scan *sc, int depth);

/* Pass over a number by its grammar only (msgspec skips any such number in a field it
 * does not keep, whatever its size). */
static int skip_number(Scan *sc) {
    const unsigned char *p = sc->p, *end = sc->end;
    if (p < end && *p == '-') p++;
    if (p < end && *p == 'I') return FAIL; /* -Infinity */
    if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') SYNTAX(sc);
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    sc->p = p;
    return 0;
}

static int expect_lit(Scan *sc, const char *lit, size_t n) {
    if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, lit, n) != 0) return FAIL;
    sc->p += n;
    return 0;
}

/* Validate and pass over any JSON value. */
static int skip_value(Scan *sc, int depth) {
    if (depth > 64) return FAIL;
    skip_ws(sc);
    if (sc->p >= sc->end) SYNTAX(sc);
    unsigned c = *sc->p;
    if (c == '"') return scan_string(sc, NULL);
    if (c == '{' || c == '[') {
        unsigned close = c == '{' ? '}' : ']';
        sc->p++;
        skip_ws(sc);
        if (sc->p < sc->end && *sc->p == close) {
            sc->p++;
            return 0;
        }
        while (1) {
            if (c == '{') {
                skip_ws(sc);
                if (sc->p >= sc->end || *sc->p != '"') SYNTAX(sc);
                if (scan_string(sc, NULL) < 0) return FAIL;
                skip_ws(sc);
                if (sc->p >= sc->end || *sc->p != ':') SYNTAX(sc);
                sc->p++;
            }
            if (skip_value(sc, depth + 1) < 0) return FAIL;
            skip_ws(sc);
            if (sc->p >= sc->end) SYNTAX(sc);
            if (*sc->p == ',') {
                sc->p++;
                continue;
            }
            if (*sc->p == close) {
                sc->p++;
                return 0;
            }
            SYNTAX(sc);
        }
    }
    if (c == 't') return expect_lit(sc, "true", 4);
    if (c == 'f') return expect_lit(sc, "false", 5);
    if (c == 'n') return expect_lit(sc, "null", 4);
    if (c == '-' || (c >= '0' && c <= '9')) return skip_number(sc);
    if (c == 'N' || c == 'I') return FAIL; /* NaN, Infinity: Python's json takes them */
    SYNTAX(sc);
}

/* A value of a field of the given kind; FAIL for a type the msgspec path would treat
 * differently from what the columns here can say. */
static ALWAYS_INLINE int scan_field(Scan *sc, int kind, Val *v) {
    skip_ws(sc);
    if (sc->p >= sc->end) return FAIL;
    unsigned c = *sc->p;
    const unsigned char *start = sc->p;
    if (kind == K_RAW || kind == K_RANKS) {
        if (kind == K_RANKS && c == '"') return scan_string(sc, v);
        if (skip_value(sc, 1) < 0) return FAIL;
        v->type = V_RAW;
        v->s = start;
        v->n = (size_t)(sc->p - start);
        return 0;
    }
    if (c == 'n') {
        if (kind == K_DIM) return FAIL;
        if (expect_lit(sc, "null", 4) < 0) return FAIL;
        v->type = V_NONE;
        return 0;
    }
    if (c == '"') {
        if (kind == K_TIME || kind == K_DIM) return FAIL;
        if (scan_string(sc, v) < 0) return FAIL;
        if (kind == K_FLOAT) v->type = V_NONE; /* not a number: null */
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (kind == K_STR || kind == K_DIM) return FAIL;
        if (scan_number(sc, v) < 0) return FAIL;
        if (v->type == V_FLOAT && kind == K_INT) return FAIL;
        if (kind == K_FLOAT) v->type = V_FLOAT;
        return 0;
    }
    if (c == '[' && kind == K_DIM) {
        int64_t dims[3] = {0, 1, 1};
        int k = 0;
        sc->p++;
        skip_ws(sc);
        if (sc->p < sc->end && *sc->p == ']') {
            sc->p++;
        } else {
            while (1) {
                Val d;
                skip_ws(sc);
                if (k >= 3 || sc->p >= sc->end) return FAIL;
                if (!(*sc->p == '-' || (*sc->p >= '0' && *sc->p <= '9'))) return FAIL;
                if (scan_number(sc, &d) < 0 || d.type != V_INT) return FAIL;
                /* magnitudes below 2^31 keep the product of three inside int64 */
                if (d.i <= -(INT64_C(1) << 31) || d.i >= (INT64_C(1) << 31)) return FAIL;
                dims[k++] = d.i;
                skip_ws(sc);
                if (sc->p >= sc->end) return FAIL;
                if (*sc->p == ',') {
                    sc->p++;
                    continue;
                }
                if (*sc->p == ']') {
                    sc->p++;
                    break;
                }
                return FAIL;
            }
        }
        v->type = V_INT;
        int64_t xy = dims[0] * dims[1]; /* |xy| < 2^62 */
        if (xy != 0 && (dims[2] > INT64_MAX / (xy < 0 ? -xy : xy) || dims[2] < -(INT64_MAX / (xy < 0 ? -xy : xy))))
            return FAIL;
        v->i = xy * dims[2];
        return 0;
    }
    return FAIL; /* true/false/objects/arrays: not modelled */
}

static inline unsigned key_hash(const unsigned char *s, size_t n) {
    return ((unsigned)n * 31u + (unsigned)s[0] * 7u + (unsigned)s[n - 1] * 3u) & (KEY_SLOTS - 1);
}

/* Fill the open-addressing index of each key table (built per scan() call: no global state). */
static void build_index(KeyIndex *ix) {
    memset(ix->slot, -1, sizeof ix->slot);
    for (int t = 0; t < N_TABLES; t++) {
        const KeyDef *keys = KEY_TABLES[t];
        for (int k = 0; keys[k].key != NULL; k++) {
            unsigned h = key_hash((const unsigned char *)keys[k].key, keys[k].len);
            while (ix->slot[t][h] >= 0) h = (h + 1) & (KEY_SLOTS - 1);
            ix->slot[t][h] = (signed char)k;
        }
    }
}

/* The column (or group) of key s[:n] in key table t, or -1. */
static inline int lookup(const KeyIndex *ix, int t, const unsigned char *s, size_t n) {
    if (n == 0) return -1; /* no key is empty */
    const KeyDef *keys = KEY_TABLES[t];
    for (unsigned h = key_hash(s, n);; h = (h + 1) & (KEY_SLOTS - 1)) {
        int k = ix->slot[t][h];
        if (k < 0) return -1;
        if (keys[k].len == n && memcmp(keys[k].key, s, n) == 0) return keys[k].col;
    }
}

/* The column of a key of the event itself (ph, cat, name, pid, tid, ts, dur, id), KEY_ARGS
 * for "args", -1 for any other key: by length, then the bytes. */
#define KEY_ARGS (-2)
static inline int base_key(const unsigned char *s, size_t n) {
    switch (n) {
        case 2:
            if (s[0] == 'p' && s[1] == 'h') return C_PH;
            if (s[0] == 't' && s[1] == 's') return C_TS;
            if (s[0] == 'i' && s[1] == 'd') return C_ID;
            return -1;
        case 3:
            if (s[1] == 'i' && s[2] == 'd') return s[0] == 'p' ? C_PID : s[0] == 't' ? C_TID : -1;
            if (s[0] == 'c' && s[1] == 'a' && s[2] == 't') return C_CAT;
            if (s[0] == 'd' && s[1] == 'u' && s[2] == 'r') return C_DUR;
            return -1;
        case 4:
            if (memcmp(s, "name", 4) == 0) return C_NAME;
            if (memcmp(s, "args", 4) == 0) return KEY_ARGS;
            return -1;
        default:
            return -1;
    }
}

/* Whether the bytes at p start with g's remembered text (g->len > 0), the slow way: near
 * the end of the buffer, and where there is no SSE2. */
static int gap_match_tail(const Gap *g, const unsigned char *p, const unsigned char *end) {
    return g->len != 0 && (size_t)(end - p) >= g->len && memcmp(p, g->text, g->len) == 0;
}

#ifdef KINETO_SCAN_SSE2
/* The bits of the 48 bytes at p that equal those of text (p has 48 readable bytes). */
static ALWAYS_INLINE uint64_t eq48(const unsigned char *p, const unsigned char *text) {
    __m128i x0 = _mm_loadu_si128((const __m128i *)p), x1 = _mm_loadu_si128((const __m128i *)(p + 16)),
            x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    uint64_t m0 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x0, _mm_loadu_si128((const __m128i *)text)));
    uint64_t m1 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x1, _mm_loadu_si128((const __m128i *)(text + 16))));
    uint64_t m2 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x2, _mm_loadu_si128((const __m128i *)(text + 32))));
    return m0 | m1 << 16 | m2 << 32;
}


/* Whether the 48 readable bytes at p start with g's text (an empty g's need has bit 63 set,
 * which no compare sets): the first 16 bytes, then the rest only for a longer text. */
static ALWAYS_INLINE int gap_eq(const unsigned char *p, const Gap *g) {
    uint64_t need = g->need;
    unsigned m0 = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), _mm_loadu_si128((const __m128i *)g->text)));
    if ((need & 0xFFFF) != (m0 & need & 0xFFFF)) return 0;
    if (need >> 16 == 0) return 1;
    return (eq48(p, g->text) & need) == need;
}
#endif

/* Which way of st (0 or 1) remembers the text the bytes at p start with, or -1; the way
 * used last is taken when both do. */
static ALWAYS_INLINE int gap_find(const GapState *st, const unsigned char *p, const unsigned char *end) {
    int w = st->last;
#ifdef KINETO_SCAN_SSE2
    if (end - p >= GAP_MAX) {
        const Gap *a = &st->way[w], *b = &st->way[w ^ 1];
        if (gap_eq(p, a)) return w;
        if (gap_eq(p, b)) return w ^ 1;
        return -1;
    }
#endif
    if (gap_match_tail(&st->way[w], p, end)) return w;
    if (gap_match_tail(&st->way[w ^ 1], p, end)) return w ^ 1;
    return -1;
}

/* Remember the n bytes at p (n <= GAP_MAX) with col in the way of st not used last, which
 * becomes the last; its successor state is kept. */
static Gap *gap_put(GapState *st, const unsigned char *p, size_t n, int col) {
    int w = st->last ^ 1;
    Gap *g = &st->way[w];
    memcpy(g->text, p, n);
    memset(g->text + n, 0, GAP_MAX - n);
    g->len = (unsigned char)n;
    g->need = n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
    g->col = (signed char)col;
    st->last = (unsigned char)w;
    return g;
}

/* The next member of an object of kind ctx (0: an event, else the args group g): at *state
 * in its tree of remembered texts (0: none), with sc->p at the object's '{' for the first
 * member (first), else right after the previous member's value.  On success *col is the member's
 * column (-1 for a key not kept, KEY_ARGS) with sc->p past its colon (and the whitespace
 * after it), or GAP_END with sc->p past the object's '}'; *state moves on.  The bytes passed
 * over are checked as the member loop always did (separator, key string, colon), or are
 * bytes remembered from such a check. */
static ALWAYS_INLINE int next_member(Scan *sc, int ctx, int first, unsigned *state, int *col) {
    const unsigned char *from = sc->p;
    GapState *st = *state != 0 ? &sc->gaps->state[*state] : NULL;
    if (st != NULL) {
        int w = gap_find(st, from, sc->end);
        if (w >= 0) {
            sc->p = from + st->way[w].len;
            *col = st->way[w].col;
            *state = st->way[w].next;
            st->last = (unsigned char)w;
            return 0;
        }
    }
    if (first) {
        sc->p++;
        skip_ws(sc);
        if (sc->p < sc->end && *sc->p == '}') {
            sc->p++;
            *col = GAP_END;
            goto remember;
        }
    } else {
        skip_ws(sc);
        if (sc->p >= sc->end) SYNTAX(sc);
        if (*sc->p == '}') {
            sc->p++;
            *col = GAP_END;
            goto remember;
        }
        if (*sc->p != ',') SYNTAX(sc);
        sc->p++;
    }
    skip_ws(sc);
    if (sc->p >= sc->end || *sc->p != '"') SYNTAX(sc);
    Val key;
    if (scan_string(sc, &key) < 0) return FAIL;
    skip_ws(sc);
    if (sc->p >= sc->end || *sc->p != ':') SYNTAX(sc);
    sc->p++;
    if (key.esc) return FAIL;
    skip_ws(sc); /* the value's own reading starts by passing whitespace, too */
    *col = ctx == 0 ? base_key(key.s, key.n) : lookup(sc->ix, ctx, key.s, key.n);
remember:
    if (st != NULL && (size_t)(sc->p - from) <= GAP_MAX) {
        Gap *g = gap_put(st, from, (size_t)(sc->p - from), *col);
        if (g->next == 0 && *col != GAP_END && sc->gaps->nstates < GAP_STATES)
            g->next = (unsigned short)sc->gaps->nstates++;
        *state = g->next;
    } else {
        *state = 0;
    }
    return 0;
}

/* The args group of an event from its ph, cat and name (as _kineto_decode.raw_frame groups them). */
static int event_group(Scan *sc, const Val *vals) {
    const Val *ph = &vals[C_PH];
    if (ph->type != V_STR) return G_NONE;
    if (ph->esc) return G_UNKNOWN;
    if (ph->n == 1 && ph->s[0] == 'M') return G_META;
    if (ph->n == 1 && (ph->s[0] == 'i' || ph->s[0] == 'I')) {
        const Val *nm = &vals[C_NAME];
        if (nm->type != V_STR) return G_NONE;
        if (nm->esc) return G_UNKNOWN;
        return (nm->n == 8 && memcmp(nm->s, "[memory]", 8) == 0) ? G_MEM : G_NONE;
    }
    if (ph->n == 1 && ph->s[0] == 'X') {
        const Val *cat = &vals[C_CAT];
        if (cat->type != V_STR) return G_NONE;
        if (cat->esc) return G_UNKNOWN;
        GapState *seen = &sc->gaps->cat; /* the last two categories, compared as remembered texts */
        int w = gap_find(seen, cat->s, sc->end);
        if (w >= 0 && seen->way[w].len == cat->n) {
            seen->last = (unsigned char)w;
            return seen->way[w].col;
        }
        char low[32];
        if (cat->n >= sizeof low) {
            for (size_t k = 0; k < cat->n; k++)
                if (cat->s[k] >= 0x80) return G_UNKNOWN; /* Unicode lower-casing: not modelled */
            return G_NONE;
        }
        for (size_t k = 0; k < cat->n; k++) {
            unsigned char ch = cat->s[k];
            if (ch >= 0x80) return G_UNKNOWN;
            low[k] = (char)((ch >= 'A' && ch <= 'Z') ? ch + 32 : ch);
        }
        int g = lookup(sc->ix, T_CATEGORY, (const unsigned char *)low, cat->n);
        if (g < 0) g = G_NONE;
        if (cat->n != 0) gap_put(seen, cat->s, cat->n, g);
        return g;
    }
    return G_NONE;
}

/* Whether the keys that decide the group have all been read (or cannot come any more). */
static int group_ready(const Val *vals, uint64_t seen) {
    if (!(seen & (1ULL << C_PH))) return 0;
    const Val *ph = &vals[C_PH];
    if (ph->type != V_STR || ph->esc || ph->n != 1) return 1;
    if (ph->s[0] == 'X') return (seen & (1ULL << C_CAT)) != 0;
    if (ph->s[0] == 'i' || ph->s[0] == 'I') return (seen & (1ULL << C_NAME)) != 0;
    return 1;
}

/* The args object of an event of group g. */
static int scan_args(Scan *sc, int g, Val *vals, uint64_t *seen) {
    skip_ws(sc);
    if (g == G_NONE) return skip_value(sc, 1);
    if (sc->p >= sc->end || *sc->p != '{') return FAIL;
    unsigned state = 1 + (unsigned)g; /* the root of this group's args */
    for (int first = 1;; first = 0) {
        int col;
        if (next_member(sc, g, first, &state, &col) < 0) return FAIL;
        if (col == GAP_END) return 0;
        if (col < 0) {
            if (skip_value(sc, 2) < 0) return FAIL;
        } else {
            if (*seen & (1ULL << col)) return FAIL; /* duplicate key */
            *seen |= 1ULL << col;
            if (scan_field(sc, COLS[col].kind, &vals[col]) < 0) return FAIL;
        }
    }
}

/* Grow a fixed-width column to `rows` values (zeros: nulls) and return the slot of `row`. */
static unsigned char *slot(Buf *b, size_t row, size_t width) {
    size_t need = (row + 1) * width;
    if (b->len < need) {
        if (buf_reserve(b, need - b->len) < 0) return NULL;
        b->len = need; /* the bytes in between were zeroed when the buffer grew */
    }
    return b->p + row * width;
}

static int put_text(Buf *data, const Val *v) {
    if (v->type == V_STR && v->esc) return unescape_into(data, v->s, v->n);
    return buf_put(data, v->s, v->n);
}

/* The text of `v` as row `row` of a string-view column (Arrow's "vu", polars' own string
 * layout, so polars takes it without converting): a 16-byte view per row, the text inline
 * when it has at most 12 bytes, else its first 4 bytes, buffer 0 and its offset in `data`.
 * Rows without a value stay zero views (empty; null in the bitmap), never written. */
static int put_view(Buf *views, Buf *data, size_t row, const Val *v) {
    unsigned char *dst = slot(views, row, 16);
    if (dst == NULL) return FAIL;
    if (v->n <= 12 && !(v->type == V_STR && v->esc)) { /* the text as it is, inside its view */
        int32_t len = (int32_t)v->n;
        memcpy(dst, &len, 4);
        if (v->n != 0) memcpy(dst + 4, v->s, v->n);
        return 0;
    }
    size_t start = data->len;
    if (put_text(data, v) < 0) return FAIL;
    size_t n = data->len - start;
    if (n > INT32_MAX || start > INT32_MAX) return FAIL; /* views address 2 GiB: the msgspec path */
    int32_t word = (int32_t)n;
    memcpy(dst, &word, 4);
    if (n <= 12) {
        if (n != 0) { /* an empty text may come before the data buffer exists */
            memcpy(dst + 4, data->p + start, n);
            memset(data->p + start, 0, n); /* not kept in the data buffer */
            data->len = start;
        }
    } else {
        memcpy(dst + 4, data->p + start, 4);
        word = 0;
        memcpy(dst + 8, &word, 4);
        word = (int32_t)start;
        memcpy(dst + 12, &word, 4);
    }
    return 0;
}

/* The first float of a time column at `row`: the float64 copies of the integers before it
 * (scan_number gives an integer's float as (double)i; a null row stays 0.0, as zeroed). */
static int float_copies(Col *col, size_t row) {
    if (row == 0) return 0;
    if (slot(&col->fval, row - 1, 8) == NULL) return FAIL;
    size_t have = col->val.len / 8 < row ? col->val.len / 8 : row;
    for (size_t k = 0; k < have; k++) {
        int64_t i;
        memcpy(&i, col->val.p + k * 8, 8);
        double d = (double)i;
        memcpy(col->fval.p + k * 8, &d, 8);
    }
    return 0;
}

/* The columns of each kind of value (bit c: column c), for the loops of append_row: a loop
 * per kind instead of a dispatch per value */
enum { KM_TEXT, KM_INT, KM_TIME, KM_FLOAT, KM_DIM, N_KM };
static void kind_masks(uint64_t *km) {
    for (int k = 0; k < N_KM; k++) km[k] = 0;
    for (int c = 0; c < N_COLS; c++) {
        int kind = COLS[c].kind;
        int m = (kind == K_STR || kind == K_RAW || kind == K_RANKS) ? KM_TEXT
                : kind == K_INT                                      ? KM_INT
                : kind == K_TIME                                     ? KM_TIME
                : kind == K_FLOAT                                    ? KM_FLOAT
                                                                     : KM_DIM;
        km[m] |= 1ULL << c;
    }
}

/* The lowest column of a non-empty mask, taken out of it. */
static inline int take_col(uint64_t *mask) {
#ifdef __GNUC__
    int c = __builtin_ctzll(*mask);
#else
    int c = 0;
    while (!(*mask & (1ULL << c))) c++;
#endif
    *mask &= *mask - 1;
    return c;
}

/* Row `row`'s category code (scan()'s `categories`): the position of the row's cat text
 * among them, exactly as polars' cast of the text to an enum of them gives (bytes equal);
 * a cat with escapes, or none of them, gives up the codes of the whole chunk (the caller
 * then casts the text itself).  `v` is the cat value the row's text column took. */
static int cat_put(Out *out, size_t row, const Val *v) {
    if (out->cat_miss) return 0;
    if (v->type != V_STR || v->esc) {
        out->cat_miss = 1;
        return 0;
    }
    const CatTable *t = out->cats;
    int k = out->cat_last;
    if (!(t->len[k] == v->n && memcmp(t->text[k], v->s, v->n) == 0)) {
        for (k = 0; k < t->n; k++)
            if (t->len[k] == v->n && memcmp(t->text[k], v->s, v->n) == 0) break;
        if (k == t->n) {
            out->cat_miss = 1;
            return 0;
        }
        out->cat_last = k;
    }
    unsigned char *dst = slot(&out->cat_code, row, 1);
    if (dst == NULL || bit_set(&out->cat_valid, row) < 0) return FAIL;
    *dst = (unsigned char)k;
    out->ncat++;
    return 0;
}

/* Write the values of one event (columns in `mask`); every other column is null there. */
static int append_row(Out *out, const Val *vals, uint64_t mask) {
    size_t row = out->rows;
    const uint64_t *km = out->kmask;
    unsigned char *dst;
    for (uint64_t m = mask & km[KM_TEXT]; m;) {
        int c = take_col(&m);
        Col *col = &out->cols[c];
        const Val *v = &vals[c];
        if (v->type != V_STR && v->type != V_RAW) continue;
        if (put_view(&col->val, &col->data, row, v) < 0 || bit_set(&col->valid, row) < 0) return FAIL;
        col->nvalid++;
    }
    for (uint64_t m = mask & km[KM_INT]; m;) {
        int c = take_col(&m);
        Col *col = &out->cols[c];
        const Val *v = &vals[c];
        if (v->type == V_INT) {
            if ((dst = slot(&col->val, row, 8)) == NULL) return FAIL;
            memcpy(dst, &v->i, 8);
            if (bit_set(&col->valid, row) < 0) return FAIL;
            col->nvalid++;
        } else if (v->type == V_STR) {
            if (put_view(&col->loff, &col->data, row, v) < 0 || bit_set(&col->lvalid, row) < 0) return FAIL;
            col->nlabels++;
        }
    }
    for (uint64_t m = mask & km[KM_TIME]; m;) {
        int c = take_col(&m);
        Col *col = &out->cols[c];
        const Val *v = &vals[c];
        if (v->type != V_INT && v->type != V_FLOAT) continue;
        if ((dst = slot(&col->val, row, 8)) == NULL) return FAIL;
        if (v->type == V_INT) memcpy(dst, &v->i, 8);
        if (v->type == V_FLOAT && col->nfloat == 0 && float_copies(col, row) < 0) return FAIL;
        if (v->type == V_FLOAT || col->nfloat) { /* float64 copies only once a float came */
            if ((dst = slot(&col->fval, row, 8)) == NULL) return FAIL;
            memcpy(dst, &v->d, 8);
        }
        if (bit_set(&col->valid, row) < 0) return FAIL;
        col->nvalid++;
        if (v->type == V_FLOAT) col->nfloat++;
    }
    for (uint64_t m = mask & km[KM_FLOAT]; m;) {
        int c = take_col(&m);
        Col *col = &out->cols[c];
        const Val *v = &vals[c];
        if (v->type != V_FLOAT) continue;
        if ((dst = slot(&col->val, row, 8)) == NULL) return FAIL;
        memcpy(dst, &v->d, 8);
        if (bit_set(&col->valid, row) < 0) return FAIL;
        col->nvalid++;
    }
    for (uint64_t m = mask & km[KM_DIM]; m;) {
        int c = take_col(&m);
        Col *col = &out->cols[c];
        const Val *v = &vals[c];
        /* _kineto_decode._arg_series: the product of the dims, null unless positive */
        if (v->type != V_INT || v->i <= 0) continue;
        if ((dst = slot(&col->val, row, 8)) == NULL) return FAIL;
        memcpy(dst, &v->i, 8);
        if (bit_set(&col->valid, row) < 0) return FAIL;
        col->nvalid++;
    }
    /* (the row's cat is in its text column exactly where the text loop above wrote one) */
    if (out->cats != NULL && (mask & (1ULL << C_CAT)) && (vals[C_CAT].type == V_STR || vals[C_CAT].type == V_RAW)) {
        if (cat_put(out, row, &vals[C_CAT]) < 0) return FAIL;
    }
    out->rows++;
    return 0;
}

/* Bring every column to `rows` values once the chunk is scanned. */
static int finish_columns(Out *out) {
    size_t rows = out->rows;
    for (int c = 0; c < N_COLS; c++) {
        Col *col = &out->cols[c];
        int kind = COLS[c].kind;
        if (col->nvalid == 0 && col->nlabels == 0) continue; /* exported as None: no buffers */
        if (kind == K_STR || kind == K_RAW || kind == K_RANKS) {
            if (rows && slot(&col->val, rows - 1, 16) == NULL) return FAIL;
        } else if (rows) {
            if (slot(&col->val, rows - 1, 8) == NULL) return FAIL;
            if (kind == K_TIME && col->nfloat && slot(&col->fval, rows - 1, 8) == NULL) return FAIL;
            if (kind == K_INT && col->nlabels && slot(&col->loff, rows - 1, 16) == NULL) return FAIL;
        }
        /* bitmaps cover every row; every buffer exists (Arrow wants real pointers) */
        size_t bits = (rows + 7) / 8;
        Buf *all[6] = {&col->val, &col->fval, &col->data, &col->loff, &col->valid, &col->lvalid};
        for (int k = 0; k < 6; k++) {
            size_t want = (all[k] == &col->valid || all[k] == &col->lvalid) ? bits : 0;
            if (all[k]->len < want) {
                if (buf_reserve(all[k], want - all[k]->len) < 0) return FAIL;
                all[k]->len = want;
            }
            if (all[k]->p == NULL && buf_reserve(all[k], 8) < 0) return FAIL;
        }
    }
    return 0;
}

static int scan_event(Scan *sc, Out *out) {
    Val vals[N_COLS]; /* only the entries named in seen/aseen are read */
    vals[C_PH].type = vals[C_CAT].type = vals[C_NAME].type = V_NONE;
    uint64_t seen = 0, aseen = 0;
    int args_seen = 0;
    const unsigned char *args_at = NULL;
    skip_ws(sc);
    if (sc->p >= sc->end) SYNTAX(sc);
    if (*sc->p != '{') {
        /* another value: the msgspec path drops it; a ']' or ',' here is not JSON */
        if (*sc->p == ']' || *sc->p == ',' || *sc->p == '}' || *sc->p == ':') SYNTAX(sc);
        return FAIL;
    }
    unsigned state = 1; /* the root of the events' tree */
    for (int first = 1;; first = 0) {
        int col;
        if (next_member(sc, 0, first, &state, &col) < 0) return FAIL;
        if (col == GAP_END) break;
        if (col == KEY_ARGS) {
            if (args_seen) return FAIL;
            args_seen = 1;
            skip_ws(sc);
            if (group_ready(vals, seen)) {
                /* the usual key order (ph, cat, name ... args): one pass */
                int g = event_group(sc, vals);
                if (g == G_UNKNOWN) return FAIL;
                if (scan_args(sc, g, vals, &aseen) < 0) return FAIL;
            } else {
                args_at = sc->p;
                if (skip_value(sc, 1) < 0) return FAIL;
            }
        } else if (col < 0) {
            if (skip_value(sc, 1) < 0) return FAIL;
        } else {
            if (seen & (1ULL << col)) return FAIL;
            seen |= 1ULL << col;
            if (scan_field(sc, COLS[col].kind, &vals[col]) < 0) return FAIL;
        }
    }
    int g = event_group(sc, vals);
    if (g == G_UNKNOWN) return FAIL;
    if (g != G_NONE && args_at != NULL) {
        /* args came before the keys that name its group: read it again now */
        Scan sub = {args_at, sc->end, 0, sc->ix, sc->gaps};
        if (scan_args(&sub, g, vals, &aseen) < 0) return FAIL;
    }
    if (append_row(out, vals, seen | aseen) < 0) {
        out->oom = 1;
        return FAIL;
    }
    return 0;
}

static int scan_chunk(Scan *sc, Out *out) {
    skip_ws(sc);
    if (sc->p >= sc->end || *sc->p != '[') return FAIL;
    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == ']') {
        sc->p++;
    } else {
        const unsigned char *base = sc->p - 1;
        int64_t index = 0;
        while (1) {
            skip_ws(sc);
            const unsigned char *start = sc->p;
            if (scan_event(sc, out) < 0) {
                if (sc->syntax || out->oom) return FAIL;
                /* an event not decoded exactly: pass over it by grammar and name its bytes,
                 * the msgspec path decodes it (no row was written for it) */
                sc->p = start;
                if (skip_value(sc, 1) < 0) return FAIL;
                int64_t triple[3] = {(int64_t)(start - base), (int64_t)(sc->p - base), index};
                if (buf_put(&out->fallback, triple, sizeof triple) < 0) return FAIL;
                out->nfallback++;
            }
            index++;
            skip_ws(sc);
            if (sc->p >= sc->end) SYNTAX(sc);
            if (*sc->p == ',') {
                sc->p++;
                continue;
            }
            if (*sc->p == ']') {
                sc->p++;
                break;
            }
            SYNTAX(sc);
        }
    }
    skip_ws(sc);
    if (sc->p != sc->end) SYNTAX(sc);
    if (finish_columns(out) < 0) return FAIL;
    if (out->cats != NULL && !out->cat_miss && out->ncat) { /* the codes cover every row too */
        size_t rows = out->rows, bits = (rows + 7) / 8;
        if (slot(&out->cat_code, rows - 1, 1) == NULL) return FAIL;
        if (out->cat_valid.len < bits) {
            if (buf_reserve(&out->cat_valid, bits - out->cat_valid.len) < 0) return FAIL;
            out->cat_valid.len = bits;
        }
    }
    return 0;
}

/* A time column of integers alone (no float among its values) is handed over in nanoseconds,
 * its microseconds multiplied by 1000 in place, wrapping past int64 as polars' Int64 product
 * does: _kineto_scanner.scanned_frame then needs no fix, and no new column, for it.  A chunk with
 * events left to the msgspec path keeps microseconds (those events' times may be floats,
 * which send the whole column through float64 there). */
static void times_to_ns(Out *out) {
    if (out->nfallback) return;
    const int times[2] = {C_TS, C_DUR};
    for (int t = 0; t < 2; t++) {
        Col *col = &out->cols[times[t]];
        if (col->nvalid == 0 || col->nfloat) continue;
        size_t n = col->val.len / 8 < out->rows ? col->val.len / 8 : out->rows;
        for (size_t k = 0; k < n; k++) {
            uint64_t u;
            memcpy(&u, col->val.p + k * 8, 8);
            u *= 1000u;
            memcpy(col->val.p + k * 8, &u, 8);
        }
        col->ns = 1;
    }
}

static void buf_free(Buf *b) {
    mem_mark(b->p, b->len);
    mem_free(b->p);
}

static void free_out(Out *out) {
    buf_free(&out->fallback);
    buf_free(&out->cat_code);
    buf_free(&out->cat_valid);
    for (int c = 0; c < N_COLS; c++) {
        Col *col = &out->cols[c];
        buf_free(&col->val);
        buf_free(&col->fval);
        buf_free(&col->data);
        buf_free(&col->loff);
        buf_free(&col->valid);
        buf_free(&col->lvalid);
    }
}

/* ------------------------------------------------------------------ Arrow export */


/* The buffers of one exported column, owned by its Arrow array once exported. */
typedef struct {
    const void *bufs[4];
    void *own[4];
} ColPriv;

static void release_array(struct ArrowArray *a) {
    ColPriv *cp = (ColPriv *)a->private_data;
    if (cp != NULL) {
        for (int k = 0; k < 4; k++) mem_free(cp->own[k]);
        free(cp);
    }
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s) { s->release = NULL; }

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = (struct ArrowSchema *)PyCapsule_GetPointer(cap, "arrow_schema");
    if (s == NULL) {
        PyErr_Clear();
        return;
    }
    if (s->release != NULL) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = (struct ArrowArray *)PyCapsule_GetPointer(cap, "arrow_array");
    if (a == NULL) {
        PyErr_Clear();
        return;
    }
    if (a->release != NULL) a->release(a);
    free(a);
}

/* One scanned column, handed to polars through __arrow_c_array__ (no copy, no pyarrow).
 * Each column is its own Arrow array, so what polars keeps of one column (string views
 * point into their data) holds that column's memory only. */
typedef struct {
    PyObject_HEAD
    const char *format; /* static: "l" int64, "g" float64, "vu" utf8 views, "C" uint8 */
    int64_t rows, nulls;
    int n_buffers;
    void *own[4]; /* validity (or NULL), values/views, string data, its size; NULL once exported */
} Column;

static void column_dealloc(Column *self) {
    for (int k = 0; k < 4; k++) mem_free(self->own[k]);
    PyObject_Free(self);
}

static PyObject *column_arrow_c_array(Column *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kwlist, &requested)) return NULL;
    if (requested != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError, "a scanned column is exported in its own type only");
        return NULL;
    }
    if (self->own[1] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this scanned column was already exported");
        return NULL;
    }
    struct ArrowSchema *schema = (struct ArrowSchema *)calloc(1, sizeof(struct ArrowSchema));
    struct ArrowArray *array = (struct ArrowArray *)calloc(1, sizeof(struct ArrowArray));
    ColPriv *cp = (ColPriv *)calloc(1, sizeof(ColPriv));
    if (schema == NULL || array == NULL || cp == NULL) {
        free(schema);
        free(array);
        free(cp);
        return PyErr_NoMemory();
    }
    schema->format = self->format;
    schema->name = "";
    schema->flags = ARROW_FLAG_NULLABLE;
    schema->release = release_schema;
    for (int k = 0; k < 4; k++) {
        cp->bufs[k] = self->own[k];
        cp->own[k] = self->own[k];
        self->own[k] = NULL;
    }
    array->length = self->rows;
    array->null_count = self->nulls;
    array->n_buffers = self->n_buffers;
    array->buffers = cp->bufs;
    array->release = release_array;
    array->private_data = cp;
    PyObject *cs = PyCapsule_New(schema, "arrow_schema", schema_capsule_free);
    if (cs == NULL) {
        free(schema);
        array->release(array);
        free(array);
        return NULL;
    }
    PyObject *ca = PyCapsule_New(array, "arrow_array", array_capsule_free);
    if (ca == NULL) {
        Py_DECREF(cs);
        array->release(array);
        free(array);
        return NULL;
    }
    return Py_BuildValue("(NN)", cs, ca);
}

static PyMethodDef column_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))column_arrow_c_array, METH_VARARGS | METH_KEYWORDS,
     "Export the column as an Arrow array (PyCapsule interface), once."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.native._kineto_scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One column of a scanned chunk (Arrow PyCapsule interface).",
    .tp_methods = column_methods,
};

/* A parse's Pool of freed column memory (see mem_grow), handed to scan() with each chunk.
 * The blocks still out (in columns polars holds) keep the C pool alive past this object. */
typedef struct {
    PyObject_HEAD
    Pool *pool;
} PoolObject;

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (!PyArg_ParseTuple(args, ":Pool") || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Pool() takes no arguments");
        return NULL;
    }
    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->pool = (Pool *)calloc(1, sizeof(Pool));
    if (self->pool == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
#ifdef KINETO_SCAN_MMAP
    if (pthread_mutex_init(&self->pool->lock, NULL) != 0) {
        free(self->pool);
        self->pool = NULL;
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->pool->refs = 1;
#endif
    return (PyObject *)self;
}

static void pool_dealloc(PoolObject *self) {
    Pool *pool = self->pool;
    if (pool != NULL) {
#ifdef KINETO_SCAN_MMAP
        pthread_mutex_lock(&pool->lock);
        pool->closed = 1;
        int n = pool->n;
        MemHeader *spare[POOL_SLOTS];
        memcpy(spare, pool->free, (size_t)n * sizeof spare[0]);
        pool->n = 0;
        pool->held = 0;
        pool_unref(pool); /* frees the pool when no block is out */
        for (int k = 0; k < n; k++) munmap(spare[k], spare[k]->total);
#else
        free(pool);
#endif
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pool_stats(PoolObject *self, PyObject *unused) {
    (void)unused;
    size_t taken = 0, fresh = 0, held = 0;
    int n = 0;
#ifdef KINETO_SCAN_MMAP
    Pool *pool = self->pool;
    pthread_mutex_lock(&pool->lock);
    taken = pool->taken;
    fresh = pool->fresh;
    held = pool->held;
    n = pool->n;
    pthread_mutex_unlock(&pool->lock);
#else
    (void)self;
#endif
    return Py_BuildValue("{snsnsisn}", "reused", (Py_ssize_t)taken, "mapped", (Py_ssize_t)fresh, "free", n, "free_bytes",
                         (Py_ssize_t)held);
}

static PyMethodDef pool_methods[] = {
    {"stats", (PyCFunction)pool_stats, METH_NOARGS,
     "stats() -> {'reused', 'mapped', 'free', 'free_bytes'}: blocks taken from the pool, blocks newly mapped, blocks kept free now and their bytes (all 0 where nothing is pooled)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.native._kineto_scan.Pool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pool()\n\nOne parse's freed column memory, reused by the next chunks' scans (scan(chunk, pool)).",
    .tp_methods = pool_methods,
    .tp_new = pool_new,
};

/* A Column taking the buffers out of `out` (valid only when there are nulls).  With a
 * data buffer `b2` it is a string-view column: Arrow's fourth buffer then holds the
 * size of its one data buffer. */
static PyObject *take_column(const char *format, int64_t rows, int64_t nulls, Buf *valid, Buf *b1, Buf *b2) {
    unsigned char *sizes = NULL;
    if (b2 != NULL) {
        sizes = mem_grow(NULL, NULL, 0, 8);
        if (sizes == NULL) return PyErr_NoMemory();
        int64_t size = (int64_t)b2->len;
        memcpy(sizes, &size, 8);
    }
    Column *col = PyObject_New(Column, &ColumnType);
    if (col == NULL) {
        mem_free(sizes);
        return NULL;
    }
    col->format = format;
    col->rows = rows;
    col->nulls = nulls;
    col->n_buffers = b2 != NULL ? 4 : 2;
    Buf *take[3] = {nulls ? valid : NULL, b1, b2};
    for (int k = 0; k < 3; k++) {
        col->own[k] = NULL;
        if (take[k] == NULL) continue;
        col->own[k] = take[k]->p;
        mem_mark(take[k]->p, take[k]->len);
        take[k]->p = NULL;
        take[k]->len = take[k]->cap = 0;
    }
    col->own[3] = sizes;
    return (PyObject *)col;
}

/* (name, kind, floats, labels, column, label column or None) per field. */
static PyObject *column_entry(Out *out, int c) {
    Col *col = &out->cols[c];
    int64_t rows = (int64_t)out->rows;
    int64_t nulls = rows - (int64_t)col->nvalid;
    int kind = COLS[c].kind;
    PyObject *main = NULL, *label = NULL;
    if (col->nvalid == 0 && col->nlabels == 0) /* no value in the chunk: no buffers at all */
        return Py_BuildValue("(sinnOO)", COLS[c].name, kind, (Py_ssize_t)0, (Py_ssize_t)0, Py_None, Py_None);
    if (kind == K_STR || kind == K_RAW || kind == K_RANKS)
        main = take_column("vu", rows, nulls, &col->valid, &col->val, &col->data);
    else if (kind == K_TIME)
        main = take_column(col->nfloat ? "g" : "l", rows, nulls, &col->valid, col->nfloat ? &col->fval : &col->val, NULL);
    else if (kind == K_FLOAT)
        main = take_column("g", rows, nulls, &col->valid, &col->val, NULL);
    else
        main = take_column("l", rows, nulls, &col->valid, &col->val, NULL);
    if (main == NULL) return NULL;
    if (kind == K_INT && col->nlabels) {
        label = take_column("vu", rows, rows - (int64_t)col->nlabels, &col->lvalid, &col->loff, &col->data);
        if (label == NULL) {
            Py_DECREF(main);
            return NULL;
        }
    } else {
        label = Py_None;
        Py_INCREF(label);
    }
    return Py_BuildValue("(sinnNN)", COLS[c].name, col->ns ? K_TIME_NS : kind, (Py_ssize_t)col->nfloat,
                         (Py_ssize_t)col->nlabels, main, label);
}

/* ------------------------------------------------------------------ Python */

PyDoc_STRVAR(scan_doc,
             "scan(chunk, pool=None, categories=None) -> (rows, columns, fallback), None or False\n\n"
             "Scan a JSON array of whole Kineto events into columns; None when the chunk holds\n"
             "anything not decoded exactly (the caller then uses the msgspec path), False when\n"
             "the text is certainly not JSON.  columns: (name, kind, floats, labels, column,\n"
             "label column or None) per field; a column exports itself through the Arrow\n"
             "PyCapsule interface; a field without any value in the chunk has None for its\n"
             "column (every row null); a time column of integers alone comes in nanoseconds\n"
             "(kind 7) when no event is left to the msgspec path, else in microseconds.  fallback: (start, end, index) of each event left to the\n"
             "msgspec path (byte range in the chunk, position among the chunk's events).  pool: a\n"
             "Pool, one per parse, whose freed column memory the chunk's columns reuse.\n"
             "categories: a tuple of up to 250 str (each at most 64 bytes of UTF-8); then the\n"
             "result has a fourth item, each row's cat as its position among them (a uint8\n"
             "column, null where cat is), or None when some row's cat is none of them (compared\n"
             "as bytes, so in case too; a cat written with escapes counts as none), no row\n"
             "has one, or some event is left to the msgspec path.");

/* scan()'s `categories` copied into a table (NULL with an exception set when invalid) */
static CatTable *cat_table(PyObject *categories) {
    if (!PyTuple_Check(categories)) {
        PyErr_SetString(PyExc_TypeError, "scan()'s categories must be a tuple of str or None");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(categories);
    if (n < 1 || n > CAT_MAX) {
        PyErr_Format(PyExc_ValueError, "scan() codes 1 to %d categories, not %zd", CAT_MAX, n);
        return NULL;
    }
    CatTable *t = (CatTable *)calloc(1, sizeof(CatTable));
    if (t == NULL) return (CatTable *)PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(categories, k);
        Py_ssize_t len = 0;
        const char *text = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : NULL;
        if (text == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "scan()'s categories must be str");
            free(t);
            return NULL;
        }
        if (len > CAT_TEXT) {
            PyErr_Format(PyExc_ValueError, "scan() codes categories of at most %d bytes", CAT_TEXT);
            free(t);
            return NULL;
        }
        memcpy(t->text[k], text, (size_t)len);
        t->len[k] = (size_t)len;
    }
    t->n = (int)n;
    return t;
}

static PyObject *kineto_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"chunk", "pool", "categories", NULL};
    PyObject *arg, *pool_arg = Py_None, *cats_arg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:scan", kwlist, &arg, &pool_arg, &cats_arg)) return NULL;
    Pool *pool = NULL;
    if (pool_arg != Py_None) {
        if (!PyObject_TypeCheck(pool_arg, &PoolType)) {
            PyErr_SetString(PyExc_TypeError, "scan()'s pool must be a Pool or None");
            return NULL;
        }
        pool = ((PoolObject *)pool_arg)->pool;
    }
    CatTable *cats = NULL;
    if (cats_arg != Py_None && (cats = cat_table(cats_arg)) == NULL) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        free(cats);
        return NULL;
    }
    Out *out = (Out *)calloc(1, sizeof(Out));
    if (out == NULL) {
        free(cats);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    out->cats = cats; /* (the codes' buffers are not the pool's: a chunk's codes take a few pages of
                       * a block, and the pool's blocks are better left to the columns) */
    /* first capacities from the chunk's size (an event takes about 100-400 bytes of text):
     * a large chunk's columns start as mapped pages of their own instead of doubling through
     * the C heap, and pages never written are never faulted in */
    size_t rows_hint = (size_t)view.len / 96;
    /* (the codes' first capacity from the chunk's size too, at least a mapped block's: a
     * buffer grown through the C heap past glibc's mmap threshold and freed raises that
     * threshold for the whole process; pages never written cost nothing) */
    out->cat_code.hint = rows_hint > MEM_MAP_MIN ? rows_hint : MEM_MAP_MIN;
    for (int c = 0; c < N_COLS; c++) {
        Col *col = &out->cols[c];
        int kind = COLS[c].kind;
        int text = kind == K_STR || kind == K_RAW || kind == K_RANKS;
        col->val.hint = rows_hint * (text ? 16 : 8);
        col->fval.hint = kind == K_TIME ? rows_hint * 8 : 0;
        col->loff.hint = kind == K_INT ? rows_hint * 16 : 0;
        col->data.hint = text ? (size_t)view.len / 8 : 0;
        col->val.pool = col->fval.pool = col->data.pool = col->loff.pool = col->valid.pool = col->lvalid.pool = pool;
    }
    out->fallback.pool = pool;
    KeyIndex ix;
    build_index(&ix);
    kind_masks(out->kmask);
    Gaps *gaps = (Gaps *)calloc(1, sizeof(Gaps));
    if (gaps == NULL) {
        free(out);
        free(cats);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    gaps->nstates = 1 + GAP_ROOTS;
    for (int k = 0; k < GAP_STATES; k++) gaps->state[k].way[0].need = gaps->state[k].way[1].need = GAP_EMPTY;
    gaps->cat.way[0].need = gaps->cat.way[1].need = GAP_EMPTY;
    Scan sc = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len, 0, &ix, gaps};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_chunk(&sc, out);
    if (rc >= 0) times_to_ns(out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    free(gaps);
    PyObject *result = NULL;
    if (rc < 0) {
        result = sc.syntax ? Py_False : Py_None;
        Py_INCREF(result);
    } else {
        PyObject *cols = PyTuple_New(N_COLS);
        for (int c = 0; cols != NULL && c < N_COLS; c++) {
            PyObject *t = column_entry(out, c);
            if (t == NULL) {
                Py_CLEAR(cols);
                break;
            }
            PyTuple_SET_ITEM(cols, c, t);
        }
        PyObject *fb = cols != NULL ? PyTuple_New((Py_ssize_t)out->nfallback) : NULL;
        for (size_t k = 0; fb != NULL && k < out->nfallback; k++) {
            const int64_t *t = (const int64_t *)out->fallback.p + 3 * k;
            PyObject *item = Py_BuildValue("(LLL)", (long long)t[0], (long long)t[1], (long long)t[2]);
            if (item == NULL) {
                Py_CLEAR(fb);
                break;
            }
            PyTuple_SET_ITEM(fb, (Py_ssize_t)k, item);
        }
        PyObject *codes = NULL;
        if (fb != NULL && cats != NULL) {
            if (out->cat_miss || out->ncat == 0 || out->nfallback) { /* (rows missing: the codes would not line up) */
                codes = Py_None;
                Py_INCREF(codes);
            } else {
                int64_t rows = (int64_t)out->rows;
                codes = take_column("C", rows, rows - (int64_t)out->ncat, &out->cat_valid, &out->cat_code, NULL);
            }
        }
        if (fb == NULL || (cats != NULL && codes == NULL)) {
            Py_XDECREF(cols);
            Py_XDECREF(fb);
        } else if (cats != NULL) {
            result = Py_BuildValue("(nNNN)", (Py_ssize_t)out->rows, cols, fb, codes);
        } else {
            result = Py_BuildValue("(nNN)", (Py_ssize_t)out->rows, cols, fb);
        }
    }
    free_out(out); /* what no column took */
    free(out);
    free(cats);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))kineto_scan, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto_scan", "Native scanner of Kineto traceEvents chunks.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    if (PyType_Ready(&ColumnType) < 0 || PyType_Ready(&PoolType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
