import CSQLiteOptions
import Foundation
import GRDB
import Synchronization

/// The SHA-256 function the audit chain uses, supplied by the crypto layer (Storage does no crypto itself).
package typealias AuditDigest = @Sendable ([UInt8]) -> [UInt8]

/// How a process means to use the store it opens.
package enum StoreAccess: Sendable {
    /// Reads and writes: one WAL `DatabasePool`, durable (`synchronous=FULL`), opened at once.
    case readWrite
    /// Reads, and a write only if one turns out to be needed (a schema migration, stamping an old store's MACs).
    ///
    /// Reads go through one read-only connection (`SQLITE_OPEN_READONLY`): opening and closing it writes nothing to
    /// the database or its WAL and syncs nothing. `DatabasePool` would write, to make sure a `-wal` file exists,
    /// whenever the WAL is missing or empty (after a revocation's truncating checkpoint, or a copy of the database).
    case readOnly
}

/// keymgr's SQLite store: one WAL `DatabasePool` per file for the life of the process, opened when the first write
/// needs it if the store was opened `.readOnly`.
///
/// Every write goes through `write(_:)`, one immediate transaction; the audit log is appended inside it. Writers of
/// one store queue for each other on `keymgr.db-lock` (see `queuedForWriting`) rather than on SQLite's lock.
package final class Store: Sendable {
    /// Where the store lives.
    package let home: StoreHome
    /// The connection reads go through: the writer pool, or a read-only connection.
    private let reader: any DatabaseReader
    /// The writer pool, once opened.
    private let writerPool: Mutex<DatabasePool?>
    let digest: AuditDigest

    /// How long a writer waits for the writers' queue, and a statement for another process's SQLite lock, before
    /// failing with `busy`.
    static let busyTimeout: TimeInterval = 5

    /// SQLite's busy handler: try again every millisecond, for `busyTimeout` in all. SQLite's own (`busy_timeout`)
    /// sleeps 1, 2, 5, 10, … 100 ms between tries and so often sleeps on long after the lock came free. Writers of
    /// keymgr queue on `keymgr.db-lock` and seldom get here; what remains is a lock taken outside keymgr (a
    /// `sqlite3` shell) and a checkpoint waiting for readers.
    private static let busyTries = Int(busyTimeout * 1000)

    private init(home: StoreHome, reader: any DatabaseReader, writer: DatabasePool?, digest: @escaping AuditDigest) {
        self.home = home
        self.reader = reader
        self.writerPool = Mutex(writer)
        self.digest = digest
    }

    /// Set by a process that exits as soon as its one command is done (the agent's worker): a store released then
    /// hands its connections to `kept` instead of closing them, and the process's answer does not wait for SQLite's
    /// and GRDB's teardown. Nothing durable depends on the close: every write was committed (and synced) before it,
    /// and the WAL outlives every close anyway (`keymgr_sqlite_keep_wal_on_close`); the exit closes the files.
    package static let keepsConnectionsUntilExit = Atomic<Bool>(false)
    private static let kept = Mutex<[any DatabaseReader]>([])

    deinit {
        guard Store.keepsConnectionsUntilExit.load(ordering: .relaxed) else { return }
        let connections: [any DatabaseReader] = [reader] + (writerPool.withLock { $0 }.map { [$0] } ?? [])
        Store.kept.withLock { $0.append(contentsOf: connections) }
    }

    /// Opens the store in `home`, creating it when `create` is true, and brings its schema up to date.
    ///
    /// With `access: .readOnly` (never with `create`), reads write nothing; the first write, if any, opens the
    /// writer pool then.
    ///
    /// - Throws: `StorageError` `.notInitialized` when there is no store and `create` is false, `.insecureHome`
    ///   when another OS user could write the home or the database, `.newerSchema` when a newer keymgr wrote it.
    package static func open(home: StoreHome, create: Bool = false, access: StoreAccess = .readWrite,
                            digest: @escaping AuditDigest) throws -> Store {
        try home.prepare(create: create)
        let path = home.databaseURL.path
        if !home.hasDatabase {
            guard create else {
                throw StorageError(.notInitialized, "no keymgr store at \(home.url.path): run `keymgr init` first (or pass --home)")
            }
            // Created 0600 before SQLite sees it: SQLite gives the -wal and -shm files the database's mode.
            let descriptor = Foundation.open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            guard descriptor >= 0 || errno == EEXIST else {
                throw StorageError(.failure, "cannot create \(path): \(String(cString: strerror(errno)))")
            }
            if descriptor >= 0 { close(descriptor) }
        }
        try checkDatabaseFiles(home: home)

        let store: Store
        if access == .readOnly && !create {
            var configuration = connectionConfiguration
            configuration.readonly = true
            let queue: DatabaseQueue
            do {
                queue = try DatabaseQueue(path: path, configuration: configuration)
            } catch {
                throw Store.mapped(error, doing: "open \(path)")
            }
            store = Store(home: home, reader: queue, writer: nil, digest: digest)
            // Only a schema to migrate (or a file that is no keymgr store) needs the writer now.
            if try store.schemaVersion() != EmbeddedMigration.latestVersion { try store.migrate() }
        } else {
            let pool = try openWriterPool(path: path)
            store = Store(home: home, reader: pool, writer: pool, digest: digest)
            try store.migrate()
        }
        try checkDatabaseFiles(home: home)
        return store
    }

    /// For tests that count the statements a request runs: called with the SQL of every statement that starts on
    /// a connection opened while it is set (triggers' statements included). Unset, connections install no tracing.
    package static let statementObserver = Mutex<(@Sendable (String) -> Void)?>(nil)

    private static var connectionConfiguration: Configuration {
        var configuration = Configuration()
        configuration.busyMode = .callback { tries in
            guard tries < busyTries else { return false }
            usleep(1000)
            return true
        }
        configuration.foreignKeysEnabled = true
        configuration.prepareDatabase { db in
            if let observe = Store.statementObserver.withLock({ $0 }) {
                db.trace(options: .statement) { event in
                    if case .statement(let statement) = event { observe(statement.sql) }
                }
            }
            try db.execute(sql: "PRAGMA secure_delete = ON")
            // The WAL outlives the process: no checkpoint on close, and the next process finds a `-wal` file so GRDB
            // makes no write of its own on open. A command that writes then syncs once per commit instead of five
            // times; SQLite's auto-checkpoint still folds the WAL back every 1000 pages, and revocations truncate it
            // at once (`checkpointDestroyedData`).
            let result = keymgr_sqlite_keep_wal_on_close(UnsafeMutableRawPointer(db.sqliteConnection))
            guard result == ResultCode.SQLITE_OK.rawValue else {
                throw DatabaseError(resultCode: ResultCode(rawValue: result), message: "could not keep the WAL on close")
            }
        }
        return configuration
    }

    private static func openWriterPool(path: String) throws -> DatabasePool {
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: connectionConfiguration)
        } catch {
            throw Store.mapped(error, doing: "open \(path)")
        }
        try makeDurable(pool, path: path)
        return pool
    }

    /// The writer pool, opened now if this store was opened read-only and nothing wrote yet.
    var pool: DatabasePool {
        get throws {
            try writerPool.withLock { pool in
                if let pool { return pool }
                let opened = try Self.openWriterPool(path: home.databaseURL.path)
                pool = opened
                return opened
            }
        }
    }

    /// DatabasePool sets `synchronous=NORMAL` on open; a revocation must survive power loss, so FULL it is.
    private static func makeDurable(_ pool: DatabasePool, path: String) throws {
        do {
            try pool.barrierWriteWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                let level = try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
                guard level == 2 else {
                    throw StorageError(.failure, "SQLite kept synchronous=\(level) instead of FULL on \(path)")
                }
            }
        } catch {
            throw Store.mapped(error, doing: "set up \(path)")
        }
    }

    static func checkDatabaseFiles(home: StoreHome) throws {
        for suffix in ["", "-wal", "-shm", "-lock"] {
            let path = home.databaseURL.path + suffix
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw StorageError(.insecureHome, "\(path) is not a regular file: move it away and try again")
            }
            try StoreHome.checkNotWritableByOthers(path: path, info: info, kind: "database file", fix: "chmod 600")
            if info.st_mode & 0o077 != 0, info.st_uid == geteuid() {
                chmod(path, 0o600)
            }
        }
    }

    // MARK: Schema

    /// The schema version of the open database.
    package func schemaVersion() throws -> Int {
        try guarded("read the schema version") { try reader.read { try Int.fetchOne($0, sql: "PRAGMA user_version") ?? 0 } }
    }

    private func migrate() throws {
        let latest = EmbeddedMigration.latestVersion
        let current = try schemaVersion()
        if current > latest {
            throw StorageError(.newerSchema,
                "\(home.databaseURL.path) has schema version \(current), written by a newer keymgr; this keymgr knows versions up to \(latest): upgrade keymgr")
        }
        guard current < latest else { return }
        if current == 0 {
            // A SQLite file of another program: never write keymgr's tables into it.
            let tables = try guarded("read \(home.databaseURL.path)") {
                try reader.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM sqlite_master") ?? 0 }
            }
            guard tables == 0 else {
                throw StorageError(.notAStore, "\(home.databaseURL.path) is a SQLite file of another program, not a keymgr "
                    + "database: point --home at a keymgr store")
            }
        }
        for migration in EmbeddedMigration.all where migration.version > current {
            try guarded("apply migration \(migration.version) (\(migration.name))") {
                try pool.writeWithoutTransaction { db in try queuedForWriting {
                    // SQLite's way to rebuild a table others reference (its "12 steps"): foreign keys off while the
                    // migration runs (the pragma does nothing inside a transaction), checked before it commits.
                    try db.execute(sql: "PRAGMA foreign_keys = OFF")
                    defer { try? db.execute(sql: "PRAGMA foreign_keys = ON") }
                    try db.inTransaction(.immediate) {
                        // Another process may have migrated while we waited for the lock.
                        let applied = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
                        guard applied < migration.version else { return .commit }
                        try db.execute(sql: migration.sql)
                        if let broken = try String.fetchOne(db, sql: "SELECT \"table\" FROM pragma_foreign_key_check LIMIT 1") {
                            throw StorageError(.failure, "migration \(migration.version) would leave rows of \(broken) without "
                                + "the row they reference: nothing was changed")
                        }
                        try db.execute(sql: "PRAGMA user_version = \(migration.version)")
                        return .commit
                    }
                } }
            }
        }
    }

    // MARK: Access

    /// Runs `body` in a read-only snapshot of the store; with `rows`, every record it reads is checked against its
    /// row MAC first.
    package func read<T>(rows: RowIntegrityKeys? = nil, _ body: (StoreReader) throws -> T) throws -> T {
        try guarded("read the store") {
            try reader.read { db in try body(StoreReader(db: db, digest: digest, rowKeys: rows)) }
        }
    }

    /// Runs `body` in one immediate write transaction: everything it does commits together or not at all.
    @discardableResult
    package func write<T>(_ body: (StoreWriter) throws -> T) throws -> T {
        try write(audit: nil, body)
    }

    /// Runs `body` in one immediate write transaction whose audit entries are chained and anchored with `keys`.
    ///
    /// With `rows`, every record `body` reads is checked against its row MAC, and before the transaction commits
    /// every row it changed or deleted is checked as it was, and every row it touched is stamped, with its table's
    /// committed set (see `RowIntegrity`). Without (`stampAllRows` callers), rows are neither checked nor stamped.
    @discardableResult
    package func write<T>(audit keys: AuditKeys?, rows: RowIntegrityKeys? = nil, _ body: (StoreWriter) throws -> T) throws -> T {
        try guarded("write the store") {
            try pool.writeWithoutTransaction { db in try queuedForWriting {
                var result: T?
                try db.inTransaction(.immediate) {
                    let log = try rows.map { _ in try RowChangeLog(db) }
                    defer { log?.remove() }
                    let writer = StoreWriter(db: db, digest: digest, auditKeys: keys, rowKeys: rows)
                    writer.changes = log
                    result = try body(writer)
                    if let log, let rows { try writer.sealChanges(log, keys: rows) }
                    return .commit
                }
                guard let result else { throw StorageError(.failure, "a write transaction produced no result") }
                return result
            } }
        }
    }

    /// Runs `body` (one write transaction, or a checkpoint) holding the writers' queue: an exclusive `flock` on
    /// `keymgr.db-lock` in the home. keymgr processes writing this store wait for it in the kernel, which wakes the
    /// next one as soon as the holder lets go, so a writer's BEGIN IMMEDIATE finds SQLite's lock free instead of
    /// polling for it with SQLite's back-off. Readers never take it (WAL). A killed holder's lock goes with it.
    ///
    /// - Throws: `busy` when another process held the queue for `busyTimeout`.
    private func queuedForWriting<T>(_ body: () throws -> T) throws -> T {
        let path = home.writerLockURL.path
        let descriptor = keymgr_writer_lock_acquire(path, Int32(Self.busyTimeout * 1000))
        guard descriptor >= 0 else {
            if -descriptor == ETIMEDOUT {
                throw StorageError(.busy, "the store is busy (another keymgr process has been writing it for over "
                    + "\(Int(Self.busyTimeout)) s, holding \(path)): try again in a moment")
            }
            throw StorageError(.failure, "cannot lock \(path) to write the store: \(String(cString: strerror(-descriptor))) "
                + "— check the home's owner and permissions")
        }
        defer { keymgr_writer_lock_release(descriptor) }
        if geteuid() == 0 { ownLikeTheDatabase(descriptor) }
        return try body()
    }

    /// Root writing the agent's store (`AgentAccount`) gives the writers' queue it may have created the database's
    /// owner, as SQLite does for the -wal and -shm files it creates as root, so the agent can still open it.
    private func ownLikeTheDatabase(_ descriptor: Int32) {
        var lock = stat(), database = stat()
        guard fstat(descriptor, &lock) == 0, stat(home.databaseURL.path, &database) == 0,
              lock.st_uid != database.st_uid || lock.st_gid != database.st_gid else { return }
        _ = fchown(descriptor, database.st_uid, database.st_gid)
    }

    /// Folds the WAL into the database and truncates it, if no reader holds it, so that rows a transaction
    /// destroyed (a revoked key's sealed blob) do not linger in `-wal`; `secure_delete` zeroes them in the file.
    /// Best effort: a reader elsewhere may keep the WAL until its own checkpoint.
    package func checkpointDestroyedData() {
        guard let pool = writerPool.withLock({ $0 }) else { return }  // nothing written, nothing destroyed
        _ = try? pool.writeWithoutTransaction { db in try queuedForWriting { try db.checkpoint(.truncate) } }
    }

    private func guarded<T>(_ doing: String, _ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw Store.mapped(error, doing: doing) }
    }

    /// Maps GRDB's errors onto StorageError; other errors (the caller's own) pass through unchanged.
    static func mapped(_ error: Error, doing: String) -> Error {
        if error is RowDecodingError || error is DecodingError {
            // Only a hand edit puts a value in a row that keymgr never writes (an unknown auth type, say).
            return StorageError(.tampered, "could not \(doing): a row holds a value keymgr never writes, so the database "
                + "was edited outside keymgr; restore it from a backup")
        }
        guard let error = error as? DatabaseError else { return error }
        switch error.resultCode {
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return StorageError(.busy, "the store is busy (another keymgr holds a lock): try again in a moment")
        case .SQLITE_CONSTRAINT:
            return StorageError(.conflict, "could not \(doing): \(error.message ?? "constraint failed")")
        case .SQLITE_NOTADB:
            return StorageError(.notAStore, "could not \(doing): the file is not a keymgr database: point --home at a keymgr store")
        case .SQLITE_CORRUPT:
            return StorageError(.failure, "could not \(doing): the database file is damaged or not a keymgr store")
        case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN:
            return StorageError(.failure, "could not \(doing): \(error.message ?? "permission denied") — check the home's owner and permissions")
        default:
            return StorageError(.failure, "could not \(doing): \(error.message ?? "\(error.resultCode)")")
        }
    }
}
