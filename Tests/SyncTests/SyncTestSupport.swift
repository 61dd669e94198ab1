import Foundation
@testable import KeyManager
import RefServer
import ServerClients
@testable import Sync
import Logging
import XCTest

/// A keymgr store and a reference server on 127.0.0.1 (port chosen by the OS) per test, both in temporary files.
class SyncTestCase: XCTestCase {
    var scratch: URL!
    var server: ReferenceServer!
    var manager: KeyManager!
    let adminToken = "admin-token-for-tests"
    let password = "correct horse battery staple"
    /// The authorization server's settings `setUp` starts the reference server with.
    var oauthConfiguration: OAuthServerConfiguration { OAuthServerConfiguration() }

    override func setUp() async throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-sync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        server = try await ReferenceServer.start(configuration: ReferenceServerConfiguration(
            databasePath: scratch.appendingPathComponent("refserver.db").path, adminToken: adminToken, oauth: oauthConfiguration))
        var options = InitOptions()
        options.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        options.deviceName = "test kiosk"
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
        let credential = scratch.appendingPathComponent("admin.token")
        try Data("\(adminToken)\n".utf8).write(to: credential)
        try manager.configureServer(ServerSettings(dialect: .pingam, baseURL: server.baseURL, credentialFile: credential.path))
    }

    override func tearDown() async throws {
        await server?.stop()
        server = nil
        manager = nil
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    var home: StoreLocation { StoreLocation(url: scratch.appendingPathComponent("home")) }

    func connection(timeout: TimeInterval = 2) throws -> ServerConnection {
        try ServerConnection.configured(in: manager, timeout: timeout, environment: [:])
    }

    func journeys(_ connection: ServerConnection? = nil) throws -> JourneyService {
        try JourneyService(manager: manager, connection: try connection ?? self.connection(timeout: 5))
    }

    func service(timeout: TimeInterval = 2) throws -> SyncService {
        SyncService(manager: manager, connection: try connection(timeout: timeout), home: home, logger: Logger(label: "keymgr.sync.test"))
    }

    func sync(_ configure: (inout SyncOptions) -> Void = { _ in }) async throws -> SyncReport {
        var options = SyncOptions()
        configure(&options)
        return try await service().run(options)
    }

    /// Registers `username` end to end through the binding journey; returns the new key.
    @discardableResult
    func register(_ username: String) async throws -> UserKey {
        try await server.addUser(username, password: password)
        let password = password
        let bound = try await journeys().bind(
            journey: "RegisterDevice", username: username, userId: username, password: { SecretBytes(utf8: password) },
            requestedAuthType: nil, newPIN: { throw KeyManagerError(.abort, "no PIN in this journey") })
        return bound.key
    }

    /// Registers users and runs one sync so the store mirrors the server: later runs start in step.
    func registerSettled(_ usernames: [String]) async throws -> [String: UserKey] {
        var keys: [String: UserKey] = [:]
        for name in usernames { keys[name] = try await register(name) }
        let settle = try await sync()
        XCTAssertTrue(settle.errors.isEmpty, "\(settle.errors)")
        XCTAssertEqual(settle.inSync + settle.registered.count, 0, "journeys registered them; the settling run only mirrors")
        return keys
    }

    func key(_ kid: String) throws -> UserKey? {
        try manager.allKeys().first { $0.kid == kid }
    }

    func auditCount() throws -> Int { try manager.auditEntries().count }
}
