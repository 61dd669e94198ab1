import Foundation
import GRDB

// The queries of `TokenRecord` (the shared per-user-and-server set, `UserServerRecord.swift`).

extension StoreReader {
    package func tokenSet(userId: String, serverName: String) throws -> TokenRecord? {
        try userServerRecord(TokenRecord.self, userId: userId, serverName: serverName)
    }

    package func tokenSets(userId: String? = nil) throws -> [TokenRecord] {
        try userServerRecords(TokenRecord.self, userId: userId)
    }
}

extension StoreWriter {
    package func save(_ tokens: TokenRecord) throws { try tokens.save(db) }

    package func deleteTokenSet(userId: String, serverName: String) throws {
        try deleteUserServerRecord(TokenRecord.self, userId: userId, serverName: serverName)
    }

    /// Deletes every token set (and with it the DPoP keys) of a user; returns how many there were.
    @discardableResult
    package func deleteTokenSets(userId: String) throws -> Int {
        try deleteUserServerRecords(TokenRecord.self, userId: userId)
    }
}
