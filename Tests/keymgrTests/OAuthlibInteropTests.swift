import Foundation
import XCTest

/// keymgr as a process against the reference server in `oauthlib` mode (`keymgr-refserver --oauth-mode oauthlib`):
/// a server built on oauthlib, with DCR, the device grant and refresh rotation, and no DPoP.
final class OAuthlibInteropTests: ServerTestCase {
    override var cli: Sandbox.CLIRun { .inProcess }

    /// The token endpoint and userinfo requests the server recorded, from `index` on.
    func tokenRequests(from index: Int) throws -> [[String: Any]] {
        try server.recordedRequests().dropFirst(index).filter {
            let target = $0["target"] as? String ?? ""
            return target.hasPrefix("/oauth/v2/oauth-token") || target.hasPrefix("/oauth/v2/oauth-userinfo")
        }
    }

    func testFromTheIssuerAloneToBearerTokens() throws {
        sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        server = try RefServerProcess(in: sandbox, users: [], extra: ["--oauth-mode", "oauthlib"])
        var issuer = server.baseURL.absoluteString
        while issuer.hasSuffix("/") { issuer.removeLast() }

        // The issuer is all an OAuth profile needs: the base URL derives from it.
        let saved = try sandbox.succeed(["server", "set", "--dialect", "oauth", "--issuer", issuer, "--json"]).object()
        XCTAssertEqual(saved["baseUrl"] as? String, issuer)
        XCTAssertEqual(saved["tokenEndpoint"] as? String, issuer + "/oauth/v2/oauth-token")
        XCTAssertTrue(saved["deviceAuthorizationEndpoint"] is NSNull, "the server's discovery does not list it")
        // A new PingAM profile (server set changes an existing one only where told) needs its base URL.
        let pingam = try sandbox.keymgr(["server", "set", "--profile", "am", "--dialect", "pingam", "--issuer", issuer])
        XCTAssertEqual(pingam.status, 64, "PingAM needs its base URL: \(pingam.summary)")
        XCTAssertTrue(pingam.stderr.contains("--base-url"), pingam.stderr)

        // No device endpoint discovered: login says which option gives it.
        try registerClient("alice")
        let undiscovered = try sandbox.keymgr(["login", "--user", "alice"])
        XCTAssertEqual(undiscovered.status, 78, undiscovered.summary)
        XCTAssertTrue(undiscovered.stderr.contains("--device-authorization-endpoint"), undiscovered.stderr)

        // A --bound profile (the default), under keymgr's other name for the dialect: the server ignores the
        // proofs and issues Bearer tokens, which are refused.
        let device = issuer + "/oauth/v2/oauth-device-authorization"
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--issuer", issuer, "--device-authorization-endpoint", device])
        let boundStart = try server.recordedRequests().count
        let bound = try login("alice")
        XCTAssertEqual(bound.status, 76, bound.summary)
        XCTAssertTrue(bound.stdout.contains("the server issued Bearer tokens"), bound.stdout)
        XCTAssertTrue(bound.stdout.contains("keymgr server set … --unbound"), bound.stdout)
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "alice"]).status, 66, "nothing stored")
        let boundPolls = try tokenRequests(from: boundStart)
        XCTAssertFalse(boundPolls.isEmpty)
        XCTAssertTrue(boundPolls.allSatisfy { ($0["headers"] as? [String: Any])?["dpop"] != nil }, "the bound profile sent proofs")

        // --unbound: the login (client_id in the device authorization request, which the server demands) and a
        // refresh work, and no request carries a DPoP header.
        try sandbox.succeed(["server", "set", "--dialect", "curity", "--issuer", issuer, "--device-authorization-endpoint", device,
                             "--unbound"])
        let unboundStart = try server.recordedRequests().count
        XCTAssertEqual(try login("alice").status, 0)
        let shown = try tokens("alice")
        XCTAssertEqual(shown["tokenType"] as? String, "Bearer")
        XCTAssertEqual(shown["bound"] as? Bool, false)
        XCTAssertEqual(try sandbox.keymgr(["token", "refresh", "--user", "alice"]).status, 0)
        let unboundRequests = try tokenRequests(from: unboundStart)
        XCTAssertGreaterThanOrEqual(unboundRequests.count, 2, "a poll and a refresh")
        XCTAssertTrue(unboundRequests.allSatisfy { ($0["headers"] as? [String: Any])?["dpop"] == nil }, "\(unboundRequests)")
    }
}
