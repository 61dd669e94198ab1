import Foundation
import XCTest

/// Issue 9, item 8: concurrent keymgr processes must never lose a key. Each pair runs at the same time, 20 times,
/// as separate processes; afterwards every key still signs with the PIN it should.
final class RaceTests: XCTestCase {
    static let trials = 20

    /// Starts keymgr without waiting for it; its output is discarded (only its exit status matters here).
    func start(_ sandbox: Sandbox, _ arguments: [String], stdin: String = "") throws -> Process {
        let process = Process()
        process.executableURL = Sandbox.binary
        process.arguments = ["--home", sandbox.home.path] + arguments
        process.environment = sandbox.environment
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        try? input.fileHandleForWriting.write(contentsOf: Data(stdin.utf8))
        try? input.fileHandleForWriting.close()
        return process
    }

    func finish(_ process: Process) -> Int32 {
        process.waitUntilExit()
        return process.terminationStatus
    }

    func testSignConcurrentWithPinChangeNeverLosesTheKey() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise(["--pin-retry", "10"])
        let pins = ["482916", "730519"]
        try sandbox.bind("ann", ["--auth-type", "app-pin", "--pin-stdin"], stdin: pins[0] + "\n")
        for trial in 0..<Self.trials {
            let (current, next) = (pins[trial % 2], pins[(trial + 1) % 2])
            let sign = try start(sandbox, ["sign", "--user", "ann", "--pin-stdin"], stdin: current + "\n")
            let change = try start(sandbox, ["pin", "change", "--user", "ann", "--pin-stdin"], stdin: "\(current)\n\(next)\n")
            let (signed, changed) = (finish(sign), finish(change))
            XCTAssertEqual(changed, 0, "trial \(trial): pin change")
            // The sign used the old PIN: it worked, or the change committed first and it was a wrong PIN.
            XCTAssertTrue(signed == 0 || signed == 77, "trial \(trial): sign exited \(signed)")
            let after = try sandbox.keymgr(["sign", "--user", "ann", "--pin-stdin"], stdin: next + "\n")
            XCTAssertEqual(after.status, 0, "trial \(trial): the new PIN no longer signs: \(after.summary)")
        }
    }

    func testBindAndSignConcurrentWithMasterRotateNeverLoseAKey() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("signer")
        try sandbox.bind("pinned", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        for trial in 0..<Self.trials {
            let rotate = try start(sandbox, ["master", "rotate"])
            let bind = try start(sandbox, ["bind", "--user", "user\(trial)"])
            let sign = try start(sandbox, ["sign", "--user", "signer"])
            let signPIN = try start(sandbox, ["sign", "--user", "pinned", "--pin-stdin"], stdin: "482916\n")
            XCTAssertEqual(finish(rotate), 0, "trial \(trial): master rotate")
            XCTAssertEqual(finish(bind), 0, "trial \(trial): bind")
            XCTAssertEqual(finish(sign), 0, "trial \(trial): sign")
            XCTAssertEqual(finish(signPIN), 0, "trial \(trial): sign with a PIN")
        }
        for user in ["signer"] + (0..<Self.trials).map({ "user\($0)" }) {
            let outcome = try sandbox.keymgr(["sign", "--user", user])
            XCTAssertEqual(outcome.status, 0, "\(user)'s key no longer signs: \(outcome.summary)")
        }
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "pinned", "--pin-stdin"], stdin: "482916\n").status, 0)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    func testTwoRotationsAtOnceNeverLeaveAKeyFileTheStoreWasNotSealedUnder() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("signer")
        for trial in 0..<Self.trials {
            let first = try start(sandbox, ["master", "rotate"])
            let second = try start(sandbox, ["master", "rotate"])
            let statuses = [finish(first), finish(second)]
            // One rotates; the other rotates after it or is told to try again (75): never anything else.
            XCTAssertTrue(statuses.allSatisfy { $0 == 0 || $0 == 75 } && statuses.contains(0), "trial \(trial): \(statuses)")
            let status = try sandbox.keymgr(["status"])
            XCTAssertEqual(status.status, 0, "trial \(trial): the key file no longer opens the store: \(status.summary)")
        }
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "signer"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }
}
