import ArgumentParser
import Foundation
import KeyManager
import XCTest
@testable import keymgr

/// The shipped policy template (contrib/policy.toml) and the gate that applies a policy to a parsed command.
final class PolicyTemplateTests: XCTestCase {
    static let template = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("contrib/policy.toml")

    func template() throws -> AgentPolicy {
        try AgentPolicy(parsing: try String(contentsOf: Self.template, encoding: .utf8), file: "/etc/keymgr/policy.toml",
                        commandPaths: AgentGate.commandPaths)
    }

    /// Groups as a device with the template installed has them.
    func groupId(_ name: String) -> UInt32? { name == "keymgr-admins" ? 990 : nil }

    func person(_ login: String, uid: UInt32 = 1001, groups: [UInt32] = []) -> AgentCaller {
        AgentCaller(uid: uid, gid: uid, pid: 4242, groups: groups, login: login)
    }

    func decide(_ template: AgentPolicy, _ caller: AgentCaller, _ operation: String, _ authType: AuthType? = nil) -> AccessScope? {
        if case .allowed(let scope) = template.decide(caller: caller, operation: operation, authType: authType, groupId: groupId) {
            return scope
        }
        return nil
    }

    func testTheCommandPathsAreTheCLIs() {
        let paths = AgentGate.commandPaths
        for path in ["status", "users", "list", "bind", "rebind", "sign", "revoke", "pin change", "audit", "audit verify",
                     "admin revoke", "admin devices", "server set", "sync", "token print", "dpop proof", "login", "export",
                     "config set", "master rotate", "tpm reset-lockout"] {
            XCTAssertTrue(paths.contains(path), path)
        }
        XCTAssertFalse(paths.contains("pin"), "a command group is not a path")
        XCTAssertFalse(paths.contains("audit list"), "audit list is audit")
        XCTAssertEqual(AgentGate.operationPath(of: Pin.Change.self), "pin change")
        XCTAssertEqual(AgentGate.operationPath(of: Audit.Show.self), "audit")
        XCTAssertEqual(AgentGate.operationPath(of: Admin.RevokeDevice.self), "admin revoke")
        XCTAssertEqual(AgentGate.operationPath(of: SyncCommand.self), "sync")
    }

    func testTheShippedTemplateParsesAndDecidesAsItsCommentsSay() throws {
        let policy = try template()
        XCTAssertEqual(policy.rules.count, 5)
        // Administrators: everything, without another person's PIN.
        let root = try XCTUnwrap(decide(policy, person("root", uid: 0), "master rotate"))
        XCTAssertFalse(root.othersPINKeysNeedPIN)
        XCTAssertNotNil(decide(policy, person("erin", groups: [990]), "admin revoke"))
        XCTAssertNil(decide(policy, person("erin"), "admin revoke"))
        // The sync timer's user syncs every user, and does nothing else.
        XCTAssertEqual(decide(policy, person("keymgr", uid: 999), "sync")?.users, .all)
        XCTAssertNil(decide(policy, person("keymgr", uid: 999), "admin revoke"))
        XCTAssertNil(decide(policy, person("alice"), "sync"))
        // The kiosk: any user, PIN keys only.
        let kiosk = try XCTUnwrap(decide(policy, person("kiosk"), "sign"))
        XCTAssertEqual(kiosk.users, .all)
        XCTAssertEqual(kiosk.authTypes, [.applicationPIN])
        XCTAssertNotNil(decide(policy, person("kiosk"), "bind", .applicationPIN))
        XCTAssertNil(decide(policy, person("kiosk"), "bind", AuthType.none))
        // A shared account revokes only identity users linked to it (none: its binds link nothing).
        XCTAssertEqual(decide(policy, person("kiosk"), "revoke")?.users, .limited(includesSelf: true, ids: []))
        // A person with an account: their own identity only, and no administration.
        let alice = try XCTUnwrap(decide(policy, person("alice"), "sign"))
        XCTAssertEqual(alice.users, .limited(includesSelf: true, ids: []))
        XCTAssertTrue(alice.othersPINKeysNeedPIN)
        for operation in ["status", "users", "list", "pin change", "token print", "login"] {
            XCTAssertNotNil(decide(policy, person("alice"), operation), operation)
        }
        // Finding 4: people bind, rebind and revoke their own NONE and PIN keys.
        for (operation, type) in [("bind", AuthType.none), ("bind", .applicationPIN), ("rebind", AuthType.none), ("revoke", nil)] as [(String, AuthType?)] {
            let own = try XCTUnwrap(decide(policy, person("alice"), operation, type), operation)
            XCTAssertEqual(own.users, .limited(includesSelf: true, ids: []), operation)
        }
        XCTAssertNil(decide(policy, person("alice"), "bind", .biometricOnly))
        for operation in ["server set", "admin devices", "master rotate", "config set", "sync", "person link"] {
            XCTAssertNil(decide(policy, person("alice"), operation), operation)
        }
    }

    func testTheGateDecidesTheRequestsScopeOrDenies() throws {
        let policy = try template()
        func request(_ caller: AgentCaller, policy: AgentPolicy? = policy) -> RequestContext {
            RequestContext(caller: caller, policy: policy)
        }
        let alice = person("alice")
        let decided = try AgentGate.authorize(try Keymgr.parseAsRoot(["sign", "--user", "alice"]), request: request(alice),
                                                environment: ProcessInfo.processInfo.environment)
        XCTAssertEqual(decided.scope?.operation, .keySign)
        XCTAssertEqual(decided.scope?.users, .limited(includesSelf: true, ids: []))
        XCTAssertEqual(decided.caller, alice)
        XCTAssertThrowsError(try AgentGate.authorize(try Keymgr.parseAsRoot(["server", "show"]), request: request(alice),
                                                environment: ProcessInfo.processInfo.environment)) { error in
            XCTAssertEqual((error as? any KeymgrFailure)?.code, .denied)
            XCTAssertEqual(KeyManagerError.Code.denied.exitStatus, 77)
            XCTAssertTrue("\(error)".contains("lets alice (uid 1001) run `keymgr server show`"), "\(error)")
        }
        // The kiosk binding a NONE key: refused by the deciding rule before any PIN is asked.
        XCTAssertThrowsError(try AgentGate.authorize(
            try Keymgr.parseAsRoot(["bind", "--user", "x", "--auth-type", "none"]), request: request(person("kiosk")),
            environment: ProcessInfo.processInfo.environment)) { error in
            XCTAssertTrue("\(error)".contains("use only keys of APPLICATION_PIN, not NONE"), "\(error)")
        }
        // No policy: nothing is allowed.
        XCTAssertThrowsError(try AgentGate.authorize(try Keymgr.parseAsRoot(["status"]),
                                                     request: request(person("root", uid: 0), policy: nil),
                                                     environment: ProcessInfo.processInfo.environment))
    }

    /// Every command the CLI has is exactly one operation, whose command path is its alias; the ids are stable and
    /// distinct, and a policy naming ids decides as one naming the same commands by path.
    func testEveryCommandIsOneOperationAndIdsMeanWhatTheirAliasesMean() throws {
        let paths = AgentGate.commandPaths
        XCTAssertEqual(Set(paths.compactMap { RequestOperation(commandPath: $0) }).count, paths.count,
                       "a command path with no operation: \(paths.filter { RequestOperation(commandPath: $0) == nil })")
        XCTAssertEqual(Set(RequestOperation.allCases.map(\.commandPath)), paths, "an operation with no command")
        XCTAssertEqual(AgentGate.operation(of: Sign.self), .keySign)
        XCTAssertEqual(AgentGate.operation(of: Admin.RevokeDevice.self), .adminRevoke)
        XCTAssertEqual(AgentGate.operation(of: Audit.Show.self), .auditList)
        XCTAssertEqual(AgentGate.operation(of: Login.self), .tokenLogin)
        for operation in RequestOperation.allCases {
            XCTAssertEqual(RequestOperation(named: operation.id), operation)
            XCTAssertEqual(RequestOperation(named: operation.commandPath), operation)
        }
        let byPath = try template()
        let byId = try AgentPolicy(parsing: try String(contentsOf: Self.template, encoding: .utf8).split(separator: "\n",
            omittingEmptySubsequences: false).map { line -> String in
                guard line.hasPrefix("may") || line.hasPrefix("    ") || line.hasPrefix("       ") else { return String(line) }
                var text = String(line)
                for operation in RequestOperation.allCases.sorted(by: { $0.commandPath.count > $1.commandPath.count }) {
                    text = text.replacingOccurrences(of: "\"\(operation.commandPath)\"", with: "\"\(operation.id)\"")
                }
                return text
            }.joined(separator: "\n"), file: "/etc/keymgr/policy.toml", commandPaths: paths)
        XCTAssertNotEqual(byId.rules.map(\.may), byPath.rules.map(\.may), "the rewrite named the ids")
        XCTAssertTrue(byId.rules.flatMap(\.may).contains("key.sign"))
        for login in ["root", "erin", "keymgr", "kiosk", "alice"] {
            let caller = person(login, uid: login == "root" ? 0 : 1001, groups: login == "erin" ? [990] : [])
            for operation in RequestOperation.allCases {
                for type in [nil, AuthType.none, .applicationPIN] as [AuthType?] {
                    XCTAssertEqual(byId.decide(caller: caller, operation: operation, authType: type, groupId: groupId),
                                   byPath.decide(caller: caller, operation: operation, authType: type, groupId: groupId),
                                   "\(login) \(operation.id)")
                }
            }
        }
        XCTAssertThrowsError(try AgentPolicy(parsing: "[[rule]]\nwho = [\"*\"]\nmay = [\"key.sing\"]\n", file: "p",
                                             commandPaths: paths)) { error in
            XCTAssertTrue("\(error)".contains("p:3: may names \"key.sing\""), "\(error)")
            XCTAssertTrue("\(error)".contains("\"key.sign\""), "the refusal lists the ids: \(error)")
        }
    }
}
