#include "keymgr_writer_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

// One wait for the lock, shared by the caller and the helper thread that blocks in flock. Whoever finishes last
// frees it: the caller when the helper reported in time, the helper when the caller gave up (`abandoned`).
struct wait_state {
    pthread_mutex_t mutex;
    pthread_cond_t done;
    int descriptor;
    int finished;  // the helper's flock returned
    int error;     // its errno, 0 when it took the lock
    int abandoned; // the caller stopped waiting
};

static void wait_state_free(struct wait_state *state) {
    pthread_cond_destroy(&state->done);
    pthread_mutex_destroy(&state->mutex);
    free(state);
}

static void *wait_for_lock(void *argument) {
    struct wait_state *state = argument;
    int result;
    while ((result = flock(state->descriptor, LOCK_EX)) != 0 && errno == EINTR) {}
    int error = result == 0 ? 0 : errno;
    pthread_mutex_lock(&state->mutex);
    if (!state->abandoned) {
        state->finished = 1;
        state->error = error;
        pthread_cond_signal(&state->done);
        pthread_mutex_unlock(&state->mutex);
        return NULL;
    }
    pthread_mutex_unlock(&state->mutex);
    // Too late: the caller has reported busy. Let the lock go at once for the next writer.
    close(state->descriptor);
    wait_state_free(state);
    return NULL;
}

static int locked_or_error(int descriptor, int error) {
    if (error == 0) return descriptor;
    close(descriptor);
    return -error;
}

// Without a helper thread (none could be made): try every millisecond until the deadline.
static int poll_for_lock(int descriptor, int timeout_ms) {
    for (int waited = 0; waited < timeout_ms; waited++) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
        if (flock(descriptor, LOCK_EX | LOCK_NB) == 0) return descriptor;
        if (errno != EWOULDBLOCK && errno != EINTR) return locked_or_error(descriptor, errno);
    }
    return locked_or_error(descriptor, ETIMEDOUT);
}

int keymgr_writer_lock_acquire(const char *path, int timeout_ms) {
    int descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (descriptor < 0) return -errno;
    if (flock(descriptor, LOCK_EX | LOCK_NB) == 0) return descriptor;
    if (errno != EWOULDBLOCK && errno != EINTR) return locked_or_error(descriptor, errno);

    struct wait_state *state = calloc(1, sizeof *state);
    if (state == NULL) return poll_for_lock(descriptor, timeout_ms);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_mutex_init(&state->mutex, NULL);
    pthread_cond_init(&state->done, &attributes);
    pthread_condattr_destroy(&attributes);
    state->descriptor = descriptor;

    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }

    pthread_attr_t thread_attributes;
    pthread_attr_init(&thread_attributes);
    pthread_attr_setdetachstate(&thread_attributes, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&thread_attributes, 64 * 1024);
    pthread_t helper;
    int created = pthread_create(&helper, &thread_attributes, wait_for_lock, state);
    pthread_attr_destroy(&thread_attributes);
    if (created != 0) {
        wait_state_free(state);
        return poll_for_lock(descriptor, timeout_ms);
    }

    pthread_mutex_lock(&state->mutex);
    while (!state->finished) {
        if (pthread_cond_timedwait(&state->done, &state->mutex, &deadline) == ETIMEDOUT && !state->finished) {
            // The helper owns the descriptor from now on and closes it when its flock returns.
            state->abandoned = 1;
            pthread_mutex_unlock(&state->mutex);
            return -ETIMEDOUT;
        }
    }
    int error = state->error;
    pthread_mutex_unlock(&state->mutex);
    wait_state_free(state);
    return locked_or_error(descriptor, error);
}

void keymgr_writer_lock_release(int descriptor) {
    if (descriptor < 0) return;
    flock(descriptor, LOCK_UN);
    close(descriptor);
}
