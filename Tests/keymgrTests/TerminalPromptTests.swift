import Foundation
import XCTest

/// The no-echo PIN prompt, driven through a real pseudo-terminal (Python's `pty`), as a person at a kiosk would.
final class TerminalPromptTests: XCTestCase {

    /// Runs keymgr on a new pseudo-terminal, answering each prompt in turn; returns the status and everything
    /// the terminal showed (keymgr's prompts and output, and whatever the terminal echoed).
    static let driver = #"""
        import os, pty, select, sys, time
        answers = [line.split("\t", 1) for line in sys.stdin.read().splitlines() if line]
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(sys.argv[1], sys.argv[1:])
        seen = b""
        searched = 0  # each prompt is looked for after the one before it, so a repeated prompt waits for its turn
        def read_until(token, limit=30):
            global seen
            end = time.time() + limit
            while seen.find(token, searched) < 0 and time.time() < end:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(fd, 4096)
                    except OSError:
                        return False
                    if not chunk:
                        return False
                    seen += chunk
            return seen.find(token, searched) >= 0
        for prompt, answer in answers:
            if not read_until(prompt.encode()):
                sys.stdout.buffer.write(seen)
                sys.exit(90)
            searched = seen.find(prompt.encode(), searched) + len(prompt.encode())
            os.write(fd, answer.encode() + b"\n")
        read_until(b"\x00never\x00", limit=30)
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(seen)
        sys.exit(os.waitstatus_to_exitcode(status))
        """#

    private func onTerminal(_ sandbox: Sandbox, _ arguments: [String], answers: [(prompt: String, answer: String)]) throws -> Outcome {
        try sandbox.onTerminal(arguments, answers: answers)
    }

    func testPINsAreAskedWithoutEchoAndANewPINTwice() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let bound = try onTerminal(sandbox, ["bind", "--user", "carol", "--auth-type", "app-pin"], answers: [
            ("New PIN for carol: ", "482916"), ("Repeat the new PIN: ", "482916"),
        ])
        XCTAssertEqual(bound.status, 0, bound.summary)
        XCTAssertFalse(bound.stdout.contains("482916"), "the PIN was echoed: \(bound.stdout)")
        XCTAssertTrue(bound.stdout.contains("bound carol"), bound.stdout)

        let signed = try onTerminal(sandbox, ["sign", "--user", "carol", "--challenge", "c"], answers: [
            ("PIN for carol: ", "482916"),
        ])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertFalse(signed.stdout.contains("482916"), "the PIN was echoed: \(signed.stdout)")
        XCTAssertTrue(signed.stdout.contains("eyJ"), "the JWS is printed: \(signed.stdout)")

        let changed = try onTerminal(sandbox, ["pin", "change", "--user", "carol"], answers: [
            ("Current PIN for carol: ", "482916"), ("New PIN for carol: ", "731905"), ("Repeat the new PIN: ", "731905"),
        ])
        XCTAssertEqual(changed.status, 0, changed.summary)
        XCTAssertFalse(changed.stdout.contains("482916") || changed.stdout.contains("731905"), changed.stdout)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "731905\n").status, 0)
    }

    func testDifferentNewPINsChangeNothing() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let outcome = try onTerminal(sandbox, ["bind", "--user", "carol", "--auth-type", "app-pin"], answers: [
            ("New PIN for carol: ", "482916"), ("Repeat the new PIN: ", "482961"),
        ])
        XCTAssertEqual(outcome.status, 65, outcome.summary)
        XCTAssertTrue(outcome.stdout.contains("the two PINs differ"), outcome.stdout)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 0)
    }

    func testDestructiveCommandsAskOnATerminalAndNeverWithout() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("dave")

        let declined = try onTerminal(sandbox, ["revoke", "--user", "dave"], answers: [("destroy its key material? [y/N] ", "n")])
        XCTAssertEqual(declined.status, 1, "no is declined, not a failed authentication: \(declined.summary)")
        XCTAssertTrue(declined.stdout.contains("declined"), declined.stdout)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 1, "nothing was revoked")

        let supersede = try onTerminal(sandbox, ["bind", "--user", "dave"], answers: [("destroy its key material? [y/N] ", "no")])
        XCTAssertEqual(supersede.status, 1, supersede.summary)
        XCTAssertEqual(try sandbox.succeed(["list", "--status", "all", "--json"]).array().count, 1, "no new key, none superseded")
        let replaced = try onTerminal(sandbox, ["bind", "--user", "dave", "--yes"], answers: [])
        XCTAssertEqual(replaced.status, 0, "--yes asks nothing: \(replaced.summary)")

        let rotated = try onTerminal(sandbox, ["master", "rotate"], answers: [("re-wrap every secret under a new one? [y/N] ", "y")])
        XCTAssertEqual(rotated.status, 0, rotated.summary)
        let accepted = try onTerminal(sandbox, ["revoke", "--user", "dave"], answers: [("destroy its key material? [y/N] ", "yes")])
        XCTAssertEqual(accepted.status, 0, accepted.summary)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 0)

        // Without a terminal nothing asks: scripts and timers go on as they are told.
        try sandbox.bind("erin")
        XCTAssertEqual(try sandbox.keymgr(["revoke", "--user", "erin"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["master", "rotate"]).status, 0)
    }

    func testARefusedNewPINIsSaidBeforeRepeatAndAskedAgain() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let bound = try onTerminal(sandbox, ["bind", "--user", "carol", "--auth-type", "app-pin"], answers: [
            ("New PIN for carol: ", "123456"), ("New PIN for carol: ", "482916"),
            ("Repeat the new PIN: ", "482916"),
        ])
        XCTAssertEqual(bound.status, 0, bound.summary)
        let refusal = try XCTUnwrap(bound.stdout.range(of: "too common"))
        let repeatPrompt = try XCTUnwrap(bound.stdout.range(of: "Repeat the new PIN"))
        XCTAssertLessThan(refusal.lowerBound, repeatPrompt.lowerBound, "the policy speaks before Repeat: \(bound.stdout)")
        XCTAssertEqual(bound.stdout.components(separatedBy: "Repeat the new PIN").count - 1, 1, "one Repeat, for the accepted PIN")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "482916\n").status, 0)
    }
}

extension Sandbox {
    /// Runs keymgr on this home on a new pseudo-terminal (stdin, stdout and stderr all on it), answering each prompt
    /// in turn; stdout holds everything the terminal showed.
    func onTerminal(_ arguments: [String], answers: [(prompt: String, answer: String)],
                    extraEnvironment: [String: String] = [:]) throws -> Outcome {
        let script = root.appendingPathComponent("pty-driver.py")
        try TerminalPromptTests.driver.write(to: script, atomically: true, encoding: .utf8)
        return try run(URL(fileURLWithPath: "/usr/bin/env"),
                       ["python3", script.path, Sandbox.binary.path, "--home", home.path] + arguments,
                       stdin: answers.map { "\($0.prompt)\t\($0.answer)\n" }.joined(), extraEnvironment: extraEnvironment)
    }
}
