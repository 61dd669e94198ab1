import Foundation

/// The outcome of one sync run, kept so `status` can say when the store last synced.
public struct SyncSummary: Sendable, Equatable {
    /// A user the run could not reconcile.
    public struct UserError: Sendable, Equatable {
        public let userId: String
        public let code: KeyManagerError.Code
        public let message: String

        public init(userId: String, code: KeyManagerError.Code, message: String) {
            self.userId = userId
            self.code = code
            self.message = message
        }

        /// `failure`'s code and message, for `userId`.
        public init(userId: String, _ failure: some KeymgrFailure) {
            self.init(userId: userId, code: failure.code, message: failure.message)
        }
    }

    public var serverName: String
    public var startedAt: Date
    public var finishedAt: Date
    public var users: Int
    public var inSync: Int
    public var registered: Int
    public var revoked: Int
    public var serverDeleted: Int
    public var orphans: Int
    public var errors: [UserError]

    public init(serverName: String, startedAt: Date, finishedAt: Date, users: Int, inSync: Int, registered: Int,
                revoked: Int, serverDeleted: Int, orphans: Int, errors: [UserError]) {
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
    }
}
