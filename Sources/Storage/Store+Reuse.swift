import Foundation
import GRDB

/// What a store opened ahead of a request (the agent's warm worker) checks before it is used: that the files it
/// opened are still the store's files, as safe as a fresh open requires, and that the schema is still the one read.
extension Store {
    /// Which file a path named when it was looked at: a file replaced (renamed over, restored from a backup) is
    /// another identity even when its contents are the same.
    package struct FileIdentity: Sendable, Equatable {
        package let device: UInt64
        package let inode: UInt64

        package init(device: UInt64, inode: UInt64) {
            self.device = device
            self.inode = inode
        }

        /// The identity of the file at `path` (not following a final symlink), or nil when there is none.
        package static func of(_ path: String) -> FileIdentity? {
            var info = stat()
            guard lstat(path, &info) == 0 else { return nil }
            return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        }
    }

    /// The same checks of the home and of the database files a fresh open makes (a directory, owned by this user or
    /// root, writable by nobody else; the database, `-wal` and `-shm` regular files likewise), and that the database
    /// file is still `identity`.
    ///
    /// - Throws: `StorageError` `.insecureHome` or `.notInitialized` as `open` does; `.failure` when the database
    ///   file is not the one opened (the caller then opens the store afresh).
    package func checkFiles(identity: FileIdentity?) throws {
        try home.prepare(create: false)
        try Self.checkDatabaseFiles(home: home)
        guard let identity, FileIdentity.of(home.databaseURL.path) == identity else {
            throw StorageError(.failure, "\(home.databaseURL.path) was replaced since it was opened: open it again")
        }
    }

    /// Opens the writer pool now, ahead of the first write, for a store opened read-only that may well write, and
    /// has its connection read the schema (SQLite parses it at a connection's first statement).
    package func openWriterAhead() throws {
        _ = try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
    }

    /// Whether the schema is the one this keymgr writes (the version `open` left it at): a store another process
    /// migrated, or one replaced by a store of another version, is not.
    package func hasLatestSchema() throws -> Bool {
        try schemaVersion() == EmbeddedMigration.latestVersion
    }
}
