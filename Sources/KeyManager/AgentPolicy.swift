import Foundation

/// The agent's policy (`/etc/keymgr/policy.toml`, docs/agent-policy.md): who may run which commands, for which
/// identity users, with keys of which auth types.
///
/// Rules are tried in order; the first whose `who` matches the caller and whose `may` holds the operation decides;
/// no such rule denies. The deciding rule's `for` and `authTypes` then limit what the command may touch: an
/// `AccessScope` the facade enforces.
package struct AgentPolicy: Sendable, Equatable {
    /// One `[[rule]]` table.
    package struct Rule: Sendable, Equatable {
        /// One element of `who`.
        package enum Subject: Sendable, Equatable {
            /// `*`: anyone.
            case anyone
            /// `user:NAME`: the caller whose login name is NAME.
            case user(String)
            /// `uid:N`.
            case uid(UInt32)
            /// `group:NAME`: a caller whose primary or supplementary groups (as the kernel reports them) include NAME.
            case group(String)
        }

        /// `for`: the identity users the rule's commands may act on.
        package enum Users: Sendable, Equatable {
            /// `*`: every user.
            case all
            /// The caller's own identity users (when `includesSelf`) and the users named.
            case named(includesSelf: Bool, names: [String])
        }

        package var who: [Subject]
        /// Operation ids (`key.sign`), command paths that are their aliases (`sign`, `pin change`), or `*`, as
        /// written.
        package var may: [String]
        package var users: Users
        /// nil: any auth type.
        package var authTypes: Set<AuthType>?
        /// The line of the rule's `[[rule]]` header.
        package var line: Int

        /// Whether `may` holds `operation`, by its id or by its command path (an alias).
        package func allows(_ operation: RequestOperation) -> Bool {
            may.contains { $0 == "*" || $0 == operation.id || $0 == operation.commandPath }
        }

        /// Whether the rule allows everything (`may = ["*"]`).
        package var allowsEverything: Bool { may.contains("*") }
    }

    /// The policy file, for messages.
    package var file: String
    package var rules: [Rule]
    /// `[self]`: login names mapped to the identity user ids that are theirs too.
    package var selfMap: [String: [String]]

    package init(file: String, rules: [Rule], selfMap: [String: [String]] = [:]) {
        self.file = file
        self.rules = rules
        self.selfMap = selfMap
    }

    // MARK: Loading

    /// The largest policy file read: a policy is a few dozen lines.
    static let maximumSize = 1 << 20

    /// Reads and validates the policy at `path`: a regular file, owned by root or by `agentUID` (the agent's own
    /// user), writable by no one else.
    ///
    /// - Parameter commandPaths: the CLI's command paths (`sign`, `pin change`, …): `may` names the operations of
    ///   these, by id or by path.
    /// - Throws: `config` naming the file (and the line) and what to do instead.
    package static func load(path: String, agentUID: UInt32, commandPaths: Set<String>) throws -> AgentPolicy {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            throw KeyManagerError(.config, "cannot read the agent's policy \(path) (\(reason)): install one "
                + "(the commented template is contrib/policy.toml), or name another with --policy FILE")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw KeyManagerError(.config, "cannot stat the agent's policy \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw KeyManagerError(.config, "the agent's policy \(path) is not a regular file: make it one")
        }
        guard info.st_uid == 0 || info.st_uid == agentUID else {
            throw KeyManagerError(.config, "the agent's policy \(path) is owned by uid \(info.st_uid): only root or the "
                + "agent's user (uid \(agentUID)) may own it: chown root \(path)")
        }
        guard info.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            throw KeyManagerError(.config, "the agent's policy \(path) is writable by its group or by others, who could "
                + "grant themselves anything: chmod go-w \(path)")
        }
        guard Int(info.st_size) <= maximumSize else {
            throw KeyManagerError(.config, "the agent's policy \(path) is over \(maximumSize / 1024) KiB: a policy is a few rules")
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw KeyManagerError(.config, "cannot read the agent's policy \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += buffer[0..<count]
            guard bytes.count <= maximumSize else {
                throw KeyManagerError(.config, "the agent's policy \(path) is over \(maximumSize / 1024) KiB: a policy is a few rules")
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeyManagerError(.config, "the agent's policy \(path) is not valid UTF-8 text: save it as UTF-8")
        }
        return try AgentPolicy(parsing: text, file: path, commandPaths: commandPaths)
    }

    /// Parses and validates policy text: TOMLKit reads the TOML (`PolicyTOML`), then each table and key is checked.
    /// Errors name `file:line:` of the first mistake in the file and what to write instead.
    package init(parsing text: String, file: String, commandPaths: Set<String>) throws {
        let document = try PolicyTOML.parse(text, file: file)
        var check = PolicyCheck(file: file, lines: document.lines)
        var rules: [Rule] = []
        var selfMap: [String: [String]] = [:]
        for entry in document.root {
            let path = [entry.key]
            switch (entry.key, entry.value) {
            case ("rule", .array(let elements)) where !elements.isEmpty && elements.allSatisfy({ if case .table = $0 { true } else { false } }):
                for (index, element) in elements.enumerated() {
                    guard case .table(let entries) = element else { continue }
                    if let rule = Self.rule(entries, path: path + [String(index)], check: &check, commandPaths: commandPaths) {
                        rules.append(rule)
                    }
                }
            case ("rule", .table):
                check.fail("write [[rule]]: each rule is one table of an array, tried in order", at: path)
            case ("self", .table(let entries)):
                for login in entries {
                    guard let ids = check.strings(login.value, key: login.key, at: path + [login.key]) else { continue }
                    guard !ids.isEmpty, ids.allSatisfy({ !$0.isEmpty }) else {
                        check.fail("[self] maps \(login.key) to nothing: write \(login.key) = \"IDENTITY-USER-ID\" or "
                            + "remove the line", at: path + [login.key])
                        continue
                    }
                    selfMap[login.key] = ids
                }
            case ("self", .array):
                check.fail("write [self] (one table that maps login names to identity user ids), not [[self]]", at: path)
            case (_, .table):
                check.fail("unknown table [\(entry.key)]: the policy has [[rule]] tables and one optional [self] table", at: path)
            case (_, .array(let elements)) where !elements.isEmpty && elements.allSatisfy({ if case .table = $0 { true } else { false } }):
                check.fail("unknown table [[\(entry.key)]]: the policy has [[rule]] tables and one optional [self] table", at: path)
            default:
                check.fail("`\(entry.key) = …` comes before any table: put it under a [[rule]] header (or [self])", at: path)
            }
        }
        try check.throwFirst()
        self.init(file: file, rules: rules, selfMap: selfMap)
    }

    private static let ruleKeys = ["who", "may", "for", "authTypes"]

    /// The rule of the `[[rule]]` at `path` (`["rule", "N"]`), or nil after recording its mistakes in `check`.
    private static func rule(_ entries: [PolicyTOML.Entry], path: [String], check: inout PolicyCheck,
                             commandPaths: Set<String>) -> Rule? {
        let problems = check.count
        var who: [Rule.Subject]?
        var may: [String]?
        var users = Rule.Users.all
        var authTypes: Set<AuthType>?
        for entry in entries {
            let at = path + [entry.key]
            guard ruleKeys.contains(entry.key) else {
                let near = ruleKeys.first { $0.lowercased() == entry.key.lowercased().replacingOccurrences(of: "_", with: "")
                    .replacingOccurrences(of: "-", with: "") }
                check.fail("unknown key \(entry.key) in a [[rule]]\(near.map { ": did you mean \($0)?" } ?? ""); "
                    + "a rule's keys are who, may, for and authTypes", at: at)
                continue
            }
            guard let list = check.strings(entry.value, key: entry.key, at: at) else { continue }
            guard !list.isEmpty else {
                check.fail("\(entry.key) is empty: a rule with an empty \(entry.key) would never apply; "
                    + (entry.key == "who" || entry.key == "may" ? "name at least one, or remove the rule" : "remove the line"),
                    at: at)
                continue
            }
            switch entry.key {
            case "who":
                if let text = list.first(where: { subject($0) == nil }) {
                    check.fail("who = \"\(text)\" is not a subject: write \"*\", \"user:NAME\", \"uid:N\" or \"group:NAME\"", at: at)
                } else {
                    who = list.compactMap(subject)
                }
            case "may":
                let served = RequestOperation.allCases.filter { commandPaths.contains($0.commandPath) }
                if let name = list.first(where: { name in
                    name != "*" && !(RequestOperation(named: name).map { served.contains($0) } ?? false)
                }) {
                    check.fail("may names \"\(name)\", which is not a keymgr command: write \"*\" or command paths as "
                        + "typed after keymgr: \(commandPaths.sorted().map { "\"\($0)\"" }.joined(separator: ", ")), "
                        + "or operation ids: \(served.map { "\"\($0.id)\"" }.sorted().joined(separator: ", "))", at: at)
                } else {
                    may = list
                }
            case "for":
                if list.contains("*") {
                    if list.count != 1 {
                        check.fail("for lists \"*\" (every user) with other names: write for = \"*\" alone, or list the users", at: at)
                    }
                    users = .all
                } else if let empty = list.first(where: { $0.isEmpty || $0.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }) {
                    check.fail("for names \"\(empty)\", which is not an identity user: write \"self\", \"*\" or user ids", at: at)
                } else {
                    users = .named(includesSelf: list.contains("self"), names: list.filter { $0 != "self" })
                }
            default:  // authTypes
                if let name = list.first(where: { AuthType(rawValue: $0) == nil }) {
                    check.fail("authTypes names \"\(name)\": write one or more of "
                        + AuthType.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "), at: at)
                } else {
                    authTypes = Set(list.compactMap { AuthType(rawValue: $0) })
                }
            }
        }
        // A missing key is the rule's mistake, reported on its header, after the mistakes inside it.
        let present = Set(entries.map(\.key))
        if !present.contains("who") {
            check.fail("this [[rule]] has no who: add who = [\"*\"] (anyone) or subjects such as \"user:NAME\", \"group:NAME\"",
                       at: path, after: path)
        } else if !present.contains("may") {
            check.fail("this [[rule]] has no may: add may = [\"key.sign\", …] (operation ids or command paths) or [\"*\"]",
                       at: path, after: path)
        }
        guard check.count == problems, let who, let may else { return nil }
        return Rule(who: who, may: may, users: users, authTypes: authTypes, line: check.lines.line(of: path))
    }

    private static func subject(_ text: String) -> Rule.Subject? {
        if text == "*" { return .anyone }
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let kind = text[..<colon]
        let name = String(text[text.index(after: colon)...])
        guard !name.isEmpty, !name.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F || $0 == ":" }) else {
            return nil
        }
        switch kind {
        case "user": return .user(name)
        case "group": return .group(name)
        case "uid":
            guard name.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let uid = UInt32(name) else { return nil }
            return .uid(uid)
        default: return nil
        }
    }
}
