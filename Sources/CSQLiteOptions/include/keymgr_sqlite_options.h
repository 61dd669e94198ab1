#ifndef KEYMGR_SQLITE_OPTIONS_H
#define KEYMGR_SQLITE_OPTIONS_H

#include <stddef.h>

// Connection options SQLite sets only through sqlite3_db_config, which is variadic and so cannot be called from
// Swift. The connection is passed as void * (GRDB's OpaquePointer) so that this header needs no SQLite header.

/// Asks SQLite not to checkpoint the WAL, nor delete it, when this connection is the database's last to close
/// (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE). Returns SQLite's result code, 0 (SQLITE_OK) on success.
int keymgr_sqlite_keep_wal_on_close(void *connection);

/// The rows one write transaction changes, with each changed or deleted row's values as they were before
/// (SQLite's pre-update hook). Storage checks those old values against their MAC before the change commits and
/// re-stamps the rows; it needs no crypto here, only the bytes.
///
/// The log is one byte buffer of records: op ('I', 'U', 'D'), u32 table-name length, the name, i64 old rowid,
/// i64 new rowid, u32 column count (0 for an insert), then per column one type byte (1 integer, 2 float, 3 text,
/// 4 blob, 5 null) followed by 8 bytes (integer, float) or a u32 length and the bytes (text, blob). Native byte order.
typedef struct keymgr_row_log keymgr_row_log;

/// Starts logging the changes of the connection's main database. Returns NULL when out of memory.
keymgr_row_log *keymgr_row_log_install(void *connection);

/// Stops logging (paused != 0) or resumes it: Storage's own MAC updates are not logged.
void keymgr_row_log_pause(keymgr_row_log *log, int paused);

/// The bytes logged so far; sets *failed to 1 when a change could not be logged (out of memory).
const unsigned char *keymgr_row_log_bytes(const keymgr_row_log *log, size_t *length, int *failed);

/// Removes the hook from the connection and frees the log.
void keymgr_row_log_remove(void *connection, keymgr_row_log *log);

#endif
