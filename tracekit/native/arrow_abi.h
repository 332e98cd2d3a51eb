/* The Arrow C data and C stream interfaces: the struct layouts every native module of
 * tracekit exchanges columns through (with polars, over the Arrow PyCapsule protocol).
 * They are a stable ABI fixed by the Arrow project's specification
 * (https://arrow.apache.org/docs/format/CDataInterface.html and CStreamInterface.html);
 * the guards are the specification's own, so a translation unit that also includes
 * another copy of these definitions still compiles. */
#ifndef TRACEKIT_ARROW_ABI_H
#define TRACEKIT_ARROW_ABI_H

#include <stdint.h>

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowSchema {
    const char *format;   /* the type, e.g. "l" int64, "vu" string view */
    const char *name;
    const char *metadata;
    int64_t flags;        /* ARROW_FLAG_* */
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);  /* NULL once released */
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;   /* -1 when not computed */
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers; /* buffers[0] is the validity bitmap (may be NULL) */
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);   /* NULL once released */
    void *private_data;
};
#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out); /* out->release NULL at the end */
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};
#endif /* ARROW_C_STREAM_INTERFACE */

#endif /* TRACEKIT_ARROW_ABI_H */
