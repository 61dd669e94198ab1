import Foundation
import GRDB

/// A link from a person (an OS account: uid and login name) to an identity user they own. One owner per identity.
package struct PersonLinkRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "person_links"

    /// How a link was made.
    package enum LinkedBy: String, Codable, Sendable, CaseIterable {
        /// `keymgr person link`.
        case administrator
        /// The person bound (or journey-bound) an identity user nobody had.
        case bind
        /// The first open of a store made before links: the identity's user id, id= value or username was the login.
        case migrated
    }

    package var userId: String
    package var uid: Int64
    package var login: String
    package var linkedBy: LinkedBy
    package var createdAt: Date

    package init(userId: String, uid: UInt32, login: String, linkedBy: LinkedBy, createdAt: Date) {
        self.userId = userId
        self.uid = Int64(uid)
        self.login = login
        self.linkedBy = linkedBy
        self.createdAt = createdAt
    }
}
