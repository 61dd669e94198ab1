import Foundation
import XCTest

/// The no-echo PIN prompt, driven through a real pseudo-terminal (Python's `pty`), as a person at a kiosk would.
final class TerminalPromptTests: XCTestCase {

    /// Runs keymgr on a new pseudo-terminal, answering each prompt in turn; returns the status and everything
    /// the terminal showed (keymgr's prompts and output, and whatever the terminal echoed).
    private static let driver = #"""
        import os, pty, select, sys, time
        answers = [line.split("\t", 1) for line in sys.stdin.read().splitlines() if line]
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(sys.argv[1], sys.argv[1:])
        seen = b""
        def read_until(token, limit=30):
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
        for prompt, answer in answers:
            if not read_until(prompt.encode()):
                sys.stdout.buffer.write(seen)
                sys.exit(90)
            seen = seen.replace(prompt.encode(), b"<" + prompt.encode() + b">", 1)
            os.write(fd, answer.encode() + b"\n")
        read_until(b"\x00never\x00", limit=30)
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(seen)
        sys.exit(os.waitstatus_to_exitcode(status))
        """#

    private func onTerminal(_ sandbox: Sandbox, _ arguments: [String], answers: [(prompt: String, answer: String)]) throws -> Outcome {
        let script = sandbox.root.appendingPathComponent("pty-driver.py")
        try Self.driver.write(to: script, atomically: true, encoding: .utf8)
        return try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                               ["python3", script.path, Sandbox.binary.path, "--home", sandbox.home.path] + arguments,
                               stdin: answers.map { "\($0.prompt)\t\($0.answer)\n" }.joined())
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
}
