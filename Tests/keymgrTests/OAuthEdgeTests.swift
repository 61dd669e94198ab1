import Foundation
import XCTest

/// Issue 35's findings against a real authorization server (Authlib), each against the reference server in a mode
/// that behaves as that server did: refreshes whose answer keymgr would refuse, refused tokens left live, a
/// registration that cannot log in, missing profiles, a deleted client's registration token, a wrong device clock.
final class OAuthEdgeTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// The server's token rows of `kind` (`access` or `refresh`).
    func serverTokens(_ kind: String, file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        try adminList("tokens", file: file, line: line).filter { $0["kind"] as? String == kind }
    }

    func statuses(_ rows: [[String: Any]]) -> [String] { rows.compactMap { $0["status"] as? String } }

    /// Bearer tokens under a profile that became `--bound`: the refresh is refused before it is sent, so the
    /// refresh token the server holds stays unspent (RFC 6749 §6 would otherwise retire it for an answer keymgr drops).
    func testABoundProfileHoldingBearerTokensSendsNoRefresh() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"], binding: "--unbound")
        try registerClient("bob")
        XCTAssertEqual(try login("bob").status, 0)
        XCTAssertEqual(try tokens("bob")["tokenType"] as? String, "Bearer")
        let issuer = server.baseURL.absoluteString
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--base-url", issuer, "--issuer", issuer, "--bound"])

        let refused = try sandbox.keymgr(["token", "refresh", "--user", "bob"])
        XCTAssertEqual(refused.status, 76, refused.summary)
        XCTAssertTrue(refused.stderr.contains("no refresh was sent"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("keymgr login --user bob"), refused.stderr)
        let refresh = try serverTokens("refresh")
        XCTAssertEqual(statuses(refresh), ["active"], "the refresh token was never spent")
        XCTAssertEqual(refresh.first?["presentations"] as? Int, 0, "no refresh request reached the server")
    }

    /// A rotated answer that keymgr refuses (the server switched DPoP off and answers a bound refresh with Bearer
    /// tokens): the new tokens are revoked at the server, the old ones discarded, and `token print` prints nothing.
    func testARefusedRefreshAnswerIsRevokedAndTheOldTokensAreDiscarded() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"])
        try registerClient("bob")
        XCTAssertEqual(try login("bob").status, 0)
        XCTAssertEqual(try tokens("bob")["tokenType"] as? String, "DPoP")
        try setFault("token", ["fault": "dpopSwitchedOff"])

        let refused = try sandbox.keymgr(["token", "refresh", "--user", "bob"])
        XCTAssertEqual(refused.status, 76, refused.summary)
        XCTAssertTrue(refused.stderr.contains("the server issued Bearer tokens"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("were revoked there"), refused.stderr)
        let access = try serverTokens("access")
        let refresh = try serverTokens("refresh")
        XCTAssertEqual(access.count, 2)
        XCTAssertEqual(refresh.count, 2)
        XCTAssertEqual(Set(statuses(refresh)), ["used", "revoked"], "the old one spent, the new one revoked")
        XCTAssertTrue(access.contains { $0["jkt"] is NSNull && $0["status"] as? String == "revoked" },
                      "the new Bearer access token was revoked: \(access)")

        let printed = try sandbox.keymgr(["token", "print", "--user", "bob", "--min-ttl", "0"])
        XCTAssertEqual(printed.status, 66, "the old tokens were discarded: \(printed.summary)")
        XCTAssertEqual(printed.stdout, "")
    }

    /// A `--bound` login answered with Bearer tokens (a server without DPoP): refused, and the tokens the spent
    /// device code brought are revoked at the server with the client's credentials.
    func testARefusedLoginsTokensAreRevokedAtTheServer() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"])
        try registerClient("bob")
        try setFault("token", ["fault": "dpopSwitchedOff"])
        let refused = try login("bob")
        XCTAssertEqual(refused.status, 76, refused.summary)
        XCTAssertTrue(refused.stderr.contains("the server issued Bearer tokens"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("the tokens the server issued were revoked there"), refused.stderr)
        let issued = try adminList("tokens")
        XCTAssertEqual(issued.count, 2, "an access and a refresh token: \(issued)")
        XCTAssertEqual(Set(statuses(issued)), ["revoked"])
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "bob"]).status, 66, "nothing stored")
    }

    /// A server that registers other grant types than keymgr needs (Authlib ignores `software_id` and registers its
    /// defaults; here templates grant too little): the registration succeeds, but says at once what `login` will
    /// lack, on stderr and in `--json`; one that grants both says nothing.
    func testARegistrationThatCannotLogInWarnsAtRegistration() throws {
        let templates = FileManager.default.temporaryDirectory.appendingPathComponent("templates-\(UUID().uuidString).json")
        try Data("""
            {"no-device": {"grant_types": ["refresh_token"], "token_endpoint_auth_method": "client_secret_basic"},
             "no-refresh": {"grant_types": ["urn:ietf:params:oauth:grant-type:device_code"],
                            "token_endpoint_auth_method": "client_secret_basic"},
             "both": {"grant_types": ["refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
                      "token_endpoint_auth_method": "client_secret_basic"}}
            """.utf8).write(to: templates)
        defer { try? FileManager.default.removeItem(at: templates) }
        try startOAuth(serverArguments: ["--oauth-templates", templates.path])

        let noDevice = try sandbox.keymgr(["dcr", "register", "--user", "alice", "--software-id", "no-device", "--json"])
        XCTAssertEqual(noDevice.status, 0, noDevice.summary)
        let warnings = try XCTUnwrap(try noDevice.object()["warnings"] as? [String], noDevice.summary)
        XCTAssertEqual(warnings.count, 1, "\(warnings)")
        XCTAssertTrue(warnings[0].contains("urn:ietf:params:oauth:grant-type:device_code"), warnings[0])
        XCTAssertTrue(warnings[0].contains("keymgr login --user alice"), warnings[0])
        XCTAssertTrue(noDevice.stderr.contains("keymgr: warning: the server registered client"), noDevice.stderr)

        let noRefresh = try sandbox.keymgr(["dcr", "register", "--user", "bob", "--software-id", "no-refresh"])
        XCTAssertEqual(noRefresh.status, 0, noRefresh.summary)
        XCTAssertTrue(noRefresh.stderr.contains("without refresh_token"), noRefresh.stderr)
        XCTAssertFalse(noRefresh.stderr.contains("without the device grant"), noRefresh.stderr)

        let both = try sandbox.keymgr(["dcr", "register", "--user", "carol", "--software-id", "both", "--json"])
        XCTAssertEqual(both.status, 0, both.summary)
        XCTAssertEqual(try both.object()["warnings"] as? [String], [])
        XCTAssertFalse(both.stderr.contains("warning"), both.stderr)
    }

    /// Authlib refuses a deleted client's registration access token with 400 `access_denied` (and some servers with
    /// 403): sync reports it once, with the way out, keeps the registration, and stops asking; `dcr forget` removes
    /// it without a request to the server.
    func testADeletedClientsRefusedRegistrationTokenIsReportedOnceWithAWayOut() throws {
        for status in ["400", "403"] {
            try startOAuth(serverArguments: ["--oauth-refused-registration-token-status", status], binding: "--unbound")
            let client = try registerClient("alice")
            let clientId = try XCTUnwrap(client["clientId"] as? String)
            XCTAssertEqual(try server.request("DELETE", "/__refserver/oauth/clients/" + clientId).status, 204)

            let first = try sandbox.keymgr(["sync", "--json"])
            XCTAssertNotEqual(first.status, 0, first.summary)
            let errors = try XCTUnwrap(try first.object()["errors"] as? [[String: Any]])
            XCTAssertEqual(errors.count, 1, "\(errors)")
            let message = errors.first?["message"] as? String ?? ""
            XCTAssertTrue(message.contains("HTTP \(status) access_denied"), message)
            XCTAssertTrue(message.contains("keymgr dcr forget --user alice"), message)
            XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 0, "an ambiguous answer wipes nothing")

            let requests = try server.recordedRequests().count
            let second = try sandbox.keymgr(["sync", "--json"])
            XCTAssertEqual(second.status, 0, "reported once: \(second.summary)")
            XCTAssertEqual(try second.object()["registrationsRefused"] as? [String], ["alice"])
            XCTAssertEqual(try server.recordedRequests().count, requests, "the refused token is not sent again")

            let deleted = try sandbox.keymgr(["dcr", "delete", "--user", "alice"])
            XCTAssertEqual(deleted.status, 77, deleted.summary)
            XCTAssertTrue(deleted.stderr.contains("keymgr dcr forget --user alice"), deleted.stderr)

            let before = try server.recordedRequests().count
            try sandbox.succeed(["dcr", "forget", "--user", "alice"])
            XCTAssertEqual(try server.recordedRequests().count, before, "forget asks the server nothing")
            XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 66)
            let audit = try sandbox.succeed(["audit", "--json"]).stdout
            XCTAssertTrue(audit.contains("dcr.forgotten"), audit)
            XCTAssertTrue(audit.contains("dcr.refusedByServer"), audit)
            server.stop()
        }
    }

    /// `dcr show --server` reads the registration through RFC 7592 and stores what Curity rotated on the read;
    /// plain `dcr show` prints the stored copy.
    func testDcrShowServerReadsTheRegistrationAndStoresRotatedCredentials() throws {
        try startOAuth()
        try registerClient("alice")
        let stored = try sandbox.succeed(["dcr", "show", "--user", "alice", "--reveal", "--json"]).object()
        let read = try sandbox.keymgr(["dcr", "show", "--user", "alice", "--server", "--reveal", "--json"])
        XCTAssertEqual(read.status, 0, read.summary)
        let fresh = try read.object()
        let atServer = try XCTUnwrap(try adminList("clients").first)
        XCTAssertNotEqual(fresh["registrationAccessToken"] as? String, stored["registrationAccessToken"] as? String, "rotated")
        XCTAssertEqual(fresh["registrationAccessToken"] as? String, atServer["registration_access_token"] as? String)
        XCTAssertEqual(fresh["clientSecret"] as? String, atServer["client_secret"] as? String)
        let again = try sandbox.succeed(["dcr", "show", "--user", "alice", "--reveal", "--json"]).object()
        XCTAssertEqual(again["registrationAccessToken"] as? String, atServer["registration_access_token"] as? String, "stored")
    }

    /// A device clock 10 minutes ahead of the server's (a kiosk after a power cut) and 10 minutes behind: keymgr
    /// learns the server's time from its answers' `Date` header, so the DPoP proofs' `iat` falls in the server's
    /// window, with its nonces too; the login and a refresh work, and `status` shows the skew.
    func testADeviceClockTenMinutesOffStillLogsInWithDPoP() throws {
        for offset in [-600, 600] {
            try startOAuth(serverArguments: ["--clock-offset=\(offset)", "--oauth-token-bound", "--oauth-dpop-nonce",
                                            "--oauth-device-interval", "1"])
            try registerClient("alice")
            let login = try login("alice")
            XCTAssertEqual(login.status, 0, "server \(offset) s from the device: \(login.summary)")
            XCTAssertEqual(try tokens("alice")["tokenType"] as? String, "DPoP")
            let refreshed = try sandbox.keymgr(["token", "refresh", "--user", "alice"])
            XCTAssertEqual(refreshed.status, 0, "a new process starts from the stored offset: \(refreshed.summary)")

            let status = try sandbox.succeed(["status", "--json"]).object()
            let skews = try XCTUnwrap(status["serverClockSkew"] as? [[String: Any]])
            XCTAssertEqual(skews.count, 1, "\(skews)")
            XCTAssertEqual(skews.first?["server"] as? String, "default")
            let seconds = try XCTUnwrap(skews.first?["seconds"] as? Int)
            XCTAssertLessThanOrEqual(abs(seconds - offset), 2, "the server is \(offset) s ahead: \(seconds)")
            let human = try sandbox.succeed(["status"]).stdout
            XCTAssertTrue(human.contains("clock skew") && human.contains(offset > 0 ? "behind" : "ahead of"), human)
            server.stop()
        }
    }

    /// No skew: `status` says nothing about clocks.
    func testStatusShowsNoSkewWhenTheClocksAgree() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"], binding: "--unbound")
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let skews = try sandbox.succeed(["status", "--json"]).object()["serverClockSkew"] as? [[String: Any]]
        XCTAssertEqual(skews?.count, 0, "\(String(describing: skews))")
    }

    /// Runs SQL on the store's file as an attacker with write access to it would.
    @discardableResult
    func attack(_ sql: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path, sql])
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A database writer flips bob's key's `server_state`. The first command to meet the row (`sign`) records the
    /// finding in the device row; from then on bob's tokens, DPoP proofs and revealed secrets are refused too (exit 1,
    /// tampered, naming the way out), alice's are not; once the row is restored and `audit verify` is clean, an
    /// administrator clears the finding, audited.
    func testAStoreFoundTamperedReleasesNoSecretOfThatUserUntilCleared() throws {
        try startOAuth(serverArguments: ["--oauth-device-interval", "1"])
        try sandbox.bind("bob")
        try sandbox.bind("alice")
        for user in ["bob", "alice"] {
            try registerClient(user)
            XCTAssertEqual(try login(user).status, 0)
        }
        let original = try attack("SELECT server_state FROM user_keys WHERE user_id = 'bob'")
        try attack("UPDATE user_keys SET server_state = '\(original == "registered" ? "unregistered" : "registered")' WHERE user_id = 'bob'")

        let found = try sandbox.keymgr(["sign", "--user", "bob", "--challenge", "c"])
        XCTAssertEqual(found.status, 1, found.summary)
        XCTAssertTrue(try sandbox.succeed(["audit", "--json"]).stdout.contains("store.tampered"))

        let refusals: [[String]] = [
            ["token", "print", "--user", "bob"],
            ["dpop", "proof", "--user", "bob", "--htm", "GET", "--htu", "https://api.example.com/orders"],
            ["token", "show", "--user", "bob", "--reveal"],
            ["dcr", "show", "--user", "bob", "--reveal"],
        ]
        for line in refusals {
            let refused = try sandbox.keymgr(line + ["--json"])
            XCTAssertEqual(refused.status, 1, refused.summary)
            XCTAssertTrue(refused.stdout.contains(#""code":"tampered""#), refused.summary)
            XCTAssertTrue(refused.stderr.contains("keymgr audit clear-tampering"), refused.stderr)
        }
        XCTAssertEqual(try sandbox.keymgr(["token", "print", "--user", "alice"]).status, 0, "alice's rows were not touched")

        let early = try sandbox.keymgr(["audit", "clear-tampering"])
        XCTAssertEqual(early.status, 1, "the store does not verify yet: \(early.summary)")
        try attack("UPDATE user_keys SET server_state = '\(original)' WHERE user_id = 'bob'")
        try sandbox.succeed(["audit", "verify"])
        let cleared = try sandbox.succeed(["audit", "clear-tampering", "--json"]).object()
        XCTAssertEqual(cleared["cleared"] as? Bool, true)
        XCTAssertEqual(cleared["userId"] as? String, "bob")
        XCTAssertTrue(try sandbox.succeed(["audit", "--json"]).stdout.contains("store.tamperingCleared"))
        XCTAssertEqual(try sandbox.keymgr(["token", "print", "--user", "bob"]).status, 0)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "bob", "--challenge", "c"]).status, 0)
    }
}
