import Foundation
@testable import KeyManager
import ServerClients
@testable import Sync
import Synchronization
import XCTest

/// `RegistrationService` holds every `registration_client_uri` a server answers with to the profile's rules, with a
/// scripted HTTP client that records where keymgr sent what: the registration access token goes nowhere else.
final class ManagementURITests: XCTestCase {
    /// Answers registrations (POST) with `clientURI`, management reads (GET) with `readURI`, and records requests.
    final class ScriptedServer: HTTPClient {
        let clientURI: String
        let readURI: Mutex<String>
        let sent = Mutex<[HTTPRequest]>([])

        init(clientURI: String, readURI: String? = nil) {
            self.clientURI = clientURI
            self.readURI = Mutex(readURI ?? clientURI)
        }

        func send(_ request: HTTPRequest) async throws -> HTTPResponse {
            sent.withLock { $0.append(request) }
            let uri = request.method == "POST" ? clientURI : readURI.withLock { $0 }
            let body = #"{"client_id":"c1","client_secret":"s","registration_access_token":"rat","registration_client_uri":"\#(uri)"}"#
            let status = request.method == "DELETE" ? 204 : request.method == "POST" ? 201 : 200
            return HTTPResponse(status: status, headers: ["content-type": "application/json"], body: Data(body.utf8))
        }

        var hosts: [String] { sent.withLock { $0.map { "\($0.url.scheme ?? "")://\($0.url.host ?? ""):\($0.url.port ?? 0)" } } }
    }

    var scratch: URL!
    var manager: KeyManager!

    override func setUpWithError() throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-uri-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        var options = InitOptions()
        options.argon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)
        options.deviceName = "test kiosk"
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
    }

    override func tearDownWithError() throws {
        manager = nil
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    var home: StoreLocation { StoreLocation(url: scratch.appendingPathComponent("home")) }

    func service(_ http: ScriptedServer, allowInsecureHTTP: Bool = false) throws -> RegistrationService {
        let settings = ServerSettings(dialect: .oauth, baseURL: try XCTUnwrap(URL(string: "https://as.example.com/oauth")),
                                      registrationEndpoint: URL(string: "https://as.example.com/oauth/register"),
                                      allowInsecureHTTP: allowInsecureHTTP)
        try manager.configureServer(settings)
        return RegistrationService(manager: manager, connection: ServerConnection(settings: settings, http: http, environment: [:]),
                                   home: home)
    }

    func testARegistrationClientURIMustShareTheOriginOfTheRegistrationEndpoint() async throws {
        let refused = ["https://evil.example.com/oauth/register/c1", "http://as.example.com/oauth/register/c1",
                       "https://as.example.com:8443/oauth/register/c1", "ftp://as.example.com/c1", "not a url"]
        for uri in refused {
            let http = ScriptedServer(clientURI: uri)
            do {
                _ = try await service(http).register(userId: "alice", softwareId: "t", metadata: nil, scope: nil, initialAccessToken: nil)
                XCTFail("\(uri) was accepted")
            } catch let error as any KeymgrFailure {
                XCTAssertEqual(error.code, .badInput, "\(uri): \(error.message)")
            }
            XCTAssertNil(try manager.registration(userId: "alice", serverName: "default"), "\(uri) was stored")
        }
        // The same origin, with its default port spelled out, is the server's own.
        let http = ScriptedServer(clientURI: "https://AS.example.com:443/oauth/register/c1")
        let registration = try await service(http).register(userId: "alice", softwareId: "t", metadata: nil, scope: nil,
                                                              initialAccessToken: nil)
        XCTAssertEqual(registration.registrationClientURI?.host, "AS.example.com")
    }

    func testAReadMovingTheClientElsewhereIsRefusedAndDeleteGoesOnlyToTheServer() async throws {
        let http = ScriptedServer(clientURI: "https://as.example.com/oauth/register/c1", readURI: "https://evil.example.com/c1")
        let service = try service(http)
        _ = try await service.register(userId: "alice", softwareId: "t", metadata: nil, scope: nil, initialAccessToken: nil)
        do {
            _ = try await service.check(userId: "alice")
            XCTFail("a read naming another origin was stored")
        } catch let error as any KeymgrFailure {
            XCTAssertEqual(error.code, .badInput, error.message)
        }
        XCTAssertEqual(try manager.registration(userId: "alice", serverName: "default")?.registrationClientURI?.host, "as.example.com")
        try await service.delete(userId: "alice")
        XCTAssertEqual(Set(http.hosts), ["https://as.example.com:0"], "every request went to the server's own origin")
    }
}
