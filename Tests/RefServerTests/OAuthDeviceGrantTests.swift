import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// The device authorization grant (RFC 8628) and Curity's token-binding matrix.
final class OAuthDeviceGrantTests: OAuthServerTestCase {
    struct DeviceAuthorization {
        var deviceCode: String
        var userCode: String
        var object: [String: Any]
    }

    func authorize(_ client: RegisteredClient, scope: String? = nil) async throws -> DeviceAuthorization {
        var parameters: [(String, String)] = []
        if let scope { parameters.append(("scope", scope)) }
        let result = try await sendForm(
            server.oauthDeviceAuthorizationEndpoint, parameters,
            headers: ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")])
        XCTAssertEqual(result.status, 200, String(decoding: result.body, as: UTF8.self))
        let object = try result.object()
        return DeviceAuthorization(
            deviceCode: try XCTUnwrap(object["device_code"] as? String),
            userCode: try XCTUnwrap(object["user_code"] as? String), object: object)
    }

    func poll(_ client: RegisteredClient, _ deviceCode: String, proof: String? = nil) async throws -> HTTPResult {
        var headers = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        if let proof { headers["DPoP"] = proof }
        return try await sendForm(
            server.oauthTokenEndpoint,
            [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode)],
            headers: headers)
    }

    func error(_ result: HTTPResult) throws -> String? { try result.object()["error"] as? String }

    func testTheDeviceAuthorizationResponse() async throws {
        let client = try await register()
        let authorization = try await authorize(client, scope: "read")
        let object = authorization.object
        XCTAssertNotNil(authorization.userCode.wholeMatch(of: /[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}/))
        let verification = try XCTUnwrap(object["verification_uri"] as? String)
        XCTAssertEqual(verification, server.baseURL.absoluteString + "/oauth/v2/oauth-device")
        XCTAssertEqual(object["verification_uri_complete"] as? String, verification + "?user_code=" + authorization.userCode)
        XCTAssertEqual(object["expires_in"] as? Int, 600)
        XCTAssertEqual(object["interval"] as? Int, 5)
        let page = try await send("GET", try XCTUnwrap(URL(string: try XCTUnwrap(object["verification_uri_complete"] as? String))))
        XCTAssertEqual(page.status, 200)
        XCTAssertTrue(String(decoding: page.body, as: UTF8.self).contains(authorization.userCode))

        let tooWide = try await sendForm(
            server.oauthDeviceAuthorizationEndpoint, [("scope", "admin")],
            headers: ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")])
        XCTAssertEqual(try error(tooWide), "invalid_scope")
        let anonymous = try await sendForm(server.oauthDeviceAuthorizationEndpoint, [("client_id", client.clientId)])
        XCTAssertEqual(anonymous.status, 401)
    }

    func testPendingSlowDownApprovalAndOneRedemption() async throws {
        let client = try await register()
        let authorization = try await authorize(client)
        let pending = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(pending.status, 400)
        XCTAssertEqual(try error(pending), "authorization_pending")
        // The server's clock has not moved: this poll comes too soon.
        let tooSoon = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(try error(tooSoon), "slow_down")
        let codes = try await server.oauthClients()
        XCTAssertEqual(codes.count, 1)
        clock.advance(6)
        // The interval grew by 5 s to 10 s: 6 s later is still too soon.
        let stillTooSoon = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(try error(stillTooSoon), "slow_down")
        clock.advance(16)
        let stillPending = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(try error(stillPending), "authorization_pending")

        let approval = try await send(
            "POST", adminURL("oauth/device/approve"), headers: ["Authorization": "Bearer \(adminToken)"],
            json: ["user_code": authorization.userCode.lowercased(), "subject": "alice"])
        XCTAssertEqual(approval.status, 200)
        clock.advance(21)
        let granted = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(granted.status, 200, String(decoding: granted.body, as: UTF8.self))
        let tokens = try granted.object()
        XCTAssertEqual(tokens["token_type"] as? String, "Bearer")
        XCTAssertEqual(tokens["scope"] as? String, "openid read")
        XCTAssertNotNil(tokens["refresh_token"] as? String)
        let accessToken = try XCTUnwrap(tokens["access_token"] as? String)
        let info = try await tokenInfo(accessToken)
        XCTAssertEqual(info.subject, "alice")

        clock.advance(21)
        let again = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(try error(again), "invalid_grant")
    }

    func testDeniedAndExpiredRequests() async throws {
        let client = try await register()
        let denied = try await authorize(client)
        let expired = try await authorize(client)
        let later = try await authorize(client)
        let denial = try await server.denyDevice(userCode: denied.userCode)
        XCTAssertEqual(denial, "denied")
        try await server.expireDevice(userCode: expired.userCode)
        let deniedPoll = try await poll(client, denied.deviceCode)
        XCTAssertEqual(try error(deniedPoll), "access_denied")
        let expiredPoll = try await poll(client, expired.deviceCode)
        XCTAssertEqual(try error(expiredPoll), "expired_token")
        clock.advance(601)
        let laterPoll = try await poll(client, later.deviceCode)
        XCTAssertEqual(try error(laterPoll), "expired_token")
        let unknown = try await server.approveDevice(userCode: "ZZZZ-ZZZZ", subject: "alice")
        XCTAssertNil(unknown)
    }

    func testAnotherClientCannotRedeemTheDeviceCode() async throws {
        let client = try await register()
        let other = try await register()
        let authorization = try await authorize(client)
        try await server.approveDevice(userCode: authorization.userCode, subject: "alice")
        let foreign = try await poll(other, authorization.deviceCode)
        XCTAssertEqual(try error(foreign), "invalid_grant")
        let granted = try await poll(client, authorization.deviceCode)
        XCTAssertEqual(granted.status, 200)
    }

    // MARK: the token-binding matrix (Curity's issue-token-bound-authorization-code)

    /// Runs a device login with or without a DPoP proof; returns the token response.
    func login(bound: Bool) async throws -> (HTTPResult, DPoPTestKey) {
        let client = try await register()
        let authorization = try await authorize(client)
        try await server.approveDevice(userCode: authorization.userCode, subject: "alice")
        let key = try DPoPTestKey()
        let proof = bound ? try key.proof("POST", server.oauthTokenEndpoint) : nil
        return (try await poll(client, authorization.deviceCode, proof: proof), key)
    }

    func testMatrixServerBoundClientBound() async throws {
        try await restart { $0.issuesTokenBoundTokens = true }
        let (result, key) = try await login(bound: true)
        XCTAssertEqual(result.status, 200, String(decoding: result.body, as: UTF8.self))
        XCTAssertEqual(try result.object()["token_type"] as? String, "DPoP")
        let refresh = try await tokenInfo(try XCTUnwrap(try result.object()["refresh_token"] as? String))
        XCTAssertEqual(refresh.jkt, key.jkt)
    }

    func testMatrixServerBoundClientUnbound() async throws {
        try await restart { $0.issuesTokenBoundTokens = true }
        let (result, _) = try await login(bound: false)
        XCTAssertEqual(result.status, 400)
        XCTAssertEqual(try error(result), "invalid_dpop_proof")
        let tokens = try await server.oauthTokens()
        XCTAssertTrue(tokens.isEmpty)
    }

    func testMatrixServerUnboundClientBound() async throws {
        let (result, key) = try await login(bound: true)
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(try result.object()["token_type"] as? String, "DPoP")
        let access = try await tokenInfo(try XCTUnwrap(try result.object()["access_token"] as? String))
        XCTAssertEqual(access.jkt, key.jkt)
    }

    func testMatrixServerUnboundClientUnbound() async throws {
        let (result, _) = try await login(bound: false)
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(try result.object()["token_type"] as? String, "Bearer")
        let refresh = try await tokenInfo(try XCTUnwrap(try result.object()["refresh_token"] as? String))
        XCTAssertNil(refresh.jkt)
    }

    func testBoundServerCanAnswerInvalidDPoPProofWith401Or403() async throws {
        try await restart { $0.issuesTokenBoundTokens = true }
        for status in [401, 403] {
            await server.setOAuthFault(.dpopErrorStatus(status), on: .token)
            let (result, _) = try await login(bound: false)
            XCTAssertEqual(result.status, status)
            XCTAssertEqual(try error(result), "invalid_dpop_proof")
        }
    }
}
