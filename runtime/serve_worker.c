/* serve_worker.c: an inference program as a server's worker (--serve;
 * generate.h): requests in on standard input, tokens out on standard
 * output, a JSON object a line each way, and every step a forward of all
 * the program's B rows at once (continuous batching).
 *
 *   in   {"id": N, "prompt": [ids], "max_tokens": M, "temperature": T,
 *         "top_k": K, "top_p": P, "seed": S, "stop": [ids]}  a request
 *        {"cancel": N}                                       drop one
 *   out  {"id": N, "token": ID}                a generated token
 *        {"id": N, "done": "length"|"stop"|"context", "prompt": P, "tokens": G}
 *        {"id": N, "error": "..."}             refused (the worker goes on)
 *
 * A request takes a free row; each step feeds every busy row its next
 * token at its own position (a prompt's next, or the last drawn), so rows
 * at different places of different sequences share the step; a row whose
 * prompt is in draws its next token from its logits.  A row's cache rows
 * beyond its position are never read (each token attends to positions up
 * to its own), so a finished row is reused without clearing.  An idle row
 * is fed token 0 at position 0 (it writes only its own cache row 0).
 * Where the program has a prompt step (--prefill P), rows with long
 * prompts take them P tokens at a time (prefill_rows) whenever that
 * costs less than the one-token steps it saves.
 * Requests wait in arrival order while every row is busy.  Standard input
 * closed: the worker finishes what it has and exits 0.
 *
 * Over several devices (a pipeline's stages, fusionc serve starting each)
 * the last stage leads: it reads the requests, draws and writes the
 * tokens, and sends every step's command (its phase, and the rows' tokens
 * and positions) to the other stages, which run it (serve_steps below);
 * the activations cross the sealed links as in training.
 *
 * What it deliberately is not: an HTTP server or a tokenizer (fusionc
 * serve is both, tools/serve.c). */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../ir/ir.h"
#include "checkpoint.h"
#include "comm/comm.h"
#include "comm/hub.h"
#include "cpu/half.h"
#include "generate.h"
#include "program.h"

typedef struct {
    int busy;
    long long id;
    int32_t *prompt;
    int64_t n_prompt, at, made, max_tokens;
    int32_t last, stop[RT_GENERATE_MAX_STOP];
    int n_stop;
    rt_generate_options draw;
    rt_rng r;
} row;

static void say_error(long long id, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddStringToObject(o, "error", msg);
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        printf("%s\n", s);
    fflush(stdout);
    free(s);
    cJSON_Delete(o);
}

static void say_done(const row *w, const char *why)
{
    printf("{\"id\":%lld,\"done\":\"%s\",\"prompt\":%lld,\"tokens\":%lld}\n", w->id, why, (long long)w->n_prompt,
           (long long)w->made);
    fflush(stdout);
}

static double number(const cJSON *o, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* Start request `text` (a JSON line) on row w: 0, or -1 said as an error. */
static int start(row *w, const char *text, int64_t vocab, int64_t ctx, const rt_generate_options *defaults)
{
    cJSON *o = cJSON_Parse(text);
    long long id = (long long)number(o, "id", -1);
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt"),
                *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
    const char *bad = !cJSON_IsObject(o)                                          ? "not a JSON object"
                      : id < 0                                                    ? "no id"
                      : !cJSON_IsArray(prompt) || cJSON_GetArraySize(prompt) == 0 ? "no prompt ids"
                      : cJSON_GetArraySize(prompt) > ctx ? "the prompt is longer than the context"
                      : stop && (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > RT_GENERATE_MAX_STOP)
                          ? "stop is not a list of at most 16 ids"
                          : NULL;
    int64_t n = bad ? 0 : cJSON_GetArraySize(prompt);
    int32_t *ids = bad ? NULL : malloc((size_t)n * sizeof *ids);
    if (!bad && !ids)
        bad = "out of memory";
    for (int64_t i = 0; !bad && i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(prompt, (int)i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (double)vocab)
            bad = "a prompt id is outside the vocabulary";
        else
            ids[i] = (int32_t)v->valuedouble;
    }
    if (bad) {
        say_error(id, bad);
        free(ids);
        cJSON_Delete(o);
        return -1;
    }
    memset(w, 0, sizeof *w);
    w->busy = 1, w->id = id, w->prompt = ids, w->n_prompt = n;
    w->max_tokens = (int64_t)number(o, "max_tokens", (double)defaults->max_tokens);
    w->draw = *defaults;
    w->draw.temperature = number(o, "temperature", defaults->temperature);
    w->draw.top_k = (int)number(o, "top_k", defaults->top_k);
    w->draw.top_p = number(o, "top_p", defaults->top_p);
    w->r = rt_rng_seeded((uint64_t)number(o, "seed", (double)defaults->seed), 0x6E17, 0);
    for (int k = 0; stop && k < cJSON_GetArraySize(stop); k++) {
        const cJSON *s = cJSON_GetArrayItem(stop, k);
        if (cJSON_IsNumber(s))
            w->stop[w->n_stop++] = (int32_t)s->valuedouble;
    }
    cJSON_Delete(o);
    return 0;
}

static void finish(row *w, const char *why)
{
    say_done(w, why);
    free(w->prompt);
    w->prompt = NULL;
    w->busy = 0;
}

/* Standard input as lines, read with read(2) into a buffer of our own
 * (stdio's would hide lines already read from poll). */
static struct {
    char *buf;
    size_t n, cap;
    int eof;
} in;

/* The next whole line into *line (malloc'd, without its newline), waiting
 * up to wait_ms for one (-1: as long as it takes): 1 a line, 0 none yet,
 * -1 end of input. */
static int read_line(int wait_ms, char **line)
{
    for (;;) {
        char *nl = in.n ? memchr(in.buf, '\n', in.n) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - in.buf);
            *line = malloc(len + 1);
            if (!*line)
                return -1;
            memcpy(*line, in.buf, len);
            (*line)[len] = '\0';
            memmove(in.buf, nl + 1, in.n - len - 1);
            in.n -= len + 1;
            return 1;
        }
        if (in.eof)
            return -1;
        struct pollfd pfd = { .fd = 0, .events = POLLIN };
        int ready = poll(&pfd, 1, wait_ms);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0)
            return 0;
        if (in.n + 4096 > in.cap) {
            char *grown = realloc(in.buf, in.cap * 2 + 8192);
            if (!grown)
                return -1;
            in.buf = grown, in.cap = in.cap * 2 + 8192;
        }
        ssize_t got = read(0, in.buf + in.n, in.cap - in.n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            in.eof = 1;
        else
            in.n += (size_t)got;
    }
}

/* ---- the steps, on one device or over a pipeline ------------------------------- */

/* A step's command.  The leader (the last stage: it has the logits and
 * reads the requests) fills it, sends it to every other stage of the
 * pipeline, and each stage runs it: the first feeds its tokens and
 * positions, every one runs its phase (the activations and positions
 * cross the links as in training).
 *   cmd[0]           PHASE_FORWARD (k = B tokens), PHASE_PREFILL (k = B P),
 *                    SERVE_IDLE (nothing: the leader has waited a while, and
 *                    the others must not take the silence for a stall) or
 *                    SERVE_END
 *   cmd[1, 1 + k)    the tokens, row-major (B, 1) or (B, P)
 *   cmd[1 + k, ...)  their positions */
enum { SERVE_END = -1, SERVE_IDLE = 0 };
#define SERVE_COMMAND_TAG (-2002)
#define SERVE_IDLE_MS     60000 /* well inside the links' stall timeout */

typedef struct {
    program *p;
    struct rt_comm *comm;  /* NULL on one device */
    rt_inference_feeds in; /* the first stage's inputs; -1 elsewhere */
    int64_t B, P;
    int32_t *cmd;  /* 1 + 2 B max(P, 1) */
    int64_t steps; /* commands so far: each one's messages carry its number */
} serve_steps;

static int64_t command_tokens(const serve_steps *s, int32_t phase)
{
    return phase == PHASE_PREFILL ? s->B * s->P : phase == PHASE_FORWARD ? s->B : 0;
}

static uint64_t command_bytes(const serve_steps *s, int32_t phase)
{
    return (uint64_t)(1 + 2 * command_tokens(s, phase)) * sizeof *s->cmd;
}

/* Run s->cmd on this stage.  0, or 1 said. */
static int command_run(serve_steps *s)
{
    program *p = s->p;
    int32_t phase = s->cmd[0];
    if (phase != PHASE_FORWARD && phase != PHASE_PREFILL)
        return 0;
    int64_t k = command_tokens(s, phase);
    int32_t tokens = phase == PHASE_PREFILL ? s->in.prefill_tokens : s->in.tokens;
    int32_t positions = phase == PHASE_PREFILL ? s->in.prefill_positions : s->in.positions;
    if (tokens >= 0) {
        memcpy(p->arena + p->tensors[tokens].t.offset, s->cmd + 1, (size_t)k * sizeof *s->cmd);
        memcpy(p->arena + p->tensors[positions].t.offset, s->cmd + 1 + k, (size_t)k * sizeof *s->cmd);
    }
    rt_context cx = {
        .step = s->steps, .micro_batch = 0, .phase = phase, .comm = s->comm, .cuda = p->cuda, .loss_weight = 1.0f
    };
    if ((phase == PHASE_PREFILL ? fusion_prefill : fusion_forward)(p->arena, &cx) != 0)
        return fail("%s: a serving %sstep: %s", p->manifest.device, phase == PHASE_PREFILL ? "prompt " : "", cx.msg);
    return 0;
}

/* The leader: s->cmd to every other stage, then run here.  0, or 1 said. */
static int lead(serve_steps *s)
{
    const rt_manifest *m = &s->p->manifest;
    s->steps++;
    fu_msg_info info = { .kind = MSG_ACTIVATION,
                         .step = s->steps,
                         .micro_batch = 0,
                         .tensor = SERVE_COMMAND_TAG,
                         .codec = FU_CODEC_RAW_F32,
                         .length = command_bytes(s, s->cmd[0]) };
    char why[400];
    for (int32_t st = 0; st + 1 < m->n_stages; st++)
        if (fu_hub_send(s->comm->hub, s->p->placement[st * m->n_replicas + m->replica], &info, s->cmd, why,
                        sizeof why) != 0)
            return fail("%s: sending a serving step: %s", m->device, why);
    return command_run(s);
}

/* A stage other than the leader: run the leader's commands until its
 * end.  0, or 1 said. */
static int follow(serve_steps *s)
{
    const rt_manifest *m = &s->p->manifest;
    int32_t leader = s->p->placement[(m->n_stages - 1) * m->n_replicas + m->replica];
    char why[400];
    for (;;) {
        s->steps++;
        fu_msg_info want = { .kind = MSG_ACTIVATION, .step = s->steps, .micro_batch = 0, .tensor = SERVE_COMMAND_TAG };
        uint64_t length = 0;
        if (fu_hub_recv_upto(s->comm->hub, leader, &want, s->cmd, command_bytes(s, PHASE_PREFILL), &length, why,
                             sizeof why) != 0)
            return fail("%s: receiving a serving step: %s", m->device, why);
        if (length < sizeof *s->cmd || length != command_bytes(s, s->cmd[0]))
            return fail("%s: a serving step of %llu bytes, not a command", m->device, (unsigned long long)length);
        if (s->cmd[0] == SERVE_END)
            return 0;
        if (command_run(s))
            return 1;
    }
}

/* The prompt step (passes/prefill.c: P tokens a row at once) into
 * s->cmd, for the rows with two or more prompt tokens before their last:
 * up to P of them each, at their positions (a short chunk repeats its
 * last token at its position).  Every other row is fed token 0 at
 * position ctx - 1, a cache row it writes itself before it ever reads it
 * (a token attends to rows up to its own position).  A row's last prompt
 * token is left to the one-token step, which draws from it. */
static void prefill_command(serve_steps *s, const row *rows, int64_t ctx)
{
    int64_t B = s->B, P = s->P;
    int32_t *tok = s->cmd + 1, *pos = s->cmd + 1 + B * P;
    s->cmd[0] = PHASE_PREFILL;
    for (int64_t b = 0; b < B; b++) {
        const row *w = &rows[b];
        int64_t n = w->busy ? w->n_prompt - 1 - w->at : 0;
        n = n < 2 ? 0 : n < P ? n : P;
        for (int64_t j = 0; j < P; j++) {
            int64_t k = j < n ? j : n - 1;
            tok[b * P + j] = n > 0 ? w->prompt[w->at + k] : 0;
            pos[b * P + j] = n > 0 ? (int32_t)(w->at + k) : (int32_t)(ctx - 1);
        }
    }
}

/* After the prompt step: each row it fed is that much further. */
static void prefill_advance(row *rows, int64_t B, int64_t P)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t n = rows[b].busy ? rows[b].n_prompt - 1 - rows[b].at : 0;
        if (n >= 2)
            rows[b].at += n < P ? n : P;
    }
}

/* Whether the prompt step pays now: it costs t_prefill (measured; 0
 * before the first) and saves the one-token steps (t_step each) that the
 * longest waiting prompt would take. */
static int prefill_pays(const row *rows, int64_t B, int64_t P, double t_step, double t_prefill)
{
    int64_t most = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = rows[b].busy ? rows[b].n_prompt - 1 - rows[b].at : 0;
        most = n > most ? n : most;
    }
    most = most < P ? most : P;
    return most >= 2 && (double)most * t_step >= t_prefill;
}

/* The leader's loop: requests in, tokens out (the file's comment). */
static int serve_requests(serve_steps *s, const rt_generate_options *o, int64_t ctx)
{
    program *p = s->p;
    const rt_manifest *m = &p->manifest;
    const rt_tensor_info *out = &p->tensors[m->output];
    int64_t B = s->B, V = out->t.dim[out->t.rank - 1], per_row = rt_tensor_numel(&out->t) / B;
    row *rows = calloc((size_t)B, sizeof *rows);
    float *logits = malloc((size_t)V * 2 * sizeof *logits);
    int32_t *order = malloc((size_t)V * sizeof *order);
    char **queue = NULL, *line = NULL;
    size_t n_queue = 0, cap_queue = 0;
    if (!rows || !logits || !order) {
        free(rows), free(logits), free(order);
        return fail("out of memory for %lld rows of %lld logits", (long long)B, (long long)V);
    }
    fprintf(stderr, "fusion: serving: %lld rows, a context of %lld tokens, %lld ids, %d stage%s\n", (long long)B,
            (long long)ctx, (long long)V, (int)m->n_stages, m->n_stages > 1 ? "s" : "");
    int ended = 0, rc = 0;
    double t_step = 0.0, t_prefill = 0.0; /* seconds: what prefill_pays weighs */
    while (rc == 0) {
        int64_t busy = 0;
        for (int64_t b = 0; b < B; b++)
            busy += rows[b].busy;
        /* Take what has come (waiting only when there is nothing to do:
         * over several devices, a while, then an idle step). */
        int idle = busy == 0 && n_queue == 0, got;
        int wait_ms = !idle ? 0 : m->n_stages > 1 ? SERVE_IDLE_MS : -1;
        while (!ended && (got = read_line(wait_ms, &line)) != 0) {
            wait_ms = 0;
            if (got < 0) {
                ended = 1;
                break;
            }
            cJSON *c = cJSON_Parse(line);
            const cJSON *cancel = cJSON_GetObjectItemCaseSensitive(c, "cancel");
            if (cJSON_IsNumber(cancel)) {
                for (int64_t b = 0; b < B; b++)
                    if (rows[b].busy && rows[b].id == (long long)cancel->valuedouble)
                        finish(&rows[b], "cancelled");
                free(line);
            } else if (n_queue == cap_queue &&
                       !(queue = realloc(queue, (cap_queue = cap_queue * 2 + 8) * sizeof *queue))) {
                rc = fail("out of memory queueing requests");
            } else {
                queue[n_queue++] = line;
            }
            line = NULL;
            cJSON_Delete(c);
        }
        for (int64_t b = 0; b < B && n_queue > 0; b++)
            if (!rows[b].busy) {
                start(&rows[b], queue[0], V, ctx, o);
                free(queue[0]);
                memmove(queue, queue + 1, --n_queue * sizeof *queue);
            }
        busy = 0;
        for (int64_t b = 0; b < B; b++)
            busy += rows[b].busy;
        if (busy == 0) {
            if (ended && n_queue == 0)
                break;
            if (idle && !ended && m->n_stages > 1) {
                s->cmd[0] = SERVE_IDLE;
                rc = lead(s);
            }
            continue;
        }
        if (s->P > 0 && prefill_pays(rows, B, s->P, t_step, t_prefill)) {
            double t0 = rt_seconds_now();
            prefill_command(s, rows, ctx);
            if ((rc = lead(s)) != 0)
                break;
            prefill_advance(rows, B, s->P);
            t_prefill = rt_seconds_now() - t0;
        }
        double t0 = rt_seconds_now();
        s->cmd[0] = PHASE_FORWARD;
        for (int64_t b = 0; b < B; b++) {
            row *w = &rows[b];
            s->cmd[1 + b] = !w->busy ? 0 : w->at < w->n_prompt ? w->prompt[w->at] : w->last;
            s->cmd[1 + B + b] = w->busy ? (int32_t)w->at : 0;
        }
        if ((rc = lead(s)) != 0)
            break;
        t_step = t_step > 0 ? 0.8 * t_step + 0.2 * (rt_seconds_now() - t0)
                            : rt_seconds_now() - t0; /* the one-token step's recent cost */
        for (int64_t b = 0; b < B; b++) {
            row *w = &rows[b];
            if (!w->busy)
                continue;
            w->at++;
            if (w->at < w->n_prompt)
                continue;                                                              /* still reading its prompt */
            rt_tensor_row_f32(&out->t, p->arena, (b + 1) * (per_row / V) - 1, logits); /* row b's last token */
            w->last = rt_generate_pick(logits, V, &w->draw, &w->r, logits + V, order);
            w->made++;
            printf("{\"id\":%lld,\"token\":%d}\n", w->id, (int)w->last);
            int stopped = 0;
            for (int k = 0; k < w->n_stop; k++)
                stopped |= w->stop[k] == w->last;
            if (stopped)
                finish(w, "stop");
            else if (w->made >= w->max_tokens)
                finish(w, "length");
            else if (w->at >= ctx)
                finish(w, "context");
        }
        fflush(stdout);
    }
    if (m->n_stages > 1) { /* the others end too (after an error, the links' abort tells them) */
        s->cmd[0] = SERVE_END;
        if (rc == 0)
            rc = lead(s);
    }
    for (int64_t b = 0; b < B; b++)
        free(rows[b].prompt);
    for (size_t k = 0; k < n_queue; k++)
        free(queue[k]);
    free(queue);
    free(line);
    free(rows);
    free(logits);
    free(order);
    return rc;
}

int rt_serve_worker(program *p, const rt_generate_options *o, struct rt_comm *comm)
{
    const rt_manifest *m = &p->manifest;
    int leader = m->stage == m->n_stages - 1;
    serve_steps s = { .p = p, .comm = comm, .in = rt_inference_feeds_find(p), .P = m->prefill };
    /* B: the rows of a step (every stage's manifest counts the tokens a step: B, one a row). */
    s.B = m->tokens_per_step / (m->micro_batches > 0 ? m->micro_batches : 1) / (m->n_replicas > 0 ? m->n_replicas : 1);
    int64_t ctx = 0;
    for (int32_t i = 0; i < m->n_tensors; i++)
        if (p->tensors[i].role == ROLE_STATE && p->tensors[i].t.rank == 3)
            ctx = p->tensors[i].t.dim[1];
    if ((m->stage == 0 && (s.in.tokens < 0 || s.in.positions < 0 || (s.P > 0 && s.in.prefill_tokens < 0))) ||
        (leader && m->output < 0) || s.B < 1 || (m->n_stages > 1 && !comm))
        return fail("%s: not an inference program a server runs", m->device);
    if (m->n_replicas > 1)
        return fail("%s: a plan of %d replicas a stage; a server runs one (compile with --replicas 1)", m->device,
                    (int)m->n_replicas);
    if (read_init_weights(p, o->init, o->n_init, 0))
        return 1;
    s.cmd = malloc((size_t)command_bytes(&s, PHASE_PREFILL) + (size_t)command_bytes(&s, PHASE_FORWARD));
    if (!s.cmd)
        return fail("out of memory for a step of %lld rows", (long long)s.B);
    int rc = leader ? serve_requests(&s, o, ctx) : follow(&s);
    char why[400];
    if (rc == 0 && comm && fu_hub_flush(comm->hub, why, sizeof why) != 0)
        rc = fail("%s: %s", m->device, why);
    free(s.cmd);
    free(in.buf);
    memset(&in, 0, sizeof in);
    return rc;
}
