import Foundation
import GRDB

// The queries of `UserKeyRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// Keys whose kid starts with `prefix`, compared without regard to case (at most `limit`).
    public func keys(kidPrefix prefix: String, limit: Int) throws -> [UserKeyRecord] {
        try UserKeyRecord.fetchAll(db, sql: """
            SELECT * FROM user_keys WHERE upper(substr(kid, 1, ?)) = upper(?) ORDER BY kid LIMIT ?
            """, arguments: [prefix.count, prefix, limit])
    }

    public func key(kid: String) throws -> UserKeyRecord? { try UserKeyRecord.fetchOne(db, key: kid) }

    /// The keys of one user (or of every user when `userId` is nil) whose status is in `statuses`, oldest first.
    public func keys(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [UserKeyRecord] {
        var request = UserKeyRecord.filter(statuses.map(\.rawValue).contains(Column("status")))
        if let userId { request = request.filter(Column("user_id") == userId) }
        return try request.order(Column("user_id"), Column("created_at"), Column("kid")).fetchAll(db)
    }

    /// Keys in a given server state (e.g. those queued for deletion on the server).
    public func keys(serverState: UserKeyRecord.ServerState) throws -> [UserKeyRecord] {
        try UserKeyRecord.filter(Column("server_state") == serverState.rawValue).order(Column("kid")).fetchAll(db)
    }

    /// Keys with their owners' usernames, for listing.
    public func keyListings(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [KeyListing] {
        let placeholders = Array(repeating: "?", count: statuses.count).joined(separator: ", ")
        var arguments: StatementArguments = StatementArguments(statuses.map(\.rawValue).sorted())
        var sql = """
            SELECT k.*, u.username AS owner_username FROM user_keys k JOIN users u ON u.user_id = k.user_id
            WHERE k.status IN (\(placeholders))
            """
        if let userId {
            sql += " AND k.user_id = ?"
            arguments += [userId]
        }
        sql += " ORDER BY k.user_id, k.created_at, k.kid"
        return try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
            KeyListing(key: try UserKeyRecord(row: row), username: row["owner_username"])
        }
    }
}

extension StoreWriter {
    public func insert(_ key: UserKeyRecord) throws { try key.insert(db) }

    /// Writes back a changed key row; the row must exist.
    public func update(_ key: UserKeyRecord) throws {
        do { try key.update(db) } catch is RecordError {
            throw StorageError(.notFound, "key \(key.kid) is not in the store")
        }
    }
}
