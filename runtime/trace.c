/* trace.c: see trace.h. */
#include "trace.h"

#include "atomic_file.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rt_trace {
    FILE *f;
    int32_t pid, lane;
    int events; /* written so far: the first has no leading comma */
    int failed;
    pthread_mutex_t mu;
};

/* A name as a JSON string's contents: quotes, backslashes and control
 * characters escaped (IR and device names have none, but a file name may). */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

/* Start an event's line: the separator, then `{"ph":"<ph>"`. Under mu. */
static void begin_event(rt_trace *t, const char *ph) { fprintf(t->f, "%s{\"ph\":\"%s\"", t->events++ ? "," : "", ph); }

static void end_event(rt_trace *t)
{
    if (fputs("}\n", t->f) == EOF)
        t->failed = 1;
}

rt_trace *rt_trace_open(const char *path, int32_t pid, int32_t lane, const char *process_name, char *msg,
                        size_t msg_size)
{
    rt_trace *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(msg, msg_size, "%s: out of memory for the trace", path);
        return NULL;
    }
    if (!(t->f = fopen(path, "w"))) {
        snprintf(msg, msg_size, "%s: cannot write the trace: %s", path, strerror(errno));
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    fputs("[\n", t->f);
    rt_trace_process(t, pid, process_name);
    rt_trace_use(t, pid, lane);
    rt_trace_thread(t, 0, "ops");
    return t;
}

void rt_trace_process(rt_trace *t, int32_t pid, const char *name)
{
    pthread_mutex_lock(&t->mu);
    begin_event(t, "M");
    fprintf(t->f, ",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"", pid);
    put_escaped(t->f, name);
    fputs("\"}", t->f);
    end_event(t);
    begin_event(t, "M"); /* the viewer lists the devices in the cluster's order */
    fprintf(t->f, ",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}", pid, pid);
    end_event(t);
    pthread_mutex_unlock(&t->mu);
}

void rt_trace_use(rt_trace *t, int32_t pid, int32_t lane)
{
    pthread_mutex_lock(&t->mu);
    t->pid = pid;
    t->lane = lane;
    pthread_mutex_unlock(&t->mu);
}

int rt_trace_close(rt_trace *t)
{
    if (!t)
        return 0;
    int rc = t->failed || fputs("]\n", t->f) == EOF ? -1 : 0;
    if (fclose(t->f) != 0)
        rc = -1;
    pthread_mutex_destroy(&t->mu);
    free(t);
    return rc;
}

double rt_trace_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

void rt_trace_thread(rt_trace *t, int32_t tid, const char *name)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    begin_event(t, "M");
    fprintf(t->f, ",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"", t->pid, tid);
    put_escaped(t->f, name);
    fputs("\"}", t->f);
    end_event(t);
    pthread_mutex_unlock(&t->mu);
}

void rt_trace_span(rt_trace *t, int32_t tid, const char *cat, const char *name, double t0, double t1, const char *args)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    begin_event(t, "X");
    fputs(",\"cat\":\"", t->f);
    put_escaped(t->f, cat);
    fputs("\",\"name\":\"", t->f);
    put_escaped(t->f, name);
    fprintf(t->f, "\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", t->pid, tid, t0, t1 > t0 ? t1 - t0 : 0.0);
    if (args)
        fprintf(t->f, ",\"args\":%s", args);
    end_event(t);
    pthread_mutex_unlock(&t->mu);
}

void rt_trace_flow(rt_trace *t, int32_t tid, int begin, int64_t step, int32_t m, int64_t tensor, double ts)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    begin_event(t, begin ? "s" : "f");
    fprintf(t->f,
            ",\"cat\":\"message\",\"name\":\"message\",\"id\":\"%lld:%d:%d:%lld\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f%s",
            (long long)step, (int)m, (int)t->lane, (long long)tensor, t->pid, tid, ts, begin ? "" : ",\"bp\":\"e\"");
    end_event(t);
    pthread_mutex_unlock(&t->mu);
}

int rt_trace_merge(const char *out, const char *const *parts, int n, char *msg, size_t msg_size)
{
    atomic_file af;
    FILE *o = atomic_open(&af, out, msg, msg_size);
    if (!o)
        return -1;
    fputs("[\n", o);
    int events = 0, rc = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        FILE *f = fopen(parts[k], "r");
        if (!f) {
            snprintf(msg, msg_size, "%s: cannot read the trace: %s", parts[k], strerror(errno));
            rc = -1;
            break;
        }
        ssize_t len;
        while ((len = getline(&line, &cap, f)) > 0) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                line[--len] = '\0';
            if (len == 0 || strcmp(line, "[") == 0 || strcmp(line, "]") == 0)
                continue;
            fprintf(o, "%s%s\n", events++ ? "," : "", line[0] == ',' ? line + 1 : line);
        }
        fclose(f);
    }
    free(line);
    if (rc == 0 && fputs("]\n", o) == EOF) {
        snprintf(msg, msg_size, "%s: cannot write the trace: %s", out, strerror(errno));
        rc = -1;
    }
    if (rc) {
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, 0, msg, msg_size);
}
