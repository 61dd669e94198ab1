import Foundation
import XCTest

/// Every command's happy path, run as a person or a script would, and its JSON shape field by field.
final class CommandTests: XCTestCase {

    func testInitAndStatusPrintTheStatusObject() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        let initialised = try sandbox.keymgr(["init", "--device-name", "kiosk 7", "--json"] + Sandbox.fastInit)
        XCTAssertEqual(initialised.status, 0, initialised.summary)
        XCTAssertEqual(initialised.stderr, "", "--json says nothing on stderr on success")
        let created = try initialised.object()
        XCTAssertEqual(Set(created.keys), ["deviceId", "deviceName", "schemaVersion", "users", "keys", "lastSync",
                                           "keyBackend", "keyBackendReason", "tpmTcti", "masterKey", "agent", "keysByState",
                                           "pinKeys", "servers", "lastSyncRun", "pinThrottle", "serverClockSkew", "tpmReplaced"])
        assertNull(created["agent"], "agent: the command opened the store itself")
        XCTAssertEqual(created["keysByState"] as? [String: Int], ["active": 0, "locked": 0, "revoked": 0, "superseded": 0])
        let deviceId = try XCTUnwrap(created["deviceId"] as? String)
        XCTAssertFalse(deviceId.isEmpty)
        XCTAssertEqual(created["deviceName"] as? String, "kiosk 7")
        XCTAssertGreaterThanOrEqual(created["schemaVersion"] as? Int ?? 0, 1)
        XCTAssertEqual(created["users"] as? Int, 0)
        XCTAssertEqual(created["keys"] as? Int, 0)
        assertNull(created["lastSync"], "lastSync")

        try sandbox.bind("alice")
        let status = try sandbox.succeed(["status", "--json"]).object()
        XCTAssertEqual(Set(status.keys), Set(created.keys))
        XCTAssertEqual(status["deviceId"] as? String, deviceId)
        XCTAssertEqual(status["deviceName"] as? String, "kiosk 7")
        XCTAssertEqual(status["schemaVersion"] as? Int, created["schemaVersion"] as? Int)
        XCTAssertEqual(status["users"] as? Int, 1)
        XCTAssertEqual(status["keys"] as? Int, 1)
        assertNull(status["lastSync"], "lastSync")
        assertNull(status["lastSyncRun"], "lastSyncRun")
        XCTAssertEqual(status["keysByState"] as? [String: Int], ["active": 1, "locked": 0, "revoked": 0, "superseded": 0])
        XCTAssertEqual((status["servers"] as? [Any])?.count, 0)

        let human = try sandbox.succeed(["status"])
        XCTAssertTrue(human.stdout.contains("kiosk 7"), human.stdout)
        XCTAssertTrue(human.stdout.contains(deviceId), human.stdout)
        XCTAssertTrue(human.stdout.contains("never"), "no sync yet: \(human.stdout)")
        XCTAssertTrue(human.stdout.contains("1 usable (1 active, 0 locked, 0 revoked, 0 superseded)"), human.stdout)
        XCTAssertTrue(human.stdout.contains("none: this command opened the store itself"), human.stdout)
        let valueColumns = Set(human.stdout.split(separator: "\n").map { line -> Int in
            let characters = Array(line)
            var index = 0
            while index < characters.count, characters[index] != " " || characters[index + 1] != " " { index += 1 }
            while index < characters.count, characters[index] == " " { index += 1 }
            return index
        })
        XCTAssertEqual(valueColumns.count, 1, "values aligned: \(human.stdout)")

        let quietInit = try Sandbox(cli: .inProcess)
        let confirmation = try quietInit.keymgr(["init"] + Sandbox.fastInit)
        XCTAssertEqual(confirmation.status, 0, confirmation.summary)
        XCTAssertEqual(confirmation.stdout, "")
        XCTAssertEqual(confirmation.stderr.split(separator: "\n").count, 1, "one-line confirmation: \(confirmation.stderr)")
    }

    func testBindPrintsTheKeyObjectWithItsJWK() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let key = try sandbox.bind("alice", ["--username", "Alice Liddell"])
        assertKeyObject(key, userId: "alice", username: "Alice Liddell", authType: "NONE", status: "active",
                        extraFields: ["jwk"])
        XCTAssertEqual(key["serverState"] as? String, "unregistered")
        assertNull(key["lastUsedAt"], "lastUsedAt")
        let kid = try XCTUnwrap(key["kid"] as? String)
        let jwk = try XCTUnwrap(key["jwk"] as? [String: Any])
        XCTAssertEqual(jwk["kty"] as? String, "EC")
        XCTAssertEqual(jwk["crv"] as? String, "P-256")
        XCTAssertEqual((jwk["x"] as? String)?.count, 43)
        XCTAssertEqual((jwk["y"] as? String)?.count, 43)
        XCTAssertEqual(jwk["kid"] as? String, kid)
        XCTAssertNil(jwk["d"], "never the private key")
        XCTAssertTrue(Set(jwk.keys).isSubset(of: ["kty", "crv", "x", "y", "use", "alg", "kid"]), "\(jwk.keys)")

        let challenged = try sandbox.bind("bob", ["--challenge", "c-123", "--expires-in", "120", "--issuer", "com.example.app"])
        assertKeyObject(challenged, userId: "bob", username: nil, authType: "NONE", status: "active", extraFields: ["jwk", "jws"])
        let (header, payload) = try jwsParts(try XCTUnwrap(challenged["jws"] as? String))
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual(header["kid"] as? String, challenged["kid"] as? String)
        XCTAssertEqual((header["jwk"] as? [String: Any])?["x"] as? String, (challenged["jwk"] as? [String: Any])?["x"] as? String)
        XCTAssertEqual(payload["sub"] as? String, "bob")
        XCTAssertEqual(payload["challenge"] as? String, "c-123")
        XCTAssertEqual(payload["iss"] as? String, "com.example.app")
        XCTAssertEqual((payload["exp"] as? Int ?? 0) - (payload["iat"] as? Int ?? 0), 120)

        let human = try sandbox.succeed(["bind", "--user", "carol"])
        XCTAssertEqual(human.stdout, "", "no challenge, no JWS: the confirmation goes to stderr")
        XCTAssertTrue(human.stderr.hasPrefix("bound carol: key "), human.stderr)
        XCTAssertEqual(human.stderr.split(separator: "\n").count, 1)
        let humanJWS = try sandbox.succeed(["bind", "--user", "dave", "--challenge", "c-9"])
        XCTAssertEqual(try jwsParts(humanJWS.stdout).payload["challenge"] as? String, "c-9")

        let quiet = try sandbox.succeed(["bind", "--user", "erin", "--quiet"])
        XCTAssertEqual(quiet.stdout + quiet.stderr, "", "--quiet: no confirmation")
        let verbose = try sandbox.succeed(["bind", "--user", "frank", "--verbose"])
        XCTAssertTrue(verbose.stderr.contains(sandbox.home.path), "--verbose names the store: \(verbose.stderr)")
        // The library's own debug lines reach stderr through the logger the CLI injects, and only with --verbose.
        XCTAssertTrue(verbose.stderr.contains("bound key"), "KeyManager's debug log: \(verbose.stderr)")
        XCTAssertFalse(humanJWS.stderr.contains("bound key"), humanJWS.stderr)
        XCTAssertFalse(verbose.stdout.contains("bound key"), "logs never go to stdout")
    }

    func testUsersAndListShowKeysAsTablesAndJSON() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 0)
        let alice = try sandbox.bind("alice", ["--username", "Alice"])
        let bob = try sandbox.bind("bob")

        let users = try sandbox.succeed(["users", "--json"]).array()
        XCTAssertEqual(users.map { $0["userId"] as? String }, ["alice", "bob"])
        for user in users {
            XCTAssertEqual(Set(user.keys), ["userId", "username", "owner", "keys", "createdAt"])
            XCTAssertEqual(user["keys"] as? Int, 1)
            assertTimestamp(user["createdAt"], "createdAt")
        }
        XCTAssertEqual(users[0]["username"] as? String, "Alice")
        assertNull(users[1]["username"], "username")
        let usersTable = try sandbox.succeed(["users"])
        assertAlignedTable(usersTable.stdout, headers: ["USER ID", "USERNAME", "OWNER", "KEYS", "CREATED"])
        XCTAssertEqual(usersTable.stdout.split(separator: "\n").count, 3)

        let keys = try sandbox.succeed(["list", "--json"]).array()
        XCTAssertEqual(keys.count, 2)
        assertKeyObject(keys[0], userId: "alice", username: "Alice", authType: "NONE", status: "active")
        assertKeyObject(keys[1], userId: "bob", username: nil, authType: "NONE", status: "active")
        XCTAssertEqual(keys[0]["kid"] as? String, alice["kid"] as? String)
        XCTAssertEqual(keys[0]["createdAt"] as? String, alice["createdAt"] as? String)

        let onlyBob = try sandbox.succeed(["list", "--user", "bob", "--json"]).array()
        XCTAssertEqual(onlyBob.map { $0["kid"] as? String }, [bob["kid"] as? String])

        try sandbox.succeed(["revoke", "--user", "bob"])
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 1, "revoked keys are not listed by default")
        let revoked = try sandbox.succeed(["list", "--status", "revoked", "--json"]).array()
        XCTAssertEqual(revoked.map { $0["status"] as? String }, ["revoked"])
        XCTAssertEqual(try sandbox.succeed(["list", "--status", "all", "--json"]).array().count, 2)
        XCTAssertEqual(try sandbox.succeed(["list", "--status", "active", "--status", "revoked", "--json"]).array().count, 2)

        let table = try sandbox.succeed(["list", "--status", "all", "--wide"])
        assertAlignedTable(table.stdout, headers: ["KID", "USER ID", "USERNAME", "OWNER", "AUTH TYPE", "STATUS", "SERVER", "CREATED", "LAST USED"])
        XCTAssertTrue(table.stdout.contains(alice["kid"] as? String ?? "?"), "--wide shows whole kids")
        let narrow = try sandbox.succeed(["list", "--status", "all"])
        assertAlignedTable(narrow.stdout, headers: ["KID", "USER ID", "USERNAME", "OWNER", "AUTH TYPE", "STATUS", "SERVER", "LAST USED"])
        XCTAssertFalse(narrow.stdout.contains(alice["kid"] as? String ?? "?"), "kids are shortened by default")
        XCTAssertTrue(narrow.stdout.contains(String((alice["kid"] as? String ?? "?").prefix(8))))
        let none = try sandbox.succeed(["list", "--user", "nobody"])
        XCTAssertEqual(none.stdout, "", "an empty listing prints no table")
        XCTAssertTrue(none.stderr.contains("no matching keys"), none.stderr)
    }

    func testSignPrintsTheBareJWSOrKidAndJWS() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let alice = try sandbox.bind("alice")
        let kid = try XCTUnwrap(alice["kid"] as? String)

        let bare = try sandbox.succeed(["sign", "--user", "alice", "--challenge", "n0nce"])
        XCTAssertEqual(bare.stdout.split(separator: "\n").count, 1, "just the JWS: \(bare.stdout)")
        XCTAssertEqual(bare.stderr, "")
        let (header, payload) = try jwsParts(bare.stdout)
        XCTAssertEqual(header["kid"] as? String, kid)
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual(payload["sub"] as? String, "alice")
        XCTAssertEqual(payload["challenge"] as? String, "n0nce")
        XCTAssertEqual(payload["iss"] as? String, "keymgr", "the issuer given at init (default)")

        let signed = try sandbox.succeed([
            "sign", "--kid", kid, "--challenge", "n1", "--json", "--expires-in", "30",
            "--claim", "txn=4711", "--claim", "amount=json:42", "--claim", #"ctx=json:{"a":[1,true]}"#, "--claim", "note=a=b",
        ]).object()
        XCTAssertEqual(Set(signed.keys), ["kid", "jws"])
        XCTAssertEqual(signed["kid"] as? String, kid)
        let claims = try jwsParts(try XCTUnwrap(signed["jws"] as? String)).payload
        XCTAssertEqual(claims["txn"] as? String, "4711", "a plain VALUE is a string")
        XCTAssertEqual(claims["amount"] as? Int, 42, "json: keeps the type")
        XCTAssertEqual(((claims["ctx"] as? [String: Any])?["a"] as? [Any])?.count, 2)
        XCTAssertEqual(claims["note"] as? String, "a=b", "split at the first =")
        XCTAssertEqual((claims["exp"] as? Int ?? 0) - (claims["iat"] as? Int ?? 0), 30)

        let listed = try sandbox.succeed(["list", "--json"]).array()
        assertTimestamp(listed.first?["lastUsedAt"], "lastUsedAt after signing")
    }

    func testRebindReplacesTheKey() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let old = try sandbox.bind("alice", ["--username", "Alice"])
        let rebound = try sandbox.succeed(["rebind", "--user", "alice", "--auth-type", "APPLICATION_PIN", "--pin-stdin", "--json"],
                                          stdin: "482916\n").object()
        assertKeyObject(rebound, userId: "alice", username: "Alice", authType: "APPLICATION_PIN", status: "active",
                        extraFields: ["jwk"])
        XCTAssertNotEqual(rebound["kid"] as? String, old["kid"] as? String)
        XCTAssertEqual((rebound["jwk"] as? [String: Any])?["kid"] as? String, rebound["kid"] as? String)

        let all = try sandbox.succeed(["list", "--status", "all", "--json"]).array()
        let statuses = Dictionary(uniqueKeysWithValues: all.map { ($0["kid"] as? String ?? "", $0["status"] as? String ?? "") })
        XCTAssertEqual(statuses[old["kid"] as? String ?? ""], "superseded")
        XCTAssertEqual(statuses[rebound["kid"] as? String ?? ""], "active")

        let human = try sandbox.succeed(["rebind", "--user", "alice", "--auth-type", "none"])
        XCTAssertTrue(human.stderr.hasPrefix("rebound alice: new key "), human.stderr)
        XCTAssertEqual(human.stdout, "")
    }

    func testRevokePrintsTheRevokedKeys() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let alice = try sandbox.bind("alice")
        try sandbox.bind("bob")
        let revoked = try sandbox.succeed(["revoke", "--user", "alice", "--reason", "tablet stolen", "--json"]).array()
        XCTAssertEqual(revoked.count, 1)
        assertKeyObject(revoked[0], userId: "alice", username: nil, authType: "NONE", status: "revoked")
        XCTAssertEqual(revoked[0]["kid"] as? String, alice["kid"] as? String)

        let bobKid = try XCTUnwrap(try sandbox.succeed(["list", "--user", "bob", "--json"]).array().first?["kid"] as? String)
        let human = try sandbox.succeed(["revoke", "--kid", bobKid])
        XCTAssertEqual(human.stderr, "revoked key \(bobKid) of bob\n")
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 0)
        let audit = try sandbox.succeed(["audit", "--user", "alice", "--json"]).array()
        XCTAssertTrue(audit.contains { ($0["details"] as? [String: Any])?.values.contains { $0 as? String == "tablet stolen" } ?? false },
                      "the reason is audited: \(audit)")
    }

    func testPinChangeReadsOldThenNewPIN() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        let changed = try sandbox.succeed(["pin", "change", "--user", "carol", "--pin-stdin", "--json"],
                                          stdin: "482916\n731905\n").object()
        assertKeyObject(changed, userId: "carol", username: nil, authType: "APPLICATION_PIN", status: "active")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "731905\n").status, 0)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "482916\n").status, 77)

        let human = try sandbox.succeed(["pin", "change", "--user", "carol", "--pin-fd", "0"], stdin: "731905\n559013\n")
        XCTAssertTrue(human.stderr.hasPrefix("changed the PIN of carol's key "), human.stderr)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "559013\n").status, 0)
    }

    func testAuditListsTheChainedLogAsJSONTableAndCSV() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.bind("bob")
        try sandbox.succeed(["sign", "--user", "alice", "--challenge", "x"])
        try sandbox.succeed(["revoke", "--user", "bob"])

        let entries = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertGreaterThanOrEqual(entries.count, 4)
        var previousHash = String(repeating: "0", count: 64)
        for (index, entry) in entries.enumerated() {
            XCTAssertEqual(Set(entry.keys), ["seq", "at", "event", "userId", "owner", "kid", "actor", "details", "hash", "prevHash"])
            XCTAssertEqual(entry["seq"] as? Int, index + 1)
            assertTimestamp(entry["at"], "at")
            XCTAssertFalse((entry["event"] as? String ?? "").isEmpty)
            XCTAssertTrue(entry["userId"] is String || entry["userId"] is NSNull)
            XCTAssertTrue(entry["kid"] is String || entry["kid"] is NSNull)
            XCTAssertFalse((entry["actor"] as? String ?? "").isEmpty, "actor is the OS user")
            XCTAssertTrue(entry["details"] is [String: Any], "details is an object")
            XCTAssertEqual(entry["prevHash"] as? String, previousHash, "each entry chains to the one before")
            let hash = try XCTUnwrap(entry["hash"] as? String)
            XCTAssertNotNil(hash.range(of: "^[0-9a-f]{64}$", options: .regularExpression))
            previousHash = hash
        }
        XCTAssertEqual(try sandbox.succeed(["audit", "list", "--json"]).stdout, try sandbox.succeed(["audit", "--json"]).stdout)
        XCTAssertEqual(try sandbox.succeed(["audit", "--format", "json"]).stdout, try sandbox.succeed(["audit", "--json"]).stdout)

        let alices = try sandbox.succeed(["audit", "--user", "alice", "--json"]).array()
        XCTAssertFalse(alices.isEmpty)
        XCTAssertTrue(alices.allSatisfy { $0["userId"] as? String == "alice" })
        let firstEvent = try XCTUnwrap(entries.last?["event"] as? String)
        let byEvent = try sandbox.succeed(["audit", "--event", firstEvent, "--json"]).array()
        XCTAssertFalse(byEvent.isEmpty)
        XCTAssertTrue(byEvent.allSatisfy { $0["event"] as? String == firstEvent })
        XCTAssertEqual(try sandbox.succeed(["audit", "--since", "2999-01-01", "--json"]).array().count, 0)
        let since = try XCTUnwrap(entries.last?["at"] as? String)
        XCTAssertGreaterThanOrEqual(try sandbox.succeed(["audit", "--since", since, "--json"]).array().count, 1)

        let csv = try sandbox.succeed(["audit", "--format", "csv"]).stdout.split(separator: "\n")
        XCTAssertEqual(csv.first, "seq,at,event,userId,kid,actor,details,hash,prevHash")
        XCTAssertEqual(csv.count, entries.count + 1)
        let table = try sandbox.succeed(["audit"])
        assertAlignedTable(table.stdout, headers: ["SEQ", "AT", "EVENT", "USER ID", "KID", "ACTOR", "DETAILS"])
        XCTAssertEqual(table.stdout.split(separator: "\n").count, entries.count + 1)
    }

    func testAuditVerifyReportsAnIntactChainAndExitsOneOnABrokenOne() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.bind("bob")
        let count = try sandbox.succeed(["audit", "--json"]).array().count

        let intact = try sandbox.succeed(["audit", "verify", "--json"]).object()
        XCTAssertEqual(Set(intact.keys), ["intact", "checked", "firstBadSeq", "reason", "rowsChecked", "rowIssues"])
        XCTAssertEqual((intact["rowIssues"] as? [Any])?.count, 0)
        XCTAssertEqual(intact["intact"] as? Bool, true)
        XCTAssertEqual(intact["checked"] as? Int, count)
        assertNull(intact["firstBadSeq"], "firstBadSeq")
        assertNull(intact["reason"], "reason")
        XCTAssertTrue(try sandbox.succeed(["audit", "verify"]).stdout.contains("intact"))

        // Someone with write access to the file edits history (after removing the append-only trigger).
        let sqlite = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path,
            "DROP TRIGGER audit_events_append_only_update; UPDATE audit_events SET event = 'nothing.happened' WHERE seq = 2;"])
        XCTAssertEqual(sqlite.status, 0, sqlite.summary)

        let broken = try sandbox.keymgr(["audit", "verify", "--json"])
        XCTAssertEqual(broken.status, 1, broken.summary)
        let report = try broken.object()
        XCTAssertEqual(Set(report.keys), ["intact", "checked", "firstBadSeq", "reason", "rowsChecked", "rowIssues"])
        XCTAssertEqual(report["intact"] as? Bool, false)
        XCTAssertEqual(report["checked"] as? Int, 1)
        XCTAssertEqual(report["firstBadSeq"] as? Int, 2)
        XCTAssertFalse((report["reason"] as? String ?? "").isEmpty)
        XCTAssertTrue(broken.stderr.contains("broken at entry 2"), broken.stderr)
        let human = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(human.status, 1)
        XCTAssertTrue(human.stderr.contains("broken at entry 2"), human.stderr)
    }

    func testMasterRotateRewrapsEverySecret() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        let masterKey = sandbox.home.appendingPathComponent("master.key")
        let before = try? Data(contentsOf: masterKey)

        let rotation = try sandbox.succeed(["master", "rotate", "--json"]).object()
        XCTAssertEqual(Set(rotation.keys), ["secretsRewrapped"])
        XCTAssertGreaterThanOrEqual(rotation["secretsRewrapped"] as? Int ?? 0, 2)
        if let before { XCTAssertNotEqual(try? Data(contentsOf: masterKey), before, "a new master key") }

        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "alice"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin"], stdin: "482916\n").status, 0)
        let human = try sandbox.succeed(["master", "rotate"])
        XCTAssertTrue(human.stderr.hasPrefix("rotated the master key: "), human.stderr)
    }

    func testTablesFit80ColumnsAndAShortKidNamesItsKey() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let long = "id=" + String(repeating: "a-very-long-directory-user-name-", count: 3) + ",ou=user,o=alpha,ou=services,ou=am-config"
        let key = try sandbox.bind(long, ["--username", String(repeating: "Firstname Lastname ", count: 4), "--auth-type", "none"])
        try sandbox.bind("bob")
        let kid = try XCTUnwrap(key["kid"] as? String)
        for command in [["list"], ["users"], ["audit"], ["list", "--status", "all"]] {
            let outcome = try sandbox.succeed(command)
            for line in outcome.stdout.split(separator: "\n") {
                XCTAssertLessThanOrEqual(line.count, 80, "`keymgr \(command.joined(separator: " "))`: \(line)")
            }
            XCTAssertTrue(outcome.stdout.contains("…"), "long values are cut with …: \(outcome.stdout)")
            let wide = try sandbox.succeed(command + ["--wide"])
            XCTAssertTrue(wide.stdout.split(separator: "\n").contains { $0.count > 80 }, "--wide cuts nothing")
        }
        // Any unique prefix of at least 8 characters names the key, as git shortens hashes.
        let signed = try sandbox.succeed(["sign", "--kid", String(kid.prefix(8)), "--json"]).object()
        XCTAssertEqual(signed["kid"] as? String, kid)
        let tooShort = try sandbox.keymgr(["sign", "--kid", String(kid.prefix(7))])
        XCTAssertEqual(tooShort.status, 66, "a prefix shorter than 8 names nothing: \(tooShort.summary)")
        XCTAssertEqual(try sandbox.succeed(["revoke", "--kid", String(kid.prefix(10)).lowercased(), "--json"]).array().first?["kid"] as? String, kid)
    }
}
