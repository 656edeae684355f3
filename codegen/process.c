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

int run_capture_status(char *const argv[], int with_stderr, char **out)
{
    int fds[2];
    *out = NULL;
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        if (with_stderr)
            dup2(fds[1], STDERR_FILENO);
        close(fds[0]), close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    for (ssize_t got = 1; text && got != 0;) {
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
        else if (got < 0 && errno != EINTR)
            break;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    if (text)
        text[len] = '\0';
    *out = text;
    if (status == -1)
        return -1;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int run_capture(char *const argv[], char **out, struct diag *err, const char *what)
{
    int status = run_capture_status(argv, 0, out);
    if (status == 0 && *out)
        return 0;
    int no_memory = status == 0;
    free(*out);
    *out = NULL;
    if (no_memory)
        return diag_set(err, what, 0, "out of memory reading %s's output", argv[0]);
    return diag_set(err, what, 0, "%s failed (exit status %d)", argv[0], status);
}
