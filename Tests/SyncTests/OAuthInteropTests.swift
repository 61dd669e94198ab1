import Foundation
@testable import KeyManager
import RefServer
import ServerClients
@testable import Sync
import XCTest

/// The OAuth services in-process against the reference server in `oauthlib` mode: a server without DPoP that wants
/// `client_id` in the device authorization request and leaves the device endpoint out of discovery.
final class OAuthInteropTests: SyncTestCase {
    override var oauthConfiguration: OAuthServerConfiguration {
        var oauth = OAuthServerConfiguration(deviceCodeInterval: 1)
        oauth.adopt(.oauthlib)
        return oauth
    }

    override func setUp() async throws {
        try await super.setUp()
        try configure(.unbound)
        let connection = try ServerConnection.configured(in: manager, timeout: 5, environment: [:])
        _ = try await RegistrationService(manager: manager, connection: connection, home: home)
            .register(userId: "alice", softwareId: "keymgr-template", metadata: nil, scope: nil, initialAccessToken: nil)
    }

    func configure(_ binding: TokenBinding) throws {
        try manager.configureServer(ServerSettings(
            dialect: .oauth, baseURL: server.baseURL, tokenEndpoint: server.oauthTokenEndpoint,
            registrationEndpoint: server.oauthRegistrationEndpoint, revocationEndpoint: server.oauthRevocationEndpoint,
            deviceAuthorizationEndpoint: server.oauthDeviceAuthorizationEndpoint, tokenBinding: binding))
    }

    func tokenService() throws -> TokenService {
        TokenService(manager: manager, connection: try ServerConnection.configured(in: manager, timeout: 5, environment: [:]), home: home)
    }

    /// A device login approved at once (the server announces no interval: the first poll comes after 5 s).
    func login() async throws -> TokenSet {
        let service = DeviceLoginService(tokens: try tokenService())
        let authorization = try await service.start(userId: "alice", scope: nil)
        XCTAssertEqual(authorization.interval, 5)
        let approved = try await server.approveDevice(userCode: authorization.userCode, subject: "alice")
        XCTAssertNotNil(approved)
        return try await service.finish(userId: "alice", authorization)
    }

    /// Token endpoint and resource requests the server received, with their headers.
    func tokenAndResourceRequests() async -> [RecordedRequest] {
        await server.recordedRequests().filter { $0.target.hasPrefix("/oauth/v2/oauth-token") || $0.target.hasPrefix("/oauth/v2/oauth-userinfo") }
    }

    func assertServerRejected(_ body: () async throws -> Void, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            try await body()
            XCTFail("Bearer tokens to a --bound profile must be refused", file: file, line: line)
        } catch let error as any KeymgrFailure {
            XCTAssertEqual(error.code, .serverRejected, error.message, file: file, line: line)
            XCTAssertTrue(error.message.contains("Bearer"), error.message, file: file, line: line)
            XCTAssertTrue(error.message.contains("keymgr server set … --unbound"), error.message, file: file, line: line)
        } catch {
            XCTFail("unexpected \(error)", file: file, line: line)
        }
    }

    func testABoundLoginAnsweredWithBearerTokensStoresNothing() async throws {
        try configure(.bound)
        await assertServerRejected { _ = try await login() }
        XCTAssertNil(try manager.tokenSet(userId: "alice", serverName: "default"), "nothing stored")
        XCTAssertNil(try manager.dpopKey(userId: "alice", serverName: "default"))
        let polls = await tokenAndResourceRequests()
        XCTAssertFalse(polls.isEmpty)
        XCTAssertTrue(polls.allSatisfy { $0.headers["dpop"] != nil }, "the bound profile sent its proofs; the server ignored them")
        let issued = try await server.oauthTokens()
        XCTAssertTrue(issued.allSatisfy { $0.jkt == nil }, "the server issued Bearer tokens")
    }

    func testABoundProfileRefusesImportedBearerTokens() async throws {
        try configure(.bound)
        let clientId = try XCTUnwrap(try manager.registration(userId: "alice", serverName: "default")?.clientId)
        let answer = try await server.mintOAuthTokens(clientId: clientId, subject: "alice", jkt: nil)
        var minted = try XCTUnwrap(answer.objectValue)
        XCTAssertEqual(minted["token_type"], "Bearer")
        let json = Data(JSONValue.object(minted).canonicalJSON().utf8)
        await assertServerRejected { _ = try tokenService().importTokens(userId: "alice", json: json) }
        XCTAssertNil(try manager.tokenSet(userId: "alice", serverName: "default"), "nothing stored")
        // Lower-case `token_type` is still DPoP.
        minted["token_type"] = "dpop"
        let imported = try tokenService().importTokens(userId: "alice", json: Data(JSONValue.object(minted).canonicalJSON().utf8))
        XCTAssertEqual(imported.tokenType, "DPoP")
    }

    /// Tokens bound under an earlier setting, then the server stops binding: the refresh carries the proof, the
    /// answer is Bearer and refused; the server spent the old refresh token (RFC 6749 §6), so the bound profile
    /// discards the tokens it had (issue 35) rather than keep ones the server retired.
    func testABoundRefreshAnsweredWithBearerTokensDiscardsTheStoredTokens() async throws {
        let unbound = try await login()
        XCTAssertEqual(unbound.tokenType, "Bearer")
        let secrets = try manager.tokenSecrets(userId: "alice", serverName: "default")
        let key = try DPoPKey.generate()
        let bound = try manager.storeTokens(
            userId: "alice", serverName: "default", clientId: unbound.clientId,
            issued: IssuedTokens(accessToken: try XCTUnwrap(secrets.accessToken), tokenType: "DPoP", expiresIn: 300,
                                 refreshToken: secrets.refreshToken, idToken: nil, scope: unbound.scope),
            dpopKey: key, event: "tokens.login")
        try configure(.bound)
        await server.clearRecordedRequests()
        await assertServerRejected { _ = try await tokenService().refresh(userId: "alice", seen: nil) }
        XCTAssertNotNil(bound.jkt)
        XCTAssertNil(try manager.tokenSet(userId: "alice", serverName: "default"), "nothing stored, the old tokens discarded")
        let refreshes = await tokenAndResourceRequests()
        XCTAssertEqual(refreshes.count, 1)
        XCTAssertNotNil(refreshes.first?.headers["dpop"], "the refresh carried a proof")
    }

    /// An `--unbound` profile sends no DPoP header, even holding a DPoP key from an earlier `--bound` setting.
    func testAnUnboundProfileNeverSendsADPoPHeader() async throws {
        let first = try await login()
        let secrets = try manager.tokenSecrets(userId: "alice", serverName: "default")
        _ = try manager.storeTokens(
            userId: "alice", serverName: "default", clientId: first.clientId,
            issued: IssuedTokens(accessToken: try XCTUnwrap(secrets.accessToken), tokenType: "Bearer", expiresIn: 300,
                                 refreshToken: secrets.refreshToken, idToken: nil, scope: first.scope),
            dpopKey: try DPoPKey.generate(), event: "tokens.login")
        XCTAssertNotNil(try manager.dpopKey(userId: "alice", serverName: "default"), "a key from an earlier --bound setting")
        let refreshed = try await tokenService().refresh(userId: "alice", seen: nil)
        XCTAssertEqual(refreshed.tokenType, "Bearer")
        let response = try await tokenService().callResource(userId: "alice", method: "GET", url: server.oauthUserinfoEndpoint)
        XCTAssertEqual(response.status, 200, String(decoding: response.body, as: UTF8.self))
        let requests = await tokenAndResourceRequests()
        XCTAssertGreaterThanOrEqual(requests.count, 3, "polls, a refresh and a resource call")
        XCTAssertTrue(requests.allSatisfy { $0.headers["dpop"] == nil }, "no DPoP header from an --unbound profile")
    }

    func testDiscoveryWithoutADeviceEndpointPointsAtTheFlag() async throws {
        var change = ServerSettingsChange()
        change.dialect = .oauth
        change.baseURL = server.baseURL
        change.tokenBinding = .unbound
        change.discovered = try await DiscoveryService(timeout: 5).endpoints(issuer: server.oauthIssuer)
        let discovered = try change.applied(to: nil, name: "default", at: Date())
        XCTAssertNotNil(discovered.tokenEndpoint)
        XCTAssertNil(discovered.deviceAuthorizationEndpoint, "RFC 8628 §4: the server need not list it")
        try manager.configureServer(discovered)
        do {
            _ = try await DeviceLoginService(tokens: try tokenService()).start(userId: "alice", scope: nil)
            XCTFail("no device authorization endpoint: a configuration error")
        } catch let error as any KeymgrFailure {
            XCTAssertEqual(error.code, .config)
            XCTAssertTrue(error.message.contains("--device-authorization-endpoint"), error.message)
        }
    }
}
