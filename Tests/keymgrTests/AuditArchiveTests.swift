import Foundation
import XCTest

/// Bounded logs: `audit archive --before DATE --output FILE` moves the older entries to a file `audit verify --input`
/// checks offline, leaves a base in the store from which the rest still verifies, and is audited.
final class AuditArchiveTests: XCTestCase {
    func testArchivedEntriesLeaveTheStoreAndBothHalvesVerify() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        for index in 0..<4 { try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c\(index)"]) }
        let all = try sandbox.succeed(["audit", "--json"]).array()
        // Archive up to (not including) the fourth entry: a date between its time and the one before.
        let cut = try XCTUnwrap(all[3]["at"] as? String)
        let archive = sandbox.root.appendingPathComponent("audit-1.jsonl")
        let archived = try sandbox.succeed(["audit", "archive", "--before", cut, "--output", archive.path, "--json"]).object()
        let lastSeq = try XCTUnwrap(archived["lastSeq"] as? Int)
        XCTAssertGreaterThanOrEqual(lastSeq, 1)
        XCTAssertLessThan(lastSeq, 4)
        XCTAssertEqual(archived["firstSeq"] as? Int, 1)
        XCTAssertEqual(archived["entries"] as? Int, lastSeq)
        let mode = try FileManager.default.attributesOfItem(atPath: archive.path)[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)

        // The store: the rest, then the archive's own entry, verifying from the base.
        let kept = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertEqual(kept.first?["seq"] as? Int, lastSeq + 1)
        XCTAssertEqual(kept.first?["prevHash"] as? String, all[lastSeq - 1]["hash"] as? String)
        XCTAssertEqual(kept.last?["event"] as? String, "audit.archived")
        XCTAssertEqual(kept.count, all.count - lastSeq + 1)
        let storeCheck = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(storeCheck.status, 0, storeCheck.summary)

        // The file verifies offline; an entry removed from it or edited in it is named.
        let fileCheck = try sandbox.keymgr(["audit", "verify", "--input", archive.path])
        XCTAssertEqual(fileCheck.status, 0, fileCheck.summary)
        var lines = try String(contentsOf: archive, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, lastSeq + 1, "the header and each entry")
        if lastSeq >= 2 {
            var removed = lines
            removed.remove(at: 1)
            let damaged = sandbox.root.appendingPathComponent("removed.jsonl")
            try (removed.joined(separator: "\n") + "\n").write(to: damaged, atomically: true, encoding: .utf8)
            let named = try sandbox.keymgr(["audit", "verify", "--input", damaged.path])
            XCTAssertEqual(named.status, 1, named.summary)
            XCTAssertTrue(named.stderr.contains("missing"), named.summary)
        }
        lines[1] = lines[1].replacingOccurrences(of: "\"actor\":\"", with: "\"actor\":\"x")
        let edited = sandbox.root.appendingPathComponent("edited.jsonl")
        try (lines.joined(separator: "\n") + "\n").write(to: edited, atomically: true, encoding: .utf8)
        let altered = try sandbox.keymgr(["audit", "verify", "--input", edited.path])
        XCTAssertEqual(altered.status, 1, altered.summary)
        XCTAssertTrue(altered.stderr.contains("entry 1 (") && altered.stderr.contains("altered"), altered.summary)

        // A second archive continues where the first ended; an existing file is refused.
        let refused = try sandbox.keymgr(["audit", "archive", "--before", "2999-01-01", "--output", archive.path])
        XCTAssertEqual(refused.status, 64, refused.summary)
        let second = sandbox.root.appendingPathComponent("audit-2.jsonl")
        try sandbox.succeed(["audit", "archive", "--before", "2999-01-01", "--output", second.path])
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify", "--input", second.path]).status, 0)
        let header = try XCTUnwrap(try String(contentsOf: second, encoding: .utf8).split(separator: "\n").first)
        let after = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(header.utf8)) as? [String: Any])?["after"] as? [String: Any])
        XCTAssertEqual(after["seq"] as? Int, lastSeq)
        XCTAssertEqual(try sandbox.succeed(["audit", "--json"]).array().map { $0["event"] as? String }, ["audit.archived"])
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        try sandbox.succeed(["sign", "--user", "alice"])
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    /// Removing entries from the front of the log without the archive's base (a hand edit) still shows.
    func testEntriesRemovedFromTheFrontWithoutTheMasterKeyShow() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.succeed(["sign", "--user", "alice"])
        let database = sandbox.home.appendingPathComponent("keymgr.db").path
        let edit = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [database,
            "UPDATE device SET audit_base_seq = 1, audit_base_hash = (SELECT hash FROM audit_events WHERE seq = 1), "
                + "audit_base_mac = (SELECT mac FROM audit_events WHERE seq = 1); DELETE FROM audit_events WHERE seq = 1;"])
        XCTAssertEqual(edit.status, 0, edit.summary)
        let verify = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(verify.status, 1, verify.summary)
    }
}
