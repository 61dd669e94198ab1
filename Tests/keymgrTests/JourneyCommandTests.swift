import Foundation
import XCTest

/// `keymgr bind --journey` and `keymgr sign --journey` against the reference server process.
final class JourneyCommandTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }


    /// Findings 1-2 of the person issue: a person who bound locally (`bob`) and then through a journey (which the
    /// server answers with `id=bob,ou=user,…`) ends with one identity user: the journey adopts the local one, keys and
    /// all (their sealed private keys re-sealed for the new user id). Then `sign --journey SignIn --user bob` works and
    /// `admin devices --all-known` lists the one server binding once.
    func testALocalBindThenAJourneyBindEndWithOneIdentity() throws {
        try start(users: ["bob"])
        let local = try XCTUnwrap(try sandbox.bind("bob")["kid"] as? String)
        let journey = try XCTUnwrap(try register("bob")["kid"] as? String)
        let users = try sandbox.succeed(["users", "--json"]).array()
        XCTAssertEqual(users.compactMap { $0["userId"] as? String }, [universalId("bob")])
        let keys = try keys()
        XCTAssertEqual(keys[local]?["userId"] as? String, universalId("bob"), "the local key moved with its identity")
        XCTAssertEqual(keys[local]?["status"] as? String, "superseded", "and the journey's key for its issuer replaced it")
        XCTAssertEqual(keys[journey]?["userId"] as? String, universalId("bob"))
        let adopted = try sandbox.succeed(["audit", "--event", "user.adopted", "--json"]).array()
        XCTAssertEqual(adopted.count, 1)
        XCTAssertEqual((adopted.first?["details"] as? [String: Any])?["from"] as? String, "bob")

        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "bob", "--json"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        let devices = try sandbox.succeed(["admin", "devices", "--all-known", "--json"]).array()
        XCTAssertEqual(devices.compactMap { $0["uuid"] as? String }, [journey], "the one server binding, once")
        try sandbox.succeed(["audit", "verify"])
    }

    /// The adopted identity's keys for other issuers move with it, still usable: their sealed private keys are
    /// re-sealed for the new user id in the adopting transaction.
    func testAnAdoptedKeyOfAnotherIssuerStillSigns() throws {
        try start(users: ["bob"])
        let local = try XCTUnwrap(try sandbox.bind("bob", ["--issuer", "https://other.example"])["kid"] as? String)
        let journey = try XCTUnwrap(try register("bob")["kid"] as? String)
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().compactMap { $0["userId"] as? String }, [universalId("bob")])
        XCTAssertEqual(try keys()[local]?["userId"] as? String, universalId("bob"))
        XCTAssertEqual(try keys()[local]?["status"] as? String, "active")
        let moved = try sandbox.keymgr(["sign", "--kid", local, "--challenge", "c"])
        XCTAssertEqual(moved.status, 0, moved.summary)
        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "bob", "--kid", journey, "--json"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        try sandbox.succeed(["audit", "verify"])
    }

    func testBindThroughTheJourneyRegistersTheKeyOnTheServer() throws {
        try start(users: ["alice"])
        let outcome = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0", "--json"],
                                         stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        XCTAssertEqual(outcome.stderr, "")
        let key = try outcome.object()
        assertKeyObject(key, userId: universalId("alice"), username: "alice", authType: "NONE", status: "active",
                        extraFields: ["jwk", "jws"])
        XCTAssertEqual(key["serverState"] as? String, "registered")
        XCTAssertEqual(key["deviceName"] as? String, "test kiosk")
        let kid = try XCTUnwrap(key["kid"] as? String)
        XCTAssertEqual((key["jwk"] as? [String: Any])?["kid"] as? String, kid)
        let binding = try jwsParts(try XCTUnwrap(key["jws"] as? String))
        XCTAssertEqual(binding.payload["sub"] as? String, universalId("alice"))
        XCTAssertNotNil(binding.payload["challenge"] as? String)

        let deviceId = try XCTUnwrap(try sandbox.succeed(["status", "--json"]).object()["deviceId"] as? String)
        let onServer = try server.devices().filter { $0["user"] as? String == "alice" }
        XCTAssertEqual(onServer.map { $0["uuid"] as? String }, [kid])
        XCTAssertEqual(onServer.first?["deviceId"] as? String, deviceId)
        XCTAssertEqual(onServer.first?["deviceName"] as? String, "test kiosk")
        XCTAssertEqual(try keys()[kid]?["serverState"] as? String, "registered")

        let human = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0"],
                                       stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(human.status, 0, human.summary)
        XCTAssertTrue(human.stderr.contains("bound \(universalId("alice")) through RegisterDevice"), human.stderr)
        XCTAssertEqual(try keys()[kid]?["status"] as? String, "superseded", "a second binding retires the first")
        for run in [outcome, human] {
            XCTAssertFalse(run.stdout.contains(RefServerProcess.password) || run.stderr.contains(RefServerProcess.password))
        }
    }

    func testSignThroughTheJourneyAnswersTheServersChallenge() throws {
        try start(users: ["alice"])
        let kid = try XCTUnwrap(register("alice")["kid"] as? String)
        // By login name, or by the user id the server gave (keymgr then answers NameCallback with the stored username).
        for user in ["alice", universalId("alice")] {
            let outcome = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", user, "--claim", "purpose=door", "--json"])
            XCTAssertEqual(outcome.status, 0, outcome.summary)
            let object = try outcome.object()
            XCTAssertEqual(Set(object.keys), ["kid", "jws"])
            XCTAssertEqual(object["kid"] as? String, kid)
            let signed = try jwsParts(try XCTUnwrap(object["jws"] as? String))
            XCTAssertEqual(signed.header["kid"] as? String, kid)
            XCTAssertEqual(signed.payload["sub"] as? String, universalId("alice"))
            XCTAssertEqual(signed.payload["purpose"] as? String, "door")
        }
        let human = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice"])
        XCTAssertEqual(human.status, 0, human.summary)
        XCTAssertTrue(human.stdout.hasPrefix("eyJ"), human.stdout)
        XCTAssertNotNil(try keys()[kid]?["lastUsedAt"] as? String)
    }

    func testJourneyFailuresMapToTheirExitStatuses() throws {
        try start(users: ["alice"], ownServer: true)
        // Wrong password: the server ends the journey (76); nothing is bound.
        let wrong = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0", "--json"],
                                       stdin: "not the password\n")
        try assertJSONError(wrong, status: 76, code: "serverRejected")
        XCTAssertFalse(wrong.stdout.contains("not the password") || wrong.stderr.contains("not the password"))
        XCTAssertEqual(try keys().count, 0)

        // The journey binds NONE keys: asking for another auth type is a usage error, and nothing is bound.
        let conflicting = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--auth-type", "app-pin",
                                              "--password-fd", "0", "--json"], stdin: RefServerProcess.password + "\n")
        try assertJSONError(conflicting, status: 64, code: "usage")
        XCTAssertTrue(conflicting.stderr.contains("--auth-type"), conflicting.stderr)
        XCTAssertEqual(try keys().count, 0)
        XCTAssertEqual(try server.devices().count, 0)

        // No --password-fd and no terminal: abort (77) before anything is bound.
        try assertJSONError(try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--json"]),
                            status: 77, code: "abort")
        try assertJSONError(try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0",
                                                "--json"]), status: 77, code: "abort")

        // What the server decides cannot be given too.
        for extra in [["--challenge", "c"], ["--expires-in", "30"], ["--issuer", "other"]] {
            try assertJSONError(try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--json"] + extra),
                                status: 64, code: "usage")
        }
        try assertJSONError(try sandbox.keymgr(["bind", "--user", "alice", "--password-fd", "0", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["sign", "--journey", "SignIn", "--kid", "k", "--json"]), status: 64, code: "usage")

        // Signing without a binding on the server: the journey fails there.
        try assertJSONError(try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice", "--json"]),
                            status: 76, code: "serverRejected")
        try assertJSONError(try sandbox.keymgr(["bind", "--journey", "NoSuchJourney", "--user", "alice", "--password-fd", "0",
                                                "--json"], stdin: RefServerProcess.password + "\n"),
                            status: 76, code: "serverRejected")

        // A server that does not answer: 69.
        server.stop()
        try assertJSONError(try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0",
                                                "--json"], stdin: RefServerProcess.password + "\n"),
                            status: 69, code: "serverUnavailable")
        XCTAssertEqual(try keys().count, 0)
    }

    func testAnApplicationPINJourneyReadsThePINAndThePasswordFromTheirOwnSources() throws {
        try start(users: ["bob"], serverArguments: ["--auth-type", "APPLICATION_PIN"])
        // The password on fd 0 (stdin) and the PIN on stdin too would clash: the PIN comes second, on line 2.
        let outcome = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "bob", "--password-fd", "0",
                                          "--pin-fd", "0", "--json"], stdin: RefServerProcess.password + "\n482916\n")
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        let key = try outcome.object()
        XCTAssertEqual(key["authType"] as? String, "APPLICATION_PIN")
        XCTAssertEqual(key["serverState"] as? String, "registered")
        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "bob", "--pin-stdin", "--json"], stdin: "482916\n")
        XCTAssertEqual(signed.status, 0, signed.summary)
        let wrongPIN = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "bob", "--pin-stdin", "--json"], stdin: "111111\n")
        XCTAssertEqual(wrongPIN.status, 77, wrongPIN.summary)
    }

    func testWithoutATerminalABindOverAServerKnownKeyNeedsReplace() throws {
        try start(users: ["alice"])
        let registered = try register("alice")
        let user = universalId("alice")
        let refused = try sandbox.keymgr(["bind", "--user", user, "--json"])
        try assertJSONError(refused, status: 64, code: "usage")
        XCTAssertTrue(refused.stderr.contains("--replace"), refused.stderr)
        XCTAssertEqual(try keys()[registered["kid"] as? String ?? ""]?["status"] as? String, "active", "the key stays")

        let replaced = try sandbox.keymgr(["bind", "--user", user, "--replace", "--json"])
        XCTAssertEqual(replaced.status, 0, replaced.summary)
        XCTAssertEqual(try keys()[registered["kid"] as? String ?? ""]?["status"] as? String, "superseded")
    }
}
