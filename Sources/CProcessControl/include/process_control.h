#ifndef KEYMGR_PROCESS_CONTROL_H
#define KEYMGR_PROCESS_CONTROL_H

#include <stdint.h>
#include <sys/types.h>

// Process calls Swift cannot make comfortably: prctl (variadic), and a child that must do something between fork
// and exec (PR_SET_PDEATHSIG). Used by keymgr-core (the verifier commands, the agent). Linux; libc only. Every
// function returns -1 with errno set on failure.

/// Sets the calling thread's name as `ps`, `top` and `/proc/PID/comm` show it (PR_SET_NAME; the first 15 bytes).
/// Unlike a write to /proc/self/comm, this works in a process that is not dumpable. Returns 0.
int keymgr_set_process_name(const char *name);

/// Makes this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER): a process orphaned below it is
/// re-parented to it, not to init, so it can still be seen, killed and reaped. Returns 0.
int keymgr_become_subreaper(void);

/// Starts `path` with `argv` and `envp` in the caller's process group, stdin, stdout and stderr on /dev/null and
/// no other descriptor open, and PR_SET_PDEATHSIG SIGKILL: it is killed when the calling thread ends (the process
/// that started it dies, however). Returns the child's pid; -1 when it could not be forked. A program that cannot
/// be executed exits 127.
pid_t keymgr_spawn(const char *path, char *const argv[], char *const envp[]);

/// Waits up to `timeout_ms` milliseconds for the child `pid` to end, and collects it. Returns 1 with its wait
/// status in `*status` when it ended, 0 when it is still running at the deadline.
int keymgr_wait_child(pid_t pid, int64_t timeout_ms, int *status);

#endif
