import Foundation
import GRDB

/// The outcome of the last sync run against one server.
package struct SyncStateRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "sync_state"

    package var serverName: String
    package var startedAt: Date
    package var finishedAt: Date?
    package var users: Int
    package var inSync: Int
    package var registered: Int
    package var revoked: Int
    package var serverDeleted: Int
    package var orphans: Int
    package var errors: Int
    /// JSON array of `{"userId","code","message"}`.
    package var errorSummary: String

    package init(serverName: String, startedAt: Date, finishedAt: Date?, users: Int = 0, inSync: Int = 0,
                registered: Int = 0, revoked: Int = 0, serverDeleted: Int = 0, orphans: Int = 0, errors: Int = 0,
                errorSummary: String = "[]") {
        self.serverName = serverName
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.users = users
        self.inSync = inSync
        self.registered = registered
        self.revoked = revoked
        self.serverDeleted = serverDeleted
        self.orphans = orphans
        self.errors = errors
        self.errorSummary = errorSummary
    }
}
