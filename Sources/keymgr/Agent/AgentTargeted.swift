import KeyManager

/// What a command names that the agent's policy decides on: the users (`--user`) and keys (`--kid`) it acts on, and
/// the auth type it would bind (`--auth-type`). The gate refuses a refused auth type before any PIN is asked and
/// names the target in its denials; the facade checks the users and keys themselves (a command that declares
/// nothing still cannot act outside the caller's scope).
struct AgentTarget: Equatable {
    var users: [String] = []
    var kids: [String] = []
    var authType: AuthType?

    /// For messages and the audit log: `alice`, `kid 3f2a…`, or nil.
    var description: String? {
        let named = users + kids.map { "kid \($0)" }
        return named.isEmpty ? nil : named.joined(separator: ", ")
    }
}

/// A command that names users, keys or an auth type (see `AgentTarget`).
protocol AgentTargeted {
    var agentTarget: AgentTarget { get }
}

extension Bind: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: [user], authType: authType?.authType) }
}

extension Rebind: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: [user], kids: kid.map { [$0] } ?? [], authType: authType.authType) }
}

extension Sign: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: user.map { [$0] } ?? [], kids: kid.map { [$0] } ?? []) }
}

extension Revoke: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: user.map { [$0] } ?? [], kids: kid.map { [$0] } ?? []) }
}

extension Export: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: user.map { [$0] } ?? [], kids: kid.map { [$0] } ?? []) }
}

extension List: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: user.map { [$0] } ?? []) }
}

extension Pin.Change: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: [user], kids: kid.map { [$0] } ?? []) }
}

extension Audit: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: listing.user.map { [$0] } ?? []) }
}

extension Audit.Show: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: listing.user.map { [$0] } ?? []) }
}

extension Admin.Devices: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: user.map { [$0] } ?? []) }
}

extension Admin.RevokeDevice: AgentTargeted {
    var agentTarget: AgentTarget { AgentTarget(users: [user]) }
}

extension Dcr.Register: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Dcr.Show: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Dcr.Delete: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Token.Import: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Token.Show: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Token.Refresh: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Token.Revoke: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Token.Print: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Dpop.Proof: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
extension Login: AgentTargeted { var agentTarget: AgentTarget { AgentTarget(users: [user]) } }
