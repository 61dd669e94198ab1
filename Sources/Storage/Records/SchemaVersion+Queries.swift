import GRDB

extension StoreReader {
    /// The schema version of the database, read in this snapshot (`status` reports it with the rest of one read).
    package func schemaVersion() throws -> Int {
        try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
    }
}
