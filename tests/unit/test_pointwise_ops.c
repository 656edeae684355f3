/* test_pointwise_ops: every pointwise op of ir/pointwise.h, from the
 * table, on the CPU kernels made from its row: each gradient its backward
 * writes against central differences of its forward, at points away from
 * any kink (relu's 0).  A row added to pointwise.h is checked here with no
 * line of its own; its forward is checked against an independent formula
 * below where the op has one (and against torch by the parity tests for
 * the ops the shipped models use). */
#include <math.h>
#include <stdlib.h>

#include "check.h"

#include "../../ir/ops.h"
#include "../../runtime/cpu/kernels.h"

#define N 4099 /* not a multiple of any vector width */

static float uniform(unsigned *seed, float lo, float hi)
{
    *seed = *seed * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((*seed >> 8) & 0xffffff) / (float)0x1000000;
}

/* x away from 0 by at least 0.05, in [-4, 4] */
static float away_from_zero(unsigned *seed)
{
    float v = uniform(seed, 0.05f, 4.0f);
    return uniform(seed, 0.0f, 1.0f) < 0.5f ? -v : v;
}

static void check_gradients(int k)
{
    const op_def *d = &op_table[k];
    int two = d->pointwise.inputs == 2;
    static float x[N], z[N], dy[N], g[2][N], up[N], down[N], moved[N];
    unsigned seed = 7u + (unsigned)k;
    for (int i = 0; i < N; i++)
        x[i] = away_from_zero(&seed), z[i] = away_from_zero(&seed), dy[i] = uniform(&seed, -1.0f, 1.0f);
    float *const grads[2] = { g[0], two ? g[1] : NULL };
    const float *const bin[3] = { x, two ? z : dy, two ? dy : NULL };
    CHECK_INT(0, pointwise_run(d->backward, grads, bin, N));
    const float h = 1e-2f;
    for (int input = 0; input < d->pointwise.inputs; input++) {
        double worst = 0.0;
        int at = 0;
        for (int sign = -1; sign <= 1; sign += 2) {
            float *const fout[2] = { sign > 0 ? up : down, NULL };
            for (int i = 0; i < N; i++)
                moved[i] = (input == 0 ? x[i] : z[i]) + (float)sign * h;
            const float *const fin[3] = { input == 0 ? moved : x, input == 1 ? moved : z, NULL };
            CHECK_INT(0, pointwise_run(k, fout, fin, N));
        }
        for (int i = 0; i < N; i++) {
            double numeric = dy[i] * ((double)up[i] - (double)down[i]) / (2.0 * h);
            double err = fabs(numeric - g[input][i]) / (1.0 + fabs(numeric));
            if (err > worst)
                worst = err, at = i;
        }
        if (worst > 2e-3)
            fprintf(stderr, "%s: the gradient of input %d at x=%g z=%g dy=%g: %g, central differences %g\n", d->name,
                    input, x[at], z[at], dy[at], g[input][at],
                    dy[at] * ((double)up[at] - (double)down[at]) / (2.0 * h));
        CHECK(worst <= 2e-3);
    }
}

/* The forwards against what the ops are, in double. */
static double reference(int k, double x, double z)
{
    switch (k) {
    case OP_GELU:
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case OP_RELU:
        return x > 0 ? x : 0;
    case OP_SILU:
        return x / (1.0 + exp(-x));
    case OP_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case OP_ADD:
        return x + z;
    case OP_MUL:
        return x * z;
    default:
        return NAN;
    }
}

int main(void)
{
    int checked = 0;
    for (int k = 0; k < OP_COUNT; k++) {
        const op_def *d = &op_table[k];
        if (!d->pointwise.inputs || d->forward_of != OP_COUNT)
            continue;
        checked++;
        if (d->backward != OP_COUNT)
            check_gradients(k);
        float x[64], z[64], y[64];
        unsigned seed = 3;
        for (int i = 0; i < 64; i++)
            x[i] = uniform(&seed, -6.0f, 6.0f), z[i] = uniform(&seed, -6.0f, 6.0f);
        float *const out[2] = { y, NULL };
        const float *const in[3] = { x, z, NULL };
        CHECK_INT(0, pointwise_run(k, out, in, 64));
        if (isnan(reference(k, 1.0, 1.0))) {
            fprintf(stderr, "%s: no reference formula in this test: add one\n", d->name);
            CHECK(!"a reference for every pointwise op");
            continue;
        }
        for (int i = 0; i < 64; i++)
            CHECK_NEAR(reference(k, x[i], z[i]), y[i], 2e-6 * (1.0 + fabs(reference(k, x[i], z[i]))));
    }
    CHECK(checked >= 6);
    printf("%d pointwise ops: gradients against central differences, forwards against their formulas\n", checked);
    CHECK_DONE();
}
