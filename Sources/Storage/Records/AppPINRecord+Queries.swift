import Foundation
import GRDB
import KeymgrCore

// The queries of `AppPINRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    package func appPIN(kid: String) throws -> AppPINRecord? {
        try checkedOne(AppPINRecord.self, "app_pins", sql: "SELECT * FROM app_pins WHERE kid = ?", arguments: [kid])
    }

    /// Every PIN record (for re-wrapping under a new master key).
    package func appPINs() throws -> [AppPINRecord] {
        try checkedAll(AppPINRecord.self, "app_pins", sql: "SELECT * FROM app_pins ORDER BY kid")
    }
}

extension StoreWriter {
    package func save(_ pin: AppPINRecord) throws { try pin.save(db) }

    package func deleteAppPIN(kid: String) throws { _ = try AppPINRecord.deleteOne(db, key: kid) }

    /// Sets the key's wrong-PIN counter (the row MAC is stamped at commit), only while the record still has `salt` (the PIN the
    /// caller checked); returns whether it did. Only the counter changes: a PIN changed meanwhile is never undone.
    @discardableResult
    package func setPINFailures(kid: String, salt: Data, count: Int, at now: Date) throws -> Bool {
        try db.execute(sql: """
            UPDATE app_pins SET failed_attempts = ?, updated_at = ? WHERE kid = ? AND salt = ?
            """, arguments: [count, Timestamp.string(from: now), kid, salt])
        return db.changesCount == 1
    }
}
