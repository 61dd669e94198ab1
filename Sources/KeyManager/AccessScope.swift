import Synchronization

/// What the agent's policy lets one request do: which identity users it may read or act on, which auth types its
/// keys may have, and whether another person's APPLICATION_PIN key needs that key's PIN to be rebound or revoked.
///
/// The agent's worker sets `AccessScope.current` once, after the policy allowed the command and before it runs;
/// the `KeyManager` facade checks it in every operation that reads or acts on a user or key, so a command that
/// names no user (or forgot to declare one) still cannot reach outside it. Nil (embedded mode): no limit.
package struct AccessScope: Sendable, Equatable {
    /// The identity users a scope covers.
    package enum Users: Sendable, Equatable {
        /// Every user of the store.
        case all
        /// The users whose user id, universalId `id=` value or username is one of these names.
        case named(Set<String>)
    }

    /// The command path the policy allowed (`sign`, `pin change`), for messages and the audit log.
    package var operation: String
    /// Who asks, for messages: `alice (uid 1001)`.
    package var caller: String
    /// The names that are the caller's own identity users: the login name and what the policy's `[self]` table maps
    /// it to. Keys of other users are "another person's".
    package var selfNames: Set<String>
    /// The users this request may read or act on.
    package var users: Users
    /// The auth types of keys this request may use or bind; nil: any.
    package var authTypes: Set<AuthType>?
    /// Whether rebinding or revoking another person's APPLICATION_PIN key needs that key's PIN (every rule but one
    /// that allows everything, `may = ["*"]`).
    package var othersPINKeysNeedPIN: Bool
    /// The rule that decided, for messages: `rule 2 (/etc/keymgr/policy.toml:7)`.
    package var rule: String
    /// Why the users are limited, for messages: `for = "self"`.
    package var usersReason: String

    package init(operation: String, caller: String, selfNames: Set<String>, users: Users, authTypes: Set<AuthType>?,
                othersPINKeysNeedPIN: Bool, rule: String, usersReason: String = "") {
        self.operation = operation
        self.caller = caller
        self.selfNames = selfNames
        self.users = users
        self.authTypes = authTypes
        self.othersPINKeysNeedPIN = othersPINKeysNeedPIN
        self.rule = rule
        self.usersReason = usersReason
    }

    /// Whether the existing user `userId` (stored with `username`) is in this scope.
    package func allows(userId: String, username: String?) -> Bool {
        switch users {
        case .all: true
        case .named(let names): Self.matches(names, userId: userId, username: username)
        }
    }

    /// Whether a user that does not exist yet may be created as `userId`: only its user id (or its `id=` value)
    /// counts, never a username the request itself supplies.
    package func allowsNewUser(_ userId: String) -> Bool { allows(userId: userId, username: nil) }

    /// Whether `userId` (stored with `username`) is one of the caller's own identity users.
    package func isSelf(userId: String, username: String?) -> Bool {
        Self.matches(selfNames, userId: userId, username: username)
    }

    /// Whether keys of `authType` may be used or bound.
    package func allows(_ authType: AuthType) -> Bool { authTypes?.contains(authType) ?? true }

    /// Whether every user is in scope (nothing to filter).
    package var coversAllUsers: Bool { users == .all }

    private static func matches(_ names: Set<String>, userId: String, username: String?) -> Bool {
        if names.contains(userId) { return true }
        if let username, names.contains(username) { return true }
        if let id = UniversalId.idValue(userId), names.contains(id) { return true }
        return false
    }

    // Set once by the agent's worker before the command runs, read by the facade on any thread: a Mutex keeps it
    // sound under strict concurrency, and its cost is nothing next to a store read.
    private static let storage = Mutex<AccessScope?>(nil)

    /// The scope of the request this process serves; nil when keymgr runs directly (embedded mode: no limit).
    package static var current: AccessScope? {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}
