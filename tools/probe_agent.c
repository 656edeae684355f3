/* probe_agent.c: fusion-probe, the program `fusionc probe` (tools/probe.c)
 * copies to each host and runs there over ssh.  A bundle of its own
 * (fusion-probe and lib/, as a device's: the host needs only the C library).
 *
 *   fusion-probe profile [fusionc profile's options]
 *       this host's CPU, as `fusionc profile` measures it (profile.c): its
 *       <device> line on standard output.
 *   fusion-probe serve PORT SECONDS
 *       the far end of a link measurement: a nanomsg PAIR socket on
 *       PORT of every interface that answers each ping, counts the bulk bytes it is
 *       sent and says how many it got; gone after SECONDS of silence.
 *   fusion-probe link ADDRESS PORT SECONDS
 *       the near end: the fastest of 20 round trips (latency: half of it),
 *       then 256 KiB messages for SECONDS, and the bytes the far end says
 *       it got over the time until it said so, less half a round trip
 *       (bandwidth).  Prints "latency-s X bandwidth-bps Y".
 *
 * The link's traffic is nanomsg's, as the devices' is (runtime/comm/), so a
 * figure is what a device would see on that path, TCP's window included. */
#define _GNU_SOURCE
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profile.h"

#define BULK_BYTES (256 * 1024)

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "fusion-probe: %s: %s\n", what, nn_strerror(nn_errno()));
    return 1;
}

static int open_pair(const char *url, int listen, int timeout_ms)
{
    int s = nn_socket(AF_SP, NN_PAIR);
    if (s < 0)
        return -1;
    int buf = 4 * BULK_BYTES, unlimited = -1;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    if ((listen ? nn_bind(s, url) : nn_connect(s, url)) < 0) {
        nn_close(s);
        return -1;
    }
    return s;
}

/* Messages: "p" a ping (answered "p"), "b..." bulk (counted), "e" the end
 * of the bulk (answered with the count), "q" quit. */
static int serve(int port, double seconds)
{
    char url[64];
    snprintf(url, sizeof url, "tcp://*:%d", port);
    int s = open_pair(url, 1, (int)(seconds * 1000));
    if (s < 0)
        return fail(url);
    long long got = 0;
    for (;;) {
        char *msg = NULL;
        int n = nn_recv(s, &msg, NN_MSG, 0);
        if (n < 0)
            break; /* silent for SECONDS: done */
        char kind = n > 0 ? msg[0] : '?';
        nn_freemsg(msg);
        if (kind == 'b') {
            got += n;
        } else if (kind == 'p') {
            nn_send(s, "p", 1, 0);
        } else if (kind == 'e') {
            char reply[64];
            int len = snprintf(reply, sizeof reply, "%lld", got);
            nn_send(s, reply, (size_t)len, 0);
            got = 0;
        } else if (kind == 'q') {
            break;
        }
    }
    nn_close(s);
    return 0;
}

static int link_measure(const char *address, int port, double seconds)
{
    char url[320];
    snprintf(url, sizeof url, "tcp://%.256s:%d", address, port);
    int s = open_pair(url, 0, 10000);
    if (s < 0)
        return fail(url);
    /* The first ping waits for the connection (the far end may still be starting). */
    double best = 1e9;
    for (int i = 0; i < 21; i++) {
        double t0 = now_seconds();
        char *msg = NULL;
        if (nn_send(s, "p", 1, 0) != 1 || nn_recv(s, &msg, NN_MSG, 0) < 0) {
            nn_close(s);
            return fail("a ping got no answer");
        }
        nn_freemsg(msg);
        if (i > 0 && now_seconds() - t0 < best)
            best = now_seconds() - t0;
    }
    char *block = malloc(BULK_BYTES);
    if (!block) {
        nn_close(s);
        return 1;
    }
    memset(block, 'b', BULK_BYTES);
    long long sent = 0;
    double t0 = now_seconds();
    while (now_seconds() - t0 < seconds) {
        if (nn_send(s, block, BULK_BYTES, 0) != BULK_BYTES) {
            free(block);
            nn_close(s);
            return fail("sending");
        }
        sent += BULK_BYTES;
    }
    free(block);
    char *reply = NULL;
    int n = nn_send(s, "e", 1, 0) == 1 ? nn_recv(s, &reply, NN_MSG, 0) : -1;
    double elapsed = now_seconds() - t0 - best / 2;
    if (n < 0) {
        nn_close(s);
        return fail("the far end did not say what it got");
    }
    char count[64]; /* the message is the digits, no NUL */
    snprintf(count, sizeof count, "%.*s", n < 63 ? n : 63, reply);
    nn_freemsg(reply);
    long long got = strtoll(count, NULL, 10);
    nn_send(s, "q", 1, 0);
    nn_close(s);
    if (got != sent) {
        fprintf(stderr, "fusion-probe: sent %lld bytes, the far end got %lld\n", sent, got);
        return 1;
    }
    printf("latency-s %.6g bandwidth-bps %.6g bytes %lld\n", best / 2, 8.0 * (double)got / elapsed, got);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "profile") == 0)
        return profile_main(argc - 2, argv + 2);
    if (argc == 4 && strcmp(argv[1], "serve") == 0)
        return serve(atoi(argv[2]), atof(argv[3]));
    if (argc == 5 && strcmp(argv[1], "link") == 0)
        return link_measure(argv[2], atoi(argv[3]), atof(argv[4]));
    fprintf(stderr, "usage: fusion-probe profile [OPTIONS] | serve PORT SECONDS | link ADDRESS PORT SECONDS\n"
                    "(fusionc probe runs it on each host: see tools/probe_agent.c)\n");
    return 2;
}
