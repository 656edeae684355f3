/* test_hub.c: fu_hub (runtime/comm/hub.h), devices as forked processes
 * talking over loopback tcp.
 *
 * Every device of a scenario is a child process (fork() after nanomsg
 * started its threads is not safe, so this parent never touches nanomsg):
 * the children write what they saw (return codes, error texts, CLOCK_MONOTONIC
 * times, which all processes of one machine share) into a shared-memory
 * board, and the parent checks it once they are gone.  Every child has an
 * alarm, every wait a deadline: a hang fails a check instead of sticking.
 */
#include "check.h"
#include "comm/hub.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERR 300

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec t = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&t, &t) != 0) {
    }
}

/* A loopback port nobody holds right now (as test_transport.c). */
static int free_port(void)
{
    static int next;
    if (!next)
        next = 20000 + (int)(getpid() * 7919u % 40000u);
    for (int tries = 0; tries < 200; tries++) {
        int port = next;
        next = next + 1 >= 60000 ? 20000 : next + 1;
        int s = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok)
            return port;
    }
    return 0;
}

/* ---- the board: what each device saw ---------------------------------- */

typedef struct {
    int opened; /* fu_hub_open returned non-NULL */
    int rc[12];
    char err[12][ERR];
    double t[12];  /* CLOCK_MONOTONIC seconds */
    float got[12]; /* first float of a received message */
    int intact;    /* the 5 MiB message's bytes all matched */
    uint64_t bytes_sent;
    double busy;
    int ready;            /* set once open returned; the parent may kill it then */
    int64_t stop_step[4]; /* fu_hub_step_done: the step it said to stop after, and the code */
    int stop_code[4];
} device;

typedef struct {
    device d[3];
    int ports[2];
} board;

static board *B;

static void set_ready(device *d) { __atomic_store_n(&d->ready, 1, __ATOMIC_SEQ_CST); }
static int is_ready(device *d) { return __atomic_load_n(&d->ready, __ATOMIC_SEQ_CST); }

static fu_hub_link_spec link_to(int32_t peer, const char *name, int port, int listen)
{
    fu_hub_link_spec s = { .peer = peer, .listen = listen };
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", port);
    return s;
}

static fu_hub *open_hub(device *d, const char *self, uint64_t build, int timeout_ms, const fu_hub_link_spec *links,
                        int n_links)
{
    fu_hub_options o = { .self_name = self,
                         .build_id = build,
                         .timeout_ms = timeout_ms,
                         .connect_timeout_ms = 5000,
                         .stall_timeout_ms = 8000 };
    fu_hub *h = fu_hub_open(links, n_links, &o, d->err[0], ERR);
    d->rc[0] = h ? 0 : -1;
    d->t[0] = now_s();
    d->opened = h != NULL;
    return h;
}

static fu_msg_info msg(uint32_t kind, int64_t step, int32_t mb, int32_t tensor, uint64_t length)
{
    return (fu_msg_info){
        .kind = kind, .step = step, .micro_batch = mb, .tensor = tensor, .codec = FU_CODEC_RAW_F32, .length = length
    };
}

/* Runs fn(i) in a child process with an alarm; returns its pid. */
static pid_t spawn(void (*fn)(int), int i, int alarm_s)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)alarm_s);
        fn(i);
        exit(0); /* not _exit: a sanitizer build checks the child for leaks */
    }
    return pid;
}

/* Waits for pid until deadline (monotonic seconds), killing it after;
 * its exit status, or -1 when it was killed or crashed. */
static int reap(pid_t pid, double deadline)
{
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "child %d overran its deadline: killed\n", (int)pid);
            return -1;
        }
        sleep_s(0.01);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int wait_ready(device *d, double deadline)
{
    while (!is_ready(d)) {
        if (now_s() > deadline)
            return 0;
        sleep_s(0.005);
    }
    return 1;
}

static void clear_board(void)
{
    memset(B, 0, sizeof *B);
    B->ports[0] = free_port();
    B->ports[1] = free_port();
}

/* ---- 1. matching, big messages, length check -------------------------- */

#define BIG_FLOATS ((5u << 20) / sizeof(float)) /* 5 MiB: above nanomsg's 1 MiB default limit */

static float pattern(size_t i) { return (float)(i % 9973) * 0.5f - 7.0f; }

static void matching_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    fu_hub *h = open_hub(d, i == 0 ? "cpu-a" : "cpu-b", 0xfeed, 5000, &l, 1);
    if (!h)
        return;
    float v[16], *big = malloc(BIG_FLOATS * sizeof(float));
    if (i == 0) {
        /* Five messages that differ from the first in one field each. */
        fu_msg_info m[5] = { msg(MSG_ACTIVATION, 1, 0, 5, sizeof v), msg(MSG_ACTIVATION, 1, 1, 5, sizeof v),
                             msg(MSG_GRADIENT, 1, 0, 5, sizeof v), msg(MSG_ACTIVATION, 2, 0, 5, sizeof v),
                             msg(MSG_ACTIVATION, 1, 0, 6, sizeof v) };
        for (int k = 0; k < 5; k++) {
            for (int j = 0; j < 16; j++)
                v[j] = (float)(k + 1);
            d->rc[1 + k] = fu_hub_send(h, 1, &m[k], v, d->err[1 + k], ERR);
        }
        for (size_t j = 0; j < BIG_FLOATS; j++)
            big[j] = pattern(j);
        fu_msg_info mb = msg(MSG_ACTIVATION, 3, 0, 9, BIG_FLOATS * sizeof(float));
        d->rc[6] = fu_hub_send(h, 1, &mb, big, d->err[6], ERR);
        fu_msg_info odd = msg(MSG_ACTIVATION, 4, 0, 1, 8);
        d->rc[7] = fu_hub_send(h, 1, &odd, v, d->err[7], ERR);
        d->rc[8] = fu_hub_flush(h, d->err[8], ERR);
        fu_msg_info back = msg(MSG_GRADIENT, 9, 0, 0, sizeof v);
        d->rc[9] = fu_hub_recv(h, 1, &back, v, sizeof v, d->err[9], ERR);
        d->got[9] = v[0];
    } else {
        /* The same five, asked for in the reverse order. */
        fu_msg_info m[5] = { msg(MSG_ACTIVATION, 1, 0, 6, sizeof v), msg(MSG_ACTIVATION, 2, 0, 5, sizeof v),
                             msg(MSG_GRADIENT, 1, 0, 5, sizeof v), msg(MSG_ACTIVATION, 1, 1, 5, sizeof v),
                             msg(MSG_ACTIVATION, 1, 0, 5, sizeof v) };
        fu_msg_info mb = msg(MSG_ACTIVATION, 3, 0, 9, BIG_FLOATS * sizeof(float));
        d->rc[6] = fu_hub_recv(h, 0, &mb, big, mb.length, d->err[6], ERR);
        d->intact = 1;
        for (size_t j = 0; j < BIG_FLOATS; j++)
            d->intact &= big[j] == pattern(j);
        for (int k = 0; k < 5; k++) {
            memset(v, 0, sizeof v);
            d->rc[1 + k] = fu_hub_recv(h, 0, &m[k], v, sizeof v, d->err[1 + k], ERR);
            d->got[1 + k] = v[0];
        }
        fu_msg_info odd = msg(MSG_ACTIVATION, 4, 0, 1, 12); /* the sender sent 8 bytes */
        d->rc[7] = fu_hub_recv(h, 0, &odd, v, sizeof v, d->err[7], ERR);
        for (int j = 0; j < 16; j++)
            v[j] = 42.0f;
        fu_msg_info back = msg(MSG_GRADIENT, 9, 0, 0, sizeof v);
        d->rc[9] = fu_hub_send(h, 0, &back, v, d->err[9], ERR);
        d->rc[8] = fu_hub_flush(h, d->err[8], ERR);
    }
    free(big);
    fu_hub_close(h);
}

static void test_hub_matches_messages_by_kind_step_micro_batch_tensor_in_any_order(void)
{
    clear_board();
    pid_t a = spawn(matching_device, 0, 20), b = spawn(matching_device, 1, 20);
    double deadline = now_s() + 10;
    CHECK_INT(0, reap(a, deadline));
    CHECK_INT(0, reap(b, deadline));
    device *A = &B->d[0], *Bd = &B->d[1];
    CHECK_STR("", A->err[0]);
    CHECK_STR("", Bd->err[0]);
    for (int k = 1; k <= 6; k++)
        CHECK_INT(0, A->rc[k]);
    CHECK_INT(0, A->rc[7]);
    CHECK_INT(0, A->rc[8]);
    /* asked for in reverse: 5, 4, 3, 2, 1 */
    for (int k = 1; k <= 5; k++) {
        CHECK_INT(0, Bd->rc[k]);
        CHECK_NEAR(6 - k, Bd->got[k], 0);
    }
    CHECK_INT(0, Bd->rc[6]);
    CHECK_INT(1, Bd->intact);
    CHECK_INT(-1, Bd->rc[7]);
    CHECK_STR("message from cpu-a (step 4, micro-batch 0, tensor 1): 8 bytes, expected 12", Bd->err[7]);
    CHECK_INT(0, Bd->rc[8]);
    CHECK_INT(0, Bd->rc[9]);
    CHECK_INT(0, A->rc[9]);
    CHECK_NEAR(42.0, A->got[9], 0);
}

/* ---- 2. sends do not wait for the peer -------------------------------- */

#define MB1 1000000u /* "1 MB": 1e6 bytes, 100 ms at 10 MB/s */

static void async_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    if (i == 0)
        l.bandwidth = 10e6; /* A's sends take 100 ms each on the emulated wire */
    fu_hub *h = open_hub(d, i == 0 ? "cpu-a" : "cpu-b", 7, 5000, &l, 1);
    if (!h)
        return;
    uint8_t *x = malloc(MB1);
    if (i == 0) {
        d->t[1] = now_s();
        for (int k = 0; k < 3; k++) {
            memset(x, k + 1, MB1);
            fu_msg_info m = msg(MSG_ACTIVATION, k, 0, 1, MB1);
            d->rc[1 + k] = fu_hub_send(h, 1, &m, x, d->err[1 + k], ERR);
        }
        d->t[2] = now_s(); /* the three sends returned */
        d->rc[4] = fu_hub_flush(h, d->err[4], ERR);
        d->t[4] = now_s();
    } else {
        sleep_s(0.5); /* not receiving: the sender must not care */
        for (int k = 0; k < 3; k++) {
            fu_msg_info m = msg(MSG_ACTIVATION, k, 0, 1, MB1);
            d->rc[1 + k] = fu_hub_recv(h, 0, &m, x, MB1, d->err[1 + k], ERR);
            d->got[1 + k] = x[MB1 - 1];
            d->t[1 + k] = now_s();
        }
    }
    free(x);
    fu_hub_close(h);
}

static void test_hub_send_returns_before_the_peer_receives(void)
{
    clear_board();
    pid_t a = spawn(async_device, 0, 20), b = spawn(async_device, 1, 20);
    double deadline = now_s() + 10;
    CHECK_INT(0, reap(a, deadline));
    CHECK_INT(0, reap(b, deadline));
    device *A = &B->d[0], *Bd = &B->d[1];
    for (int k = 1; k <= 3; k++) {
        CHECK_INT(0, A->rc[k]);
        CHECK_INT(0, Bd->rc[k]);
        CHECK_NEAR(k, Bd->got[k], 0);
    }
    double sends = A->t[2] - A->t[1];
    CHECK(sends < 0.1); /* 3 x 1 MB returned at once ... */
    fprintf(stderr, "async: 3 sends took %.3f s, the peer's first receive came %.3f s later, flush %.3f s\n", sends,
            Bd->t[1] - A->t[2], A->t[4] - A->t[1]);
    CHECK(Bd->t[1] - A->t[2] > 0.3); /* ... while the peer slept, not receiving */
    CHECK_INT(0, A->rc[4]);
    CHECK(A->t[4] - A->t[1] > 0.19); /* flush: the third left the 10 MB/s wire after 200 ms */
}

/* ---- 2b. heartbeats keep a quiet peer alive ----------------------------- */

static void quiet_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    fu_hub *h = open_hub(d, i == 0 ? "cpu-a" : "cpu-b", 8, 600, &l, 1);
    if (!h)
        return;
    float x = 0;
    fu_msg_info m = msg(MSG_GRADIENT, 1, 0, 3, sizeof x);
    if (i == 0) {
        d->rc[1] = fu_hub_recv(h, 1, &m, &x, sizeof x, d->err[1], ERR);
        d->got[1] = x;
    } else {
        sleep_s(1.5); /* computing, not calling the hub: 2.5 x the timeout */
        x = 7.0f;
        d->rc[1] = fu_hub_send(h, 0, &m, &x, d->err[1], ERR);
        d->rc[2] = fu_hub_flush(h, d->err[2], ERR);
    }
    fu_hub_close(h);
}

static void test_hub_heartbeats_keep_a_quiet_peer_alive(void)
{
    clear_board();
    pid_t a = spawn(quiet_device, 0, 20), b = spawn(quiet_device, 1, 20);
    double deadline = now_s() + 10;
    CHECK_INT(0, reap(a, deadline));
    CHECK_INT(0, reap(b, deadline));
    CHECK_INT(0, B->d[0].rc[1]);
    CHECK_STR("", B->d[0].err[1]);
    CHECK_NEAR(7.0, B->d[0].got[1], 0);
    CHECK_INT(0, B->d[1].rc[1]);
    CHECK_INT(0, B->d[1].rc[2]);
}

/* ---- 3. another compile is refused ------------------------------------ */

static void build_device(int i)
{
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    fu_hub *h = open_hub(&B->d[i], i == 0 ? "cpu-a" : "cpu-b", i == 0 ? 0x1a2b3c4d00000001ull : 0x3c4d000000000002ull,
                         5000, &l, 1);
    fu_hub_close(h);
}

static void test_hub_refuses_a_peer_of_another_build_on_both_ends(void)
{
    clear_board();
    pid_t a = spawn(build_device, 0, 20), b = spawn(build_device, 1, 20);
    double deadline = now_s() + 8;
    CHECK_INT(0, reap(a, deadline));
    CHECK_INT(0, reap(b, deadline));
    CHECK_INT(0, B->d[0].opened);
    CHECK_INT(0, B->d[1].opened);
    CHECK_STR("peer cpu-b runs another compile (build 3c4d000000000002, this program is build 1a2b3c4d00000001): "
              "refused",
              B->d[0].err[0]);
    CHECK_STR("peer cpu-a runs another compile (build 1a2b3c4d00000001, this program is build 3c4d000000000002): "
              "refused",
              B->d[1].err[0]);
}

/* ---- 4. nobody there --------------------------------------------------- */

static void lonely_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = link_to(3, "cpu-z", B->ports[0], 0);
    fu_hub_options o = { .self_name = "cpu-a", .build_id = 1, .timeout_ms = 1000, .connect_timeout_ms = 400 };
    d->t[1] = now_s();
    fu_hub *h = fu_hub_open(&l, 1, &o, d->err[0], ERR);
    d->t[2] = now_s();
    d->opened = h != NULL;
    fu_hub_close(h);
}

static void test_hub_names_a_peer_that_never_connects(void)
{
    clear_board();
    pid_t a = spawn(lonely_device, 0, 20);
    CHECK_INT(0, reap(a, now_s() + 6));
    char want[ERR];
    snprintf(want, sizeof want, "peer cpu-z (at tcp://127.0.0.1:%d) did not connect within 400 ms", B->ports[0]);
    CHECK_INT(0, B->d[0].opened);
    CHECK_STR(want, B->d[0].err[0]);
    double took = B->d[0].t[2] - B->d[0].t[1];
    CHECK(took > 0.35 && took < 2.0);
}

/* ---- 5. a killed peer -------------------------------------------------- */

#define SHORT_TIMEOUT 1500 /* ms */

/* Chain 0 - 1 - 2 (ports[0] between 0 and 1, ports[1] between 1 and 2),
 * or just 0 - 1 when n_devices is 2.  Each receives from its right-hand
 * neighbour (which never sends) until it fails, then aborts with that
 * error; the last one waits to be killed. */
static int n_devices;

static void chain_device(int i)
{
    device *d = &B->d[i];
    const char *names[3] = { "cpu-a", "cpu-b", "cpu-c" };
    fu_hub_link_spec l[2];
    int n = 0;
    if (i > 0)
        l[n++] = link_to(i - 1, names[i - 1], B->ports[i - 1], 0);
    if (i + 1 < n_devices)
        l[n++] = link_to(i + 1, names[i + 1], B->ports[i], 1);
    fu_hub *h = open_hub(d, names[i], 99, SHORT_TIMEOUT, l, n);
    if (!h)
        return;
    set_ready(d);
    if (i + 1 == n_devices) {
        sleep_s(15);
        fu_hub_close(h);
        return;
    } /* killed before this ends */
    float x;
    fu_msg_info m = msg(MSG_ACTIVATION, 1, 0, 1, sizeof x);
    d->rc[1] = fu_hub_recv(h, i + 1, &m, &x, sizeof x, d->err[1], ERR);
    d->t[1] = now_s();
    d->rc[2] = fu_hub_send(h, i + 1, &m, &x, d->err[2], ERR); /* later calls fail alike */
    fu_hub_abort(h, d->err[1]);
    fu_hub_close(h);
    exit(1);
}

/* Starts the chain, kills its last device once all are up; the kill time. */
static double run_chain(pid_t *pids)
{
    for (int i = 0; i < n_devices; i++)
        pids[i] = spawn(chain_device, i, 20);
    double up = now_s() + 6;
    int all = 1;
    for (int i = 0; i < n_devices; i++)
        all &= wait_ready(&B->d[i], up);
    CHECK(all);
    sleep_s(0.3); /* heartbeats flowing, receives waiting */
    double killed = now_s();
    kill(pids[n_devices - 1], SIGKILL);
    return killed;
}

static void test_hub_reports_a_killed_peer_within_the_timeout(void)
{
    clear_board();
    n_devices = 2;
    pid_t pids[2];
    double killed = run_chain(pids);
    double deadline = now_s() + 8;
    CHECK_INT(1, reap(pids[0], deadline));
    CHECK_INT(-1, reap(pids[1], deadline));
    device *A = &B->d[0];
    CHECK_INT(-1, A->rc[1]);
    CHECK_STR("lost peer cpu-b: nothing received for 1500 ms (killed, crashed or cut off)", A->err[1]);
    CHECK_INT(-1, A->rc[2]);
    CHECK_STR(A->err[1], A->err[2]);
    double after = A->t[1] - killed; /* silence counts from the last heartbeat, <= 375 ms before the kill */
    CHECK(after > 1.0 && after < SHORT_TIMEOUT / 1000.0 + 2.0);
    fprintf(stderr, "killed peer: reported %.3f s after the kill\n", after);
}

static void test_hub_abort_cascades_along_a_chain(void)
{
    clear_board();
    n_devices = 3;
    pid_t pids[3];
    double killed = run_chain(pids);
    double deadline = now_s() + 10;
    CHECK_INT(1, reap(pids[0], deadline));
    CHECK_INT(1, reap(pids[1], deadline));
    CHECK_INT(-1, reap(pids[2], deadline));
    device *A = &B->d[0], *Bd = &B->d[1];
    CHECK_INT(-1, Bd->rc[1]);
    CHECK_STR("lost peer cpu-c: nothing received for 1500 ms (killed, crashed or cut off)", Bd->err[1]);
    CHECK_INT(-1, A->rc[1]);
    CHECK_STR("peer cpu-b stopped: lost peer cpu-c: nothing received for 1500 ms (killed, crashed or cut off)",
              A->err[1]);
    double b_after = Bd->t[1] - killed, a_after = A->t[1] - killed;
    CHECK(b_after < SHORT_TIMEOUT / 1000.0 + 2.0);
    CHECK(a_after - b_after < 0.5); /* the abort travels at once, not by A's own timeout */
    fprintf(stderr, "cascade: B failed %.3f s, A %.3f s after the kill of C\n", b_after, a_after);
}

/* ---- 6. link shaping --------------------------------------------------- */

static void shaped_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    if (i == 0) {
        l.bandwidth = 10e6;
        l.latency = 0.050;
    }
    fu_hub *h = open_hub(d, i == 0 ? "cpu-a" : "cpu-b", 5, 5000, &l, 1);
    if (!h)
        return;
    uint8_t *x = malloc(MB1);
    memset(x, 0, MB1);
    if (i == 0) {
        sleep_s(0.2); /* the receiver is waiting in fu_hub_recv by now */
        fu_msg_info m = msg(MSG_ACTIVATION, 1, 0, 1, MB1);
        d->t[1] = now_s();
        d->rc[1] = fu_hub_send(h, 1, &m, x, d->err[1], ERR);
        sleep_s(0.4); /* delivered, wire idle again */
        d->t[2] = now_s();
        for (int k = 2; k <= 3; k++) {
            m.step = k;
            d->rc[k] = fu_hub_send(h, 1, &m, x, d->err[k], ERR);
        }
        d->rc[4] = fu_hub_flush(h, d->err[4], ERR);
        d->t[4] = now_s();
        fu_hub_link_stats st = { 0 };
        fu_hub_stats(h, 1, &st);
        d->bytes_sent = st.bytes, d->busy = st.busy_seconds;
    } else {
        for (int k = 1; k <= 3; k++) {
            fu_msg_info m = msg(MSG_ACTIVATION, k, 0, 1, MB1);
            d->rc[k] = fu_hub_recv(h, 0, &m, x, MB1, d->err[k], ERR);
            d->t[k] = now_s();
        }
    }
    free(x);
    fu_hub_close(h);
}

static void test_hub_shapes_a_link_to_its_bandwidth_and_latency(void)
{
    clear_board();
    pid_t a = spawn(shaped_device, 0, 20), b = spawn(shaped_device, 1, 20);
    double deadline = now_s() + 10;
    CHECK_INT(0, reap(a, deadline));
    CHECK_INT(0, reap(b, deadline));
    device *A = &B->d[0], *Bd = &B->d[1];
    for (int k = 1; k <= 4; k++)
        CHECK_INT(0, A->rc[k]);
    for (int k = 1; k <= 3; k++)
        CHECK_INT(0, Bd->rc[k]);
    /* 1 MB at 10 MB/s + 50 ms: 150 ms */
    double one = Bd->t[1] - A->t[1];
    CHECK(one > 0.12 && one < 0.40);
    /* two back to back: the second waits for the first to leave the wire, 250 ms */
    double two = Bd->t[3] - A->t[2], gap = Bd->t[3] - Bd->t[2];
    CHECK(two > 0.22 && two < 0.50);
    CHECK(gap > 0.08);
    /* the latency never held the sender: its flush ended before the delivery */
    CHECK(Bd->t[3] - A->t[4] > 0.05);
    CHECK_INT(3 * MB1, A->bytes_sent);
    CHECK(A->busy > 0.29 && A->busy < 0.45);
    fprintf(stderr, "shaped: one %.3f s, two %.3f s (gap %.3f), flush %.3f s before delivery, busy %.3f s\n", one, two,
            gap, Bd->t[3] - A->t[4], A->busy);
}

/* ---- 7. stopping together ---------------------------------------------- */

/* Chain 0 - 1 - 2 as in 5 (ports[0] between 0 and 1, ports[1] between 1
 * and 2), each hub told the run is the three of them.  Each device "runs"
 * steps from its own first step (far apart, as a stage that only sends can
 * be) and asks fu_hub_step_done at each step's end; one or two of them ask
 * to stop.  Every device must stop after the same step: the largest of
 * the steps they were in when they learned of it. */
static const char *chain_names[3] = { "cpu-a", "cpu-b", "cpu-c" };
static int stop_scenario; /* 0: A asks (130); 1: A asks (143) and C (130); 2: nobody asks */
static const int64_t first_step[3] = { 5, 9, 7 };

static fu_hub *open_chain(device *d, int i, int timeout_ms)
{
    fu_hub_link_spec l[2];
    int n = 0;
    if (i > 0)
        l[n++] = link_to(i - 1, chain_names[i - 1], B->ports[i - 1], 0);
    if (i < 2)
        l[n++] = link_to(i + 1, chain_names[i + 1], B->ports[i], 1);
    static const uint8_t all[3] = { 1, 1, 1 };
    fu_hub_options o = { .self_name = chain_names[i],
                         .build_id = 77,
                         .timeout_ms = timeout_ms,
                         .connect_timeout_ms = 5000,
                         .stall_timeout_ms = 8000,
                         .self_index = i,
                         .n_devices = 3,
                         .members = all };
    fu_hub *h = fu_hub_open(l, n, &o, d->err[0], ERR);
    d->rc[0] = h ? 0 : -1;
    d->opened = h != NULL;
    return h;
}

static void stop_chain_device(int i)
{
    device *d = &B->d[i];
    fu_hub *h = open_chain(d, i, 5000);
    if (!h)
        return;
    fu_hub_set_step(h, first_step[i]);
    set_ready(d);
    for (int k = 0; k < 3; k++) /* every hub open and at its first step */
        if (!wait_ready(&B->d[k], now_s() + 6)) {
            fu_hub_close(h);
            return;
        }
    d->t[1] = now_s();
    if ((i == 0 && stop_scenario <= 1) || (i == 2 && stop_scenario == 1))
        fu_hub_request_stop(h, i == 0 && stop_scenario == 1 ? 143 : 130);
    int code = -1, r = 0;
    int64_t step = first_step[i];
    for (; step < first_step[i] + 1000; step++) { /* nobody asks: 1000 steps, then leave */
        if ((r = fu_hub_step_done(h, step, &code, d->err[2], ERR)) != 0)
            break;
        sleep_s(0.001);
    }
    d->t[2] = now_s();
    d->rc[2] = r;
    d->stop_step[2] = step;
    d->stop_code[2] = code;
    float x = (float)i; /* a stop is no failure: data and flush go on */
    fu_msg_info m = msg(MSG_ACTIVATION, 1, 0, 1, sizeof x);
    if (i < 2)
        d->rc[3] = fu_hub_send(h, i + 1, &m, &x, d->err[3], ERR);
    if (i > 0)
        d->rc[4] = fu_hub_recv(h, i - 1, &m, &x, sizeof x, d->err[4], ERR);
    d->rc[5] = fu_hub_flush(h, d->err[5], ERR);
    fu_hub_close(h);
}

static void run_stop_chain(int scenario)
{
    clear_board();
    stop_scenario = scenario;
    pid_t pids[3];
    for (int i = 0; i < 3; i++)
        pids[i] = spawn(stop_chain_device, i, 20);
    double deadline = now_s() + 15;
    for (int i = 0; i < 3; i++)
        CHECK_INT(0, reap(pids[i], deadline));
    for (int i = 0; i < 3; i++) {
        device *d = &B->d[i];
        CHECK_STR("", d->err[0]);
        for (int k = 3; k <= 5; k++) {
            if ((k == 3 && i == 2) || (k == 4 && i == 0))
                continue;
            CHECK_INT(0, d->rc[k]);
            CHECK_STR("", d->err[k]);
        }
    }
}

/* Every device stopped after one step, at least the 9 B started from (the
 * devices step on their own here, so B may be past 9 when it learns). */
static void check_same_last_step(int code)
{
    int64_t last = B->d[0].stop_step[2];
    CHECK(last >= 9 && last < 9 + 300);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(1, B->d[i].rc[2]);
        CHECK_STR("", B->d[i].err[2]);
        CHECK_INT(last, B->d[i].stop_step[2]);
        /* code 0: two asked (130, 143): either may win, but every device the same */
        CHECK_INT(code ? code : B->d[0].stop_code[2], B->d[i].stop_code[2]);
    }
    CHECK(B->d[0].stop_code[2] == 130 || B->d[0].stop_code[2] == 143);
}

static void test_hub_every_device_stops_after_the_largest_step_in_progress(void)
{
    run_stop_chain(0);
    check_same_last_step(130);
    double took = B->d[0].t[2] - B->d[0].t[1];
    CHECK(took < 1.0); /* A's steps, 1 ms each, and the tables' round trips */
    fprintf(stderr, "stop chain: every device stopped after step %lld (A from 5, B 9, C 7), A %.4f s after asking\n",
            (long long)B->d[0].stop_step[2], took);
}

static void test_hub_two_stop_requests_agree_on_one_code(void)
{
    for (int k = 0; k < 5; k++) { /* which request each hub hears first varies: the code must not */
        run_stop_chain(1);
        check_same_last_step(0);
    }
}

static void test_hub_no_stop_request_waits_for_nothing(void)
{
    run_stop_chain(2);
    for (int i = 0; i < 3; i++) { /* 1000 steps of 1 ms: step_done itself costs nothing */
        CHECK_INT(0, B->d[i].rc[2]);
        CHECK_INT(first_step[i] + 1000, B->d[i].stop_step[2]);
        CHECK(B->d[i].t[2] - B->d[i].t[1] < 3.0);
    }
}

/* A device that dies while the others wait for its entry: the wait ends
 * with the hub's failure, naming it, within the peer timeout. */
static void stop_dead_device(int i)
{
    device *d = &B->d[i];
    fu_hub_link_spec l = i == 0 ? link_to(1, "cpu-b", B->ports[0], 1) : link_to(0, "cpu-a", B->ports[0], 0);
    static const uint8_t both[2] = { 1, 1 };
    fu_hub_options o = { .self_name = i == 0 ? "cpu-a" : "cpu-b",
                         .build_id = 43,
                         .timeout_ms = 800,
                         .connect_timeout_ms = 5000,
                         .stall_timeout_ms = 8000,
                         .self_index = i,
                         .n_devices = 2,
                         .members = both };
    fu_hub *h = fu_hub_open(&l, 1, &o, d->err[0], ERR);
    if (!h)
        return;
    set_ready(d);
    if (i == 1) {
        pause(); /* killed by the parent: it never answers */
        return;
    }
    while (!B->d[1].rc[6])
        sleep_s(0.01); /* the parent killed B */
    d->t[1] = now_s();
    fu_hub_request_stop(h, 143);
    int code = 0;
    d->rc[2] = fu_hub_step_done(h, 3, &code, d->err[2], ERR);
    d->t[2] = now_s();
    fu_hub_close(h);
}
static void test_hub_a_stop_waiting_on_a_dead_device_fails_naming_it(void)
{
    clear_board();
    pid_t a = spawn(stop_dead_device, 0, 20), b = spawn(stop_dead_device, 1, 20);
    CHECK(wait_ready(&B->d[1], now_s() + 6));
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    B->d[1].rc[6] = 1;
    CHECK_INT(0, reap(a, now_s() + 10));
    device *A = &B->d[0];
    CHECK_INT(-1, A->rc[2]);
    CHECK(strstr(A->err[2], "lost peer cpu-b") != NULL);
    CHECK(A->t[2] - A->t[1] < 3.0);
    fprintf(stderr, "stop, dead peer: '%s' after %.2f s\n", A->err[2], A->t[2] - A->t[1]);
}

int main(void)
{
    B = mmap(NULL, sizeof *B, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (B == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    double t0 = now_s();
    test_hub_matches_messages_by_kind_step_micro_batch_tensor_in_any_order();
    test_hub_send_returns_before_the_peer_receives();
    test_hub_heartbeats_keep_a_quiet_peer_alive();
    test_hub_refuses_a_peer_of_another_build_on_both_ends();
    test_hub_names_a_peer_that_never_connects();
    test_hub_reports_a_killed_peer_within_the_timeout();
    test_hub_abort_cascades_along_a_chain();
    test_hub_shapes_a_link_to_its_bandwidth_and_latency();
    test_hub_every_device_stops_after_the_largest_step_in_progress();
    test_hub_two_stop_requests_agree_on_one_code();
    test_hub_no_stop_request_waits_for_nothing();
    test_hub_a_stop_waiting_on_a_dead_device_fails_naming_it();
    fprintf(stderr, "test_hub: %.1f s\n", now_s() - t0);
    CHECK_DONE();
}
