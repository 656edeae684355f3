/* broker.c: `fusionc broker` and `fusionc standby`, their command lines
 * (broker.h).  The broker itself is broker/: this reads its options into
 * a broker_options and runs broker_run. */
#include "broker.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../broker/broker_db.h"
#include "../broker/invite.h"
#include "../runtime/broker_client.h"
#include "../runtime/checkpoint_store.h"
#include "../runtime/comm/seal.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

/* cmd_broker's options (broker.h), and the text of its --help. */
static const char *const standby_modes[] = { "none", "all", NULL };

/* clang-format off */
static const cli_option broker_options_table[] = {
    { .name = "--fresh", CLI_FLAG(broker_options, fresh),
      .help = "start a new run: an earlier one in OUT (broker.db, checkpoints) is first\n"
              "moved to OUT/archive/run-N" },
    { .name = "--port", .metavar = "P", CLI_INT(broker_options, port), .lo = 1, .hi = 65535,
      .expects = "a port in [1, 65535]", .help = "the broker listens on tcp port P (default 29400)" },
    { .name = "--port-base", .metavar = "P", CLI_INT(broker_options, port_base), .lo = 1, .hi = INT_MAX,
      .expects = "a positive port number",
      .help = "the devices' first port, epoch 1 (default 30000; each\n"
              "epoch 200 higher)" },
    { .name = "--save-every", .metavar = "K", CLI_INT(broker_options, save_every), .lo = 1, .hi = INT_MAX,
      .expects = "a positive number of steps", .help = "a checkpoint every K steps (default 20)" },
    { .name = "--keep", .metavar = "K", CLI_INT(broker_options, keep), .lo = 1, .hi = INT_MAX,
      .expects = "a positive count", .help = "keep the K newest complete checkpoints (default 3; the newest always)" },
    { .name = "--peer-timeout", .metavar = "S", CLI_DOUBLE(broker_options, peer_timeout), .lo = 0, .hi = 1e9,
      .open = CLI_OPEN_LO, .expects = "a positive number of seconds",
      .help = "a device silent this long is lost (default 10)" },
    { .name = "--max-recoveries", .metavar = "N", CLI_INT(broker_options, max_recoveries), .lo = 0, .hi = INT_MAX,
      .expects = "a count, 0 or more", .help = "give up after N recoveries (default 5)" },
    { .name = "--over-ssh", CLI_FLAG(broker_options, over_ssh),
      .help = "every device on its cluster host, over ssh (deployed first: fusionc deploy);\n"
              "parts fetched here as they are written, checkpoints copied to the hosts\n"
              "to resume, new bundles deployed (fusionc launch --elastic runs this)" },
    { .name = "--ssh-config", .metavar = "FILE", CLI_STRING(broker_options, ssh_config),
      .help = "with --over-ssh: passed to ssh as -F FILE" },
    { .name = "--address", .metavar = "A", CLI_STRING(broker_options, address),
      .help = "the hosts (--over-ssh) and providers (its invite) reach the broker at A\n"
              "(default: this machine's address on the route to the first host; without\n"
              "--over-ssh, 127.0.0.1)" },
    { .name = "--ssh-timeout", .metavar = "S", CLI_INT(broker_options, ssh_timeout), .lo = 1, .hi = INT_MAX,
      .expects = "a positive number of seconds",
      .help = "with --over-ssh: give up on a host that does not answer in S s (default 10;\n"
              "the devices' own --connect-timeout goes to them)" },
    { .name = "--standby-agents", .metavar = "A", CLI_CHOICE_INT(broker_options, standby_agents),
      .choices = standby_modes, .expects = "all or none",
      .help = "all (default): start `fusionc standby` for every standby of the cluster\n"
              "file; none: standbys register themselves (fusionc standby on their\n"
              "host); one that registers mid-run is taken in at the next complete\n"
              "checkpoint when the plan with it is at least 10% faster" },
};

const cli_usage broker_usage = {
    "usage: fusionc broker OUT [--fresh] [--port P] [--port-base P] [--save-every K] [--peer-timeout S]\n"
    "                      [--max-recoveries N] DEVICE-ARGS... (--data FILE --steps N ...)\n"
    "\n"
    "Runs the compile in OUT (on this machine, or --over-ssh on its hosts) and keeps it running when devices\n"
    "vanish: starts every device (with DEVICE-ARGS) and a standby agent per\n"
    "standby=\"true\" device, records every K steps' coordinated checkpoint\n"
    "(OUT/checkpoints/step-N, whole once every part is in: its MANIFEST), and when a\n"
    "device is lost (killed, or silent past the peer timeout) starts a new epoch:\n"
    "a standby of its kind in its place, or a new plan without it (OUT/epoch-N),\n"
    "every device resuming from the survivors' state of the last step they\n"
    "finished when it covers every stage, else the last complete checkpoint.  State in\n"
    "OUT/broker.db (SQLite): started again on a running OUT, it takes over; on an OUT whose run\n"
    "finished, failed or was stopped, it resumes that run from its newest complete checkpoint\n"
    "(up to --steps) and never overwrites it.  It writes OUT/invite.key, with which a machine\n"
    "offers its device (fusionc provide): weighed, like a standby that registers, at the next\n"
    "complete checkpoint.  Arguments that are none of its options go to the devices as they are.\n",
    broker_options_table, NULL, sizeof broker_options_table / sizeof broker_options_table[0], 19, NULL
};
/* clang-format on */

/* "fusionc broker: <fmt with arg>" and the usage on standard error; 2. */
static int broker_usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&broker_usage, "fusionc broker", fmt, arg);
}

/* The devices' --steps N (or --steps=N) among their arguments; 0 without. */
static int64_t device_steps(char *const *args, int n)
{
    int64_t steps = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(args[i], "--steps") == 0 && i + 1 < n)
            steps = atoll(args[i + 1]);
        else if (strncmp(args[i], "--steps=", 8) == 0)
            steps = atoll(args[i] + 8);
    return steps;
}

int cmd_broker(int argc, char **argv)
{
    broker_options o = { .port = 29400,
                         .port_base = 30000,
                         .save_every = 20,
                         .keep = CKPT_DEFAULT_KEEP,
                         .peer_timeout = 10,
                         .max_recoveries = 5,
                         .ssh_timeout = 10,
                         .standby_agents = 1 };
    char why[512];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_usage_print(stdout, &broker_usage);
            return 0;
        }
        int took = cli_take(&broker_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return broker_usage_fail("%s", why);
        if (took > 0)
            continue;
        if (!o.out && a[0] != '-')
            o.out = a;
        else if (o.n_args < BROKER_MAX_ARGS - 1) /* the devices' */
            o.args[o.n_args++] = argv[i];
    }
    o.steps = device_steps(o.args, o.n_args);
    if (!o.out || o.steps <= 0)
        return broker_usage_fail("%s", "expected OUT (a compile's folder) and the devices' --steps N");
    return broker_run(&o);
}

/* ---- fusionc standby ------------------------------------------------------------- */

typedef struct {
    const char *url, *device, *key;
} standby_options;

/* clang-format off */
static const cli_option standby_options_table[] = {
    { .name = "--broker", .metavar = "URL", CLI_NONEMPTY(standby_options, url), .expects = "the broker's address",
      .help = "the run's broker (tcp://HOST:PORT)" },
    { .name = "--device", .metavar = "NAME", CLI_NONEMPTY(standby_options, device), .expects = "a standby's name",
      .help = "the cluster file's standby this host is" },
    { .name = "--key", .metavar = "FILE", CLI_NONEMPTY(standby_options, key), .expects = "a file",
      .help = "the run secret (the compile's OUT/run.key), which seals every request" },
};

const cli_usage standby_usage = {
    "usage: fusionc standby --broker URL --device NAME --key FILE\n"
    "\n"
    "Registers NAME with the run's broker as a standby and waits until it is used or the run ends.\n",
    standby_options_table, NULL, sizeof standby_options_table / sizeof standby_options_table[0], 14, NULL
};
/* clang-format on */

int cmd_standby(int argc, char **argv)
{
    standby_options o = { 0 };
    char why[FU_PATH_BYTES + 504];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &standby_usage);
            return 0;
        }
        int took = cli_take(&standby_usage, argc, argv, &i, &o, why, sizeof why);
        if (took == 0)
            snprintf(why, sizeof why, "unexpected argument '%s'", argv[i]);
        if (took <= 0)
            return cli_usage_fail(&standby_usage, "fusionc standby", "%s", why);
    }
    if (!o.url || !o.device || !o.key)
        return cli_usage_fail(&standby_usage, "fusionc standby", "%s", "expected --broker, --device and --key");
    uint8_t secret[FU_SECRET_BYTES];
    if (fu_secret_load(o.key, secret, why, sizeof why)) {
        fprintf(stderr, "fusionc standby: %s\n", why);
        return 1;
    }
    return rt_broker_standby(o.url, o.device, secret);
}

/* ---- fusionc invite ---------------------------------------------------------------- */

typedef struct {
    int revoke;
    const char *out_file;
} invite_options;

/* clang-format off */
static const cli_option invite_options_table[] = {
    { .name = "--revoke", .metavar = "N", CLI_INT(invite_options, revoke), .lo = 1, .hi = INT_MAX,
      .expects = "an invite's number", .help = "revoke invite N: the broker refuses every request under it" },
    { .name = "-o", .metavar = "FILE", CLI_NONEMPTY(invite_options, out_file), .expects = "a file",
      .help = "write the new invite to FILE (default OUT/invite-N.key; mode 0600)" },
};

const cli_usage invite_usage = {
    "usage: fusionc invite OUT [-o FILE] | fusionc invite OUT --revoke N\n"
    "\n"
    "Makes another invite for providers to join the run in OUT (fusionc provide --invite FILE), or\n"
    "revokes one.  The broker writes invite 1 itself, to OUT/invite.key, when it starts.\n",
    invite_options_table, NULL, sizeof invite_options_table / sizeof invite_options_table[0], 12, NULL
};
/* clang-format on */

int cmd_invite(int argc, char **argv)
{
    invite_options o = { 0 };
    const char *out = NULL;
    char why[FU_PATH_BYTES + 504], path[FU_PATH_BYTES + 104];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &invite_usage);
            return 0;
        }
        int took = cli_take(&invite_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return cli_usage_fail(&invite_usage, "fusionc invite", "%s", why);
        if (took == 0 && !out && argv[i][0] != '-')
            out = argv[i];
        else if (took == 0)
            return cli_usage_fail(&invite_usage, "fusionc invite", "unexpected argument '%s'", argv[i]);
    }
    if (!out)
        return cli_usage_fail(&invite_usage, "fusionc invite", "%s", "expected OUT (a run's folder)");
    snprintf(path, sizeof path, "%s/broker.db", out);
    sqlite3 *db = NULL;
    invite v = { 0 };
    uint8_t secret[FU_SECRET_BYTES];
    if (access(path, F_OK) != 0) {
        fprintf(stderr, "fusionc invite: %s: no such file: start the run with fusionc broker first\n", path);
        return 1;
    }
    if (broker_db_open(&db, path, why, sizeof why)) {
        fprintf(stderr, "fusionc invite: %s\n", why);
        return 1;
    }
    int rc = 1;
    if (o.revoke) {
        if (broker_db_invite_revoke(db, o.revoke) == 0) {
            printf("invite %d of %s revoked: the broker refuses it from its next request\n", o.revoke, out);
            rc = 0;
        } else {
            fprintf(stderr, "fusionc invite: %s: no invite %d\n", path, o.revoke);
        }
    } else {
        snprintf(path, sizeof path, "%s/run.key", out);
        int64_t id = -1;
        why[0] = '\0';
        if (fu_secret_load(path, secret, why, sizeof why) != 0) {
            ; /* (said in why) */
        } else if (broker_db_get(db, "invite_url", v.url, sizeof v.url) != 0) {
            snprintf(why, sizeof why, "%s/broker.db: the broker has not recorded its address yet", out);
        } else if ((id = broker_db_invite(db, 0)) <= 0) {
            snprintf(why, sizeof why, "%s/broker.db: cannot record a new invite", out);
        } else {
            v.id = (uint32_t)id;
            invite_token(secret, v.id, v.token);
            snprintf(path, sizeof path, "%s/invite-%u.key", out, v.id);
            if (invite_write(o.out_file ? o.out_file : path, &v, why, sizeof why) == 0) {
                printf("invite %u: %s (fusionc provide --invite it; revoke with fusionc invite %s --revoke %u)\n", v.id,
                       o.out_file ? o.out_file : path, out, v.id);
                rc = 0;
            }
        }
        if (rc)
            fprintf(stderr, "fusionc invite: %s\n", why);
    }
    broker_db_close(db);
    return rc;
}
