import Foundation
import GRDB

// The queries of `ServerRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    package func server(name: String = "default") throws -> ServerRecord? {
        try checkedOne(ServerRecord.self, "servers", sql: "SELECT * FROM servers WHERE name = ?", arguments: [name])
    }

    package func servers() throws -> [ServerRecord] {
        try checkedAll(ServerRecord.self, "servers", sql: "SELECT * FROM servers ORDER BY name")
    }

    /// The profiles whose stored clock offset is more than `seconds` either way, by name: what `keymgr status` shows.
    package func clockSkews(over seconds: Int64) throws -> [(name: String, offset: Int64)] {
        try Row.fetchAll(db, sql: "SELECT name, clock_offset_seconds FROM servers WHERE abs(clock_offset_seconds) > ? ORDER BY name",
                         arguments: [seconds]).map { row -> (name: String, offset: Int64) in (row[0], row[1]) }
    }
}

extension StoreWriter {
    package func save(_ server: ServerRecord) throws { try server.save(db) }
}

extension StoreWriter {
    /// Deletes a server profile with the registrations, token sets and sync record kept for it (in the caller's
    /// transaction); returns how many registrations and token sets there were.
    package func deleteServer(name: String) throws -> (registrations: Int, tokenSets: Int) {
        let tokens = try deleteUserServerRecords(TokenRecord.self, serverName: name)
        let registrations = try deleteUserServerRecords(RegistrationRecord.self, serverName: name)
        _ = try SyncStateRecord.filter(UserServerColumns.serverName == name).deleteAll(db)
        _ = try ServerRecord.deleteOne(db, key: name)
        return (registrations, tokens)
    }
}

extension StoreReader {
    /// How many registrations and token sets are kept for the server profile `name`.
    package func credentialCounts(serverName name: String) throws -> (registrations: Int, tokenSets: Int) {
        (try userServerRecordCount(RegistrationRecord.self, serverName: name),
         try userServerRecordCount(TokenRecord.self, serverName: name))
    }
}
