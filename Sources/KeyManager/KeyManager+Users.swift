import Foundation
import Storage

extension KeyManager {
    /// The userId that `name` (what a person typed after `--user`) stands for, as the CLI contract (docs/cli.md) says:
    /// the one user whose userId is `name`, or whose universalId's `id=` value is `name`, or whose username is
    /// `name`. A name nobody on this device matches comes back unchanged (a new user, or a "no key" error later).
    ///
    /// A journey stores the userId the server gives (`id=dave,ou=user,ou=am-config`), so this is how
    /// `--user dave` finds a journey-bound dave.
    /// - Throws: `usage` (64) naming every match when `name` fits several users in any of those ways (one user's id
    ///   and another's username, say): never a silent pick, since a username is anyone's to set.
    public func resolveUser(_ name: String) throws -> String {
        // Under the agent's policy, only users in its scope are candidates: a name is never resolved to, nor listed
        // as, a user the caller may not see.
        try read { reader in
            // Only the users that could match are read (and their rows checked), not every user of the store; a name
            // a universal id would escape (`,`, `\`, …) is looked for among all of them, unless it is a full id itself.
            let plain = name.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "._-@".unicodeScalars.contains($0) }
            var users = try reader.users(matching: name)
            if !plain && !name.contains("=") {
                let known = Set(users.map(\.userId))
                users += try reader.users().filter { !known.contains($0.userId) && UniversalId.idValue($0.userId) == name }
            }
            let found = try users.filter { user in
                guard user.userId == name || UniversalId.idValue(user.userId) == name || user.username == name else { return false }
                return try reach(user.userId, in: reader) != .hidden
            }
            guard found.count <= 1 else {
                let list = found.map { user in
                    user.userId + (user.username.map { " (username \($0))" } ?? "")
                }.joined(separator: ", ")
                throw KeyManagerError(.usage, "--user \(name) matches \(found.count) users (by user id, id= value or "
                    + "username): \(list); give the full user id with --user, or choose a key with --kid")
            }
            return found.first?.userId ?? name
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
