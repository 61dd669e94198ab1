#define _GNU_SOURCE
#include "agent_socket.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

// Control space for the most descriptors a message may carry, aligned as cmsghdr requires.
union agent_control {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int) * AGENT_SOCKET_MAX_FDS)];
};

int agent_socket_send(int socket, const void *bytes, size_t length, const int *fds, size_t count) {
    if (count > AGENT_SOCKET_MAX_FDS || (count > 0 && fds == NULL) || (length > 0 && bytes == NULL)) {
        errno = EINVAL;
        return -1;
    }
    if (count > 0 && length == 0) {
        errno = EINVAL; // descriptors travel with at least one byte of data
        return -1;
    }
    const char *next = bytes;
    size_t left = length;
    int first = 1;
    while (left > 0 || first) {
        ssize_t sent;
        if (first && count > 0) {
            union agent_control control;
            memset(&control, 0, sizeof control);
            struct iovec vector = { .iov_base = (void *)next, .iov_len = left };
            struct msghdr message = {
                .msg_iov = &vector,
                .msg_iovlen = 1,
                .msg_control = control.space,
                .msg_controllen = CMSG_SPACE(sizeof(int) * count),
            };
            struct cmsghdr *header = CMSG_FIRSTHDR(&message);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int) * count);
            memcpy(CMSG_DATA(header), fds, sizeof(int) * count);
            sent = sendmsg(socket, &message, MSG_NOSIGNAL);
        } else if (left > 0) {
            sent = send(socket, next, left, MSG_NOSIGNAL);
        } else {
            sent = 0;
        }
        if (sent < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        first = 0;
        next += sent;
        left -= (size_t)sent;
    }
    return 0;
}

// Closes every descriptor carried by SCM_RIGHTS messages in `message`.
static void close_received(struct msghdr *message) {
    for (struct cmsghdr *header = CMSG_FIRSTHDR(message); header != NULL; header = CMSG_NXTHDR(message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
            close(fd);
        }
    }
}

ssize_t agent_socket_receive(int socket, void *buffer, size_t capacity, int *fds, size_t max_fds,
                             size_t *received_fds) {
    if (received_fds != NULL) *received_fds = 0;
    if (max_fds > AGENT_SOCKET_MAX_FDS || (max_fds > 0 && fds == NULL) || received_fds == NULL ||
        (capacity > 0 && buffer == NULL)) {
        errno = EINVAL;
        return -1;
    }
    union agent_control control;
    memset(&control, 0, sizeof control);
    struct iovec vector = { .iov_base = buffer, .iov_len = capacity };
    struct msghdr message = {
        .msg_iov = &vector,
        .msg_iovlen = 1,
        // Room for max_fds descriptors only: the kernel sets MSG_CTRUNC (and closes the rest) when more arrive.
        .msg_control = max_fds > 0 ? control.space : NULL,
        .msg_controllen = max_fds > 0 ? CMSG_SPACE(sizeof(int) * max_fds) : 0,
    };
    ssize_t got;
    do {
        got = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got < 0) return -1;
    if (max_fds == 0) {
        if (message.msg_flags & MSG_CTRUNC) {
            errno = EMSGSIZE;
            return -1;
        }
        return got;
    }
    size_t n = 0;
    int bad = (message.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
            bad = 1; // nothing else was asked for (no SO_PASSCRED)
            continue;
        }
        size_t here = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        if (n + here > max_fds) {
            bad = 1;
            continue;
        }
        memcpy(fds + n, CMSG_DATA(header), here * sizeof(int));
        n += here;
    }
    if (bad) {
        close_received(&message);
        errno = EMSGSIZE;
        return -1;
    }
    *received_fds = n;
    return got;
}

int agent_socket_peer_credentials(int socket, uint32_t *uid, uint32_t *gid, int32_t *pid) {
    struct ucred credentials;
    socklen_t size = sizeof credentials;
    if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) return -1;
    if (size != sizeof credentials) {
        errno = EPROTO;
        return -1;
    }
    if (uid != NULL) *uid = (uint32_t)credentials.uid;
    if (gid != NULL) *gid = (uint32_t)credentials.gid;
    if (pid != NULL) *pid = (int32_t)credentials.pid;
    return 0;
}

int agent_socket_peer_groups(int socket, uint32_t **groups, size_t *count) {
    if (groups == NULL || count == NULL) {
        errno = EINVAL;
        return -1;
    }
    *groups = NULL;
    *count = 0;
    size_t capacity = 64;
    for (;;) {
        gid_t *buffer = malloc(capacity * sizeof(gid_t));
        if (buffer == NULL) {
            errno = ENOMEM;
            return -1;
        }
        socklen_t size = (socklen_t)(capacity * sizeof(gid_t));
        if (getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, buffer, &size) == 0) {
            size_t n = size / sizeof(gid_t);
            if (n == 0) {
                free(buffer);
                return 0;
            }
            _Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
            *groups = (uint32_t *)buffer;
            *count = n;
            return 0;
        }
        int error = errno;
        free(buffer);
        if (error != ERANGE) {
            errno = error;
            return -1;
        }
        // The kernel wrote the size it needs into `size`; grow at least to it (and at least double).
        size_t needed = size / sizeof(gid_t);
        size_t grown = capacity * 2;
        capacity = needed > grown ? needed : grown;
        if (capacity > 1u << 20) { // NGROUPS_MAX is 65536
            errno = ERANGE;
            return -1;
        }
    }
}

// Fills `address` for `path`; -1 with ENAMETOOLONG when it does not fit (with its terminating NUL).
static int unix_address(const char *path, struct sockaddr_un *address) {
    if (path == NULL || path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    size_t length = strlen(path);
    if (length >= sizeof address->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(address->sun_path, path, length + 1);
    return 0;
}

int agent_socket_connect(const char *path) {
    struct sockaddr_un address;
    if (unix_address(path, &address) != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int result;
    do { // an interrupted AF_UNIX connect leaves the socket unconnected, so it may simply be retried
        result = connect(fd, (struct sockaddr *)&address, sizeof address);
    } while (result != 0 && errno == EINTR);
    if (result != 0) {
        int error = errno;
        close(fd);
        errno = error;
        return -1;
    }
    return fd;
}

int agent_socket_listen(const char *path, int backlog) {
    struct sockaddr_un address;
    if (unix_address(path, &address) != 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, backlog) != 0) {
        int error = errno;
        close(fd);
        errno = error;
        return -1;
    }
    return fd;
}

int agent_close_range(uint32_t first, uint32_t last) {
    if (first > last) return 0;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned int)first, (unsigned int)last, 0u) == 0) return 0;
    if (errno != ENOSYS) return -1;
#endif
    struct rlimit limit;
    uint64_t end = last;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur > 0 &&
        limit.rlim_cur - 1 < end) {
        end = limit.rlim_cur - 1;
    }
    for (uint64_t fd = first; fd <= end; fd++) close((int)fd);
    return 0;
}

int agent_notify(const char *path, const char *message) {
    if (path == NULL || message == NULL || (path[0] != '/' && path[0] != '@')) {
        errno = EINVAL;
        return -1;
    }
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t length = strlen(path);
    if (length >= sizeof address.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(address.sun_path, path, length);
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length);
    if (path[0] == '@') {
        address.sun_path[0] = '\0'; // an abstract socket: the name is the bytes after the @, with no terminator
    } else {
        size += 1;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    ssize_t sent;
    do {
        sent = sendto(fd, message, strlen(message), MSG_NOSIGNAL, (struct sockaddr *)&address, size);
    } while (sent < 0 && errno == EINTR);
    int error = errno;
    close(fd);
    if (sent < 0) {
        errno = error;
        return -1;
    }
    return 0;
}

int agent_socket_has_pending_connection(int listener) {
    struct pollfd entry = {.fd = listener, .events = POLLIN, .revents = 0};
    int ready;
    do {
        ready = poll(&entry, 1, 0);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) return -1;
    return ready > 0 && (entry.revents & POLLIN) ? 1 : 0;
}
