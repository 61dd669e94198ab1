import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// The authorization server in `oauthlib` mode: how a server built on oauthlib reads RFC 8628 and RFC 6749, and
/// that it has no DPoP.
final class OAuthlibModeTests: OAuthServerTestCase {
    override func setUp() async throws {
        oauthConfiguration.adopt(.oauthlib)
        try await super.setUp()
    }

    func deviceAuthorization(_ client: RegisteredClient, _ parameters: [(String, String)]) async throws -> HTTPResult {
        try await sendForm(server.oauthDeviceAuthorizationEndpoint, parameters,
                           headers: ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")])
    }

    func testDeviceAuthorizationWantsClientIdEvenFromAnAuthenticatedClient() async throws {
        let client = try await register()
        let missing = try await deviceAuthorization(client, [("scope", "read")])
        XCTAssertEqual(missing.status, 400)
        XCTAssertEqual(try missing.object()["error"] as? String, "invalid_request")
        XCTAssertEqual(try missing.object()["error_description"] as? String, "Missing client_id parameter.")

        let named = try await deviceAuthorization(client, [("scope", "read"), ("client_id", client.clientId)])
        XCTAssertEqual(named.status, 200, String(decoding: named.body, as: UTF8.self))
        let object = try named.object()
        XCTAssertNotNil(object["device_code"] as? String)
        XCTAssertNil(object["interval"], "oauthlib announces no interval by default")
        XCTAssertNil(object["verification_uri_complete"])

        // oauthlib compares the whole Content-Type header: a charset parameter is refused.
        let body = Data("client_id=\(formEncode(client.clientId))".utf8)
        let withCharset = try rawHTTP("POST", server.oauthDeviceAuthorizationEndpoint, headers: [
            "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
            "Authorization": basicAuthorization(client.clientId, client.clientSecret ?? ""),
        ], body: body)
        XCTAssertEqual(withCharset.status, 400)
        XCTAssertEqual(try withCharset.object()["error"] as? String, "invalid_request")

        // Curity's reading (the default) takes the same request without client_id.
        try await restart { $0.adopt(.curity) }
        let curity = try await deviceAuthorization(client, [("scope", "read")])
        XCTAssertEqual(curity.status, 200, String(decoding: curity.body, as: UTF8.self))
        XCTAssertNotNil(try curity.object()["interval"])
    }

    func testDiscoveryListsNeitherTheDeviceEndpointNorDPoP() async throws {
        for document in ["oauth-authorization-server", "openid-configuration"] {
            let result = try await send("GET", server.baseURL.appendingPathComponent(".well-known/" + document))
            XCTAssertEqual(result.status, 200)
            let metadata = try result.object()
            XCTAssertNotNil(metadata["token_endpoint"], document)
            XCTAssertNil(metadata["device_authorization_endpoint"], document)
            XCTAssertNil(metadata["dpop_signing_alg_values_supported"], document)
        }
        // The endpoint is served all the same.
        let client = try await register()
        let named = try await deviceAuthorization(client, [("client_id", client.clientId)])
        XCTAssertEqual(named.status, 200)
    }

    func testDPoPProofsAreIgnoredAndEveryTokenIsBearer() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        // A refresh token bound before the server stopped binding refreshes as Bearer, with a proof or without.
        let (_, boundRefresh) = try await mint(client, jkt: key.jkt)
        let withProof = try await refresh(client, boundRefresh, proof: try key.proof("POST", server.oauthTokenEndpoint))
        XCTAssertEqual(withProof.status, 200, String(decoding: withProof.body, as: UTF8.self))
        XCTAssertEqual(try withProof.object()["token_type"] as? String, "Bearer")
        let access = try XCTUnwrap(try withProof.object()["access_token"] as? String)
        let info = try await tokenInfo(access)
        XCTAssertNil(info.jkt, "the proof bound nothing")
        let next = try XCTUnwrap(try withProof.object()["refresh_token"] as? String)
        let bare = try await refresh(client, next)
        XCTAssertEqual(bare.status, 200)
        XCTAssertEqual(try bare.object()["token_type"] as? String, "Bearer")
    }

    func testInvalidClientCarriesABearerChallenge() async throws {
        let client = try await register()
        let (_, refreshToken) = try await mint(client)
        let wrong = RegisteredClient(clientId: client.clientId, clientSecret: "not the secret",
                                     registrationClientURI: client.registrationClientURI,
                                     registrationAccessToken: client.registrationAccessToken, response: [:])
        let refused = try await refresh(wrong, refreshToken)
        XCTAssertEqual(refused.status, 401)
        XCTAssertEqual(try refused.object()["error"] as? String, "invalid_client")
        XCTAssertEqual(refused.header("WWW-Authenticate"), #"Bearer error="invalid_client""#)
    }
}
