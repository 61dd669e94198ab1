import Foundation
import GRDB

// The queries of `SyncStateRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The most recent sync run over all servers.
    package func lastSync() throws -> SyncStateRecord? {
        // SQL text: `order()` first asks the schema whether the table exists (see `key(kid:)`).
        try checkedOne(SyncStateRecord.self, "sync_state", sql: "SELECT * FROM sync_state ORDER BY started_at DESC LIMIT 1")
    }
}

extension StoreWriter {
    package func save(_ state: SyncStateRecord) throws { try state.save(db) }
}
