import Foundation
import GRDB

/// The outcome of the last sync run against one server.
public struct SyncStateRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "sync_state"

    public var serverName: String
    public var startedAt: Date
    public var finishedAt: Date?
    public var users: Int
    public var inSync: Int
    public var registered: Int
    public var revoked: Int
    public var serverDeleted: Int
    public var orphans: Int
    public var errors: Int
    /// JSON array of `{"userId","code","message"}`.
    public var errorSummary: String

    public init(serverName: String, startedAt: Date, finishedAt: Date?, users: Int = 0, inSync: Int = 0,
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
