import Foundation
import XCTest

/// A `registration_client_uri` a server hands out is held to the profile's rules (same origin as the registration
/// endpoint or the base URL; https, or loopback http) before it is stored or followed: the registration access token
/// never goes to another origin. The other origin is a second reference server on loopback, standing for an
/// attacker's host, which records every request it gets.
final class ServerGivenURITests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    var attacker: RefServerProcess!

    override func tearDown() {
        attacker?.stop()
        attacker = nil
        super.tearDown()
    }

    /// What reached the attacker's host, its own admin surface left out.
    func requestsAtTheAttacker(file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        try attacker.recordedRequests(file: file, line: line).compactMap { $0["target"] as? String }
            .filter { !$0.hasPrefix("/__refserver") }
    }

    func clearFaults() throws {
        let answer = try server.request("DELETE", "/__refserver/oauth/faults")
        XCTAssertTrue((200..<300).contains(answer.status), "\(answer)")
    }

    func testARegistrationAnswerNamingAnotherOriginIsRefusedAndNothingIsStored() throws {
        try startOAuth()
        attacker = try RefServerProcess(in: sandbox, ownServer: true)
        try setFault("registration", ["fault": "foreignRegistrationClientURI", "url": attacker.baseURL.absoluteString + "/steal"])
        let refused = try sandbox.keymgr(["dcr", "register", "--user", "bob", "--software-id", "keymgr-template", "--json"])
        try assertJSONError(refused, status: 65, code: "badInput")
        XCTAssertTrue(refused.stderr.contains("registration_client_uri"), refused.stderr)
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "bob", "--json"]).status, 66, "no registration was stored")
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0, "no user was made")
        XCTAssertEqual(try requestsAtTheAttacker(), [])
    }

    func testAManagementAnswerMovingTheClientElsewhereIsNotFollowedBySyncOrDelete() throws {
        try startOAuth()
        attacker = try RefServerProcess(in: sandbox, ownServer: true)
        let registered = try registerClient("carol")
        let uri = try XCTUnwrap(registered["registrationClientUri"] as? String)
        XCTAssertTrue(uri.hasPrefix(server.baseURL.absoluteString), uri)

        // The server's RFC 7592 GET answer (sync rule 5) names another origin: refused, the stored URI stays.
        try setFault("management", ["fault": "foreignRegistrationClientURI", "url": attacker.baseURL.absoluteString + "/steal"])
        let sync = try sandbox.keymgr(["sync", "--json"])
        XCTAssertNotEqual(sync.status, 0, sync.summary)
        XCTAssertTrue(sync.stdout.contains("registration_client_uri") || sync.stderr.contains("registration_client_uri"), sync.summary)
        XCTAssertEqual(try sandbox.succeed(["dcr", "show", "--user", "carol", "--json"]).object()["registrationClientUri"] as? String, uri)

        // `dcr delete` then goes to the real server, and nothing ever reached the other origin.
        try clearFaults()
        try sandbox.succeed(["dcr", "delete", "--user", "carol"])
        XCTAssertEqual(try requestsAtTheAttacker(), [])
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "carol", "--json"]).status, 66)
    }
}
