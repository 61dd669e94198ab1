import ArgumentParser
import Foundation
import KeyManager
import XCTest
@testable import keymgr

/// A request's context reaches its own command and nothing else (issue 34): command lines run one after the other in
/// one process, for different callers and on different streams, each see only their own caller, decision, streams
/// and environment. With the served request in a process-wide variable (the former `ServedRequest`), the second
/// caller's run stopped on "a worker serves one request", and a run directly after a served one saw the served
/// caller's limit.
final class RequestContextPerRunTests: XCTestCase {
    var sandbox: Sandbox!

    /// caller `a` may list alice's keys, caller `b` bob's; nobody may do anything else.
    static let policyText = """
        [[rule]]
        who = ["user:a"]
        may = ["list", "users"]
        for = ["alice"]

        [[rule]]
        who = ["user:b"]
        may = ["list", "users"]
        for = ["bob"]
        """

    override func setUpWithError() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.bind("bob")
    }

    /// The request the agent's worker builds for `login`, with the policy above.
    func served(_ login: String, uid: UInt32) throws -> RequestContext {
        let policy = try AgentPolicy(parsing: Self.policyText, file: "/etc/keymgr/policy.toml",
                                     commandPaths: AgentGate.commandPaths)
        return RequestContext(caller: AgentCaller(uid: uid, gid: uid, pid: 4242, groups: [], login: login),
                              policy: policy, terminal: -1, passedDescriptors: [0, 1, 2])
    }

    /// Runs `arguments` for `request`, through the gate as the worker does.
    func run(_ arguments: [String], for request: RequestContext) throws -> Outcome {
        let environment = sandbox.environment
        return try sandbox.keymgrInProcess(arguments, request: request) { command, request in
            try AgentGate.authorize(command, request: request, environment: environment)
        }
    }

    func users(_ outcome: Outcome, file: StaticString = #filePath, line: UInt = #line) throws -> Set<String> {
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return Set(try outcome.array(file: file, line: line).compactMap { $0["userId"] as? String })
    }

    func testEachRunSeesOnlyItsOwnCallersLimit() throws {
        let a = try run(["list", "--json"], for: try served("a", uid: 2001))
        XCTAssertEqual(try users(a), ["alice"], a.summary)
        let b = try run(["list", "--json"], for: try served("b", uid: 2002))
        XCTAssertEqual(try users(b), ["bob"], b.summary)
        // Back to a, then keymgr run directly in the same process: no limit left from either.
        XCTAssertEqual(try users(try run(["list", "--json"], for: try served("a", uid: 2001))), ["alice"])
        XCTAssertEqual(try users(try sandbox.keymgrInProcess(["list", "--json"])), ["alice", "bob"])
    }

    func testEachRunsDecisionIsItsOwn() throws {
        // b may not run `status`; a denial of one run does not stay for the next, and an allowed run does not
        // make the next one allowed.
        let denied = try run(["status", "--json"], for: try served("b", uid: 2002))
        XCTAssertEqual(denied.status, 77, denied.summary)
        XCTAssertTrue(denied.stdout.contains("\"denied\""), denied.summary)
        let allowed = try run(["users", "--json"], for: try served("b", uid: 2002))
        XCTAssertEqual(allowed.status, 0, allowed.summary)
        XCTAssertTrue(allowed.stdout.contains("bob") && !allowed.stdout.contains("alice"), allowed.summary)
        let direct = try sandbox.keymgrInProcess(["status", "--json"])
        XCTAssertEqual(direct.status, 0, direct.summary)
    }

    func testEachRunWritesOnItsOwnStreams() throws {
        let a = try run(["list", "--json"], for: try served("a", uid: 2001))
        let failing = try sandbox.keymgrInProcess(["sign", "--user", "nobody-here", "--challenge", "c", "--json"])
        let b = try run(["list", "--json"], for: try served("b", uid: 2002))
        XCTAssertEqual(a.stderr, "", a.summary)
        XCTAssertEqual(b.stderr, "", b.summary)
        XCTAssertEqual(failing.status, 66, failing.summary)
        XCTAssertTrue(failing.stderr.hasPrefix("keymgr: "), failing.summary)
        XCTAssertTrue(failing.stdout.contains("\"error\""), failing.summary)
        XCTAssertFalse(a.stdout.contains("error") || b.stdout.contains("error"), "\(a.summary)\n\(b.summary)")
    }

    func testCompletionsOfEachRunAreForItsOwnCaller() throws {
        func complete(_ request: RequestContext?) throws -> Set<String> {
            let words = ["---completion", "list", "--", "--user", "3", "0", "keymgr", "list", "--user", ""]
            let environment = sandbox.environment
            let outcome = try request.map { request in
                try sandbox.runInProcess(words, request: request) { command, request in
                    try AgentGate.authorize(command, request: request, environment: environment)
                }
            } ?? sandbox.runInProcess(words, extraEnvironment: ["KEYMGR_HOME": sandbox.home.path])
            XCTAssertEqual(outcome.status, 0, outcome.summary)
            return Set(outcome.stdout.split(separator: "\n").map(String.init))
        }
        var a = try served("a", uid: 2001)
        a.home = sandbox.home.path
        var b = try served("b", uid: 2002)
        b.home = sandbox.home.path
        XCTAssertEqual(try complete(a), ["alice"])
        XCTAssertEqual(try complete(b), ["bob"])
        XCTAssertEqual(try complete(nil), ["alice", "bob"])
        XCTAssertEqual(try complete(a), ["alice"])
        // Outside a command line's parse there is no request to complete for: nothing is offered.
        XCTAssertNil(StoreCompletion.context)
        XCTAssertEqual(StoreCompletion.users(["keymgr", "list", "--user", ""], 3, ""), [])
    }

    func testEachRunSeesItsOwnEnvironment() throws {
        // The table fits the run's own COLUMNS.
        let wide = try sandbox.keymgrInProcess(["list"], extraEnvironment: ["COLUMNS": "200"])
        let narrow = try sandbox.keymgrInProcess(["list"], extraEnvironment: ["COLUMNS": "40"])
        let widest = { (outcome: Outcome) in outcome.stdout.split(separator: "\n").map(\.count).max() ?? 0 }
        XCTAssertGreaterThan(widest(wide), widest(narrow), "\(wide.summary)\n\(narrow.summary)")
        // The store the run's own KEYMGR_HOME names.
        let other = sandbox.root.appendingPathComponent("other-home")
        XCTAssertEqual(try sandbox.keymgr(["init", "--device-name", "other"] + Sandbox.fastInit, home: other).status, 0)
        let there = try sandbox.runInProcess(["users", "--json"], extraEnvironment: ["KEYMGR_HOME": other.path])
        let here = try sandbox.runInProcess(["users", "--json"], extraEnvironment: ["KEYMGR_HOME": sandbox.home.path])
        XCTAssertEqual(there.status, 0, there.summary)
        XCTAssertFalse(there.stdout.contains("alice"), there.summary)
        XCTAssertTrue(here.stdout.contains("alice"), here.summary)
    }
}
