#ifndef KEYMGR_WRITER_LOCK_H
#define KEYMGR_WRITER_LOCK_H

// The writers' queue: an exclusive flock on a lock file beside the database, held across each write transaction, so
// that keymgr processes writing one store wait in the kernel for each other and the next one wakes as soon as the
// previous one lets go (SQLite's own busy handler sleeps with a growing back-off instead, and often sleeps on long
// after its lock came free). The kernel drops a flock when its holder exits or is killed: no stale lock.

/// Opens the lock file at `path` (created 0600 when missing; a symbolic link is refused) and takes an exclusive flock
/// on it, waiting at most `timeout_ms` milliseconds for the holder to let go. The wait is a blocking flock in a helper
/// thread; the caller gives up at the deadline, and a helper that gets the lock after that lets it go at once.
///
/// Returns the descriptor that holds the lock (>= 0; give it to `keymgr_writer_lock_release`), -ETIMEDOUT when the
/// lock stayed taken for `timeout_ms`, or another negated errno when the file cannot be opened or locked.
int keymgr_writer_lock_acquire(const char *path, int timeout_ms);

/// Lets the lock go and closes its descriptor.
void keymgr_writer_lock_release(int descriptor);

#endif
