import ArgumentParser
import Foundation
import KeyManager

/// The agent's policy: which caller may run which command, asked by the worker after parsing and before running.
///
/// STUB, to be replaced by the policy implementation (`AgentPolicy`): it understands exactly one shape of policy,
/// one rule `[[rule]] who = ["user:NAME", …] may = ["*"]` (these login names may do everything), and denies
/// everything else, including every command when no policy file was loaded.
enum AgentGate {
    /// The login names the loaded policy lets do everything.
    nonisolated(unsafe) private static var allowed: Set<String> = []

    /// Loads the policy file at the agent's start (before it serves); a missing file loads nothing (all denied).
    static func load(policyFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let text = String(decoding: data, as: UTF8.self)
        let significant = text.split(separator: "\n").map { line -> String in
            let code = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return code.filter { !$0.isWhitespace }
        }.filter { !$0.isEmpty }
        guard significant.count == 3, significant[0] == "[[rule]]", significant[2] == "may=[\"*\"]",
              significant[1].hasPrefix("who=["), significant[1].hasSuffix("]") else { return }
        let names = significant[1].dropFirst("who=[".count).dropLast().split(separator: ",").map { entry -> String? in
            guard entry.hasPrefix("\"user:"), entry.hasSuffix("\""), entry.count > 7 else { return nil }
            return String(entry.dropFirst(6).dropLast())
        }
        guard names.allSatisfy({ $0 != nil }) else { return }
        allowed = Set(names.compactMap { $0 })
    }

    /// Throws `unAuthorize` (77) unless the policy lets `caller` run `command`.
    static func authorize(_ command: any ParsableCommand, caller: AgentCaller) throws {
        if allowed.contains(caller.login) { return }
        throw KeyManagerError(.unAuthorize, "denied: the agent's policy does not let \(caller.login) run this command")
    }
}
