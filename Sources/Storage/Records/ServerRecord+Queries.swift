import Foundation
import GRDB

// The queries of `ServerRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func server(name: String = "default") throws -> ServerRecord? { try ServerRecord.fetchOne(db, key: name) }

    public func servers() throws -> [ServerRecord] { try ServerRecord.order(Column("name")).fetchAll(db) }
}

extension StoreWriter {
    public func save(_ server: ServerRecord) throws { try server.save(db) }
}
