/* quant_allreduce.c: the quantised exchange (quant_allreduce.h). */
#include "quant_allreduce.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allreduce_wire.h"
#include "hub.h"
#include "quant.h"
#include "../rt_error.h"

#define COLS ALLREDUCE_QUANT_COLS

static int64_t chunk_lo(int64_t n, int32_t R, int32_t q) { return n * q / R; }
static int64_t rows_of(int64_t len) { return (len + COLS - 1) / COLS; }

static int direct(int bits) { return bits == ALLREDUCE_DIRECT_BITS; }

/* A chunk of len values on the wire. */
static uint64_t wire_bytes(int64_t len, int bits)
{
    return direct(bits) ? (uint64_t)len * sizeof(float) : quant_encoded_bytes(rows_of(len), COLS, bits);
}

int rt_quant_feedback_prepare(rt_quant_feedback *fb, int64_t n, int32_t R, int bits, char *err, size_t err_size)
{
    if (fb->wire) {
        if (fb->n == n)
            return 0;
        return rt_error(err, err_size, "quantised all-reduce: the bucket held %lld floats, now %lld", (long long)fb->n,
                        (long long)n);
    }
    int64_t chunk = n / R + 1, padded = rows_of(chunk) * COLS;
    fb->n = n;
    fb->chunk = chunk;
    if (!direct(bits)) { /* the direct exchange drops nothing: no feedback */
        fb->mine = calloc((size_t)n + 1, sizeof *fb->mine);
        fb->owned = calloc((size_t)chunk, sizeof *fb->owned);
    }
    fb->sum = malloc((size_t)chunk * sizeof *fb->sum);
    fb->pad = malloc((size_t)padded * sizeof *fb->pad);
    fb->dec = malloc((size_t)padded * sizeof *fb->dec);
    fb->wire_cap = wire_bytes(chunk, bits);
    fb->wire = malloc(fb->wire_cap + 1);
    if ((direct(bits) || (fb->mine && fb->owned)) && fb->sum && fb->pad && fb->dec && fb->wire)
        return 0;
    rt_quant_feedback_free(fb);
    return rt_error(err, err_size, "out of memory for a quantised all-reduce of %lld floats", (long long)n);
}

static void feedback_name(char *name, size_t size, int32_t tag, const char *part)
{
    snprintf(name, size, RT_FEEDBACK_PREFIX "allreduce.%d.%s", tag, part);
}

int rt_quant_feedback_list(rt_quant_feedback *fb, int32_t tag, rt_feedback_arrays *l)
{
    char name[96];
    if (!fb->mine)
        return 0; /* not used yet: nothing dropped */
    feedback_name(name, sizeof name, tag, "mine");
    if (rt_feedback_add(l, name, fb->mine, fb->n))
        return -1;
    feedback_name(name, sizeof name, tag, "owned");
    return rt_feedback_add(l, name, fb->owned, fb->chunk);
}

void rt_quant_feedback_restore(rt_quant_feedback *fb, int32_t tag, const rt_feedback_arrays *l)
{
    char name[96];
    if (!fb->mine)
        return; /* the direct exchange: no feedback */
    feedback_name(name, sizeof name, tag, "mine");
    if (!rt_feedback_restore(l, name, fb->mine, fb->n))
        return; /* none, or another bucket's: both ends start at zero */
    feedback_name(name, sizeof name, tag, "owned");
    rt_feedback_restore(l, name, fb->owned, fb->chunk);
}

void rt_quant_feedback_free(rt_quant_feedback *fb)
{
    free(fb->mine);
    free(fb->owned);
    free(fb->sum);
    free(fb->pad);
    free(fb->dec);
    free(fb->wire);
    memset(fb, 0, sizeof *fb);
}

/* Quantise v[len] + carry[len] (carry NULL: nothing carried) into fb->wire;
 * fb->dec gets the decoded values and carry what the rounding dropped.
 * The encoding's bytes, or -1. */
static int64_t encode_with_feedback(rt_quant_feedback *fb, const float *v, float *carry, int64_t len, int bits,
                                    char *err, size_t err_size)
{
    if (direct(bits)) { /* as it is: nothing dropped */
        memcpy(fb->wire, v, (size_t)len * sizeof *v);
        memcpy(fb->dec, v, (size_t)len * sizeof *v);
        return len * (int64_t)sizeof *v;
    }
    int64_t rows = rows_of(len);
    for (int64_t i = 0; i < len; i++)
        fb->pad[i] = v[i] + carry[i];
    memset(fb->pad + len, 0, (size_t)(rows * COLS - len) * sizeof *fb->pad);
    int64_t bytes = quant_encode(fb->pad, rows, COLS, bits, QUANT_NEAREST, 0, fb->wire, fb->wire_cap);
    if (bytes < 0 || quant_decode(fb->wire, (size_t)bytes, fb->dec, rows * COLS, err, err_size) != 0) {
        if (bytes < 0)
            snprintf(err, err_size, "cannot quantise %lld x %d to %d bits", (long long)rows, COLS, bits);
        return -1;
    }
    for (int64_t i = 0; i < len; i++) {
        float dropped = fb->pad[i] - fb->dec[i];
        carry[i] = isfinite(dropped) ? dropped : 0.0f;
    }
    return bytes;
}

/* Receive replica q's encoding of a chunk of len values into fb->dec. */
static int receive(struct fu_hub *hub, int32_t device, fu_msg_info *want, rt_quant_feedback *fb, int64_t len, int bits,
                   char *err, size_t err_size)
{
    char why[400];
    if (fu_hub_recv(hub, device, want, direct(bits) ? (void *)fb->dec : fb->wire, want->length, why, sizeof why) != 0 ||
        (!direct(bits) && quant_decode(fb->wire, want->length, fb->dec, rows_of(len) * COLS, why, sizeof why) != 0)) {
        snprintf(err, err_size, "quantised all-reduce of tensor %d, from device %d: %.300s", want->tensor, device, why);
        return -1;
    }
    return 0;
}

int rt_quant_mean(struct fu_hub *hub, const int32_t *devices, int32_t R, int32_t me, float *x, int64_t n, int32_t tag,
                  int bits, int64_t step, rt_quant_feedback *fb, char *err, size_t err_size)
{
    if (R < 2)
        return 0;
    if (bits != 8 && bits != 4 && !direct(bits)) {
        snprintf(err, err_size, "quantised all-reduce of tensor %d at %d bits (8, 4 or %d)", tag, bits,
                 ALLREDUCE_DIRECT_BITS);
        return -1;
    }
    if (rt_quant_feedback_prepare(fb, n, R, bits, err, err_size))
        return -1;
    fu_msg_info m = { .kind = MSG_GRADIENT,
                      .step = step,
                      .micro_batch = -2,
                      .tensor = tag,
                      .codec = direct(bits) ? FU_CODEC_RAW_F32 : FU_CODEC_QUANT };
    char why[400];
    /* Round 1: each other replica's chunk, from the next replica on. */
    for (int32_t k = 1; k < R; k++) {
        int32_t q = (me + k) % R;
        int64_t lo = chunk_lo(n, R, q), len = chunk_lo(n, R, q + 1) - lo;
        int64_t bytes = encode_with_feedback(fb, x + lo, fb->mine ? fb->mine + lo : NULL, len, bits, why, sizeof why);
        m.length = (uint64_t)(bytes > 0 ? bytes : 0);
        if (bytes < 0 || fu_hub_send(hub, devices[q], &m, fb->wire, why, sizeof why) != 0) {
            snprintf(err, err_size, "quantised all-reduce of tensor %d, to device %d: %.300s", tag, devices[q], why);
            return -1;
        }
    }
    /* Our chunk: the R contributions summed in replica order, then the mean. */
    int64_t lo = chunk_lo(n, R, me), len = chunk_lo(n, R, me + 1) - lo;
    fu_msg_info want = m;
    want.length = wire_bytes(len, bits);
    memset(fb->sum, 0, (size_t)len * sizeof *fb->sum);
    for (int32_t q = 0; q < R; q++) {
        const float *from = x + lo;
        if (q != me) {
            if (receive(hub, devices[q], &want, fb, len, bits, err, err_size))
                return -1;
            from = fb->dec;
        }
        for (int64_t i = 0; i < len; i++)
            fb->sum[i] += from[i];
    }
    for (int64_t i = 0; i < len; i++)
        fb->sum[i] /= (float)R;
    /* Round 2: the mean, quantised once, to everyone; ours is its decoding too. */
    m.micro_batch = want.micro_batch = -3;
    int64_t bytes = encode_with_feedback(fb, fb->sum, fb->owned, len, bits, why, sizeof why);
    if (bytes < 0) {
        return rt_error(err, err_size, "quantised all-reduce of tensor %d: %.300s", tag, why);
    }
    m.length = (uint64_t)bytes;
    for (int32_t k = 1; k < R; k++) {
        int32_t q = (me + k) % R;
        if (fu_hub_send(hub, devices[q], &m, fb->wire, why, sizeof why) != 0) {
            return rt_error(err, err_size, "quantised all-reduce of tensor %d, to device %d: %.300s", tag, devices[q],
                            why);
        }
    }
    memcpy(x + lo, fb->dec, (size_t)len * sizeof *x);
    for (int32_t q = 0; q < R; q++) {
        if (q == me)
            continue;
        int64_t qlo = chunk_lo(n, R, q), qlen = chunk_lo(n, R, q + 1) - qlo;
        want.length = wire_bytes(qlen, bits);
        if (receive(hub, devices[q], &want, fb, qlen, bits, err, err_size))
            return -1;
        memcpy(x + qlo, fb->dec, (size_t)qlen * sizeof *x);
    }
    return 0;
}
