import Foundation
import XCTest

/// The OAuth half of the fault suite (issue 15): `token refresh`, `token print`, `dcr register`, `login`, `server set
/// --issuer` (discovery) and `sync`'s rule 5 run as processes against the reference server's OAuth fault switches
/// (`/__refserver/oauth/faults/{endpoint}`): 5xx, connection resets, answers cut off halfway, timeouts, slow bodies,
/// malformed JSON, 10 MiB bodies, HTML where JSON belongs, and JSON that is no answer. For each, the error and exit
/// status a person or a script sees, and proof that the store is exactly as before: tokens, registrations (secrets
/// revealed and compared), keys and the audit log.
///
/// Faults that replace the answer leave the server untouched, so the stored credentials still work afterwards and
/// the tests show that too. Faults that let the server do the work and then lose the answer (a cut-off or slow body,
/// a delay past keymgr's timeout) spend a rotating refresh token at the server: the store is still unchanged, and the
/// next refresh says to log in again (`testAnAnswerLostAfterTheServerRotatedTheRefreshTokenAsksForANewLogin`).
final class OAuthFaultSuiteTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// One fault on one endpoint and what the command must answer.
    struct FaultCase {
        var fault: [String: Any]
        /// The exit status (for `sync`, the report's: see the rule 5 test).
        var status: Int32
        var code: String
        /// Words the message must contain, so a person knows what went wrong.
        var message: String
        var extraArguments: [String] = []
    }

    /// Faults that replace the answer (the server does nothing), as every OAuth endpoint shows them, and what any
    /// OAuth command must say. `garbage` is the endpoint's own kind of well-formed JSON that is no answer.
    static func outages(garbage: String) -> [FaultCase] {
        [
            FaultCase(fault: ["fault": "status500"], status: 69, code: "serverUnavailable", message: "500"),
            FaultCase(fault: ["fault": "status503", "retryAfter": 1], status: 69, code: "serverUnavailable", message: "503"),
            FaultCase(fault: ["fault": "connectionReset"], status: 69, code: "serverUnavailable", message: "failed"),
            FaultCase(fault: ["fault": "malformedJSON"], status: 65, code: "badInput", message: "not a JSON object"),
            FaultCase(fault: ["fault": "wrongContentType"], status: 65, code: "badInput", message: "not a JSON object"),
            FaultCase(fault: ["fault": "garbageTokenResponse"], status: 65, code: "badInput", message: garbage),
            // 10 MiB against keymgr's 4 MiB limit: refused before it is parsed (it would pass for an answer).
            FaultCase(fault: ["fault": "hugeBody"], status: 65, code: "badInput", message: "more than the 4194304 bytes allowed"),
        ]
    }

    /// Everything a fault must leave alone, secrets revealed so a changed token shows.
    struct StoreSnapshot: Equatable {
        var tokens: [String: String]
        var registrations: [String: String]
        var keys: String
        var audit: String
    }

    func snapshot(_ users: [String], file: StaticString = #filePath, line: UInt = #line) throws -> StoreSnapshot {
        var tokens: [String: String] = [:]
        var registrations: [String: String] = [:]
        for user in users {
            let token = try sandbox.keymgr(["token", "show", "--user", user, "--reveal", "--json"])
            tokens[user] = "\(token.status) \(token.stdout)"
            let registration = try sandbox.keymgr(["dcr", "show", "--user", user, "--reveal", "--json"])
            registrations[user] = "\(registration.status) \(registration.stdout)"
        }
        return StoreSnapshot(
            tokens: tokens, registrations: registrations,
            keys: try sandbox.succeed(["list", "--status", "all", "--json"], file: file, line: line).stdout,
            audit: try sandbox.succeed(["audit", "list", "--json"], file: file, line: line).stdout)
    }

    func clearFaults(file: StaticString = #filePath, line: UInt = #line) throws {
        let cleared = try server.request("DELETE", "/__refserver/oauth/faults", file: file, line: line)
        XCTAssertEqual(cleared.status, 204, file: file, line: line)
    }

    /// Arms `faultCase` on `endpoint` (for every request until cleared), runs `arguments` (`--json` added), checks
    /// the error, exit status and message, that no secret of the store shows, and that the store is still `before`
    /// (taken once per test: an unchanged store is the next case's starting point too).
    func check(_ faultCase: FaultCase, on endpoint: String, _ arguments: [String], users: [String], before: StoreSnapshot,
               file: StaticString = #filePath, line: UInt = #line) throws {
        try setFault(endpoint, faultCase.fault, file: file, line: line)
        let outcome = try sandbox.keymgr(arguments + ["--json"] + faultCase.extraArguments, timeout: 90)
        let ended = Date()
        try clearFaults(file: file, line: line)
        let what = "\(faultCase.fault) on \(endpoint): \(outcome.summary)"
        if faultCase.fault["fault"] as? String == "delay", faultCase.code == "timeout" {
            // keymgr's deadline, timed by the server's request journal rather than by a constant here: it gave up
            // before the server answered the request it held back (unanswered yet, or answered after keymgr ended).
            let held = try XCTUnwrap(try server.recordedRequests().last, what, file: file, line: line)
            if let answered = held["answered"] as? Double {
                XCTAssertGreaterThan(answered, ended.timeIntervalSince1970, "keymgr waited for the answer: \(what)",
                                     file: file, line: line)
            }
        }
        XCTAssertEqual(outcome.status, faultCase.status, what, file: file, line: line)
        let object = try outcome.object(file: file, line: line)
        XCTAssertEqual(Set(object.keys), ["error"], what, file: file, line: line)
        let error = object["error"] as? [String: Any] ?? [:]
        XCTAssertEqual(Set(error.keys), ["code", "message"], what, file: file, line: line)
        XCTAssertEqual(error["code"] as? String, faultCase.code, what, file: file, line: line)
        XCTAssertTrue((error["message"] as? String ?? "").localizedCaseInsensitiveContains(faultCase.message),
                      "the message should say \(faultCase.message): \(what)", file: file, line: line)
        // One line for people (after `login`'s instructions, when it got that far).
        XCTAssertTrue(outcome.stderr.hasPrefix("keymgr: ") || outcome.stderr.contains("\nkeymgr: "), what, file: file, line: line)
        XCTAssertEqual(try snapshot(users, file: file, line: line), before, "the store changed: \(what)", file: file, line: line)
        for secret in try revealedSecrets(of: before) {
            XCTAssertFalse(outcome.stdout.contains(secret) || outcome.stderr.contains(secret), "a secret shows: \(what)",
                           file: file, line: line)
        }
    }

    /// The token and registration secrets a snapshot holds.
    func revealedSecrets(of snapshot: StoreSnapshot) throws -> [String] {
        var secrets: [String] = []
        for text in Array(snapshot.tokens.values) + Array(snapshot.registrations.values) {
            guard let json = text.split(separator: " ", maxSplits: 1).last,
                  let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else { continue }
            for name in ["accessToken", "refreshToken", "clientSecret", "registrationAccessToken"] {
                if let secret = object[name] as? String, !secret.isEmpty { secrets.append(secret) }
            }
        }
        return secrets
    }

    /// Tokens for `user` without the device grant's polling: minted at the server, stored by `token import`.
    func importTokens(_ user: String, clientId: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let minted = try server.request("POST", "/__refserver/oauth/tokens", body: ["client_id": clientId, "subject": user],
                                        file: file, line: line)
        XCTAssertTrue((200..<300).contains(minted.status), "\(minted)", file: file, line: line)
        let response = try JSONSerialization.data(withJSONObject: try XCTUnwrap(minted.json, file: file, line: line))
        let imported = try sandbox.keymgr(["token", "import", "--user", user], stdin: String(decoding: response, as: UTF8.self))
        XCTAssertEqual(imported.status, 0, imported.summary, file: file, line: line)
    }

    // MARK: the token endpoint

    /// `token refresh` and `token print` against every outage of the token endpoint, with DPoP-bound tokens from a
    /// real device login; afterwards the stored refresh token still works (nothing was spent).
    func testTokenRefreshAndPrintAgainstTheTokenEndpointsOutages() throws {
        try startOAuth()
        try registerClient("alice")
        XCTAssertEqual(try login("alice").status, 0)
        let store = try snapshot(["alice"])
        for faultCase in Self.outages(garbage: "no access_token") {
            try check(faultCase, on: "token", ["token", "refresh", "--user", "alice"], users: ["alice"], before: store)
            try check(faultCase, on: "token", ["token", "print", "--user", "alice", "--min-ttl", "100000"], users: ["alice"],
                      before: store)
        }
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        let before = try tokens("alice", reveal: true)
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0, "the stored refresh token was never spent")
        XCTAssertNotEqual(try tokens("alice", reveal: true)["refreshToken"] as? String, before["refreshToken"] as? String)
    }

    /// The server rotates the refresh token, and the answer never arrives whole: cut off halfway, dribbled out past
    /// keymgr's timeout, or sent after it. Each time the store keeps what it had; the next refresh presents a token the
    /// server already replaced and is told to log in again, which is what keymgr says.
    func testAnAnswerLostAfterTheServerRotatedTheRefreshTokenAsksForANewLogin() throws {
        try startOAuth(binding: "--unbound")
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        try importTokens("alice", clientId: clientId)
        let lost = [
            FaultCase(fault: ["fault": "truncatedBody"], status: 69, code: "serverUnavailable", message: "failed"),
            FaultCase(fault: ["fault": "slowBody", "seconds": 3], status: 75, code: "timeout", message: "timed out",
                      extraArguments: ["--timeout", "1"]),
            FaultCase(fault: ["fault": "delay", "seconds": 2], status: 75, code: "timeout", message: "timed out",
                      extraArguments: ["--timeout", "1"]),
        ]
        let store = try snapshot(["alice"])
        for faultCase in lost {
            try check(faultCase, on: "token", ["token", "refresh", "--user", "alice"], users: ["alice"], before: store)
        }
        // The refresh token the store holds was spent by the first of them (the others presented it again).
        let next = try sandbox.keymgr(["token", "refresh", "--user", "alice", "--json"])
        try assertJSONError(next, status: 77, code: "unAuthorize")
        XCTAssertTrue(next.stderr.contains("keymgr login --user alice"), next.stderr)
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "alice"]).status, 0, "the registration stays")
    }

    // MARK: registration, login, discovery

    /// `dcr register` for alice while bob's registration exists: nothing stored for alice, bob's untouched.
    func testDcrRegisterAgainstTheRegistrationEndpointsFaults() throws {
        try startOAuth()
        try registerClient("bob")
        var cases = Self.outages(garbage: "has no client_id")
        cases.append(FaultCase(fault: ["fault": "truncatedBody"], status: 69, code: "serverUnavailable", message: "failed"))
        cases.append(FaultCase(fault: ["fault": "slowBody", "seconds": 3], status: 75, code: "timeout", message: "timed out",
                               extraArguments: ["--timeout", "1"]))
        let store = try snapshot(["alice", "bob"])
        for faultCase in cases {
            try check(faultCase, on: "registration",
                      ["dcr", "register", "--user", "alice", "--software-id", "keymgr-template"], users: ["alice", "bob"],
                      before: store)
        }
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        XCTAssertEqual(try registerClient("alice")["userId"] as? String, "alice", "registration works once the server behaves")
    }

    /// `login` with tokens already stored: a failing device authorization or token endpoint keeps the old tokens.
    func testLoginAgainstTheDeviceAuthorizationAndTokenEndpointsFaults() throws {
        try startOAuth(binding: "--unbound")
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        try importTokens("alice", clientId: clientId)
        var cases = Self.outages(garbage: "lacks device_code")
        cases.append(FaultCase(fault: ["fault": "delay", "seconds": 3], status: 75, code: "timeout", message: "timed out",
                               extraArguments: ["--timeout", "1"]))
        let store = try snapshot(["alice"])
        for faultCase in cases {
            try check(faultCase, on: "device_authorization", ["login", "--user", "alice"], users: ["alice"], before: store)
        }
        // The device authorization works; the first poll of the token endpoint (after the server's interval) gets
        // well-formed JSON that is no token response.
        try check(FaultCase(fault: ["fault": "garbageTokenResponse"], status: 65, code: "badInput", message: "no access_token"),
                  on: "token", ["login", "--user", "alice"], users: ["alice"], before: store)
    }

    /// `server set --issuer` when discovery fails: the profile is exactly as it was.
    func testDiscoveryFaultsLeaveTheProfileAsItWas() throws {
        try startOAuth()
        let issuer = server.baseURL.absoluteString
        let profile = try sandbox.succeed(["server", "show", "--json"]).stdout
        for faultCase in Self.outages(garbage: "names no issuer") {
            try setFault("discovery", faultCase.fault)
            let outcome = try sandbox.keymgr(["server", "set", "--dialect", "oauth", "--base-url", issuer, "--issuer", issuer,
                                              "--unbound", "--json"], timeout: 90)
            try assertJSONError(outcome, status: faultCase.status, code: faultCase.code)
            XCTAssertTrue(outcome.stdout.localizedCaseInsensitiveContains(faultCase.message), "\(faultCase.fault): \(outcome.summary)")
            try clearFaults()
            XCTAssertEqual(try sandbox.succeed(["server", "show", "--json"]).stdout, profile, "\(faultCase.fault)")
        }
    }

    // MARK: sync's rule 5

    /// Rule 5 reads each registration (RFC 7592 GET); a failing read is that user's error and wipes nothing.
    func testSyncRule5AgainstTheManagementEndpointsFaults() throws {
        try startOAuth(binding: "--unbound")
        for user in ["alice", "bob"] {
            let clientId = try XCTUnwrap(try registerClient(user)["clientId"] as? String)
            try importTokens(user, clientId: clientId)
        }
        var cases = Self.outages(garbage: "has no client_id")
        // Last: the delayed read rotates the credentials at the server after keymgr gave up (Curity rotates on every
        // read), so the registrations are not usable afterwards; the store still holds what it had.
        cases.append(FaultCase(fault: ["fault": "delay", "seconds": 2], status: 2, code: "timeout", message: "timed out",
                               extraArguments: ["--timeout", "1"]))
        var before = try snapshot(["alice", "bob"])
        for faultCase in cases {
            try setFault("management", faultCase.fault)
            let outcome = try sandbox.keymgr(["sync", "--json"] + faultCase.extraArguments, timeout: 90)
            try clearFaults()
            let what = "\(faultCase.fault): \(outcome.summary)"
            // docs/sync.md: 69 when no user at all could be reconciled because the server is failing (a timer's unit
            // fails), else 2 (retried next run).
            XCTAssertEqual(outcome.status, faultCase.code == "serverUnavailable" ? 69 : 2, what)
            let report = try outcome.object()
            XCTAssertEqual(report["registrationsWiped"] as? [String], [], what)
            let errors = try XCTUnwrap(report["errors"] as? [[String: Any]], what)
            XCTAssertEqual(Set(errors.compactMap { $0["userId"] as? String }), ["alice", "bob"], what)
            for error in errors {
                XCTAssertEqual(error["code"] as? String, faultCase.code, what)
                XCTAssertTrue((error["message"] as? String ?? "").localizedCaseInsensitiveContains(faultCase.message), what)
            }
            XCTAssertTrue(outcome.stderr.contains("keymgr: "), what)
            XCTAssertEqual(try snapshot(["alice", "bob"]), before, "the store changed: \(what)")
            for secret in try revealedSecrets(of: before) {
                XCTAssertFalse(outcome.stdout.contains(secret) || outcome.stderr.contains(secret), "a secret shows: \(what)")
            }
            if faultCase.fault["fault"] as? String == "hugeBody" {
                // The stored credentials still work: a healthy read succeeds (and stores what Curity rotated).
                let healthy = try sandbox.keymgr(["sync", "--json"])
                XCTAssertEqual(healthy.status, 0, healthy.summary)
                XCTAssertEqual(try healthy.object()["registrationsWiped"] as? [String], [])
                before = try snapshot(["alice", "bob"])
            }
        }
        // A person's run (no --json) says it once and exits the same way.
        try setFault("management", ["fault": "status500"])
        let person = try sandbox.keymgr(["sync"], timeout: 90)
        try clearFaults()
        XCTAssertEqual(person.status, 69, person.summary)
        XCTAssertTrue(person.stderr.contains("keymgr: "), person.summary)
    }

    // MARK: both dialects

    /// A PingAM profile with OAuth endpoints (PingAM is an authorization server too): the device REST and rule 5's
    /// reads fail apart. Reads failing alone: the keys still converge and no registration is touched. Both failing:
    /// nothing changes at all, and the next healthy run does the work.
    func testAPingAMProfilesRule5FaultsTouchNeitherKeysNorRegistrations() throws {
        try start(users: ["alice"])
        let issuer = server.baseURL.absoluteString
        try sandbox.succeed(server.serverSetArguments + ["--issuer", issuer, "--unbound"])
        let kid = try XCTUnwrap(try registerSettled(["alice"])["alice"])
        let clientId = try XCTUnwrap(try registerClient("alice")["clientId"] as? String)
        try importTokens("alice", clientId: clientId)
        try server.deleteBinding(user: "alice", uuid: kid)  // a healthy sync revokes alice's key

        // Everything fails: the listing's connection is reset, the registration read answers 500.
        var before = try snapshot(["alice"])
        try server.setFault(user: "alice", ["fault": "connectionReset"])
        try setFault("management", ["fault": "status500"])
        let dark = try sandbox.keymgr(["sync", "--json"], timeout: 90)
        XCTAssertEqual(dark.status, 69, "no user and no registration could be reconciled: \(dark.summary)")
        let darkReport = try dark.object()
        XCTAssertEqual(darkReport["revoked"] as? [String], [], dark.summary)
        XCTAssertEqual(darkReport["registrationsWiped"] as? [String], [], dark.summary)
        let codes = Set((darkReport["errors"] as? [[String: Any]] ?? []).compactMap { $0["code"] as? String })
        XCTAssertEqual(codes, ["serverUnavailable"], dark.summary)
        XCTAssertEqual(try snapshot(["alice"]), before, "nothing changed: \(dark.summary)")

        // Only the registration read fails (a cut-off answer): the keys converge, the registration stays as it was.
        try server.request("DELETE", "/__refserver/faults")
        try clearFaults()
        try setFault("management", ["fault": "hugeBody"])
        before = try snapshot(["alice"])
        let half = try sandbox.keymgr(["sync", "--json"], timeout: 90)
        try clearFaults()
        XCTAssertEqual(half.status, 2, half.summary)
        let halfReport = try half.object()
        XCTAssertEqual(halfReport["revoked"] as? [String], [kid], half.summary)
        XCTAssertEqual(halfReport["registrationsWiped"] as? [String], [], half.summary)
        XCTAssertEqual((halfReport["errors"] as? [[String: Any]])?.compactMap { $0["code"] as? String }, ["badInput"], half.summary)
        let after = try snapshot(["alice"])
        XCTAssertEqual(after.tokens, before.tokens, "the tokens are untouched")
        XCTAssertEqual(after.registrations, before.registrations, "the registration is untouched")
        XCTAssertNotEqual(after.keys, before.keys, "the key was revoked")
        let healthy = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(healthy.status, 0, healthy.summary)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }
}
