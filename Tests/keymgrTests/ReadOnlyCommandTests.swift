import Foundation
import KeyManager
import XCTest

/// Issue 14: commands that only read write nothing (no open-time write, no checkpoint, no fsync), still refuse a
/// tampered store, and `list --json` (built row by row) prints what the `Encodable` path prints, byte for byte.
final class ReadOnlyCommandTests: XCTestCase {
    private struct FileState: Equatable {
        let bytes: Data
        let modified: Date
        /// The WAL's bytes (nil when there is none): a writer leaves its commits there for the next process.
        let wal: Data?
    }

    private func state(_ sandbox: Sandbox) throws -> FileState {
        let attributes = try FileManager.default.attributesOfItem(atPath: sandbox.database.path)
        return FileState(bytes: try Data(contentsOf: sandbox.database),
                         modified: try XCTUnwrap(attributes[.modificationDate] as? Date),
                         wal: try? Data(contentsOf: URL(fileURLWithPath: sandbox.database.path + "-wal")))
    }

    func testReadOnlyCommandsLeaveTheDatabaseAndItsWALUntouched() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let alice = try sandbox.bind("alice")
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c1"])
        let before = try state(sandbox)
        XCTAssertGreaterThan(before.wal?.count ?? 0, 0, "the last writer left its commits in the WAL")
        usleep(20_000)  // an mtime that moved would show even on a coarse clock
        for arguments in [["status"], ["status", "--json"], ["list"], ["list", "--json", "--status", "all"],
                          ["users", "--json"], ["audit", "list", "--json"], ["audit", "verify"]] {
            try sandbox.succeed(arguments)
            let now = try state(sandbox)
            XCTAssertEqual(now.bytes, before.bytes, "keymgr \(arguments.joined(separator: " ")) changed the database")
            XCTAssertEqual(now.wal, before.wal, "keymgr \(arguments.joined(separator: " ")) wrote to the WAL")
        }
        // Commands that read and then fail the same way (nothing configured) write nothing either.
        XCTAssertNotEqual(try sandbox.keymgr(["server", "show"]).status, 0)
        XCTAssertNotEqual(try sandbox.keymgr(["token", "show", "--user", "alice"]).status, 0)
        XCTAssertEqual(try state(sandbox), before, "a read-only command wrote to the database or its WAL")
        // And what they read is what was written.
        let listed = try sandbox.succeed(["list", "--json"]).array()
        XCTAssertEqual(listed.map { $0["kid"] as? String }, [alice["kid"] as? String])
        XCTAssertNotNil(listed.first?["lastUsedAt"] as? String)
        // The write commands after them work as before.
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c2"])
        XCTAssertNotEqual(try state(sandbox).wal, before.wal)
    }

    /// A write command commits to the WAL and leaves it there: no checkpoint when it closes (which would write and
    /// sync the database file and delete the WAL), so the next process finds a WAL and GRDB makes no write of its own
    /// on open. One commit, one WAL sync, instead of five syncs per `sign`.
    func testAWriteCommandLeavesItsCommitInTheWALForTheNextProcess() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c1"])
        let before = try state(sandbox)
        let walBefore = try XCTUnwrap(before.wal, "the writer deleted its WAL on close")
        usleep(20_000)
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c2"])
        let after = try state(sandbox)
        XCTAssertEqual(after.bytes, before.bytes, "the writer checkpointed into the database file on close")
        XCTAssertEqual(after.modified, before.modified)
        let walAfter = try XCTUnwrap(after.wal, "the writer deleted its WAL on close")
        // A WAL frame is a 24-byte header and one page: the second sign appended whole frames after the first's.
        XCTAssertGreaterThan(walAfter.count, walBefore.count)
        XCTAssertEqual(walAfter.prefix(32), walBefore.prefix(32), "the WAL was restarted, so it was checkpointed")
        // What the WAL holds is what every later reader sees, and its chain still verifies.
        let listed = try sandbox.succeed(["list", "--json"]).array()
        XCTAssertNotNil(listed.first?["lastUsedAt"] as? String)
        try sandbox.succeed(["audit", "verify"])
        // A revocation still folds the WAL back at once, so a destroyed key's sealed blob does not linger there.
        try sandbox.succeed(["revoke", "--user", "alice", "--yes"])
        XCTAssertEqual(try state(sandbox).wal?.count ?? 0, 0, "revoke left the destroyed rows in the WAL")
    }

    func testAReadOnlyCommandStillRefusesATamperedDevice() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        let edit = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                   [sandbox.database.path, "UPDATE device SET pin_retry = CASE WHEN pin_retry = 3 THEN 4 ELSE 3 END"])
        XCTAssertEqual(edit.status, 0, edit.summary)
        let before = try Data(contentsOf: sandbox.database)
        try assertJSONError(try sandbox.keymgr(["status", "--json"]), status: 1, code: "tampered")
        XCTAssertEqual(try Data(contentsOf: sandbox.database), before)
    }

    /// `revoke --json` prints its keys through `KeyJSON` and `JSONEncoder`; `list --json` builds the same objects
    /// byte by byte. Names and device names with quotes, backslashes, slashes, C0/C1 controls, DEL, bidi controls,
    /// non-ASCII and absent values must come out identical.
    func testListJSONIsByteForByteTheEncodablePath() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        var options = InitOptions()
        options.deviceName = "listing test"
        options.argon2.memoryKiB = 64
        options.argon2.iterations = 1
        options.argon2.parallelism = 1
        let manager = try KeyManager.initialize(home: StoreLocation(url: sandbox.home), options: options)
        let names: [String?] = [
            nil, "plain", "q\"uote \\ back/slash", "c0 \u{1}\u{8}\u{9}\u{A}\u{C}\u{D}\u{1B}\u{1F} end",
            "del \u{7F} c1 \u{80}\u{85}\u{9F} nbsp \u{A0}", "bidi \u{202E}evil\u{202C} \u{061C}\u{200E}\u{2066}\u{2069}",
            "Ünïcødé ✓ 😀 \u{2028}\u{FEFF}", "",
        ]
        // Usernames with control or bidi characters are refused at keymgr's door (TextRules): those users have none.
        let usernames = names.map { name in name.flatMap { (try? TextRules.checkIdentifier($0, what: "username")) != nil ? $0 : nil } }
        for (index, name) in names.enumerated() {
            var request = BindRequest(userId: "user-\(index)")
            request.username = usernames[index]
            let bound = try manager.bind(request, newPIN: { throw KeyManagerError(.abort, "a NONE key needs no PIN") })
            // Device names come from the server, as a journey's registration records them (every row is MAC'd, so
            // the library, not an edit, stands in for the server). No NUL: SQLite text and argv end there.
            try manager.markRegistered(kid: bound.key.kid, deviceName: name)
        }
        try sandbox.succeed(["sign", "--user", "user-1", "--challenge", "c"])
        let all = try sandbox.succeed(["list", "--json"])
        XCTAssertEqual(try all.array().count, names.count)
        for index in names.indices {
            let revoked = try sandbox.succeed(["revoke", "--user", "user-\(index)", "--yes", "--json"])
            let listed = try sandbox.succeed(["list", "--json", "--user", "user-\(index)", "--status", "revoked"])
            XCTAssertEqual(listed.stdout, revoked.stdout, "user-\(index)")
        }
        let escaped = try sandbox.succeed(["list", "--json", "--status", "revoked"]).stdout
        for sequence in ["\\u0001", "\\b", "\\t", "\\n", "\\f", "\\r", "\\u001b", "\\u007f", "\\u0085", "\\u202e",
                         "\\u061c", "\\\"", "\\\\", "back/slash", "\"username\":null", "\"deviceName\":null"] {
            XCTAssertTrue(escaped.contains(sequence), "no \(sequence) in \(escaped)")
        }
        XCTAssertEqual(try sandbox.succeed(["list", "--json", "--status", "revoked"]).array().map { $0["username"] as? String },
                       usernames)
    }
}
