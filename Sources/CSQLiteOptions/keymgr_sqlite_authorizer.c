// GRDB registers one authorizer on every connection (sqlite3_set_authorizer) and is called back by SQLite for every
// action of every statement it compiles, SQLITE_READ once per column a statement reads (every column of a
// `SELECT *`, of each table a trigger or a foreign key touches). For SQLITE_READ it only records the table and
// column in the statement's "selected region", which only GRDB's observation features (ValueObservation,
// DatabaseRegionObservation) read, and it always allows the read. keymgr observes nothing, and its process per
// request compiles every statement anew: the region's bookkeeping (two Swift strings, a set and a union per
// column) was about a fifth of the CPU of a `sign` in the agent's worker (docs/agent.md, "Speed").
//
// So this definition, which the executable's own calls bind to in place of libsqlite3's, registers GRDB's callback
// behind a filter that answers SQLITE_READ itself (SQLITE_OK, as GRDB does) and passes every other action on to
// GRDB unchanged: what GRDB learns from them (transactions and savepoints, schema changes for its schema cache,
// deletions, PRAGMA query_only) stays as it was. Statements' `databaseRegion` is thus empty.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>

typedef int (*keymgr_authorizer_callback)(void *, int, const char *, const char *, const char *, const char *);
typedef int (*keymgr_set_authorizer_function)(sqlite3 *, keymgr_authorizer_callback, void *);

struct keymgr_forwarded_authorizer {
    keymgr_authorizer_callback callback;
    void *context;
};

static int keymgr_authorizer_without_reads(void *pointer, int action, const char *first, const char *second,
                                           const char *database, const char *trigger) {
    if (action == SQLITE_READ) return SQLITE_OK;
    const struct keymgr_forwarded_authorizer *forwarded = pointer;
    return forwarded->callback(forwarded->context, action, first, second, database, trigger);
}

static keymgr_set_authorizer_function keymgr_library_set_authorizer;
static pthread_once_t keymgr_library_lookup = PTHREAD_ONCE_INIT;

static void keymgr_find_library_set_authorizer(void) {
    keymgr_library_set_authorizer = (keymgr_set_authorizer_function)dlsym(RTLD_NEXT, "sqlite3_set_authorizer");
}

int sqlite3_set_authorizer(sqlite3 *connection, keymgr_authorizer_callback callback, void *context) {
    // Looked up once, whichever thread opens the first connection.
    pthread_once(&keymgr_library_lookup, keymgr_find_library_set_authorizer);
    keymgr_set_authorizer_function library = keymgr_library_set_authorizer;
    if (library == NULL) return SQLITE_ERROR;
    if (callback == NULL) return library(connection, NULL, context);
    // One per connection (GRDB registers once, when it opens the connection), kept for the process's life: SQLite
    // says nothing when a connection closes, and a few connections' 16 bytes are not worth a hook.
    struct keymgr_forwarded_authorizer *forwarded = malloc(sizeof *forwarded);
    if (forwarded == NULL) return SQLITE_NOMEM;
    forwarded->callback = callback;
    forwarded->context = context;
    return library(connection, keymgr_authorizer_without_reads, forwarded);
}
