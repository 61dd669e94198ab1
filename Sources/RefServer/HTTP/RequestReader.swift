import Foundation

/// Why no request came off a connection.
enum RequestReadFailure: Error, Equatable {
    /// The peer closed the connection (or it broke) between requests or halfway through one.
    case closed
    /// A request line, header or chunk that is not HTTP/1.1: answered 400, then the connection closes.
    case malformed
    /// A body larger than the server accepts: answered 413, then the connection closes.
    case bodyTooLarge
}

/// A request read off a connection, and whether the connection stays open after its answer.
struct ReceivedRequest: Sendable {
    var request: Request
    /// `HTTP/1.1` or `HTTP/1.0`, for the status line of the answer.
    var version: String
    /// HTTP/1.1 without `Connection: close`.
    var keepAlive: Bool
}

/// Reads HTTP/1.1 requests (RFC 9112) one after another off a connected socket: the head up to its blank line, then
/// the body by `Content-Length` or `Transfer-Encoding: chunked`, answering `Expect: 100-continue` first.
struct RequestReader {
    /// The most a request line and its headers may take.
    static let maxHeadSize = 64 * 1024

    let socket: ConnectionSocket
    let maxBodySize: Int
    /// Bytes received and not yet consumed, from `start`.
    private var buffer: [UInt8] = []
    private var start = 0

    init(socket: ConnectionSocket, maxBodySize: Int) {
        self.socket = socket
        self.maxBodySize = maxBodySize
    }

    /// The next request on the connection.
    mutating func next() throws(RequestReadFailure) -> ReceivedRequest {
        // RFC 9112 §2.2: empty lines before a request line are ignored.
        var requestLine: [UInt8] = []
        while requestLine.isEmpty { requestLine = try line(limit: Self.maxHeadSize) }
        let parts = requestLine.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard parts.count == 3, let method = String(validating: parts[0], as: UTF8.self),
            !method.isEmpty, method.utf8.allSatisfy(Self.isTokenByte),
            let target = String(validating: parts[1], as: UTF8.self), !target.isEmpty,
            target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
            let version = String(validating: parts[2], as: UTF8.self), version == "HTTP/1.1" || version == "HTTP/1.0"
        else { throw .malformed }

        var headers = HTTPHeaders()
        var headSize = requestLine.count
        while true {
            let field = try line(limit: Self.maxHeadSize - headSize)
            headSize += field.count + 2
            if field.isEmpty { break }
            let (name, value) = try Self.headerField(field)
            headers.append(name, value)
        }

        let body = try readBody(headers, expectsContinue: version == "HTTP/1.1" && Self.expectsContinue(headers))
        let connection = Set((headers[.connection] ?? "").lowercased().split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        })
        return ReceivedRequest(
            request: Request(method: HTTPMethod(rawValue: method), target: target, headers: headers, body: body),
            version: version, keepAlive: version == "HTTP/1.1" && !connection.contains("close"))
    }

    // MARK: head

    /// `name: value`: a token, a colon right after it, the value without the whitespace around it (RFC 9112 §5).
    private static func headerField(_ line: [UInt8]) throws(RequestReadFailure) -> (HTTPHeaderName, String) {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0,
            line[..<colon].allSatisfy(isTokenByte),
            let name = String(validating: line[..<colon], as: UTF8.self)
        else { throw .malformed }
        let value = line[(colon + 1)...].drop { $0 == 0x20 || $0 == 0x09 }
        guard value.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }) else { throw .malformed }
        let trimmed = String(decoding: value, as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        return (HTTPHeaderName(name), trimmed)
    }

    /// RFC 9110 §5.6.2's tchar.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    private static func expectsContinue(_ headers: HTTPHeaders) -> Bool {
        headers[.expect]?.lowercased().trimmingCharacters(in: .whitespaces) == "100-continue"
    }

    // MARK: body

    private mutating func readBody(_ headers: HTTPHeaders, expectsContinue: Bool) throws(RequestReadFailure) -> [UInt8] {
        let encodings = headers[values: .transferEncoding]
        let lengths = headers[values: .contentLength]
        if !encodings.isEmpty {
            // Only chunked is understood; with a Content-Length beside it the message is ambiguous (RFC 9112 §6.3).
            guard lengths.isEmpty, encodings.joined(separator: ",").lowercased().trimmingCharacters(in: .whitespaces) == "chunked"
            else { throw .malformed }
            continueIfAsked(expectsContinue)
            return try chunkedBody()
        }
        guard !lengths.isEmpty else { return [] }
        let values = Set(lengths.flatMap { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } })
        guard values.count == 1, let text = values.first, !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
        else { throw .malformed }
        guard let length = Int(text), length <= maxBodySize else { throw .bodyTooLarge }
        if length == 0 { return [] }
        continueIfAsked(expectsContinue)
        return try bytes(length)
    }

    /// Tells a client that waits for it to send its body (libcurl does for larger bodies), unless it already did.
    private func continueIfAsked(_ expectsContinue: Bool) {
        guard expectsContinue, start == buffer.count else { return }
        _ = socket.send(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
    }

    /// `size[;extensions] CRLF data CRLF` … `0 CRLF [trailers] CRLF` (RFC 9112 §7.1); trailers are read and dropped.
    private mutating func chunkedBody() throws(RequestReadFailure) -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let sizeLine = try line(limit: 1024)
            let digits = sizeLine.prefix { $0 != UInt8(ascii: ";") }.filter { $0 != 0x20 && $0 != 0x09 }
            // Hex digits only (RFC 9112 §7.1): `Int(_:radix:)` alone would take a sign, and a negative size.
            guard !digits.isEmpty, digits.count <= 15,
                digits.allSatisfy({ $0 < 0x80 && Character(UnicodeScalar($0)).isHexDigit }),
                let size = Int(String(decoding: digits, as: UTF8.self), radix: 16)
            else { throw .malformed }
            if size == 0 { break }
            guard size <= maxBodySize - body.count else { throw .bodyTooLarge }
            body += try bytes(size)
            guard try line(limit: 0).isEmpty else { throw .malformed }
        }
        var trailerSize = 0
        while true {
            let trailer = try line(limit: Self.maxHeadSize - trailerSize)
            if trailer.isEmpty { return body }
            trailerSize += trailer.count + 2
        }
    }

    // MARK: bytes

    /// The next line without its CRLF; malformed when longer than `limit` bytes.
    private mutating func line(limit: Int) throws(RequestReadFailure) -> [UInt8] {
        var searched = 0  // bytes after `start` known to hold no line feed
        while true {
            if let end = buffer[(start + searched)...].firstIndex(of: UInt8(ascii: "\n")) {
                guard end > start, buffer[end - 1] == UInt8(ascii: "\r"), end - 1 - start <= limit else {
                    throw .malformed
                }
                let line = Array(buffer[start..<(end - 1)])
                consume(upTo: end + 1)
                return line
            }
            guard buffer.count - start <= limit + 1 else { throw .malformed }
            searched = buffer.count - start
            try receive()
        }
    }

    /// The next `count` bytes.
    private mutating func bytes(_ count: Int) throws(RequestReadFailure) -> [UInt8] {
        while buffer.count - start < count { try receive() }
        let bytes = Array(buffer[start..<(start + count)])
        consume(upTo: start + count)
        return bytes
    }

    private mutating func consume(upTo index: Int) {
        start = index
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
    }

    private mutating func receive() throws(RequestReadFailure) {
        if start > 0 {
            buffer.removeFirst(start)
            start = 0
        }
        guard let received = socket.receive(), !received.isEmpty else { throw .closed }
        buffer += received
    }
}
