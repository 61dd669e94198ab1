import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `keymgr-refserver`'s `--oauth-…` flags, on the built executable.
extension ExecutableTests {
    func testOAuthFlagsConfigureTheAuthorizationServer() async throws {
        let databasePath = try temporaryDatabasePath()
        let tokenPath = databasePath + ".token"
        let initialTokenPath = databasePath + ".iat"
        let templatesPath = databasePath + ".templates.json"
        try "process-token\n".write(toFile: tokenPath, atomically: true, encoding: .utf8)
        try "process-initial-token\n".write(toFile: initialTokenPath, atomically: true, encoding: .utf8)
        try #"{"kiosk": {"grant_types": ["refresh_token"], "scope": "read", "token_endpoint_auth_method": "client_secret_post"}}"#
            .write(toFile: templatesPath, atomically: true, encoding: .utf8)
        let (process, _, line) = try launch([
            "--db", databasePath, "--admin-token-file", tokenPath, "--oauth-initial-access-token-file", initialTokenPath,
            "--oauth-templates", templatesPath, "--oauth-token-bound", "--oauth-dpop-nonce",
            "--oauth-openid-discovery-only", "--oauth-issuer-path", "/oauth/v2/oauth-anonymous",
            "--parent-pid", String(getpid()), "--idle-exit", "120",
        ])
        defer { if process.isRunning { process.terminate() } }
        let match = try XCTUnwrap(line.wholeMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/), line)
        let base = try XCTUnwrap(URL(string: "http://127.0.0.1:\(match.1)"))

        let rfc8414 = try await send("GET", base.appendingPathComponent(".well-known/oauth-authorization-server"))
        XCTAssertEqual(rfc8414.status, 404)
        let openID = try await send(
            "GET", base.appendingPathComponent("oauth/v2/oauth-anonymous/.well-known/openid-configuration"))
        XCTAssertEqual(try openID.object()["issuer"] as? String, base.absoluteString + "/oauth/v2/oauth-anonymous")

        let registration = base.appendingPathComponent("oauth/v2/oauth-dynamic-client-registration")
        let refused = try await send("POST", registration, json: ["software_id": "kiosk"])
        XCTAssertEqual(refused.status, 401)
        let registered = try await send(
            "POST", registration, headers: ["Authorization": "Bearer process-initial-token"],
            json: ["software_id": "kiosk"])
        XCTAssertEqual(registered.status, 201)
        let client = try registered.object()
        XCTAssertEqual(client["token_endpoint_auth_method"] as? String, "client_secret_post")
        let clientId = try XCTUnwrap(client["client_id"] as? String)
        let secret = try XCTUnwrap(client["client_secret"] as? String)

        // Token-bound server: a refresh without a DPoP proof is refused.
        let minted = try await send(
            "POST", base.appendingPathComponent("__refserver/oauth/tokens"),
            headers: ["Authorization": "Bearer process-token"], json: ["client_id": clientId, "subject": "alice"])
        let refreshToken = try XCTUnwrap(try minted.object()["refresh_token"] as? String)
        let refresh = try await sendForm(
            base.appendingPathComponent("oauth/v2/oauth-token"),
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", clientId),
             ("client_secret", secret)])
        XCTAssertEqual(refresh.status, 400)
        XCTAssertEqual(try refresh.object()["error"] as? String, "invalid_dpop_proof")
        process.terminate()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
    }
}
