import Foundation
import Storage

/// How far the request being served reaches one identity user (see `KeyManager.reach(_:in:)`).
package enum Reach: Sendable, Equatable {
    /// The caller's own: linked to the caller's uid (`person_links`), or mapped to the login by the policy's `[self]`.
    case own
    /// In scope, and not the caller's: a rule with `for = "*"` or one that lists it (or keymgr runs embedded).
    case granted
    /// It does not exist yet, and a bind under a `for = "self"` rule may create it: the bind links it to the caller.
    case claimable
    /// Out of scope: to this caller, indistinguishable from an identity user that does not exist.
    case hidden
}

/// The agent's policy enforced in the facade (docs/agent-policy.md): every operation that reads or acts on a user or
/// key asks `reach(_:in:)` (nil scope in embedded mode: nothing to check). An identity user out of scope is answered
/// as one that does not exist (66, the same words); a refused auth type or another person's PIN key without its PIN
/// is `denied` (77), recorded as `agent.denied`. Lists show only the users in scope.
///
/// Checks run outside the facade's transactions: a denial writes its audit entry in a transaction of its own.
extension KeyManager {
    /// The one place that decides whether the caller may see or act on the identity user `userId` (existing or not),
    /// read in `reader`'s snapshot. Ownership comes from the person links and the policy's `[self]` table, never from
    /// a user id or username that equals the caller's login. Every lookup whose result could tell the caller
    /// something asks this first, and treats `.hidden` as "no such user".
    package func reach(_ userId: String, in reader: StoreReader) throws -> Reach {
        guard let scope = context.scope else { return .granted }
        let exists = try reader.user(id: userId) != nil
        let own = exists ? try owns(userId, uid: scope.callerUid, scope: scope, in: reader) : scope.mapsToSelf(userId)
        switch scope.users {
        case .all:
            return own ? .own : .granted
        case .limited(let includesSelf, _):
            if includesSelf && own { return .own }
            if scope.lists(userId) { return .granted }
            if includesSelf && !exists && scope.operation.createsIdentity { return .claimable }
            return .hidden
        }
    }

    /// Whether the identity user `userId` is the own of the caller with `uid`: linked to that uid (a person link), or
    /// mapped to the caller's login by the policy's `[self]` table (`scope`); never a matching name.
    func owns(_ userId: String, uid: UInt32, scope: AccessScope?, in reader: StoreReader) throws -> Bool {
        if scope?.mapsToSelf(userId) == true { return true }
        return try reader.personLink(userId: userId)?.uid == Int64(uid)
    }

    /// `reach(_:in:)` in a snapshot of its own.
    package func reach(_ userId: String) throws -> Reach {
        guard context.scope != nil else { return .granted }
        return try read { try reach(userId, in: $0) }
    }

    /// What a caller is told of an identity user it may not see: exactly what it is told of one that does not exist.
    func noSuchUser(_ userId: String) -> KeyManagerError {
        KeyManagerError(.clientNotRegistered, "no user \(userId) on this device that you may use: check the name")
    }

    /// Checks that the current scope covers `userId` (an existing user, or one a bind would create).
    /// Services that act for a user before they reach the store (registration at a server, token refresh) call
    /// this first.
    /// - Throws: `clientNotRegistered` (66) when it does not: the same as for a user that does not exist; `denied`
    ///   when a bind names an identity user someone else owns.
    package func authorize(userId: String) throws {
        guard let scope = context.scope, !scope.coversAllUsers else { return }
        let (decided, exists) = try read { reader in (try self.reach(userId, in: reader), try reader.user(id: userId) != nil) }
        guard decided == .hidden else { return }
        if scope.operation.createsIdentity, exists, scope.includesSelf { throw bindingRefused(scope, userId: userId) }
        throw noSuchUser(userId)
    }

    /// A person's bind of an identity user that exists and is not theirs: the one refusal that cannot look like "no
    /// such user" (a new name would be bound), so it says no more than that.
    private func bindingRefused(_ scope: AccessScope, userId: String) -> KeyManagerError {
        denied(scope, target: userId, reason: "\(scope.rule) lets \(scope.caller) bind keys only for its own identity "
            + "users or new ones, and \(userId) is not one of those: choose another name, or ask the device's "
            + "administrator to link it to you")
    }

    /// Checks that the current scope covers the key's user and, when `using`, its auth type.
    func authorize(_ key: UserKeyRecord, using: Bool) throws {
        guard let scope = context.scope else { return }
        if !scope.coversAllUsers, try reach(key.userId) == .hidden {
            throw KeyManagerError(.clientNotRegistered, "no key \(key.kid) on this device: see `keymgr list`")
        }
        if using, !scope.allows(AuthType(key.authType)) {
            throw denied(scope, target: key.userId, reason: "\(scope.rule) lets \(scope.caller) use only keys of "
                + (scope.authTypes ?? []).map(\.rawValue).sorted().joined(separator: ", ")
                + "; key \(key.kid) of \(key.userId) is \(AuthType(key.authType).rawValue)")
        }
    }

    /// Checks that a bind of `authType` for `userId` is in scope: the caller's own identity user, a new one a person
    /// binds for themself, or any under a rule that covers it (never by a username the bind supplies); and the auth
    /// type.
    func authorizeBinding(userId: String, authType: AuthType) throws {
        guard let scope = context.scope else { return }
        try authorize(userId: userId)
        guard scope.allows(authType) else {
            throw denied(scope, target: userId, reason: "\(scope.rule) lets \(scope.caller) bind only keys of "
                + (scope.authTypes ?? []).map(\.rawValue).sorted().joined(separator: ", ") + ", not \(authType.rawValue)")
        }
    }

    /// A bind supersedes the user's usable keys for its issuer: under the agent's policy, another person's
    /// APPLICATION_PIN key among them is superseded only by `rebind`, which asks for its PIN.
    /// `except`: the key a rebind replaces (its PIN already proven).
    func authorizeSuperseding(userId: String, issuer: String, except: String? = nil) throws {
        guard let scope = context.scope, scope.othersPINKeysNeedPIN else { return }
        let (keys, own) = try read { reader in
            (try reader.keys(userId: userId, statuses: [.active, .locked]), try reach(userId, in: reader) == .own)
        }
        guard !own, let key = keys.first(where: { $0.kid != except && $0.issuer == issuer && $0.authType == .applicationPIN }) else {
            return
        }
        throw denied(scope, target: userId, reason: "\(scope.rule): binding a key for \(userId) would supersede key \(key.kid), another "
            + "person's PIN key: only with its PIN (a rebind by someone who may rebind it), or ask the device's administrator")
    }

    /// Whether rebinding or revoking `key` needs its PIN under the current scope: another person's
    /// APPLICATION_PIN key (one not linked to the caller), unless the deciding rule allows everything.
    func needsOwnersPIN(_ key: UserKeyRecord) throws -> Bool {
        guard let scope = context.scope, scope.othersPINKeysNeedPIN, key.authType == .applicationPIN else { return false }
        return try reach(key.userId) != .own
    }

    /// Proves the owner's PIN for `key` (another person's PIN key being rebound or revoked): unlocks it, counting a
    /// wrong PIN as a failed attempt like any use. No PIN given: `denied`.
    func requireOwnersPIN(_ key: UserKeyRecord, pin: SecretProvider?) throws {
        guard try needsOwnersPIN(key), let scope = context.scope else { return }
        let reason = "\(scope.rule): key \(key.kid) of \(key.userId) is another person's PIN key: "
            + "`keymgr \(scope.operation.commandPath)` needs its PIN (give it with --pin-stdin or --pin-fd, or on the terminal), "
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
        guard context.scope?.coversAllUsers == false else { return nil }
        return try read { reader in try visibleUsers(in: reader) }
    }

    /// The users of `reader`'s snapshot the current scope covers (`reach` is not `.hidden`), in two statements;
    /// nil when it covers every user.
    func visibleUsers(in reader: StoreReader) throws -> Set<String>? {
        guard let scope = context.scope, !scope.coversAllUsers else { return nil }
        let mine = scope.includesSelf ? Set(try reader.personLinks(uid: scope.callerUid).map(\.userId)) : []
        return Set(try reader.users().map(\.userId).filter { userId in
            scope.lists(userId) || (scope.includesSelf && (mine.contains(userId) || scope.mapsToSelf(userId)))
        })
    }

    /// Records a denial the agent's gate decided before the command reached the store (no rule, a refused auth
    /// type), as `agent.denied`. An agent caller's repeated denials are coalesced (`recordCoalescedDenial`).
    package func recordDenial(operation: String, reason: String, target: String?) throws {
        if let caller = context.caller {
            return try recordCoalescedDenial(uid: caller.uid, operation: operation, reason: reason, target: target)
        }
        try appendAuditOnly([auditEvent("agent.denied", details: [
            "operation": .string(operation), "reason": .string(reason), "target": target.map(JSONValue.string) ?? .null,
        ])])
    }

    /// The `denied` error for `reason`, after recording it as `agent.denied` (a failure to record does not hide the
    /// denial).
    func denied(_ scope: AccessScope, target: String, reason: String) -> KeyManagerError {
        do {
            try recordDenial(operation: scope.operation.commandPath, reason: reason, target: target)
        } catch {
            logger.warning("could not record a denial in the audit log", metadata: ["error": .string("\(error)")])
        }
        return KeyManagerError(.denied, reason)
    }
}

/// A PIN the owner's-PIN check could not read (see `requireOwnersPIN`).
private struct DeniedForWantOfPIN: Error {}
