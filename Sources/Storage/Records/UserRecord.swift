import Foundation
import GRDB

/// A person known on this device, by the server's subject (`userId`, often a PingAM universalId).
package struct UserRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "users"

    package var userId: String
    package var username: String?
    package var createdAt: Date
    package var updatedAt: Date

    package init(userId: String, username: String?, createdAt: Date, updatedAt: Date) {
        self.userId = userId
        self.username = username
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
