#ifndef KEYMGR_SQLITE_OPTIONS_H
#define KEYMGR_SQLITE_OPTIONS_H

// Connection options SQLite sets only through sqlite3_db_config, which is variadic and so cannot be called from
// Swift. The connection is passed as void * (GRDB's OpaquePointer) so that this header needs no SQLite header.

/// Asks SQLite not to checkpoint the WAL, nor delete it, when this connection is the database's last to close
/// (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE). Returns SQLite's result code, 0 (SQLITE_OK) on success.
int keymgr_sqlite_keep_wal_on_close(void *connection);

#endif
