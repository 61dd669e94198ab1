import Foundation
import XCTest

@testable import RefServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The admin token every test server uses.
let adminToken = "test-admin-token"

/// The headers PingAM's device REST wants: the admin credential and resource version 1.0.
let deviceHeaders = ["Authorization": "Bearer \(adminToken)", "Accept-API-Version": "resource=1.0, protocol=1.0"]

/// One HTTP exchange's result.
struct HTTPResult {
    var status: Int
    var headers: [String: String]
    var body: Data

    /// The body as a JSON object; fails the test when it is not one.
    func object(file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let value = try JSONSerialization.jsonObject(with: body)
        return try XCTUnwrap(value as? [String: Any], "not a JSON object", file: file, line: line)
    }

    /// A header value, case-insensitively.
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// Sends one request with URLSession (no caching, no cookies).
func send(
    _ method: String, _ url: URL, headers: [String: String] = [:], json: Any? = nil, timeout: TimeInterval = 30
) async throws -> HTTPResult {
    var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
    request.httpMethod = method
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    if let json {
        request.httpBody = try JSONSerialization.data(withJSONObject: json)
        if headers.keys.contains(where: { $0.lowercased() == "content-type" }) == false {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpShouldSetCookies = false
    let session = URLSession(configuration: configuration)
    defer { session.finishTasksAndInvalidate() }
    let (data, response) = try await session.data(for: request)
    let http = try XCTUnwrap(response as? HTTPURLResponse)
    var fields: [String: String] = [:]
    for (name, value) in http.allHeaderFields {
        if let name = name as? String, let value = value as? String { fields[name] = value }
    }
    return HTTPResult(status: http.statusCode, headers: fields, body: data)
}

/// A fresh database path in a fresh temporary directory.
func temporaryDatabasePath() throws -> String {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("refserver-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.appendingPathComponent("refserver.sqlite").path
}

/// A base class that starts an in-process server on an OS-chosen port before each test.
class ServerTestCase: XCTestCase {
    var server: ReferenceServer!
    var databasePath = ""

    /// The configuration each test starts with; subclasses may change it.
    func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        ReferenceServerConfiguration(databasePath: databasePath, adminToken: adminToken)
    }

    override func setUp() async throws {
        databasePath = try temporaryDatabasePath()
        server = try await ReferenceServer.start(configuration: makeConfiguration(databasePath: databasePath))
    }

    override func tearDown() async throws {
        await server?.stop()
        server = nil
        try? FileManager.default.removeItem(atPath: (databasePath as NSString).deletingLastPathComponent)
    }

    /// A record for `user` with a fresh kid, as a binding would have stored it.
    func seedDevice(user: String, name: String = "kiosk", deviceId: String = "device-1") async throws -> BoundDevice {
        let kid = UUID().uuidString
        let device = BoundDevice(
            uuid: kid, realmPath: "/realms/root", user: user, deviceId: deviceId, deviceName: name,
            createdDate: 1_700_000_000_000, lastAccessDate: 1_700_000_000_000,
            key: ["kty": "EC", "crv": "P-256", "x": "x", "y": "y", "kid": kid, "use": "sig", "alg": "ES256"])
        try await server.addDevice(device)
        return device
    }

    /// `{base}/json/realms/root/users/{user}/devices/2fa/binding[/{uuid}]?query`.
    func devicesURL(user: String, uuid: String? = nil, query: String? = "_queryFilter=true") -> URL {
        var text = server.deviceCollectionURL(user: user).absoluteString
        if let uuid { text += "/" + PathEncoding.segment(uuid) }
        if let query { text += "?" + query }
        return URL(string: text)!
    }

    func adminURL(_ path: String) -> URL {
        server.baseURL.appendingPathComponent("__refserver").appendingPathComponent(path)
    }
}
