import Foundation
import XCTest

/// Issue 13: an administrator audits the fleet and revokes a stolen device, end to end, with the built binary
/// against the reference server on loopback. Home A is the device that gets stolen; home B is the administrator's.
final class AdminCommandTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// The members of `admin devices --json` and `admin stale --json` objects (docs/cli.md).
    static let bindingFields: Set<String> = ["userId", "uuid", "kid", "deviceId", "deviceName", "createdAt", "lastAccessAt",
                                             "thisDevice"]

    var homeB: URL { sandbox.root.appendingPathComponent("home-b") }

    /// The OS user keymgr records as the actor of audit entries.
    var osUser: String {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return "uid:\(geteuid())" }
        return String(cString: name)
    }

    /// Home A (the sandbox's home) and home B, both initialised and pointed at one reference server with `users`.
    func startTwoHomes(users: [String]) throws {
        try start(users: users)
        let made = try sandbox.keymgr(["init", "--device-name", "admin desk"] + Sandbox.fastInit, home: homeB)
        XCTAssertEqual(made.status, 0, made.summary)
        try onB(server.serverSetArguments)
    }

    /// Runs keymgr on home B; fails the test unless it exits `status`.
    @discardableResult
    func onB(_ arguments: [String], stdin: String = "", status: Int32 = 0, file: StaticString = #filePath,
             line: UInt = #line) throws -> Outcome {
        let outcome = try sandbox.keymgr(arguments, stdin: stdin, home: homeB)
        XCTAssertEqual(outcome.status, status, outcome.summary, file: file, line: line)
        return outcome
    }

    /// Binds `username` on home B through the binding journey; returns the key object.
    @discardableResult
    func registerOnB(_ username: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try onB(["bind", "--journey", "RegisterDevice", "--user", username, "--password-fd", "0", "--json"],
                stdin: RefServerProcess.password + "\n", file: file, line: line).object(file: file, line: line)
    }

    func deviceId(home: URL? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let status = try sandbox.keymgr(["status", "--json"], home: home)
        XCTAssertEqual(status.status, 0, status.summary, file: file, line: line)
        return try XCTUnwrap(try status.object(file: file, line: line)["deviceId"] as? String, file: file, line: line)
    }

    /// Audit entries of `event` in a home.
    func audit(_ event: String, home: URL? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        let outcome = try sandbox.keymgr(["audit", "--event", event, "--json"], home: home)
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return try outcome.array(file: file, line: line)
    }

    // MARK: the stolen device

    func testAStolenDeviceRevokedFromAnotherIsWipedAtItsNextSyncWhileTheOtherKeepsWorking() throws {
        try startTwoHomes(users: ["alice"])
        let alice = universalId("alice")
        // Device A: bound through the journey, with its own OAuth client and (imported, so unbound) tokens for alice.
        try sandbox.succeed(server.serverSetArguments + ["--issuer", server.baseURL.absoluteString, "--unbound"])
        let kidA = try XCTUnwrap(try register("alice")["kid"] as? String)
        let client = try sandbox.succeed(["dcr", "register", "--user", alice, "--software-id", "keymgr-template", "--json"]).object()
        let clientId = try XCTUnwrap(client["clientId"] as? String)
        let minted = try server.request("POST", "/__refserver/oauth/tokens", body: ["client_id": clientId, "subject": "alice"])
        XCTAssertTrue((200..<300).contains(minted.status), "\(minted)")
        let tokenResponse = String(decoding: try JSONSerialization.data(withJSONObject: try XCTUnwrap(minted.json)), as: UTF8.self)
        try sandbox.succeed(["token", "import", "--user", alice, "--json"], stdin: tokenResponse)
        try sync()
        // Device B (the administrator's desk): alice bound there too.
        let kidB = try XCTUnwrap(try registerOnB("alice")["kid"] as? String)
        let idA = try deviceId()

        // The administrator audits alice's bindings from B: both devices, B marked as this one.
        let listed = try onB(["admin", "devices", "--user", "alice", "--json"]).array()
        XCTAssertEqual(listed.count, 2, "\(listed)")
        for binding in listed { XCTAssertEqual(Set(binding.keys), Self.bindingFields) }
        let bindingA = try XCTUnwrap(listed.first { $0["kid"] as? String == kidA })
        XCTAssertEqual(bindingA["deviceId"] as? String, idA)
        XCTAssertEqual(bindingA["uuid"] as? String, kidA)
        XCTAssertEqual(bindingA["userId"] as? String, alice)
        XCTAssertEqual(bindingA["thisDevice"] as? Bool, false)
        assertTimestamp(bindingA["createdAt"], "createdAt")
        assertTimestamp(bindingA["lastAccessAt"], "lastAccessAt")
        XCTAssertEqual(listed.first { $0["kid"] as? String == kidB }?["thisDevice"] as? Bool, true)
        let table = try onB(["admin", "devices", "--user", "alice"]).stdout
        XCTAssertTrue(table.contains(String(kidA.prefix(8))) && table.contains("yes"), table)
        for row in table.split(separator: "\n") { XCTAssertLessThanOrEqual(row.count, 80, "\(row)") }

        // A is reported stolen: revoked from B, without a terminal, with --yes.
        let revoked = try onB(["admin", "revoke", "--user", "alice", "--device-id", idA, "--reason", "stolen", "--yes", "--json"]).object()
        XCTAssertEqual(revoked["deletedOnServer"] as? [String], [kidA])
        XCTAssertEqual(revoked["thisDevice"] as? Bool, false)
        XCTAssertEqual(revoked["changed"] as? Bool, true)
        XCTAssertEqual(revoked["revokedHere"] as? [String], [], "B's own key is untouched")
        XCTAssertEqual(try server.devices().compactMap { $0["uuid"] as? String }, [kidB], "only B's binding is left")

        // A syncs: rule 2 revokes its key and wipes alice's tokens, DPoP key and registration; the client is
        // deleted at the server too.
        let report = try sync()
        XCTAssertEqual(report["revoked"] as? [String], [kidA], "\(report)")
        let keyA = try XCTUnwrap(try keys()[kidA])
        XCTAssertEqual(keyA["status"] as? String, "revoked")
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", alice]).status, 66, "the tokens are gone")
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", alice]).status, 66, "the registration is gone")
        let clients = try server.request("GET", "/__refserver/oauth/clients")
        let remaining = ((clients.json as? [String: Any])?["result"] as? [[String: Any]] ?? []).compactMap { $0["client_id"] as? String }
        XCTAssertFalse(remaining.contains(clientId), "A deleted its client at the server: \(remaining)")
        let sign = try sandbox.keymgr(["sign", "--user", "alice", "--challenge", "c-1", "--json"])
        try assertJSONError(sign, status: 66, code: "clientNotRegistered")

        // A's audit log says why, with the OS user as the actor.
        let revokedByServer = try XCTUnwrap(try audit("key.revokedByServer").first)
        XCTAssertEqual(revokedByServer["kid"] as? String, kidA)
        XCTAssertEqual(revokedByServer["actor"] as? String, osUser)
        XCTAssertTrue(((revokedByServer["details"] as? [String: Any])?["reason"] as? String ?? "").contains("removed on the server"),
                      "\(revokedByServer)")
        let wiped = try XCTUnwrap(try audit("credentials.wiped").last?["details"] as? [String: Any])
        XCTAssertEqual(wiped["tokenSets"] as? Int, 1)
        XCTAssertEqual(wiped["registrations"] as? Int, 1)

        // B keeps working.
        let signedOnB = try onB(["sign", "--user", "alice", "--challenge", "c-2"])
        XCTAssertTrue(signedOnB.stdout.hasPrefix("eyJ"), signedOnB.summary)
        XCTAssertEqual(try onB(["sync", "--json"]).object()["revoked"] as? [String], [])

        // B's audit log records the administrator's action with actor and reason, and `audit verify` holds.
        let action = try XCTUnwrap(try audit("admin.deviceRevoked", home: homeB).first)
        XCTAssertEqual(action["actor"] as? String, osUser)
        XCTAssertEqual(action["userId"] as? String, alice)
        let details = try XCTUnwrap(action["details"] as? [String: Any])
        XCTAssertEqual(details["reason"] as? String, "stolen")
        XCTAssertEqual(details["deviceId"] as? String, idA)
        XCTAssertEqual(details["deletedOnServer"] as? [String], [kidA])
        XCTAssertEqual(try audit("admin.devicesListed", home: homeB).count, 2)
        try onB(["audit", "verify"])
        let all = try onB(["audit", "--json"]).stdout + (try sandbox.succeed(["audit", "--json"]).stdout)
        XCTAssertFalse(all.contains(server.token), "the admin credential is not in any audit log")
    }

    func testRevokingTheSameDeviceTwiceChangesNothingTheSecondTimeAndSaysSo() throws {
        try startTwoHomes(users: ["alice"])
        let kidA = try XCTUnwrap(try register("alice")["kid"] as? String)
        try registerOnB("alice")
        let idA = try deviceId()
        let first = try onB(["admin", "revoke", "--user", "alice", "--device", kidA, "--reason", "lost", "--yes"])
        XCTAssertTrue(first.stdout.contains("deleted binding \(kidA)"), first.summary)
        let serverAfterFirst = try server.devices().compactMap { $0["uuid"] as? String }
        let keysOnB = try onB(["list", "--status", "all", "--json"]).stdout

        for selector in [["--device", kidA], ["--device-id", idA]] {
            let again = try onB(["admin", "revoke", "--user", "alice"] + selector + ["--reason", "lost", "--yes"])
            XCTAssertTrue(again.stdout.contains("nothing changed"), again.summary)
            let json = try onB(["admin", "revoke", "--user", "alice"] + selector + ["--reason", "lost", "--yes", "--json"]).object()
            XCTAssertEqual(json["changed"] as? Bool, false)
            XCTAssertEqual(json["deletedOnServer"] as? [String], [])
        }
        XCTAssertEqual(try server.devices().compactMap { $0["uuid"] as? String }, serverAfterFirst)
        XCTAssertEqual(try onB(["list", "--status", "all", "--json"]).stdout, keysOnB)
        let attempts = try audit("admin.deviceRevoked", home: homeB)
        XCTAssertEqual(attempts.map { ($0["details"] as? [String: Any])?["changed"] as? Bool }, [true, false, false, false, false],
                       "every attempt is recorded, only the first changed anything")

        // Revoking this very device (here, on A): its key is revoked now, the client it registered for alice is
        // deleted at the server (keymgr holds its management credential), and a second run changes nothing.
        try sandbox.succeed(server.serverSetArguments + ["--issuer", server.baseURL.absoluteString])
        let client = try sandbox.succeed(["dcr", "register", "--user", universalId("alice"), "--software-id", "keymgr-template",
                                          "--json"]).object()
        let clientId = try XCTUnwrap(client["clientId"] as? String)
        let own = try sandbox.succeed(["admin", "revoke", "--user", "alice", "--device-id", idA, "--reason", "left", "--yes", "--json"]).object()
        XCTAssertEqual(own["thisDevice"] as? Bool, true)
        XCTAssertEqual(own["revokedHere"] as? [String], [kidA])
        XCTAssertEqual(own["clientDeleted"] as? Bool, true)
        XCTAssertEqual(own["registrationsWiped"] as? Int, 1)
        let clients = try server.request("GET", "/__refserver/oauth/clients")
        let remaining = ((clients.json as? [String: Any])?["result"] as? [[String: Any]] ?? []).compactMap { $0["client_id"] as? String }
        XCTAssertFalse(remaining.contains(clientId), "the client is gone from the server: \(remaining)")
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", universalId("alice")]).status, 66)
        XCTAssertEqual(try keys()[kidA]?["status"] as? String, "revoked")
        XCTAssertEqual(try keys()[kidA]?["serverState"] as? String, "deleted", "already gone from the server: nothing left to delete")
        let ownAgain = try sandbox.succeed(["admin", "revoke", "--user", "alice", "--device-id", idA, "--reason", "left", "--yes", "--json"]).object()
        XCTAssertEqual(ownAgain["changed"] as? Bool, false)
        XCTAssertEqual(ownAgain["revokedHere"] as? [String], [])
        XCTAssertEqual(try sync()["writes"] as? Int, 0, "nothing left for sync to do")
    }

    /// Finding 1 of the person issue: on the stolen device itself, `admin revoke --device-id THIS` revokes at once
    /// exactly the keys whose server bindings it deleted (by kid), never a key that was not on the server.
    func testOnTheStolenDeviceItselfOnlyTheKeysWhoseBindingsWereDeletedAreRevoked() throws {
        try start(users: ["alice"])
        let registered = try XCTUnwrap(try register("alice")["kid"] as? String)
        // A second key of the same identity user, for another issuer, never on the server.
        let local = try XCTUnwrap(try sandbox.bind("alice", ["--issuer", "https://other.example"])["kid"] as? String)
        XCTAssertEqual(try keys()[local]?["userId"] as? String, universalId("alice"))
        let revoked = try sandbox.succeed(["admin", "revoke", "--user", "alice", "--device-id", try deviceId(), "--reason", "stolen",
                                           "--yes", "--json"]).object()
        XCTAssertEqual(revoked["deletedOnServer"] as? [String], [registered])
        XCTAssertEqual(revoked["revokedHere"] as? [String], [registered], "exactly the key whose binding was deleted")
        XCTAssertEqual(try keys()[registered]?["status"] as? String, "revoked")
        XCTAssertEqual(try keys()[local]?["status"] as? String, "active", "a key that was never on the server is untouched")
        XCTAssertEqual(try server.devices().count, 0)
    }

    /// An ambiguous `--user` (one identity's id= value, another's username) refuses before anything is deleted on the
    /// server, naming both.
    func testAnAmbiguousUserIsRefusedBeforeAnythingIsDeletedOnTheServer() throws {
        try start(users: ["bob"])
        try sandbox.bind("u-9", ["--username", "bob"])
        try register("bob")
        let refused = try sandbox.keymgr(["admin", "revoke", "--user", "bob", "--device-id", try deviceId(), "--reason", "stolen", "--yes"])
        XCTAssertEqual(refused.status, 64, refused.summary)
        XCTAssertTrue(refused.stderr.contains("u-9") && refused.stderr.contains(universalId("bob")), refused.summary)
        XCTAssertEqual(try server.devices().count, 1, "nothing was deleted on the server")
        XCTAssertEqual(Set(try keys().values.compactMap { $0["status"] as? String }), ["active"])
    }

    // MARK: stale bindings

    func testStaleFindsABindingAgedOnTheServerAndSkipsARecentOne() throws {
        try start(users: ["alice", "bob"])
        let aliceKid = try XCTUnwrap(try register("alice")["kid"] as? String)
        let bobKid = try XCTUnwrap(try register("bob")["kid"] as? String)
        // bob's binding on an old tablet, last used 100 days ago (the server's own dates, set through its admin surface).
        let oldKid = "old-tablet-" + UUID().uuidString
        try addBinding(user: "bob", kid: oldKid, deviceId: "tablet-9", deviceName: "old tablet", ageDays: 100)

        let stale = try sandbox.succeed(["admin", "stale", "--days", "30", "--json"]).array()
        XCTAssertEqual(stale.map { $0["kid"] as? String }, [oldKid], "\(stale)")
        let found = try XCTUnwrap(stale.first)
        XCTAssertEqual(Set(found.keys), Self.bindingFields)
        XCTAssertEqual(found["userId"] as? String, universalId("bob"))
        XCTAssertEqual(found["deviceId"] as? String, "tablet-9")
        XCTAssertEqual(found["thisDevice"] as? Bool, false)
        XCTAssertEqual(try sandbox.succeed(["admin", "stale", "--days", "365", "--json"]).array().count, 0)
        let table = try sandbox.succeed(["admin", "stale", "--days", "30"])
        XCTAssertTrue(table.stdout.contains("old tablet") && !table.stdout.contains(String(aliceKid.prefix(8))), table.summary)

        let everyone = try sandbox.succeed(["admin", "devices", "--all-known", "--json"]).array()
        XCTAssertEqual(Set(everyone.compactMap { $0["kid"] as? String }), [aliceKid, bobKid, oldKid])
        XCTAssertEqual(everyone.filter { $0["thisDevice"] as? Bool == true }.count, 2)
        XCTAssertEqual(try audit("admin.staleListed").count, 3)

        // One user's listing fails: the others are still printed, the failure is named, and the exit says so.
        try server.setFault(user: "bob", ["fault": "status500"])
        let partial = try sandbox.keymgr(["admin", "devices", "--all-known", "--json"])
        XCTAssertEqual(partial.status, 69, partial.summary)
        XCTAssertEqual(try partial.array().compactMap { $0["kid"] as? String }, [aliceKid], "alice's listing is printed")
        XCTAssertTrue(partial.stderr.contains(universalId("bob")) && partial.stderr.contains("serverUnavailable"), partial.stderr)
    }

    // MARK: audit

    func testTheAuditLogRecordsEachStepAndVerifyCatchesAnEditedRow() throws {
        try start(users: ["alice"])
        try register("alice")
        try addBinding(user: "alice", kid: "tablet-kid-" + UUID().uuidString, deviceId: "tablet-7", deviceName: "tablet", ageDays: 1)
        try sandbox.succeed(["admin", "devices", "--user", "alice"])
        try sandbox.succeed(["admin", "revoke", "--user", "alice", "--device-id", "tablet-7", "--reason", "stolen", "--yes"])
        let entries = try sandbox.succeed(["audit", "--json"]).array()
        let admin = entries.filter { ($0["event"] as? String ?? "").hasPrefix("admin.") }
        XCTAssertEqual(admin.map { $0["event"] as? String }, ["admin.devicesListed", "admin.deviceRevoked"])
        for entry in admin { XCTAssertEqual(entry["actor"] as? String, osUser) }
        let csv = try sandbox.succeed(["audit", "--event", "admin.deviceRevoked", "--format", "csv"]).stdout
        XCTAssertTrue(csv.contains("stolen") && csv.contains(osUser), csv)
        try sandbox.succeed(["audit", "verify"])

        // Someone with write access to the file makes the revocation look routine and re-hashes the plain chain.
        let seq = try XCTUnwrap(admin.last?["seq"] as? Int)
        let edit = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            "-c", AuditAndInputTamperingTests.rehash, sandbox.database.path,
            "UPDATE audit_events SET details = replace(details, '\"stolen\"', '\"left\"') WHERE seq = \(seq)",
        ])
        XCTAssertEqual(edit.status, 0, edit.summary)
        XCTAssertTrue(try sandbox.succeed(["audit", "--event", "admin.deviceRevoked", "--format", "csv"]).stdout.contains("left"),
                      "the edit landed")
        let verify = try sandbox.keymgr(["audit", "verify", "--json"])
        XCTAssertEqual(verify.status, 1, verify.summary)
        XCTAssertEqual(try verify.object()["firstBadSeq"] as? Int, seq)
    }

    // MARK: failures

    func testARefusedCredentialOrAnUnreachableServerChangesNothingLocally() throws {
        try start(users: ["alice"], ownServer: true)
        let kid = try XCTUnwrap(try register("alice")["kid"] as? String)
        let idA = try deviceId()
        let before = (try sandbox.succeed(["audit", "--json"]).stdout, try keys())

        let wrongToken = sandbox.root.appendingPathComponent("wrong.token")
        try Data("not-the-admin-token\n".utf8).write(to: wrongToken)
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", server.baseURL.absoluteString,
                             "--credential-file", wrongToken.path])
        let afterSet = try sandbox.succeed(["audit", "--json"]).stdout
        try assertJSONError(try sandbox.keymgr(["admin", "devices", "--user", "alice", "--json"]), status: 77, code: "unAuthorize")
        try assertJSONError(try sandbox.keymgr(["admin", "revoke", "--user", "alice", "--device-id", idA, "--reason", "stolen",
                                                "--yes", "--json"]), status: 77, code: "unAuthorize")
        XCTAssertEqual(try sandbox.keymgr(["admin", "stale", "--days", "1"]).status, 77)
        XCTAssertEqual(try sandbox.succeed(["audit", "--json"]).stdout, afterSet, "nothing was recorded")

        // Nothing listens on the port of a stopped server.
        let url = server.baseURL.absoluteString
        server.stop()
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", url, "--credential-file", server.tokenFile.path])
        let afterSecondSet = try sandbox.succeed(["audit", "--json"]).stdout
        try assertJSONError(try sandbox.keymgr(["admin", "revoke", "--user", "alice", "--device", kid, "--reason", "lost",
                                                "--yes", "--json"]), status: 69, code: "serverUnavailable")
        XCTAssertEqual(try sandbox.keymgr(["admin", "devices", "--all-known"]).status, 69)
        XCTAssertEqual(try sandbox.succeed(["audit", "--json"]).stdout, afterSecondSet)
        XCTAssertEqual(try keys()[kid]?["status"] as? String, "active")
        XCTAssertEqual(try keys().count, before.1.count)

        // A server without a device registry says so.
        try sandbox.succeed(["server", "set", "--dialect", "oauth", "--base-url", url])
        let oauth = try sandbox.keymgr(["admin", "devices", "--user", "alice", "--json"])
        try assertJSONError(oauth, status: 69, code: "unsupported")
        XCTAssertTrue(oauth.stderr.contains("no device registry"), oauth.stderr)
    }

    func testRevokeRefusesBadArgumentsAsUsageErrors() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for arguments in [["admin", "revoke", "--user", "alice", "--reason", "stolen"],
                          ["admin", "revoke", "--user", "alice", "--device", "k", "--device-id", "d", "--reason", "stolen"],
                          ["admin", "revoke", "--user", "alice", "--device-id", "d", "--reason", "bored"],
                          ["admin", "devices"], ["admin", "devices", "--user", "alice", "--all-known"],
                          ["admin", "stale", "--days", "0"]] {
            XCTAssertEqual(try sandbox.keymgr(arguments).status, 64, arguments.joined(separator: " "))
        }
        XCTAssertEqual(try sandbox.keymgr(["admin", "devices", "--user", "alice"]).status, 78, "no server configured")
    }

    // MARK: on a terminal

    func testRevokeAsksOnATerminalUnlessYes() throws {
        try start(users: ["alice"])
        try register("alice")
        try addBinding(user: "alice", kid: "tablet-kid-" + UUID().uuidString, deviceId: "tablet-7", deviceName: "tablet", ageDays: 1)
        let arguments = ["admin", "revoke", "--user", "alice", "--device-id", "tablet-7", "--reason", "lost"]

        let declined = try onTerminal(arguments, answer: "n")
        XCTAssertEqual(declined.status, 1, "declined: \(declined.summary)")
        XCTAssertTrue(declined.stdout.contains("Delete 1 binding"), declined.stdout)
        XCTAssertEqual(try server.devices().filter { $0["deviceId"] as? String == "tablet-7" }.count, 1, "nothing was deleted")

        let accepted = try onTerminal(arguments, answer: "yes")
        XCTAssertEqual(accepted.status, 0, accepted.summary)
        XCTAssertEqual(try server.devices().filter { $0["deviceId"] as? String == "tablet-7" }.count, 0)

        // Nothing left to revoke: nothing to ask.
        let again = try onTerminal(arguments, answer: nil)
        XCTAssertEqual(again.status, 0, again.summary)
        XCTAssertTrue(again.stdout.contains("nothing changed"), again.stdout)
    }

    /// Runs keymgr on a pseudo-terminal (TerminalPromptTests' driver), answering the confirmation with `answer`.
    private func onTerminal(_ arguments: [String], answer: String?) throws -> Outcome {
        try sandbox.onTerminal(arguments, answers: answer.map { [("[y/N] ", $0)] } ?? [])
    }
}

extension ServerTestCase {
    /// Adds a binding straight into the server's store, as another device would have made it `ageDays` ago.
    func addBinding(user: String, kid: String, deviceId: String, deviceName: String, ageDays: Double,
                    file: StaticString = #filePath, line: UInt = #line) throws {
        let then = Int64((Date().timeIntervalSince1970 - ageDays * 86_400) * 1000)
        let added = try server.request("POST", "/__refserver/devices", body: [
            "user": user, "deviceId": deviceId, "deviceName": deviceName, "createdDate": then, "lastAccessDate": then,
            "key": ["kty": "EC", "crv": "P-256", "kid": kid, "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                    "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0", "use": "sig", "alg": "ES256"],
        ], file: file, line: line)
        XCTAssertEqual(added.status, 201, "\(added)", file: file, line: line)
    }
}
