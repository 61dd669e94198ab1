#include "keymgr_sqlite_options.h"

#include <sqlite3.h>

int keymgr_sqlite_keep_wal_on_close(void *connection) {
    int applied = 0;
    int result = sqlite3_db_config((sqlite3 *)connection, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &applied);
    if (result != SQLITE_OK) return result;
    return applied == 1 ? SQLITE_OK : SQLITE_ERROR;
}

// The pre-update hook is compiled into the distribution's SQLite (SQLITE_ENABLE_PREUPDATE_HOOK); its declarations
// are behind that macro in sqlite3.h.
#ifndef SQLITE_ENABLE_PREUPDATE_HOOK
int sqlite3_preupdate_old(sqlite3 *, int, sqlite3_value **);
int sqlite3_preupdate_count(sqlite3 *);
void *sqlite3_preupdate_hook(sqlite3 *, void (*)(void *, sqlite3 *, int, char const *, char const *,
                                                 sqlite3_int64, sqlite3_int64), void *);
#endif

#include <stdlib.h>
#include <string.h>

struct keymgr_row_log {
    unsigned char *bytes;
    size_t length;
    size_t capacity;
    int paused;
    int failed;
};

static int row_log_append(keymgr_row_log *log, const void *data, size_t count) {
    if (log->failed) return 0;
    if (log->length + count > log->capacity) {
        size_t capacity = log->capacity ? log->capacity : 1024;
        while (capacity < log->length + count) capacity *= 2;
        unsigned char *grown = realloc(log->bytes, capacity);
        if (grown == NULL) {
            log->failed = 1;
            return 0;
        }
        log->bytes = grown;
        log->capacity = capacity;
    }
    if (count > 0) memcpy(log->bytes + log->length, data, count);
    log->length += count;
    return 1;
}

static void row_log_u32(keymgr_row_log *log, size_t value) {
    unsigned int narrow = (unsigned int)value;
    row_log_append(log, &narrow, sizeof narrow);
}

static void row_log_hook(void *context, sqlite3 *db, int op, char const *database, char const *table,
                         sqlite3_int64 oldRowid, sqlite3_int64 newRowid) {
    keymgr_row_log *log = context;
    if (log->paused || strcmp(database, "main") != 0) return;
    unsigned char code = op == SQLITE_INSERT ? 'I' : op == SQLITE_UPDATE ? 'U' : 'D';
    row_log_append(log, &code, 1);
    size_t nameLength = strlen(table);
    row_log_u32(log, nameLength);
    row_log_append(log, table, nameLength);
    row_log_append(log, &oldRowid, sizeof oldRowid);
    row_log_append(log, &newRowid, sizeof newRowid);
    int columns = op == SQLITE_INSERT ? 0 : sqlite3_preupdate_count(db);
    row_log_u32(log, (size_t)columns);
    for (int index = 0; index < columns; index++) {
        sqlite3_value *value = NULL;
        if (sqlite3_preupdate_old(db, index, &value) != SQLITE_OK || value == NULL) {
            log->failed = 1;
            return;
        }
        unsigned char type = (unsigned char)sqlite3_value_type(value);
        row_log_append(log, &type, 1);
        switch (type) {
        case SQLITE_INTEGER: {
            sqlite3_int64 integer = sqlite3_value_int64(value);
            row_log_append(log, &integer, sizeof integer);
            break;
        }
        case SQLITE_FLOAT: {
            double real = sqlite3_value_double(value);
            row_log_append(log, &real, sizeof real);
            break;
        }
        case SQLITE_TEXT:
        case SQLITE_BLOB: {
            const void *data = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(value) : sqlite3_value_blob(value);
            int count = sqlite3_value_bytes(value);
            row_log_u32(log, (size_t)count);
            row_log_append(log, data, (size_t)count);
            break;
        }
        default:
            break;
        }
    }
}

keymgr_row_log *keymgr_row_log_install(void *connection) {
    keymgr_row_log *log = calloc(1, sizeof *log);
    if (log == NULL) return NULL;
    sqlite3_preupdate_hook((sqlite3 *)connection, row_log_hook, log);
    return log;
}

void keymgr_row_log_pause(keymgr_row_log *log, int paused) { log->paused = paused; }

const unsigned char *keymgr_row_log_bytes(const keymgr_row_log *log, size_t *length, int *failed) {
    *length = log->length;
    *failed = log->failed;
    return log->bytes;
}

void keymgr_row_log_remove(void *connection, keymgr_row_log *log) {
    sqlite3_preupdate_hook((sqlite3 *)connection, NULL, NULL);
    free(log->bytes);
    free(log);
}
