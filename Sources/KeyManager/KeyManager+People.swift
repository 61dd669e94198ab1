import Foundation
import Storage

/// A link from a person (an OS account) to an identity user they own, as `keymgr person list` shows it.
public struct PersonLink: Sendable, Equatable {
    /// The person's login name.
    public var login: String
    /// The person's uid.
    public var uid: UInt32
    /// The identity user they own.
    public var userId: String
    /// The identity user's username (display text).
    public var username: String?
    /// How the link was made: `administrator`, `bind`, `migrated`, or `policy` (the agent's `[self]` table).
    public var linkedBy: String
    /// When the link was made; nil for the policy's links.
    public var createdAt: Date?
}

extension KeyManager {
    /// Every person link: the store's, then (through the agent) the policy's `[self]` table, by login then user id.
    public func personLinks() throws -> [PersonLink] {
        var links = try read { reader in
            try reader.personLinks().map { link in
                PersonLink(login: link.login, uid: UInt32(clamping: link.uid), userId: link.userId,
                           username: try reader.user(id: link.userId)?.username, linkedBy: link.linkedBy.rawValue,
                           createdAt: link.createdAt)
            }
        }
        for (login, ids) in context.policy?.selfMap ?? [:] {
            guard let uid = Self.uid(ofLogin: login) else { continue }
            for userId in ids {
                links.append(PersonLink(login: login, uid: uid, userId: userId, username: nil, linkedBy: "policy", createdAt: nil))
            }
        }
        return links.sorted { ($0.login, $0.userId, $0.linkedBy) < ($1.login, $1.userId, $1.linkedBy) }
    }

    /// Links the identity user `userId` to the person `login` (an administrator's act, `keymgr person link`),
    /// audited as `person.linked`. A link is never moved: an identity user another login owns is refused until
    /// `person unlink` breaks that link. Linking what is already linked to `login` changes nothing.
    /// - Throws: `clientNotRegistered` when there is no such login or identity user; `usage` when another login owns it.
    @discardableResult
    public func linkPerson(login: String, userId: String) throws -> PersonLink {
        try link(userId: userId, uid: try requireLogin(login), login: login)
    }

    /// `linkPerson` for a login whose uid is known (tests give people who have no account on the machine).
    @discardableResult
    func link(userId: String, uid: UInt32, login: String) throws -> PersonLink {
        let at = now()
        return try write { writer in
            guard let user = try writer.user(id: userId) else {
                throw KeyManagerError(.clientNotRegistered, "no user \(userId) on this device: check the id with `keymgr users`")
            }
            if let existing = try writer.personLink(userId: userId) {
                guard existing.uid == Int64(uid) else {
                    throw KeyManagerError(.usage, "\(userId) is linked to \(existing.login) (uid \(existing.uid)); a link is "
                        + "never moved: run `keymgr person unlink \(existing.login) \(userId)` first if it should change")
                }
                return PersonLink(login: existing.login, uid: uid, userId: userId, username: user.username,
                                  linkedBy: existing.linkedBy.rawValue, createdAt: existing.createdAt)
            }
            try writer.insert(PersonLinkRecord(userId: userId, uid: uid, login: login, linkedBy: .administrator, createdAt: at))
            try writer.appendAudit(auditEvent("person.linked", userId: userId, details: [
                "login": .string(login), "uid": .int(Int64(uid)), "reason": .string("administrator"),
            ]))
            return PersonLink(login: login, uid: uid, userId: userId, username: user.username, linkedBy: "administrator",
                              createdAt: at)
        }
    }

    /// Breaks the link of `userId` to `login` (`keymgr person unlink`), audited as `person.unlinked`.
    /// - Throws: `clientNotRegistered` when `login` does not own `userId`.
    public func unlinkPerson(login: String, userId: String) throws {
        try write { writer in
            guard let existing = try writer.personLink(userId: userId), existing.login == login else {
                throw KeyManagerError(.clientNotRegistered, "\(userId) is not linked to \(login): see `keymgr person list`")
            }
            try writer.deletePersonLink(userId: userId)
            try writer.appendAudit(auditEvent("person.unlinked", userId: userId, details: [
                "login": .string(login), "uid": .int(existing.uid),
            ]))
        }
    }

    private func requireLogin(_ login: String) throws -> UInt32 {
        guard let uid = Self.uid(ofLogin: login) else {
            throw KeyManagerError(.clientNotRegistered, "no login \(login) on this device: give an OS account's login name "
                + "(`getent passwd \(login)` shows it)")
        }
        return uid
    }

    /// The uid of the OS account `login`, from the user database; nil when there is none.
    static func uid(ofLogin login: String) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard !login.isEmpty, getpwnam_r(login, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// Links the identity users of a store made before person links (the first open with the master key after
    /// migration 0007): each identity user without an owner whose user id, universalId `id=` value or username (in
    /// that order) is an existing login is linked to that login, audited as `person.linked` with reason `migrated`.
    /// - Returns: the links made.
    func linkMigratedPeople(_ writer: StoreWriter) throws -> [PersonLinkRecord] {
        var made: [PersonLinkRecord] = []
        let at = now()
        for user in try writer.users() where try writer.personLink(userId: user.userId) == nil {
            let names = [user.userId, UniversalId.idValue(user.userId), user.username].compactMap { $0 }
            guard let (login, uid) = names.lazy.compactMap({ name in Self.uid(ofLogin: name).map { (name, $0) } }).first else {
                continue
            }
            let link = PersonLinkRecord(userId: user.userId, uid: uid, login: login, linkedBy: .migrated, createdAt: at)
            try writer.insert(link)
            try writer.appendAudit(auditEvent("person.linked", userId: user.userId, details: [
                "login": .string(login), "uid": .int(Int64(uid)), "reason": .string("migrated"),
            ]))
            made.append(link)
        }
        return made
    }
}

extension KeyManager {
    /// One person, one identity: moves the local identity user `from` (a person's local bind, `bob`) into `into`
    /// (the same person as the server names them after a journey, `id=bob,ou=user,…`), keys and all, inside
    /// `writer`'s transaction. Secrets whose AAD names the user id are re-sealed; the link moves with them; `from`
    /// is deleted. Audited as `user.adopted`.
    ///
    /// Adopts nothing (returns nil, and both identities stay, which `--user` then calls ambiguous) when it cannot be
    /// done safely: `from` is another person's under the agent's policy, the two are linked to different people, a
    /// software PIN key of another issuer would need its PIN to be re-sealed, or both hold a usable key or a
    /// credential for the same issuer or server.
    /// - Parameter issuer: the issuer of the key being bound, which supersedes `from`'s key for it.
    /// - Returns: the kids moved.
    func adopt(_ from: String, into: String, issuer: String, writer: StoreWriter, at: Date) throws -> [String]? {
        guard from != into, try writer.user(id: from) != nil else { return nil }
        let fromLink = try writer.personLink(userId: from)
        let intoLink = try writer.personLink(userId: into)
        if let scope = context.scope, scope.othersPINKeysNeedPIN {
            let reach = try reach(from, in: writer)
            guard reach == .own || (reach == .granted && fromLink == nil) else { return nil }
        }
        if let fromLink, let intoLink, fromLink.uid != intoLink.uid { return nil }
        let keys = try writer.keys(userId: from, statuses: Set(UserKeyRecord.Status.allCases))
        let usable = keys.filter { $0.status == .active || $0.status == .locked }
        // The PIN layer's AAD names the user id, and only the PIN opens it; a key this bind supersedes is destroyed.
        guard !usable.contains(where: { $0.authType == .applicationPIN && $0.keyBackend == KeyBackendKind.software.rawValue
                                        && $0.issuer != issuer }) else { return nil }
        let intoIssuers = Set(try writer.keys(userId: into, statuses: [.active, .locked]).map(\.issuer))
        guard !usable.contains(where: { intoIssuers.contains($0.issuer) }) else { return nil }
        let registrations = try writer.registrations().filter { $0.userId == from }
        let tokenSets = try writer.tokenSets().filter { $0.userId == from }
        let intoServers = Set(try writer.registrations().filter { $0.userId == into }.map(\.serverName))
            .union(try writer.tokenSets().filter { $0.userId == into }.map(\.serverName))
        guard !(registrations.map(\.serverName) + tokenSets.map(\.serverName)).contains(where: intoServers.contains) else { return nil }

        let username = try writer.user(id: from)?.username
        try writer.upsertUser(userId: into, username: try writer.user(id: into)?.username == nil ? username : nil, at: at)
        func reseal(_ value: Data?, _ old: SealedSlot, _ new: SealedSlot) throws -> Data? {
            guard let value else { return nil }
            return try hierarchy.seal(try hierarchy.open(value, in: old), in: new)
        }
        for var key in keys {
            key.wrappedPrivateKey = try reseal(key.wrappedPrivateKey, .privateKey(kid: key.kid, userId: from),
                                               .privateKey(kid: key.kid, userId: into))
            key.userId = into
            try writer.update(key)
        }
        for var registration in registrations {
            let server = registration.serverName
            registration.sealedClientSecret = try reseal(registration.sealedClientSecret,
                .registrationSecret("client_secret", userId: from, serverName: server),
                .registrationSecret("client_secret", userId: into, serverName: server))
            registration.sealedRegistrationAccessToken = try reseal(registration.sealedRegistrationAccessToken,
                .registrationSecret("registration_access_token", userId: from, serverName: server),
                .registrationSecret("registration_access_token", userId: into, serverName: server))
            registration.userId = into
            try writer.save(registration)
        }
        for var tokens in tokenSets {
            let server = tokens.serverName
            for (column, path) in [("access_token", \TokenRecord.sealedAccessToken), ("refresh_token", \.sealedRefreshToken),
                                   ("id_token", \.sealedIdToken), ("dpop_key", \.sealedDpopKey)] {
                tokens[keyPath: path] = try reseal(tokens[keyPath: path], .tokenSecret(column, userId: from, serverName: server),
                                                   .tokenSecret(column, userId: into, serverName: server))
            }
            tokens.userId = into
            try writer.save(tokens)
        }
        _ = try writer.deleteRegistrations(userId: from)
        _ = try writer.deleteTokenSets(userId: from)
        if registrations.count + tokenSets.count > 0 {
            // Gone from `from` (the audit log's record of what it held), kept under `into`.
            try writer.appendAudit(auditEvent("credentials.wiped", userId: from, details: [
                "tokenSets": .int(Int64(tokenSets.count)), "registrations": .int(Int64(registrations.count)),
                "reason": .string("adopted into \(into)"),
            ]))
        }
        if let fromLink {
            try writer.deletePersonLink(userId: from)
            if intoLink == nil {
                try writer.insert(PersonLinkRecord(userId: into, uid: UInt32(clamping: fromLink.uid), login: fromLink.login,
                                                   linkedBy: fromLink.linkedBy, createdAt: fromLink.createdAt))
            }
        }
        try writer.deleteUser(userId: from)
        try writer.appendAudit(auditEvent("user.adopted", userId: into, details: [
            "from": .string(from), "keys": .array(keys.map { .string($0.kid) }),
            "registrations": .int(Int64(registrations.count)), "tokenSets": .int(Int64(tokenSets.count)),
        ]))
        return keys.map(\.kid)
    }
}
