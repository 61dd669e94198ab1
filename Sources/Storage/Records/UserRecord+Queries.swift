import Foundation
import GRDB

// The queries of `UserRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// SQL text rather than `fetchOne(key:)`, which first asks the schema for the primary key (see `key(kid:)`).
    package func user(id userId: String) throws -> UserRecord? {
        try checkedOne(UserRecord.self, "users", sql: "SELECT * FROM users WHERE user_id = ?", arguments: [userId])
    }

    /// Every user, by user id.
    package func users() throws -> [UserRecord] {
        try checkedAll(UserRecord.self, "users", sql: "SELECT * FROM users ORDER BY user_id")
    }

    /// The users `name` could stand for: whose user id is `name`, whose universal id's `id=` value is `name`, or
    /// whose username is `name`, by user id.
    package func users(matching name: String) throws -> [UserRecord] {
        try checkedAll(UserRecord.self, "users", sql: """
            SELECT * FROM users WHERE user_id = ?1 OR username = ?1 OR substr(user_id, 1, length(?1) + 4) = 'id=' || ?1 || ','
            ORDER BY user_id
            """, arguments: [name])
    }

    /// How many users and usable (active or locked) keys the store holds.
    package func counts() throws -> (users: Int, usableKeys: Int) {
        let users = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM users") ?? 0
        let keys = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM user_keys WHERE status IN ('active', 'locked')") ?? 0
        return (users, keys)
    }
}

extension StoreWriter {
    /// Deletes the user row of `userId` (its keys, registrations, token sets and link moved or deleted first).
    package func deleteUser(userId: String) throws {
        try db.execute(sql: "DELETE FROM users WHERE user_id = ?", arguments: [userId])
    }

    /// Inserts the user, or updates the username (when given) and `updatedAt` of an existing one.
    package func upsertUser(userId: String, username: String?, at now: Date) throws {
        if var existing = try user(id: userId) {
            if let username, username != existing.username { existing.username = username }
            existing.updatedAt = now
            try existing.update(db)
        } else {
            try UserRecord(userId: userId, username: username, createdAt: now, updatedAt: now).insert(db)
        }
    }
}

extension StoreReader {
    /// User ids, then usernames, that start with `prefix`, for shell completion: at most `limit`, from the primary
    /// key's range for ids.
    package func userNames(startingWith prefix: String, limit: Int) throws -> [String] {
        let ids = try String.fetchAll(db, sql: """
            SELECT user_id FROM users WHERE user_id >= ? AND substr(user_id, 1, length(?)) = ? ORDER BY user_id LIMIT ?
            """, arguments: [prefix, prefix, prefix, limit])
        let names = try String.fetchAll(db, sql: """
            SELECT DISTINCT username FROM users WHERE username IS NOT NULL AND substr(username, 1, length(?)) = ?
            ORDER BY username LIMIT ?
            """, arguments: [prefix, prefix, limit])
        return Array((ids + names.filter { !ids.contains($0) }).prefix(limit))
    }
}
