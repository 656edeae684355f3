/* serve.c: `fusionc serve MODEL CLUSTER --init WEIGHTS [--port P]`: an
 * OpenAI-compatible HTTP server in front of an inference program.
 *
 *   the program  compiled as fusionc generate compiles it (cached;
 *                inference_bundle.h), with --rows B sequences a step, and
 *                run as a worker (--serve: runtime/serve_worker.c): JSON
 *                requests a line on its standard input, tokens a line on
 *                its standard output; its rows are shared by the requests
 *                in flight (continuous batching), so concurrent requests
 *                share its steps;
 *   HTTP         libmicrohttpd, a thread a connection, bound to 127.0.0.1
 *                unless --host says otherwise; an optional bearer key
 *                (--api-key); bodies up to --max-body bytes (413 above);
 *   the API      GET /v1/models; POST /v1/completions (prompt: a string)
 *                and /v1/chat/completions (messages: role and content,
 *                through the chat template: --chat-template's, else the
 *                tokenizer's tokenizer_config.json's, rendered as Hugging
 *                Face renders it (tools/chat_template.c); else a plain one,
 *                "role: content" lines and then "assistant:"), with
 *                max_tokens, temperature, top_p, seed, stop (a string or
 *                a list), stream (server-sent
 *                events, "data: [DONE]" at the end); the answers and
 *                chunks in OpenAI's shapes, usage counted in tokens.
 *                Bad JSON, a field of the wrong type, a prompt longer
 *                than the context, a conversation the template refuses:
 *                400 with {"error": {"message", "type"}}, and the server
 *                goes on.
 *   the reader   one thread reads the worker's lines and hands each
 *                token to its request (a mutex and a condition each).
 *
 * Over several devices (--stages) it starts every device program: the
 * last stage is the worker, the others take its steps over their links.
 *
 * What it deliberately is not: a server of several replicas, or
 * a process that outlives its worker (a worker that dies ends the server).
 */
#define _GNU_SOURCE
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "../tokenizer/tokenizer.h"
#include "chat_template.h"
#include "inference_bundle.h"

#define SERVE_MAX_INIT    8
#define SERVE_MAX_STOP    4
#define SERVE_MAX_DEVICES 64

typedef struct {
    const char *init[SERVE_MAX_INIT];
    int n_init;
    const char *host, *api_key, *tokenizer, *model_name, *chat_template;
    int port, rows, threads;
    int64_t max_body;
    const char *forward[INFERENCE_MAX_FORWARD];
    int n_forward;
} serve_options;

static int parse_init(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    serve_options *o = field;
    if (o->n_init == SERVE_MAX_INIT)
        return snprintf(why, n, "too many %s options (the limit is %d)", opt->name, SERVE_MAX_INIT), -1;
    o->init[o->n_init++] = value;
    return 0;
}

/* clang-format off */
static const cli_option serve_table[] = {
    { .name = "--init", .metavar = "WEIGHTS", CLI_WHOLE(parse_init),
      .help = "the weights: a safetensors file, a Hugging Face folder or a fusion checkpoint" },
    { .name = "--port", .metavar = "P", CLI_INT(serve_options, port), .lo = 1, .hi = 65535,
      .expects = "a port in [1, 65535]", .help = "listen on tcp port P (default 8000)" },
    { .name = "--host", .metavar = "ADDR", CLI_NONEMPTY(serve_options, host),
      .help = "listen on this IPv4 address (default 127.0.0.1; 0.0.0.0: every interface)" },
    { .name = "--api-key", .metavar = "KEY", CLI_NONEMPTY(serve_options, api_key),
      .help = "require \"Authorization: Bearer KEY\" (401 without it)" },
    { .name = "--tokenizer", .metavar = "PATH", CLI_NONEMPTY(serve_options, tokenizer),
      .help = "a Hugging Face tokenizer.json (or its folder); without one, bytes are ids" },
    { .name = "--chat-template", .metavar = "FILE", CLI_NONEMPTY(serve_options, chat_template),
      .help = "a Jinja chat template for /v1/chat/completions (default: the tokenizer's\n"
              "tokenizer_config.json's, else \"role: content\" lines and \"assistant:\")" },
    { .name = "--model-name", .metavar = "NAME", CLI_NONEMPTY(serve_options, model_name),
      .help = "the model's id in the API (default: the model file's name)" },
    { .name = "--rows", .metavar = "B", CLI_INT(serve_options, rows), .lo = 1, .hi = 256,
      .expects = "a count in [1, 256]", .help = "sequences a step: requests served at once (default 4)" },
    { .name = "--max-body", .metavar = "BYTES", CLI_INT64(serve_options, max_body), .lo = 1024, .hi = 1e9,
      .expects = "a size in [1024, 1e9]", .help = "the largest request body (default 1048576; 413 above)" },
    { .name = "--threads", .metavar = "N", CLI_INT(serve_options, threads), .lo = 1, .hi = 1024,
      .expects = "a count in [1, 1024]", .help = "the worker's CPU threads (default: the cluster file's)" },
};
/* clang-format on */

const cli_usage serve_usage = {
    "usage: fusionc serve MODEL CLUSTER --init WEIGHTS [--port P] [--host ADDR] [--api-key KEY]\n"
    "       [--tokenizer PATH] [--rows B] [compile's options: --set, --hf-config, --precision, ...]\n"
    "\n"
    "An OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models;\n"
    "streaming as server-sent events) in front of MODEL compiled for CLUSTER as an inference\n"
    "program (cached as fusionc generate caches it); concurrent requests share its steps.\n",
    serve_table,
    NULL,
    sizeof serve_table / sizeof serve_table[0],
    20,
    "Every other option goes to `fusionc compile` as it is.  Ctrl-C stops the server.\n",
};

/* ---- requests and the worker ------------------------------------------------------ */

typedef struct request {
    long long id;
    tk_ids tokens;   /* generated so far                        */
    int done;        /* the worker said done (or error)          */
    char finish[16]; /* "length", "stop", ...                   */
    char error[256]; /* the worker's refusal                     */
    int64_t n_prompt;
    pthread_cond_t cond;
    struct request *next;
} request;

static struct {
    pthread_mutex_t lock;  /* the requests and every request's fields               */
    pthread_mutex_t write; /* the worker's standard input (never held with lock: the
                              reader thread must always deliver, or the worker,
                              blocked on its output, would stop reading its input) */
    request *requests;
    long long next_id;
    FILE *to_worker;
    pid_t worker;
    int worker_gone;
    tk_tokenizer *tk;
    char *chat_template; /* --chat-template's, or the tokenizer's; NULL: the plain one */
    cJSON *chat_context; /* the special tokens it sees (bos_token, ...) */
    const serve_options *o;
    int64_t ctx;
    const char *model;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER, .write = PTHREAD_MUTEX_INITIALIZER, .next_id = 1 };

static request *find_request(long long id)
{
    for (request *r = S.requests; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

/* The worker's lines, each to its request. */
static void *read_worker(void *from_worker)
{
    FILE *f = from_worker;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
        pthread_mutex_lock(&S.lock);
        request *r = cJSON_IsNumber(id) ? find_request((long long)id->valuedouble) : NULL;
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(o, "token"),
                    *done = cJSON_GetObjectItemCaseSensitive(o, "done"),
                    *err = cJSON_GetObjectItemCaseSensitive(o, "error");
        if (r && cJSON_IsNumber(tok))
            tk_ids_push(&r->tokens, (int32_t)tok->valuedouble);
        if (r && cJSON_IsString(done))
            r->done = 1, snprintf(r->finish, sizeof r->finish, "%s", done->valuestring);
        if (r && cJSON_IsString(err))
            r->done = 1, snprintf(r->error, sizeof r->error, "%s", err->valuestring);
        if (r)
            pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&S.lock);
        cJSON_Delete(o);
    }
    free(line);
    pthread_mutex_lock(&S.lock); /* the worker is gone: every waiting request ends */
    S.worker_gone = 1;
    for (request *r = S.requests; r; r = r->next) {
        if (!r->done)
            r->done = 1, snprintf(r->error, sizeof r->error, "the inference program stopped");
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&S.lock);
    return NULL;
}

/* A request for the worker: registered, then sent.  NULL out of memory. */
static request *submit(const tk_ids *prompt, int64_t max_tokens, double temperature, double top_p, int64_t seed)
{
    request *r = calloc(1, sizeof *r);
    cJSON *o = cJSON_CreateObject(), *ids = cJSON_CreateArray();
    if (!r || !o || !ids) {
        free(r), cJSON_Delete(o), cJSON_Delete(ids);
        return NULL;
    }
    pthread_cond_init(&r->cond, NULL);
    r->n_prompt = prompt->n;
    for (int64_t i = 0; i < prompt->n; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(prompt->v[i]));
    pthread_mutex_lock(&S.lock);
    r->id = S.next_id++;
    r->next = S.requests, S.requests = r;
    cJSON_AddNumberToObject(o, "id", (double)r->id);
    cJSON_AddItemToObject(o, "prompt", ids);
    cJSON_AddNumberToObject(o, "max_tokens", (double)max_tokens);
    cJSON_AddNumberToObject(o, "temperature", temperature);
    cJSON_AddNumberToObject(o, "top_p", top_p);
    cJSON_AddNumberToObject(o, "seed", (double)seed);
    int gone = S.worker_gone;
    pthread_mutex_unlock(&S.lock);
    char *text = cJSON_PrintUnformatted(o);
    pthread_mutex_lock(&S.write);
    int sent = text && !gone && fprintf(S.to_worker, "%s\n", text) >= 0 && fflush(S.to_worker) == 0;
    pthread_mutex_unlock(&S.write);
    if (!sent) {
        pthread_mutex_lock(&S.lock);
        r->done = 1, snprintf(r->error, sizeof r->error, "the inference program stopped");
        pthread_mutex_unlock(&S.lock);
    }
    free(text);
    cJSON_Delete(o);
    return r;
}

static void cancel(request *r)
{
    pthread_mutex_lock(&S.lock);
    int live = !r->done && !S.worker_gone;
    pthread_mutex_unlock(&S.lock);
    if (!live)
        return;
    pthread_mutex_lock(&S.write);
    fprintf(S.to_worker, "{\"cancel\":%lld}\n", r->id);
    fflush(S.to_worker);
    pthread_mutex_unlock(&S.write);
}

static void forget(request *r)
{
    pthread_mutex_lock(&S.lock);
    for (request **p = &S.requests; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&S.lock);
    pthread_cond_destroy(&r->cond);
    free(r->tokens.v);
    free(r);
}

/* ---- text ---------------------------------------------------------------------------- */

static int encode(const char *text, tk_ids *out, char *why, size_t n)
{
    if (!S.tk) {
        for (const char *p = text; *p; p++)
            if (tk_ids_push(out, (unsigned char)*p) != 0)
                return snprintf(why, n, "out of memory"), -1;
        return 0;
    }
    tk_encoder *e = tk_encoder_new(S.tk);
    int rc = !e || tk_encode(e, text, strlen(text), out, why, n) != 0 ? -1 : 0;
    tk_encoder_free(e);
    return rc;
}

static int decode(const int32_t *ids, int64_t n_ids, tk_bytes *out, char *why, size_t n)
{
    out->n = 0;
    if (S.tk)
        return tk_decode(S.tk, ids, n_ids, out, why, n);
    for (int64_t i = 0; i < n_ids; i++) {
        char b = (char)ids[i];
        if (ids[i] > 255 || tk_bytes_append(out, &b, 1) != 0)
            return snprintf(why, n, "token id %d is not a byte (serve with --tokenizer)", (int)ids[i]), -1;
    }
    return 0;
}

/* ---- one call ------------------------------------------------------------------------ */

typedef struct {
    int chat, stream;
    request *r;
    const char *stop[SERVE_MAX_STOP];
    int n_stop;
    size_t sent;   /* bytes of text sent (streaming)        */
    int stopped;   /* a stop text was met                   */
    int finished;  /* the last chunk and [DONE] are out      */
    char *pending; /* a chunk not yet copied out             */
    size_t pending_n;
    int64_t seen; /* the request's tokens taken into text    */
    tk_bytes text;
    cJSON *body; /* the request's JSON (the stop texts point into it) */
    long long created;
} call;

static void call_free(void *cls)
{
    call *c = cls;
    if (c->r) {
        cancel(c->r);
        forget(c->r);
    }
    free(c->pending);
    free(c->text.v);
    cJSON_Delete(c->body);
    free(c);
}

static cJSON *envelope(const call *c, int chunk)
{
    cJSON *o = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "%s-%lld", c->chat ? "chatcmpl" : "cmpl", c->r ? c->r->id : 0);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object",
                            c->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", S.model);
    return o;
}

/* A choice: text (or the chat delta / message) and its finish reason (NULL: none yet). */
static void add_choice(cJSON *o, const call *c, const char *text, size_t len, const char *finish, int chunk)
{
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    char *t = strndup(text, len);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, chunk ? "delta" : "message");
        if (!chunk || c->sent == 0)
            cJSON_AddStringToObject(m, "role", "assistant");
        if (len > 0 || !chunk)
            cJSON_AddStringToObject(m, "content", t ? t : "");
    } else {
        cJSON_AddStringToObject(ch, "text", t ? t : "");
        cJSON_AddNullToObject(ch, "logprobs");
    }
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    free(t);
}

/* Wait for the request to move; then its text so far into c->text and
 * how far it can be released (*end).  The finish reason once done (NULL
 * before).  -1: the worker refused it (c->r->error). */
static int advance(call *c, size_t *end, const char **finish)
{
    request *r = c->r;
    pthread_mutex_lock(&S.lock);
    while (!r->done && r->tokens.n == c->seen) /* a new token, or the end */
        pthread_cond_wait(&r->cond, &S.lock);
    c->seen = r->tokens.n;
    int done = r->done, refused = r->error[0] != 0;
    char why[128];
    int rc = refused ? -1 : decode(r->tokens.v, r->tokens.n, &c->text, why, sizeof why);
    pthread_mutex_unlock(&S.lock);
    if (rc)
        return -1;
    *end = inference_text_end(c->text.v, (size_t)c->text.n, c->stop, c->n_stop, done, &c->stopped);
    *finish = c->stopped ? "stop" : done ? (strcmp(r->finish, "stop") == 0 ? "stop" : "length") : NULL;
    if (c->stopped)
        cancel(r);
    return 0;
}

static ssize_t stream_chunks(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    call *c = cls;
    while (c->pending_n == 0) {
        if (c->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        size_t end = 0;
        const char *finish = NULL;
        cJSON *o = envelope(c, 1);
        if (advance(c, &end, &finish) != 0) {
            cJSON_Delete(o);
            o = cJSON_CreateObject();
            cJSON *e = cJSON_AddObjectToObject(o, "error");
            cJSON_AddStringToObject(e, "message", c->r->error);
            cJSON_AddStringToObject(e, "type", "server_error");
            finish = "error";
        } else if (end > c->sent || finish) {
            add_choice(o, c, c->text.v + c->sent, end > c->sent ? end - c->sent : 0, finish, 1);
            c->sent = end > c->sent ? end : c->sent;
        } else {
            cJSON_Delete(o);
            continue; /* nothing to release yet */
        }
        char *json = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!json)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        size_t n = strlen(json) + 8 + (finish ? 14 : 0);
        free(c->pending);
        c->pending = malloc(n + 1);
        if (!c->pending) {
            free(json);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        c->pending_n = (size_t)snprintf(c->pending, n + 1, "data: %s\n\n%s", json, finish ? "data: [DONE]\n\n" : "");
        free(json);
        if (finish)
            c->finished = 1;
    }
    size_t n = c->pending_n < max ? c->pending_n : max;
    memcpy(buf, c->pending, n);
    memmove(c->pending, c->pending + n, c->pending_n - n);
    c->pending_n -= n;
    return (ssize_t)n;
}

/* ---- HTTP ------------------------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *con, unsigned status, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    struct MHD_Response *res = MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (void *)"",
                                                               text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(res, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(con, status, res);
    MHD_destroy_response(res);
    return rc;
}

static enum MHD_Result reply_error(struct MHD_Connection *con, unsigned status, const char *type, const char *msg)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    return reply(con, status, o);
}

typedef struct {
    char *body;
    size_t n;
    int too_big;
} upload;

static void upload_done(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)con, (void)toe;
    upload *u = *con_cls;
    if (u) {
        free(u->body);
        free(u);
    }
    *con_cls = NULL;
}

/* The field `key` of o: absent (fallback), or a number in [lo, hi]; -1 on a wrong one. */
static int number_field(const cJSON *o, const char *key, double lo, double hi, double *out, char *why, size_t n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return snprintf(why, n, "'%s' must be a number in [%g, %g]", key, lo, hi), -1;
    *out = v->valuedouble;
    return 0;
}

/* The prompt text of a completion or chat call (malloc'd), or NULL with why. */
static char *prompt_of(const cJSON *body, int chat, char *why, size_t n)
{
    if (!chat) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
        if (!cJSON_IsString(p))
            return snprintf(why, n, "'prompt' must be a string"), NULL;
        return strdup(p->valuestring);
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return snprintf(why, n, "'messages' must be a non-empty list of {role, content}"), NULL;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content))
            return snprintf(why, n, "each message needs a string 'role' and a string 'content'"), NULL;
    }
    if (S.chat_template) { /* the model's own template (tools/chat_template.c) */
        cJSON *context = cJSON_Duplicate(S.chat_context, 1);
        char *text = NULL;
        if (!context || !cJSON_AddItemReferenceToObject(context, "messages", (cJSON *)msgs) ||
            !cJSON_AddBoolToObject(context, "add_generation_prompt", 1))
            snprintf(why, n, "out of memory");
        else /* NULL: why says (the template's refusal, or its error) */
            text = chat_template_render(S.chat_template, context, why, n);
        cJSON_Delete(context);
        return text;
    }
    tk_bytes t = { 0 };
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        tk_bytes_append(&t, role->valuestring, (int64_t)strlen(role->valuestring));
        tk_bytes_append(&t, ": ", 2);
        tk_bytes_append(&t, content->valuestring, (int64_t)strlen(content->valuestring));
        tk_bytes_append(&t, "\n", 1);
    }
    tk_bytes_append(&t, "assistant:", 11); /* with its NUL */
    return t.v;
}

static enum MHD_Result handle_call(struct MHD_Connection *con, const char *text, int chat)
{
    char why[256];
    call *c = calloc(1, sizeof *c);
    if (!c)
        return reply_error(con, 500, "server_error", "out of memory");
    c->chat = chat;
    c->created = (long long)time(NULL);
    c->body = cJSON_Parse(text);
    if (!cJSON_IsObject(c->body)) {
        call_free(c);
        return reply_error(con, 400, "invalid_request_error", "the body is not a JSON object");
    }
    double max_tokens = 16, temperature = 1.0, top_p = 1.0, seed = 1;
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(c->body, "stream"),
                *stop = cJSON_GetObjectItemCaseSensitive(c->body, "stop");
    char *prompt = NULL;
    int bad = number_field(c->body, "max_tokens", 1, 1e6, &max_tokens, why, sizeof why) ||
              number_field(c->body, "temperature", 0, 2, &temperature, why, sizeof why) ||
              number_field(c->body, "top_p", 0, 1, &top_p, why, sizeof why) ||
              number_field(c->body, "seed", 0, 9e15, &seed, why, sizeof why);
    if (!bad && stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream))
        bad = 1, snprintf(why, sizeof why, "'stream' must be true or false");
    if (!bad && stop && !cJSON_IsNull(stop)) {
        const cJSON *s;
        if (cJSON_IsString(stop))
            c->stop[c->n_stop++] = stop->valuestring;
        else if (cJSON_IsArray(stop) && cJSON_GetArraySize(stop) <= SERVE_MAX_STOP) {
            cJSON_ArrayForEach(s, stop)
            {
                if (!cJSON_IsString(s) || !s->valuestring[0])
                    bad = 1;
                else
                    c->stop[c->n_stop++] = s->valuestring;
            }
        } else
            bad = 1;
        if (bad)
            snprintf(why, sizeof why, "'stop' must be a string or a list of at most %d non-empty strings",
                     SERVE_MAX_STOP);
    }
    if (!bad && !(prompt = prompt_of(c->body, chat, why, sizeof why)))
        bad = 1;
    tk_ids ids = { 0 };
    if (!bad && encode(prompt, &ids, why, sizeof why) != 0)
        bad = 1;
    if (!bad && (ids.n == 0 || ids.n > S.ctx))
        bad = 1, snprintf(why, sizeof why, "the prompt is %lld tokens: it must be 1 to the context's %lld",
                          (long long)ids.n, (long long)S.ctx);
    free(prompt);
    if (bad) {
        free(ids.v);
        call_free(c);
        return reply_error(con, 400, "invalid_request_error", why);
    }
    c->stream = cJSON_IsTrue(stream);
    c->r = submit(&ids, (int64_t)max_tokens, temperature, top_p, (int64_t)seed);
    free(ids.v);
    if (!c->r) {
        call_free(c);
        return reply_error(con, 500, "server_error", "out of memory");
    }
    if (c->stream) {
        struct MHD_Response *res =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_chunks, c, call_free);
        MHD_add_response_header(res, "Content-Type", "text/event-stream");
        MHD_add_response_header(res, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(con, 200, res);
        MHD_destroy_response(res);
        return rc;
    }
    size_t end = 0;
    const char *finish = NULL;
    while (!finish) {
        if (advance(c, &end, &finish) != 0) {
            enum MHD_Result rc = reply_error(con, 500, "server_error", c->r->error);
            call_free(c);
            return rc;
        }
    }
    cJSON *o = envelope(c, 0);
    add_choice(o, c, c->text.v, end, finish, 0);
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    pthread_mutex_lock(&S.lock);
    long long p = c->r->n_prompt, g = c->r->tokens.n;
    pthread_mutex_unlock(&S.lock);
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)p);
    cJSON_AddNumberToObject(usage, "completion_tokens", (double)g);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)(p + g));
    call_free(c);
    return reply(con, 200, o);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)cls, (void)version;
    int post = strcmp(method, "POST") == 0;
    if (!*con_cls) { /* the first call: headers only */
        upload *u = calloc(1, sizeof *u);
        if (!u)
            return MHD_NO;
        *con_cls = u;
        return MHD_YES;
    }
    upload *u = *con_cls;
    if (post && *upload_size > 0) { /* the body, in parts */
        if (!u->too_big && u->n + *upload_size <= (size_t)S.o->max_body) {
            char *grown = realloc(u->body, u->n + *upload_size + 1);
            if (grown) {
                memcpy(grown + u->n, upload_data, *upload_size);
                u->body = grown;
                u->n += *upload_size;
                u->body[u->n] = '\0';
            } else
                u->too_big = 1;
        } else
            u->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (S.o->api_key) {
        const char *auth = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
        char want[512];
        snprintf(want, sizeof want, "Bearer %s", S.o->api_key);
        if (!auth || strcmp(auth, want) != 0)
            return reply_error(con, 401, "invalid_request_error", "a bearer key is required (Authorization)");
    }
    if (strcmp(url, "/v1/models") == 0 && !post) {
        cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(m, "id", S.model);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "fusion");
        cJSON_AddItemToArray(data, m);
        return reply(con, 200, o);
    }
    int chat = strcmp(url, "/v1/chat/completions") == 0;
    if (!chat && strcmp(url, "/v1/completions") != 0)
        return reply_error(con, 404, "invalid_request_error",
                           "no such route (/v1/completions, /v1/chat/completions, "
                           "/v1/models)");
    if (!post)
        return reply_error(con, 405, "invalid_request_error", "use POST");
    if (u->too_big)
        return reply_error(con, 413, "invalid_request_error", "the body is larger than the server takes (--max-body)");
    return handle_call(con, u->body ? u->body : "", chat);
}

/* ---- the command ------------------------------------------------------------------------ */

/* The chat template: --chat-template's file, else the tokenizer's (and
 * its special tokens either way).  0, or -1 with why. */
static int load_chat_template(const serve_options *o, char *why, size_t n)
{
    if (!(S.chat_context = cJSON_CreateObject()))
        return snprintf(why, n, "out of memory"), -1;
    if (o->tokenizer && chat_template_load(o->tokenizer, &S.chat_template, S.chat_context, why, n) != 0)
        return -1;
    if (o->chat_template) {
        free(S.chat_template);
        if (!(S.chat_template = chat_template_read_file(o->chat_template)))
            return snprintf(why, n, "--chat-template %s: cannot read it", o->chat_template), -1;
    }
    if (!S.chat_template)
        return 0;
    /* A template that fails on a lone user message (not one that refuses
     * it) is refused now, not at the first request. */
    cJSON *probe = cJSON_Duplicate(S.chat_context, 1);
    cJSON *one = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
    char *text = NULL, err[400] = "out of memory";
    if (probe && one && cJSON_AddItemToObject(probe, "messages", one)) {
        one = NULL; /* the probe's now */
        text = chat_template_render(S.chat_template, probe, err, sizeof err);
    }
    cJSON_Delete(one);
    cJSON_Delete(probe);
    if (!text && strstr(err, "refused the conversation") == NULL)
        return snprintf(why, n, "the chat template (%s): %s", o->chat_template ? o->chat_template : o->tokenizer, err),
               -1;
    free(text);
    return 0;
}

static volatile sig_atomic_t stopping;
static void on_signal(int sig) { stopping = sig; }

int serve_main(int argc, char **argv)
{
    serve_options o = { .port = 8000, .rows = 4, .max_body = 1 << 20 };
    char why[1024];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &serve_usage);
            return 0;
        }
        int took = cli_take(&serve_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return cli_usage_fail(&serve_usage, "fusionc serve", "%s", why);
        if (took == 0 && inference_forward_arg(argc, argv, &i, o.forward, &o.n_forward, why, sizeof why) != 0)
            return cli_usage_fail(&serve_usage, "fusionc serve", "%s", why);
    }
    if (o.n_init == 0)
        return cli_usage_fail(&serve_usage, "fusionc serve", "%s", "expected --init WEIGHTS");
    S.o = &o;
    if (o.tokenizer && !(S.tk = tk_load(o.tokenizer, why, sizeof why))) {
        fprintf(stderr, "fusionc serve: %s\n", why);
        return 1;
    }
    if (load_chat_template(&o, why, sizeof why) != 0) {
        fprintf(stderr, "fusionc serve: %s\n", why);
        tk_free(S.tk);
        return 1;
    }
    char dir[FU_PATH_BYTES], prog[FU_PATH_BYTES + 700], name[256] = "model";
    int rc = inference_compile_cached(o.forward, o.n_forward, o.rows, "fusionc serve", dir, sizeof dir);
    static inference_program found[SERVE_MAX_DEVICES];
    int n_found = 0, leader = 0;
    if (rc == 0)
        rc = inference_find_programs(dir, "fusionc serve", found, SERVE_MAX_DEVICES, &n_found);
    for (int d = 0; d < n_found; d++) /* the last stage leads: the worker (runtime/serve_worker.c) */
        if (found[d].stage == found[d].stages - 1)
            leader = d;
    if (rc == 0)
        snprintf(prog, sizeof prog, "%s", found[leader].path);
    if (rc) {
        tk_free(S.tk);
        return rc;
    }
    /* The model's name: --model-name, else the model file's (the first forwarded argument that names an .xml). */
    for (int i = 0; i < o.n_forward && !o.model_name; i++) {
        const char *a = o.forward[i], *slash = strrchr(a, '/'), *dot = strrchr(a, '.');
        if (dot && strcmp(dot, ".xml") == 0) {
            snprintf(name, sizeof name, "%.*s", (int)(dot - (slash ? slash + 1 : a)), slash ? slash + 1 : a);
            break;
        }
    }
    S.model = o.model_name ? o.model_name : name;
    /* The worker: its context from the manifest's cache rows is asked of the worker itself. */
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) {
        fprintf(stderr, "fusionc serve: pipe: %s\n", strerror(errno));
        return 1;
    }
    char threads[16];
    snprintf(threads, sizeof threads, "%d", o.threads);
    char *args[2 * SERVE_MAX_INIT + 8];
    int k = 0;
    args[k++] = prog;
    for (int i = 0; i < o.n_init; i++)
        args[k++] = "--init", args[k++] = (char *)o.init[i];
    args[k++] = "--serve";
    if (o.threads > 0)
        args[k++] = "--threads", args[k++] = threads;
    args[k] = NULL;
    S.worker = fork();
    if (S.worker == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]), close(from[0]);
        execv(prog, args);
        _exit(127);
    }
    /* The other stages of a pipeline: they take the leader's steps over their links. */
    pid_t others[SERVE_MAX_DEVICES];
    for (int d = 0; d < n_found; d++) {
        others[d] = -1;
        if (d == leader)
            continue;
        args[0] = found[d].path;
        if ((others[d] = fork()) == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 0), dup2(null, 1);
            close(to[0]), close(to[1]), close(from[0]), close(from[1]);
            execv(found[d].path, args);
            _exit(127);
        }
    }
    close(to[0]), close(from[1]);
    S.to_worker = fdopen(to[1], "w");
    FILE *from_worker = fdopen(from[0], "r");
    /* The worker's first line on stderr says its context; read it from the manifest instead. */
    char manifest[FU_PATH_BYTES + 800];
    snprintf(manifest, sizeof manifest, "%.*s/manifest.txt", (int)(strrchr(prog, '/') - prog), prog);
    S.ctx = 0;
    FILE *mf = fopen(manifest, "r");
    char line[1024];
    while (mf && fgets(line, sizeof line, mf)) {
        char vname[256];
        long long b, cx, w;
        if (sscanf(line, "state %255s f32[%lld,%lld,%lld]", vname, &b, &cx, &w) == 4 && strstr(vname, "k_cache"))
            S.ctx = cx;
    }
    if (mf)
        fclose(mf);
    if (S.ctx <= 0)
        S.ctx = 1 << 30; /* the worker refuses a prompt too long for it */
    pthread_t reader;
    pthread_create(&reader, NULL, read_worker, from_worker);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o.port) };
    if (inet_pton(AF_INET, o.host ? o.host : "127.0.0.1", &addr.sin_addr) != 1) {
        fprintf(stderr, "fusionc serve: --host %s: not an IPv4 address\n", o.host);
        kill(S.worker, SIGTERM);
        return 2;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)o.port, NULL, NULL, handle, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, upload_done, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "fusionc serve: cannot listen on %s:%d (in use?)\n", o.host ? o.host : "127.0.0.1", o.port);
        kill(S.worker, SIGTERM);
        return 1;
    }
    fprintf(stderr, "fusionc serve: %s on http://%s:%d/v1 (%d rows; Ctrl-C stops)\n", S.model,
            o.host ? o.host : "127.0.0.1", o.port, o.rows);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    while (!stopping && !S.worker_gone)
        usleep(100000);
    MHD_stop_daemon(d);
    pthread_mutex_lock(&S.write);
    fclose(S.to_worker); /* the worker finishes and exits */
    S.to_worker = NULL;
    pthread_mutex_unlock(&S.write);
    int status = 0;
    waitpid(S.worker, &status, 0);
    for (int d = 0; d < n_found; d++) /* they end with the leader; one stuck is stopped */
        if (others[d] > 0) {
            int st, reaped = 0;
            for (int k = 0; k < 50 && !(reaped = waitpid(others[d], &st, WNOHANG) != 0); k++)
                usleep(100000);
            if (!reaped) {
                kill(others[d], SIGTERM);
                waitpid(others[d], &st, 0);
            }
        }
    pthread_join(reader, NULL);
    fclose(from_worker);
    tk_free(S.tk);
    free(S.chat_template);
    cJSON_Delete(S.chat_context);
    if (S.worker_gone && !stopping) {
        fprintf(stderr, "fusionc serve: the inference program stopped (exit %d)\n",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    return 0;
}
