/* Whole-file gzip decompression into a caller's buffer, with libdeflate loaded at run time.
 *
 * The Kineto reader (parsers/_source.py, open_whole) decompresses a small or medium .json.gz
 * in one call into one writable mapping that its chunker then cuts in place, instead of
 * streaming zlib's output blocks through Python (each block a fresh bytes object, joined and
 * copied again by the chunker).  libdeflate decompresses a whole buffer about twice as fast
 * as zlib's streaming inflate.  It is opened with dlopen, its three functions looked up with
 * dlsym and declared here (no header, no link-time dependency): where the library is missing
 * the module still builds and gunzip() answers None, and the reader streams with zlib.
 *
 * No state outside a call: the library is opened and closed by each call (the loader keeps it
 * mapped after the first one, so that costs microseconds).  The decompression runs without
 * the GIL.  Every member's input and output are bounded by the buffers' lengths (libdeflate
 * checks its own reads and writes against them and verifies each member's CRC and size).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>

/* libdeflate's ABI, declared from its documentation (enum libdeflate_result) */
#define LD_SUCCESS 0
#define LD_BAD_DATA 1
#define LD_SHORT_OUTPUT 2
#define LD_INSUFFICIENT_SPACE 3

typedef void *(*alloc_fn)(void);
typedef int (*gunzip_fn)(void *d, const void *in, size_t in_n, void *out, size_t out_avail, size_t *in_used,
                         size_t *out_used);
typedef void (*free_fn)(void *d);

/* outcome codes returned to Python (parsers/_source.py mirrors them) */
#define OUTCOME_OK 0          /* every member decompressed, the rest of the input is zero padding */
#define OUTCOME_DAMAGED 1     /* a member is damaged or cut short: the streaming path decides */
#define OUTCOME_TOO_LARGE 2   /* the output does not fit in the buffer */

PyDoc_STRVAR(gunzip_doc,
             "gunzip(src, dst, library) -> (outcome, nbytes) or None\n\n"
             "Decompress every gzip member of src (a bytes-like object) into the writable buffer\n"
             "dst, one after the other, with libdeflate opened from the file name library.\n"
             "outcome: 0 when every member decompressed and what follows the last one is only\n"
             "zero bytes (nbytes: the bytes written), 1 when a member is damaged or cut short, 2\n"
             "when the output does not fit in dst.  None when the library cannot be opened or\n"
             "lacks a function.");

static PyObject *inflate_gunzip(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src, dst;
    const char *library;
    if (!PyArg_ParseTuple(args, "y*w*s", &src, &dst, &library)) return NULL;
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    alloc_fn alloc = NULL;
    gunzip_fn gunzip = NULL;
    free_fn release = NULL;
    if (lib != NULL) {
        /* (a function pointer through a data pointer: what dlsym's interface requires) */
        *(void **)(&alloc) = dlsym(lib, "libdeflate_alloc_decompressor");
        *(void **)(&gunzip) = dlsym(lib, "libdeflate_gzip_decompress_ex");
        *(void **)(&release) = dlsym(lib, "libdeflate_free_decompressor");
    }
    void *d = (alloc != NULL && gunzip != NULL && release != NULL) ? alloc() : NULL;
    if (d == NULL) {
        if (lib != NULL) dlclose(lib);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        Py_RETURN_NONE;
    }
    const unsigned char *in = (const unsigned char *)src.buf;
    unsigned char *out = (unsigned char *)dst.buf;
    size_t in_n = (size_t)src.len, out_n = (size_t)dst.len;
    size_t in_off = 0, out_off = 0;
    int outcome = OUTCOME_OK;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        size_t used_in = 0, used_out = 0;
        int rc = gunzip(d, in + in_off, in_n - in_off, out + out_off, out_n - out_off, &used_in, &used_out);
        if (rc == LD_INSUFFICIENT_SPACE) {
            outcome = OUTCOME_TOO_LARGE;
            break;
        }
        if (rc != LD_SUCCESS || used_in == 0 || used_in > in_n - in_off || used_out > out_n - out_off) {
            outcome = OUTCOME_DAMAGED;
            break;
        }
        in_off += used_in;
        out_off += used_out;
        /* another member follows unless the rest is zero padding (or nothing): the streaming
         * path's rule too */
        size_t k = in_off;
        while (k < in_n && in[k] == 0) k++;
        if (k == in_n) break;
    }
    Py_END_ALLOW_THREADS
    release(d);
    dlclose(lib);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return Py_BuildValue("(in)", outcome, (Py_ssize_t)out_off);
}

static PyMethodDef inflate_methods[] = {
    {"gunzip", inflate_gunzip, METH_VARARGS, gunzip_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef inflate_module = {
    PyModuleDef_HEAD_INIT, "_inflate", "Whole-file gzip decompression with libdeflate (see tracekit/native/_inflate.c).", 0,
    inflate_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__inflate(void) { return PyModule_Create(&inflate_module); }
