/* process.c: see process.h. */
#include "process.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

int run_capture(char *const argv[], char **out, struct diag *err, const char *what)
{
    int fds[2];
    *out = NULL;
    if (pipe(fds) != 0)
        return diag_set(err, what, 0, "cannot start %s: %s", argv[0], strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return diag_set(err, what, 0, "cannot start %s: %s", argv[0], strerror(errno));
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]), close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    for (ssize_t got = 1; text && got > 0;) {
        if (len + 1024 > cap) {
            char *bigger = realloc(text, cap *= 2);
            if (!bigger) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
        }
        got = read(fds[0], text + len, cap - len - 1);
        if (got > 0)
            len += (size_t)got;
        else if (got < 0 && errno == EINTR)
            got = 1;
    }
    close(fds[0]);
    int status;
    int waited = waitpid(pid, &status, 0) >= 0;
    if (!text)
        return diag_set(err, what, 0, "out of memory reading %s's output", argv[0]);
    text[len] = '\0';
    if (!waited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        free(text);
        return diag_set(err, what, 0, "%s failed (exit status %d)", argv[0],
                        waited && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    *out = text;
    return 0;
}
