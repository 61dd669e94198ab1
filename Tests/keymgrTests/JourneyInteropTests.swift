import Foundation
import XCTest

/// What a real PingAM deployment depends on in journeys (issue 11), end to end: the built `keymgr` against the
/// reference server process.
final class JourneyInteropTests: ServerTestCase {

    // MARK: sessions

    func testNoSessionIsLeftOpenAfterBindAndSign() throws {
        // A deployment that ignores noSession=true: keymgr logs the session out itself.
        try start(users: ["alice"], serverArguments: ["--ignore-no-session"])
        try register("alice")
        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice", "--json"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try server.openSessions(), 0)
        let requests = try server.recordedRequests()
        let logouts = requests.filter { ($0["target"] as? String)?.contains("/sessions?_action=logout") == true }
        XCTAssertEqual(logouts.count, 2, "one logout per journey")
        for logout in logouts {
            let headers = try XCTUnwrap(logout["headers"] as? [String: String])
            XCTAssertEqual(headers["iplanetdirectorypro"], "[redacted]", "the session travels in its header")
        }
        let journeySteps = requests.filter { ($0["target"] as? String)?.contains("/authenticate") == true }
        XCTAssertFalse(journeySteps.isEmpty)
        for step in journeySteps {
            let headers = try XCTUnwrap(step["headers"] as? [String: String])
            XCTAssertEqual(headers["accept-api-version"], "resource=2.1, protocol=1.0")
            XCTAssertTrue((step["target"] as? String)?.contains("noSession=true") == true)
        }
        // The first step of each journey starts without cookies; every later one carries the journey's amlbcookie.
        XCTAssertEqual(journeySteps.filter { ($0["headers"] as? [String: String])?["cookie"] == nil }.count, 2)
    }

    func testAServerThatHonoursNoSessionOpensNone() throws {
        try start(users: ["alice"])
        try register("alice")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice"]).status, 0)
        XCTAssertEqual(try server.openSessions(), 0)
        XCTAssertFalse(try server.recordedRequests().contains { ($0["target"] as? String)?.contains("/sessions") == true },
                       "no session, nothing to log out")
    }

    // MARK: refused binds

    func testARefusedJourneyBindLeavesTheOldKeyActive() throws {
        try start(users: ["alice"], serverArguments: ["--max-saved-devices", "1"])
        let first = try XCTUnwrap(register("alice")["kid"] as? String)
        let refused = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "alice", "--password-fd", "0", "--json"],
                                         stdin: RefServerProcess.password + "\n")
        try assertJSONError(refused, status: 76, code: "serverRejected")
        let keys = try keys()
        XCTAssertEqual(Array(keys.keys), [first], "the refused key was never stored")
        XCTAssertEqual(keys[first]?["status"] as? String, "active")
        XCTAssertEqual(keys[first]?["serverState"] as? String, "registered")
        let audit = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertEqual(audit.filter { $0["event"] as? String == "key.bindingRefused" }.count, 1)
        XCTAssertFalse(audit.contains { $0["event"] as? String == "key.superseded" })
        // The old key still signs through the server.
        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice", "--json"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try signed.object()["kid"] as? String, first)
    }

    // MARK: --user

    func testUserFindsAJourneyBoundUserByTheNameTyped() throws {
        try start(users: ["dave"])
        let kid = try XCTUnwrap(register("dave")["kid"] as? String)
        let listed = try sandbox.succeed(["list", "--user", "dave", "--json"]).array()
        XCTAssertEqual(listed.map { $0["kid"] as? String }, [kid])
        XCTAssertEqual(listed.first?["userId"] as? String, universalId("dave"))
        let local = try sandbox.keymgr(["sign", "--user", "dave", "--challenge", "c1", "--json"])
        XCTAssertEqual(local.status, 0, local.summary)
        XCTAssertEqual(try local.object()["kid"] as? String, kid)
        let audit = try sandbox.succeed(["audit", "--user", "dave", "--json"]).array()
        XCTAssertTrue(audit.contains { $0["event"] as? String == "key.signed" && $0["kid"] as? String == kid })
        XCTAssertTrue(audit.allSatisfy { $0["userId"] as? String == universalId("dave") })
        // A plain bind by the typed name finds dave's key the server knows (--replace needed), never a second user.
        try assertJSONError(try sandbox.keymgr(["bind", "--user", "dave", "--json"]), status: 64, code: "usage")
        let rebound = try sandbox.succeed(["bind", "--user", "dave", "--replace", "--json"]).object()
        XCTAssertEqual(rebound["userId"] as? String, universalId("dave"))
        XCTAssertEqual(try keys()[kid]?["status"] as? String, "superseded")
        let revoked = try sandbox.keymgr(["revoke", "--user", "dave", "--json"])
        XCTAssertEqual(revoked.status, 0, revoked.summary)
        XCTAssertEqual(try sandbox.succeed(["list", "--user", "dave", "--json"]).array().count, 0)
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 1, "one dave, never two")
    }

    func testAnAmbiguousUserListsTheMatchesAndExits64() throws {
        try start(users: [])
        try sandbox.succeed(["bind", "--user", "u-1", "--username", "sam"])
        try sandbox.succeed(["bind", "--user", "u-2", "--username", "sam"])
        for command in [["list"], ["sign", "--challenge", "c"], ["revoke"], ["audit"], ["rebind", "--auth-type", "none"]] {
            let outcome = try sandbox.keymgr(command + ["--user", "sam", "--json"])
            try assertJSONError(outcome, status: 64, code: "usage")
            XCTAssertTrue(outcome.stderr.contains("u-1") && outcome.stderr.contains("u-2"), outcome.summary)
        }
        // The user id itself still chooses.
        XCTAssertEqual(try sandbox.succeed(["list", "--user", "u-2", "--json"]).array().count, 1)
    }

    // MARK: usernameless signing

    func testAUsernamelessJourneySignsWithTheOnlyKeyOrTheOneChosen() throws {
        try start(users: ["alice", "bob"], serverArguments: ["--usernameless-journey", "Quick"])
        let alice = try XCTUnwrap(register("alice")["kid"] as? String)
        let only = try sandbox.keymgr(["sign", "--journey", "Quick", "--json"])
        XCTAssertEqual(only.status, 0, only.summary)
        XCTAssertEqual(try only.object()["kid"] as? String, alice)
        XCTAssertEqual(try jwsParts(try XCTUnwrap(try only.object()["jws"] as? String)).payload["sub"] as? String,
                       universalId("alice"))

        let bob = try XCTUnwrap(register("bob")["kid"] as? String)
        let unchosen = try sandbox.keymgr(["sign", "--journey", "Quick", "--json"])
        try assertJSONError(unchosen, status: 64, code: "usage")
        XCTAssertTrue(unchosen.stderr.contains(alice) && unchosen.stderr.contains(bob), unchosen.summary)
        XCTAssertEqual(try server.clientErrors(), ["Abort"], "the server is told the journey will not be answered")

        for (arguments, kid, user) in [(["--user", "bob"], bob, "bob"), (["--kid", alice], alice, "alice")] {
            let chosen = try sandbox.keymgr(["sign", "--journey", "Quick", "--json"] + arguments)
            XCTAssertEqual(chosen.status, 0, chosen.summary)
            XCTAssertEqual(try chosen.object()["kid"] as? String, kid)
            XCTAssertEqual(try jwsParts(try XCTUnwrap(try chosen.object()["jws"] as? String)).payload["sub"] as? String,
                           universalId(user))
        }

        // One user with two keys (another issuer): the same choice.
        try sandbox.succeed(["bind", "--user", "bob", "--issuer", "other-app"])
        try assertJSONError(try sandbox.keymgr(["sign", "--journey", "Quick", "--user", "bob", "--json"]), status: 64, code: "usage")
        let byKid = try sandbox.keymgr(["sign", "--journey", "Quick", "--kid", bob, "--json"])
        XCTAssertEqual(byKid.status, 0, byKid.summary)
    }

    // MARK: clientError

    func testSigningFailuresPostTheirClientErrorAndExitWithTheirOwnCodes() throws {
        try start(users: ["bob"], serverArguments: ["--auth-type", "APPLICATION_PIN"], initArguments: ["--pin-retry", "2"])
        let bound = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "bob", "--password-fd", "0",
                                        "--pin-fd", "0", "--json"], stdin: RefServerProcess.password + "\n482916\n")
        XCTAssertEqual(bound.status, 0, bound.summary)
        let sign = ["sign", "--journey", "SignIn", "--user", "bob", "--pin-stdin", "--json"]
        var expected: [String] = []
        let cases: [(String, [String], String, Int32, String)] = [
            ("wrong PIN", [], "111111\n", 77, "unAuthorize"),
            ("refused custom claims", ["--claim", "sub=someone"], "482916\n", 65, "invalidCustomClaims"),
            ("locked after the second wrong PIN", [], "222222\n", 77, "pinLocked"),
            ("locked key", [], "482916\n", 77, "pinLocked"),
        ]
        for (name, extra, stdin, status, code) in cases {
            let outcome = try sandbox.keymgr(sign + extra, stdin: stdin)
            try assertJSONError(outcome, status: status, code: code)
            expected.append("Abort")
            XCTAssertEqual(try server.clientErrors(), expected, name)
        }
        try sandbox.succeed(["revoke", "--user", "bob"])
        try assertJSONError(try sandbox.keymgr(sign, stdin: "482916\n"), status: 66, code: "clientNotRegistered")
        XCTAssertEqual(try server.clientErrors(), expected + ["ClientNotRegistered"])
        XCTAssertEqual(try server.openSessions(), 0)
    }

    func testBiometricFailuresPostTheirClientErrorAndExitWithTheirOwnCodes() throws {
        let cases: [(name: String, setup: [String], status: Int32, code: String, clientError: String)] = [
            ("no verifier configured", [], 69, "unsupported", "Unsupported"),
            ("verifier rejects", ["--biometric-verifier", "/bin/false"], 77, "unAuthorize", "Abort"),
            ("verifier outlasts the callback's timeout", ["--biometric-verifier", "/bin/sleep 30"], 75, "timeout", "Timeout"),
        ]
        for item in cases {
            try start(users: ["carol"], serverArguments: ["--auth-type", "BIOMETRIC_ONLY", "--callback-timeout", "2"],
                      initArguments: item.setup)
            let outcome = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "carol", "--password-fd", "0", "--json"],
                                             stdin: RefServerProcess.password + "\n")
            try assertJSONError(outcome, status: item.status, code: item.code)
            XCTAssertEqual(try server.clientErrors(), [item.clientError], item.name)
            XCTAssertEqual(try keys().count, 0, "\(item.name): nothing stored")
            XCTAssertEqual(try server.devices().count, 0, item.name)
            server.stop()
        }
    }
}

/// The callback's deadline covers the PIN prompt: a prompt nobody answers on a real pseudo-terminal.
final class JourneyDeadlineTerminalTests: ServerTestCase {
    /// Runs keymgr on a new pseudo-terminal, waits for `prompt` and never answers it; prints what the terminal
    /// showed, then `ECHO on` or `ECHO off` as the terminal was left once keymgr reported, and exits with keymgr's status.
    private static let driver = #"""
        import os, pty, select, sys, termios, time
        prompt, report = sys.argv[1].encode(), sys.argv[2].encode()
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(sys.argv[3], sys.argv[3:])
        seen = b""
        def read_until(token, limit=60):
            global seen
            end = time.time() + limit
            while token not in seen and time.time() < end:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(fd, 4096)
                    except OSError:
                        return False
                    if not chunk:
                        return False
                    seen += chunk
            return token in seen
        if not read_until(prompt):
            sys.stdout.buffer.write(seen)
            sys.exit(90)
        read_until(report)
        try:
            echo = "on" if termios.tcgetattr(fd)[3] & termios.ECHO else "off"
        except termios.error:
            echo = "unknown"
        read_until(b"\x00never\x00", limit=5)
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(seen + b"\nECHO " + echo.encode() + b"\n")
        sys.exit(os.waitstatus_to_exitcode(status))
        """#

    func testAnUnansweredPINPromptEndsInTimeoutAndTheTerminalIsRestored() throws {
        try start(users: ["bob"], serverArguments: ["--auth-type", "APPLICATION_PIN", "--callback-timeout", "2"])
        let bound = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "bob", "--password-fd", "0",
                                        "--pin-fd", "0"], stdin: RefServerProcess.password + "\n482916\n")
        XCTAssertEqual(bound.status, 0, bound.summary)
        let script = sandbox.root.appendingPathComponent("pty-deadline.py")
        try Self.driver.write(to: script, atomically: true, encoding: .utf8)
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                                      ["python3", script.path, "PIN for bob: ", "allows 2 s", Sandbox.binary.path,
                                       "--home", sandbox.home.path, "sign", "--journey", "SignIn", "--user", "bob"])
        XCTAssertEqual(outcome.status, 75, outcome.summary)
        XCTAssertTrue(outcome.stdout.contains("allows 2 s"), outcome.stdout)
        XCTAssertTrue(outcome.stdout.contains("ECHO on"), "the no-echo prompt was left switched off: \(outcome.stdout)")
        XCTAssertEqual(try server.clientErrors(), ["Timeout"])
    }
}
