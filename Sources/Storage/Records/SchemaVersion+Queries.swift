import GRDB

extension StoreReader {
    /// The schema version of the database, read in this snapshot (`status` reports it with the rest of one read).
    package func schemaVersion() throws -> Int {
        try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
    }
}

extension StoreReader {
    /// SQLite's `PRAGMA quick_check`: the problems it finds (at most 10), empty when the file holds together.
    package func quickCheck() throws -> [String] {
        try String.fetchAll(db, sql: "PRAGMA quick_check(10)").filter { $0 != "ok" }
    }
}
