import Foundation
import XCTest

/// Each exit status of docs/cli.md's table that a local command can produce, with its JSON error object.
final class ExitStatusTests: XCTestCase {

    func testUsageErrorsExit64() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try assertJSONError(try sandbox.keymgr(["status", "--bogus", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["--json", "frobnicate"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["bind", "--user", "alice", "--auth-type", "fingerprint", "--json"]),
                            status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["bind", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["sign", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "a", "--claim", "novalue", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["list", "--status", "expired", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["audit", "--since", "last tuesday", "--json"]), status: 64, code: "usage")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "a", "--pin-stdin", "--pin-fd", "3", "--json"]),
                            status: 64, code: "usage")

        let human = try sandbox.keymgr(["bind", "--user", "alice", "--auth-type", "fingerprint"])
        XCTAssertEqual(human.status, 64)
        XCTAssertEqual(human.stdout, "", "without --json, errors go to stderr only")
        XCTAssertTrue(human.stderr.hasPrefix("keymgr: "), human.stderr)
        XCTAssertTrue(human.stderr.contains("'keymgr bind --help'"), human.stderr)

        for spelling in ["NONE", "none", "APPLICATION_PIN", "app-pin", "App-Pin"] {
            let outcome = try sandbox.keymgr(["bind", "--user", "u-\(spelling)", "--auth-type", spelling, "--pin-stdin"],
                                             stdin: "482916\n")
            XCTAssertEqual(outcome.status, 0, outcome.summary)
        }
    }

    func testBadInputExits65() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        for reserved in ["sub", "exp", "iat", "nbf", "iss", "challenge"] {
            try assertJSONError(try sandbox.keymgr(["sign", "--user", "alice", "--claim", "\(reserved)=x", "--json"]),
                                status: 65, code: "invalidCustomClaims")
        }
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "alice", "--claim", "ctx=json:{broken", "--json"]),
                            status: 65, code: "badInput")
        try assertJSONError(try sandbox.keymgr(["bind", "--user", "tab\there", "--json"]), status: 65, code: "badInput")
    }

    func testUnknownUserOrKeyExits66() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "nobody", "--challenge", "c", "--json"]),
                            status: 66, code: "clientNotRegistered")
        try assertJSONError(try sandbox.keymgr(["sign", "--kid", "00000000-0000-0000-0000-000000000000", "--json"]),
                            status: 66, code: "clientNotRegistered")
        let human = try sandbox.keymgr(["sign", "--user", "nobody"])
        XCTAssertEqual(human.status, 66)
        XCTAssertEqual(human.stdout, "")
        XCTAssertTrue(human.stderr.hasPrefix("keymgr: "), human.stderr)
    }

    func testBusyStoreExits75() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")

        // Another process holds the write lock: a sqlite3 shell inside BEGIN EXCLUSIVE, kept open.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        holder.arguments = [sandbox.database.path]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer {
            try? input.fileHandleForWriting.close()
            holder.waitUntilExit()
        }
        try input.fileHandleForWriting.write(contentsOf: Data("BEGIN EXCLUSIVE;\nSELECT 'locked';\n".utf8))
        var said = ""
        while !said.contains("locked") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            said += String(decoding: chunk, as: UTF8.self)
        }
        XCTAssertTrue(said.contains("locked"), "sqlite3 took the lock")

        let started = Date()
        let busy = try sandbox.keymgr(["revoke", "--user", "alice", "--json"], timeout: 30)
        try assertJSONError(busy, status: 75, code: "busy")
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "gives up after the busy timeout")

        try input.fileHandleForWriting.write(contentsOf: Data("ROLLBACK;\n".utf8))
        try input.fileHandleForWriting.close()
        holder.waitUntilExit()
        XCTAssertEqual(try sandbox.keymgr(["revoke", "--user", "alice"]).status, 0, "works once the lock is gone")
    }

    func testNotAuthenticatedExits77() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--json"], stdin: "000000\n"),
                            status: 77, code: "unAuthorize")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "carol", "--json"]), status: 77, code: "abort")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--json"], stdin: ""),
                            status: 77, code: "abort")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--json"], stdin: "\n"),
                            status: 77, code: "abort")
    }

    func testPINLocksAfterFiveWrongGuessesAndRebindRestores() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        for attempt in 1...5 {
            let wrong = try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--json"], stdin: "11111\(attempt)\n")
            XCTAssertEqual(wrong.status, 77, wrong.summary)
        }
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--json"], stdin: "482916\n"),
                            status: 77, code: "pinLocked")
        let locked = try sandbox.succeed(["list", "--user", "carol", "--json"]).array()
        XCTAssertEqual(locked.map { $0["status"] as? String }, ["locked"], "listed by default, as locked")

        try sandbox.succeed(["rebind", "--user", "carol", "--auth-type", "app-pin", "--pin-stdin"], stdin: "731905\n")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "731905\n").status, 0)
    }

    func testBiometricVerifierRejectedExits77UnavailableExits69AndSlowExits75() throws {
        let sandbox = try Sandbox()
        // The verifier answers with whatever exit status the verdict file holds, or takes its time.
        let verdict = sandbox.root.appendingPathComponent("verdict")
        let verifier = sandbox.root.appendingPathComponent("verify-finger")
        try """
            #!/bin/sh
            verdict=$(cat \(verdict.path))
            if [ "$verdict" = slow ]; then sleep 5; exit 0; fi
            exit "$verdict"

            """.write(to: verifier, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: verifier.path)
        try "0".write(to: verdict, atomically: true, encoding: .utf8)
        try sandbox.initialise(["--biometric-verifier", "\(verifier.path) {osUser} {userId}"])
        try sandbox.bind("erin", ["--auth-type", "biometric-only"])
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "erin"]).status, 0)

        try "1".write(to: verdict, atomically: true, encoding: .utf8)
        let rejected = try sandbox.keymgr(["sign", "--user", "erin", "--json"])
        XCTAssertEqual(rejected.status, 77, rejected.summary)
        try "2".write(to: verdict, atomically: true, encoding: .utf8)
        let unavailable = try sandbox.keymgr(["sign", "--user", "erin", "--json"])
        try assertJSONError(unavailable, status: 69, code: "unsupported")
        try "slow".write(to: verdict, atomically: true, encoding: .utf8)
        let started = Date()
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "erin", "--timeout", "0.5", "--json"]), status: 75, code: "timeout")
        XCTAssertLessThan(Date().timeIntervalSince(started), 4, "--timeout cuts the verifier short")
    }

    func testConfigurationErrorsExit78() throws {
        let empty = try Sandbox()
        try assertJSONError(try empty.keymgr(["status", "--json"]), status: 78, code: "config")
        try FileManager.default.createDirectory(at: empty.home, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: empty.home.path)
        try assertJSONError(try empty.keymgr(["list", "--json"]), status: 78, code: "config")
        let human = try empty.keymgr(["status"])
        XCTAssertEqual(human.status, 78)
        XCTAssertTrue(human.stderr.contains("keymgr init"), "says what to do: \(human.stderr)")

        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        try assertJSONError(try sandbox.keymgr(["init", "--json"] + Sandbox.fastInit), status: 78, code: "config")
        try FileManager.default.removeItem(at: sandbox.home.appendingPathComponent("master.key"))
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "alice", "--json"]), status: 78, code: "config")
        try assertJSONError(try sandbox.keymgr(["status", "--json"]), status: 78, code: "config")
    }
}
