import Foundation
import GRDB

// The queries of `ServerRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func server(name: String = "default") throws -> ServerRecord? {
        try checkedOne(ServerRecord.self, "servers", sql: "SELECT * FROM servers WHERE name = ?", arguments: [name])
    }

    public func servers() throws -> [ServerRecord] {
        try checkedAll(ServerRecord.self, "servers", sql: "SELECT * FROM servers ORDER BY name")
    }
}

extension StoreWriter {
    public func save(_ server: ServerRecord) throws { try server.save(db) }
}

extension StoreWriter {
    /// Deletes a server profile with the registrations, token sets and sync record kept for it (in the caller's
    /// transaction); returns how many registrations and token sets there were.
    public func deleteServer(name: String) throws -> (registrations: Int, tokenSets: Int) {
        let tokens = try TokenRecord.filter(Column("server_name") == name).deleteAll(db)
        let registrations = try RegistrationRecord.filter(Column("server_name") == name).deleteAll(db)
        _ = try SyncStateRecord.filter(Column("server_name") == name).deleteAll(db)
        _ = try ServerRecord.deleteOne(db, key: name)
        return (registrations, tokens)
    }
}

extension StoreReader {
    /// How many registrations and token sets are kept for the server profile `name`.
    public func credentialCounts(serverName name: String) throws -> (registrations: Int, tokenSets: Int) {
        (try RegistrationRecord.filter(Column("server_name") == name).fetchCount(db),
         try TokenRecord.filter(Column("server_name") == name).fetchCount(db))
    }
}
