import Foundation
import GRDB

/// A person known on this device, by the server's subject (`userId`, often a PingAM universalId).
public struct UserRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "users"

    public var userId: String
    public var username: String?
    public var createdAt: Date
    public var updatedAt: Date

    public init(userId: String, username: String?, createdAt: Date, updatedAt: Date) {
        self.userId = userId
        self.username = username
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
