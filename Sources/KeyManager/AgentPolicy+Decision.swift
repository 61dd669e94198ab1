import Foundation

extension AgentPolicy {
    /// What the policy says to one request.
    package enum Decision: Sendable, Equatable {
        /// The command may run, within this scope.
        case allowed(AccessScope)
        /// The command may not run; the reason names the rule (or its absence) and what to do.
        case denied(reason: String)
    }

    /// Decides `operation` for `caller`.
    ///
    /// The first rule whose `who` matches the caller and whose `may` holds the operation decides; none: denied.
    /// `authType` is the auth type the command would bind (`bind`/`rebind --auth-type`), checked against the deciding
    /// rule's `authTypes` here so that a refused type is refused before any PIN is asked.
    ///
    /// - Parameter groupId: the gid of a group name (`getgrnam` unless a test injects another).
    package func decide(caller: AgentCaller, operation: RequestOperation, authType: AuthType? = nil,
                       groupId: (String) -> UInt32? = AgentPolicy.systemGroupId) -> Decision {
        let who = Self.describe(caller)
        guard let index = rules.firstIndex(where: { $0.allows(operation) && matches($0, caller, groupId) }) else {
            return .denied(reason: "no rule of \(file) lets \(who) run `keymgr \(operation.commandPath)`: "
                + "ask the device's administrator if you need it")
        }
        let rule = rules[index]
        let ruleName = "rule \(index + 1) (\(file):\(rule.line))"
        // The administrator's links the policy itself makes; the store's person links are read by the facade.
        let selfIds = Set(selfMap[caller.login] ?? [])
        if let authType, let allowed = rule.authTypes, !allowed.contains(authType) {
            return .denied(reason: "\(ruleName) lets \(who) use only keys of "
                + allowed.map(\.rawValue).sorted().joined(separator: ", ") + ", not \(authType.rawValue): choose one of those")
        }
        let users: AccessScope.Users
        let usersReason: String
        switch rule.users {
        case .all:
            users = .all
            usersReason = ""
        case .named(let includesSelf, let names):
            users = .limited(includesSelf: includesSelf, ids: Set(names))
            let listed = names.map { "\"\($0)\"" }
            usersReason = "for = [" + ((includesSelf ? ["\"self\""] : []) + listed).joined(separator: ", ") + "]"
        }
        return .allowed(AccessScope(
            operation: operation, caller: who, callerUid: caller.uid, callerLogin: caller.login, selfIds: selfIds,
            users: users, authTypes: rule.authTypes,
            othersPINKeysNeedPIN: !rule.allowsEverything, rule: ruleName, usersReason: usersReason))
    }

    /// `decide` for a command path or an operation id (`sign`, `key.sign`); a name of neither is denied.
    package func decide(caller: AgentCaller, operation name: String, authType: AuthType? = nil,
                        groupId: (String) -> UInt32? = AgentPolicy.systemGroupId) -> Decision {
        guard let operation = RequestOperation(named: name) else {
            return .denied(reason: "no rule of \(file) lets \(Self.describe(caller)) run `keymgr \(name)`: "
                + "ask the device's administrator if you need it")
        }
        return decide(caller: caller, operation: operation, authType: authType, groupId: groupId)
    }

    /// `alice (uid 1001)`.
    package static func describe(_ caller: AgentCaller) -> String { "\(caller.login) (uid \(caller.uid))" }

    private func matches(_ rule: Rule, _ caller: AgentCaller, _ groupId: (String) -> UInt32?) -> Bool {
        rule.who.contains { subject in
            switch subject {
            case .anyone: true
            case .user(let name): caller.login == name
            case .uid(let uid): caller.uid == uid
            case .group(let name):
                // The kernel's word on the caller's groups (SO_PEERCRED, SO_PEERGROUPS), not the group file's member list.
                groupId(name).map { caller.gid == $0 || caller.groups.contains($0) } ?? false
            }
        }
    }

    /// The gid of the group `name`, from the system's group database; nil when there is none.
    package static func systemGroupId(_ name: String) -> UInt32? {
        var group = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        let status = getgrnam_r(name, &group, &buffer, buffer.count, &result)
        guard status == 0, result != nil else { return nil }
        return group.gr_gid
    }
}
