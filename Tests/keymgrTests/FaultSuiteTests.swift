import Foundation
import XCTest

/// `keymgr sync` against the reference server's fault switches on PingAM's device REST (issue 15): for each
/// misbehaviour, the error and exit status a person or a timer sees, and proof that nothing was revoked, wiped or
/// lost — the local keys (`list --status all --json`), the audit log and the server's bindings are exactly as
/// before — and that the work the faulted run could not do is done by the next run once the server behaves.
///
/// The OAuth endpoints' faults (token, registration, device authorization, discovery, rule 5's management reads)
/// are in `OAuthFaultSuiteTests`.
final class FaultSuiteTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// One misbehaviour, armed for every user, and what keymgr must answer.
    struct FaultCase {
        var fault: [String: Any]
        var syncArguments: [String] = []
        /// `sync`'s exit status (docs/sync.md): 69 when every user failed with `serverUnavailable`, else 2 (some
        /// users, here all of them, not reconciled; the next run retries them).
        var status: Int32
        /// The per-user error code in the report.
        var code: String
        /// Words the per-user message must contain, so a person knows what went wrong.
        var message: String
    }

    static let users = ["alice", "bob"]

    /// Puts work on the table that a healthy sync would do: bob's binding deleted on the server (a healthy run
    /// revokes bob's key here) and alice's key rebound locally (a healthy run deletes the old binding there).
    private func prepare() throws -> (bob: String, aliceOld: String) {
        try start(users: Self.users)
        let kids = try registerSettled(Self.users)
        let bob = try XCTUnwrap(kids["bob"])
        try server.deleteBinding(user: "bob", uuid: bob)
        try sandbox.succeed(["rebind", "--user", universalId("alice"), "--auth-type", "none"])
        return (bob, try XCTUnwrap(kids["alice"]))
    }

    /// What must not change: local keys, audit entries, server bindings.
    private func snapshot(file: StaticString = #filePath, line: UInt = #line) throws -> (keys: String, audit: Int, devices: Set<String>) {
        let keys = try sandbox.succeed(["list", "--status", "all", "--json"], file: file, line: line).stdout
        let audit = try sandbox.succeed(["audit", "list", "--json"], file: file, line: line).array(file: file, line: line).count
        let devices = Set(try server.devices(file: file, line: line).compactMap { $0["_id"] as? String })
        return (keys, audit, devices)
    }

    private func check(_ faultCase: FaultCase, file: StaticString = #filePath, line: UInt = #line) throws {
        let work = try prepare()
        let before = try snapshot(file: file, line: line)
        for user in Self.users { try server.setFault(user: user, faultCase.fault, file: file, line: line) }

        let outcome = try sandbox.keymgr(["sync", "--json"] + faultCase.syncArguments, timeout: 90)
        XCTAssertEqual(outcome.status, faultCase.status, outcome.summary, file: file, line: line)
        let report = try outcome.object(file: file, line: line)
        let errors = try XCTUnwrap(report["errors"] as? [[String: Any]], outcome.summary, file: file, line: line)
        XCTAssertEqual(Set(errors.compactMap { $0["userId"] as? String }), Set(Self.users.map(universalId)),
                       outcome.summary, file: file, line: line)
        for error in errors {
            XCTAssertEqual(error["code"] as? String, faultCase.code, outcome.summary, file: file, line: line)
            let message = error["message"] as? String ?? ""
            XCTAssertTrue(message.localizedCaseInsensitiveContains(faultCase.message),
                          "message \(message) should say \(faultCase.message)", file: file, line: line)
        }
        for field in ["revoked", "serverDeleted"] {
            XCTAssertEqual((report[field] as? [Any])?.count, 0, "\(field) in \(outcome.stdout)", file: file, line: line)
        }
        XCTAssertTrue(outcome.stderr.contains("keymgr: "), outcome.stderr, file: file, line: line)
        XCTAssertFalse(outcome.stderr.contains(server.token), "the admin token never shows", file: file, line: line)

        let after = try snapshot(file: file, line: line)
        XCTAssertEqual(after.keys, before.keys, "no local key changed", file: file, line: line)
        XCTAssertEqual(after.audit, before.audit, "no audit entry was written", file: file, line: line)
        XCTAssertEqual(after.devices, before.devices, "no binding was deleted on the server", file: file, line: line)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0, file: file, line: line)

        // The server behaves again: the next run does the work the faulted one could not, and then converges.
        try server.request("DELETE", "/__refserver/faults", file: file, line: line)
        let healed = try sync(file: file, line: line)
        XCTAssertEqual(healed["revoked"] as? [String], [work.bob], "\(healed)", file: file, line: line)
        XCTAssertEqual(healed["serverDeleted"] as? [String], [work.aliceOld], "\(healed)", file: file, line: line)
        XCTAssertEqual(try sync(file: file, line: line)["writes"] as? Int, 0, file: file, line: line)
    }

    func testStatus500() throws {
        try check(FaultCase(fault: ["fault": "status500"], status: 69, code: "serverUnavailable", message: "500"))
    }

    func testStatus503WithRetryAfter() throws {
        try check(FaultCase(fault: ["fault": "status503", "retryAfter": 1], status: 69, code: "serverUnavailable",
                            message: "503"))
    }

    /// A 503 that clears after its Retry-After: keymgr waits, asks again, and does the run's work.
    func testA503ThatClearsAfterRetryAfterIsRetriedAndTheRunSucceeds() throws {
        let work = try prepare()
        for user in Self.users { try server.setFault(user: user, ["fault": "status503", "retryAfter": 1, "count": 1]) }
        let report = try sync()
        XCTAssertEqual((report["errors"] as? [Any])?.count, 0, "\(report)")
        XCTAssertEqual(report["revoked"] as? [String], [work.bob], "\(report)")
        XCTAssertEqual(report["serverDeleted"] as? [String], [work.aliceOld], "\(report)")
        let retried = try server.recordedRequests().filter { ($0["method"] as? String) == "GET" && ($0["target"] as? String ?? "").contains("/devices/2fa/binding") }
        XCTAssertGreaterThanOrEqual(retried.count, 2 * Self.users.count, "each user's listing asked twice: \(retried.count)")
    }

    func testAServerSlowerThanTheTimeout() throws {
        try check(FaultCase(fault: ["fault": "delay", "seconds": 4], syncArguments: ["--timeout", "1"], status: 2,
                            code: "timeout", message: "timed out"))
    }

    /// The connection reset (TCP RST) before any answer: the server is as good as unreachable.
    func testConnectionReset() throws {
        try check(FaultCase(fault: ["fault": "connectionReset"], status: 69, code: "serverUnavailable", message: "failed"))
    }

    /// The listing's connection closes halfway through its announced length: an incomplete listing is no listing.
    func testAnswerCutOffHalfway() throws {
        try check(FaultCase(fault: ["fault": "truncatedBody"], status: 69, code: "serverUnavailable", message: "failed"))
    }

    /// Headers at once, the body dribbled out over 4 s: `--timeout` bounds the whole request, not each read.
    func testABodySlowerThanTheTimeout() throws {
        try check(FaultCase(fault: ["fault": "slowBody", "seconds": 4], syncArguments: ["--timeout", "1"], status: 2,
                            code: "timeout", message: "timed out"))
    }

    func testMalformedJSON() throws {
        try check(FaultCase(fault: ["fault": "malformedJSON"], status: 2, code: "badInput", message: "listing is not JSON"))
    }

    func testWrongContentType() throws {
        try check(FaultCase(fault: ["fault": "wrongContentType"], status: 2, code: "badInput", message: "listing is not JSON"))
    }

    func testEndlessPaging() throws {
        try check(FaultCase(fault: ["fault": "endlessPaging"], status: 2, code: "badInput",
                            message: "did not end after 100 pages"))
    }

    func testOversizedBody() throws {
        // 10 MiB against keymgr's 4 MiB limit: refused before it is parsed, whatever it holds.
        try check(FaultCase(fault: ["fault": "hugeBody"], status: 2, code: "badInput", message: "more than the 4194304 bytes allowed"))
    }

    /// `sign --journey` when the server is gone: the user-visible error, and no key used or changed.
    func testSignThroughAJourneyWithTheServerDown() throws {
        try start(users: ["alice"], ownServer: true)
        try registerSettled(["alice"])
        let before = try sandbox.succeed(["list", "--status", "all", "--json"]).stdout
        let audit = try sandbox.succeed(["audit", "list", "--json"]).array().count
        server.stop()
        let outcome = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice", "--password-fd", "0", "--json"],
                                         stdin: RefServerProcess.password + "\n")
        try assertJSONError(outcome, status: 69, code: "serverUnavailable")
        XCTAssertEqual(try sandbox.succeed(["list", "--status", "all", "--json"]).stdout, before)
        XCTAssertEqual(try sandbox.succeed(["audit", "list", "--json"]).array().count, audit)
    }
}
