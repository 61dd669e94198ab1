import Foundation
import GRDB

// The queries of `AppPINRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func appPIN(kid: String) throws -> AppPINRecord? { try AppPINRecord.fetchOne(db, key: kid) }

    /// Every PIN record (for re-wrapping under a new master key).
    public func appPINs() throws -> [AppPINRecord] { try AppPINRecord.fetchAll(db) }
}

extension StoreWriter {
    public func save(_ pin: AppPINRecord) throws { try pin.save(db) }

    public func deleteAppPIN(kid: String) throws { _ = try AppPINRecord.deleteOne(db, key: kid) }

    /// Adds one to the key's wrong-PIN counter and returns the new count. Callers commit it before checking a guess.
    public func incrementPINFailures(kid: String, at now: Date) throws -> Int {
        try db.execute(sql: "UPDATE app_pins SET failed_attempts = failed_attempts + 1, updated_at = ? WHERE kid = ?",
                       arguments: [Timestamp.string(from: now), kid])
        guard db.changesCount == 1, let count = try Int.fetchOne(db, sql: "SELECT failed_attempts FROM app_pins WHERE kid = ?", arguments: [kid]) else {
            throw StorageError(.notFound, "key \(kid) has no PIN record")
        }
        return count
    }
}
