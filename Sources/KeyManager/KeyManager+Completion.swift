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
    /// Through the agent, only what the caller's policy scope covers: nothing before the policy decided, users in a
    /// limited scope, kids only when the scope covers every user.
    package static func completions(of subject: CompletionSubject, prefix: String, home location: StoreLocation,
                                    context: RequestContext) -> [String] {
        let scope = context.scope
        if context.isServed && scope == nil { return [] }
        if let scope, !scope.coversAllUsers {
            guard case .users = subject, location.home.hasDatabase,
                  let store = try? Store.open(home: location.home, create: false, access: .readOnly, digest: SHA256.hash)
            else { return [] }
            // The caller's linked identity users and those the rule names, by user id (a username decides nothing).
            let mine = scope.includesSelf ? Set(((try? store.read { try $0.personLinks(uid: scope.callerUid) }) ?? []).map(\.userId)) : []
            return completions(of: .users, prefix: prefix, home: location, unscoped: ())
                .filter { scope.lists($0) || (scope.includesSelf && (mine.contains($0) || scope.mapsToSelf($0))) }
        }
        return completions(of: subject, prefix: prefix, home: location, unscoped: ())
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
