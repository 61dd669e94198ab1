/// What the agent's policy lets one request do: which identity users it may read or act on, which auth types its
/// keys may have, and whether another person's APPLICATION_PIN key needs that key's PIN to be rebound or revoked.
///
/// The policy's decision (`AgentPolicy.decide`), carried in the request's `RequestContext`; the `KeyManager` facade
/// checks it in every operation that reads or acts on a user or key (`KeyManager.reach`, the one place that decides),
/// so a command that names no user (or forgot to declare one) still cannot reach outside it. No scope (embedded
/// mode): no limit.
///
/// Who owns an identity user is decided by the person links (`person_links`, docs/data-model.md), never by a name:
/// a username is display text, and a login name that happens to equal a user id grants nothing.
package struct AccessScope: Sendable, Equatable {
    /// The identity users a scope covers.
    package enum Users: Sendable, Equatable {
        /// Every user of the store (`for = "*"`).
        case all
        /// The caller's own identity users (when `includesSelf`: those linked to the caller's uid, and those the
        /// policy's `[self]` table maps the login to) and the identity users `ids` names (a user id, or a universalId's
        /// `id=` value).
        case limited(includesSelf: Bool, ids: Set<String>)
    }

    /// The operation the policy allowed (`key.sign`); messages and the audit log name its command path (`sign`).
    package var operation: RequestOperation
    /// Who asks, for messages: `alice (uid 1001)`.
    package var caller: String
    /// The caller's uid, as the kernel reported it: whose person links count as "self".
    package var callerUid: UInt32
    /// The caller's login name, recorded in a link a bind makes.
    package var callerLogin: String
    /// The identity user ids the policy's `[self]` table maps the caller's login to (an administrator's links).
    package var selfIds: Set<String>
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

    package init(operation: RequestOperation, caller: String, callerUid: UInt32, callerLogin: String, selfIds: Set<String> = [],
                 users: Users, authTypes: Set<AuthType>?, othersPINKeysNeedPIN: Bool, rule: String,
                 usersReason: String = "") {
        self.operation = operation
        self.caller = caller
        self.callerUid = callerUid
        self.callerLogin = callerLogin
        self.selfIds = selfIds
        self.users = users
        self.authTypes = authTypes
        self.othersPINKeysNeedPIN = othersPINKeysNeedPIN
        self.rule = rule
        self.usersReason = usersReason
    }

    /// Whether keys of `authType` may be used or bound.
    package func allows(_ authType: AuthType) -> Bool { authTypes?.contains(authType) ?? true }

    /// Whether every user is in scope (nothing to filter).
    package var coversAllUsers: Bool { users == .all }

    /// Whether the scope's `for` includes the caller's own identity users (`"self"`).
    package var includesSelf: Bool {
        if case .limited(let includesSelf, _) = users { return includesSelf }
        return false
    }

    /// Whether a bind under this scope links a new identity user to the caller: only a `for` that is the caller's own
    /// (`"self"`). A shared account's rule (`for = "*"` or a list) links nothing to it.
    package var bindLinksToCaller: Bool { includesSelf && operation.createsIdentity }

    /// Whether `userId` is one of `ids` by its user id or its universalId's `id=` value (never by a username).
    static func names(_ ids: Set<String>, _ userId: String) -> Bool {
        if ids.contains(userId) { return true }
        if let id = UniversalId.idValue(userId), ids.contains(id) { return true }
        return false
    }

    /// Whether the policy's `[self]` table maps the caller to `userId`.
    package func mapsToSelf(_ userId: String) -> Bool { Self.names(selfIds, userId) }

    /// Whether `for` lists `userId` by name.
    package func lists(_ userId: String) -> Bool {
        if case .limited(_, let ids) = users { return Self.names(ids, userId) }
        return false
    }
}
