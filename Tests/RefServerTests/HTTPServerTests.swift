import Foundation
import XCTest

@testable import RefServer

/// The reference server's own HTTP/1.1 server, spoken to over plain sockets: keep-alive, request bodies by length,
/// by chunks and after `100 Continue`, the refusals (413, 400), the `Date` header, and a stop that closes everything.
final class HTTPServerTests: ServerTestCase {
    override func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        ReferenceServerConfiguration(databasePath: databasePath, adminToken: adminToken, maxRequestBodySize: 4096)
    }

    /// One client connection, read answer by answer.
    final class RawConnection {
        let descriptor: Int32
        private var pending = Data()

        /// An answer as it came: status line, headers (names lower-cased, repeats joined) and body.
        struct Answer {
            var statusLine: String
            var headers: [String: String]
            var body: Data
            var status: Int { Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0 }
        }

        /// Connects to 127.0.0.1:`port`; the error when it cannot.
        static func connect(port: Int) -> Result<RawConnection, POSIXError> {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var timeout = timeval(tv_sec: 20, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                let code = POSIXErrorCode(rawValue: errno) ?? .EIO
                close(descriptor)
                return .failure(POSIXError(code))
            }
            return .success(RawConnection(descriptor: descriptor))
        }

        private init(descriptor: Int32) { self.descriptor = descriptor }

        deinit { close(descriptor) }

        func send(_ text: String) {
            _ = text.withCString { Glibc.send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        }

        /// Reads more bytes; false at the end of the stream (or an error).
        private func fill() -> Bool {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            guard count > 0 else { return false }
            pending.append(contentsOf: buffer[0..<count])
            return true
        }

        /// The next answer (its body by `Content-Length`); nil when the connection ended first.
        func answer() -> Answer? {
            var end = pending.range(of: Data("\r\n\r\n".utf8))
            while end == nil {
                guard fill() else { return nil }
                end = pending.range(of: Data("\r\n\r\n".utf8))
            }
            guard let end else { return nil }
            let lines = String(decoding: pending[pending.startIndex..<end.lowerBound], as: UTF8.self)
                .components(separatedBy: "\r\n")
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let name = line[..<colon].lowercased()
                let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                headers[name] = headers[name].map { "\($0), \(value)" } ?? value
            }
            pending = Data(pending[end.upperBound...])
            let length = Int(headers["content-length"] ?? "0") ?? 0
            while pending.count < length {
                guard fill() else { return nil }
            }
            let body = Data(pending.prefix(length))
            pending = Data(pending.dropFirst(length))
            return Answer(statusLine: lines[0], headers: headers, body: body)
        }

        /// Whether the server closed the connection (an orderly end with nothing more sent).
        func isClosedByServer() -> Bool {
            pending.isEmpty && !fill()
        }
    }

    private func connection() throws -> RawConnection {
        try RawConnection.connect(port: XCTUnwrap(server.baseURL.port)).get()
    }

    private var authorization: String { "Authorization: Bearer \(adminToken)\r\n" }

    func testKeepAliveAnswersRequestsOneAfterAnotherOnOneConnection() throws {
        let client = try connection()
        for _ in 0..<3 {
            client.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\n")
            let answer = try XCTUnwrap(client.answer(), "the connection stays open for the next request")
            XCTAssertEqual(answer.statusLine, "HTTP/1.1 200 OK")
            XCTAssertNil(answer.headers["connection"])
        }
        // Two requests sent at once (pipelined) are answered in order.
        client.send(
            "GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\nGET /__refserver/users HTTP/1.1\r\nHost: x\r\n\(authorization)\r\n")
        XCTAssertEqual(client.answer()?.status, 200)
        let users = try XCTUnwrap(client.answer())
        XCTAssertEqual(users.status, 200)
        XCTAssertTrue(String(decoding: users.body, as: UTF8.self).contains("\"result\""))
        // `Connection: close` is honoured and said.
        client.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        XCTAssertEqual(client.answer()?.headers["connection"], "close")
        XCTAssertTrue(client.isClosedByServer())
    }

    func testHTTP10RequestIsAnsweredAndTheConnectionClosed() throws {
        let client = try connection()
        client.send("GET /__refserver/health HTTP/1.0\r\n\r\n")
        let answer = try XCTUnwrap(client.answer())
        XCTAssertEqual(answer.statusLine, "HTTP/1.0 200 OK")
        XCTAssertTrue(client.isClosedByServer())
    }

    func testChunkedBodyIsReadWhole() async throws {
        let client = try connection()
        let body = #"{"username":"chunky","password":"Ch4ngeit"}"#
        let (first, second) = (body.prefix(10), body.dropFirst(10))
        client.send(
            "POST /__refserver/users HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Type: application/json\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n"
                + "\(String(first.utf8.count, radix: 16));ext=1\r\n\(first)\r\n"
                + "\(String(second.utf8.count, radix: 16))\r\n\(second)\r\n0\r\nX-Trailer: t\r\n\r\n")
        XCTAssertEqual(client.answer()?.status, 201)
        let users = try await server.users()
        XCTAssertEqual(users.map(\.username), ["chunky"])
        client.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(client.answer()?.status, 200, "the connection goes on after a chunked body")
    }

    func testExpectContinueIsAnsweredBeforeTheBodyIsSent() async throws {
        let client = try connection()
        let body = #"{"username":"patient","password":"Ch4ngeit"}"#
        client.send(
            "POST /__refserver/users HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\nExpect: 100-continue\r\n\r\n")
        let interim = try XCTUnwrap(client.answer())
        XCTAssertEqual(interim.statusLine, "HTTP/1.1 100 Continue")
        client.send(body)
        XCTAssertEqual(client.answer()?.status, 201)
        let users = try await server.users()
        XCTAssertEqual(users.map(\.username), ["patient"])
    }

    func testBodyOverTheLimitIsRefusedWith413() throws {
        let announced = try connection()
        announced.send(
            "POST /__refserver/users HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Length: 5000\r\n"
                + "Expect: 100-continue\r\n\r\n")
        let refused = try XCTUnwrap(announced.answer(), "413 at once, no 100 Continue")
        XCTAssertEqual(refused.status, 413)
        XCTAssertEqual(refused.headers["connection"], "close")
        let error = try XCTUnwrap(try JSONSerialization.jsonObject(with: refused.body) as? [String: Any])
        XCTAssertEqual(error["code"] as? Int, 413)
        XCTAssertTrue(announced.isClosedByServer())

        let chunked = try connection()
        let chunk = String(repeating: "a", count: 3000)
        chunked.send(
            "POST /__refserver/users HTTP/1.1\r\nHost: x\r\n\(authorization)Transfer-Encoding: chunked\r\n\r\n"
                + "bb8\r\n\(chunk)\r\nbb8\r\n\(chunk)\r\n0\r\n\r\n")
        XCTAssertEqual(chunked.answer()?.status, 413)
    }

    func testMalformedRequestsAreAnswered400AndClosed() throws {
        for request in [
            "NOT-HTTP\r\n\r\n",
            "GET /__refserver/health HTTP/2.0\r\n\r\n",
            "GET /__refserver/health HTTP/1.1\r\nNo colon here\r\n\r\n",
            "GET /__refserver/health HTTP/1.1\r\nSpace before : colon\r\n\r\n",
            "POST /__refserver/users HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd",
            "POST /__refserver/users HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST /__refserver/users HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            // A sign is not a hex digit: a negative size once reached the body's read as a range that traps.
            "POST /__refserver/users HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n0\r\n\r\n",
            "POST /__refserver/users HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n+1\r\nx\r\n0\r\n\r\n",
        ] {
            let client = try connection()
            client.send(request)
            let answer = try XCTUnwrap(client.answer(), request)
            XCTAssertEqual(answer.status, 400, request)
            XCTAssertEqual(answer.headers["connection"], "close", request)
            XCTAssertTrue(client.isClosedByServer(), request)
        }
    }

    func testHeaderNamesIgnoreCaseAndRepeatedHeadersKeepTheirOrder() async throws {
        let client = try connection()
        client.send(
            "GET /json/realms/root/users/a%2Fb/devices/2fa/binding?_queryFilter=true HTTP/1.1\r\nHost: x\r\n"
                + "cOOKIE: first=1\r\nCookie: second=2\r\nACCEPT-API-VERSION: resource=1.0\r\n\r\n")
        XCTAssertNotNil(client.answer())
        let requests = await server.recordedRequests()
        let recorded = try XCTUnwrap(requests.last)
        XCTAssertEqual(recorded.target, "/json/realms/root/users/a%2Fb/devices/2fa/binding?_queryFilter=true")
        XCTAssertEqual(recorded.headers["cookie"], "first=1, second=2")
        XCTAssertEqual(recorded.headers["accept-api-version"], "resource=1.0")
    }

    func testAConnectionHalfwayThroughItsRequestHoldsUpNoOther() throws {
        let slow = try connection()
        slow.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n")
        let other = try connection()
        other.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(other.answer()?.status, 200)
        slow.send("\r\n")
        XCTAssertEqual(slow.answer()?.status, 200)
    }

    func testAnswersCarryLengthAndTheMachinesDate() throws {
        let client = try connection()
        client.send("DELETE /__refserver/faults HTTP/1.1\r\nHost: x\r\n\(authorization)\r\n")
        let noContent = try XCTUnwrap(client.answer())
        XCTAssertEqual(noContent.statusLine, "HTTP/1.1 204 No Content")
        XCTAssertNil(noContent.headers["content-length"], "no Content-Length on 204")
        client.send("GET /__refserver/nothing HTTP/1.1\r\nHost: x\r\n\(authorization)\r\n")
        let notFound = try XCTUnwrap(client.answer())
        XCTAssertEqual(notFound.statusLine, "HTTP/1.1 404 Not Found")
        XCTAssertEqual(notFound.headers["content-length"], String(notFound.body.count))
        let date = try XCTUnwrap(notFound.headers["date"].flatMap(Self.imfFixdate))
        XCTAssertLessThan(abs(date.timeIntervalSinceNow), 3600, "the machine's time: \(date)")
    }

    func testDateHeaderFollowsTheServersClockWhenAsked() async throws {
        var configuration = makeConfiguration(databasePath: try temporaryDatabasePath())
        let then = Date(timeIntervalSince1970: 978_404_645)  // Tue, 02 Jan 2001 03:04:05 GMT
        configuration.clock = { then }
        configuration.dateHeaderFollowsClock = true
        let clocked = try await ReferenceServer.start(configuration: configuration)
        let client = try RawConnection.connect(port: XCTUnwrap(clocked.baseURL.port)).get()
        client.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(client.answer()?.headers["date"], "Tue, 02 Jan 2001 03:04:05 GMT")
        await clocked.stop()
    }

    func testStopClosesOpenConnectionsAndRefusesNewOnes() async throws {
        let own = try await ReferenceServer.start(configuration: makeConfiguration(databasePath: try temporaryDatabasePath()))
        let port = try XCTUnwrap(own.baseURL.port)
        let idle = try RawConnection.connect(port: port).get()
        idle.send("GET /__refserver/health HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertEqual(idle.answer()?.status, 200)
        let halfway = try RawConnection.connect(port: port).get()
        halfway.send("GET /__refserver/health HTTP/1.1\r\n")
        await own.stop()
        XCTAssertTrue(idle.isClosedByServer(), "a kept-alive connection is closed")
        XCTAssertTrue(halfway.isClosedByServer(), "a connection in the middle of its request is closed")
        guard case .failure(let error) = RawConnection.connect(port: port) else {
            return XCTFail("a stopped server accepted a connection")
        }
        XCTAssertEqual(error.code, .ECONNREFUSED)
        await own.stop()  // harmless
    }

    func testStopCancelsARequestInProgress() async throws {
        let own = try await ReferenceServer.start(configuration: makeConfiguration(databasePath: try temporaryDatabasePath()))
        await own.setFault(.delay(seconds: 600), forUser: "alice")
        let client = try RawConnection.connect(port: XCTUnwrap(own.baseURL.port)).get()
        client.send(
            "GET /json/realms/root/users/alice/devices/2fa/binding?_queryFilter=true HTTP/1.1\r\nHost: x\r\n"
                + "\(authorization)Accept-API-Version: resource=1.0\r\n\r\n")
        try await waitUntil { await own.recordedRequests().count == 1 }
        await own.stop()  // does not wait the ten minutes out
        XCTAssertNil(client.answer())
    }

    private struct ConditionNeverHeld: Error {}

    private func waitUntil(_ condition: () async -> Bool) async throws {
        let deadline = Date().addingTimeInterval(20)
        while await !condition() {
            guard Date() < deadline else { throw ConditionNeverHeld() }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
    }

    private static func imfFixdate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }
}
