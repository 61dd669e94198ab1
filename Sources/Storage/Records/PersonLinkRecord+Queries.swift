import Foundation
import GRDB

// The queries of `PersonLinkRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The link that owns the identity user `userId`, if any.
    package func personLink(userId: String) throws -> PersonLinkRecord? {
        try checkedOne(PersonLinkRecord.self, "person_links", sql: "SELECT * FROM person_links WHERE user_id = ?",
                       arguments: [userId])
    }

    /// The identity users the person with `uid` owns, by user id.
    package func personLinks(uid: UInt32) throws -> [PersonLinkRecord] {
        try checkedAll(PersonLinkRecord.self, "person_links", sql: "SELECT * FROM person_links WHERE uid = ? ORDER BY user_id",
                       arguments: [Int64(uid)])
    }

    /// Every link, by login then user id.
    package func personLinks() throws -> [PersonLinkRecord] {
        try checkedAll(PersonLinkRecord.self, "person_links", sql: "SELECT * FROM person_links ORDER BY login, user_id")
    }
}

extension StoreWriter {
    /// Adds a link (the identity user must exist and have no owner: the caller checked).
    package func insert(_ link: PersonLinkRecord) throws { try link.insert(db) }

    /// Removes the link of `userId`; whether there was one.
    @discardableResult
    package func deletePersonLink(userId: String) throws -> Bool {
        try db.execute(sql: "DELETE FROM person_links WHERE user_id = ?", arguments: [userId])
        return db.changesCount > 0
    }
}
