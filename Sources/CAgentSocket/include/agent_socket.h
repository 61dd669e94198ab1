#ifndef KEYMGR_AGENT_SOCKET_H
#define KEYMGR_AGENT_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// The Unix-socket calls of keymgr's agent protocol that Swift cannot make comfortably: descriptors passed with
// SCM_RIGHTS (CMSG_* are macros), the peer's credentials and groups (SO_PEERCRED, SO_PEERGROUPS) and sockaddr_un.
// Used by the lean client (keymgr) and by the agent (keymgr-core agent). Every function returns -1 with errno set
// on failure, and retries EINTR itself.

/// The most descriptors one message carries: 8 numbered descriptors, the client's terminal and 4 named files.
#define AGENT_SOCKET_MAX_FDS 13

/// Sends all `length` bytes of `bytes` on the stream socket `socket`, with `count` descriptors (at most
/// AGENT_SOCKET_MAX_FDS) attached with SCM_RIGHTS to the first sendmsg, in the order given. Never raises SIGPIPE
/// (a peer that hung up is EPIPE). Returns 0 when every byte was sent.
int agent_socket_send(int socket, const void *bytes, size_t length, const int *fds, size_t count);

/// Receives up to `capacity` bytes into `buffer` with one recvmsg, and the descriptors that came with them (at most
/// `max_fds`, itself at most AGENT_SOCKET_MAX_FDS) into `fds`, setting `*received_fds` to their number. Received
/// descriptors are close-on-exec (MSG_CMSG_CLOEXEC). Returns the number of bytes received (0: the peer closed).
/// More descriptors than `max_fds`, or control data that did not fit (MSG_CTRUNC), is an error (EMSGSIZE); on every
/// error, any descriptor that did arrive is closed and `*received_fds` is 0.
ssize_t agent_socket_receive(int socket, void *buffer, size_t capacity, int *fds, size_t max_fds,
                             size_t *received_fds);

/// The peer's credentials as the kernel recorded them at connect() (SO_PEERCRED). Returns 0.
int agent_socket_peer_credentials(int socket, uint32_t *uid, uint32_t *gid, int32_t *pid);

/// The peer's supplementary groups as the kernel recorded them at connect() (SO_PEERGROUPS, Linux 4.13), in a
/// buffer this function allocates (grown while the kernel answers ERANGE) and the caller releases with free().
/// Sets `*groups` (NULL when there are none) and `*count`. Returns 0.
int agent_socket_peer_groups(int socket, uint32_t **groups, size_t *count);

/// A new stream socket (close-on-exec) connected to the Unix socket at `path`. Returns the descriptor; ENAMETOOLONG
/// when the path does not fit in sockaddr_un.
int agent_socket_connect(const char *path);

/// A new stream socket (close-on-exec) bound to `path` and listening with `backlog`. The caller removes a stale
/// socket file and sets the mode it wants. Returns the descriptor; ENAMETOOLONG as for agent_socket_connect.
int agent_socket_listen(const char *path, int backlog);

/// Closes every descriptor numbered `first` to `last` (both included; `last` may be UINT32_MAX) with one
/// close_range(2) (Linux 5.9), or one by one up to the highest open number where the kernel lacks it. Returns 0.
int agent_close_range(uint32_t first, uint32_t last);

/// Sends `message` (e.g. "READY=1") as one datagram to systemd's notification socket `path` ($NOTIFY_SOCKET: a
/// path, or an abstract name written with a leading @), as sd_notify(3) does, without libsystemd. Returns 0.
int agent_notify(const char *path, const char *message);

/// Whether a connection waits to be accepted on the listening socket `listener` (a poll with no wait): 1 or 0.
int agent_socket_has_pending_connection(int listener);

#endif
