import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// The authorization server's fault switches: outages and the ways real servers differ from the RFCs.
final class OAuthFaultTests: OAuthServerTestCase {
    func testOutagesOnTheTokenEndpointForCountRequests() async throws {
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        await server.setOAuthFault(.status500, on: .token, count: 1)
        let failed = try await refresh(client, refreshToken)
        XCTAssertEqual(failed.status, 500)
        XCTAssertEqual(try failed.object()["error"] as? String, "server_error")
        let info = try await tokenInfo(refreshToken)
        XCTAssertEqual(info.status, "active", "an outage spends nothing")

        await server.setOAuthFault(.status503(retryAfter: 7), on: .token, count: 1)
        let unavailable = try await refresh(client, refreshToken)
        XCTAssertEqual(unavailable.status, 503)
        XCTAssertEqual(unavailable.header("Retry-After"), "7")

        await server.setOAuthFault(.malformedJSON, on: .token, count: 1)
        let malformed = try await refresh(client, refreshToken)
        XCTAssertEqual(malformed.status, 200)
        XCTAssertThrowsError(try JSONSerialization.jsonObject(with: malformed.body))

        await server.setOAuthFault(.garbageTokenResponse, on: .token, count: 1)
        let garbage = try await refresh(client, refreshToken)
        XCTAssertEqual(garbage.status, 200)
        XCTAssertNil(try garbage.object()["access_token"])

        await server.setOAuthFault(.wrongContentType, on: .token, count: 1)
        let html = try await refresh(client, refreshToken)
        XCTAssertEqual(html.status, 200)
        XCTAssertEqual(html.header("Content-Type")?.hasPrefix("text/html"), true)

        await server.setOAuthFault(.delay(seconds: 0.2), on: .token, count: 1)
        let delayed = try await refresh(client, refreshToken)
        XCTAssertEqual(delayed.status, 200, "after the count is used up the endpoint works again")
    }

    func testADeadRefreshTokenCanGetAnEmptyBody() async throws {
        await server.setOAuthFault(.emptyBodyOnInvalidGrant, on: .token)
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        let first = try await refresh(client, refreshToken)
        XCTAssertEqual(first.status, 200)
        let reuse = try await refresh(client, refreshToken)
        XCTAssertEqual(reuse.status, 400)
        XCTAssertTrue(reuse.body.isEmpty)
    }

    func testLowercaseTokenType() async throws {
        await server.setOAuthFault(.lowercaseTokenType, on: .token)
        let client = try await register()
        let key = try DPoPTestKey()
        let (_, unbound) = try await mint(client)
        let (_, bound) = try await mint(client, jkt: key.jkt)
        let bearer = try await refresh(client, unbound)
        XCTAssertEqual(try bearer.object()["token_type"] as? String, "bearer")
        let dpop = try await refresh(client, bound, proof: key.proof("POST", server.oauthTokenEndpoint))
        XCTAssertEqual(try dpop.object()["token_type"] as? String, "dpop")
    }

    func testRegistrationQuirks() async throws {
        await server.setOAuthFault(.authMethodAsArray, on: .registration)
        await server.setOAuthFault(.registration200, on: .registration)
        let result = try await send(
            "POST", server.oauthRegistrationEndpoint, headers: ["Authorization": "Bearer \(initialAccessToken)"],
            json: ["software_id": "keymgr-template"])
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(try result.object()["token_endpoint_auth_method"] as? [String], ["client_secret_basic"])
        let faults = await server.handler.oauth.state.currentFaults()
        XCTAssertEqual(faults[.registration]?.count, 2)
        await server.clearOAuthFaults()
        let normal = try await register()
        XCTAssertEqual(normal.response["token_endpoint_auth_method"] as? String, "client_secret_basic")
    }

    func testAForeignRegistrationClientURIPointsElsewhereAndTheFaultParsesFromJSON() async throws {
        await server.setOAuthFault(.foreignRegistrationClientURI("https://elsewhere.example/steal"), on: .registration)
        let client = try await register()
        let uri = try XCTUnwrap(client.response["registration_client_uri"] as? String)
        XCTAssertTrue(uri.hasPrefix("https://elsewhere.example/steal/"), uri)
        XCTAssertEqual(OAuthFault(json: OAuthFault.foreignRegistrationClientURI("https://elsewhere.example/x").json),
                       .foreignRegistrationClientURI("https://elsewhere.example/x"))
        XCTAssertNil(OAuthFault(json: .object(["fault": .string("foreignRegistrationClientURI"), "url": .string("no host")])))
        await server.clearOAuthFaults()
        let normal = try await register()
        XCTAssertTrue((normal.response["registration_client_uri"] as? String)?.hasPrefix(server.baseURL.absoluteString) == true)
    }

    func testFaultsOverTheAdminSurface() async throws {
        let headers = ["Authorization": "Bearer \(adminToken)"]
        let armed = try await send(
            "PUT", adminURL("oauth/faults/discovery"), headers: headers, json: ["fault": "status503", "retryAfter": 2])
        XCTAssertEqual(armed.status, 200)
        let discovery = try await send("GET", server.baseURL.appendingPathComponent(".well-known/openid-configuration"))
        XCTAssertEqual(discovery.status, 503)
        let listed = try await send("GET", adminURL("oauth/faults"), headers: headers)
        XCTAssertNotNil((try listed.object()["faults"] as? [String: Any])?["discovery"])
        let bad = try await send("PUT", adminURL("oauth/faults/discovery"), headers: headers, json: ["fault": "nope"])
        XCTAssertEqual(bad.status, 400)
        let badEndpoint = try await send("PUT", adminURL("oauth/faults/nowhere"), headers: headers, json: ["fault": "status500"])
        XCTAssertEqual(badEndpoint.status, 400)
        let cleared = try await send("DELETE", adminURL("oauth/faults"), headers: headers)
        XCTAssertEqual(cleared.status, 204)
        let again = try await send("GET", server.baseURL.appendingPathComponent(".well-known/openid-configuration"))
        XCTAssertEqual(again.status, 200)
    }

    func testRequestsToTheAuthorizationServerAreRecordedWithCredentialsRedacted() async throws {
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        await server.clearRecordedRequests()
        _ = try await refresh(client, refreshToken)
        let requests = await server.recordedRequests()
        XCTAssertEqual(requests.map(\.target), ["/oauth/v2/oauth-token"])
        XCTAssertEqual(requests.first?.headers["authorization"], "[redacted]")
    }
}
