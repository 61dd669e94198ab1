import GRDB
@testable import Storage

/// Queries only the tests make, kept out of Storage's surface.
extension StoreReader {
    /// Keys with their owners' usernames, whole records (the listing reads `forEachListedKey` without key material).
    func keyListings(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [KeyListing] {
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
