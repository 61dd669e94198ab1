import Foundation
import GRDB

// The queries of `RegistrationRecord` (the shared per-user-and-server set, `UserServerRecord.swift`).

extension StoreReader {
    package func registration(userId: String, serverName: String) throws -> RegistrationRecord? {
        try userServerRecord(RegistrationRecord.self, userId: userId, serverName: serverName)
    }

    package func registrations(userId: String? = nil) throws -> [RegistrationRecord] {
        try userServerRecords(RegistrationRecord.self, userId: userId)
    }
}

extension StoreWriter {
    package func save(_ registration: RegistrationRecord) throws { try registration.save(db) }

    package func deleteRegistration(userId: String, serverName: String) throws {
        try deleteUserServerRecord(RegistrationRecord.self, userId: userId, serverName: serverName)
    }

    /// Deletes every registration of a user; returns how many there were.
    @discardableResult
    package func deleteRegistrations(userId: String) throws -> Int {
        try deleteUserServerRecords(RegistrationRecord.self, userId: userId)
    }
}
