import Foundation
import Storage

/// The agent's policy enforced in the facade (docs/agent-policy.md): every operation that reads or acts on a user or
/// key checks `AccessScope.current` (nil in embedded mode: nothing to check). Out of scope: `denied` (exit 77),
/// recorded as `agent.denied`. Lists show only the users in scope.
///
/// Checks run outside the facade's transactions: a denial writes its audit entry in a transaction of its own.
extension KeyManager {
    /// Checks that the current scope covers `userId` (an existing user, or one a bind would create).
    /// Services that act for a user before they reach the store (registration at a server, token refresh) call
    /// this first.
    /// - Throws: `denied` when it does not.
    package func authorize(userId: String) throws {
        guard let scope = AccessScope.current, !scope.coversAllUsers else { return }
        let user = try read { try $0.user(id: userId) }
        try requireUser(scope, userId: userId, username: user?.username, exists: user != nil)
    }

    /// Checks that the current scope covers the key's user and, when `using`, its auth type.
    func authorize(_ key: UserKeyRecord, username: String?, using: Bool) throws {
        guard let scope = AccessScope.current else { return }
        try requireUser(scope, userId: key.userId, username: username, exists: true)
        if using, !scope.allows(AuthType(key.authType)) {
            throw denied(scope, target: key.userId, reason: "\(scope.rule) lets \(scope.caller) use only keys of "
                + (scope.authTypes ?? []).map(\.rawValue).sorted().joined(separator: ", ")
                + "; key \(key.kid) of \(key.userId) is \(AuthType(key.authType).rawValue)")
        }
    }

    /// Checks that a bind of `authType` for `userId` is in scope: the user (a new user by its id alone, never by a
    /// username the bind supplies) and the auth type.
    func authorizeBinding(userId: String, authType: AuthType) throws {
        guard let scope = AccessScope.current else { return }
        if !scope.coversAllUsers {
            let user = try read { try $0.user(id: userId) }
            try requireUser(scope, userId: userId, username: user?.username, exists: user != nil)
        }
        guard scope.allows(authType) else {
            throw denied(scope, target: userId, reason: "\(scope.rule) lets \(scope.caller) bind only keys of "
                + (scope.authTypes ?? []).map(\.rawValue).sorted().joined(separator: ", ") + ", not \(authType.rawValue)")
        }
    }

    /// A bind supersedes the user's usable keys for its issuer: under the agent's policy, another person's
    /// APPLICATION_PIN key among them is superseded only by `rebind`, which asks for its PIN.
    /// `except`: the key a rebind replaces (its PIN already proven).
    func authorizeSuperseding(userId: String, issuer: String, except: String? = nil) throws {
        guard let scope = AccessScope.current, scope.othersPINKeysNeedPIN else { return }
        let (keys, username) = try read { reader in
            (try reader.keys(userId: userId, statuses: [.active, .locked]), try reader.user(id: userId)?.username)
        }
        guard let key = keys.first(where: { $0.kid != except && $0.issuer == issuer && needsOwnersPIN($0, username: username) }) else { return }
        throw denied(scope, target: userId, reason: "\(scope.rule): binding a key for \(userId) would supersede key \(key.kid), another "
            + "person's PIN key: replace it with `keymgr rebind --user \(userId) --auth-type …`, which asks for its PIN, "
            + "or ask an administrator")
    }

    /// Whether rebinding or revoking `key` needs its PIN under the current scope: another person's
    /// APPLICATION_PIN key, unless the deciding rule allows everything.
    func needsOwnersPIN(_ key: UserKeyRecord, username: String?) -> Bool {
        guard let scope = AccessScope.current, scope.othersPINKeysNeedPIN, key.authType == .applicationPIN else { return false }
        return !scope.isSelf(userId: key.userId, username: username)
    }

    /// Proves the owner's PIN for `key` (another person's PIN key being rebound or revoked): unlocks it, counting a
    /// wrong PIN as a failed attempt like any use. No PIN given: `denied`.
    func requireOwnersPIN(_ key: UserKeyRecord, username: String?, pin: SecretProvider?) throws {
        guard needsOwnersPIN(key, username: username), let scope = AccessScope.current else { return }
        let reason = "\(scope.rule): key \(key.kid) of \(key.userId) is another person's PIN key: "
            + "`keymgr \(scope.operation)` needs its PIN (give it with --pin-stdin or --pin-fd, or on the terminal), "
            + "or an administrator whose rule has may = [\"*\"]"
        guard let pin else { throw denied(scope, target: key.userId, reason: reason) }
        // No PIN to be had (no terminal, no --pin-stdin): the denial, not a bare "no PIN".
        let guarded: SecretProvider = {
            do {
                return try pin()
            } catch let error as any KeymgrFailure where error.code == .abort {
                throw DeniedForWantOfPIN()
            }
        }
        let unlocked: UnlockedKey
        do {
            unlocked = try unlock(key, pin: guarded, timeout: 60)
        } catch is DeniedForWantOfPIN {
            throw denied(scope, target: key.userId, reason: reason)
        }
        if let opened = unlocked.pin {
            // A right PIN resets the failure counter, as any use does.
            try write { writer in try settle(opened, key: key, writer: writer, at: now()) }
        }
    }

    /// The ids of the users the current scope covers, read in one snapshot; nil when it covers every user.
    func usersInScope() throws -> Set<String>? {
        guard let scope = AccessScope.current, !scope.coversAllUsers else { return nil }
        return try read { reader in
            Set(try reader.users().filter { scope.allows(userId: $0.userId, username: $0.username) }.map(\.userId))
        }
    }

    /// Records a denial the agent's gate decided before the command reached the store (no rule, a refused auth
    /// type), as `agent.denied`. An agent caller's repeated denials are coalesced (`recordCoalescedDenial`).
    package func recordDenial(operation: String, reason: String, target: String?) throws {
        if let caller = AgentCaller.current {
            return try recordCoalescedDenial(uid: caller.uid, operation: operation, reason: reason, target: target)
        }
        try appendAuditOnly([auditEvent("agent.denied", details: [
            "operation": .string(operation), "reason": .string(reason), "target": target.map(JSONValue.string) ?? .null,
        ])])
    }

    private func requireUser(_ scope: AccessScope, userId: String, username: String?, exists: Bool) throws {
        let allowed = exists ? scope.allows(userId: userId, username: username) : scope.allowsNewUser(userId)
        guard !allowed else { return }
        throw denied(scope, target: userId, reason: "\(scope.rule) lets \(scope.caller) run `keymgr \(scope.operation)` "
            + "only for the identity users its \(scope.usersReason.isEmpty ? "for" : scope.usersReason) names, "
            + "and \(userId) is not one of them")
    }

    /// The `denied` error for `reason`, after recording it as `agent.denied` (a failure to record does not hide the
    /// denial).
    func denied(_ scope: AccessScope, target: String, reason: String) -> KeyManagerError {
        do {
            try recordDenial(operation: scope.operation, reason: reason, target: target)
        } catch {
            logger.warning("could not record a denial in the audit log", metadata: ["error": .string("\(error)")])
        }
        return KeyManagerError(.denied, reason)
    }
}

/// A PIN the owner's-PIN check could not read (see `requireOwnersPIN`).
private struct DeniedForWantOfPIN: Error {}
