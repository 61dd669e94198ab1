#include "keymgr_sqlite_options.h"

#include <sqlite3.h>

int keymgr_sqlite_keep_wal_on_close(void *connection) {
    int applied = 0;
    int result = sqlite3_db_config((sqlite3 *)connection, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &applied);
    if (result != SQLITE_OK) return result;
    return applied == 1 ? SQLITE_OK : SQLITE_ERROR;
}
