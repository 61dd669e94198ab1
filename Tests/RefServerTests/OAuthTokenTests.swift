import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// The token endpoint (RFC 6749: refresh with rotation, client authentication) and revocation (RFC 7009).
final class OAuthTokenTests: OAuthServerTestCase {
    func testRefreshRotatesAndAUsedRefreshTokenIsDeadAtOnce() async throws {
        let client = try await register()
        let (accessToken, refreshToken) = try await mint(client)
        let first = try await refresh(client, refreshToken)
        XCTAssertEqual(first.status, 200, String(decoding: first.body, as: UTF8.self))
        let tokens = try first.object()
        let newAccess = try XCTUnwrap(tokens["access_token"] as? String)
        let newRefresh = try XCTUnwrap(tokens["refresh_token"] as? String)
        XCTAssertEqual(tokens["token_type"] as? String, "Bearer")
        XCTAssertEqual(tokens["expires_in"] as? Int, 300)
        XCTAssertEqual(tokens["scope"] as? String, "openid read")
        XCTAssertNotEqual(newAccess, accessToken)
        XCTAssertNotEqual(newRefresh, refreshToken)
        XCTAssertEqual(first.header("Cache-Control"), "no-store")

        let reuse = try await refresh(client, refreshToken)
        XCTAssertEqual(reuse.status, 400)
        XCTAssertEqual(try reuse.object()["error"] as? String, "invalid_grant")
        let presentedOld = try await server.presentations(ofToken: refreshToken)
        XCTAssertEqual(presentedOld, 2)
        let presentedNew = try await server.presentations(ofToken: newRefresh)
        XCTAssertEqual(presentedNew, 0)
        let old = try await tokenInfo(refreshToken)
        XCTAssertEqual(old.status, "used")
        let next = try await refresh(client, newRefresh)
        XCTAssertEqual(next.status, 200)
    }

    func testConcurrentRefreshesWithOneTokenSpendItOnce() async throws {
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        let endpoint = server.oauthTokenEndpoint
        let authorization = basicAuthorization(client.clientId, client.clientSecret ?? "")
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<6 {
                group.addTask {
                    try await sendForm(
                        endpoint, [("grant_type", "refresh_token"), ("refresh_token", refreshToken)],
                        headers: ["Authorization": authorization]
                    ).status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        XCTAssertEqual(statuses.filter { $0 == 200 }.count, 1, "\(statuses)")
        XCTAssertEqual(statuses.filter { $0 == 400 }.count, 5, "\(statuses)")
        let presented = try await server.presentations(ofToken: refreshToken)
        XCTAssertEqual(presented, 6)
        let issued = try await server.oauthTokens().filter { $0.kind == "refresh" && $0.status == "active" }
        XCTAssertEqual(issued.count, 1)
    }

    func testClientSecretPostAndTheWrongMethodOrSecret() async throws {
        let client = try await register([
            "grant_types": ["refresh_token"], "token_endpoint_auth_method": "client_secret_post", "scope": "read",
        ])
        let secret = try XCTUnwrap(client.clientSecret)
        let (_, refreshToken) = try await mint(client)
        // Basic for a client_secret_post client, then a wrong secret: invalid_client, and the token survives.
        let basic = try await refresh(client, refreshToken)
        XCTAssertEqual(basic.status, 401)
        XCTAssertEqual(try basic.object()["error"] as? String, "invalid_client")
        XCTAssertEqual(basic.header("WWW-Authenticate"), #"Basic realm="oauth""#)
        let wrong = try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", client.clientId),
             ("client_secret", secret + "x")])
        XCTAssertEqual(wrong.status, 401)
        XCTAssertEqual(try wrong.object()["error"] as? String, "invalid_client")
        let unknown = try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", "nobody"),
             ("client_secret", secret)])
        XCTAssertEqual(unknown.status, 401)
        let right = try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", client.clientId),
             ("client_secret", secret)])
        XCTAssertEqual(right.status, 200, String(decoding: right.body, as: UTF8.self))
    }

    func testWrongBasicSecretIs401() async throws {
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        var impostor = client
        impostor.clientSecret = "not-the-secret"
        let result = try await refresh(impostor, refreshToken)
        XCTAssertEqual(result.status, 401)
        XCTAssertEqual(try result.object()["error"] as? String, "invalid_client")
        let info = try await tokenInfo(refreshToken)
        XCTAssertEqual(info.status, "active")
    }

    func testARefreshTokenOfAnotherClientIsInvalidGrant() async throws {
        let owner = try await register()
        let other = try await register()
        let (_, refreshToken) = try await mint(owner)
        let result = try await refresh(other, refreshToken)
        XCTAssertEqual(result.status, 400)
        XCTAssertEqual(try result.object()["error"] as? String, "invalid_grant")
    }

    func testMalformedTokenRequests() async throws {
        let client = try await register()
        let auth = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        let unsupported = try await sendForm(server.oauthTokenEndpoint, [("grant_type", "password")], headers: auth)
        XCTAssertEqual(try unsupported.object()["error"] as? String, "unsupported_grant_type")
        let missing = try await sendForm(server.oauthTokenEndpoint, [("refresh_token", "x")], headers: auth)
        XCTAssertEqual(try missing.object()["error"] as? String, "invalid_request")
        let repeated = try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "refresh_token"), ("refresh_token", "a"), ("refresh_token", "b")], headers: auth)
        XCTAssertEqual(try repeated.object()["error"] as? String, "invalid_request")
        let json = try await send(
            "POST", server.oauthTokenEndpoint, headers: auth, json: ["grant_type": "refresh_token"])
        XCTAssertEqual(json.status, 400)
        XCTAssertEqual(try json.object()["error"] as? String, "invalid_request")
        let get = try await send("GET", server.oauthTokenEndpoint, headers: auth)
        XCTAssertEqual(get.status, 405)
    }

    func testAPublicClientAuthenticatesWithItsIdAlone() async throws {
        let client = try await register([
            "grant_types": ["refresh_token"], "token_endpoint_auth_method": "none", "scope": "read",
        ])
        XCTAssertNil(client.clientSecret)
        XCTAssertNil(client.response["client_secret_expires_at"])
        let (_, refreshToken) = try await mint(client)
        let result = try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", client.clientId)])
        XCTAssertEqual(result.status, 200, String(decoding: result.body, as: UTF8.self))
    }

    // MARK: revocation

    func testRevokingTheRefreshTokenKillsTheGrant() async throws {
        let client = try await register()
        let (accessToken, refreshToken) = try await mint(client)
        let auth = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        let revoked = try await sendForm(
            server.oauthRevocationEndpoint, [("token", refreshToken), ("token_type_hint", "refresh_token")],
            headers: auth)
        XCTAssertEqual(revoked.status, 200)
        let refreshed = try await refresh(client, refreshToken)
        XCTAssertEqual(try refreshed.object()["error"] as? String, "invalid_grant")
        let resource = try await send(
            "GET", server.oauthUserinfoEndpoint, headers: ["Authorization": "Bearer \(accessToken)"])
        XCTAssertEqual(resource.status, 401)
        let access = try await tokenInfo(accessToken)
        XCTAssertEqual(access.status, "revoked")
    }

    func testRevokingAnAccessTokenLeavesTheRefreshToken() async throws {
        let client = try await register()
        let (accessToken, refreshToken) = try await mint(client)
        let auth = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        let before = try await send("GET", server.oauthUserinfoEndpoint, headers: ["Authorization": "Bearer \(accessToken)"])
        XCTAssertEqual(before.status, 200)
        XCTAssertEqual(try before.object()["sub"] as? String, "alice")
        let revoked = try await sendForm(server.oauthRevocationEndpoint, [("token", accessToken)], headers: auth)
        XCTAssertEqual(revoked.status, 200)
        let after = try await send("GET", server.oauthUserinfoEndpoint, headers: ["Authorization": "Bearer \(accessToken)"])
        XCTAssertEqual(after.status, 401)
        XCTAssertEqual(after.header("WWW-Authenticate")?.contains(#"error="invalid_token""#), true)
        let refreshed = try await refresh(client, refreshToken)
        XCTAssertEqual(refreshed.status, 200)
    }

    func testRevocationAnswers200ForUnknownTokensAndNeedsClientAuthentication() async throws {
        let client = try await register()
        let other = try await register()
        let (_, refreshToken) = try await mint(client)
        let unknown = try await sendForm(
            server.oauthRevocationEndpoint, [("token", "no-such-token")],
            headers: ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")])
        XCTAssertEqual(unknown.status, 200)
        let anonymous = try await sendForm(server.oauthRevocationEndpoint, [("token", refreshToken)])
        XCTAssertEqual(anonymous.status, 401)
        XCTAssertEqual(try anonymous.object()["error"] as? String, "invalid_client")
        // Another client's revocation does not touch this client's token.
        let foreign = try await sendForm(
            server.oauthRevocationEndpoint, [("token", refreshToken)],
            headers: ["Authorization": basicAuthorization(other.clientId, other.clientSecret ?? "")])
        XCTAssertEqual(foreign.status, 200)
        let info = try await tokenInfo(refreshToken)
        XCTAssertEqual(info.status, "active")
    }

    func testAdminMintAndListingOverHTTP() async throws {
        let client = try await register()
        let minted = try await send(
            "POST", adminURL("oauth/tokens"), headers: ["Authorization": "Bearer \(adminToken)"],
            json: ["client_id": client.clientId, "subject": "bob", "scope": "read"])
        XCTAssertEqual(minted.status, 201)
        let tokens = try minted.object()
        XCTAssertEqual(tokens["token_type"] as? String, "Bearer")
        XCTAssertEqual(tokens["scope"] as? String, "read")
        let refreshToken = try XCTUnwrap(tokens["refresh_token"] as? String)
        _ = try await refresh(client, refreshToken)
        let listing = try await send(
            "GET", adminURL("oauth/tokens"), headers: ["Authorization": "Bearer \(adminToken)"])
        let rows = try XCTUnwrap(try listing.object()["result"] as? [[String: Any]])
        let row = try XCTUnwrap(rows.first { $0["token"] as? String == refreshToken })
        XCTAssertEqual(row["presentations"] as? Int, 1)
        XCTAssertEqual(row["status"] as? String, "used")
        XCTAssertEqual(row["subject"] as? String, "bob")
        let unauthorized = try await send("GET", adminURL("oauth/tokens"))
        XCTAssertEqual(unauthorized.status, 401)
    }
}
