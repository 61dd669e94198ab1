import Foundation
import XCTest

/// Issue 26: an operator's second day. Settings changed after init, server profiles merged and named, the public key
/// exported, `admin revoke` that tells a typo from a revoked device, and confirmations that ask only about what
/// exists — the built binary as a process, against the reference server where a server is needed.
final class OperatorCommandTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    // MARK: admin revoke

    func testAdminRevokeCallsADeviceTheServerNeverListedAnErrorAndTakesADeviceIdPrefix() throws {
        try start(users: ["frank"])
        try register("frank")
        let stolen = "34FC6D2B-D2A4-42D0-A73F-5C1E2D3B4A59"
        let stolenKid = "stolen-" + UUID().uuidString
        try addBinding(user: "frank", kid: stolenKid, deviceId: stolen, deviceName: "tablet 3", ageDays: 2)
        let revoke = ["admin", "revoke", "--user", "frank", "--reason", "stolen", "--yes", "--json"]

        // A typo is not "already revoked": 66, naming what the server does list, and nothing changes.
        let typo = try sandbox.keymgr(revoke + ["--device-id", "TYPO-NOT-A-DEVICE"])
        try assertJSONError(typo, status: 66, code: "clientNotRegistered")
        XCTAssertTrue(typo.stderr.contains(stolen) && typo.stderr.contains("tablet 3"), typo.stderr)
        XCTAssertEqual(try server.devices().filter { $0["deviceId"] as? String == stolen }.count, 1)
        let unknownBinding = try sandbox.keymgr(revoke + ["--device", "no-such-binding-uuid"])
        try assertJSONError(unknownBinding, status: 66, code: "clientNotRegistered")
        XCTAssertTrue(unknownBinding.stderr.contains(stolenKid), unknownBinding.stderr)

        // `admin devices` shows the whole device id with --wide and in JSON.
        let wide = try sandbox.succeed(["admin", "devices", "--user", "frank", "--wide"]).stdout
        XCTAssertTrue(wide.contains(stolen), wide)
        let listed = try sandbox.succeed(["admin", "devices", "--user", "frank", "--json"]).array()
        XCTAssertTrue(listed.contains { $0["deviceId"] as? String == stolen }, "\(listed)")

        // A unique prefix names the device, as --device and --kid take prefixes.
        let revoked = try sandbox.succeed(revoke + ["--device-id", String(stolen.prefix(8))]).object()
        XCTAssertEqual(revoked["deletedOnServer"] as? [String], [stolenKid])
        XCTAssertEqual(revoked["deviceId"] as? String, stolen, "the audit and the report name the whole id")
        XCTAssertEqual(try server.devices().filter { $0["deviceId"] as? String == stolen }.count, 0)

        // Now, and only now, the same device is "already revoked": keymgr's own audit log says it deleted it.
        let again = try sandbox.succeed(revoke + ["--device-id", stolen]).object()
        XCTAssertEqual(again["changed"] as? Bool, false)
        let text = try sandbox.succeed(["admin", "revoke", "--user", "frank", "--reason", "stolen", "--yes",
                                        "--device-id", String(stolen.prefix(8))])
        XCTAssertTrue(text.stdout.contains("already revoked"), text.stdout)
        let byUUID = try sandbox.succeed(revoke + ["--device", stolenKid]).object()
        XCTAssertEqual(byUUID["changed"] as? Bool, false)
    }

    func testAnAmbiguousDeviceIdPrefixListsTheCandidatesAndChangesNothing() throws {
        try start(users: ["frank"])
        try register("frank")
        for suffix in ["0001", "0002"] {
            try addBinding(user: "frank", kid: "k-\(suffix)-" + UUID().uuidString, deviceId: "ABCDEF12-0000-0000-0000-00000000\(suffix)",
                           deviceName: "kiosk \(suffix)", ageDays: 1)
        }
        let outcome = try sandbox.keymgr(["admin", "revoke", "--user", "frank", "--device-id", "ABCDEF12", "--reason", "lost",
                                          "--yes", "--json"])
        try assertJSONError(outcome, status: 64, code: "usage")
        XCTAssertTrue(outcome.stderr.contains("ABCDEF12-0000-0000-0000-000000000001")
                      && outcome.stderr.contains("ABCDEF12-0000-0000-0000-000000000002"), outcome.stderr)
        XCTAssertEqual(try server.devices().count, 3, "nothing was deleted")
    }

    // MARK: config

    func testConfigSetChangesInitsSettingsUnderInitsRulesAuditedAndMACd() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let shown = try sandbox.succeed(["config", "show", "--json"]).object()
        XCTAssertEqual(shown["deviceName"] as? String, "test kiosk")
        XCTAssertEqual(shown["argon2Memory"] as? Int, 64)
        XCTAssertEqual(shown["pinMinLength"] as? Int, 6)
        assertNull(shown["biometricVerifier"], "biometricVerifier")

        // Without a verifier, the error points at `config set`, not at a second init.
        let refused = try sandbox.keymgr(["bind", "--user", "ann", "--auth-type", "biometric-only"])
        XCTAssertEqual(refused.status, 69, refused.summary)
        XCTAssertTrue(refused.stderr.contains("keymgr config set biometric-verifier"), refused.stderr)
        try sandbox.succeed(["config", "set", "biometric-verifier", "/bin/true {osUser}"])
        try sandbox.bind("ann", ["--auth-type", "biometric-only"])
        XCTAssertEqual(try sandbox.succeed(["config", "show", "--json"]).object()["biometricVerifier"] as? [String],
                       ["/bin/true", "{osUser}"])

        // The PIN policy applies to new PINs at once.
        try sandbox.succeed(["config", "set", "pin-min-length", "8"])
        XCTAssertEqual(try sandbox.keymgr(["bind", "--user", "bo", "--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n").status, 65)
        try sandbox.bind("bo", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "48291637\n")

        // init's rules, and Argon2 costs only upward; a refused value changes nothing.
        for (key, value) in [("pin-retry", "11"), ("pin-min-length", "3"), ("argon2-memory", "32"), ("argon2-iterations", "0"),
                             ("biometric-verifier", "fprintd-verify"), ("device-name", " "), ("no-such-key", "1"), ("pin-retry", "five")] {
            let outcome = try sandbox.keymgr(["config", "set", key, value])
            XCTAssertEqual(outcome.status, 64, outcome.summary)
        }
        let control = try sandbox.keymgr(["config", "set", "device-name", "kiosk\u{1B}[2J"])
        XCTAssertEqual(control.status, 65, "a name with a terminal escape is bad input: \(control.summary)")
        try sandbox.succeed(["config", "set", "argon2-memory", "128"])
        try sandbox.succeed(["config", "set", "device-name", "kiosk 9"])
        let after = try sandbox.succeed(["config", "show", "--json"]).object()
        XCTAssertEqual(after["argon2Memory"] as? Int, 128)
        // An existing PIN moves up to the new cost at its next unlock.
        try sandbox.succeed(["sign", "--user", "bo", "--challenge", "c", "--pin-stdin"], stdin: "48291637\n")
        let upgraded = try sandbox.succeed(["audit", "--event", "pin.parametersUpgraded", "--json"]).array()
        XCTAssertEqual((upgraded.last?["details"] as? [String: Any])?["memoryKiB"] as? Int, 128, "\(upgraded)")
        XCTAssertEqual(after["pinRetry"] as? Int, 5)
        XCTAssertEqual(after["deviceName"] as? String, "kiosk 9")
        XCTAssertEqual(try sandbox.succeed(["status", "--json"]).object()["deviceName"] as? String, "kiosk 9")
        let text = try sandbox.succeed(["config", "show"]).stdout
        XCTAssertTrue(text.contains("argon2-memory") && text.contains("128"), text)

        // Audited with the old and new value; the chain holds.
        let changes = try sandbox.succeed(["audit", "--event", "config.changed", "--json"]).array()
        XCTAssertEqual(changes.count, 4, "\(changes)")
        let memory = try XCTUnwrap(changes.first { ($0["details"] as? [String: Any])?["key"] as? String == "argon2-memory" })
        XCTAssertEqual((memory["details"] as? [String: Any])?["from"] as? String, "64")
        XCTAssertEqual((memory["details"] as? [String: Any])?["to"] as? String, "128")
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)

        // MAC'd as at init: lowering the cost behind keymgr's back is caught.
        let attack = try sandbox.run(TamperingTests.sqlite3, [sandbox.database.path, "UPDATE device SET argon2_memory_kib = 8"])
        XCTAssertEqual(attack.status, 0, attack.summary)
        XCTAssertEqual(try sandbox.keymgr(["config", "show"]).status, 1, "a tampered device row is refused")
    }

    // MARK: server profiles

    func testServerSetChangesOnlyTheOptionsGivenAndProfilesAreNamed() throws {
        try start(users: ["alice"])
        try register("alice")
        let before = try sandbox.succeed(["server", "show", "--json"]).object()
        let credential = try XCTUnwrap(before["credentialFile"] as? String)

        // Re-running with one option (as an error message may suggest) keeps the rest: the credential above all.
        let changed = try sandbox.succeed(["server", "set", "--issuer", server.baseURL.absoluteString, "--json"]).object()
        XCTAssertEqual(changed["credentialFile"] as? String, credential)
        XCTAssertEqual(changed["dialect"] as? String, "pingam")
        XCTAssertNotNil(changed["tokenEndpoint"] as? String, "the issuer's endpoints were discovered")
        try sandbox.succeed(["server", "set", "--realm-path", "/realms/root"])
        XCTAssertEqual(try sandbox.succeed(["server", "show", "--json"]).object()["credentialFile"] as? String, credential)
        try sync()

        // A second, named profile for an OAuth server; a new profile needs a dialect; one device registry per store.
        XCTAssertEqual(try sandbox.keymgr(["server", "set", "--profile", "idp", "--base-url", server.baseURL.absoluteString]).status, 64)
        try sandbox.succeed(["server", "set", "--profile", "idp", "--dialect", "oauth", "--base-url", server.baseURL.absoluteString,
                             "--issuer", server.baseURL.absoluteString])
        let second = try sandbox.keymgr(["server", "set", "--profile", "am2", "--dialect", "pingam", "--base-url", server.baseURL.absoluteString])
        XCTAssertEqual(second.status, 78, second.summary)
        XCTAssertTrue(second.stderr.contains("default"), second.stderr)
        let profiles = try sandbox.succeed(["server", "list", "--json"]).array()
        XCTAssertEqual(profiles.compactMap { $0["name"] as? String }, ["default", "idp"])
        XCTAssertEqual(try sandbox.succeed(["server", "show", "--profile", "idp", "--json"]).object()["dialect"] as? String, "oauth")
        // A profile that does not exist is 66 in every command (docs/cli.md; all of them: MissingProfileTests).
        XCTAssertEqual(try sandbox.keymgr(["server", "show", "--profile", "nope"]).status, 66)
        for arguments in [["sync", "--profile", "nope"], ["admin", "devices", "--user", "alice", "--profile", "nope"],
                          ["sign", "--journey", "SignIn", "--user", "alice", "--profile", "nope"]] {
            let outcome = try sandbox.keymgr(arguments)
            XCTAssertEqual(outcome.status, 66, outcome.summary)
            XCTAssertTrue(outcome.stderr.contains("no server profile nope"), outcome.stderr)
        }
        let oauthSync = try sandbox.keymgr(["sync", "--profile", "idp"])
        XCTAssertEqual(oauthSync.status, 0, oauthSync.summary)
        XCTAssertTrue(oauthSync.stderr.contains("no device registry"), oauthSync.stderr)
        // A client registered at the named profile is that profile's.
        try sandbox.succeed(["dcr", "register", "--profile", "idp", "--user", "alice", "--software-id", "keymgr-template"])
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--profile", "idp", "--user", "alice"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 66)

        // Removing: a profile that does not exist is 66; without a terminal nothing is asked.
        XCTAssertEqual(try sandbox.keymgr(["server", "remove", "--profile", "nope"]).status, 66)
        let removed = try sandbox.succeed(["server", "remove", "--profile", "idp", "--json"]).object()
        XCTAssertEqual(removed["registrations"] as? Int, 1)
        XCTAssertEqual(try sandbox.succeed(["server", "list", "--json"]).array().count, 1)
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "server.removed", "--json"]).array().count, 1)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    // MARK: export

    func testExportPrintsThePublicKeyThatVerifiesASignature() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let bound = try sandbox.bind("alice")
        let jws = try sandbox.succeed(["sign", "--user", "alice", "--challenge", "c-42"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let jwk = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(try sandbox.succeed(["export", "--user", "alice"]).stdout.utf8)) as? [String: Any])
        XCTAssertEqual(jwk["kid"] as? String, bound["kid"] as? String)
        XCTAssertEqual(jwk["kty"] as? String, "EC")
        XCTAssertEqual(jwk["crv"] as? String, "P-256")
        XCTAssertNil(jwk["d"], "never the private key")

        let pem = try sandbox.succeed(["export", "--kid", String((bound["kid"] as? String ?? "").prefix(8)), "--format", "pem"]).stdout
        XCTAssertTrue(pem.hasPrefix("-----BEGIN PUBLIC KEY-----\n"), pem)
        XCTAssertFalse(pem.contains("PRIVATE"), pem)
        let pemFile = sandbox.root.appendingPathComponent("alice.pem")
        try pem.write(to: pemFile, atomically: true, encoding: .utf8)
        let verified = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", Self.verifier, jws, pemFile.path])
        XCTAssertEqual(verified.status, 0, verified.summary)
        XCTAssertTrue(verified.stdout.contains("Verified OK"), verified.stdout)

        // Another key's signature does not verify under it (the check can fail).
        let other = try sandbox.bind("bob")
        XCTAssertNotEqual(other["kid"] as? String, bound["kid"] as? String)
        let bobs = try sandbox.succeed(["sign", "--user", "bob", "--challenge", "c-42"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertNotEqual(try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", Self.verifier, bobs, pemFile.path]).status, 0)

        XCTAssertEqual(try sandbox.keymgr(["export", "--user", "nobody"]).status, 66)
        XCTAssertEqual(try sandbox.keymgr(["export", "--user", "alice", "--format", "der"]).status, 64)
    }

    /// Checks a compact ES256 JWS against a PEM public key with `openssl dgst -verify` (the JWS signature is r || s;
    /// OpenSSL wants DER).
    static let verifier = #"""
        import base64, subprocess, sys, tempfile, os
        jws, pem = sys.argv[1], sys.argv[2]
        header, payload, signature = jws.split(".")
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        def integer(b):
            b = b.lstrip(b"\x00") or b"\x00"
            if b[0] & 0x80: b = b"\x00" + b
            return b"\x02" + bytes([len(b)]) + b
        body = integer(raw[:32]) + integer(raw[32:])
        der = b"\x30" + bytes([len(body)]) + body
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "sig"), "wb").write(der)
            open(os.path.join(d, "data"), "wb").write((header + "." + payload).encode())
            result = subprocess.run(["openssl", "dgst", "-sha256", "-verify", pem, "-signature",
                                     os.path.join(d, "sig"), os.path.join(d, "data")], capture_output=True, text=True)
        sys.stdout.write(result.stdout + result.stderr)
        sys.exit(result.returncode)
        """#

    // MARK: confirmations

    func testNothingIsAskedBeforeTheTargetIsKnownAndNoIsDeclined() throws {
        try start(users: [])
        try sandbox.bind("dave")
        // No such user, key, profile, registration or tokens: 66 at once, no question on the terminal.
        for arguments in [["revoke", "--user", "nosuchuser"], ["revoke", "--kid", "nosuchkid-123"],
                          ["server", "remove", "--profile", "nope"], ["dcr", "delete", "--user", "dave"],
                          ["token", "revoke", "--user", "dave"]] {
            let outcome = try sandbox.onTerminal(arguments, answers: [])
            XCTAssertEqual(outcome.status, 66, outcome.summary)
            XCTAssertFalse(outcome.stdout.contains("[y/N]"), "asked before the target was known: \(outcome.stdout)")
        }
        XCTAssertEqual(try sandbox.keymgr(["revoke", "--user", "nosuchuser"]).status, 66)

        // "No" has its own status (1, code declined), not 77; nothing changed.
        let declined = try sandbox.onTerminal(["server", "remove", "--profile", "default"], answers: [("[y/N] ", "n")])
        XCTAssertEqual(declined.status, 1, declined.summary)
        XCTAssertTrue(declined.stdout.contains("declined"), declined.stdout)
        XCTAssertEqual(try sandbox.succeed(["server", "list", "--json"]).array().count, 1)
        let json = try sandbox.onTerminal(["revoke", "--user", "dave", "--json"], answers: [("[y/N] ", "no")])
        XCTAssertEqual(json.status, 1, json.summary)
        XCTAssertTrue(json.stdout.contains(#""code":"declined""#), json.stdout)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 1)
        let help = try sandbox.succeed(["--help"]).stdout
        XCTAssertTrue(help.contains("declined"), "the exit codes in the help name it")
    }

    func testTokenRevokeAndDcrDeleteAskOnATerminal() throws {
        try startOAuth()
        try registerClient("alice")
        let declined = try sandbox.onTerminal(["dcr", "delete", "--user", "alice"], answers: [("[y/N] ", "n")])
        XCTAssertEqual(declined.status, 1, declined.summary)
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 0, "still registered")
        let deleted = try sandbox.onTerminal(["dcr", "delete", "--user", "alice"], answers: [("[y/N] ", "y")])
        XCTAssertEqual(deleted.status, 0, deleted.summary)
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 66)
    }

    // MARK: PINs, sign, sync

    func testPinStdinTypedOnATerminalIsAskedWithoutEcho() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let bound = try sandbox.onTerminal(["bind", "--user", "carol", "--auth-type", "app-pin", "--pin-stdin"], answers: [
            ("New PIN for carol: ", "482916"), ("Repeat the new PIN: ", "482916"),
        ])
        XCTAssertEqual(bound.status, 0, bound.summary)
        XCTAssertFalse(bound.stdout.contains("482916"), "the PIN was echoed: \(bound.stdout)")
        let signed = try sandbox.onTerminal(["sign", "--user", "carol", "--challenge", "c", "--pin-stdin"], answers: [
            ("PIN for carol: ", "482916"),
        ])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertFalse(signed.stdout.contains("482916"), "the PIN was echoed: \(signed.stdout)")
        // From a pipe, --pin-stdin reads the first line as before.
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--challenge", "c"], stdin: "482916\n").status, 0)
    }

    func testSignSaysItMadeUpTheChallengeAndSyncNamesUnregisteredKeysAndItsWrites() throws {
        try start(users: ["alice", "bob", "carol"])
        let local = try XCTUnwrap(try sandbox.bind("carol")["kid"] as? String)
        let signed = try sandbox.succeed(["sign", "--user", "carol"])
        XCTAssertTrue(signed.stderr.contains("random challenge"), signed.stderr)
        XCTAssertFalse(try sandbox.succeed(["sign", "--user", "carol", "--challenge", "c"]).stderr.contains("random challenge"))

        let kids = try registerSettled(["alice", "bob"])
        let report = try sync()
        XCTAssertEqual(report["unregistered"] as? [String], [local], "\(report)")
        let text = try sandbox.succeed(["sync"]).stdout
        XCTAssertTrue(text.contains("1 keys bound here are not registered") && text.contains(String(local.prefix(8))), text)

        // The server drops alice's binding: the run's writes are said by kind and add up.
        try server.deleteBinding(user: "alice", uuid: try XCTUnwrap(kids["alice"]))
        let revoked = try sync()
        let byKind = try XCTUnwrap(revoked["writesByKind"] as? [String: Int], "\(revoked)")
        XCTAssertEqual(byKind["revoked"], 2, "the key row and its audit entry")
        XCTAssertEqual(byKind.values.reduce(0, +), revoked["writes"] as? Int)
        XCTAssertEqual(try sync()["writes"] as? Int, 0)
        try server.deleteBinding(user: "bob", uuid: try XCTUnwrap(kids["bob"]))
        let summary = try sandbox.succeed(["sync"]).stdout
        XCTAssertTrue(summary.contains("writes (2 for revocations"), summary)
    }

    // MARK: small things

    func testTimeoutDefaultShownOnceMasterRotateProcedureDocumentedAndOneOAuthLockFile() throws {
        try startOAuth()
        let help = try sandbox.succeed(["sync", "--help"]).stdout
        let timeout = try XCTUnwrap(help.range(of: "--timeout <s>"))
        let next = try XCTUnwrap(help.range(of: "\n  --", range: timeout.upperBound..<help.endIndex))
        let timeoutHelp = help[timeout.upperBound..<next.lowerBound]
        XCTAssertEqual(timeoutHelp.components(separatedBy: "default").count - 1, 1, "the default once: \(timeoutHelp)")
        XCTAssertTrue(timeoutHelp.contains("15"), String(timeoutHelp))

        // Two users' refreshes share one lock file.
        for user in ["alice", "bob"] {
            try registerClient(user)
            XCTAssertEqual(try login(user).status, 0)
            try sandbox.succeed(["token", "refresh", "--user", user])
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: sandbox.home.path)
        XCTAssertTrue(files.contains("oauth.lock"), "\(files)")
        XCTAssertEqual(files.filter { $0.hasPrefix("oauth-refresh-") }, [], "no lock file per user")

        // Under a systemd credential, rotate names a procedure the docs have.
        let credentials = sandbox.root.appendingPathComponent("credentials")
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: sandbox.home.appendingPathComponent("master.key"),
                                         to: credentials.appendingPathComponent("keymgr.master"))
        let rotate = try sandbox.keymgr(["master", "rotate", "--yes"], extraEnvironment: ["CREDENTIALS_DIRECTORY": credentials.path])
        XCTAssertEqual(rotate.status, 78, rotate.summary)
        let heading = "Rotating a master key held by systemd"
        XCTAssertTrue(rotate.stderr.contains("docs/operations.md") && rotate.stderr.contains(heading), rotate.stderr)
        let asked = try sandbox.onTerminal(["master", "rotate"], answers: [],
                                           extraEnvironment: ["CREDENTIALS_DIRECTORY": credentials.path])
        XCTAssertEqual(asked.status, 78, asked.summary)
        XCTAssertFalse(asked.stdout.contains("[y/N]"), "asked about a rotation that cannot happen: \(asked.stdout)")
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/operations.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        XCTAssertTrue(text.contains("## " + heading) && text.contains("systemd-creds decrypt")
                      && text.contains("KEYMGR_MASTER_KEY_FILE"), "docs/operations.md has the procedure")
    }
}
