import Foundation
import Storage

/// What a shell completion asks the store for.
public enum CompletionSubject: Sendable {
    /// User ids and usernames (what `--user` accepts).
    case users
    /// Kids of usable keys (what `--kid` accepts).
    case kids
}

extension KeyManager {
    /// How many candidates a completion offers at most.
    public static let completionLimit = 200

    /// Names the store holds that start with `prefix`, for the shell's completion of `--user` and `--kid`.
    ///
    /// Reads the database read-only without the master key (ids and kids are not secret, and a completion is a hint:
    /// the command itself checks the store when it runs) and writes nothing, not even a store that was never
    /// initialised. Any failure is no candidate: a completion must never print an error into the shell's line.
    ///
    /// Through the agent, only what the caller's policy scope covers: nothing before the policy decided; in a limited
    /// scope, the user ids (and their usernames) of the identities the caller may act on and the kids of their usable
    /// keys, never another person's (issue 32, "A person can see the device").
    package static func completions(of subject: CompletionSubject, prefix: String, home location: StoreLocation,
                                    context: RequestContext) -> [String] {
        let scope = context.scope
        if context.isServed && scope == nil { return [] }
        return completions(of: subject, prefix: prefix, home: location, scope: scope)
    }

    /// The candidates within `scope` (the policy's decision for the command being completed, which the caller
    /// made); nil: the whole store (an embedded command, or a rule that covers every user).
    package static func completions(of subject: CompletionSubject, prefix: String, home location: StoreLocation,
                                    scope: AccessScope?) -> [String] {
        if let scope, !scope.coversAllUsers {
            return scopedCompletions(of: subject, prefix: prefix, home: location, scope: scope)
        }
        return completions(of: subject, prefix: prefix, home: location, unscoped: ())
    }

    /// The candidates of a limited scope: the identity users it covers (the caller's linked ones and those the rule
    /// names, by user id: a username decides nothing), then what of theirs starts with `prefix`.
    private static func scopedCompletions(of subject: CompletionSubject, prefix: String, home location: StoreLocation,
                                          scope: AccessScope) -> [String] {
        guard location.home.hasDatabase,
              let store = try? Store.open(home: location.home, create: false, access: .readOnly, digest: SHA256.hash)
        else { return [] }
        return (try? store.read { reader -> [String] in
            let mine = scope.includesSelf ? Set(try reader.personLinks(uid: scope.callerUid).map(\.userId)) : []
            let visible = try reader.users().filter { user in
                scope.lists(user.userId) || (scope.includesSelf && (mine.contains(user.userId) || scope.mapsToSelf(user.userId)))
            }
            switch subject {
            case .users:
                let ids = visible.map(\.userId).filter { $0.hasPrefix(prefix) }
                let names = visible.compactMap(\.username).filter { $0.hasPrefix(prefix) && !ids.contains($0) }
                return Array(Set(ids + names).sorted().prefix(completionLimit))
            case .kids:
                var kids: [String] = []
                for user in visible {
                    kids += try reader.keys(userId: user.userId, statuses: [.active, .locked]).map(\.kid).filter { $0.hasPrefix(prefix) }
                }
                return Array(kids.sorted().prefix(completionLimit))
            }
        }) ?? []
    }

    private static func completions(of subject: CompletionSubject, prefix: String, home location: StoreLocation,
                                    unscoped: Void) -> [String] {
        guard location.home.hasDatabase,
              let store = try? Store.open(home: location.home, create: false, access: .readOnly, digest: SHA256.hash)
        else { return [] }
        return (try? store.read { reader in
            switch subject {
            case .users: try reader.userNames(startingWith: prefix, limit: completionLimit)
            case .kids: try reader.usableKids(startingWith: prefix, limit: completionLimit)
            }
        }) ?? []
    }
}
