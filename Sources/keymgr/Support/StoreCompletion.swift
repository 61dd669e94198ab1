import AgentWire
import ArgumentParser
import Foundation
import KeyManager

/// The shell completions that come from the store: `--user` offers user ids and usernames, `--kid` the kids of usable
/// keys, `audit --event` the events keymgr records. The generated bash, zsh and fish scripts call
/// `keymgr ---completion <command path> -- <option> <words>`; these closures answer, read-only, in one small query.
/// Through the agent they offer only the identity users, and the kids of their keys, that the caller may act on.
///
/// The argument parser calls these closures statically, with no way to hand them the request. `KeymgrMain` binds the
/// request's context to `context`, a task-local value, for the synchronous duration of the parse and no longer: it is
/// not process-wide state (another thread, or the next command line in the same process, sees its own binding or
/// none), and outside a parse it is nil, so a closure called any other way completes nothing.
enum StoreCompletion {
    /// The context of the command line being parsed; nil outside `KeymgrMain`'s parse.
    @TaskLocal static var context: CommandContext?

    /// Names with a blank are left out: the shells split candidates on blanks.
    static let users: @Sendable ([String], Int, String) -> [String] = { words, _, prefix in
        complete(.users, prefix, words).filter { !$0.contains(where: \.isWhitespace) }
    }

    static let kids: @Sendable ([String], Int, String) -> [String] = { words, _, prefix in
        complete(.kids, prefix, words)
    }

    /// Through the agent, only what the policy lets the caller see for the command being completed (issue 32): the
    /// worker decides that command as it would decide the command itself, and offers nothing when it is denied.
    private static func complete(_ subject: CompletionSubject, _ prefix: String, _ words: [String]) -> [String] {
        guard let context else { return [] }
        let request = context.request
        let home = home(in: words, environment: context.environment)
        guard let caller = request.caller else {
            return KeyManager.completions(of: subject, prefix: prefix, home: home, scope: nil)
        }
        guard let policy = request.policy, let command = commandType(in: words),
              let operation = AgentGate.operation(of: command),
              case .allowed(let scope) = policy.decide(caller: caller, operation: operation)
        else { return [] }
        return KeyManager.completions(of: subject, prefix: prefix, home: home, scope: scope)
    }

    /// The command the words being completed name (`keymgr pin change --user …`: `pin change`), or nil for none.
    static func commandType(in words: [String]) -> (any ParsableCommand.Type)? {
        var type: any ParsableCommand.Type = Keymgr.self
        for word in ArgumentScan(completionWords: words).words {
            if let sub = type.configuration.subcommands.first(where: { $0._commandName == word }) { type = sub }
        }
        if let fallback = type.configuration.defaultSubcommand { type = fallback }
        return type == Keymgr.self ? nil : type
    }

    static let auditEvents: @Sendable ([String], Int, String) -> [String] = { _, _, prefix in
        KeyManager.knownAuditEvents.filter { $0.hasPrefix(prefix) }.sorted()
    }

    /// The store the command line being completed names: its `--home DIR` (or `--home=DIR`, which bash splits into
    /// `--home`, `=`, `DIR`), else `$KEYMGR_HOME`, else the default, as the command itself would resolve it in
    /// `environment` (the request's).
    static func home(in words: [String], environment: [String: String]) -> StoreLocation {
        var explicit = ArgumentScan(completionWords: words).value(of: "--home")
        // A shell passes `~/store` as typed when completing.
        if let path = explicit, path.hasPrefix("~/"), let user = environment["HOME"] {
            explicit = user + path.dropFirst(1)
        }
        return StoreLocation.resolve(explicit: explicit, environment: environment)
    }
}
