import Foundation
@testable import KeyManager
import RefServer
import ServerClients
@testable import Sync
import XCTest

/// The OAuth services in-process against the reference server with Curity's strictest settings: bound tokens,
/// server nonces at the token endpoint and at the resource.
final class OAuthServiceTests: XCTestCase {
    var scratch: URL!
    var server: ReferenceServer!
    var manager: KeyManager!

    override func setUp() async throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-oauth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        server = try await ReferenceServer.start(configuration: ReferenceServerConfiguration(
            databasePath: scratch.appendingPathComponent("refserver.db").path, adminToken: "admin",
            oauth: OAuthServerConfiguration(issuesTokenBoundTokens: true, requiresDPoPNonce: true,
                                            resourceRequiresDPoPNonce: true, deviceCodeInterval: 1)))
        var options = InitOptions()
        options.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        options.deviceName = "test kiosk"
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
        try manager.configureServer(ServerSettings(
            dialect: .oauth, baseURL: server.baseURL, tokenEndpoint: server.oauthTokenEndpoint,
            registrationEndpoint: server.oauthRegistrationEndpoint, revocationEndpoint: server.oauthRevocationEndpoint,
            deviceAuthorizationEndpoint: server.oauthDeviceAuthorizationEndpoint, tokenBinding: .bound))
    }

    override func tearDown() async throws {
        await server?.stop()
        server = nil
        manager = nil
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    var home: StoreLocation { StoreLocation(url: scratch.appendingPathComponent("home")) }

    func tokenService() throws -> TokenService {
        TokenService(manager: manager, connection: try ServerConnection.configured(in: manager, timeout: 5, environment: [:]), home: home)
    }

    func testLoginRefreshAndAResourceCallFollowServerNonces() async throws {
        let connection = try ServerConnection.configured(in: manager, timeout: 5, environment: [:])
        let registration = try await RegistrationService(manager: manager, connection: connection, home: home)
            .register(userId: "alice", softwareId: "keymgr-template", metadata: nil, scope: nil, initialAccessToken: nil)
        let login = DeviceLoginService(tokens: try tokenService())
        let authorization = try await login.start(userId: "alice", scope: nil)
        let approved = try await server.approveDevice(userCode: authorization.userCode, subject: "alice")
        XCTAssertNotNil(approved)
        let set = try await login.finish(userId: "alice", authorization)
        XCTAssertTrue(set.bound)
        XCTAssertEqual(set.clientId, registration.clientId)

        // A new process knows no nonce: the resource answers 401 use_dpop_nonce and the call is retried once.
        try await server.rotateDPoPNonces()
        let response = try await tokenService().callResource(userId: "alice", method: "GET", url: server.oauthUserinfoEndpoint)
        XCTAssertEqual(response.status, 200, String(decoding: response.body, as: UTF8.self))
        let body = try JSONDecoder().decode(JSONValue.self, from: response.body)
        XCTAssertEqual(body["sub"], "alice")

        // A refresh in another "process" (fresh service, no nonce known) also follows the token endpoint's nonce.
        let refreshed = try await tokenService().refresh(userId: "alice", seen: set.revision)
        XCTAssertNotEqual(refreshed.revision, set.revision)
        let tokens = try await server.oauthTokens()
        XCTAssertTrue(tokens.allSatisfy { $0.jkt == set.jkt }, "every token is bound to the user's DPoP key")

        // (The nonce retry presents the refresh token twice; the first attempt is refused before it is spent.)
        let refreshTokens = tokens.filter { $0.kind == "refresh" }
        XCTAssertEqual(refreshTokens.count, 2, "one login, one refresh")
        XCTAssertEqual(refreshTokens.filter { $0.status == "active" }.map(\.token),
                       [try XCTUnwrap(try manager.tokenSecrets(userId: "alice", serverName: "default").refreshToken)])

        // Two refreshes at once in one process wait for each other on the per-user lock: one spends the token,
        // the other finds the new tokens stored.
        let current = try XCTUnwrap(try manager.tokenSet(userId: "alice", serverName: "default"))
        let service = try tokenService()
        async let first = service.refresh(userId: "alice", seen: current.revision)
        async let second = service.refresh(userId: "alice", seen: current.revision)
        let results = try await [first, second]
        XCTAssertEqual(results[0].revision, results[1].revision, "both end with the same tokens")
        let refreshCount = try await server.oauthTokens().filter { $0.kind == "refresh" }.count
        XCTAssertEqual(refreshCount, 3, "one more refresh, not two")
    }
}
