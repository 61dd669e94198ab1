import Foundation
import XCTest

/// The wrong-PIN counter is committed before a guess is checked: a process killed during the check still spent
/// the attempt, so killing keymgr mid-guess cannot buy unlimited guesses.
final class PINCrashTests: XCTestCase {
    func testCounterSurvivesAProcessKilledRightAfterAWrongGuess() throws {
        let sandbox = try Sandbox()
        // A slow KDF (about a second here), so the process is surely still checking the guess when it is killed.
        let slow = ["init", "--device-name", "kiosk", "--argon2-memory", "262144", "--argon2-iterations", "4",
                    "--argon2-parallelism", "1"]
        XCTAssertEqual(try sandbox.keymgr(slow).status, 0)
        let bound = try sandbox.keymgr(["bind", "--user", "alice", "--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(bound.status, 0, bound.summary)

        let process = Process()
        process.executableURL = Sandbox.binary
        process.arguments = ["--home", sandbox.home.path, "sign", "--user", "alice", "--pin-stdin"]
        process.environment = sandbox.environment
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data("999000\n".utf8))
        try input.fileHandleForWriting.close()

        // Kill it the moment the failed attempt is on disk, while the KDF is still running.
        let deadline = Date().addingTimeInterval(30)
        var attempts = 0
        while attempts == 0 && process.isRunning && Date() < deadline {
            attempts = try failedAttempts(sandbox)
            if attempts == 0 { usleep(5_000) }
        }
        XCTAssertTrue(process.isRunning, "the guess finished before it could be interrupted; make the KDF slower")
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .uncaughtSignal)
        XCTAssertEqual(attempts, 1)
        XCTAssertEqual(try failedAttempts(sandbox), 1, "the attempt stays spent after the kill")

        // The right PIN still works and clears the counter; the store is consistent.
        let signed = try sandbox.keymgr(["sign", "--user", "alice", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try failedAttempts(sandbox), 0)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    private func failedAttempts(_ sandbox: Sandbox) throws -> Int {
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                      ["-readonly", sandbox.database.path, "SELECT failed_attempts FROM app_pins"])
        return Int(outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }
}
