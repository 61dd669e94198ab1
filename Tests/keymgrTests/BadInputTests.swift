import Foundation
import XCTest

/// Input a person gets wrong: a clear usage error (64) that says what to do, and nothing written.
final class BadInputTests: XCTestCase {
    func testBlankUserIdsAndAnEmptyHomeAreUsageErrors() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for user in ["", "   ", "\t"] {
            let outcome = try sandbox.keymgr(["bind", "--user", user, "--json"])
            try assertJSONError(outcome, status: 64, code: "usage")
        }
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0, "no user was made")
        let emptyHome = try sandbox.run(Sandbox.binary, ["--home", "", "status"])
        XCTAssertEqual(emptyHome.status, 64, emptyHome.summary)
        XCTAssertTrue(emptyHome.stderr.contains("--home"), emptyHome.stderr)
    }

    func testAnUnknownAuditEventListsTheKnownOnes() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        let outcome = try sandbox.keymgr(["audit", "--event", "key.bond"])
        XCTAssertEqual(outcome.status, 64, outcome.summary)
        XCTAssertTrue(outcome.stderr.contains("key.bound") && outcome.stderr.contains("key.revoked"), outcome.stderr)
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.bound", "--json"]).array().count, 1)
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.revoked", "--json"]).array().count, 0,
                       "a known event with no entries yet is no error")
    }

    func testServerSetDropsATrailingSlash() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:8080/am//"])
        XCTAssertEqual(try sandbox.succeed(["server", "show", "--json"]).object()["baseUrl"] as? String, "http://127.0.0.1:8080/am")
    }
}
