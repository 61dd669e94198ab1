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
