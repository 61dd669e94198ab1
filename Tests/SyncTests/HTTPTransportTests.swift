import Foundation
import RefServer
import ServerClients
import XCTest

/// The HTTP transport against a real server on loopback: what URLSession on Linux got wrong.
final class HTTPTransportTests: XCTestCase {
    func testA401WithABasicChallengeIsAnsweredNotHung() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-http-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let server = try await ReferenceServer.start(configuration: ReferenceServerConfiguration(
            databasePath: scratch.appendingPathComponent("refserver.db").path, adminToken: "admin"))
        // A wrong client secret at an RFC 6749 token endpoint: 401 with `WWW-Authenticate: Basic`.
        let request = HTTPRequest(method: "POST", url: server.oauthTokenEndpoint, headers: [
            "Authorization": "Basic " + Data("nobody:wrong".utf8).base64EncodedString(),
            "Content-Type": "application/x-www-form-urlencoded",
        ], body: Data("grant_type=refresh_token&refresh_token=x".utf8))
        let started = Date()
        let response = try await CurlHTTPClient(timeout: 20).send(request)
        await server.stop()
        XCTAssertEqual(response.status, 401)
        XCTAssertTrue(response.headers["www-authenticate"]?.hasPrefix("Basic") == true, "\(response.headers)")
        XCTAssertTrue(String(decoding: response.body, as: UTF8.self).contains("invalid_client"))
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "answered before the client's own timeout")
    }

    func testABodyOverTheLimitIsMalformedAndAClosedPortUnavailable() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-http-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let server = try await ReferenceServer.start(configuration: ReferenceServerConfiguration(
            databasePath: scratch.appendingPathComponent("refserver.db").path, adminToken: "admin"))
        let discovery = server.baseURL.appendingPathComponent(".well-known/openid-configuration")
        do {
            _ = try await CurlHTTPClient(timeout: 10, maxBodyBytes: 16).send(HTTPRequest(method: "GET", url: discovery))
            XCTFail("a body over the limit was accepted")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .malformed, error.message)
        }
        let whole = try await CurlHTTPClient(timeout: 10).send(HTTPRequest(method: "GET", url: discovery))
        XCTAssertEqual(whole.status, 200)
        let closed = server.baseURL
        await server.stop()
        do {
            _ = try await CurlHTTPClient(timeout: 5).send(HTTPRequest(method: "GET", url: closed))
            XCTFail("a stopped server answered")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .unavailable, error.message)
        }
    }
}
