import Foundation
import GRDB
import KeymgrCore

// The queries of `UserKeyRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// Keys whose kid starts with `prefix`, compared without regard to case (at most `limit`).
    package func keys(kidPrefix prefix: String, limit: Int) throws -> [UserKeyRecord] {
        try checkedAll(UserKeyRecord.self, "user_keys", sql: """
            SELECT * FROM user_keys WHERE upper(substr(kid, 1, ?)) = upper(?) ORDER BY kid LIMIT ?
            """, arguments: [prefix.count, prefix, limit])
    }

    // Hot paths (sign, status) query with SQL text: the query interface's fetchOne(key:) and order() first ask the
    // schema for primary keys and tables, which costs a short process more than the query itself.
    package func key(kid: String) throws -> UserKeyRecord? {
        try checkedOne(UserKeyRecord.self, "user_keys", sql: "SELECT * FROM user_keys WHERE kid = ?", arguments: [kid])
    }

    /// The keys of one user (or of every user when `userId` is nil) whose status is in `statuses`, oldest first.
    package func keys(userId: String? = nil, statuses: Set<UserKeyRecord.Status>) throws -> [UserKeyRecord] {
        var keys: [UserKeyRecord] = []
        try forEachKey(userId: userId, statuses: statuses) { keys.append($0) }
        return keys
    }

    /// The keys `keys(userId:statuses:)` returns, in the same order, one at a time as SQLite steps, each row's MAC
    /// checked (when this reader checks rows): what sync reads to decide, over every key of the store.
    package func forEachKey(userId: String? = nil, statuses: Set<UserKeyRecord.Status>,
                           _ body: (UserKeyRecord) throws -> Void) throws {
        let placeholders = Array(repeating: "?", count: statuses.count).joined(separator: ", ")
        var arguments: StatementArguments = StatementArguments(statuses.map(\.rawValue).sorted())
        var sql = "SELECT * FROM user_keys WHERE status IN (\(placeholders))"
        if let userId {
            sql += " AND user_id = ?"
            arguments += [userId]
        }
        sql += " ORDER BY user_id, created_at, kid"
        let rows = try Row.fetchCursor(db, sql: withRowid(sql), arguments: arguments)
        while let row = try rows.next() { try body(try UserKeyRecord(row: try checked("user_keys", row))) }
    }

    /// Keys in a given server state (e.g. those queued for deletion on the server).
    package func keys(serverState: UserKeyRecord.ServerState) throws -> [UserKeyRecord] {
        try checkedAll(UserKeyRecord.self, "user_keys", sql: "SELECT * FROM user_keys WHERE server_state = ? ORDER BY kid",
                       arguments: [serverState.rawValue])
    }

    /// Keys with their owners' usernames, for listing, without the key material, one at a time as SQLite steps: one
    /// statement, columns read by index (no `Decodable`, no per-row column-name conversion), nothing held between rows.
    ///
    /// - Throws: `StorageError` `.tampered` for a row holding a value keymgr never writes.
    package func forEachListedKey(userId: String? = nil, statuses: Set<UserKeyRecord.Status>,
                                 _ body: (ListedKey) throws -> Void) throws {
        let placeholders = Array(repeating: "?", count: statuses.count).joined(separator: ", ")
        var arguments: StatementArguments = StatementArguments(statuses.map(\.rawValue).sorted())
        var sql = """
            SELECT k.kid, k.user_id, u.username, k.auth_type, k.status, k.server_state, k.device_name,
                   k.server_last_access_at, k.created_at, k.last_used_at, k.issuer, k.revoked_at, k.revoke_reason,
                   CASE WHEN p.kid IS NOT NULL AND k.status IN ('active', 'locked')
                        THEN MAX(p.pin_retry - p.failed_attempts, 0) END,
                   l.login
            FROM user_keys k JOIN users u ON u.user_id = k.user_id LEFT JOIN app_pins p ON p.kid = k.kid
                 LEFT JOIN person_links l ON l.user_id = k.user_id
            WHERE k.status IN (\(placeholders))
            """
        if let userId {
            sql += " AND k.user_id = ?"
            arguments += [userId]
        }
        sql += " ORDER BY k.user_id, k.created_at, k.kid"
        let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
        while let row = try rows.next() {
            var listed = ListedKey(
                kid: try row.decode(atIndex: 0), userId: try row.decode(atIndex: 1), username: try row.decode(atIndex: 2),
                authType: try Self.value(row, 3, UserKeyRecord.AuthType.init(rawValue:)),
                status: try Self.value(row, 4, UserKeyRecord.Status.init(rawValue:)),
                serverState: try Self.value(row, 5, UserKeyRecord.ServerState.init(rawValue:)),
                deviceName: try row.decode(atIndex: 6),
                serverLastAccessAt: try Self.date(row, 7), createdAt: try Self.requiredDate(row, 8),
                lastUsedAt: try Self.date(row, 9), issuer: try row.decode(atIndex: 10),
                revokedAt: try Self.date(row, 11), revokeReason: try row.decode(atIndex: 12),
                pinAttemptsLeft: try row.decode(atIndex: 13))
            listed.owner = try row.decode(atIndex: 14)
            try body(listed)
        }
    }

    /// The enum value named by the text in column `index` (read as text: cheaper per row than GRDB's generic decoding).
    private static func value<T>(_ row: Row, _ index: Int, _ make: (String) -> T?) throws -> T {
        try value(text: row.decode(atIndex: index), make)
    }

    /// The enum value `text` names.
    static func value<T>(text: String, _ make: (String) -> T?) throws -> T {
        guard let value = make(text) else {
            throw StorageError(.tampered, "a key row holds a value keymgr never writes (\(text.debugDescription)), so the "
                + "database was edited outside keymgr; restore it from a backup")
        }
        return value
    }

    /// The time in column `index` of `row`, in keymgr's format; nil for NULL.
    static func date(_ row: Row, _ index: Int) throws -> Date? { try date(text: row.decode(atIndex: index)) }

    /// The time `text` spells in keymgr's format; nil for NULL.
    static func date(text: String?) throws -> Date? {
        guard let text else { return nil }
        guard let date = Timestamp.date(from: text) else {
            throw StorageError(.tampered, "a row holds a time keymgr never writes (\(text.debugDescription)), so the "
                + "database was edited outside keymgr; restore it from a backup")
        }
        return date
    }

    /// The time in column `index` of `row`, which must not be NULL.
    static func requiredDate(_ row: Row, _ index: Int) throws -> Date { try requiredDate(text: row.decode(atIndex: index)) }

    /// The time `text` spells, which must not be NULL.
    static func requiredDate(text: String?) throws -> Date {
        guard let date = try date(text: text) else {
            throw StorageError(.tampered, "a row has no time where keymgr always writes one, so the database was edited outside keymgr; "
                + "restore it from a backup")
        }
        return date
    }
}

extension StoreWriter {
    package func insert(_ key: UserKeyRecord) throws { try key.insert(db) }

    /// Records a use of an active key, changing nothing else of its row; false when the key is no longer active.
    package func markUsed(kid: String, at: Date) throws -> Bool {
        try db.execute(sql: "UPDATE user_keys SET last_used_at = ? WHERE kid = ? AND status = 'active'",
                       arguments: [Timestamp.string(from: at), kid])
        return db.changesCount == 1
    }

    /// Writes back a changed key row; the row must exist.
    package func update(_ key: UserKeyRecord) throws {
        do { try key.update(db) } catch is RecordError {
            throw StorageError(.notFound, "key \(key.kid) is not in the store")
        }
    }
}

extension UserKeyRecord {
    /// A key row read by column name, without `Decodable`: sign reads key rows at start-up and sync and list read
    /// thousands, where the decoder's key conversion and generic look-ups cost more than the query.
    ///
    /// - Throws: `StorageError` `.tampered` for a value keymgr never writes; GRDB's error for a missing column.
    package init(row: Row) throws {
        kid = try row.decode(forColumn: "kid")
        userId = try row.decode(forColumn: "user_id")
        issuer = try row.decode(forColumn: "issuer")
        authType = try StoreReader.value(text: row.decode(forColumn: "auth_type"), AuthType.init(rawValue:))
        algorithm = try row.decode(forColumn: "algorithm")
        publicJwk = try row.decode(forColumn: "public_jwk")
        wrappedPrivateKey = try row.decode(forColumn: "wrapped_private_key")
        status = try StoreReader.value(text: row.decode(forColumn: "status"), Status.init(rawValue:))
        serverState = try StoreReader.value(text: row.decode(forColumn: "server_state"), ServerState.init(rawValue:))
        deviceName = try row.decode(forColumn: "device_name")
        serverLastAccessAt = try StoreReader.date(text: row.decode(forColumn: "server_last_access_at"))
        createdAt = try StoreReader.requiredDate(text: row.decode(forColumn: "created_at"))
        lastUsedAt = try StoreReader.date(text: row.decode(forColumn: "last_used_at"))
        revokedAt = try StoreReader.date(text: row.decode(forColumn: "revoked_at"))
        revokeReason = try row.decode(forColumn: "revoke_reason")
        keyBackend = try row.decode(forColumn: "key_backend")
    }
}

extension StoreReader {
    /// The kids of usable (active or locked) keys that start with `prefix`, for shell completion: at most `limit`.
    package func usableKids(startingWith prefix: String, limit: Int) throws -> [String] {
        try String.fetchAll(db, sql: """
            SELECT kid FROM user_keys WHERE kid >= ? AND substr(kid, 1, length(?)) = ? AND status IN ('active', 'locked')
            ORDER BY kid LIMIT ?
            """, arguments: [prefix, prefix, prefix, limit])
    }
}

extension StoreReader {
    /// How many keys each user holds in each status (`status`), in one pass over the keys.
    package func keyCounts() throws -> [(userId: String, status: UserKeyRecord.Status, count: Int)] {
        let rows = try Row.fetchAll(db, sql: "SELECT user_id, status, COUNT(*) FROM user_keys GROUP BY user_id, status")
        return try rows.map { row in
            (try row.decode(atIndex: 0), try Self.value(text: row.decode(atIndex: 1), UserKeyRecord.Status.init(rawValue:)),
             try row.decode(atIndex: 2))
        }
    }

    /// Every active or locked APPLICATION_PIN key with its PIN record's counter (`status`): kid, user, status, wrong
    /// PINs it still takes before it locks. Not MAC-checked, as `list` is not: nothing shown gates access.
    package func pinKeyStates() throws -> [(kid: String, userId: String, status: UserKeyRecord.Status, attemptsLeft: Int)] {
        let rows = try Row.fetchAll(db, sql: """
            SELECT k.kid, k.user_id, k.status, MAX(p.pin_retry - p.failed_attempts, 0)
            FROM user_keys k JOIN app_pins p ON p.kid = k.kid
            WHERE k.status IN ('active', 'locked') ORDER BY k.user_id, k.created_at, k.kid
            """)
        return try rows.map { row in
            (try row.decode(atIndex: 0), try row.decode(atIndex: 1),
             try Self.value(text: row.decode(atIndex: 2), UserKeyRecord.Status.init(rawValue:)), try row.decode(atIndex: 3))
        }
    }
}
