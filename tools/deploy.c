/* deploy.c: `fusionc deploy OUT`: copy each device's bundle to its host
 * (deploy.h), each one as broker/remote_deploy.c says: checked on the host
 * and made visible only when whole.
 *
 * The devices go in start order (OUT/deploy.txt).  Then each standby's
 * host (standby="true" in the cluster file) gets every device's bundle of
 * the standby's kind and arch, the same way, under the device's name: in
 * an elastic run (fusionc launch --elastic) it may take any of their places
 * without a copy while the run waits.
 *
 * Re-running copies nothing that is already whole on the host; after a
 * change to one device's bundle, only that one is copied (the log says
 * which).  Every failure names the device, the host and what failed, and
 * the other devices are still tried; the exit status is 1 if any failed.
 */
#include "deploy.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../broker/remote_deploy.h"

typedef struct {
    const char *out_dir, *cluster_file, *ssh_config, *copier;
    int connect_timeout;
} deploy_options;

static const char *const copiers[] = { "rsync", "scp", NULL };

static const cli_option deploy_options_table[] = {
    { .name = "--cluster",
      .metavar = "FILE",
      CLI_STRING(deploy_options, cluster_file),
      .help = "the hosts from this cluster file (default: OUT/cluster.xml,\n"
              "the compile's); it must name the compile's devices" },
    { .name = "--ssh-config",
      .metavar = "FILE",
      CLI_STRING(deploy_options, ssh_config),
      .help = "passed to ssh, scp and rsync's ssh as -F FILE" },
    { .name = "--copier",
      .metavar = "C",
      CLI_CHOICE(deploy_options, copier),
      .choices = copiers,
      .expects = "rsync or scp",
      .help = "rsync (default when both ends have it) or scp" },
    { .name = "--connect-timeout",
      .metavar = "S",
      CLI_INT(deploy_options, connect_timeout),
      .lo = 1,
      .hi = INT_MAX,
      .expects = "a positive number of seconds",
      .help = "give up on a host that does not answer in S seconds (default 10)" },
};

const cli_usage deploy_usage = {
    "usage: fusionc deploy OUT [--cluster FILE] [--ssh-config FILE] [--copier rsync|scp] [--connect-timeout S]\n"
    "\n"
    "Copy each device's bundle in OUT (the output of `fusionc compile`) to its host, over ssh:\n"
    "to PATH/<device> on the host, PATH and the ssh user and port from the cluster file\n"
    "(relative paths are under the user's home).  Each copy is checked file by file\n"
    "(sha256) on the host and made visible only when whole; a bundle already there is\n"
    "not copied again.  A standby=\"true\" device's host gets every bundle of its kind, so\n"
    "that it can take any of their places in an elastic run (fusionc launch --elastic).\n"
    "\n",
    deploy_options_table,
    NULL,
    sizeof deploy_options_table / sizeof deploy_options_table[0],
    21,
    NULL
};

/* "fusionc deploy: <fmt with arg>" and the usage on standard error; 2. */
static int usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&deploy_usage, "fusionc deploy", fmt, arg);
}

int deploy_main(int argc, char **argv)
{
    deploy_options o = { .connect_timeout = 10 };
    char why[512];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_usage_print(stdout, &deploy_usage);
            return 0;
        }
        int took = cli_take(&deploy_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return usage_fail("%s", why);
        if (took == 0 && (a[0] == '-' || o.out_dir))
            return usage_fail("unexpected argument '%s'", a);
        if (took == 0)
            o.out_dir = a;
    }
    if (!o.out_dir)
        return usage_fail("%s", "expected the compile's output folder");
    remote_plan plan = { 0 };
    plan.connect_timeout = o.connect_timeout;
    plan.ssh_config = o.ssh_config;
    const char *out_dir = o.out_dir, *cluster_file = o.cluster_file, *copier = o.copier;
    struct diag err = { 0 };
    if (remote_plan_load(&plan, out_dir, cluster_file, &err)) {
        diag_print(&err);
        return 1;
    }
    int failed = 0, copied = 0;
    char failed_names[1024] = "", deployed_names[1024] = "";
    for (int k = 0; k < plan.n_devices; k++) {
        int this_copied = 0;
        const char *name = plan.devices[k].device;
        char *list = failed_names;
        if (deploy_device(&plan, &plan.devices[k], copier, &this_copied, &err)) {
            fprintf(stderr, "fusionc deploy: error: %s\n", err.msg);
            failed++;
        } else {
            list = deployed_names;
        }
        size_t used = strlen(list);
        snprintf(list + used, sizeof failed_names - used, "%s%s", used ? ", " : "", name);
        copied += this_copied;
    }
    /* A standby gets every bundle of its kind and arch, under the device's
     * name, so that it can take any of their places without a copy. */
    int spares = 0, spares_failed = 0;
    for (int s = 0; s < plan.n_standbys; s++)
        for (int k = 0; k < plan.n_devices; k++) {
            const remote_device *d = &plan.devices[k], *sb = &plan.standbys[s];
            if (d->kind != sb->kind || strcmp(d->arch, sb->arch) != 0)
                continue;
            remote_device there = *sb;
            snprintf(there.device, sizeof there.device, "%s", d->device);
            int this_copied = 0;
            printf("deploy: standby %s gets %s's bundle, to stand in for it\n", sb->device, d->device);
            spares++;
            if (deploy_device(&plan, &there, copier, &this_copied, &err)) {
                fprintf(stderr, "fusionc deploy: error: standby %s: %s\n", sb->device, err.msg);
                spares_failed++;
            }
        }
    if (spares_failed)
        fprintf(stderr, "fusionc deploy: %d of %d standby bundle%s failed\n", spares_failed, spares,
                spares == 1 ? "" : "s");
    if (failed == plan.n_devices)
        fprintf(stderr, "fusionc deploy: every device failed (%s): nothing is deployed\n", failed_names);
    else if (failed)
        fprintf(stderr, "fusionc deploy: %d of %d device%s failed (%s); deployed: %s\n", failed, plan.n_devices,
                plan.n_devices == 1 ? "" : "s", failed_names, deployed_names);
    else
        printf("deploy: %d device%s: %d copied, %d unchanged\n", plan.n_devices, plan.n_devices == 1 ? "" : "s", copied,
               plan.n_devices - copied);
    remote_plan_free(&plan);
    return failed || spares_failed ? 1 : 0;
}
