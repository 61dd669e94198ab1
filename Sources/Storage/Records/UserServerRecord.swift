import Foundation
import GRDB

/// A record kept per user and server profile, keyed by (`user_id`, `server_name`): a client registration, a token
/// set. Their queries are one set, written once here; `RegistrationRecord+Queries.swift` and
/// `TokenRecord+Queries.swift` name them for their table.
package protocol UserServerRecord: KeymgrRecord where Columns == UserServerColumns {}

extension RegistrationRecord: UserServerRecord {
    package typealias Columns = UserServerColumns
}

extension TokenRecord: UserServerRecord {
    package typealias Columns = UserServerColumns
}

/// The columns every `UserServerRecord` table has (and `sync_state`'s `server_name`): GRDB's `Columns` of both records.
package enum UserServerColumns {
    static let userId = Column("user_id")
    static let serverName = Column("server_name")
}

extension StoreReader {
    /// The record of `userId` at `serverName`, its row MAC checked.
    func userServerRecord<Record: UserServerRecord>(_ type: Record.Type, userId: String, serverName: String) throws -> Record? {
        let table = Record.databaseTableName
        return try checkedOne(Record.self, table, sql: "SELECT * FROM \(table) WHERE user_id = ? AND server_name = ?",
                              arguments: [userId, serverName])
    }

    /// Every record, or the records of `userId`, by user and server; each row's MAC checked.
    func userServerRecords<Record: UserServerRecord>(_ type: Record.Type, userId: String?) throws -> [Record] {
        let table = Record.databaseTableName
        guard let userId else {
            return try checkedAll(Record.self, table, sql: "SELECT * FROM \(table) ORDER BY user_id, server_name")
        }
        return try checkedAll(Record.self, table, sql: "SELECT * FROM \(table) WHERE user_id = ? ORDER BY server_name",
                              arguments: [userId])
    }

    /// How many records are kept for the server profile `serverName`.
    func userServerRecordCount<Record: UserServerRecord>(_ type: Record.Type, serverName: String) throws -> Int {
        try Record.filter(Record.Columns.serverName == serverName).fetchCount(db)
    }
}

extension StoreWriter {
    func deleteUserServerRecord<Record: UserServerRecord>(_ type: Record.Type, userId: String, serverName: String) throws {
        _ = try Record.deleteOne(db, key: ["user_id": userId, "server_name": serverName])
    }

    /// Deletes every record of `userId` (or, with `serverName`, every record kept for that profile); returns how many.
    func deleteUserServerRecords<Record: UserServerRecord>(_ type: Record.Type, userId: String? = nil,
                                                          serverName: String? = nil) throws -> Int {
        var request = Record.all()
        if let userId { request = request.filter(Record.Columns.userId == userId) }
        if let serverName { request = request.filter(Record.Columns.serverName == serverName) }
        return try request.deleteAll(db)
    }
}
