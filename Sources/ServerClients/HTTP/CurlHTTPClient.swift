import CCurl
import Foundation
import KeymgrCore

/// `HTTPClient` over the system libcurl (with the system OpenSSL), called directly.
///
/// Why not Foundation's URLSession: on Linux it waits forever on a 401 that carries `WWW-Authenticate: Basic`
/// (what every RFC 6749 token endpoint answers to a wrong client secret) when no delegate takes the challenge,
/// and loading FoundationNetworking costs every command start-up time whether it talks to a server or not.
/// libcurl does exactly what keymgr asks: no cookies, no redirects, no authentication of its own, http and https only.
public final class CurlHTTPClient: HTTPClient {
    /// Seconds a request may take from connecting to the last byte of the body.
    public let timeout: TimeInterval
    /// Responses larger than this are refused as malformed instead of being parsed.
    public let maxBodyBytes: Int

    public init(timeout: TimeInterval = 15, maxBodyBytes: Int = 4 << 20) {
        // Callers check their seconds; a value that is no finite positive number must still not trap in `Int(_:)`.
        self.timeout = timeout.isFinite && timeout > 0 ? min(timeout, 86_400) : 15
        self.maxBodyBytes = maxBodyBytes
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (timeout, maxBodyBytes) = (timeout, maxBodyBytes)
        // A blocking transfer on a thread of its own (not libdispatch's pool: OwnThreads says why): the caller's task
        // waits without holding a thread.
        return try await OwnThreads.run { try Self.perform(request, timeout: timeout, maxBodyBytes: maxBodyBytes) }
    }

    /// What libcurl hands back while a transfer runs (internal, not private: `make fuzz` feeds it header lines).
    final class Transfer {
        let maxBodyBytes: Int
        var body = Data()
        var headers: [String: String] = [:]
        var bodyTooLarge = false

        init(maxBodyBytes: Int) {
            self.maxBodyBytes = maxBodyBytes
        }

        func append(body bytes: UnsafeRawBufferPointer) -> Bool {
            guard body.count + bytes.count <= maxBodyBytes else {
                bodyTooLarge = true
                return false
            }
            body.append(contentsOf: bytes)
            return true
        }

        /// One header line; a new status line (after a 100 Continue, say) starts the headers afresh.
        func append(headerLine bytes: UnsafeRawBufferPointer) {
            let line = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if line.hasPrefix("HTTP/") {
                headers = [:]
                return
            }
            guard let colon = line.firstIndex(of: ":") else { return }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            guard !name.isEmpty, name.utf8.allSatisfy(HTTPSyntax.isTokenCharacter) else { return }  // not a field line
            // RFC 9110 §5.5: CR, LF and NUL inside a field value are replaced by SP before anything reads it.
            let value = String(decoding: line[line.index(after: colon)...].utf8.map { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 ? 0x20 : $0 },
                               as: UTF8.self).trimmingCharacters(in: .whitespaces)
            headers[name] = headers[name].map { $0 + ", " + value } ?? value
        }
    }

    private static func perform(_ request: HTTPRequest, timeout: TimeInterval, maxBodyBytes: Int) throws -> HTTPResponse {
        let what = "\(request.method) \(request.redactedURL)"
        guard keymgr_curl_load() == 0 else {
            throw TransportError(.unavailable, "\(what): \(keymgr_curl_load_error().map { String(cString: $0) } ?? "libcurl is missing")")
        }
        let transfer = Transfer(maxBodyBytes: maxBodyBytes)
        let headerLines = request.headers.map { "\($0.key): \($0.value)" }
        var status = 0
        let code: Int32 = withCStrings(headerLines) { headers in
            request.url.absoluteString.withCString { url in
                request.method.withCString { method in
                    (request.body ?? Data()).withUnsafeBytes { body in
                        var options = keymgr_curl_request(
                            url: url, method: method, headers: headers.baseAddress, header_count: headers.count,
                            body: body.baseAddress, body_length: body.count, has_body: request.body == nil ? 0 : 1,
                            timeout_ms: Int(max(1, timeout * 1000)),
                            on_body: { data, size, count, context in
                                guard let data, let context else { return 0 }
                                let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
                                return transfer.append(body: UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
                            },
                            on_header: { data, size, count, context in
                                guard let data, let context else { return 0 }
                                Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
                                    .append(headerLine: UnsafeRawBufferPointer(start: data, count: size * count))
                                return size * count
                            },
                            context: Unmanaged.passUnretained(transfer).toOpaque())
                        return withExtendedLifetime(transfer) { keymgr_curl_perform(&options, &status) }
                    }
                }
            }
        }
        if transfer.bodyTooLarge {
            throw TransportError(.malformed, "\(what) answered with more than the \(maxBodyBytes) bytes allowed")
        }
        guard code == 0 else {
            let reason = String(cString: keymgr_curl_error_text(code))
            if code == keymgr_curl_code_timeout() { throw TransportError(.timeout, "\(what) timed out after \(Int(timeout)) s") }
            throw TransportError(.unavailable, "\(what) failed: \(reason)")
        }
        return HTTPResponse(status: status, headers: transfer.headers, body: transfer.body)
    }

    /// Runs `body` with the strings as an array of C strings that live as long as the call.
    private static func withCStrings<T>(_ strings: [String], _ body: (UnsafeBufferPointer<UnsafePointer<CChar>?>) -> T) -> T {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        return copies.map { UnsafePointer($0) }.withUnsafeBufferPointer(body)
    }
}
