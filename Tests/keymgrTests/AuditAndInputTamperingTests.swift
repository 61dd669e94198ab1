import Foundation
import XCTest

/// Issue 9, items 6, 11 and 12: the keyed audit chain against an attacker who rewrites it, the refusal of bad
/// input, and core dumps switched off.
final class AuditAndInputTamperingTests: XCTestCase {
    /// Deletes or edits audit entries as an attacker would, then re-hashes the SHA-256 chain so it holds again.
    static let rehash = """
        import hashlib, sqlite3, sys
        db = sqlite3.connect(sys.argv[1])
        db.execute("DROP TRIGGER IF EXISTS audit_events_append_only_update")
        db.execute("DROP TRIGGER IF EXISTS audit_events_append_only_delete")
        db.executescript(sys.argv[2])
        def field(value):
            if value is None:
                return b"|-"
            data = str(value).encode()
            return b"|%d:" % len(data) + data
        prev = "0" * 64
        for seq, at, event, user, kid, actor, details in db.execute(
                "SELECT seq, at, event, user_id, kid, actor, details FROM audit_events ORDER BY seq").fetchall():
            canonical = b"keymgr-audit-v1" + b"".join(field(v) for v in (seq, at, event, user, kid, actor, details))
            digest = hashlib.sha256(bytes.fromhex(prev) + canonical).hexdigest()
            db.execute("UPDATE audit_events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, digest, seq))
            prev = digest
        db.commit()
        """

    func storeWithHistory() throws -> Sandbox {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for user in ["amy", "ben", "cat"] { try sandbox.bind(user) }
        try sandbox.succeed(["sign", "--user", "amy"])
        try sandbox.succeed(["revoke", "--user", "ben"])
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        return sandbox
    }

    func assertBroken(_ sandbox: Sandbox, naming words: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let outcome = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(outcome.status, 1, outcome.summary, file: file, line: line)
        XCTAssertTrue(outcome.stderr.contains(words), outcome.stderr, file: file, line: line)
        let json = try sandbox.keymgr(["audit", "verify", "--json"])
        XCTAssertEqual(json.status, 1, json.summary, file: file, line: line)
        XCTAssertEqual(try json.object()["intact"] as? Bool, false, file: file, line: line)
    }

    func testAuditVerifyNamesARewrittenChain() throws {
        let sandbox = try storeWithHistory()
        let edit = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"),
                                   ["-c", Self.rehash, sandbox.database.path, "DELETE FROM audit_events WHERE event = 'key.signed'"])
        XCTAssertEqual(edit.status, 0, edit.summary)
        try assertBroken(sandbox, naming: "rewritten")
    }

    func testAuditVerifyNamesAChainCopiedFromAnotherStore() throws {
        let sandbox = try storeWithHistory()
        let other = try storeWithHistory()
        let copy = try sandbox.run(TamperingTests.sqlite3, [sandbox.database.path, """
            ATTACH '\(other.database.path)' AS other;
            DROP TRIGGER audit_events_append_only_delete;
            DELETE FROM audit_events;
            INSERT INTO audit_events SELECT * FROM other.audit_events;
            UPDATE device SET audit_anchor_seq = (SELECT audit_anchor_seq FROM other.device),
                              audit_anchor_mac = (SELECT audit_anchor_mac FROM other.device);
            """])
        XCTAssertEqual(copy.status, 0, copy.summary)
        try assertBroken(sandbox, naming: "copied from another store")
    }

    func testAuditVerifyNamesATruncatedTail() throws {
        let sandbox = try storeWithHistory()
        let cut = try sandbox.run(TamperingTests.sqlite3, [sandbox.database.path, """
            DROP TRIGGER audit_events_append_only_delete;
            DELETE FROM audit_events WHERE seq > (SELECT MAX(seq) - 2 FROM audit_events);
            """])
        XCTAssertEqual(cut.status, 0, cut.summary)
        try assertBroken(sandbox, naming: "cut off")
    }

    // MARK: 11. Bad input

    func testInvalidUTF8InAUserIdIsRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        // U+FFFD is what Swift makes of the invalid byte: a user of that name must not be matched by it.
        for command in ["sign", "bind"] {
            let outcome = try sandbox.run(URL(fileURLWithPath: "/bin/sh"), [
                "-c", #"exec "$0" --home "$1" "$2" --user "$(printf 'al\377ice')" --json"#,
                Sandbox.binary.path, sandbox.home.path, command,
            ])
            try assertJSONError(outcome, status: 65, code: "badInput")
            XCTAssertTrue(outcome.stderr.contains("UTF-8"), outcome.stderr)
        }
    }

    func testControlAndBidiCharactersInUserIdsAreRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for user in ["ad\u{202E}nimda", "a\u{0085}b", "x\u{009B}31m", "a\u{2066}b", "tab\tbed"] {
            try assertJSONError(try sandbox.keymgr(["bind", "--user", user, "--json"]), status: 65, code: "badInput")
        }
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0)
    }

    func testAFileThatIsNotAKeymgrDatabaseExits78() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        // The store's WAL would still hold every page (keymgr leaves it for the next process): the file alone is
        // replaced, as someone putting another file in its place would.
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: sandbox.database.path + suffix) }
        try Data(repeating: 0x41, count: 8192).write(to: sandbox.database)
        try assertJSONError(try sandbox.keymgr(["status", "--json"]), status: 78, code: "config")
        try FileManager.default.removeItem(at: sandbox.database)
        let made = try sandbox.run(TamperingTests.sqlite3, [sandbox.database.path, "CREATE TABLE photos (id INTEGER)"])
        XCTAssertEqual(made.status, 0, made.summary)
        XCTAssertEqual(chmod(sandbox.database.path, 0o600), 0)
        let other = try sandbox.keymgr(["status", "--json"])
        try assertJSONError(other, status: 78, code: "config")
        let tables = try sandbox.run(TamperingTests.sqlite3, [sandbox.database.path, ".tables"])
        XCTAssertEqual(tables.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "photos", "nothing written into it")
    }

    func testAMasterKeyFileOthersCanReadIsRefused() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        let keyFile = sandbox.root.appendingPathComponent("master.bin")
        try Data((0..<32).map { UInt8($0 * 7 % 256) }).write(to: keyFile)
        XCTAssertEqual(chmod(keyFile.path, 0o644), 0)
        let refused = try sandbox.keymgr(["init"] + Sandbox.fastInit, extraEnvironment: ["KEYMGR_MASTER_KEY_FILE": keyFile.path])
        XCTAssertEqual(refused.status, 78, refused.summary)
        XCTAssertTrue(refused.stderr.contains("chmod 600"), refused.stderr)
        // Group-readable is refused for a group that is not keymgr's own …
        XCTAssertEqual(chmod(keyFile.path, 0o640), 0)
        XCTAssertEqual(chown(keyFile.path, getuid(), getegid() &+ 1), 0)
        let otherGroup = try sandbox.keymgr(["init"] + Sandbox.fastInit, extraEnvironment: ["KEYMGR_MASTER_KEY_FILE": keyFile.path])
        XCTAssertEqual(otherGroup.status, 78, otherGroup.summary)
        // … and allowed, read-only, for the group keymgr runs as (a root-owned key shared with a keymgr system user).
        XCTAssertEqual(chown(keyFile.path, getuid(), getegid()), 0)
        XCTAssertEqual(chmod(keyFile.path, 0o640), 0)
        XCTAssertEqual(try sandbox.keymgr(["init"] + Sandbox.fastInit, extraEnvironment: ["KEYMGR_MASTER_KEY_FILE": keyFile.path]).status, 0)
        XCTAssertEqual(chmod(keyFile.path, 0o600), 0)
        XCTAssertEqual(try sandbox.keymgr(["status"], extraEnvironment: ["KEYMGR_MASTER_KEY_FILE": keyFile.path]).status, 0)
    }

    // MARK: 12. Core dumps

    func testKeymgrIsNotDumpableWhileItWaitsForAPIN() throws {
        // Run as an unprivileged user: the kernel then shows PR_SET_DUMPABLE 0 as /proc/<pid>/ owned by root.
        let sandbox = try Sandbox(cli: .inProcess)
        let home = sandbox.root.appendingPathComponent("nobody")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        XCTAssertEqual(chown(home.path, 65534, 65534), 0)
        XCTAssertEqual(chmod(sandbox.root.path, 0o755), 0)
        let setpriv = URL(fileURLWithPath: "/usr/bin/setpriv")
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Sandbox.binary.path, "--home", home.appendingPathComponent("h").path]
        XCTAssertEqual(try sandbox.run(setpriv, asNobody + ["init"] + Sandbox.fastInit).status, 0)
        XCTAssertEqual(try sandbox.run(setpriv, asNobody + ["bind", "--user", "pat", "--auth-type", "app-pin", "--pin-stdin"],
                                       stdin: "482916\n").status, 0)
        let process = Process()
        process.executableURL = setpriv
        process.arguments = asNobody + ["sign", "--user", "pat", "--pin-stdin"]
        process.environment = sandbox.environment
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
        var ownedByRoot = false
        var sawKeymgr = false
        for _ in 0..<400 where !ownedByRoot {
            let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/exe")) ?? ""
            // keymgr-core, which the `keymgr` client execs in embedded mode, is what reads the PIN (the client never
            // holds a secret: in agent mode the agent's worker reads the passed stdin).
            if exe.hasSuffix("/keymgr-core") {
                sawKeymgr = true
                var info = stat()
                if stat("/proc/\(process.processIdentifier)/environ", &info) == 0, info.st_uid == 0 { ownedByRoot = true }
            }
            if !ownedByRoot { usleep(10_000) }
        }
        XCTAssertTrue(sawKeymgr, "keymgr never ran")
        XCTAssertTrue(ownedByRoot, "keymgr running as uid 65534 is still dumpable (its /proc entries are not root's)")
    }

    func testCoreDumpsAreOffWhileKeymgrWaitsForAPIN() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("pat", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        // keymgr inherits a non-zero limit from here, so only its own start-up can make it 0.
        let resource = __rlimit_resource_t(RLIMIT_CORE.rawValue)
        var saved = rlimit()
        XCTAssertEqual(getrlimit(resource, &saved), 0)
        var allowed = rlimit(rlim_cur: 1 << 20, rlim_max: max(saved.rlim_max, 1 << 20))
        XCTAssertEqual(setrlimit(resource, &allowed), 0, "cannot give the test a core limit to inherit")
        defer { _ = setrlimit(resource, &saved) }
        let process = Process()
        process.executableURL = Sandbox.binary
        process.arguments = ["--home", sandbox.home.path, "sign", "--user", "pat", "--pin-stdin"]
        process.environment = sandbox.environment
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
        // keymgr now waits for the PIN on stdin, with the master key in memory.
        var coreLimit: String?
        for _ in 0..<400 where coreLimit == nil {
            let limits = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/limits", encoding: .utf8)) ?? ""
            if let line = limits.split(separator: "\n").first(where: { $0.hasPrefix("Max core file size") }),
               line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).first == "0" {
                coreLimit = String(line)
            }
            if coreLimit == nil { usleep(10_000) }
        }
        XCTAssertNotNil(coreLimit, "RLIMIT_CORE is not 0 in the running keymgr")
        try input.fileHandleForWriting.write(contentsOf: Data("482916\n".utf8))
    }
}

/// Issue 9, item 11: what a server sends is printed without its control and bidi characters.
final class ServerTextTests: XCTestCase {
    /// A stand-in server on loopback that answers everything 401 with a message full of terminal escapes.
    static let hostileServer = #"""
        import http.server, json, threading
        class Handler(http.server.BaseHTTPRequestHandler):
            def reply(self):
                body = json.dumps({"code": 401, "reason": "Unauthorized",
                                   "message": "bad token \x1b[2J\x1b]0;owned\x07 \u202eevil\u202c \x85\x9b31m"}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            do_GET = do_POST = do_PUT = do_DELETE = reply
            def log_message(self, *args):
                pass
        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        threading.Timer(60, server.shutdown).start()
        server.serve_forever()
        """#

    func testServerTextIsPrintedWithoutControlOrBidiCharacters() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("amy")
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", Self.hostileServer]
        let output = Pipe()
        server.standardOutput = output
        try server.run()
        defer { server.terminate() }
        var portText = ""
        while !portText.hasSuffix("\n"), let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty {
            portText += String(decoding: byte, as: UTF8.self)
        }
        let port = try XCTUnwrap(Int(portText.trimmingCharacters(in: .whitespacesAndNewlines)))
        let token = sandbox.root.appendingPathComponent("admin.token")
        try Data("token\n".utf8).write(to: token)
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:\(port)/am",
                             "--credential-file", token.path])
        for arguments in [["sync"], ["sync", "--json"]] {
            let outcome = try sandbox.keymgr(arguments)
            XCTAssertNotEqual(outcome.status, 0, outcome.summary)
            XCTAssertTrue(outcome.stderr.contains("evil"), "the server's message is shown: \(outcome.stderr)")
            for text in [outcome.stderr, outcome.stdout] {
                XCTAssertFalse(text.unicodeScalars.contains { [0x1B, 0x07, 0x85, 0x9B, 0x202E, 0x202C].contains($0.value) },
                               "a control or bidi character reached the terminal: \(text.debugDescription)")
            }
        }
    }
}
