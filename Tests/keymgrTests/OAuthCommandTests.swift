import Foundation
import XCTest

/// The OAuth half's helpers, shared by `OAuthCommandTests` and `OAuthFaultSuiteTests`.
extension ServerTestCase {
    /// A sandbox, a reference server started with `serverArguments`, and an `oauth` profile found by discovery.
    func startOAuth(serverArguments: [String] = [], binding: String = "--bound") throws {
        sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        server = try RefServerProcess(in: sandbox, users: [], extra: serverArguments)
        let issuer = server.baseURL.absoluteString
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--base-url", issuer, "--issuer", issuer, binding])
    }

    /// `GET /__refserver/oauth/<path>`'s `result` array.
    func adminList(_ path: String, file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        let answer = try server.request("GET", "/__refserver/oauth/" + path, file: file, line: line)
        XCTAssertEqual(answer.status, 200, file: file, line: line)
        return try XCTUnwrap((answer.json as? [String: Any])?["result"] as? [[String: Any]], file: file, line: line)
    }

    func setFault(_ endpoint: String, _ fault: [String: Any], file: StaticString = #filePath, line: UInt = #line) throws {
        let answer = try server.request("PUT", "/__refserver/oauth/faults/" + endpoint, body: fault, file: file, line: line)
        XCTAssertTrue((200..<300).contains(answer.status), "fault \(fault): \(answer)", file: file, line: line)
    }

    @discardableResult
    func registerClient(_ user: String, _ extra: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let outcome = try sandbox.keymgr(["dcr", "register", "--user", user, "--software-id", "keymgr-template", "--json"] + extra)
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return try outcome.object(file: file, line: line)
    }

    /// `keymgr login` in the background, approved at the server as a person would at the verification page.
    func login(_ user: String, file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        let running = try RunningKeymgr(sandbox, ["login", "--user", user, "--json"])
        let deadline = Date().addingTimeInterval(30)
        var userCode: String?
        while userCode == nil, Date() < deadline, running.process.isRunning {
            userCode = try adminList("device", file: file, line: line).first { ($0["status"] as? String) == "pending" }?["user_code"] as? String
            if userCode == nil { usleep(50_000) }
        }
        if let userCode {
            let approved = try server.request("POST", "/__refserver/oauth/device/approve", body: ["user_code": userCode, "subject": user],
                                              file: file, line: line)
            XCTAssertEqual(approved.status, 200, "\(approved)", file: file, line: line)
        }
        let (outcome, _) = try running.finish(timeout: 60, file: file, line: line)
        XCTAssertTrue(outcome.stderr.contains(userCode ?? "no user code"), "the user code is shown: \(outcome.stderr)", file: file, line: line)
        return outcome
    }

    func tokens(_ user: String, reveal: Bool = false, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let outcome = try sandbox.keymgr(["token", "show", "--user", user, "--json"] + (reveal ? ["--reveal"] : []))
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return try outcome.object(file: file, line: line)
    }
}

/// keymgr's OAuth half (dcr, token, dpop, login, sync rule 5) as processes against the reference server's
/// authorization server over loopback.
final class OAuthCommandTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// Every byte of the database and its WAL and shared-memory files.
    func storeBytes() throws -> Data {
        var data = Data()
        for suffix in ["", "-wal", "-shm"] {
            let path = sandbox.database.path + suffix
            if FileManager.default.fileExists(atPath: path) { data += try Data(contentsOf: URL(fileURLWithPath: path)) }
        }
        return data
    }

    func assertNotInStore(_ secrets: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        let bytes = try storeBytes()
        let audit = try sandbox.succeed(["audit", "--json"]).stdout
        for secret in secrets where !secret.isEmpty {
            XCTAssertNil(bytes.range(of: Data(secret.utf8)), "a token string is readable in the store files", file: file, line: line)
            XCTAssertFalse(audit.contains(secret), "a token string is in the audit log", file: file, line: line)
        }
    }

    func testDiscoveryFallsBackToOpenIDAndExplicitEndpointsWin() throws {
        sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        server = try RefServerProcess(in: sandbox, users: [], extra: ["--oauth-openid-discovery-only",
                                                                      "--oauth-issuer-path", "/oauth/v2/oauth-anonymous"])
        var base = server.baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let issuer = base + "/oauth/v2/oauth-anonymous"
        let saved = try sandbox.succeed(["server", "set", "--dialect", "oauth", "--base-url", base, "--issuer", issuer,
                                         "--token-endpoint", "https://tokens.example.com/token", "--json"]).object()
        XCTAssertEqual(saved["tokenEndpoint"] as? String, "https://tokens.example.com/token", "an explicit endpoint wins")
        XCTAssertEqual(saved["registrationEndpoint"] as? String, base + "/oauth/v2/oauth-dynamic-client-registration")
        XCTAssertEqual(saved["revocationEndpoint"] as? String, base + "/oauth/v2/oauth-revoke")
        XCTAssertEqual(saved["deviceAuthorizationEndpoint"] as? String, base + "/oauth/v2/oauth-device-authorization")
        let wrong = try sandbox.keymgr(["server", "set", "--dialect", "oauth", "--base-url", base, "--issuer", base + "/nowhere", "--json"])
        XCTAssertNotEqual(wrong.status, 0, wrong.summary)
        XCTAssertEqual(try sandbox.succeed(["server", "show", "--json"]).object()["tokenEndpoint"] as? String,
                       "https://tokens.example.com/token", "a failed discovery leaves the profile as it was")
    }

    func testOAuthCommandHelpFits80ColumnsWithAnExample() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        for command in [["dcr", "register"], ["dcr", "show"], ["dcr", "delete"], ["token", "import"], ["token", "show"],
                        ["token", "refresh"], ["token", "revoke"], ["token", "print"], ["dpop", "proof"], ["login"]] {
            let help = try sandbox.run(Sandbox.binary, command + ["--help"], extraEnvironment: ["COLUMNS": "80"])
            XCTAssertEqual(help.status, 0, help.summary)
            for line in help.stdout.split(separator: "\n") {
                XCTAssertLessThanOrEqual(line.count, 80, "`keymgr \(command.joined(separator: " ")) --help`: \(line)")
            }
            XCTAssertTrue(help.stdout.contains("Example"), "`keymgr \(command.joined(separator: " ")) --help` has no example")
        }
    }

    // MARK: registrations

    func testRegistrationFieldsRoundTripWithSecretsOnlyUnderReveal() throws {
        let sandboxRoot = try Sandbox(cli: .inProcess)
        let iatFile = sandboxRoot.root.appendingPathComponent("iat")
        try Data("initial-\(UUID().uuidString)\n".utf8).write(to: iatFile)
        try startOAuth(serverArguments: ["--oauth-initial-access-token-file", iatFile.path])

        let refused = try sandbox.keymgr(["dcr", "register", "--user", "alice", "--software-id", "keymgr-template", "--json"])
        XCTAssertEqual(refused.status, 77, "no initial access token: refused: \(refused.summary)")

        let shown = try registerClient("alice", ["--initial-access-token-file", iatFile.path])
        let client = try XCTUnwrap(try adminList("clients").first)
        XCTAssertEqual(shown["clientId"] as? String, client["client_id"] as? String)
        XCTAssertEqual(shown["userId"] as? String, "alice")
        XCTAssertEqual(shown["tokenEndpointAuthMethod"] as? String, "client_secret_basic")
        XCTAssertEqual(Set(shown["grantTypes"] as? [String] ?? []),
                       ["refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])
        XCTAssertEqual(shown["scope"] as? String, "openid read")
        XCTAssertEqual(shown["softwareId"] as? String, "keymgr-template")
        XCTAssertTrue(shown["clientSecret"] is NSNull, "no secret without --reveal")
        XCTAssertNil(shown["registrationAccessToken"])
        assertTimestamp(shown["clientIdIssuedAt"], "clientIdIssuedAt")
        XCTAssertTrue((shown["registrationClientUri"] as? String)?.hasPrefix(server.baseURL.absoluteString) == true)
        let metadata = try XCTUnwrap(shown["metadata"] as? [String: Any])
        XCTAssertEqual(metadata["device_name"] as? String, "test kiosk", "the device context went along and came back")
        XCTAssertEqual(metadata["os_name"] as? String, "linux")
        XCTAssertNotNil(metadata["registration_access_token_expires_in"], "unknown response members are kept")
        XCTAssertNil(metadata["client_secret"])

        let revealed = try sandbox.succeed(["dcr", "show", "--user", "alice", "--json", "--reveal"]).object()
        let secret = try XCTUnwrap(revealed["clientSecret"] as? String)
        let registrationToken = try XCTUnwrap(revealed["registrationAccessToken"] as? String)
        try assertNotInStore([secret, registrationToken, try String(contentsOf: iatFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)])

        // A server that answers 200 and gives the auth method as an array (both seen in the wild).
        try setFault("registration", ["fault": "registration200"])
        try setFault("registration", ["fault": "authMethodAsArray"])
        let bob = try registerClient("bob", ["--initial-access-token-file", iatFile.path])
        XCTAssertEqual(bob["tokenEndpointAuthMethod"] as? String, "client_secret_basic")

        let again = try sandbox.keymgr(["dcr", "register", "--user", "alice", "--software-id", "keymgr-template", "--json",
                                        "--initial-access-token-file", iatFile.path])
        XCTAssertEqual(again.status, 64, "a second registration is refused: \(again.summary)")
    }

    func testRotationOnReadIsStoredAndAServerDeletedClientIsWipedBySync() throws {
        try startOAuth()
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        let before = try sandbox.succeed(["dcr", "show", "--user", "alice", "--json", "--reveal"]).object()

        let sync = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(sync.status, 0, sync.summary)
        XCTAssertEqual(try sync.object()["registrationsWiped"] as? [String], [])
        let after = try sandbox.succeed(["dcr", "show", "--user", "alice", "--json", "--reveal"]).object()
        XCTAssertNotEqual(after["clientSecret"] as? String, before["clientSecret"] as? String, "the rotated secret is stored")
        XCTAssertNotEqual(after["registrationAccessToken"] as? String, before["registrationAccessToken"] as? String)
        XCTAssertEqual(after["clientId"] as? String, clientId)
        // The stored pair is the live one: a second read with it succeeds (a stale token would get 401 and a wipe).
        XCTAssertEqual(try sandbox.succeed(["sync", "--json"]).object()["registrationsWiped"] as? [String], [])
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 0)

        let deleted = try server.request("DELETE", "/__refserver/oauth/clients/" + clientId)
        XCTAssertTrue((200..<300).contains(deleted.status), "\(deleted)")
        let wiped = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(wiped.status, 0, wiped.summary)
        XCTAssertEqual(try wiped.object()["registrationsWiped"] as? [String], ["alice"])
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice", "--json"]).status, 66)
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice", "--json"]).status, 66)
        let audit = try sandbox.succeed(["audit", "--json"]).array()
        XCTAssertTrue(audit.contains { ($0["event"] as? String) == "dcr.revokedByServer" && ($0["userId"] as? String) == "alice" })
        try assertNotInStore([after["clientSecret"] as? String ?? "", after["registrationAccessToken"] as? String ?? ""])
    }

    // MARK: tokens

    func testTwoProcessesRefreshingAtOnceSpendTheRefreshTokenOnce() throws {
        try startOAuth()
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let old = try XCTUnwrap(try tokens("alice", reveal: true)["refreshToken"] as? String)
        // The server takes a moment over the refresh, so the two processes overlap for sure.
        try setFault("token", ["fault": "delay", "seconds": 1.0, "count": 1])
        let first = try RunningKeymgr(sandbox, ["token", "print", "--user", "alice", "--min-ttl", "100000"])
        let second = try RunningKeymgr(sandbox, ["token", "print", "--user", "alice", "--min-ttl", "100000"])
        let (a, _) = try first.finish()
        let (b, _) = try second.finish()
        XCTAssertEqual(a.status, 0, a.summary)
        XCTAssertEqual(b.status, 0, b.summary)
        XCTAssertEqual(a.stdout, b.stdout, "both processes end with the same, new access token")

        let serverTokens = try adminList("tokens")
        let spent = try XCTUnwrap(serverTokens.first { ($0["token"] as? String) == old })
        XCTAssertEqual(spent["presentations"] as? Int, 1, "the old refresh token was presented once")
        XCTAssertEqual(serverTokens.filter { ($0["kind"] as? String) == "refresh" }.count, 2, "one login, one refresh")
        let stored = try tokens("alice", reveal: true)
        let fresh = try XCTUnwrap(serverTokens.first { ($0["kind"] as? String) == "refresh" && ($0["status"] as? String) == "active" })
        XCTAssertEqual(stored["refreshToken"] as? String, fresh["token"] as? String, "the rotated refresh token was stored")
        XCTAssertEqual(stored["accessToken"] as? String, a.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    func testNoTokenRemainsInTheStoreAfterRefreshRevokeAndInvalidGrant() throws {
        try startOAuth()
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        var seen: [String] = []
        func collect() throws {
            let revealed = try tokens("alice", reveal: true)
            seen += ["accessToken", "refreshToken"].compactMap { revealed[$0] as? String }
        }
        try collect()
        // A copy of the store as it is now, holding the refresh token the next refresh spends.
        let copy = sandbox.root.appendingPathComponent("home-copy")
        try FileManager.default.copyItem(at: sandbox.home, to: copy)

        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice", "--json"]).status, 0)
        try collect()
        try assertNotInStore(seen)

        XCTAssertEqual(try sandbox.keymgr(["token", "revoke", "--user", "alice"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice", "--json"]).status, 66, "tokens gone")
        let proof = try sandbox.keymgr(["dpop", "proof", "--user", "alice", "--htm", "GET", "--htu", "https://rs.example.com/"])
        XCTAssertEqual(proof.status, 66, "the DPoP key went with the tokens: \(proof.summary)")
        XCTAssertTrue(try adminList("tokens").allSatisfy { ($0["status"] as? String) != "active" }, "revoked at the server")
        try assertNotInStore(seen)

        // The copy still holds the refresh token the server killed at the refresh: invalid_grant.
        try FileManager.default.removeItem(at: sandbox.home)
        try FileManager.default.moveItem(at: copy, to: sandbox.home)
        let dead = try sandbox.keymgr(["token", "refresh", "--user", "alice", "--json"])
        XCTAssertEqual(dead.status, 77, dead.summary)
        XCTAssertTrue(dead.stdout.contains("login"), "says to log in again: \(dead.stdout)")
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice", "--json"]).status, 66, "tokens discarded")
        XCTAssertEqual(try sandbox.keymgr(["dpop", "proof", "--user", "alice", "--htm", "GET", "--htu", "https://rs.example.com/"]).status, 66)
        try assertNotInStore(seen)
    }

    func testARefreshAnsweredWithAnEmptyBody400DiscardsTheTokens() throws {
        try startOAuth(binding: "--unbound")
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let copy = sandbox.root.appendingPathComponent("home-copy")
        try FileManager.default.copyItem(at: sandbox.home, to: copy)
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
        try FileManager.default.removeItem(at: sandbox.home)
        try FileManager.default.moveItem(at: copy, to: sandbox.home)
        try setFault("token", ["fault": "emptyBodyOnInvalidGrant"])
        let dead = try sandbox.keymgr(["token", "print", "--user", "alice", "--min-ttl", "100000"])
        XCTAssertEqual(dead.status, 77, dead.summary)
        XCTAssertTrue(dead.stderr.contains("keymgr login --user alice"), dead.stderr)
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice"]).status, 66)
    }

    func testARevokedClientAtTheTokenEndpointSaysToRegisterAgain() throws {
        try startOAuth(binding: "--unbound")
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        XCTAssertEqual(try login("alice").status, 0)
        let revoked = try server.request("POST", "/__refserver/oauth/clients/\(clientId)/revoke")
        XCTAssertEqual(revoked.status, 200, "\(revoked)")
        let refresh = try sandbox.keymgr(["token", "refresh", "--user", "alice"], timeout: 60)
        XCTAssertEqual(refresh.status, 77, refresh.summary)
        XCTAssertTrue(refresh.stderr.contains("dcr register"), refresh.stderr)
    }

    func testImportedTokensAreStoredUnboundAndRefresh() throws {
        try startOAuth(binding: "--unbound")
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        let minted = try server.request("POST", "/__refserver/oauth/tokens", body: ["client_id": clientId, "subject": "alice"])
        XCTAssertTrue((200..<300).contains(minted.status), "\(minted)")
        let response = try JSONSerialization.data(withJSONObject: try XCTUnwrap(minted.json))
        let imported = try sandbox.keymgr(["token", "import", "--user", "alice", "--json"], stdin: String(decoding: response, as: UTF8.self))
        XCTAssertEqual(imported.status, 0, imported.summary)
        XCTAssertEqual(try imported.object()["bound"] as? Bool, false)
        XCTAssertTrue(try imported.object()["accessToken"] is NSNull, "no token on the screen without --reveal")
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
        let garbage = try sandbox.keymgr(["token", "import", "--user", "alice", "--json"], stdin: #"{"token_type":"Bearer"}"#)
        try assertJSONError(garbage, status: 65, code: "badInput")
    }

    func testALoginDeniedAtTheVerificationPageStoresNothing() throws {
        try startOAuth()
        try registerClient("alice")
        let running = try RunningKeymgr(sandbox, ["login", "--user", "alice", "--json"])
        var userCode: String?
        let deadline = Date().addingTimeInterval(30)
        while userCode == nil, Date() < deadline {
            userCode = try adminList("device").first { ($0["status"] as? String) == "pending" }?["user_code"] as? String
            if userCode == nil { usleep(50_000) }
        }
        let denied = try server.request("POST", "/__refserver/oauth/device/deny", body: ["user_code": try XCTUnwrap(userCode)])
        XCTAssertEqual(denied.status, 200, "\(denied)")
        let (outcome, _) = try running.finish()
        XCTAssertEqual(outcome.status, 77, outcome.summary)
        XCTAssertEqual((try outcome.object()["error"] as? [String: Any])?["code"] as? String, "unAuthorize")
        XCTAssertTrue(outcome.stderr.contains("denied"), outcome.stderr)
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice"]).status, 66)
    }

    // MARK: DPoP

    func testDPoPProofsVerifyIndependentlyWithServerNonces() throws {
        try startOAuth(serverArguments: ["--oauth-token-bound", "--oauth-dpop-nonce"])
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0, "the login followed the server's use_dpop_nonce")
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0, "so did the refresh")
        let shown = try tokens("alice")
        let jkt = try XCTUnwrap(shown["jkt"] as? String)
        XCTAssertEqual(shown["tokenType"] as? String, "DPoP")
        let serverJkts = Set(try adminList("tokens").compactMap { $0["jkt"] as? String })
        XCTAssertEqual(serverJkts, [jkt], "every token the server issued is bound to keymgr's DPoP key")

        let accessToken = try sandbox.succeed(["token", "print", "--user", "alice"]).stdout
        let tokenFile = sandbox.root.appendingPathComponent("at")
        try Data(accessToken.utf8).write(to: tokenFile)
        let htu = "https://rs.example.com/api/orders?page=2#top"
        let proof = try sandbox.succeed(["dpop", "proof", "--user", "alice", "--htm", "GET", "--htu", htu, "--nonce", "n-42",
                                         "--access-token-stdin"], stdin: accessToken).stdout
        let tool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("tools/verify_dpop.py")
        let verified = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            tool.path, "--htm", "GET", "--htu", htu, "--nonce", "n-42", "--access-token-file", tokenFile.path, "--jkt", jkt,
            proof.trimmingCharacters(in: .whitespacesAndNewlines),
        ])
        XCTAssertEqual(verified.status, 0, verified.summary)
        let claims = try XCTUnwrap(try verified.object()["claims"] as? [String: Any])
        XCTAssertEqual(claims["htu"] as? String, "https://rs.example.com/api/orders", "no query or fragment")

        // The same checker refuses a proof for another method (it can fail).
        let wrong = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            tool.path, "--htm", "POST", "--htu", htu, "--nonce", "n-42", "--access-token-file", tokenFile.path, "--jkt", jkt,
            proof.trimmingCharacters(in: .whitespacesAndNewlines),
        ])
        XCTAssertEqual(wrong.status, 1, wrong.summary)
        // Without an access token: no ath; without a nonce: no nonce.
        let bare = try sandbox.succeed(["dpop", "proof", "--user", "alice", "--htm", "POST", "--htu", "https://as.example.com/token"]).stdout
        let bareCheck = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            tool.path, "--htm", "POST", "--htu", "https://as.example.com/token", "--jkt", jkt, bare.trimmingCharacters(in: .whitespacesAndNewlines),
        ])
        XCTAssertEqual(bareCheck.status, 0, bareCheck.summary)
    }

    // MARK: the token binding matrix

    func testBindingMatrixServerBindsAndClientBound() throws {
        try startOAuth(serverArguments: ["--oauth-token-bound"], binding: "--bound")
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let shown = try tokens("alice")
        XCTAssertEqual(shown["bound"] as? Bool, true)
        XCTAssertEqual(shown["tokenType"] as? String, "DPoP")
        let refresh = try XCTUnwrap(try adminList("tokens").first { ($0["kind"] as? String) == "refresh" })
        XCTAssertEqual(refresh["jkt"] as? String, shown["jkt"] as? String, "the refresh token is bound to the DPoP key")
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
    }

    func testBindingMatrixServerBindsButClientUnboundIsExplained() throws {
        for status in [400, 403] {
            try startOAuth(serverArguments: ["--oauth-token-bound"], binding: "--unbound")
            try registerClient("alice")
            try setFault("token", ["fault": "dpopErrorStatus", "status": status])
            let outcome = try login("alice")
            XCTAssertEqual(outcome.status, 78, outcome.summary)
            XCTAssertTrue(outcome.stdout.contains("this server requires DPoP-bound tokens: set the profile to --bound"), outcome.stdout)
            XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice"]).status, 66, "nothing stored")
            server.stop()
        }
    }

    func testBindingMatrixServerDoesNotBindButClientBound() throws {
        try startOAuth(binding: "--bound")
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let shown = try tokens("alice")
        XCTAssertEqual(shown["bound"] as? Bool, true, "bound on the client's side anyway")
        XCTAssertEqual(shown["tokenType"] as? String, "DPoP")
        let jkts = try adminList("tokens").map { $0["jkt"] as? String }
        XCTAssertTrue(jkts.allSatisfy { $0 == shown["jkt"] as? String })
    }

    func testBindingMatrixNeitherBinds() throws {
        try startOAuth(binding: "--unbound")
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let shown = try tokens("alice")
        XCTAssertEqual(shown["bound"] as? Bool, false)
        XCTAssertEqual(shown["tokenType"] as? String, "Bearer")
        XCTAssertTrue(shown["jkt"] is NSNull)
        XCTAssertTrue(try adminList("tokens").allSatisfy { $0["jkt"] is NSNull })
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
        let printed = try sandbox.succeed(["token", "print", "--user", "alice"]).stdout
        XCTAssertFalse(printed.isEmpty)
    }
}
