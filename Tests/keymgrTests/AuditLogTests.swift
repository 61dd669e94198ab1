import Foundation
import XCTest

/// `audit -n N`, `--reverse`, and the streamed table, JSON and CSV over more entries than the table sizes itself on.
final class AuditLogTests: XCTestCase {
    func testNewestNAndReverseInEveryFormat() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        for index in 1...12 { try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c-\(index)"]) }
        let all = try sandbox.succeed(["audit", "--json"]).array().compactMap { $0["seq"] as? Int }
        XCTAssertEqual(all, Array(1...14), "init, bind and 12 signatures, oldest first")

        let newest = try sandbox.succeed(["audit", "-n", "5", "--json"]).array().compactMap { $0["seq"] as? Int }
        XCTAssertEqual(newest, [10, 11, 12, 13, 14])
        let reversed = try sandbox.succeed(["audit", "--newest", "5", "--reverse", "--json"]).array().compactMap { $0["seq"] as? Int }
        XCTAssertEqual(reversed, [14, 13, 12, 11, 10])
        let allReversed = try sandbox.succeed(["audit", "--reverse", "--json"]).array().compactMap { $0["seq"] as? Int }
        XCTAssertEqual(allReversed, Array((1...14).reversed()))
        let filtered = try sandbox.succeed(["audit", "list", "-n", "2", "--event", "key.bound", "--json"]).array()
        XCTAssertEqual(filtered.compactMap { $0["seq"] as? Int }, [2])

        let csv = try sandbox.succeed(["audit", "-n", "3", "--format", "csv"]).stdout.split(separator: "\n")
        XCTAssertEqual(csv.count, 4, "\(csv)")
        XCTAssertEqual(csv.dropFirst().map { String($0.prefix(while: { $0 != "," })) }, ["12", "13", "14"])
        let table = try sandbox.succeed(["audit", "-n", "3", "--reverse"]).stdout.split(separator: "\n")
        XCTAssertEqual(table.first?.hasPrefix("SEQ"), true, "\(table)")
        XCTAssertEqual(table.dropFirst().map { String($0.prefix(while: { $0 != " " })) }, ["14", "13", "12"])

        let zero = try sandbox.keymgr(["audit", "-n", "0"])
        XCTAssertEqual(zero.status, 64, zero.summary)
        let nothing = try sandbox.succeed(["audit", "--user", "alice", "--event", "pin.failed"])
        XCTAssertEqual(nothing.stdout, "")
        XCTAssertEqual(nothing.stderr, "no matching audit entries\n")
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "pin.failed", "--json"]).stdout, "[]\n")
        let unknown = try sandbox.keymgr(["audit", "--event", "no.such"])
        XCTAssertEqual(unknown.status, 64, unknown.summary)
    }

    /// More entries than the streamed table sizes itself on (256), in more bytes than one output buffer (64 KiB):
    /// every entry is printed once, in order, in one JSON document, one CSV record each, one aligned table row each.
    func testALogLongerThanOneBufferStreamsWhole() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        let signatures = 300
        // One process signing many times would be faster, but the CLI is what is under test: sign in a shell loop.
        let loop = try sandbox.run(URL(fileURLWithPath: "/bin/sh"), ["-c", """
            i=0; while [ $i -lt \(signatures) ]; do "$0" --home "$1" sign --user alice --challenge c-$i >/dev/null || exit 1; i=$((i+1)); done
            """, Sandbox.binary.path, sandbox.home.path], timeout: 900)
        XCTAssertEqual(loop.status, 0, loop.summary)
        let total = signatures + 2
        let json = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertEqual(json.compactMap { $0["seq"] as? Int }, Array(1...total))
        XCTAssertEqual(json.last?["event"] as? String, "key.signed")
        let csv = try sandbox.succeed(["audit", "--format", "csv"]).stdout.split(separator: "\n")
        XCTAssertEqual(csv.count, total + 1)
        let table = try sandbox.succeed(["audit"]).stdout
        let rows = table.split(separator: "\n")
        XCTAssertEqual(rows.count, total + 1)
        XCTAssertEqual(rows.dropFirst().map { String($0.prefix(while: { $0 != " " })) }, (1...total).map(String.init))
        assertAlignedTable(table, headers: ["SEQ", "AT", "EVENT", "USER ID", "KID", "ACTOR", "DETAILS"])
        let verify = try sandbox.succeed(["audit", "verify"])
        XCTAssertTrue(verify.stdout.hasSuffix("audit log intact: \(total) entries checked\n"), verify.stdout)
    }

    /// What `audit --json` streams is the log as stored (checked against `sqlite3 -json` on the same file, awkward
    /// user ids included), and the CSV export lets anyone re-check the SHA-256 chain offline, as docs/security.md says.
    func testJSONIsTheStoredLogAndTheCSVChainChecksOffline() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for user in ["q\"uote \\ back/slash", "comma, and \"quotes\"", "Ünïcødé ✓ 😀"] {
            try sandbox.bind(user)
        }
        try sandbox.succeed(["sign", "--user", "Ünïcødé ✓ 😀", "--challenge", "c", "--claim", "amount=12"])
        let ours = try sandbox.succeed(["audit", "--json"]).array()
        let rows = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), ["-json", sandbox.database.path,
            "SELECT seq, at, event, user_id AS userId, kid, actor, details, hash, prev_hash AS prevHash FROM audit_events ORDER BY seq"])
        XCTAssertEqual(rows.status, 0, rows.summary)
        let stored = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(rows.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(ours.count, stored.count)
        for (entry, row) in zip(ours, stored) {
            for field in ["seq", "at", "event", "actor", "hash", "prevHash"] {
                XCTAssertEqual("\(entry[field] ?? "nil")", "\(row[field] ?? "nil")", field)
            }
            XCTAssertEqual(entry["userId"] as? String, row["userId"] as? String)
            XCTAssertEqual(entry["kid"] as? String, row["kid"] as? String)
            let details = try JSONSerialization.jsonObject(with: Data(try XCTUnwrap(row["details"] as? String).utf8))
            XCTAssertEqual(entry["details"] as? NSDictionary, details as? NSDictionary)
        }

        let csv = sandbox.root.appendingPathComponent("audit.csv")
        try sandbox.succeed(["audit", "--format", "csv"]).stdout.write(to: csv, atomically: true, encoding: .utf8)
        let check = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", """
            import csv, hashlib, sys
            prev = "0" * 64
            rows = list(csv.DictReader(open(sys.argv[1], newline="", encoding="utf-8")))
            for row in rows:
                out = b"keymgr-audit-v1"
                for name in ("seq", "at", "event", "userId", "kid", "actor", "details"):
                    value = row[name]
                    out += b"|-" if value == "" and name in ("userId", "kid") else b"|%d:" % len(value.encode()) + value.encode()
                assert row["prevHash"] == prev, row["seq"]
                assert hashlib.sha256(bytes.fromhex(prev) + out).hexdigest() == row["hash"], row["seq"]
                prev = row["hash"]
            print(len(rows))
            """, csv.path])
        XCTAssertEqual(check.status, 0, check.summary)
        XCTAssertEqual(check.stdout, "\(ours.count)\n")
    }
}
