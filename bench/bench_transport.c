/* bench_transport.c: throughput of one 64 MiB fp32 tensor between two
 * processes on loopback, through fu_link (nanomsg tcp, header, XXH3 checksum,
 * ack) against a plain TCP socket moving the same bytes with the same pattern
 * (send the tensor, wait for a 1-byte ack).  A third line, bare nanomsg
 * (NN_PAIR, the tensor as one NN_MSG message, one-byte ack, no header or
 * checksum), is what fu_link did before it cut tensors into FU_WIRE_FRAME
 * frames: nanomsg allocates a buffer per message, and one of 64 MiB costs
 * fresh pages on both sides every time (runtime/comm/transport.c).
 *
 * Each figure is the median of REPS acked transfers after one warm-up,
 * timed at the sender from the start of the send to the ack; the three ways
 * take turns within every rep (tcp, fu_link, nanomsg, tcp, ...), so the
 * ratio compares transfers made within a second of each other.  Target
 * (many-devices issue): fu_link / raw TCP >= 0.8.  A fourth way is a
 * sealed fu_link (comm/seal.h: the handshake, then every frame under
 * AES-256-GCM or XChaCha20-Poly1305), against the plain one: the cost of
 * sealing (sealed-links issue: >= 0.8).
 *
 *     bench_transport [MiB]        default 64
 */
#include "comm/transport.h"

#include <sodium.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REPS 9

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int free_port(int start)
{
    for (int port = start; port < start + 500; port++) {
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok)
            return port;
    }
    return -1;
}

/* ---- fu_link ----------------------------------------------------------- */

/* Both ends of the sealed link: the same secret, build id and epoch. */
static const uint8_t bench_secret[FU_SECRET_BYTES] = { 1, 2, 3, 4, 5, 6, 7, 8 };
static const fu_link_auth sender_auth = { bench_secret, "sender", 42, 1 };
static const fu_link_auth receiver_auth = { bench_secret, "receiver", 42, 1 };

static int fu_receiver(const char *url, float *buf, size_t bytes, int sealed)
{
    char err[256];
    fu_link *l = fu_link_open_sealed(url, 1, "sender", 10000, -1, sealed ? &receiver_auth : NULL, err, sizeof err);
    if (!l) {
        fprintf(stderr, "receiver: %s\n", err);
        return 1;
    }
    for (int r = 0; r < REPS + 1; r++) {
        fu_msg_info m;
        if (fu_link_recv(l, &m, buf, bytes, err, sizeof err) != 0) {
            fprintf(stderr, "receiver: %s\n", err);
            return 1;
        }
    }
    fu_link_close(l);
    return 0;
}

/* One acked transfer; seconds, or -1. */
static double fu_transfer(fu_link *l, int r, const float *buf, size_t bytes)
{
    char err[256];
    fu_msg_info m = { .kind = MSG_ACTIVATION, .step = r, .tensor = 1, .codec = FU_CODEC_RAW_F32, .length = bytes };
    double t0 = now_s();
    if (fu_link_send(l, &m, buf, err, sizeof err) != 0) {
        fprintf(stderr, "sender: %s\n", err);
        return -1;
    }
    return now_s() - t0;
}

/* ---- bare nanomsg ------------------------------------------------------ */

static int nn_open(const char *url, int bind)
{
    int s = nn_socket(AF_SP, NN_PAIR), unlimited = -1, buf = 4 << 20, tmo = 10000;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &tmo, sizeof tmo);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &tmo, sizeof tmo);
    if ((bind ? nn_bind(s, url) : nn_connect(s, url)) < 0) {
        fprintf(stderr, "%s: %s\n", url, nn_strerror(nn_errno()));
        return -1;
    }
    return s;
}

static int nn_receiver(const char *url, float *buf, size_t bytes)
{
    int s = nn_open(url, 1);
    if (s < 0)
        return 1;
    for (int r = 0; r < REPS + 1; r++) {
        void *m;
        int n = nn_recv(s, &m, NN_MSG, 0);
        if (n < 0) {
            fprintf(stderr, "nn receiver: %s\n", nn_strerror(nn_errno()));
            return 1;
        }
        memcpy(buf, m, (size_t)n < bytes ? (size_t)n : bytes); /* same one copy as fu_link */
        nn_freemsg(m);
        char ack = 1;
        nn_send(s, &ack, 1, 0);
    }
    nn_close(s);
    return 0;
}

static double nn_transfer(int s, const float *buf, size_t bytes)
{
    double t0 = now_s();
    void *m = nn_allocmsg(bytes, 0);
    memcpy(m, buf, bytes);
    char ack;
    if (nn_send(s, &m, NN_MSG, 0) < 0 || nn_recv(s, &ack, 1, 0) < 0) {
        fprintf(stderr, "nn sender: %s\n", nn_strerror(nn_errno()));
        return -1;
    }
    return now_s() - t0;
}

/* ---- raw TCP ----------------------------------------------------------- */

static int full(ssize_t (*io)(int, void *, size_t, int), int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = io(fd, (char *)p + done, n - done, 0);
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}
static ssize_t send_nc(int fd, void *p, size_t n, int f) { return send(fd, p, n, f | MSG_NOSIGNAL); }

static int tcp_receiver(int port, float *buf, size_t bytes)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0) {
        perror("tcp receiver");
        return 1;
    }
    int s = accept(ls, NULL, NULL);
    for (int r = 0; r < REPS + 1; r++) {
        char ack = 1;
        if (full(recv, s, buf, bytes) != 0 || full(send_nc, s, &ack, 1) != 0) {
            perror("tcp receiver");
            return 1;
        }
    }
    close(s);
    close(ls);
    return 0;
}

static int tcp_connect(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = -1;
    for (int tries = 0; tries < 200; tries++) { /* until the receiver listens */
        s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        close(s);
        s = -1;
        usleep(10000);
    }
    if (s < 0) {
        perror("tcp sender");
        return -1;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static double tcp_transfer(int s, const float *buf, size_t bytes)
{
    char ack;
    double t0 = now_s();
    if (full(send_nc, s, (void *)buf, bytes) != 0 || full(recv, s, &ack, 1) != 0) {
        perror("tcp sender");
        return -1;
    }
    return now_s() - t0;
}

/* ---- driver ------------------------------------------------------------ */

enum { FU, NN, TCP, SEAL, WAYS };

/* Forks the receiver, runs the sender here; median seconds, or -1. */
int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    size_t bytes = mib << 20;
    float *tx = malloc(bytes), *rx = malloc(bytes);
    if (!tx || !rx)
        return 1;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        tx[i] = (float)(i % 1000) * 0.001f;
    memset(rx, 0, bytes);
    /* The three receivers are forked before this process touches nanomsg
     * (no child inherits its threads); then every rep moves the tensor once
     * each way, in turn, so that a slow or fast spell of the machine (a
     * shared VM) falls on all three alike. */
    int tcp_port = free_port(20000 + (int)(getpid() * 7919u % 38000u));
    int fu_port = free_port(tcp_port + 1), nn_port = free_port(fu_port + 1), seal_port = free_port(nn_port + 1);
    char fu_url[64], nn_url[64], seal_url[64];
    snprintf(fu_url, sizeof fu_url, "tcp://127.0.0.1:%d", fu_port);
    snprintf(nn_url, sizeof nn_url, "tcp://127.0.0.1:%d", nn_port);
    snprintf(seal_url, sizeof seal_url, "tcp://127.0.0.1:%d", seal_port);
    fflush(stdout);
    pid_t pids[WAYS];
    for (int which = 0; which < WAYS; which++) {
        pids[which] = fork();
        if (pids[which] == 0)
            _exit(which == FU     ? fu_receiver(fu_url, rx, bytes, 0)
                  : which == SEAL ? fu_receiver(seal_url, rx, bytes, 1)
                  : which == NN   ? nn_receiver(nn_url, rx, bytes)
                                  : tcp_receiver(tcp_port, rx, bytes));
    }
    char err[256];
    int tcp_sock = tcp_connect(tcp_port), nn_sock = nn_open(nn_url, 0);
    fu_link *l = fu_link_connect(fu_url, "receiver", 10000, err, sizeof err);
    if (!l)
        fprintf(stderr, "sender: %s\n", err);
    fu_link *sl = fu_link_open_sealed(seal_url, 0, "receiver", 10000, -1, &sender_auth, err, sizeof err);
    if (!sl)
        fprintf(stderr, "sealed sender: %s\n", err);
    double t[WAYS][REPS + 1];
    int ok = tcp_sock >= 0 && nn_sock >= 0 && l && sl;
    for (int r = 0; ok && r < REPS + 1; r++) { /* rep 0 warms up */
        t[TCP][r] = tcp_transfer(tcp_sock, tx, bytes);
        t[FU][r] = fu_transfer(l, r, tx, bytes);
        t[SEAL][r] = fu_transfer(sl, r, tx, bytes);
        t[NN][r] = nn_transfer(nn_sock, tx, bytes);
        ok = t[TCP][r] > 0 && t[FU][r] > 0 && t[NN][r] > 0 && t[SEAL][r] > 0;
    }
    if (tcp_sock >= 0)
        close(tcp_sock);
    if (nn_sock >= 0)
        nn_close(nn_sock);
    fu_link_close(l);
    fu_link_close(sl);
    for (int which = 0; which < WAYS; which++) {
        int status;
        waitpid(pids[which], &status, 0);
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (!ok) {
        fprintf(stderr, "bench_transport: a transfer failed\n");
        return 1;
    }
    double tcp = median(t[TCP] + 1, REPS), fu = median(t[FU] + 1, REPS), nn = median(t[NN] + 1, REPS);
    double sealed = median(t[SEAL] + 1, REPS);
    double gb_tcp = bytes / tcp / 1e9, gb_fu = bytes / fu / 1e9, gb_nn = bytes / nn / 1e9,
           gb_seal = bytes / sealed / 1e9;
    char what[80];
    printf("%-44s %12s %-6s %-26s %s\n", "what", "value", "unit", "anchor", "ratio");
    snprintf(what, sizeof what, "raw tcp loopback %zu MiB, acked", mib);
    printf("%-44s %12.3f %-6s %-26s %s\n", what, gb_tcp, "GB/s", "-", "-");
    snprintf(what, sizeof what, "fu_link nanomsg tcp %zu MiB, %u KiB frames", mib, FU_WIRE_FRAME >> 10);
    printf("%-44s %12.3f %-6s %-26s %.3f\n", what, gb_fu, "GB/s", "raw tcp (target >= 0.8)", gb_fu / gb_tcp);
    snprintf(what, sizeof what, "sealed fu_link %zu MiB (%s)", mib,
             fu_seal_init() == 0 && crypto_aead_aes256gcm_is_available() ? "AES-256-GCM" : "XChaCha20-Poly1305");
    printf("%-44s %12.3f %-6s %-26s %.3f\n", what, gb_seal, "GB/s", "plain fu_link (target >= 0.8)", gb_seal / gb_fu);
    snprintf(what, sizeof what, "  bare nanomsg, one %zu MiB NN_MSG, acked", mib);
    printf("%-44s %12.3f %-6s %-26s %.3f\n", what, gb_nn, "GB/s", "raw tcp", gb_nn / gb_tcp);
    free(tx);
    free(rx);
    return 0;
}
