import Foundation
import XCTest

/// Hostile input on the command line or on stdin: a clear error (64 or 65), nothing stored, nothing sent, no PIN
/// attempt spent, and never a crash.
final class InputLimitTests: ServerTestCase {
    static let escape = "bob\u{1B}[2J\u{1B}]52;c;ZXZpbA==\u{07}"

    /// A file an option names may be any file the caller can open (`/dev/zero`, an endless pipe): keymgr reads a
    /// bounded amount and refuses the rest, rather than reading until its memory runs out.
    func testAnEndlessFileNamedByAnOptionIsRefusedNotReadForever() throws {
        try startOAuth()
        for option in ["--metadata", "--initial-access-token-file"] {
            var arguments = ["dcr", "register", "--user", "alice", "--json", option, "/dev/zero"]
            if option != "--metadata" { arguments += ["--software-id", "keymgr-template"] }
            let outcome = try sandbox.keymgr(arguments, timeout: 30)
            try assertJSONError(outcome, status: 65, code: "badInput")
            XCTAssertTrue(outcome.stderr.contains("/dev/zero holds more than 1 MiB"), outcome.summary)
        }
        let registrations = try server.recordedRequests().filter { ($0["method"] as? String) == "POST" && !(($0["target"] as? String) ?? "").hasPrefix("/__refserver") }
        XCTAssertEqual(registrations.count, 0, "nothing was sent to the server: \(registrations)")
    }

    func testDcrRegisterHoldsUserIdsToTheRulesOfBind() throws {
        try startOAuth()
        for user in [Self.escape, String(repeating: "b", count: 100_000), "bob\u{202E}evil"] {
            let outcome = try sandbox.keymgr(["dcr", "register", "--user", user, "--software-id", "keymgr-template", "--json"])
            try assertJSONError(outcome, status: 65, code: "badInput")
            // bind refuses the same ids the same way.
            try assertJSONError(try sandbox.keymgr(["bind", "--user", user, "--json"]), status: 65, code: "badInput")
        }
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0, "no user was stored")
        let registrations = try server.recordedRequests().filter { ($0["method"] as? String) == "POST" && !(($0["target"] as? String) ?? "").hasPrefix("/__refserver") }
        XCTAssertEqual(registrations.count, 0, "nothing was sent to the server: \(registrations)")
    }

    func testBindRefusesAUsernameWithControlOrBidiCharacters() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        for username in [Self.escape, "Alice\u{202E}ecilA", "Alice\u{0085}", "Alice\u{7F}"] {
            let outcome = try sandbox.keymgr(["bind", "--user", "alice", "--username", username, "--json"])
            try assertJSONError(outcome, status: 65, code: "badInput")
        }
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 0)
    }

    func testServerSetRefusesARealmPathWithAnEscape() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        for realm in ["/realms/root\u{1B}[31m", "/realms/\u{202E}toor"] {
            let outcome = try sandbox.keymgr(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9/am",
                                              "--realm-path", realm, "--json"])
            XCTAssertTrue([64, 65].contains(outcome.status), outcome.summary)
            XCTAssertTrue(outcome.stderr.contains("realm path") || outcome.stderr.contains("--realm-path"), outcome.stderr)
        }
        XCTAssertNotEqual(try sandbox.keymgr(["server", "show", "--json"]).status, 0, "no profile was stored")
    }

    func testSecondsOptionsRefuseInfinityNaNHugeAndNegativeValues() throws {
        // A registered user at a configured server: without the check, `login --timeout inf` reached the HTTP client.
        try startOAuth()
        try registerClient("alice")
        try sandbox.bind("alice")
        for value in ["inf", "1e30", "-1", "nan", "0"] {
            for arguments in [["login", "--user", "alice", "--timeout", value], ["dcr", "delete", "--user", "alice", "--timeout", value],
                              ["sign", "--user", "alice", "--challenge", "c", "--timeout", value],
                              ["token", "print", "--user", "alice", "--timeout", value]] {
                let outcome = try sandbox.keymgr(arguments + ["--json"])
                XCTAssertEqual(outcome.status, 64, outcome.summary)
                XCTAssertTrue(outcome.stderr.contains("--timeout"), outcome.summary)
            }
        }
        for value in ["inf", "nan", "-1", "1e30"] {
            let outcome = try sandbox.keymgr(["token", "print", "--user", "alice", "--min-ttl", value, "--json"])
            XCTAssertEqual(outcome.status, 64, outcome.summary)
        }
    }

    func testAHugePINIsRefusedBeforeAnAttemptIsCounted() throws {
        sandbox = try Sandbox()
        try sandbox.initialise(["--pin-retry", "1"])
        try sandbox.bind("alice", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        // 10 MB on stdin, from a file (a pipe the reader leaves early would only break the writer).
        let huge = sandbox.root.appendingPathComponent("huge-pin")
        try Data(repeating: UInt8(ascii: "7"), count: 10 << 20).write(to: huge)
        for command in [["sign", "--user", "alice", "--challenge", "c", "--pin-stdin"], ["pin", "change", "--user", "alice", "--pin-stdin"]] {
            let arguments = ["--home", sandbox.home.path] + command + ["--json"]
            let outcome = try sandbox.run(URL(fileURLWithPath: "/bin/sh"),
                                          ["-c", "exec \"$0\" \"$@\" < '\(huge.path)'", Sandbox.binary.path] + arguments)
            try assertJSONError(outcome, status: 65, code: "badInput")
            XCTAssertLessThan(outcome.stderr.utf8.count + outcome.stdout.utf8.count, 4096, "the PIN is not echoed")
        }
        // With a retry limit of 1, a counted attempt would have locked the key.
        XCTAssertEqual(try sandbox.succeed(["list", "--user", "alice", "--json"]).array().map { $0["status"] as? String }, ["active"])
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c", "--pin-stdin"], stdin: "482916\n")
    }
}
