import Foundation
import XCTest

/// Issue 9: a database writer without the master key cannot weaken anything. Each test edits the database file as
/// such an attacker would (with the `sqlite3` tool, CHECK constraints switched off where they would stand in the
/// way) and asserts the refusal: exit 1 and code `tampered` where tampering is found, and no PIN attempt spent.
final class TamperingTests: XCTestCase {
    static let sqlite3 = URL(fileURLWithPath: "/usr/bin/sqlite3")

    /// Runs SQL on the store's file as an attacker with write access to it would.
    @discardableResult
    func attack(_ sandbox: Sandbox, _ sql: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let outcome = try sandbox.run(Self.sqlite3, [sandbox.database.path, "PRAGMA ignore_check_constraints = ON; " + sql])
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Another connection that stays open (as a running `keymgr sync` would), so keymgr's own exit is not the last
    /// close and SQLite would not fold the WAL back by itself.
    func holdOpen(_ sandbox: Sandbox) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = Self.sqlite3
        process.arguments = [sandbox.database.path]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        try input.fileHandleForWriting.write(contentsOf: Data("SELECT COUNT(*) FROM user_keys;\n".utf8))
        usleep(200_000)
        return (process, input)
    }

    func failedAttempts(_ sandbox: Sandbox, kid: String) throws -> String {
        try attack(sandbox, "SELECT failed_attempts FROM app_pins WHERE kid = '\(kid)'")
    }

    /// Runs keymgr with --json and asserts exit 1 with code `tampered`.
    func assertTampered(_ sandbox: Sandbox, _ arguments: [String], stdin: String = "",
                        file: StaticString = #filePath, line: UInt = #line) throws {
        let outcome = try sandbox.keymgr(arguments + ["--json"], stdin: stdin)
        try assertJSONError(outcome, status: 1, code: "tampered", file: file, line: line)
        XCTAssertTrue(outcome.stderr.contains("outside keymgr") || outcome.stderr.contains("edited"), outcome.stderr,
                      file: file, line: line)
    }

    func pinStore(_ sandbox: Sandbox, retry: Int = 5) throws {
        try sandbox.initialise(["--pin-retry", String(retry)])
    }

    // MARK: 1. Server profile redirected

    func testEditedServerProfileIsRefusedBeforeTheCredentialIsRead() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let token = sandbox.root.appendingPathComponent("admin.token")
        try Data("secret-admin-token\n".utf8).write(to: token)
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9/am",
                             "--credential-file", token.path])
        try attack(sandbox, "UPDATE servers SET base_url = 'https://attacker.example/am'")
        try assertTampered(sandbox, ["server", "show"])
        try assertTampered(sandbox, ["sync"])
        try attack(sandbox, "UPDATE servers SET base_url = 'http://127.0.0.1:9/am', credential_file = '\(sandbox.home.path)/master.key'")
        try assertTampered(sandbox, ["sync"])
        try attack(sandbox, "UPDATE servers SET credential_file = '\(token.path)', credential_header = 'X-Leak'")
        try assertTampered(sandbox, ["sync"])
    }

    func testCredentialFileInsideTheHomeAndPlainHTTPAreRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let master = sandbox.home.appendingPathComponent("master.key").path
        let inHome = try sandbox.keymgr(["server", "set", "--dialect", "pingam", "--base-url", "https://am.example/am",
                                         "--credential-file", master, "--json"])
        try assertJSONError(inHome, status: 78, code: "config")
        let credentials = sandbox.root.appendingPathComponent("creds")
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
        let inCredentials = try sandbox.keymgr(["server", "set", "--dialect", "pingam", "--base-url", "https://am.example/am",
                                                "--credential-file", credentials.appendingPathComponent("keymgr.master").path],
                                               extraEnvironment: ["CREDENTIALS_DIRECTORY": credentials.path])
        XCTAssertEqual(inCredentials.status, 78, inCredentials.summary)
        let plain = try sandbox.keymgr(["server", "set", "--dialect", "pingam", "--base-url", "http://am.example/am", "--json"])
        try assertJSONError(plain, status: 78, code: "config")
        XCTAssertTrue(plain.stderr.contains("--allow-insecure-http"), plain.stderr)
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://am.example/am", "--allow-insecure-http"])
        try sandbox.succeed(["server", "show"])
        // The permission is MAC'd with the rest of the profile: granting it by hand is tampering.
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "https://am.example/am"])
        try attack(sandbox, "UPDATE servers SET base_url = 'http://am.example/am', allow_insecure_http = 1")
        try assertTampered(sandbox, ["server", "show"])
    }

    // MARK: 2. PIN lockout reset

    func testResettingALockedPINRecordIsRefusedAndSpendsNoAttempt() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try pinStore(sandbox, retry: 3)
        let kid = try XCTUnwrap(try sandbox.bind("ann", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")["kid"] as? String)
        for _ in 0..<3 { _ = try sandbox.keymgr(["sign", "--user", "ann", "--pin-stdin"], stdin: "000111\n") }
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "ann", "--pin-stdin", "--json"], stdin: "482916\n"),
                            status: 77, code: "pinLocked")
        try attack(sandbox, "UPDATE app_pins SET failed_attempts = 0, pin_retry = 1000000; UPDATE user_keys SET status = 'active'")
        try assertTampered(sandbox, ["sign", "--user", "ann", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "0", "no attempt spent")
        // The key row put back as it was (its MAC holds again): still locked, whatever the counter says.
        try attack(sandbox, "UPDATE user_keys SET status = 'locked'")
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "ann", "--pin-stdin", "--json"], stdin: "482916\n"),
                            status: 77, code: "pinLocked")
    }

    func testLoweringTheFailureCounterIsRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try pinStore(sandbox)
        let kid = try XCTUnwrap(try sandbox.bind("bo", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")["kid"] as? String)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "bo", "--pin-stdin"], stdin: "000111\n").status, 77)
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "1")
        try attack(sandbox, "UPDATE app_pins SET failed_attempts = 0")
        try assertTampered(sandbox, ["sign", "--user", "bo", "--pin-stdin"], stdin: "000222\n")
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "0", "no attempt spent")
    }

    // MARK: 3. Biometric gate removed, unknown auth type

    func testRemovingTheBiometricGateIsRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        let marker = sandbox.root.appendingPathComponent("verifier-ran")
        let verifier = sandbox.root.appendingPathComponent("verifier.sh")
        try Data("#!/bin/sh\ntouch \(marker.path)\nexit 0\n".utf8).write(to: verifier)
        XCTAssertEqual(chmod(verifier.path, 0o755), 0)
        try sandbox.initialise(["--biometric-verifier", verifier.path])
        try sandbox.bind("cy", ["--auth-type", "biometric-only"])
        try FileManager.default.removeItem(at: marker)
        try attack(sandbox, "UPDATE user_keys SET auth_type = 'NONE'")
        try assertTampered(sandbox, ["sign", "--user", "cy"])
        try attack(sandbox, "UPDATE user_keys SET auth_type = 'SOMETHING_ELSE'")
        let unknown = try sandbox.keymgr(["sign", "--user", "cy", "--json"])
        try assertJSONError(unknown, status: 1, code: "tampered")
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker.path), "no verifier was needed to refuse")
        try attack(sandbox, "UPDATE user_keys SET auth_type = 'BIOMETRIC_ONLY'")
        // The first refusal recorded the finding: cy's key stays refused until an administrator clears it.
        try assertJSONError(try sandbox.keymgr(["sign", "--user", "cy", "--json"]), status: 1, code: "tampered")
        try sandbox.succeed(["audit", "clear-tampering"])
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "cy"]).status, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker.path), "the gate is back")
    }

    // MARK: 4. Verifier command replaced

    func testReplacingTheVerifierCommandIsRefusedAndRunsNothing() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise(["--biometric-verifier", "/bin/true"])
        try sandbox.bind("di", ["--auth-type", "biometric-only"])
        let marker = sandbox.root.appendingPathComponent("pwned")
        try attack(sandbox, #"UPDATE device SET biometric_verifier = '["/bin/sh","-c","touch \#(marker.path)"]'"#)
        try assertTampered(sandbox, ["sign", "--user", "di"])
        try assertTampered(sandbox, ["bind", "--user", "ed", "--auth-type", "biometric-only"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker.path), "the attacker's command never ran")
    }

    // MARK: 5. Argon2 cost lowered

    func testLoweringTheArgon2CostIsRefusedAndSpendsNoAttempt() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try pinStore(sandbox)
        let kid = try XCTUnwrap(try sandbox.bind("fay", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")["kid"] as? String)
        try attack(sandbox, "UPDATE device SET argon2_memory_kib = 8, argon2_iterations = 1")
        try assertTampered(sandbox, ["sign", "--user", "fay", "--pin-stdin"], stdin: "482916\n")
        try assertTampered(sandbox, ["bind", "--user", "gil", "--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try attack(sandbox, "UPDATE device SET argon2_memory_kib = 64")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "fay", "--pin-stdin"], stdin: "482916\n").status, 0)
        try attack(sandbox, "UPDATE app_pins SET argon2_memory_kib = 8")
        try assertTampered(sandbox, ["sign", "--user", "fay", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "0", "no attempt spent")
    }

    // MARK: 7. Revoked key restored

    func testRestoringARevokedKeysBlobIsRefusedAndTheBlobLeavesTheWAL() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let kid = try XCTUnwrap(try sandbox.bind("hal")["kid"] as? String)
        let blob = try attack(sandbox, "SELECT hex(wrapped_private_key) FROM user_keys WHERE kid = '\(kid)'")
        XCTAssertFalse(blob.isEmpty)
        let (reader, readerInput) = try holdOpen(sandbox)
        defer { try? readerInput.fileHandleForWriting.close(); reader.waitUntilExit() }
        try sandbox.succeed(["revoke", "--user", "hal"])
        // Neither the database file nor its WAL still holds the sealed key (secure_delete and a checkpoint).
        let bytes = try XCTUnwrap(Self.bytes(hex: blob))
        for suffix in ["", "-wal"] {
            let path = sandbox.database.path + suffix
            guard let contents = FileManager.default.contents(atPath: path) else { continue }
            XCTAssertNil(contents.range(of: Data(bytes)), "the revoked key's sealed blob is still in \(path)")
        }
        try attack(sandbox, "UPDATE user_keys SET wrapped_private_key = X'\(blob)', status = 'active', revoked_at = NULL WHERE kid = '\(kid)'")
        try assertTampered(sandbox, ["sign", "--kid", kid])
    }

    func testASupersededKeysBlobLeavesTheWAL() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let kid = try XCTUnwrap(try sandbox.bind("ida")["kid"] as? String)
        let blob = try attack(sandbox, "SELECT hex(wrapped_private_key) FROM user_keys WHERE kid = '\(kid)'")
        let bytes = try XCTUnwrap(Self.bytes(hex: blob))
        XCTAssertNotNil(FileManager.default.contents(atPath: sandbox.database.path)?.range(of: Data(bytes)),
                        "the blob is in the file before it is superseded")
        let (reader, readerInput) = try holdOpen(sandbox)
        defer { try? readerInput.fileHandleForWriting.close(); reader.waitUntilExit() }
        try sandbox.bind("ida")
        for suffix in ["", "-wal"] {
            let path = sandbox.database.path + suffix
            guard let contents = FileManager.default.contents(atPath: path) else { continue }
            XCTAssertNil(contents.range(of: Data(bytes)), "the superseded key's sealed blob is still in \(path)")
        }
    }

    // MARK: 9. pin change

    func testPinChangeWithAWeakNewPINSpendsNoAttempt() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try pinStore(sandbox)
        let kid = try XCTUnwrap(try sandbox.bind("ian", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")["kid"] as? String)
        for _ in 0..<6 {
            let weak = try sandbox.keymgr(["pin", "change", "--user", "ian", "--pin-stdin", "--json"], stdin: "482916\n123456\n")
            try assertJSONError(weak, status: 65, code: "badInput")
        }
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "0", "a weak new PIN spends no attempt")
        let wrongOld = try sandbox.keymgr(["pin", "change", "--user", "ian", "--pin-stdin"], stdin: "000111\n730519\n")
        XCTAssertEqual(wrongOld.status, 77, wrongOld.summary)
        XCTAssertEqual(try failedAttempts(sandbox, kid: kid), "1", "only a wrong old PIN spends one")
        try sandbox.succeed(["pin", "change", "--user", "ian", "--pin-stdin"], stdin: "482916\n730519\n")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "ian", "--pin-stdin"], stdin: "730519\n").status, 0)
    }

    // MARK: 10. Tampering during signing

    func testAMovedBlobIsTamperingNotAWrongPIN() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try pinStore(sandbox)
        let first = try XCTUnwrap(try sandbox.bind("jo", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")["kid"] as? String)
        let second = try XCTUnwrap(try sandbox.bind("kim", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "730519\n")["kid"] as? String)
        try attack(sandbox, """
            UPDATE user_keys SET wrapped_private_key = (SELECT wrapped_private_key FROM user_keys WHERE kid = '\(first)') WHERE kid = '\(second)'
            """)
        try assertTampered(sandbox, ["sign", "--user", "kim", "--pin-stdin"], stdin: "730519\n")
        XCTAssertEqual(try failedAttempts(sandbox, kid: second), "0", "no attempt spent")
        // A verifier moved from another record: the same.
        try attack(sandbox, """
            UPDATE app_pins SET verifier = (SELECT verifier FROM app_pins WHERE kid = '\(first)') WHERE kid = '\(second)'
            """)
        try assertTampered(sandbox, ["sign", "--user", "kim", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(try failedAttempts(sandbox, kid: second), "0", "no attempt spent")
    }

    static func bytes(hex: String) -> [UInt8]? {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            out.append(byte)
            index = next
        }
        return out
    }
}
