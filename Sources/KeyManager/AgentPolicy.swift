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

    /// Parses and validates policy text. Errors name `file:line:` and what to write instead.
    package init(parsing text: String, file: String, commandPaths: Set<String>) throws {
        let tables = try PolicyTOML.parse(text, file: file)
        var rules: [Rule] = []
        var selfMap: [String: [String]] = [:]
        var selfLine: Int?
        for table in tables {
            func fail(_ message: String, line: Int? = nil) -> KeyManagerError {
                KeyManagerError(.config, "\(file):\(line ?? table.line): \(message)")
            }
            switch (table.name, table.isArray) {
            case ("rule", true):
                rules.append(try Self.rule(table, file: file, commandPaths: commandPaths))
            case ("rule", false):
                throw fail("write [[rule]]: each rule is one table of an array, tried in order")
            case ("self", false):
                if let selfLine { throw fail("a second [self] table: put every login name in the one on line \(selfLine)") }
                selfLine = table.line
                for entry in table.entries {
                    let ids: [String]
                    switch entry.value {
                    case .string(let id): ids = [id]
                    case .array(let list): ids = list
                    }
                    guard !ids.isEmpty, ids.allSatisfy({ !$0.isEmpty }) else {
                        throw fail("[self] maps \(entry.key) to nothing: write \(entry.key) = \"IDENTITY-USER-ID\" or remove the line",
                                   line: entry.line)
                    }
                    selfMap[entry.key] = ids
                }
            case ("self", true):
                throw fail("write [self] (one table that maps login names to identity user ids), not [[self]]")
            default:
                throw fail("unknown table [\(table.isArray ? "[" : "")\(table.name)\(table.isArray ? "]" : "")]: "
                    + "the policy has [[rule]] tables and one optional [self] table")
            }
        }
        self.init(file: file, rules: rules, selfMap: selfMap)
    }

    private static let ruleKeys = ["who", "may", "for", "authTypes"]

    private static func rule(_ table: PolicyTOML.Table, file: String, commandPaths: Set<String>) throws -> Rule {
        func fail(_ message: String, line: Int) -> KeyManagerError {
            KeyManagerError(.config, "\(file):\(line): \(message)")
        }
        var who: [Rule.Subject]?
        var may: [String]?
        var users = Rule.Users.all
        var authTypes: Set<AuthType>?
        for entry in table.entries {
            let list: [String]
            switch entry.value {
            case .string(let value): list = [value]
            case .array(let values): list = values
            }
            guard !list.isEmpty else {
                throw fail("\(entry.key) is empty: a rule with an empty \(entry.key) would never apply; "
                    + (entry.key == "who" || entry.key == "may" ? "name at least one, or remove the rule" : "remove the line"),
                    line: entry.line)
            }
            switch entry.key {
            case "who":
                who = try list.map { text in
                    guard let subject = subject(text) else {
                        throw fail("who = \"\(text)\" is not a subject: write \"*\", \"user:NAME\", \"uid:N\" or \"group:NAME\"",
                                   line: entry.line)
                    }
                    return subject
                }
            case "may":
                let served = RequestOperation.allCases.filter { commandPaths.contains($0.commandPath) }
                for name in list where name != "*" {
                    guard let operation = RequestOperation(named: name), served.contains(operation) else {
                        throw fail("may names \"\(name)\", which is not a keymgr command: write \"*\" or command paths as "
                            + "typed after keymgr: \(commandPaths.sorted().map { "\"\($0)\"" }.joined(separator: ", ")), "
                            + "or operation ids: \(served.map { "\"\($0.id)\"" }.sorted().joined(separator: ", "))",
                            line: entry.line)
                    }
                }
                may = list
            case "for":
                if list.contains("*") {
                    guard list.count == 1 else {
                        throw fail("for lists \"*\" (every user) with other names: write for = \"*\" alone, or list the users", line: entry.line)
                    }
                    users = .all
                } else {
                    if let empty = list.first(where: { $0.isEmpty || $0.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }) {
                        throw fail("for names \"\(empty)\", which is not an identity user: write \"self\", \"*\" or user ids", line: entry.line)
                    }
                    users = .named(includesSelf: list.contains("self"), names: list.filter { $0 != "self" })
                }
            case "authTypes":
                authTypes = Set(try list.map { name in
                    guard let type = AuthType(rawValue: name) else {
                        throw fail("authTypes names \"\(name)\": write one or more of "
                            + AuthType.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "), line: entry.line)
                    }
                    return type
                })
            default:
                let near = ruleKeys.first { $0.lowercased() == entry.key.lowercased().replacingOccurrences(of: "_", with: "")
                    .replacingOccurrences(of: "-", with: "") }
                throw fail("unknown key \(entry.key) in a [[rule]]\(near.map { ": did you mean \($0)?" } ?? ""); "
                    + "a rule's keys are who, may, for and authTypes", line: entry.line)
            }
        }
        guard let who else {
            throw fail("this [[rule]] has no who: add who = [\"*\"] (anyone) or subjects such as \"user:NAME\", \"group:NAME\"",
                       line: table.line)
        }
        guard let may else {
            throw fail("this [[rule]] has no may: add may = [\"key.sign\", …] (operation ids or command paths) or [\"*\"]", line: table.line)
        }
        return Rule(who: who, may: may, users: users, authTypes: authTypes, line: table.line)
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
