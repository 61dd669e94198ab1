import Foundation
import XCTest

/// Races between keymgr processes over one user's OAuth client, found by `make stress`'s soak: a sync's
/// registration read (RFC 7592 GET) rotates the client secret at a Curity-like server, so a refresh or a login
/// poll that read the old secret before the read must not send it after.
extension OAuthCommandTests {
    /// Waits until the server has taken the armed fault of `endpoint` (the request reached it).
    func waitUntilFaultTaken(_ endpoint: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let answer = try server.request("GET", "/__refserver/oauth/faults", file: file, line: line)
            let faults = (answer.json as? [String: Any])?["faults"] as? [String: Any] ?? [:]
            if faults[endpoint] == nil { return }
            usleep(20_000)
        }
        XCTFail("the \(endpoint) request never reached the server", file: file, line: line)
    }

    func testASyncDuringARefreshNeverLeavesTheRefreshWithARotatedAwayClientSecret() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"])
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        // The token request waits at the server; the sync's registration read comes in meanwhile.
        try setFault("token", ["fault": "delay", "seconds": 4.0, "count": 1])
        let refresh = try RunningKeymgr(sandbox, ["token", "refresh", "--user", "alice", "--json"])
        try waitUntilFaultTaken("token")
        let sync = try sandbox.keymgr(["sync", "--json"], timeout: 120)
        XCTAssertEqual(sync.status, 0, sync.summary)
        XCTAssertEqual(try sync.object()["registrationsWiped"] as? [String], [])
        let (refreshed, _) = try refresh.finish(timeout: 60)
        XCTAssertEqual(refreshed.status, 0, "the refresh used a client secret the sync's read had rotated away: \(refreshed.summary)")
        // Both stored what the server holds now: the next refresh and the next sync work.
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
        let again = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(again.status, 0, again.summary)
        XCTAssertEqual(try again.object()["registrationsWiped"] as? [String], [])
    }

    func testASyncDuringALoginNeverLeavesTheLoginWithARotatedAwayClientSecret() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"])
        try registerClient("alice")
        let running = try RunningKeymgr(sandbox, ["login", "--user", "alice", "--json"])
        var userCode: String?
        let deadline = Date().addingTimeInterval(30)
        while userCode == nil, Date() < deadline, running.process.isRunning {
            userCode = try adminList("device").first { ($0["status"] as? String) == "pending" }?["user_code"] as? String
            if userCode == nil { usleep(20_000) }
        }
        let code = try XCTUnwrap(userCode, "login never asked for a user code")
        // The login has its user code and polls with the client secret; a sync rotates the secret meanwhile.
        let sync = try sandbox.keymgr(["sync", "--json"], timeout: 120)
        XCTAssertEqual(sync.status, 0, sync.summary)
        let approved = try server.request("POST", "/__refserver/oauth/device/approve", body: ["user_code": code, "subject": "alice"])
        XCTAssertEqual(approved.status, 200, "\(approved)")
        let (outcome, _) = try running.finish(timeout: 60)
        XCTAssertEqual(outcome.status, 0, "the login polled with a client secret the sync's read had rotated away: \(outcome.summary)")
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
    }

    func testTwoRegistrationsOfOneUserAtOnceMakeOneClient() throws {
        try startOAuth()
        // The first registration waits at the server; the second starts meanwhile, before anything is stored.
        try setFault("registration", ["fault": "delay", "seconds": 3.0, "count": 1])
        let first = try RunningKeymgr(sandbox, ["dcr", "register", "--user", "bob", "--software-id", "keymgr-template", "--json"])
        try waitUntilFaultTaken("registration")
        let second = try RunningKeymgr(sandbox, ["dcr", "register", "--user", "bob", "--software-id", "keymgr-template", "--json"])
        let (one, _) = try first.finish(timeout: 60)
        let (other, _) = try second.finish(timeout: 60)
        XCTAssertEqual(one.status, 0, one.summary)
        try assertJSONError(other, status: 64, code: "usage")
        XCTAssertTrue(other.stderr.contains("already has a client registration"), other.stderr)
        XCTAssertEqual(try adminList("clients").count, 1, "one client at the server, none orphaned")
        let stored = try sandbox.succeed(["dcr", "show", "--user", "bob", "--json"]).object()
        XCTAssertEqual(stored["clientId"] as? String, try one.object()["clientId"] as? String)
    }
}
