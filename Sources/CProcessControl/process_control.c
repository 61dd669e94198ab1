#define _GNU_SOURCE
#include "process_control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int keymgr_set_process_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}

int keymgr_become_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL);
}

pid_t keymgr_spawn(const char *path, char *const argv[], char *const envp[]) {
    if (path == NULL || argv == NULL || envp == NULL) {
        errno = EINVAL;
        return -1;
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return -1;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        // Async-signal-safe calls only: the parent may have other threads.
        if (prctl(PR_SET_PDEATHSIG, (unsigned long)SIGKILL, 0UL, 0UL, 0UL) != 0) _exit(127);
        if (getppid() != parent) _exit(127); // the parent died before the line above
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(127);
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
        {
            long last = sysconf(_SC_OPEN_MAX);
            for (long fd = 3; fd < (last > 0 && last < 65536 ? last : 65536); fd++) close((int)fd);
        }
        execve(path, argv, envp);
        _exit(127);
    }
    int error = errno;
    close(null);
    errno = error;
    return child;
}

static int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

int keymgr_wait_child(pid_t pid, int64_t timeout_ms, int *status) {
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int pidfd = -1;
#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0u);
#endif
    for (;;) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid) {
            if (pidfd >= 0) close(pidfd);
            return 1;
        }
        if (got < 0 && errno != EINTR) {
            int error = errno;
            if (pidfd >= 0) close(pidfd);
            errno = error;
            return -1;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            if (pidfd >= 0) close(pidfd);
            return 0;
        }
        if (pidfd >= 0) {
            struct pollfd ready = { .fd = pidfd, .events = POLLIN, .revents = 0 };
            (void)poll(&ready, 1, left > 1000 ? 1000 : (int)left);
        } else { // a kernel without pidfd_open (before 5.3): look again every 10 ms
            struct timespec pause = { .tv_sec = 0, .tv_nsec = 10 * 1000 * 1000 };
            nanosleep(&pause, NULL);
        }
    }
}
