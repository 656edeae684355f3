/* broker_client.c: a device program's line to the run's broker (broker_client.h). */
#define _GNU_SOURCE
#include "broker_client.h"
#include "comm/seal.h"
#include "rt_error.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 1024
#define QUEUE_MAX      4096 /* lines waiting; beyond, step and links reports are dropped (the rest are kept) */
#define BEAT_MS        1000
#define ANSWER_MS      1000

typedef struct line {
    struct line *next;
    char text[LINE_MAX_BYTES];
} line;

struct rt_broker {
    char url[512], device[128];
    uint8_t secret[FU_SECRET_BYTES]; /* every request and reply sealed (rt_broker_exchange) */
    uint64_t last_stamp;
    int64_t epoch;
    int sock;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    line *head, *tail;
    int queued, quit, unreachable_said;
    char refused[LINE_MAX_BYTES];
};

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits on b->cv (b->mu held) at most ms milliseconds. */
static void wait_ms(rt_broker *b, long ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += ms * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&b->cv, &b->mu, &until);
}

uint64_t rt_broker_stamp(uint64_t *last)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t us = (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
    *last = us > *last ? us : *last + 1;
    return *last;
}

int rt_broker_exchange(int sock, const uint8_t *secret, uint64_t *last, const char *text, char *reply, size_t cap)
{
    char plain[LINE_MAX_BYTES + 32];
    int len = snprintf(plain, sizeof plain, "%llu %s", (unsigned long long)rt_broker_stamp(last), text);
    if (len < 0 || (size_t)len >= sizeof plain)
        return -1;
    uint8_t box[sizeof plain + FU_BOX_OVERHEAD], nonce[24];
    fu_box_seal(secret, "broker request", NULL, 0, plain, (size_t)len, box, nonce);
    if (nn_send(sock, box, (size_t)len + FU_BOX_OVERHEAD, 0) < 0)
        return -1;
    char *got = NULL;
    int n = nn_recv(sock, &got, NN_MSG, 0);
    if (n < 0)
        return -1;
    /* The reply binds the request's nonce: an old reply replayed does not open. */
    int ok =
        n >= FU_BOX_OVERHEAD && (size_t)(n - FU_BOX_OVERHEAD) < cap &&
        fu_box_open(secret, "broker reply", nonce, sizeof nonce, (const uint8_t *)got, (size_t)n, reply, NULL) == 0;
    if (ok)
        reply[n - FU_BOX_OVERHEAD] = '\0';
    nn_freemsg(got);
    return ok ? n - FU_BOX_OVERHEAD : -2;
}

/* One request and its answer: 1 ok, 0 refused (b->refused set), -1 no answer. */
static int ask(rt_broker *b, const char *text)
{
    char reply[LINE_MAX_BYTES];
    int n = rt_broker_exchange(b->sock, b->secret, &b->last_stamp, text, reply, sizeof reply);
    if (n == -2) {
        fprintf(stderr,
                "fusion: a reply from the broker at %s does not open (not of this run, or altered): "
                "dropped\n",
                b->url);
        return -1;
    }
    if (n < 0)
        return -1;
    int rc = 1;
    if (n >= 7 && memcmp(reply, "refused", 7) == 0) {
        int at = 7;
        while (at < n && (reply[at] == ':' || reply[at] == ' '))
            at++;
        pthread_mutex_lock(&b->mu);
        snprintf(b->refused, sizeof b->refused, "%.*s", n - at, reply + at);
        pthread_mutex_unlock(&b->mu);
        rc = 0;
    }
    return rc;
}

static void *client_thread(void *arg)
{
    rt_broker *b = arg;
    int64_t last = 0;
    char text[LINE_MAX_BYTES];
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (!b->head && !b->quit && now_ms() - last < BEAT_MS)
            wait_ms(b, 200);
        if (b->quit && !b->head) {
            pthread_mutex_unlock(&b->mu);
            break;
        }
        int from_queue = b->head != NULL;
        if (from_queue)
            snprintf(text, sizeof text, "%s", b->head->text);
        else
            snprintf(text, sizeof text, "beat %s %lld", b->device, (long long)b->epoch);
        pthread_mutex_unlock(&b->mu);
        int rc = ask(b, text);
        last = now_ms();
        if (rc == 0) { /* refused: this device is of an epoch that is over; nothing more of it counts */
            fprintf(stderr, "fusion: error: %s: refused by the broker: %s\n", b->device, b->refused);
            fflush(stderr);
            _exit(1);
        }
        pthread_mutex_lock(&b->mu);
        if (rc > 0 && from_queue && b->head) {
            line *done = b->head;
            b->head = done->next;
            if (!b->head)
                b->tail = NULL;
            b->queued--;
            free(done);
            pthread_cond_broadcast(&b->cv);
        }
        int say = rc < 0 && !b->unreachable_said;
        if (say)
            b->unreachable_said = 1;
        else if (rc > 0)
            b->unreachable_said = 0;
        int quitting = b->quit;
        pthread_mutex_unlock(&b->mu);
        if (say && !quitting) {
            fprintf(stderr, "fusion: the broker at %s does not answer; training goes on, its reports wait\n", b->url);
            fflush(stderr);
        }
        if (rc < 0 && quitting)
            break; /* rt_broker_close's wait decides how long to try */
    }
    return NULL;
}

int rt_broker_open(rt_broker **out, const char *url, const char *device, int64_t epoch, const uint8_t *secret,
                   char *err, size_t n)
{
    *out = NULL;
    rt_broker *b = calloc(1, sizeof *b);
    if (!b) {
        return rt_error(err, n, "out of memory for the broker client");
    }
    snprintf(b->url, sizeof b->url, "%s", url);
    snprintf(b->device, sizeof b->device, "%s", device);
    memcpy(b->secret, secret, FU_SECRET_BYTES);
    b->epoch = epoch;
    int ms = ANSWER_MS;
    b->sock = nn_socket(AF_SP, NN_REQ);
    if (b->sock < 0 || nn_setsockopt(b->sock, NN_SOL_SOCKET, NN_RCVTIMEO, &ms, sizeof ms) < 0 ||
        nn_setsockopt(b->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &ms, sizeof ms) < 0 || nn_connect(b->sock, url) < 0) {
        snprintf(err, n, "--broker %s: %s", url, nn_strerror(nn_errno()));
        if (b->sock >= 0)
            nn_close(b->sock);
        free(b);
        return -1;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    rt_broker_report(b, "hello", "%ld", (long)getpid());
    if (pthread_create(&b->thread, NULL, client_thread, b) != 0) {
        snprintf(err, n, "cannot start the broker client's thread");
        nn_close(b->sock);
        free(b);
        return -1;
    }
    *out = b;
    return 0;
}

void rt_broker_report(rt_broker *b, const char *verb, const char *fmt, ...)
{
    if (!b)
        return;
    line *l = calloc(1, sizeof *l);
    if (!l)
        return;
    int at = snprintf(l->text, sizeof l->text, "%s %s %lld ", verb, b->device, (long long)b->epoch);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text + at, sizeof l->text - (size_t)at, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&b->mu);
    if (b->queued >= QUEUE_MAX && (strcmp(verb, "step") == 0 || strcmp(verb, "links") == 0)) {
        pthread_mutex_unlock(&b->mu);
        free(l);
        return;
    }
    if (b->tail)
        b->tail->next = l;
    else
        b->head = l;
    b->tail = l;
    b->queued++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

int rt_broker_confirm(rt_broker *b, int wait_for_ms)
{
    if (!b)
        return -1;
    rt_broker_report(b, "beat", "%s", "");
    int64_t until = now_ms() + wait_for_ms;
    pthread_mutex_lock(&b->mu);
    while (b->head && now_ms() < until)
        wait_ms(b, 50);
    int answered = b->head == NULL;
    pthread_mutex_unlock(&b->mu);
    return answered ? 0 : -1;
}

const char *rt_broker_refused(rt_broker *b)
{
    if (!b)
        return NULL;
    pthread_mutex_lock(&b->mu);
    const char *r = b->refused[0] ? b->refused : NULL;
    pthread_mutex_unlock(&b->mu);
    return r;
}

const char *rt_broker_close(rt_broker *b, int status, int wait_for_ms)
{
    if (!b)
        return NULL;
    rt_broker_report(b, "bye", "%d", status);
    int64_t until = now_ms() + wait_for_ms;
    pthread_mutex_lock(&b->mu);
    while (b->head && now_ms() < until)
        wait_ms(b, 50);
    b->quit = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    nn_close(b->sock); /* a request in flight returns at once */
    pthread_join(b->thread, NULL);
    return b->refused[0] ? b->refused : NULL;
}

void rt_broker_free(rt_broker *b)
{
    if (!b)
        return;
    while (b->head) {
        line *l = b->head;
        b->head = l->next;
        free(l);
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

int rt_broker_standby(const char *url, const char *name, const uint8_t *secret)
{
    int sock = nn_socket(AF_SP, NN_REQ), ms = ANSWER_MS;
    if (sock < 0 || nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &ms, sizeof ms) < 0 || nn_connect(sock, url) < 0) {
        fprintf(stderr, "standby %s: %s: %s\n", name, url, nn_strerror(nn_errno()));
        if (sock >= 0)
            nn_close(sock);
        return 1;
    }
    char req[300], reply[LINE_MAX_BYTES];
    uint64_t last = 0;
    snprintf(req, sizeof req, "standby %s 0", name);
    printf("standby %s waits for the broker at %s\n", name, url);
    fflush(stdout);
    for (int64_t silent_since = now_ms(); now_ms() - silent_since < 600 * 1000;) {
        int got = rt_broker_exchange(sock, secret, &last, req, reply, sizeof reply);
        if (got >= 0) {
            int stop = got >= 4 && memcmp(reply, "stop", 4) == 0;
            if (stop) {
                printf("standby %s: the broker needs it no more\n", name);
                nn_close(sock);
                return 0;
            }
            silent_since = now_ms();
        }
        usleep(BEAT_MS * 1000);
    }
    fprintf(stderr, "standby %s: no answer from %s for 600 s\n", name, url);
    nn_close(sock);
    return 1;
}
