/* The fuzzer's coverage hooks in a sanitizer build of tracekit's extensions (setup.py with
 * TRACEKIT_NATIVE_BUILD=asan compiles this file into each extension).
 *
 * gcc's -fsanitize-coverage=trace-pc calls __sanitizer_cov_trace_pc on every edge, but the
 * libFuzzer inside atheris counts only clang's inline 8-bit counters (it stops on trace-pc as
 * deprecated instrumentation), and gcc has no inline counters.  So each edge's address is
 * hashed here into this extension's own array of 8-bit counters, which the harness registers
 * with libFuzzer (tracekit_fuzz_attach) once atheris has loaded it: the C code's edges then
 * guide the fuzzer like Python's.  The compare hooks of -fsanitize-coverage=trace-cmp go on to
 * libFuzzer's by a sibling call, so the return address libFuzzer reads is still the compare's
 * place in this extension; gcc's float compares have no libFuzzer hook and are dropped.
 *
 * Every hook is hidden (each extension binds its own, never the sanitizer runtime's no-op
 * defaults) and neither instrumented nor sanitized itself.  Before attach the hooks only count.
 */
#include <stddef.h>
#include <stdint.h>

#define HOOK __attribute__((visibility("hidden"), no_sanitize_coverage, no_sanitize("address", "undefined")))
#define EDGE_BITS 17
#define EDGES (1u << EDGE_BITS)

static uint8_t edge_counters[EDGES];
/* libFuzzer wants one (address, flags) pair per counter; the "address" is the slot */
static uintptr_t edge_table[2 * EDGES];

typedef void (*cmp1_fn)(uint8_t, uint8_t);
typedef void (*cmp2_fn)(uint16_t, uint16_t);
typedef void (*cmp4_fn)(uint32_t, uint32_t);
typedef void (*cmp8_fn)(uint64_t, uint64_t);
typedef void (*switch_fn)(uint64_t, uint64_t *);
typedef void (*counters_init_fn)(uint8_t *, uint8_t *);
typedef void (*pcs_init_fn)(const uintptr_t *, const uintptr_t *);

static cmp1_fn on_cmp1, on_const_cmp1;
static cmp2_fn on_cmp2, on_const_cmp2;
static cmp4_fn on_cmp4, on_const_cmp4;
static cmp8_fn on_cmp8, on_const_cmp8;
static switch_fn on_switch;

HOOK void __sanitizer_cov_trace_pc(void) {
    /* Fibonacci hashing of the edge's address: neighbouring call sites land far apart */
    uint64_t pc = (uint64_t)(uintptr_t)__builtin_return_address(0);
    edge_counters[(pc * 0x9E3779B97F4A7C15ull) >> (64 - EDGE_BITS)]++;
}

#define FORWARD(name, type, hook)                              \
    HOOK void name(type a, type b) {                           \
        if (hook) hook(a, b);                                  \
    }
FORWARD(__sanitizer_cov_trace_cmp1, uint8_t, on_cmp1)
FORWARD(__sanitizer_cov_trace_cmp2, uint16_t, on_cmp2)
FORWARD(__sanitizer_cov_trace_cmp4, uint32_t, on_cmp4)
FORWARD(__sanitizer_cov_trace_cmp8, uint64_t, on_cmp8)
FORWARD(__sanitizer_cov_trace_const_cmp1, uint8_t, on_const_cmp1)
FORWARD(__sanitizer_cov_trace_const_cmp2, uint16_t, on_const_cmp2)
FORWARD(__sanitizer_cov_trace_const_cmp4, uint32_t, on_const_cmp4)
FORWARD(__sanitizer_cov_trace_const_cmp8, uint64_t, on_const_cmp8)

HOOK void __sanitizer_cov_trace_cmpf(float a, float b) {
    (void)a;
    (void)b;
}

HOOK void __sanitizer_cov_trace_cmpd(double a, double b) {
    (void)a;
    (void)b;
}

HOOK void __sanitizer_cov_trace_switch(uint64_t value, uint64_t *cases) {
    if (on_switch) on_switch(value, cases);
}

/* hooks: libFuzzer's __sanitizer_cov_8bit_counters_init, __sanitizer_cov_pcs_init, then its
 * trace_cmp1, 2, 4, 8, trace_const_cmp1, 2, 4, 8 and trace_switch, in that order.  Registers
 * this extension's counters; answers how many there are. */
__attribute__((visibility("default"))) unsigned tracekit_fuzz_attach(void *const *hooks) {
    for (uintptr_t i = 0; i < EDGES; i++) {
        edge_table[2 * i] = i + 1;
        edge_table[2 * i + 1] = 0;
    }
    on_cmp1 = (cmp1_fn)hooks[2];
    on_cmp2 = (cmp2_fn)hooks[3];
    on_cmp4 = (cmp4_fn)hooks[4];
    on_cmp8 = (cmp8_fn)hooks[5];
    on_const_cmp1 = (cmp1_fn)hooks[6];
    on_const_cmp2 = (cmp2_fn)hooks[7];
    on_const_cmp4 = (cmp4_fn)hooks[8];
    on_const_cmp8 = (cmp8_fn)hooks[9];
    on_switch = (switch_fn)hooks[10];
    ((counters_init_fn)hooks[0])(edge_counters, edge_counters + EDGES);
    ((pcs_init_fn)hooks[1])(edge_table, edge_table + 2 * EDGES);
    return EDGES;
}
