import ArgumentParser
import Foundation
import KeyManager

/// The agent's policy applied to one parsed command (docs/agent-policy.md). The gate only maps a command line to
/// an operation (`RequestOperation`, by the command's type) and its target (`AgentTarget`), and asks the policy the
/// request's context carries (loaded by the agent at start; nothing is loaded here). It returns the context with the
/// decision (`AccessScope`), which the facade enforces in every operation on a user or key (`KeyManager.reach`), or
/// throws `denied` (exit 77), recorded in the audit log as `agent.denied`.
enum AgentGate {
    /// The socket the agent serves, for `status`: the path it bound or systemd's (set before the first fork).
    nonisolated(unsafe) static var socket: String?

    /// Loads the policy at the agent's start, before it serves (and forks): the agent hands it to each worker.
    /// - Throws: `config` (78) when the file is missing, unsafe (owned by someone other than root or the agent's
    ///   user, writable by others, a symbolic link, or in a directory someone else could write; `SafePath`) or
    ///   invalid, naming the line.
    static func load(policyFile path: String) throws -> AgentPolicy {
        try SafePath.checkDirectories(above: path, owner: getuid(), what: "the agent's policy")
        // Not followed through a symbolic link: its directories are safe, so no one else can put one there after this.
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
            throw CommandFailure(.config, "the agent's policy \(path) is a symbolic link, which is not followed: "
                + "install the policy file itself there, or name it with --policy FILE")
        }
        return try AgentPolicy.load(path: path, agentUID: getuid())
    }

    /// Decides `command` for the request's caller: the request with the policy's decision.
    /// - Throws: `denied` naming the reason (no rule lets the caller run it, or the deciding rule refuses the auth
    ///   type it would bind).
    static func authorize(_ command: ParsableCommand, request: RequestContext,
                          environment: [String: String]) throws -> RequestContext {
        let target = (command as? AgentTargeted)?.agentTarget ?? AgentTarget()
        guard let caller = request.caller, let policy = request.policy else {
            throw CommandFailure(.denied, "the agent serves without a policy, so it allows nothing: "
                + "ask the device's administrator to check /etc/keymgr/policy.toml")
        }
        guard let operation = operation(of: type(of: command)) else {
            throw CommandFailure(.denied, "`keymgr \(operationPath(of: type(of: command)))` is no operation the agent's "
                + "policy names, so the agent does not serve it: run it without the agent")
        }
        switch policy.decide(caller: caller, operation: operation, authType: target.authType) {
        case .allowed(let scope):
            return request.deciding(scope)
        case .denied(let reason):
            recordDenial(operation: operation, reason: reason, target: target.description, request: request,
                         environment: environment)
            throw CommandFailure(.denied, reason)
        }
    }

    /// The denial in the store's audit log, through the normal audited write. A store that cannot be opened (the
    /// command could not have run either) does not hide the denial.
    private static func recordDenial(operation: RequestOperation, reason: String, target: String?, request: RequestContext,
                                     environment: [String: String]) {
        let home = StoreLocation.resolve(explicit: nil, environment: environment)
        guard let manager = try? KeyManager.open(home: home, context: request, environment: environment) else {
            return
        }
        try? manager.recordDenial(operation: operation.commandPath, reason: reason, target: target)
    }

    /// The operation a command type is: its command path (`sign`, `pin change`) is the alias of exactly one.
    static func operation(of type: any ParsableCommand.Type) -> RequestOperation? {
        RequestOperation(commandPath: operationPath(of: type))
    }

    /// The command path of a command type as a policy's `may` names it: `sign`, `pin change`, `admin revoke`.
    /// `audit list` is `audit` (the same listing).
    static func operationPath(of type: any ParsableCommand.Type) -> String {
        if type == Audit.Show.self { return "audit" }
        return paths[ObjectIdentifier(type)] ?? type.configuration.commandName ?? "\(type)"
    }

    /// Every command path `may` can name: each command that does keymgr's work, as typed after `keymgr`.
    static var commandPaths: Set<String> { Set(paths.values) }

    private static let paths: [ObjectIdentifier: String] = {
        var paths: [ObjectIdentifier: String] = [:]
        func walk(_ type: any ParsableCommand.Type, prefix: [String]) {
            let name = type.configuration.commandName ?? "\(type)"
            let path = prefix + [name]
            if type is any KeymgrCommand.Type, type != Audit.Show.self {
                paths[ObjectIdentifier(type)] = path.joined(separator: " ")
            }
            for sub in type.configuration.subcommands { walk(sub, prefix: path) }
        }
        for sub in Keymgr.configuration.subcommands { walk(sub, prefix: []) }
        return paths
    }()
}

extension AgentPolicy {
    /// Loads the policy at `path` for an agent running as `agentUID`, its `may` checked against this CLI's commands.
    static func load(path: String, agentUID: UInt32) throws -> AgentPolicy {
        try load(path: path, agentUID: agentUID, commandPaths: AgentGate.commandPaths)
    }
}
