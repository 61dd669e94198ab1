import Foundation
import Storage

extension KeyManager {
    /// The userId that `name` (what a person typed after `--user`) stands for, as the CLI contract (docs/cli.md) says:
    /// the user whose userId is `name`, else whose universalId's `id=` value is `name`, else whose username is
    /// `name`. A name nobody on this device matches comes back unchanged (a new user, or a "no key" error later).
    ///
    /// A journey stores the userId the server gives (`id=dave,ou=user,ou=am-config`), so this is how
    /// `--user dave` finds a journey-bound dave.
    /// - Throws: `usage` listing the matches when `name` fits several users at the first stage that matches.
    public func resolveUser(_ name: String) throws -> String {
        // Under the agent's policy, only users in its scope are candidates (a name is never resolved to, nor listed
        // as, a user the caller may not see); an exact user id is left for the operation to allow or deny.
        let scope = AccessScope.current
        return try read { reader in
            if try reader.user(id: name) != nil { return name }
            // Only the users that could match are read (and their rows checked), not every user of the store; a name
            // a universal id would escape (`,`, `\`, …) is looked for among all of them.
            let plain = name.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "._-@".unicodeScalars.contains($0) }
            let users = plain ? try reader.users(matching: name) : try reader.users()
            let stages: [(String, (UserRecord) -> Bool)] = [
                ("whose user id is id=\(name),…", { UniversalId.idValue($0.userId) == name }),
                ("named \(name)", { $0.username == name }),
            ]
            for (description, matches) in stages {
                let found = users.filter { matches($0) && (scope?.allows(userId: $0.userId, username: $0.username) ?? true) }
                guard found.count <= 1 else {
                    let list = found.map { user in user.userId + (user.username.map { " (\($0))" } ?? "") }
                        .joined(separator: ", ")
                    throw KeyManagerError(.usage, "--user \(name) matches \(found.count) users \(description): \(list); "
                        + "give the full user id with --user, or choose a key with --kid")
                }
                if let user = found.first { return user.userId }
            }
            return name
        }
    }

    /// `resolveUser` for an optional name.
    public func resolveUser(_ name: String?) throws -> String? {
        try name.map { try resolveUser($0) }
    }
}

extension KeyManager {
    /// The key a usernameless journey signs with: the one `kid` names, else the only usable key of `userId`,
    /// else the only usable key on this device.
    /// - Throws: `usage` listing the candidates when several keys fit and nothing chooses;
    ///   `clientNotRegistered` when none does.
    public func chooseKey(userId: String?, kid: String?) throws -> UserKey {
        if kid != nil || userId != nil {
            let selected = try selectKey(userId: userId, kid: kid, statuses: KeyStatus.usable, issuer: nil, verb: "sign with")
            return UserKey(selected.key, username: selected.username)
        }
        let candidates = try keys(userId: nil, statuses: KeyStatus.usable)
        guard let only = candidates.first else {
            throw KeyManagerError(.clientNotRegistered, "this device holds no usable key to sign with: bind one with `keymgr bind --journey NAME --user NAME`")
        }
        guard candidates.count == 1 else {
            let list = candidates.map { "\($0.kid) (\($0.username ?? $0.userId))" }.joined(separator: ", ")
            throw KeyManagerError(.usage, "the server leaves the choice of user to keymgr and this device holds \(candidates.count) keys: "
                + "choose one with --user NAME or --kid KID: \(list)")
        }
        return only
    }
}

extension KeyManager {
    /// What a journey's NameCallback gets: the username stored for the user `name` resolves to (or for the user of
    /// the key `kid`), else `name` itself. With neither, the user of the device's only usable key; "" when there
    /// is no single one (a usernameless journey asks no name).
    public func login(forUser name: String?, kid: String? = nil) throws -> String {
        if let name {
            let userId = try resolveUser(name)
            try authorize(userId: userId)
            return try read { try $0.user(id: userId)?.username } ?? name
        }
        let keys = try self.keys(userId: nil, statuses: KeyStatus.usable)
        let key = kid.map { kid in keys.first { $0.kid == kid } } ?? (keys.count == 1 ? keys.first : nil)
        guard let key else { return "" }
        return key.username ?? key.userId
    }
}
