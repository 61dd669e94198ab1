import Foundation
import SWTPMSupport
import XCTest

/// The binary with `init --master-key tpm` against a swtpm of each test's own: the master key sealed to the TPM,
/// what `status` says, the failures (another TPM, a deleted blob, an unreachable TPM), and `master rotate` killed at
/// every moment.
final class TPMMasterKeyCommandTests: XCTestCase {
    private var tpm: SoftwareTPM!
    private var sandbox: Sandbox!

    override func setUpWithError() throws {
        tpm = try SoftwareTPM()
        sandbox = try Sandbox()
    }

    override func tearDownWithError() throws {
        sandbox = nil
        tpm = nil
    }

    private var sealed: URL { sandbox.home.appendingPathComponent("master.tpm") }

    private func initialiseSealed(_ backend: String) throws {
        try sandbox.initialise(["--master-key", "tpm", "--key-backend", backend, "--tpm-tcti", tpm.tcti])
    }

    private func assertVerifies(_ jws: String, jwk: Any, file: StaticString = #filePath, line: UInt = #line) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("tools/verify_jws.py")
        let jwkText = String(decoding: try JSONSerialization.data(withJSONObject: jwk), as: UTF8.self)
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"),
                                      [script.path, jwkText, jws.trimmingCharacters(in: .whitespacesAndNewlines)])
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
    }

    func testASealedMasterKeySignsWithEitherBackendAndLeavesNoKeyFile() throws {
        for backend in ["software", "tpm"] {
            sandbox = try Sandbox()
            try initialiseSealed(backend)
            XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.home.appendingPathComponent("master.key").path))
            let attributes = try FileManager.default.attributesOfItem(atPath: sealed.path)
            XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)

            let status = try sandbox.succeed(["status", "--json"]).object()
            let masterKey = try XCTUnwrap(status["masterKey"] as? [String: Any])
            XCTAssertEqual(masterKey["source"] as? String, "tpm")
            XCTAssertEqual(masterKey["tcti"] as? String, tpm.tcti)
            XCTAssertEqual(masterKey["path"] as? String, sealed.path)
            XCTAssertEqual(status["keyBackend"] as? String, backend)
            let human = try sandbox.succeed(["status"]).stdout
            XCTAssertTrue(human.contains("master key      tpm (sealed to \(tpm.tcti)"), human)

            let bound = try sandbox.bind("alice", ["--challenge", "c1"])
            let signed = try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c2"]).stdout
            try assertVerifies(signed, jwk: try XCTUnwrap(bound["jwk"]))
            XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        }
        // A file-kept master key says so.
        sandbox = try Sandbox()
        try sandbox.initialise(["--key-backend", "software"])
        let masterKey = try XCTUnwrap(try sandbox.succeed(["status", "--json"]).object()["masterKey"] as? [String: Any])
        XCTAssertEqual(masterKey["source"] as? String, "home")
        XCTAssertEqual(masterKey["path"] as? String, sandbox.home.appendingPathComponent("master.key").path)
    }

    func testTheBlobOnAnotherTPMUnreachableOrDeletedFailsClearly() throws {
        try initialiseSealed("software")
        try sandbox.bind("alice")

        tpm.stop()
        let unreachable = try sandbox.keymgr(["sign", "--user", "alice"])
        XCTAssertEqual(unreachable.status, 69, unreachable.summary)
        XCTAssertTrue(unreachable.stderr.contains(tpm.tcti) && unreachable.stderr.contains("master key"), unreachable.stderr)

        // The home's blob at another TPM (a disk moved to another machine): 78, never a key.
        let other = try SoftwareTPM(socket: tpm.socket)
        let moved = try sandbox.keymgr(["sign", "--user", "alice"])
        XCTAssertEqual(moved.status, 78, moved.summary)
        XCTAssertTrue(moved.stderr.contains("does not unseal") && moved.stderr.contains("another TPM"), moved.stderr)
        other.stop()

        try tpm.start()
        try sandbox.succeed(["sign", "--user", "alice"])

        try FileManager.default.removeItem(at: sealed)
        let deleted = try sandbox.keymgr(["sign", "--user", "alice", "--json"])
        try assertJSONError(deleted, status: 78, code: "config")
        XCTAssertTrue(deleted.stderr.contains("master.tpm"), deleted.stderr)
    }

    func testSealingConflictsWithAMasterKeyFromTheEnvironment() throws {
        let file = sandbox.root.appendingPathComponent("env.key")
        try Data(repeating: 9, count: 32).write(to: file)
        chmod(file.path, 0o600)
        let refused = try sandbox.keymgr(["init", "--master-key", "tpm", "--tpm-tcti", tpm.tcti] + Sandbox.fastInit,
                                         extraEnvironment: ["KEYMGR_MASTER_KEY_FILE": file.path])
        XCTAssertEqual(refused.status, 64, refused.summary)
        XCTAssertTrue(refused.stderr.contains("KEYMGR_MASTER_KEY_FILE"), refused.stderr)
    }

    /// `master rotate` SIGKILLed at moments spread over a whole rotation (sealing the new key, writing
    /// master.tpm.next, the re-sealing transaction, the rename, the rollback counter's increment): after every kill
    /// the store opens and signs with the same key, and the audit log verifies at the end.
    func testRotateSurvivesASIGKILLAtEveryStep() throws {
        try initialiseSealed("tpm")
        let jwk = try XCTUnwrap(try sandbox.bind("alice")["jwk"])
        try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")

        // How long one rotation takes here, to spread the kills over it (not asserted).
        let started = Date()
        try sandbox.succeed(["master", "rotate", "--yes"])
        let duration = max(Date().timeIntervalSince(started), 0.05)

        let kills = 24
        var killed = 0
        for step in 0..<kills {
            let process = Process()
            process.executableURL = Sandbox.binary
            process.arguments = ["--home", sandbox.home.path, "master", "rotate", "--yes"]
            process.environment = sandbox.environment
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            usleep(UInt32(duration * 1.2 * Double(step) / Double(kills) * 1_000_000))
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                killed += 1
            }
            process.waitUntilExit()

            let status = try sandbox.keymgr(["status"])
            XCTAssertEqual(status.status, 0, "after a kill at step \(step): \(status.summary)")
            let signed = try sandbox.keymgr(["sign", "--user", "alice"])
            XCTAssertEqual(signed.status, 0, "after a kill at step \(step): \(signed.summary)")
            if signed.status == 0 { try assertVerifies(signed.stdout, jwk: jwk) }
        }
        XCTAssertGreaterThan(killed, 0, "no rotation was interrupted")
        try sandbox.succeed(["master", "rotate", "--yes"])
        try sandbox.succeed(["sign", "--user", "bob", "--pin-stdin"], stdin: "482915\n")
        let verified = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(verified.status, 0, verified.summary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sealed.path + ".next"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.home.appendingPathComponent("master.key").path))
    }

    /// Writes racing `master rotate` on a TPM store whose master key is sealed: a write that committed just before a
    /// rotation must not run again when it meets the new key (a rebind did, and failed on inserting its key twice,
    /// when the counter took a second step in a transaction of its own), nor leave counter steps the store never
    /// recorded (refused as rolled back for good).
    func testWritesRacingMasterRotateOnATPMStoreNeitherRepeatNorRollBack() throws {
        try initialiseSealed("tpm")
        try sandbox.bind("signer")
        func start(_ arguments: [String]) throws -> Process {
            let process = Process()
            process.executableURL = Sandbox.binary
            process.arguments = ["--home", sandbox.home.path] + arguments
            process.environment = sandbox.environment
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        var rebinds = 0
        for trial in 0..<8 {
            let rotate = try start(["master", "rotate", "--yes"])
            let rebind = try start(["rebind", "--user", "signer", "--auth-type", "none"])
            let sign = try start(["sign", "--user", "signer"])
            for process in [rotate, rebind, sign] { process.waitUntilExit() }
            XCTAssertTrue([0, 75].contains(rotate.terminationStatus), "trial \(trial): rotate \(rotate.terminationStatus)")
            XCTAssertTrue([0, 75].contains(rebind.terminationStatus), "trial \(trial): rebind \(rebind.terminationStatus)")
            XCTAssertTrue([0, 66, 75].contains(sign.terminationStatus), "trial \(trial): sign \(sign.terminationStatus)")
            if rebind.terminationStatus == 0 { rebinds += 1 }
            let status = try sandbox.keymgr(["sign", "--user", "signer"])
            XCTAssertEqual(status.status, 0, "trial \(trial): \(status.summary)")
        }
        let audit = try sandbox.succeed(["audit", "--event", "key.rebound", "--json"]).array()
        XCTAssertEqual(audit.count, rebinds, "one key.rebound entry per rebind that succeeded")
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }
}
