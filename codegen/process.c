/* process.c: see process.h. */
#include "process.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int run_command(char *const argv[], struct diag *err, const char *what)
{
    pid_t pid = fork();
    if (pid < 0)
        return diag_set(err, what, 0, "cannot start %s: %s", argv[0], strerror(errno));
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return diag_set(err, what, 0, "%s failed (exit status %d)", argv[0],
                        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
