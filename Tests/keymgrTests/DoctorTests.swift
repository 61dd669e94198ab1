import Foundation
import SWTPMSupport
import XCTest

/// `keymgr doctor`: on a healthy store every check is `ok` and it exits 0; each check, broken on its own, is the
/// line that fails, naming what is wrong and the one thing to do, and the exit is 1.
final class DoctorTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: sandbox.root.path)
        sandbox = nil
    }

    private var database: String { sandbox.home.appendingPathComponent("keymgr.db").path }

    /// The checks as `doctor --json` gives them, by name, and the exit status.
    private func doctor(file: StaticString = #filePath, line: UInt = #line) throws -> (status: Int32, checks: [String: [String: Any]]) {
        let outcome = try sandbox.keymgr(["doctor", "--json"])
        let object = try outcome.object(file: file, line: line)
        let checks = try XCTUnwrap(object["checks"] as? [[String: Any]], file: file, line: line)
        XCTAssertEqual(object["ok"] as? Bool, outcome.status == 0, file: file, line: line)
        return (outcome.status, Dictionary(uniqueKeysWithValues: checks.map { ($0["name"] as? String ?? "?", $0) }))
    }

    /// Exactly `name` fails (among the checks run), its message and fix holding the words given.
    private func assertFails(_ name: String, message: String, fix: String, alsoFailing others: Set<String> = [],
                             file: StaticString = #filePath, line: UInt = #line) throws {
        let (status, checks) = try doctor(file: file, line: line)
        XCTAssertEqual(status, 1, "\(checks)", file: file, line: line)
        XCTAssertEqual(Set(checks.filter { $0.value["ok"] as? Bool == false }.map(\.key)), others.union([name]), "\(checks)",
                       file: file, line: line)
        let check = try XCTUnwrap(checks[name], file: file, line: line)
        XCTAssertTrue((check["message"] as? String ?? "").contains(message), "\(check)", file: file, line: line)
        XCTAssertTrue((check["fix"] as? String ?? "").contains(fix), "\(check)", file: file, line: line)
    }

    /// A line fits 80 columns, or holds only one word longer than that (a temporary directory's path) after its
    /// status and name or its indent.
    static func fits(_ line: Substring) -> Bool {
        line.count <= 80 || line.split(separator: " ").count <= 3
    }

    func testAHealthyStorePassesEveryCheckAndTheTextIsOneLineEach() throws {
        let (status, checks) = try doctor()
        XCTAssertEqual(status, 0, "\(checks)")
        XCTAssertEqual(Set(checks.keys), ["agent", "store.files", "store.schema", "store.integrity", "masterKey", "disk", "sync"])
        let text = try sandbox.succeed(["doctor"]).stdout.split(separator: "\n")
        XCTAssertEqual(text.filter { !$0.hasPrefix(" ") }.count, 7, "one line a check (continued when wider)")
        XCTAssertTrue(text.filter { !$0.hasPrefix(" ") }.allSatisfy { $0.hasPrefix("ok ") }, "\(text)")
        XCTAssertTrue(text.allSatisfy(Self.fits), "\(text)")
    }

    func testADatabaseFileOthersMayReadIsNamed() throws {
        chmod(database, 0o644)
        try assertFails("store.files", message: "mode 644", fix: "chmod 600 \(database)")
    }

    func testADirectoryAboveTheHomeOthersMayWriteIsNamed() throws {
        chmod(sandbox.root.path, 0o777)
        try assertFails("store.files", message: "above the home, can be written by other users", fix: "chmod go-w \(sandbox.root.path)")
    }

    func testASchemaFromANewerKeymgrIsNamed() throws {
        let edit = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [database, "PRAGMA user_version = 999"])
        XCTAssertEqual(edit.status, 0, edit.summary)
        try assertFails("store.schema", message: "schema version 999", fix: "upgrade keymgr")
    }

    func testADamagedDatabaseFileIsNamed() throws {
        let fold = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [database, "PRAGMA wal_checkpoint(TRUNCATE)"])
        XCTAssertEqual(fold.status, 0, fold.summary)
        // Garbage over the b-tree page header of user_keys (its root page), as a failing disk leaves it.
        let root = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                   [database, "SELECT rootpage FROM sqlite_master WHERE name = 'user_keys'"])
        let page = try XCTUnwrap(Int(root.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), root.summary)
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: database))
        try handle.seek(toOffset: UInt64((page - 1) * 4096 + 8))
        try handle.write(contentsOf: Data(repeating: 0xFF, count: 64))
        try handle.close()
        try assertFails("store.integrity", message: "damaged", fix: "restore the home from a backup")
    }

    func testAMissingMasterKeyIsNamed() throws {
        try FileManager.default.removeItem(at: sandbox.home.appendingPathComponent("master.key"))
        try assertFails("masterKey", message: "missing", fix: "restore")
    }

    func testAGrownWriteAheadLogIsNamed() throws {
        // Grown past the limit with zeros after its frames, as a reader holding it open lets it grow.
        let wal = try XCTUnwrap(FileHandle(forUpdatingAtPath: database + "-wal"))
        try wal.truncate(atOffset: 100 << 20)
        try wal.close()
        try assertFails("disk", message: "has grown to 100 MiB", fix: "the next write folds it back")
    }

    func testASyncThatNeverRanIsNamed() throws {
        try sandbox.succeed(["server", "set", "--dialect", "oauth", "--base-url", "http://127.0.0.1:9",
                             "--token-endpoint", "http://127.0.0.1:9/token"])
        // Nothing listens at that address either: the server check says so too.
        try assertFails("sync", message: "no sync has finished", fix: "keymgr sync", alsoFailing: ["server"])
        try assertFails("server", message: "cannot be reached", fix: "keymgr server show", alsoFailing: ["sync"])
        // At 80 columns: the failure, then its fix, each wrapped.
        let text = try sandbox.keymgr(["doctor"])
        XCTAssertEqual(text.status, 1)
        let lines = text.stdout.split(separator: "\n")
        XCTAssertTrue(lines.allSatisfy(Self.fits), text.stdout)
        XCTAssertTrue(lines.contains { $0.hasPrefix("FAIL  sync") }, text.stdout)
        XCTAssertTrue(lines.contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("fix: run `keymgr sync`") }, text.stdout)
    }

    func testAnUnreachableTPMIsNamedWithoutTouchingAnythingDAProtected() throws {
        let tpm = try SoftwareTPM()
        let gate = try TPMCommandGate(in: tpm)
        sandbox = try Sandbox()
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        try sandbox.bind("alice")
        gate.forget()
        let (status, checks) = try doctor()
        XCTAssertEqual(status, 0, "\(checks)")
        XCTAssertEqual(checks["tpm"]?["ok"] as? Bool, true)
        // A capability query and NV_ReadPublic (is the store's counter still there?) only: no load, sign, NV read or
        // increment (nothing a retry could lock out).
        let sent = try gate.commands().map(\.code)
        XCTAssertEqual(Set(sent), ["0x17a", "0x169"], "\(sent)")
        gate.stop()
        try assertFails("tpm", message: gate.tcti, fix: "start the TPM")
    }
}
