import ArgumentParser
import Foundation
import KeyManager

/// The agent's policy: which caller may run which command, asked by the worker after parsing and before running.
///
/// STUB, to be replaced by the policy implementation (`AgentPolicy`): it understands exactly one policy, the one
/// rule `[[rule]] who = ["user:root"] may = ["*"]` (root may do everything), and denies everything else, including
/// every command when no policy file was loaded.
enum AgentGate {
    /// The policy loaded at the agent's start.
    nonisolated(unsafe) private static var rootMayDoEverything = false

    /// Loads the policy file at the agent's start (before it serves); a missing file loads nothing (all denied).
    static func load(policyFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let text = String(decoding: data, as: UTF8.self)
        let significant = text.split(separator: "\n").map { line -> String in
            let code = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return code.filter { !$0.isWhitespace }
        }.filter { !$0.isEmpty }
        rootMayDoEverything = significant == ["[[rule]]", "who=[\"user:root\"]", "may=[\"*\"]"]
    }

    /// Throws `unAuthorize` (77) unless the policy lets `caller` run `command`.
    static func authorize(_ command: any ParsableCommand, caller: AgentCaller) throws {
        if rootMayDoEverything && caller.uid == 0 { return }
        throw KeyManagerError(.unAuthorize, "denied: the agent's policy does not let \(caller.login) run this command")
    }
}
