import Foundation
import Storage

// Which key a command means: by kid (or a unique prefix of one), or a user's only key.

extension KeyManager {
    /// Picks one key: by kid, or the user's only key with a status in `statuses` (optionally for one issuer).
    /// Several candidates: a usage error listing them, as the Ping SDK's key selection asks the user to choose.
    ///
    /// Under the agent's policy, a key or user out of the caller's scope is never found (the same words as one that
    /// does not exist: no kid, issuer or auth type of it is named), and (when `using` it) its auth type must be allowed.
    func selectKey(userId: String?, kid: String?, statuses: Set<KeyStatus>, issuer: String?,
                   verb: String, using: Bool = true) throws -> KeyListing {
        let listing = try selectKeyInStore(userId: userId, kid: kid, statuses: statuses, issuer: issuer, verb: verb)
        try authorize(listing.key, using: using)
        return listing
    }

    private func selectKeyInStore(userId: String?, kid: String?, statuses: Set<KeyStatus>, issuer: String?,
                                  verb: String) throws -> KeyListing {
        try read { reader in
            let sees = try visibility(in: reader)
            if let kid {
                guard let key = try Self.key(named: kid, in: reader, visible: sees), userId == nil || key.userId == userId else {
                    throw KeyManagerError(.clientNotRegistered, "no key \(kid)\(userId.map { " for user \($0)" } ?? "") on this device: see `keymgr list`")
                }
                guard key.status == .active || key.status == .locked else {
                    throw KeyManagerError(.clientNotRegistered, "key \(kid) was \(key.status.rawValue)\(key.revokedAt.map { " at \(Timestamp.string(from: $0))" } ?? ""): bind the user again with `keymgr bind --user \(key.userId)`")
                }
                return KeyListing(key: key, username: try reader.user(id: key.userId)?.username)
            }
            guard let userId else { throw KeyManagerError(.usage, "name the key to \(verb) with --user or --kid") }
            // Every candidate row's MAC is checked as it is read, and the username below with its user row.
            var candidates = try sees(userId) ? try reader.keys(userId: userId, statuses: Set(statuses.map(\.record)))
                .map { KeyListing(key: $0, username: nil) } : []
            if let issuer { candidates = candidates.filter { $0.key.issuer == issuer } }
            guard let first = candidates.first else {
                // A key `tpm recover` revoked: the person binds again (which they may do for their own identity).
                if try sees(userId), statuses.contains(.active), try reader.keys(userId: userId, statuses: [.revoked])
                    .contains(where: { $0.revokeReason?.hasPrefix(Self.tpmReplacedReason) == true }) {
                    throw KeyManagerError(.clientNotRegistered, "the key of user \(userId) on this device was revoked: "
                        + "\(Self.tpmReplacedReason); bind a new one with `keymgr bind --user \(userId)`")
                }
                // Through the agent under a limited scope: the same words whether the user does not exist or is
                // someone else's, so no hint to bind it (which someone else's would refuse).
                guard context.scope?.coversAllUsers != false else {
                    throw KeyManagerError(.clientNotRegistered, "user \(userId) has no key on this device that you may use: "
                        + "`keymgr list` shows yours")
                }
                throw KeyManagerError(.clientNotRegistered, "user \(userId) has no key on this device: bind one with `keymgr bind --user \(userId)`")
            }
            guard candidates.count == 1 else {
                let list = candidates.map { "\($0.key.kid) (issuer \($0.key.issuer), \($0.key.authType.rawValue))" }.joined(separator: ", ")
                throw KeyManagerError(.usage, "user \(userId) has \(candidates.count) keys on this device: choose one with --kid: \(list)")
            }
            return KeyListing(key: first.key, username: try reader.user(id: userId)?.username)
        }
    }

    /// The key a `--kid` value names: its whole kid, or (as git shortens hashes) any prefix of at least
    /// `shortKidLength` characters that only one kid starts with. Several matches: a usage error listing them.
    ///
    /// `visible`: whether the caller may see a key of this user (`visibility(in:)`); a key it may not is not there.
    static func key(named text: String, in reader: StoreReader, visible: (String) throws -> Bool) throws -> UserKeyRecord? {
        if let exact = try reader.key(kid: text) { return try visible(exact.userId) ? exact : nil }
        guard text.count >= shortKidLength else { return nil }
        let matches = try reader.keys(kidPrefix: text, limit: 50).filter { try visible($0.userId) }.prefix(10)
        guard matches.count <= 1 else {
            throw KeyManagerError(.usage, "more than one key starts with \(text): give more of the kid, e.g. one of "
                + matches.map(\.kid).joined(separator: ", "))
        }
        return matches.first
    }

    /// Whether the caller may see the identity user of a key, decided by `reach` once per user in `reader`'s snapshot.
    func visibility(in reader: StoreReader) throws -> (String) throws -> Bool {
        guard context.scope != nil else { return { _ in true } }
        var decided: [String: Bool] = [:]
        return { userId in
            if let known = decided[userId] { return known }
            let sees = try self.reach(userId, in: reader) != .hidden
            decided[userId] = sees
            return sees
        }
    }

    /// How many characters of a kid tables show, and the shortest prefix `--kid` accepts.
    public static let shortKidLength = 8
}
