import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// Discovery (RFC 8414, OpenID) and DCR (RFC 7591, RFC 7592) over loopback HTTP.
final class OAuthRegistrationTests: OAuthServerTestCase {
    // MARK: discovery

    func testBothDiscoveryDocumentsListTheEndpoints() async throws {
        let base = server.baseURL.absoluteString
        for document in ["oauth-authorization-server", "openid-configuration"] {
            let result = try await send("GET", server.baseURL.appendingPathComponent(".well-known/\(document)"))
            XCTAssertEqual(result.status, 200, document)
            let metadata = try result.object()
            XCTAssertEqual(metadata["issuer"] as? String, base)
            XCTAssertEqual(metadata["token_endpoint"] as? String, base + "/oauth/v2/oauth-token")
            XCTAssertEqual(metadata["registration_endpoint"] as? String, base + "/oauth/v2/oauth-dynamic-client-registration")
            XCTAssertEqual(metadata["revocation_endpoint"] as? String, base + "/oauth/v2/oauth-revoke")
            XCTAssertEqual(
                metadata["device_authorization_endpoint"] as? String, base + "/oauth/v2/oauth-device-authorization")
            XCTAssertEqual(metadata["introspection_endpoint"] as? String, base + "/oauth/v2/oauth-introspect")
            XCTAssertEqual(metadata["dpop_signing_alg_values_supported"] as? [String], ["ES256"])
            XCTAssertEqual(
                metadata["grant_types_supported"] as? [String],
                ["refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])
            XCTAssertEqual(
                Set(metadata["token_endpoint_auth_methods_supported"] as? [String] ?? []),
                ["client_secret_basic", "client_secret_post", "none"])
        }
    }

    func testOpenIDOnlySwitchHidesTheAuthorizationServerMetadata() async throws {
        try await restart { $0.servesAuthorizationServerMetadata = false }
        let rfc8414 = try await send("GET", server.baseURL.appendingPathComponent(".well-known/oauth-authorization-server"))
        XCTAssertEqual(rfc8414.status, 404)
        let openID = try await send("GET", server.baseURL.appendingPathComponent(".well-known/openid-configuration"))
        XCTAssertEqual(openID.status, 200)
        XCTAssertEqual(try openID.object()["issuer"] as? String, server.baseURL.absoluteString)
    }

    func testIssuerWithAPathIsDiscoverableBothWays() async throws {
        try await restart { $0.issuerPath = "/oauth/v2/oauth-anonymous" }
        let issuer = server.baseURL.absoluteString + "/oauth/v2/oauth-anonymous"
        for path in [
            "oauth/v2/oauth-anonymous/.well-known/openid-configuration",
            ".well-known/oauth-authorization-server/oauth/v2/oauth-anonymous",
        ] {
            let result = try await send("GET", server.baseURL.appendingPathComponent(path))
            XCTAssertEqual(result.status, 200, path)
            XCTAssertEqual(try result.object()["issuer"] as? String, issuer)
        }
    }

    // MARK: registration

    func testTemplatizedRegistrationIssuesEveryFieldAndKeepsDeviceContext() async throws {
        let client = try await register([
            "software_id": "keymgr-template", "device_name": "kiosk-7", "os_name": "Debian", "os_version": "13",
            "grant_types": ["authorization_code"],
        ])
        let response = client.response
        XCTAssertFalse(client.clientId.isEmpty)
        XCTAssertGreaterThanOrEqual(client.clientSecret?.count ?? 0, 40)
        XCTAssertEqual(response["client_secret_expires_at"] as? Int, 0)
        XCTAssertNotNil(response["client_id_issued_at"] as? Int)
        XCTAssertEqual(
            client.registrationClientURI.absoluteString,
            server.oauthRegistrationEndpoint.absoluteString + "/" + client.clientId)
        XCTAssertEqual(response["registration_access_token_expires_in"] as? Int, 28 * 86_400)
        // The template's members win; what the client added about itself is kept.
        XCTAssertEqual(
            response["grant_types"] as? [String], ["refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])
        XCTAssertEqual(response["token_endpoint_auth_method"] as? String, "client_secret_basic")
        XCTAssertEqual(response["scope"] as? String, "openid read")
        XCTAssertEqual(response["software_id"] as? String, "keymgr-template")
        XCTAssertEqual(response["device_name"] as? String, "kiosk-7")
        XCTAssertEqual(response["os_name"] as? String, "Debian")
        XCTAssertEqual(response["os_version"] as? String, "13")

        let stored = try await server.oauthClients()
        XCTAssertEqual(stored.map(\.clientId), [client.clientId])
        XCTAssertEqual(stored.first?.template, "keymgr-template")
        XCTAssertEqual(stored.first?.metadata["device_name"], "kiosk-7")
    }

    func testTwoRegistrationsGetDistinctRandomCredentials() async throws {
        let first = try await register()
        let second = try await register()
        XCTAssertNotEqual(first.clientId, second.clientId)
        XCTAssertNotEqual(first.clientSecret, second.clientSecret)
        XCTAssertNotEqual(first.registrationAccessToken, second.registrationAccessToken)
    }

    func testRegistrationWithoutOrWithAWrongInitialAccessTokenIs401() async throws {
        for headers in [[:], ["Authorization": "Bearer wrong"], ["Authorization": "Basic \(initialAccessToken)"]] {
            let result = try await send(
                "POST", server.oauthRegistrationEndpoint, headers: headers, json: ["software_id": "keymgr-template"])
            XCTAssertEqual(result.status, 401, "\(headers)")
            XCTAssertEqual(try result.object()["error"] as? String, "invalid_token")
            XCTAssertEqual(result.header("WWW-Authenticate"), #"Bearer error="invalid_token""#)
        }
        let clients = try await server.oauthClients()
        XCTAssertTrue(clients.isEmpty)
    }

    func testFullMetadataRegistrationIsValidated() async throws {
        let client = try await register([
            "client_name": "kiosk", "grant_types": ["refresh_token"], "token_endpoint_auth_method": "client_secret_post",
            "scope": "read", "x_custom": ["a": 1],
        ])
        XCTAssertEqual(client.response["token_endpoint_auth_method"] as? String, "client_secret_post")
        XCTAssertEqual((client.response["x_custom"] as? [String: Any])?["a"] as? Int, 1)

        let bad: [[String: Any]] = [
            ["grant_types": ["password"]], ["grant_types": "refresh_token"],
            ["grant_types": ["refresh_token"], "token_endpoint_auth_method": "private_key_jwt"],
            ["grant_types": ["refresh_token"], "scope": 3],
        ]
        for body in bad {
            let result = try await send(
                "POST", server.oauthRegistrationEndpoint, headers: ["Authorization": "Bearer \(initialAccessToken)"],
                json: body)
            XCTAssertEqual(result.status, 400, "\(body)")
            XCTAssertEqual(try result.object()["error"] as? String, "invalid_client_metadata", "\(body)")
        }
        // RFC 7591's default grant is authorization_code, which needs redirect URIs.
        let noRedirect = try await send(
            "POST", server.oauthRegistrationEndpoint, headers: ["Authorization": "Bearer \(initialAccessToken)"],
            json: ["client_name": "web"])
        XCTAssertEqual(try noRedirect.object()["error"] as? String, "invalid_redirect_uri")
    }

    func testTemplatesOnlyServerRefusesFullMetadata() async throws {
        try await restart { $0.allowsFullMetadataRegistration = false }
        let result = try await send(
            "POST", server.oauthRegistrationEndpoint, headers: ["Authorization": "Bearer \(initialAccessToken)"],
            json: ["software_id": "no-such-template", "grant_types": ["refresh_token"]])
        XCTAssertEqual(result.status, 400)
        XCTAssertEqual(try result.object()["error"] as? String, "invalid_client_metadata")
    }

    // MARK: management (RFC 7592)

    func testGetRotatesTheRegistrationTokenAndTheSecret() async throws {
        let client = try await register(["software_id": "keymgr-template", "device_name": "kiosk"])
        let (_, refreshToken) = try await mint(client)
        let read = try await send(
            "GET", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        XCTAssertEqual(read.status, 200)
        let rotated = try self.client(from: read.object())
        XCTAssertEqual(rotated.clientId, client.clientId)
        XCTAssertNotEqual(rotated.registrationAccessToken, client.registrationAccessToken)
        XCTAssertNotEqual(rotated.clientSecret, client.clientSecret)
        XCTAssertEqual(rotated.response["device_name"] as? String, "kiosk")

        // The old registration token is dead; the old secret no longer authenticates; the new pair works.
        let stale = try await send(
            "GET", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        XCTAssertEqual(stale.status, 401)
        let oldSecret = try await refresh(client, refreshToken)
        XCTAssertEqual(oldSecret.status, 401)
        XCTAssertEqual(try oldSecret.object()["error"] as? String, "invalid_client")
        let newSecret = try await refresh(rotated, refreshToken)
        XCTAssertEqual(newSecret.status, 200, String(decoding: newSecret.body, as: UTF8.self))
    }

    func testRotationCanBeSwitchedOff() async throws {
        try await restart { $0.rotatesRegistrationCredentials = false }
        let client = try await register()
        let read = try await send(
            "GET", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        let same = try self.client(from: read.object())
        XCTAssertEqual(same.registrationAccessToken, client.registrationAccessToken)
        XCTAssertEqual(same.clientSecret, client.clientSecret)
    }

    func testPutReplacesMetadataAndRefusesServerIssuedMembers() async throws {
        let client = try await register([
            "client_name": "kiosk", "grant_types": ["refresh_token"], "scope": "read", "device_name": "old",
        ])
        let update: [String: Any] = [
            "client_id": client.clientId, "client_name": "renamed", "grant_types": ["refresh_token"],
            "token_endpoint_auth_method": "client_secret_basic",
        ]
        for forbidden in ["registration_access_token", "registration_client_uri", "client_secret_expires_at", "client_id_issued_at"] {
            var body = update
            body[forbidden] = forbidden.hasSuffix("_at") ? 0 as Any : "x" as Any
            let refused = try await send(
                "PUT", client.registrationClientURI,
                headers: ["Authorization": "Bearer \(client.registrationAccessToken)"], json: body)
            XCTAssertEqual(refused.status, 400, forbidden)
            XCTAssertEqual(try refused.object()["error"] as? String, "invalid_client_metadata", forbidden)
        }
        let updated = try await send(
            "PUT", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"],
            json: update)
        XCTAssertEqual(updated.status, 200, String(decoding: updated.body, as: UTF8.self))
        let object = try updated.object()
        XCTAssertEqual(object["client_name"] as? String, "renamed")
        XCTAssertNil(object["device_name"], "omitted members are deleted")
        XCTAssertNil(object["scope"])
        XCTAssertNotEqual(object["registration_access_token"] as? String, client.registrationAccessToken)
        XCTAssertNotEqual(object["client_secret"] as? String, client.clientSecret)
    }

    func testDeleteAnswers204AndTheClientIsGoneWith401() async throws {
        let client = try await register()
        let (accessToken, _) = try await mint(client)
        let deleted = try await send(
            "DELETE", client.registrationClientURI,
            headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        XCTAssertEqual(deleted.status, 204)
        let read = try await send(
            "GET", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        XCTAssertEqual(read.status, 401)
        XCTAssertEqual(try read.object()["error"] as? String, "invalid_token")
        let clients = try await server.oauthClients()
        XCTAssertTrue(clients.isEmpty)
        let token = try await tokenInfo(accessToken)
        XCTAssertEqual(token.status, "revoked")
    }

    func testAnAdministratorsDeletionOrRevocationMakesManagementAnswer401() async throws {
        let deleted = try await register()
        let revoked = try await register()
        let (_, refreshToken) = try await mint(revoked)
        let deletion = try await send(
            "DELETE", adminURL("oauth/clients/\(deleted.clientId)"), headers: ["Authorization": "Bearer \(adminToken)"])
        XCTAssertEqual(deletion.status, 204)
        let revocation = try await send(
            "POST", adminURL("oauth/clients/\(revoked.clientId)/revoke"),
            headers: ["Authorization": "Bearer \(adminToken)"])
        XCTAssertEqual(revocation.status, 200)
        for client in [deleted, revoked] {
            let read = try await send(
                "GET", client.registrationClientURI,
                headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
            XCTAssertEqual(read.status, 401)
        }
        let refreshed = try await refresh(revoked, refreshToken)
        XCTAssertEqual(refreshed.status, 401)
        XCTAssertEqual(try refreshed.object()["error"] as? String, "invalid_client")
    }

    func testAnExpiredRegistrationTokenStillDeletesButNoLongerReads() async throws {
        let client = try await register()
        clock.advance(28 * 86_400 + 1)
        let headers = ["Authorization": "Bearer \(client.registrationAccessToken)"]
        let read = try await send("GET", client.registrationClientURI, headers: headers)
        XCTAssertEqual(read.status, 401)
        let deleted = try await send("DELETE", client.registrationClientURI, headers: headers)
        XCTAssertEqual(deleted.status, 204)
    }

    func testManagementWithAnotherClientsTokenIs401() async throws {
        let first = try await register()
        let second = try await register()
        let read = try await send(
            "GET", first.registrationClientURI, headers: ["Authorization": "Bearer \(second.registrationAccessToken)"])
        XCTAssertEqual(read.status, 401)
    }
}
