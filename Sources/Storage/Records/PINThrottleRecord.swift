import Foundation
import GRDB

/// Wrong PINs one calling OS account (uid) gave for other people's keys (`pin_throttle`): the agent's throttle
/// (docs/security.md, "Wrong PINs from a shared account").
package struct PINThrottleRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "pin_throttle"

    package var uid: Int64
    /// The login name of `uid` when it last guessed, for `status` and the audit log.
    package var login: String
    /// Wrong PINs (and guesses still being checked) since `windowStartedAt`.
    package var failures: Int
    package var windowStartedAt: Date
    package var lastFailureAt: Date?
    /// Until when this uid's next PIN attempt on another person's key is refused (75) without being tried.
    package var blockedUntil: Date?
    /// The wait the next block imposes; doubles with each block.
    package var waitSeconds: Int
    package var updatedAt: Date

    package init(uid: Int64, login: String, failures: Int, windowStartedAt: Date, lastFailureAt: Date?,
                 blockedUntil: Date?, waitSeconds: Int, updatedAt: Date) {
        self.uid = uid
        self.login = login
        self.failures = failures
        self.windowStartedAt = windowStartedAt
        self.lastFailureAt = lastFailureAt
        self.blockedUntil = blockedUntil
        self.waitSeconds = waitSeconds
        self.updatedAt = updatedAt
    }
}
