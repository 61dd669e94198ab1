import Foundation
import XCTest

/// `keymgr server set/show` and `keymgr sync`, run as processes against the reference server process.
final class ServerCommandTests: XCTestCase {
    static let profileFields: Set<String> = [
        "name", "dialect", "baseUrl", "realmPath", "credentialFile", "credentialHeader", "tokenEndpoint",
        "registrationEndpoint", "revocationEndpoint", "deviceAuthorizationEndpoint", "tokenBinding", "updatedAt",
    ]

    func testTheNewCommandsHaveHelpWithAnExample() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        for command in [["server"], ["server", "set"], ["server", "show"], ["sync"]] {
            let help = try sandbox.keymgr(command + ["--help"])
            XCTAssertEqual(help.status, 0, help.summary)
            XCTAssertTrue(help.stdout.contains("Example:"), "no example in `keymgr \(command.joined(separator: " ")) --help`")
        }
        for command in ["bind", "sign"] {
            let help = try sandbox.keymgr([command, "--help"]).stdout
            XCTAssertTrue(help.contains("--journey") && help.contains("--password-fd"), help)
            XCTAssertTrue(help.contains("keymgr \(command) --journey"), "an example of \(command) --journey: \(help)")
        }
        let root = try sandbox.keymgr(["--help"]).stdout
        XCTAssertTrue(root.contains("  server ") && root.contains("  sync "), root)
    }

    func testServerSetAndShowKeepSettingsNeverTheCredential() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try assertJSONError(try sandbox.keymgr(["server", "show", "--json"]), status: 78, code: "config")

        let token = "secret-admin-token-\(UUID().uuidString)"
        let tokenFile = sandbox.root.appendingPathComponent("admin.token")
        _ = FileManager.default.createFile(atPath: tokenFile.path, contents: Data(token.utf8), attributes: [.posixPermissions: 0o600])
        // A relative path is stored made absolute, against the directory keymgr ran in.
        let set = try RunningKeymgr(sandbox, [
            "server", "set", "--dialect", "pingam", "--base-url", "https://am.example.com/am",
            "--realm-path", "/realms/root/realms/alpha", "--credential-file", "./admin.token",
            "--credential-header", "iPlanetDirectoryPro", "--token-endpoint", "https://am.example.com/am/oauth2/access_token",
            "--unbound", "--json",
        ], directory: sandbox.root).finish().0
        XCTAssertEqual(set.status, 0, set.summary)
        XCTAssertEqual(set.stderr, "", "a 0600 credential file draws no warning")
        let saved = try set.object()
        XCTAssertEqual(Set(saved.keys), Self.profileFields)

        let shown = try sandbox.succeed(["server", "show", "--json"])
        let profile = try shown.object()
        XCTAssertEqual(Set(profile.keys), Self.profileFields)
        XCTAssertEqual(profile["name"] as? String, "default")
        XCTAssertEqual(profile["dialect"] as? String, "pingam")
        XCTAssertEqual(profile["baseUrl"] as? String, "https://am.example.com/am")
        XCTAssertEqual(profile["realmPath"] as? String, "/realms/root/realms/alpha")
        let storedPath = try XCTUnwrap(profile["credentialFile"] as? String)
        XCTAssertTrue(storedPath.hasPrefix("/") && storedPath.hasSuffix("/admin.token") && !storedPath.contains("/./"), storedPath)
        XCTAssertEqual(URL(fileURLWithPath: storedPath).resolvingSymlinksInPath().path, tokenFile.resolvingSymlinksInPath().path)
        XCTAssertEqual(profile["credentialHeader"] as? String, "iPlanetDirectoryPro")
        XCTAssertEqual(profile["tokenEndpoint"] as? String, "https://am.example.com/am/oauth2/access_token")
        assertNull(profile["registrationEndpoint"], "registrationEndpoint")
        assertNull(profile["revocationEndpoint"], "revocationEndpoint")
        assertNull(profile["deviceAuthorizationEndpoint"], "deviceAuthorizationEndpoint")
        XCTAssertEqual(profile["tokenBinding"] as? String, "unbound")
        assertTimestamp(profile["updatedAt"], "updatedAt")
        XCTAssertEqual(NSDictionary(dictionary: saved), NSDictionary(dictionary: profile), "set --json prints what show shows")

        let human = try sandbox.succeed(["server", "show"])
        XCTAssertTrue(human.stdout.contains("iPlanetDirectoryPro") && human.stdout.contains(storedPath), human.stdout)
        for outcome in [set, shown, human] {
            XCTAssertFalse(outcome.stdout.contains(token) || outcome.stderr.contains(token), "the credential leaked: \(outcome.summary)")
        }
        let audit = try sandbox.succeed(["audit", "--json"])
        XCTAssertTrue(audit.stdout.contains("server.configured"), audit.stdout)
        XCTAssertFalse(audit.stdout.contains(token))

        // `set` changes only the options given: the rest of the profile, the credential above all, stays.
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--base-url", "http://127.0.0.1:8443"])
        let changed = try sandbox.succeed(["server", "show", "--json"]).object()
        XCTAssertEqual(changed["dialect"] as? String, "oauth", "curity is another name for the oauth dialect")
        XCTAssertEqual(changed["baseUrl"] as? String, "http://127.0.0.1:8443")
        XCTAssertEqual(changed["realmPath"] as? String, "/realms/root/realms/alpha")
        XCTAssertEqual(changed["credentialFile"] as? String, storedPath)
        XCTAssertEqual(changed["credentialHeader"] as? String, "iPlanetDirectoryPro")
        XCTAssertEqual(changed["tokenBinding"] as? String, "unbound")
        XCTAssertEqual(changed["tokenEndpoint"] as? String, "https://am.example.com/am/oauth2/access_token")
    }

    func testServerSetWarnsAboutAMissingOrReadableCredentialFile() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let missing = try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9",
                                           "--credential-file", sandbox.root.appendingPathComponent("nowhere.token").path])
        XCTAssertTrue(missing.stderr.contains("warning") && missing.stderr.contains("does not exist"), missing.stderr)

        let readable = sandbox.root.appendingPathComponent("readable.token")
        let token = "readable-token-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: readable.path, contents: Data(token.utf8), attributes: [.posixPermissions: 0o644])
        let warned = try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9",
                                          "--credential-file", readable.path])
        XCTAssertTrue(warned.stderr.contains("readable by other users") && warned.stderr.contains("chmod 600"), warned.stderr)
        XCTAssertFalse(warned.stderr.contains(token))
        let quiet = try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9",
                                         "--credential-file", readable.path, "--quiet"])
        XCTAssertEqual(quiet.stderr, "")
    }

    func testServerSetRefusesBadSettings() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        for arguments in [
            ["--dialect", "keycloak", "--base-url", "https://am.example.com"],
            ["--dialect", "pingam", "--base-url", "am.example.com"],
            ["--dialect", "pingam", "--base-url", "ftp://am.example.com"],
            ["--dialect", "pingam", "--base-url", "https://"],
            ["--dialect", "pingam", "--base-url", "https://admin:hunter2@am.example.com"],
            ["--dialect", "pingam", "--base-url", "https://am.example.com", "--token-endpoint", "not a url"],
            ["--dialect", "pingam", "--base-url", "https://am.example.com", "--realm-path", "realms/root"],
            ["--dialect", "pingam", "--base-url", "https://am.example.com", "--credential-header", "Bad Header"],
            ["--dialect", "pingam", "--base-url", "https://am.example.com", "--bound", "--unbound"],
            ["--dialect", "pingam"],
            ["--dialect", "oauth"],
        ] {
            let outcome = try sandbox.keymgr(["server", "set", "--json"] + arguments)
            try assertJSONError(outcome, status: 64, code: "usage")
            XCTAssertFalse(outcome.stdout.contains("hunter2") || outcome.stderr.contains("hunter2"), outcome.summary)
        }
        try assertJSONError(try sandbox.keymgr(["server", "show", "--json"]), status: 78, code: "config")
    }

    func testSyncWithoutAServerOrCredentialIsAConfigurationError() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        let noStore = try sandbox.keymgr(["sync", "--json"])
        try assertJSONError(noStore, status: 78, code: "config")
        XCTAssertTrue(noStore.stderr.contains("keymgr init"), noStore.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.home.path), "sync creates no home")
        try sandbox.initialise()
        try assertJSONError(try sandbox.keymgr(["sync", "--json"]), status: 78, code: "config")
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9"])
        let noCredential = try sandbox.keymgr(["sync", "--json"])
        try assertJSONError(noCredential, status: 78, code: "config")
        XCTAssertTrue(noCredential.stderr.contains("--credential-file"), noCredential.stderr)
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:9",
                             "--credential-file", sandbox.root.appendingPathComponent("absent.token").path])
        try assertJSONError(try sandbox.keymgr(["sync", "--json"]), status: 78, code: "config")
        for bad in [["--max-revoke", "150"], ["--concurrency", "0"], ["--timeout", "0"]] {
            try assertJSONError(try sandbox.keymgr(["sync", "--json"] + bad), status: 64, code: "usage")
        }
    }

    func testSyncWithACurityServerHasNothingToReconcile() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--base-url", "http://127.0.0.1:9"])
        let outcome = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        XCTAssertTrue(outcome.stderr.contains("no device registry"), outcome.stderr)
        let report = try outcome.object()
        XCTAssertEqual(report["users"] as? Int, 0)
        XCTAssertEqual(report["writes"] as? Int, 0)
        XCTAssertEqual((report["errors"] as? [Any])?.count, 0)
        let journey = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", "bob", "--password-fd", "0", "--json"],
                                         stdin: "pw\n")
        try assertJSONError(journey, status: 78, code: "config")
    }
}

/// `keymgr sync` against the reference server: the report, the exit statuses, overlap and a kill.
final class SyncCommandTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    static let reportFields: Set<String> = ["dryRun", "applied", "users", "inSync", "registered", "revoked",
                                            "serverDeleted", "orphans", "errors", "writes",
                                            "registrationsWiped", "registrationsRefused", "writesByKind", "unregistered"]

    func testReportShapeAndEveryRuleThroughTheCLI() throws {
        try start(users: ["alice", "bob", "carol"])
        let kids = try ["alice", "bob", "carol"].map { try XCTUnwrap(register($0)["kid"] as? String) }

        let first = try sync()
        XCTAssertEqual(Set(first.keys), Self.reportFields)
        XCTAssertEqual(first["dryRun"] as? Bool, false)
        XCTAssertEqual(first["applied"] as? Bool, true)
        XCTAssertEqual(first["users"] as? Int, 3)
        XCTAssertEqual(first["registered"] as? [String], [], "the journeys registered them already")
        for field in ["revoked", "serverDeleted", "orphans", "errors"] {
            XCTAssertEqual((first[field] as? [Any])?.count, 0, field)
        }
        XCTAssertGreaterThan(first["writes"] as? Int ?? 0, 0, "the server's last access is mirrored")

        let second = try sync()
        XCTAssertEqual(second["inSync"] as? Int, 3)
        XCTAssertEqual(second["writes"] as? Int, 0, "a second run right after a first writes nothing")

        // Rule 2, first as a dry run: reported, nothing written.
        try server.deleteBinding(user: "bob", uuid: kids[1])
        let planned = try sync(["--dry-run"])
        XCTAssertEqual(planned["dryRun"] as? Bool, true)
        XCTAssertEqual(planned["applied"] as? Bool, false, "a dry run applies nothing")
        XCTAssertEqual(planned["revoked"] as? [String], [kids[1]])
        XCTAssertEqual(planned["writes"] as? Int, 0)
        XCTAssertEqual(try keys()[kids[1]]?["status"] as? String, "active")
        let revoked = try sync()
        XCTAssertEqual(revoked["revoked"] as? [String], [kids[1]])
        XCTAssertEqual(revoked["inSync"] as? Int, 2)
        XCTAssertEqual(try keys()[kids[1]]?["status"] as? String, "revoked")
        XCTAssertEqual(try keys()[kids[1]]?["serverState"] as? String, "deleted")

        // Rule 3: a key retired here is deleted on the server.
        try sandbox.succeed(["rebind", "--user", universalId("alice"), "--auth-type", "none"])
        let deleted = try sync()
        XCTAssertEqual(deleted["serverDeleted"] as? [String], [kids[0]])
        XCTAssertFalse(try server.devices().contains { $0["uuid"] as? String == kids[0] })

        // Rule 4: a binding of this device the store never held.
        let deviceId = try XCTUnwrap(try sandbox.succeed(["status", "--json"]).object()["deviceId"] as? String)
        let orphan = UUID().uuidString
        let added = try server.request("POST", "/__refserver/devices", body: [
            "user": "carol", "deviceId": deviceId, "deviceName": "test kiosk", "key": ["kid": orphan, "kty": "EC"],
        ])
        XCTAssertEqual(added.status, 201)
        let reported = try sync()
        XCTAssertEqual(reported["orphans"] as? [String], [orphan])
        XCTAssertTrue(try server.devices().contains { $0["uuid"] as? String == orphan }, "reported, not deleted")
        let pruned = try sync(["--prune-orphans"])
        XCTAssertEqual(pruned["orphans"] as? [String], [orphan])
        XCTAssertFalse(try server.devices().contains { $0["uuid"] as? String == orphan })
        XCTAssertEqual(try sync()["writes"] as? Int, 0)

        // People get a short summary on stdout, and no progress line when stderr is not a terminal.
        let human = try sandbox.succeed(["sync"])
        XCTAssertTrue(human.stdout.contains("users checked:") && human.stdout.contains("keys unchanged"), human.stdout)
        XCTAssertFalse(human.stderr.contains("\r"), human.stderr)
        XCTAssertEqual(try sandbox.succeed(["audit", "verify"]).status, 0)
    }

    func testOneFailingUserExits2WithTheReportAndTheOthersReconciled() throws {
        try start(users: ["alice", "bob", "carol"])
        let kids = try registerSettled(["alice", "bob", "carol"])
        try server.deleteBinding(user: "carol", uuid: try XCTUnwrap(kids["carol"]))
        try server.setFault(user: "bob", ["fault": "status500"])
        let outcome = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(outcome.status, 2, outcome.summary)
        let report = try outcome.object()
        XCTAssertEqual(Set(report.keys), Self.reportFields)
        let errors = try XCTUnwrap(report["errors"] as? [[String: Any]])
        XCTAssertEqual(errors.count, 1)
        XCTAssertEqual(Set(errors[0].keys), ["userId", "code", "message"])
        XCTAssertEqual(errors[0]["userId"] as? String, universalId("bob"))
        XCTAssertEqual(errors[0]["code"] as? String, "serverUnavailable")
        XCTAssertTrue((errors[0]["message"] as? String ?? "").contains("500"), "\(errors[0])")
        XCTAssertEqual(report["revoked"] as? [String], [kids["carol"] ?? ""], "the other users went on")
        XCTAssertTrue(outcome.stderr.contains("keymgr: \(universalId("bob")): "), outcome.stderr)
        XCTAssertEqual(try keys()[kids["bob"] ?? ""]?["status"] as? String, "active", "nothing changed for bob")

        let human = try sandbox.keymgr(["sync"])
        XCTAssertEqual(human.status, 2, human.summary)
        XCTAssertTrue(human.stdout.contains("1 users with errors"), human.stdout)
        XCTAssertTrue(human.stderr.contains("(serverUnavailable)"), human.stderr)
        // status says when the last sync ran and how it went (issue 32, finding 10).
        let partial = try XCTUnwrap(try sandbox.succeed(["status", "--json"]).object()["lastSyncRun"] as? [String: Any])
        XCTAssertEqual(partial["result"] as? String, "partial", "\(partial)")
        XCTAssertEqual(partial["errors"] as? Int, 1, "\(partial)")
        let line = try sandbox.succeed(["status"]).stdout
        XCTAssertTrue(line.contains(": partial (") && line.contains("1 failed)"), "the human line says so: \(line)")

        try server.request("DELETE", "/__refserver/faults/bob")
        XCTAssertEqual((try sync()["errors"] as? [Any])?.count, 0)
        let ok = try XCTUnwrap(try sandbox.succeed(["status", "--json"]).object()["lastSyncRun"] as? [String: Any])
        XCTAssertEqual(ok["result"] as? String, "ok", "\(ok)")
        XCTAssertEqual((try sandbox.succeed(["status", "--json"]).object()["servers"] as? [[String: Any]])?.first?["name"] as? String,
                       "default")
    }

    func testSafetyValveExits3AndAppliesNothingUntilForced() throws {
        let names = ["alice", "bob", "carol", "dave", "erin"]
        try start(users: names)
        let kids = try registerSettled(names)
        for name in names.dropFirst() { try server.deleteBinding(user: name, uuid: try XCTUnwrap(kids[name])) }

        let tripped = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(tripped.status, 3, tripped.summary)
        // The one document on stdout is the report of what the valve held back; the reason is on stderr.
        let held = try tripped.object()
        XCTAssertEqual(Set(held.keys), Self.reportFields)
        XCTAssertEqual(held["applied"] as? Bool, false)
        XCTAssertEqual(Set(held["revoked"] as? [String] ?? []), Set(names.dropFirst().compactMap { kids[$0] }))
        XCTAssertTrue(tripped.stderr.contains("revoke 4 keys") && tripped.stderr.contains("limit of 1")
                      && tripped.stderr.contains("--force") && tripped.stderr.contains("--dry-run"), tripped.stderr)
        XCTAssertTrue(try keys().values.allSatisfy { $0["status"] as? String == "active" }, "nothing applied")
        XCTAssertEqual(try sandbox.keymgr(["sync", "--json", "--max-revoke", "50"]).status, 3, "50 % of 5 is 2")

        let human = try sandbox.keymgr(["sync"])
        XCTAssertEqual(human.status, 3, human.summary)
        XCTAssertTrue(human.stdout.contains("HELD BACK"), human.stdout)
        for name in names.dropFirst() {
            XCTAssertTrue(human.stdout.contains(String(try XCTUnwrap(kids[name]).prefix(8))), "\(name)'s key is listed: \(human.stdout)")
        }
        XCTAssertTrue(try keys().values.allSatisfy { $0["status"] as? String == "active" }, "still nothing applied")

        let forced = try sync(["--force"])
        XCTAssertEqual(Set(forced["revoked"] as? [String] ?? []), Set(names.dropFirst().compactMap { kids[$0] }))
        XCTAssertEqual(try keys().values.filter { $0["status"] as? String == "revoked" }.count, 4)
        XCTAssertEqual(try sync()["writes"] as? Int, 0)
    }

    func testTwoSyncsStartedTogetherOneRunsTheOtherExits75AtOnce() throws {
        try start(users: ["alice", "bob"])
        try registerSettled(["alice", "bob"])
        // Every listing of alice takes 3 s, so whichever run takes the lease is still running when the other starts.
        try server.setFault(user: "alice", ["fault": "delay", "seconds": 3])
        let runs = try (0..<2).map { _ in try RunningKeymgr(sandbox, ["sync", "--json", "--timeout", "10"]) }
        // Other commands keep working during a sync.
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 2)
        let results = try runs.map { run in (run, try run.finish()) }
        let statuses = results.map(\.1.0.status).sorted()
        XCTAssertEqual(statuses, [0, 75], results.map(\.1.0.summary).joined(separator: "\n"))
        guard let busy = results.first(where: { $0.1.0.status == 75 }), let ran = results.first(where: { $0.1.0.status == 0 }) else {
            return
        }
        try assertJSONError(busy.1.0, status: 75, code: "busy")
        // Timed by the server's request journal, not by this test's clock against a constant: the held listing of
        // alice is the running sync's, and the other run ended while the server still held it.
        let held = try server.recordedRequests().compactMap { request -> (received: Date, answered: Date)? in
            guard request["method"] as? String == "GET",
                  (request["target"] as? String ?? "").contains("/users/alice/devices/2fa/binding"),
                  let received = request["received"] as? Double, let answered = request["answered"] as? Double,
                  answered - received >= 3 else { return nil }
            return (Date(timeIntervalSince1970: received), Date(timeIntervalSince1970: answered))
        }
        let listing = try XCTUnwrap(held.min { $0.answered < $1.answered }, "the running sync listed alice under the delay")
        XCTAssertLessThan(busy.1.1, listing.answered, "the overlapping run left at once, while the other was mid-run")
        XCTAssertGreaterThanOrEqual(ran.1.1, listing.answered, "the run that held the lease waited for its listing")
        XCTAssertEqual(Set(try ran.1.0.object().keys), Self.reportFields)
        // The lease is free again afterwards.
        XCTAssertEqual(try sync()["inSync"] as? Int, 2)
    }

    func testASyncKilledMidRunLeavesTheStoreConsistentAndTheNextRunConverges() throws {
        let names = ["alice", "bob", "carol", "dave", "erin"]
        try start(users: names)
        let kids = try registerSettled(names)
        // Work for the run: bob's binding removed on the server, carol's key retired here.
        try server.deleteBinding(user: "bob", uuid: try XCTUnwrap(kids["bob"]))
        try sandbox.succeed(["rebind", "--user", universalId("carol"), "--auth-type", "none"])
        try server.request("DELETE", "/__refserver/requests")
        try server.setFault(user: "alice", ["fault": "delay", "seconds": 5, "count": 1])

        let run = try RunningKeymgr(sandbox, ["sync", "--json", "--timeout", "10"])
        // Mid-run: once the server has alice's listing in hand (and is sitting on it), kill the sync.
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, try !server.recordedRequests().contains(where: { ($0["target"] as? String ?? "").contains("/users/alice/") }) {
            usleep(20_000)
        }
        usleep(300_000)
        XCTAssertTrue(run.process.isRunning, "the sync ended before it could be killed")
        kill(run.process.processIdentifier, SIGKILL)
        let (killed, _) = try run.finish()
        XCTAssertEqual(run.process.terminationReason, .uncaughtSignal, killed.summary)

        let verified = try sandbox.succeed(["audit", "verify", "--json"]).object()
        XCTAssertEqual(verified["intact"] as? Bool, true)
        XCTAssertEqual(try keys().count, names.count + 1)

        let converged = try sync(["--timeout", "10"])
        XCTAssertEqual(converged["revoked"] as? [String], [kids["bob"] ?? ""])
        XCTAssertEqual(converged["serverDeleted"] as? [String], [kids["carol"] ?? ""])
        XCTAssertEqual((converged["errors"] as? [Any])?.count, 0)
        XCTAssertEqual(try sync()["writes"] as? Int, 0)
        XCTAssertEqual(try sandbox.succeed(["audit", "verify", "--json"]).object()["intact"] as? Bool, true)
    }

    func testAProgressLineIsShownOnATerminalAndClearedAtTheEnd() throws {
        try start(users: ["alice", "bob"])
        try registerSettled(["alice", "bob"])
        // keymgr on a pseudo-terminal (stdout and stderr both), everything it wrote captured.
        let driver = sandbox.root.appendingPathComponent("pty-run.py")
        try """
            import os, pty, sys
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.argv[1], sys.argv[1:])
            seen = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            _, status = os.waitpid(pid, 0)
            sys.stdout.buffer.write(seen)
            sys.exit(os.waitstatus_to_exitcode(status))
            """.write(to: driver, atomically: true, encoding: .utf8)
        func onTerminal(_ arguments: [String]) throws -> Outcome {
            try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                            ["python3", driver.path, Sandbox.binary.path, "--home", sandbox.home.path] + arguments)
        }
        let shown = try onTerminal(["sync"])
        XCTAssertEqual(shown.status, 0, shown.summary)
        XCTAssertTrue(shown.stdout.contains("\rsyncing: 2/2 users"), shown.stdout.debugDescription)
        let cleared = try XCTUnwrap(shown.stdout.range(of: "\r\u{1B}[K", options: .backwards))
        XCTAssertTrue(shown.stdout[cleared.upperBound...].contains("2 users checked"), "cleared before the summary: \(shown.stdout.debugDescription)")
        let quiet = try onTerminal(["sync", "--quiet"])
        XCTAssertEqual(quiet.status, 0, quiet.summary)
        XCTAssertFalse(quiet.stdout.contains("syncing:"), quiet.stdout.debugDescription)
    }

    func testAnUnreachableServerFailsTheRunWithExit69AndOneLine() throws {
        try start(users: ["alice", "bob"], ownServer: true)
        try registerSettled(["alice", "bob"])
        server.stop()
        let outcome = try sandbox.keymgr(["sync", "--json", "--timeout", "5"])
        XCTAssertEqual(outcome.status, 69, "no user could be reconciled: the timer must see a failure, not 2: \(outcome.summary)")
        let errors = try XCTUnwrap(try outcome.object()["errors"] as? [[String: Any]])
        XCTAssertEqual(errors.map { $0["code"] as? String }, ["serverUnavailable", "serverUnavailable"])
        let lines = outcome.stderr.split(separator: "\n").filter { $0.hasPrefix("keymgr:") }
        XCTAssertEqual(lines.count, 1, "one line says so, not one per user: \(outcome.stderr)")
        XCTAssertTrue(lines.first?.contains("no user was reconciled") == true, outcome.stderr)
        XCTAssertEqual(try keys().values.first?["status"] as? String, "active")
    }

    func testARefusedAdminCredentialFailsTheRunWithExit77() throws {
        try start(users: ["alice"])
        try registerSettled(["alice"])
        let wrong = sandbox.root.appendingPathComponent("wrong.token")
        try Data("not-the-admin-token\n".utf8).write(to: wrong)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: wrong.path)
        var arguments = server.serverSetArguments
        if let index = arguments.firstIndex(of: "--credential-file") { arguments[index + 1] = wrong.path }
        try sandbox.succeed(arguments)
        let outcome = try sandbox.keymgr(["sync"])
        XCTAssertEqual(outcome.status, 77, outcome.summary)
        XCTAssertTrue(outcome.stderr.contains("admin credential"), outcome.stderr)
        XCTAssertFalse(outcome.stderr.contains("not-the-admin-token"), "the credential is never shown")
        XCTAssertEqual(try keys().values.first?["status"] as? String, "active")
    }

    func testAUserIdWithSlashesDotsQueryAndSpacesIsOnePathSegment() throws {
        let awkward = "a/b ..?#c d"
        try start(users: [awkward, "plain"])
        let key = try register(awkward)
        XCTAssertEqual(key["userId"] as? String, universalId(awkward))
        try register("plain")
        try server.request("DELETE", "/__refserver/requests")
        let report = try sync()
        XCTAssertEqual(report["users"] as? Int, 2)
        XCTAssertEqual((report["errors"] as? [Any])?.count, 0, "\(report)")

        let listings = try server.recordedRequests().compactMap { $0["target"] as? String }
            .filter { $0.hasPrefix("/json/realms/root/users/") }
        let segment = "a%2Fb%20%2E%2E%3F%23c%20d"
        XCTAssertTrue(listings.contains { $0.hasPrefix("/json/realms/root/users/\(segment)/devices/2fa/binding?_queryFilter=true") },
                      "\(listings)")
        // The server found the binding under that exact user: the listing was complete and in step.
        let onServer = try server.devices().filter { $0["user"] as? String == awkward }
        XCTAssertEqual(onServer.map { $0["uuid"] as? String }, [key["kid"] as? String])
        XCTAssertEqual(try sync()["inSync"] as? Int, 2)

        // An administrator removes it with the same one-segment path, and the next sync revokes it here.
        try server.deleteBinding(user: segment, uuid: try XCTUnwrap(key["kid"] as? String))
        let revoked = try sandbox.succeed(["sync", "--wide"])
        let kid = try XCTUnwrap(key["kid"] as? String)
        let row = revoked.stdout.split(separator: "\n").first { $0.hasPrefix("revoked") }.map(String.init) ?? ""
        XCTAssertTrue(row.contains(universalId(awkward)) && row.contains(kid), revoked.stdout)
        XCTAssertTrue(revoked.stdout.contains("1 revoked"), revoked.stdout)
        XCTAssertEqual(try keys()[kid]?["status"] as? String, "revoked")
    }
}
