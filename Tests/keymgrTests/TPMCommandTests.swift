import Foundation
@testable import KeyManager
import SWTPMSupport
import XCTest

/// The binary against a swtpm of each test's own: `init --key-backend tpm`, the commands on TPM keys, and the exit
/// statuses of the TPM's failures.
final class TPMCommandTests: XCTestCase {
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

    private func initialiseOnTPM(_ extra: [String] = []) throws {
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", tpm.tcti] + extra)
    }

    /// The independent verifier (Tests/tools/verify_jws.py) on a JWS and its key's JWK.
    private func assertVerifies(_ jws: String, jwk: Any, file: StaticString = #filePath, line: UInt = #line) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("tools/verify_jws.py")
        let jwkText = String(decoding: try JSONSerialization.data(withJSONObject: jwk), as: UTF8.self)
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [script.path, jwkText, jws])
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
    }

    func testTheCommandsWorkOnATPMStoreAndStatusSaysSo() throws {
        try initialiseOnTPM()
        let status = try sandbox.succeed(["status", "--json"]).object()
        XCTAssertEqual(status["keyBackend"] as? String, "tpm")
        XCTAssertEqual(status["tpmTcti"] as? String, tpm.tcti)
        let human = try sandbox.succeed(["status"]).stdout
        XCTAssertTrue(human.contains("key backend     tpm"), human)

        let bound = try sandbox.bind("alice", ["--challenge", "c1"])
        let jwk = try XCTUnwrap(bound["jwk"])
        try assertVerifies(try XCTUnwrap(bound["jws"] as? String), jwk: jwk)
        let signed = try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c2", "--claim", "a=b"]).stdout
        try assertVerifies(signed.trimmingCharacters(in: .whitespacesAndNewlines), jwk: jwk)

        let pinned = try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")
        let pinJWK = try XCTUnwrap(pinned["jwk"])
        let wrong = try sandbox.keymgr(["sign", "--user", "bob", "--pin-stdin"], stdin: "111111\n")
        XCTAssertEqual(wrong.status, 77, wrong.summary)
        try sandbox.succeed(["pin", "change", "--user", "bob", "--pin-stdin"], stdin: "482915\n693027\n")
        try sandbox.succeed(["master", "rotate", "--yes"])
        let afterRotation = try sandbox.succeed(["sign", "--user", "bob", "--pin-stdin"], stdin: "693027\n").stdout
        try assertVerifies(afterRotation.trimmingCharacters(in: .whitespacesAndNewlines), jwk: pinJWK)
        let tpmStatus = try sandbox.succeed(["tpm", "status", "--json"]).object()
        XCTAssertEqual(tpmStatus["failures"] as? Int, 1, "the TPM counted the wrong PIN")
        XCTAssertEqual(tpmStatus["holdsLockoutAuth"] as? Bool, true)
        try sandbox.succeed(["rebind", "--user", "bob", "--auth-type", "none"])
        try sandbox.succeed(["sign", "--user", "bob"])
        try sandbox.succeed(["revoke", "--user", "alice", "--yes"])
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "alice"]).status, 66)
        // list and export never need the TPM.
        tpm.stop()
        try sandbox.succeed(["list"])
        try sandbox.succeed(["list", "--status", "all", "--json"])
    }

    /// The issue's attack, before and after: someone who holds the database puts the PIN row back every few wrong
    /// guesses. A software store never locks; a TPM store's TPM locks PIN keys out at maxTries (3 here), and the
    /// right PIN then gets 77 saying when the lockout lifts, until `tpm reset-lockout`.
    func testRestoringThePINRowBetweenGuessesIsStoppedByTheTPM() throws {
        func guessAndRestore(rounds: Int, wrongPerRound: Int, kid: String) throws -> [Int32] {
            // The whole row, MACs included, kept in a database of the attacker's own and put back between guesses.
            let copy = sandbox.home.deletingLastPathComponent().appendingPathComponent("saved-pin-\(kid).db").path
            let save = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path,
                "ATTACH '\(copy)' AS saved; CREATE TABLE saved.pin AS SELECT * FROM app_pins WHERE kid = '\(kid)'"])
            XCTAssertEqual(save.status, 0, save.summary)
            var statuses: [Int32] = []
            for _ in 0..<rounds {
                for _ in 0..<wrongPerRound {
                    statuses.append(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "000000\n").status)
                }
                let restore = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path,
                    "ATTACH '\(copy)' AS saved; INSERT OR REPLACE INTO app_pins SELECT * FROM saved.pin"])
                XCTAssertEqual(restore.status, 0, restore.summary)
            }
            return statuses
        }

        // Before: a software store.
        try sandbox.initialise(["--key-backend", "software", "--pin-retry", "5"])
        var kid = try XCTUnwrap(sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")["kid"] as? String)
        XCTAssertEqual(try guessAndRestore(rounds: 3, wrongPerRound: 4, kid: kid), Array(repeating: 77, count: 12))
        try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin"], stdin: "482915\n")

        // After: a TPM store that locks out at 3 wrong PINs.
        sandbox = try Sandbox()
        try initialiseOnTPM(["--pin-retry", "5", "--tpm-max-tries", "3"])
        kid = try XCTUnwrap(sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")["kid"] as? String)
        try sandbox.bind("dan")
        _ = try guessAndRestore(rounds: 2, wrongPerRound: 2, kid: kid)
        let refused = try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "482915\n")
        XCTAssertEqual(refused.status, 77, refused.summary)
        XCTAssertTrue(refused.stderr.contains("dictionary-attack lockout") && refused.stderr.contains("lifts within"),
                      refused.stderr)
        try sandbox.succeed(["sign", "--user", "dan"])  // noDA keys keep working
        let status = try sandbox.succeed(["tpm", "status", "--json"]).object()
        XCTAssertEqual(status["inLockout"] as? Bool, true)

        try sandbox.succeed(["tpm", "reset-lockout"])
        try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin"], stdin: "482915\n")
    }

    /// A store whose TPM is another one (a fresh TPM at its socket, as a store copied to another machine or a TPM
    /// cleared or replaced): not tampering, the TPM is named as cleared or replaced (TPMRecoveryTests goes on).
    func testAnUnreachableTPMExits69NamingTheTCTIAndAnotherTPMIsNamedReplaced() throws {
        try initialiseOnTPM()
        try sandbox.bind("erin")
        tpm.stop()
        let unreachable = try sandbox.keymgr(["sign", "--user", "erin"])
        XCTAssertEqual(unreachable.status, 69, unreachable.summary)
        XCTAssertTrue(unreachable.stderr.contains(tpm.tcti), unreachable.stderr)

        try tpm.start()
        try sandbox.succeed(["sign", "--user", "erin"])  // persistence across a TPM restart
        tpm.stop()
        let other = try SoftwareTPM(socket: tpm.socket)
        let moved = try sandbox.keymgr(["sign", "--user", "erin"])
        XCTAssertEqual(moved.status, 78, moved.summary)
        XCTAssertTrue(moved.stderr.contains("cleared or replaced") && !moved.stderr.contains("tamper"), moved.stderr)
        other.stop()
    }

    func testAutoFallsBackToSoftwareAndSaysWhy() throws {
        let nowhere = "swtpm:path=\(sandbox.root.appendingPathComponent("none.sock").path)"
        try sandbox.initialise(["--tpm-tcti", nowhere])
        let status = try sandbox.succeed(["status", "--json"]).object()
        XCTAssertEqual(status["keyBackend"] as? String, "software")
        XCTAssertTrue((status["keyBackendReason"] as? String)?.contains("no TPM answered at \(nowhere)") == true,
                      "\(status)")
        XCTAssertEqual(try sandbox.keymgr(["tpm", "status"]).status, 64)
    }

    /// What one `keymgr sign` of a NONE key asks of the TPM, counted with strace (tcti-swtpm connects once per command,
    /// and, for each connection it sets up, once to the socket and once to the control socket): one connection for
    /// the whole process, and 5 commands, none to look up a handle: Load (under the storage key's persistent handle),
    /// Sign, FlushContext; NV_Read (the rollback check, inside the transaction), NV_Increment (the counter's one
    /// step, after the commit). And 2 fdatasyncs, one transaction's worth (the counter's second step used to cost
    /// a second transaction and its sync).
    func testASignSendsOnlyTheCommandsItNeedsOnOneConnection() throws {
        try initialiseOnTPM()
        try sandbox.bind("alice")
        let trace = sandbox.root.appendingPathComponent("sign.strace").path
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/strace"),
                                      ["-f", "-e", "trace=connect,fdatasync", "-o", trace, Sandbox.binary.path,
                                       "--home", sandbox.home.path, "sign", "--user", "alice"])
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        let connects = lines.filter { $0.contains("sun_path=\"\(tpm.socket)") && $0.hasSuffix("= 0") }
        XCTAssertEqual(connects.filter { $0.contains(".ctrl\"") }.count, 1, "one TCTI set-up per process")
        XCTAssertEqual(connects.filter { !$0.contains(".ctrl\"") }.count, 1 + 5, connects.joined(separator: "\n"))
        let syncs = lines.filter { $0.contains("fdatasync(") }
        XCTAssertEqual(syncs.count, 2, syncs.joined(separator: "\n"))
    }

    /// The TPM commands each `keymgr` process sent through `gate`, by process, in order.
    private func commandsByProcess(_ gate: TPMCommandGate) throws -> [[String]] {
        var order: [Int32] = []
        var byProcess: [Int32: [String]] = [:]
        for (code, pid) in try gate.commands() {
            if byProcess[pid] == nil { order.append(pid) }
            byProcess[pid, default: []].append(code)
        }
        return order.map { byProcess[$0] ?? [] }
    }

    /// The rollback counter as the store records it and as the TPM holds it (read with the store's own secrets).
    private func rollbackState() throws -> (store: UInt64, tpm: UInt64) {
        let manager = try KeyManager.open(home: StoreLocation(url: sandbox.home), context: .embedded, environment: sandbox.environment)
        let device = try manager.device()
        let auth = try manager.tpmSecrets(device, manager.hierarchy).counter
        let index = try XCTUnwrap(device.tpmCounterIndex.flatMap { UInt32(exactly: $0) })
        let value = try TPMConnection.with(tcti: try XCTUnwrap(device.tpmTcti)) { try $0.readCounter(index, auth: auth) }
        return (UInt64(try XCTUnwrap(device.rollbackCounter)), value)
    }

    private func copyHome(to copy: URL) throws {
        try? FileManager.default.removeItem(at: copy)
        try FileManager.default.copyItem(at: sandbox.home, to: copy)
    }

    private func restoreHome(from copy: URL) throws {
        try FileManager.default.removeItem(at: sandbox.home)
        try FileManager.default.copyItem(at: copy, to: sandbox.home)
    }

    /// keymgr SIGKILLed between a sign's commit and its counter increment (the relay kills it as it sends
    /// NV_Increment, before the TPM sees it): the signature's write is committed and the store one step ahead.
    /// The next sign accepts that, repairs the counter and steps it (NV_Read, NV_Increment, NV_Increment); store and
    /// counter are level again, the audit log verifies, and a copy of the home taken while it was one ahead is
    /// refused from then on.
    func testASIGKILLBetweenCommitAndIncrementLeavesAStoreTheNextWriteAcceptsAndRepairs() throws {
        let gate = try TPMCommandGate(in: tpm)
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        try sandbox.bind("alice")
        let before = try rollbackState()
        gate.forget()
        try gate.killSender(ofNext: .nvIncrement)
        let killed = try sandbox.keymgr(["sign", "--user", "alice"])
        XCTAssertEqual(killed.status, SIGKILL, killed.summary)
        XCTAssertFalse(gate.armed)
        XCTAssertEqual(try commandsByProcess(gate), [["0x157", "0x15d", "0x165", "0x14e", "killed 0x134"]])
        var state = try rollbackState()
        XCTAssertEqual(state.tpm, before.tpm)
        XCTAssertEqual(state.store, before.tpm + 1, "committed, one step ahead")
        let copy = sandbox.root.appendingPathComponent("home-one-ahead")
        try copyHome(to: copy)

        gate.forget()
        try sandbox.succeed(["sign", "--user", "alice"])
        XCTAssertEqual(try commandsByProcess(gate), [["0x157", "0x15d", "0x165", "0x14e", "0x134", "0x134"]])
        state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm)
        XCTAssertEqual(state.tpm, before.tpm + 2, "the repair and the sign's own step")
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.signed", "--json"]).array().count, 2,
                       "the killed sign had committed")
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)

        try restoreHome(from: copy)
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "alice", "--json"]), status: 1, code: "rolledBack")
    }

    /// `master rotate` SIGKILLed as it sends the counter's increment (after its commit and the key file's rename):
    /// the store opens under the new key, is one step ahead, and the next sign accepts it and leaves it level.
    func testMasterRotateKilledBetweenCommitAndIncrementLeavesAWorkingStore() throws {
        let gate = try TPMCommandGate(in: tpm)
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        try sandbox.bind("alice")
        try gate.killSender(ofNext: .nvIncrement)
        XCTAssertEqual(try sandbox.keymgr(["master", "rotate", "--yes"]).status, SIGKILL)
        XCTAssertFalse(gate.armed)
        var state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm + 1)
        try sandbox.succeed(["sign", "--user", "alice"])
        state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm)
        try sandbox.succeed(["master", "rotate", "--yes"])
        try sandbox.succeed(["sign", "--user", "alice"])
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "master.rotated", "--json"]).array().count, 2)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm)
    }

    /// Two streams of `keymgr sign` at once on one TPM store, 20 each: the rollback lock keeps one process's commit
    /// and increment together, so every sign succeeds, the counter ends level with the store, 40 steps on, and the
    /// audit log verifies.
    func testTwoProcessesSigningAtOnceAllSucceedAndLeaveTheCounterLevel() throws {
        try initialiseOnTPM()
        try sandbox.bind("alice")
        try sandbox.bind("bob")
        let before = try rollbackState()
        let script = "for i in $(seq 20); do \"$0\" --home \"$1\" sign --user \"$2\" >/dev/null 2>>\"$3\" "
            + "|| echo \"exit $?\" >>\"$3\"; done"
        var streams: [(Process, URL)] = []
        for user in ["alice", "bob"] {
            let errors = sandbox.root.appendingPathComponent("\(user).errors")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", script, Sandbox.binary.path, sandbox.home.path, user, errors.path]
            process.environment = sandbox.environment
            process.standardInput = FileHandle.nullDevice
            try process.run()
            streams.append((process, errors))
        }
        for (process, errors) in streams {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
            let failures = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
            XCTAssertFalse(failures.contains("exit "), failures)
        }
        let after = try rollbackState()
        XCTAssertEqual(after.store, after.tpm)
        XCTAssertEqual(after.tpm, before.tpm + 40)
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.signed", "--json"]).array().count, 40)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    func testARestoredOlderHomeIsRefused() throws {
        try initialiseOnTPM()
        try sandbox.bind("kim")
        let copy = sandbox.root.appendingPathComponent("home-copy")
        try FileManager.default.copyItem(at: sandbox.home, to: copy)
        try sandbox.succeed(["revoke", "--user", "kim", "--yes"])
        try FileManager.default.removeItem(at: sandbox.home)
        try FileManager.default.copyItem(at: copy, to: sandbox.home)
        let refused = try sandbox.keymgr(["sign", "--user", "kim", "--json"])
        try assertJSONError(refused, status: 1, code: "rolledBack")
        XCTAssertTrue(refused.stderr.contains("rollback counter"), refused.stderr)
    }
}
