import Foundation
import XCTest

/// A journey signs and binds only for the user asked for: a hostile server's device callback for another user gets
/// the SDKs' `clientError` `Abort`, keymgr exits 65, and nothing is signed or bound for anyone in that step.
final class JourneyUserBoundaryTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    func testASigningStepForSeveralUsersSignsForNoneOfThem() throws {
        try start(users: ["dave", "erin", "frank"], serverArguments: ["--foreign-signing-users", "erin,frank"])
        var kids: [String: String] = [:]
        for user in ["dave", "erin", "frank"] { kids[user] = try XCTUnwrap(register(user)["kid"] as? String) }

        let outcome = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "dave", "--json"])
        try assertJSONError(outcome, status: 65, code: "badInput")
        XCTAssertTrue(outcome.stderr.contains(universalId("erin")), outcome.stderr)
        XCTAssertEqual(try server.clientErrors(), ["Abort"], "erin's callback is answered Abort, and only it")
        let stored = try keys()
        for user in ["dave", "erin", "frank"] {
            assertNull(stored[kids[user] ?? ""]?["lastUsedAt"], "\(user)'s key signed nothing")
        }
        let signed = try sandbox.succeed(["audit", "--event", "key.signed", "--json"]).array()
        XCTAssertEqual(signed.count, 0, "no signature in the hostile step: \(signed)")
    }

    func testTheUserAskedForStillSignsAloneAndUsernamelessKeepsItsRule() throws {
        try start(users: ["dave"], serverArguments: ["--usernameless-journey", "Passwordless"])
        let kid = try XCTUnwrap(register("dave")["kid"] as? String)
        for user in ["dave", universalId("dave")] {
            let outcome = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", user, "--json"])
            XCTAssertEqual(outcome.status, 0, outcome.summary)
        }
        let usernameless = try sandbox.keymgr(["sign", "--journey", "Passwordless", "--json"])
        XCTAssertEqual(usernameless.status, 0, usernameless.summary)
        XCTAssertEqual(try usernameless.object()["kid"] as? String, kid)
    }

    func testABindingCallbackForAnotherUserBindsNothing() throws {
        try start(users: ["dave", "erin"], serverArguments: ["--foreign-binding-user", "erin"])
        let outcome = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "dave", "--password-fd", "0", "--json"],
                                         stdin: RefServerProcess.password + "\n")
        try assertJSONError(outcome, status: 65, code: "badInput")
        XCTAssertEqual(try server.clientErrors(), ["Abort"])
        XCTAssertEqual(try keys().count, 0)
        XCTAssertEqual(try server.devices().count, 0)
        let audit = try sandbox.succeed(["audit", "--json"]).stdout
        XCTAssertFalse(audit.contains("erin"), "no key was made for erin: \(audit)")
    }
}
