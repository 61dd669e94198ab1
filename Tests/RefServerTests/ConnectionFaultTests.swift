import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// The faults below HTTP (`connectionReset`, `truncatedBody`, `slowBody`) on both dialects, read byte by byte over
/// a plain socket so what the client gets is plain to see.
final class ConnectionFaultTests: ServerTestCase {
    /// What came back on one connection: the bytes, and the error that ended the reading (nil for an orderly end).
    struct RawExchange {
        var bytes: Data
        var errorNumber: Int32?

        var text: String { String(decoding: bytes, as: UTF8.self) }

        /// The announced `Content-Length` and the body bytes that arrived.
        var contentLength: Int? {
            for line in text.components(separatedBy: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
            }
            return nil
        }

        var body: Data {
            guard let range = bytes.range(of: Data("\r\n\r\n".utf8)) else { return Data() }
            return bytes[range.upperBound...]
        }
    }

    /// Sends one HTTP/1.1 request on a new connection and reads until the server closes it.
    func exchange(_ method: String, _ url: URL, headers: [String: String], body: String = "") throws -> RawExchange {
        let port = try XCTUnwrap(url.port)
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(socketFD, 0)
        defer { close(socketFD) }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        XCTAssertEqual(connected, 0, "connect: \(errno)")
        var target = url.path
        if let query = url.query { target += "?" + query }
        var request = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        request += "Content-Length: \(body.utf8.count)\r\n\r\n" + body
        _ = request.withCString { send(socketFD, $0, strlen($0), 0) }
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(socketFD, &buffer, buffer.count, 0)
            if count > 0 { received.append(contentsOf: buffer[0..<count]); continue }
            return RawExchange(bytes: received, errorNumber: count == 0 ? nil : errno)
        }
    }

    func testConnectionResetSendsNothingAndResets() async throws {
        _ = try await seedDevice(user: "alice")
        await server.setFault(.connectionReset, forUser: "alice", count: 1)
        let reset = try exchange("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertTrue(reset.bytes.isEmpty, "not a byte of an answer: \(reset.text)")
        XCTAssertEqual(reset.errorNumber, ECONNRESET, "a reset, not an orderly close")
        let after = try exchange("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertTrue(after.text.hasPrefix("HTTP/1.1 200"), "count 1 expires: \(after.text)")
    }

    func testTruncatedBodyAnnouncesTheWholeAndSendsHalf() async throws {
        _ = try await seedDevice(user: "alice")
        let whole = try exchange("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        await server.setFault(.truncatedBody, forUser: "alice")
        let cut = try exchange("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertTrue(cut.text.hasPrefix("HTTP/1.1 200"), cut.text)
        let length = try XCTUnwrap(cut.contentLength)
        XCTAssertEqual(length, whole.body.count)
        XCTAssertEqual(cut.body.count, length / 2, "half the announced body, then the connection closes")
        XCTAssertEqual(cut.body, whole.body.prefix(length / 2))
    }

    func testSlowBodyDeliversTheWholeAnswer() async throws {
        _ = try await seedDevice(user: "alice")
        await server.setFault(.slowBody(seconds: 0.3), forUser: "alice")
        let slow = try exchange("GET", devicesURL(user: "alice"), headers: deviceHeaders)
        XCTAssertEqual(slow.contentLength, slow.body.count)
        let listing = try XCTUnwrap(try JSONSerialization.jsonObject(with: slow.body) as? [String: Any])
        XCTAssertEqual((listing["result"] as? [Any])?.count, 1)
        XCTAssertEqual(Fault(json: .object(["fault": "slowBody", "seconds": 2])), .slowBody(seconds: 2))
        XCTAssertEqual(Fault(json: .object(["fault": "connectionReset"])), .connectionReset)
        XCTAssertEqual(Fault(json: .object(["fault": "truncatedBody"])), .truncatedBody)
    }

    func testOAuthEndpointsResetAndCut() async throws {
        let discovery = server.baseURL.appendingPathComponent(".well-known/openid-configuration")
        let whole = try exchange("GET", discovery, headers: [:])
        await server.setOAuthFault(.connectionReset, on: .discovery, count: 1)
        let reset = try exchange("GET", discovery, headers: [:])
        XCTAssertTrue(reset.bytes.isEmpty, reset.text)
        XCTAssertEqual(reset.errorNumber, ECONNRESET)
        await server.setOAuthFault(.truncatedBody, on: .discovery, count: 1)
        let cut = try exchange("GET", discovery, headers: [:])
        XCTAssertEqual(cut.contentLength, whole.body.count)
        XCTAssertEqual(cut.body.count, whole.body.count / 2)
        await server.setOAuthFault(.slowBody(seconds: 0.2), on: .discovery, count: 1)
        let slow = try exchange("GET", discovery, headers: [:])
        XCTAssertEqual(slow.body, whole.body)
    }

    func testOAuthHugeBodyIsTenMebibytesOfJSON() async throws {
        await server.setOAuthFault(.hugeBody, on: .token, count: 1)
        let huge = try exchange("POST", server.oauthTokenEndpoint, headers: ["Content-Type": "application/x-www-form-urlencoded"],
                                body: "grant_type=refresh_token&refresh_token=x")
        XCTAssertTrue(huge.text.hasPrefix("HTTP/1.1 200"))
        XCTAssertGreaterThan(huge.body.count, 10 * 1024 * 1024)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: huge.body) as? [String: Any])
        XCTAssertEqual(object["access_token"] as? String, "padded")
        XCTAssertEqual(OAuthFault(json: .object(["fault": "hugeBody"])), .hugeBody)
        XCTAssertEqual(OAuthFault(json: .object(["fault": "slowBody", "seconds": 1])), .slowBody(seconds: 1))
    }
}
