/* test_half: runtime/cpu/half.h's conversions against an independent
 * reference: every 16-bit pattern's value computed from its fields with
 * ldexp, and the rounding of fp32 values found by searching the sorted
 * table of representable values for the nearest (ties to the even
 * pattern), over every bf16/fp16 boundary region and 2^22 random floats;
 * then the array forms (half_to_f32, half_from_f32, half_round_f32) agree
 * with the scalar ones, and exec.c's widened kernels store what the fp32
 * kernel computes, rounded. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "cpu/half.h"
#include "cpu/kernels.h"
#include "exec.h"

/* The value of a 16-bit pattern from its fields (1 sign, `eb` exponent,
 * `mb` mantissa bits, IEEE rules), in double. */
static double field_value(uint32_t h, int eb, int mb)
{
    int bias = (1 << (eb - 1)) - 1;
    uint32_t sign = h >> (eb + mb), exp = (h >> mb) & ((1u << eb) - 1), man = h & ((1u << mb) - 1);
    double v = exp == 0                ? ldexp((double)man, 1 - bias - mb)
               : exp == (1u << eb) - 1 ? (man ? NAN : INFINITY)
                                       : ldexp((double)(man | (1u << mb)), (int)exp - bias - mb);
    return sign ? -v : v;
}

/* Positive finite values of a format, ascending (pattern = index). */
typedef struct {
    double v[1 << 15];
    int n;
    double overflow; /* at or past it, rounding gives infinity */
} table;

static void table_make(table *t, int eb, int mb)
{
    t->n = 0;
    for (uint32_t h = 0; h < (1u << (eb + mb)); h++) {
        double v = field_value(h, eb, mb);
        if (isfinite(v))
            t->v[t->n++] = v;
    }
    double top = t->v[t->n - 1], ulp = top - t->v[t->n - 2];
    t->overflow = top + ulp / 2; /* halfway to the next binade's first value: ties go to even (inf) */
}

/* The pattern nearest to x (ties: even pattern), as the reference. */
static uint32_t table_round(const table *t, float x, int eb, int mb)
{
    uint32_t sign = signbit(x) ? 1u << (eb + mb) : 0;
    double a = fabs((double)x);
    if (a >= t->overflow)
        return sign | (((1u << eb) - 1) << mb);
    int lo = 0, hi = t->n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (t->v[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - t->v[lo], dh = t->v[hi] - a;
    uint32_t pick = dl < dh ? (uint32_t)lo : dh < dl ? (uint32_t)hi : (lo % 2 == 0 ? (uint32_t)lo : (uint32_t)hi);
    return sign | pick;
}

static uint32_t rng_state = 12345;
static uint32_t rng(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
    return rng_state;
}

static table bf16_table, fp16_table;

static void check_format(const char *name, const table *t, int eb, int mb, float (*to)(uint16_t),
                         uint16_t (*from)(float))
{
    int bad_to = 0, bad_from = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double ref = field_value(h, eb, mb);
        float got = to((uint16_t)h);
        if (isnan(ref) ? !isnan(got) : (double)got != ref)
            bad_to++;
        if (!isnan(ref) && from(got) != h) /* exact values round to themselves */
            bad_from++;
    }
    /* Random floats: half of them near the format's range, the rest anywhere. */
    for (int i = 0; i < (1 << 22); i++) {
        uint32_t u = rng();
        if (i & 1) /* exponents within the format's range and a little beyond */
            u = (u & 0x807fffffu) | ((uint32_t)(127 - 30 + (int)(rng() % 48)) << 23);
        float x = half_bits_f32(u);
        if (isnan(x))
            continue;
        if (from(x) != table_round(t, x, eb, mb) && bad_from++ < 5)
            fprintf(stderr, "%s: %a (0x%08x) -> 0x%04x, reference 0x%04x\n", name, (double)x, u, from(x),
                    table_round(t, x, eb, mb));
    }
    fprintf(stderr, "%s: 65536 patterns and 2^22 random floats checked\n", name);
    CHECK_INT(0, bad_to);
    CHECK_INT(0, bad_from);
    CHECK(isnan(to(from(NAN))));
}

static float bf16_to(uint16_t h) { return bf16_to_f32(h); }
static uint16_t bf16_from(float f) { return f32_to_bf16(f); }
static float fp16_to(uint16_t h) { return fp16_to_f32(h); }
static uint16_t fp16_from(float f) { return f32_to_fp16(f); }

static void test_half_arrays_match_scalars(void)
{
    enum { N = 100003 }; /* above KERNEL_PAR_MIN: the OpenMP path */
    float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back), *round = malloc(N * sizeof *round);
    uint16_t *h = malloc(N * sizeof *h);
    for (int dt = HALF_DT_F16; dt <= HALF_DT_BF16; dt++) {
        for (int i = 0; i < N; i++)
            x[i] = round[i] = (float)((double)(int32_t)rng() * 1e-9);
        half_from_f32(h, x, N, dt);
        half_to_f32(back, h, N, dt);
        half_round_f32(round, N, dt);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            uint16_t want = dt == HALF_DT_BF16 ? f32_to_bf16(x[i]) : f32_to_fp16(x[i]);
            bad += h[i] != want || back[i] != round[i] ||
                   back[i] != (dt == HALF_DT_BF16 ? bf16_to_f32(want) : fp16_to_f32(want));
        }
        CHECK_INT(0, bad);
    }
    free(x), free(back), free(round), free(h);
}

/* A gelu on bf16 tensors through rt_op_run: the fp32 kernel on the widened
 * input, its result rounded (what the scratch layout promises). */
static void test_exec_widens_and_rounds(void)
{
    enum { N = 1000 };
    rt_op op = { .op = OP_GELU, .n_in = 1, .n_out = 1 };
    op.in[0] = (rt_tensor){ .rank = 1, .dtype = HALF_DT_BF16, .dim = { N }, .offset = 0 };
    op.out[0] = (rt_tensor){ .rank = 1, .dtype = HALF_DT_BF16, .dim = { N }, .offset = 4096 };
    op.ws_offset = 8192;
    CHECK_INT(2 * 1008, rt_op_workspace_floats(&op)); /* an f32 copy of each, rounded up to 16 floats */
    char *arena = calloc(1, 8192 + (size_t)rt_op_workspace_floats(&op) * 4);
    float x[N], y[N];
    uint16_t *in = (uint16_t *)arena, *out = (uint16_t *)(arena + 4096);
    for (int i = 0; i < N; i++) {
        in[i] = f32_to_bf16((float)(i - 500) / 100.0f);
        x[i] = bf16_to_f32(in[i]);
    }
    gelu_forward(y, x, N);
    rt_context ctx = { .step = 1 };
    CHECK_INT(0, rt_op_run(&op, arena, &ctx));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += out[i] != f32_to_bf16(y[i]);
    CHECK_INT(0, bad);
    free(arena);
}

int main(void)
{
    table_make(&bf16_table, 8, 7);
    table_make(&fp16_table, 5, 10);
    check_format("bf16", &bf16_table, 8, 7, bf16_to, bf16_from);
    check_format("fp16", &fp16_table, 5, 10, fp16_to, fp16_from);
    test_half_arrays_match_scalars();
    test_exec_widens_and_rounds();
    CHECK_DONE();
}
