import Foundation
import GRDB

// The queries of `RegistrationRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func registration(userId: String, serverName: String) throws -> RegistrationRecord? {
        try RegistrationRecord.fetchOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    public func registrations(userId: String? = nil) throws -> [RegistrationRecord] {
        var request = RegistrationRecord.all()
        if let userId { request = request.filter(Column("user_id") == userId) }
        return try request.fetchAll(db)
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
