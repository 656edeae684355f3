/* train_sample.c: --sample-every, a short sample of what the model writes,
 * printed during training as llm.c prints one (stepper.h: stepper_sample).
 *
 * The training graph has no cache: each next token is a forward of the
 * whole batch with the sample so far in row 0 (the other rows and the
 * tokens after the sample zero: causal attention never lets them reach row
 * 0's earlier positions), and the logits of its last position drawn from
 * at temperature 1.  So a sample of K tokens costs K forwards, and it can
 * be at most the sequence length.  The training is untouched: the forward
 * only writes activations the next step writes again, and the loss tensor
 * is put back; the draws come from their own stream of (seed, step).
 *
 * What it deliberately is not: fusionc generate (a cache, sampling
 * options, several devices) or a tokenizer (bytes or ids). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "cpu/half.h"
#include "rt_error.h"
#include "stepper.h"

int stepper_sample(stepper *st, const rt_context *train_ctx, int64_t step, char *text, size_t size, char *err,
                   size_t err_size)
{
    program *p = st->p;
    const rt_manifest *mf = &p->manifest;
    if (mf->logits < 0 || st->tokens_at < 0 || mf->n_stages != 1 || mf->n_replicas != 1 || p->cuda)
        return rt_error(err, err_size, "--sample-every: a program of one CPU device only (this one is not)");
    const rt_tensor_info *lg = &p->tensors[mf->logits], *tk = &p->tensors[st->tokens_at];
    int64_t T = st->T, V = lg->t.dim[lg->t.rank - 1], K = st->o->sample_tokens > 0 ? st->o->sample_tokens : 32;
    K = K > T ? T : K;
    int32_t *tok = (int32_t *)(p->arena + tk->t.offset), *seq = malloc((size_t)K * sizeof *seq);
    float *row = malloc((size_t)V * sizeof *row);
    float *loss_at = mf->loss >= 0 ? (float *)(p->arena + p->tensors[mf->loss].t.offset) : NULL;
    float kept = loss_at ? *loss_at : 0.0f;
    if (!seq || !row) {
        free(seq), free(row);
        return rt_error(err, err_size, "out of memory for a sample of %lld tokens", (long long)K);
    }
    for (int32_t i = 0; i < mf->n_tensors; i++) /* no dropout while sampling */
        if (p->tensors[i].role == ROLE_INPUT && p->tensors[i].init_kind == INIT_DROPOUT)
            for (int64_t k = 0, n = rt_tensor_numel(&p->tensors[i].t); k < n; k++) {
                if (half_dtype_bytes(p->tensors[i].dtype) == 2)
                    half_from_f32(p->arena + p->tensors[i].t.offset + k * 2, &(float){ 1.0f }, 1, p->tensors[i].dtype);
                else
                    ((float *)(p->arena + p->tensors[i].t.offset))[k] = 1.0f;
            }
    seq[0] = st->data && st->data->n > 0 ? (int32_t)st->data->tokens[0] : 0;
    rt_rng r = rt_rng_seeded(st->o->seed, (uint64_t)step, 0x5A3B1E);
    int rc = 0;
    for (int64_t t = 1; t < K && rc == 0; t++) {
        memset(tok, 0, (size_t)rt_tensor_numel(&tk->t) * sizeof *tok);
        memcpy(tok, seq, (size_t)t * sizeof *seq);
        rt_context ctx = *train_ctx;
        ctx.step = -step, ctx.micro_batch = 0, ctx.phase = PHASE_FORWARD, ctx.replay = 0, ctx.before_op = NULL;
        ctx.msg[0] = '\0';
        if (fusion_forward(p->arena, &ctx) != 0) {
            rc = rt_error(err, err_size, "--sample-every: %s", ctx.msg);
            break;
        }
        rt_tensor_row_f32(&lg->t, p->arena, t - 1, row); /* row 0's token t - 1 */
        double mx = row[0], sum = 0.0;
        for (int64_t v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        for (int64_t v = 0; v < V; v++)
            sum += exp((double)row[v] - mx);
        double u = rt_rng_uniform(&r) * sum, acc = 0.0;
        int32_t next = (int32_t)V - 1;
        for (int64_t v = 0; v < V; v++) {
            acc += exp((double)row[v] - mx);
            if (u < acc) {
                next = (int32_t)v;
                break;
            }
        }
        seq[t] = next;
    }
    if (loss_at)
        *loss_at = kept;
    size_t at = 0;
    text[0] = '\0';
    for (int64_t t = 0; rc == 0 && t < K && at + 16 < size; t++) { /* bytes, unprintables escaped; or ids */
        int c = seq[t];
        if (V > 256)
            at += (size_t)snprintf(text + at, size - at, "%s%d", t ? " " : "", c);
        else if (c >= 32 && c < 127 && c != '\\')
            text[at++] = (char)c, text[at] = '\0';
        else
            at += (size_t)snprintf(text + at, size - at, c == '\n' ? "\\n" : "\\x%02x", c);
    }
    free(seq);
    free(row);
    return rc;
}
