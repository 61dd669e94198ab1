import Foundation
import GRDB

// The queries of `SyncStateRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    public func syncState(serverName: String = "default") throws -> SyncStateRecord? {
        try SyncStateRecord.fetchOne(db, key: serverName)
    }

    /// The most recent sync run over all servers.
    public func lastSync() throws -> SyncStateRecord? {
        try SyncStateRecord.order(Column("started_at").desc).fetchOne(db)
    }
}

extension StoreWriter {
    public func save(_ state: SyncStateRecord) throws { try state.save(db) }
}
