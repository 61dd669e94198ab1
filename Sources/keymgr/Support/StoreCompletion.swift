import Foundation
import KeyManager

/// The shell completions that come from the store: `--user` offers user ids and usernames, `--kid` the kids of usable
/// keys, `audit --event` the events keymgr records. The generated bash, zsh and fish scripts call
/// `keymgr ---completion <command path> -- <option> <words>`; these closures answer, read-only, in one small query.
enum StoreCompletion {
    /// Names with a blank are left out: the shells split candidates on blanks.
    static let users: @Sendable ([String], Int, String) -> [String] = { words, _, prefix in
        KeyManager.completions(of: .users, prefix: prefix, home: home(in: words), context: ServedRequest.context).filter { !$0.contains(where: \.isWhitespace) }
    }

    static let kids: @Sendable ([String], Int, String) -> [String] = { words, _, prefix in
        KeyManager.completions(of: .kids, prefix: prefix, home: home(in: words), context: ServedRequest.context)
    }

    static let auditEvents: @Sendable ([String], Int, String) -> [String] = { _, _, prefix in
        KeyManager.knownAuditEvents.filter { $0.hasPrefix(prefix) }.sorted()
    }

    /// The store the command line being completed names: its `--home DIR` (or `--home=DIR`), else `$KEYMGR_HOME`,
    /// else the default, as the command itself would resolve it.
    static func home(in words: [String]) -> StoreLocation {
        var explicit: String?
        for (index, word) in words.enumerated() {
            if word == "--home", index + 1 < words.count {
                // bash splits `--home=DIR` into `--home`, `=`, `DIR`.
                explicit = words[index + 1] == "=" && index + 2 < words.count ? words[index + 2] : words[index + 1]
            } else if word.hasPrefix("--home=") {
                explicit = String(word.dropFirst("--home=".count))
            }
        }
        // A shell passes `~/store` as typed when completing.
        if let path = explicit, path.hasPrefix("~/"), let user = ProcessEnvironment.variables["HOME"] {
            explicit = user + path.dropFirst(1)
        }
        return StoreLocation.resolve(explicit: explicit, environment: ProcessEnvironment.variables)
    }
}
