import Foundation
import GRDB

// The queries of `RegistrationRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func registration(userId: String, serverName: String) throws -> RegistrationRecord? {
        try checkedOne(RegistrationRecord.self, "registrations",
                       sql: "SELECT * FROM registrations WHERE user_id = ? AND server_name = ?", arguments: [userId, serverName])
    }

    public func registrations(userId: String? = nil) throws -> [RegistrationRecord] {
        guard let userId else {
            return try checkedAll(RegistrationRecord.self, "registrations", sql: "SELECT * FROM registrations ORDER BY user_id, server_name")
        }
        return try checkedAll(RegistrationRecord.self, "registrations",
                              sql: "SELECT * FROM registrations WHERE user_id = ? ORDER BY server_name", arguments: [userId])
    }
}

extension StoreWriter {
    public func save(_ registration: RegistrationRecord) throws { try registration.save(db) }

    public func deleteRegistration(userId: String, serverName: String) throws {
        _ = try RegistrationRecord.deleteOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    /// Deletes every registration of a user; returns how many there were.
    @discardableResult
    public func deleteRegistrations(userId: String) throws -> Int {
        try RegistrationRecord.filter(Column("user_id") == userId).deleteAll(db)
    }
}
