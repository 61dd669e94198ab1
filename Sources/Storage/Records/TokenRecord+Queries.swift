import Foundation
import GRDB

// The queries of `TokenRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func tokenSet(userId: String, serverName: String) throws -> TokenRecord? {
        try checkedOne(TokenRecord.self, "tokens",
                       sql: "SELECT * FROM tokens WHERE user_id = ? AND server_name = ?", arguments: [userId, serverName])
    }

    public func tokenSets(userId: String? = nil) throws -> [TokenRecord] {
        guard let userId else {
            return try checkedAll(TokenRecord.self, "tokens", sql: "SELECT * FROM tokens ORDER BY user_id, server_name")
        }
        return try checkedAll(TokenRecord.self, "tokens",
                              sql: "SELECT * FROM tokens WHERE user_id = ? ORDER BY server_name", arguments: [userId])
    }
}

extension StoreWriter {
    public func save(_ tokens: TokenRecord) throws { try tokens.save(db) }

    public func deleteTokenSet(userId: String, serverName: String) throws {
        _ = try TokenRecord.deleteOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    /// Deletes every token set (and with it the DPoP keys) of a user; returns how many there were.
    @discardableResult
    public func deleteTokenSets(userId: String) throws -> Int {
        try TokenRecord.filter(Column("user_id") == userId).deleteAll(db)
    }
}
