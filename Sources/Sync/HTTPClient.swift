import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An HTTP request as the server dialect clients build it.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: URL
    public var headers: [String: String]
    public var body: Data?

    public init(method: String, url: URL, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// An HTTP response: status, headers (names lower-cased) and body.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// The one seam between keymgr and the network, so tests and a future AsyncHTTPClient swap stay local.
public protocol HTTPClient: Sendable {
    /// Sends `request`; throws `SyncFailure` when the server cannot be reached or does not answer in time.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}

/// Why talking to the server failed, in terms the reconciler and the CLI act on.
public struct SyncFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Could not connect, or a 5xx.
        case unavailable = "serverUnavailable"
        /// No answer in time.
        case timeout
        /// The server refused the request (4xx).
        case rejected = "serverRejected"
        /// The answer was not what the wire format says (bad JSON, an endless listing, an oversized body).
        case malformed = "badInput"
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// `HTTPClient` over Foundation's URLSession (libcurl and the system OpenSSL).
public final class URLSessionHTTPClient: HTTPClient {
    private let session: URLSession
    /// Responses larger than this are refused as malformed instead of being parsed.
    public let maxBodyBytes: Int

    public init(timeout: TimeInterval = 15, maxBodyBytes: Int = 4 << 20) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout * 2
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = 8
        session = URLSession(configuration: configuration)
        self.maxBodyBytes = maxBodyBytes
    }

    deinit { session.finishTasksAndInvalidate() }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        urlRequest.httpBody = request.body
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        let (data, response): (Data, URLResponse)
        do {
            (data, response) = try await session.data(for: urlRequest)
        } catch let error as URLError where error.code == .timedOut {
            throw SyncFailure(.timeout, "\(request.method) \(Self.redacted(request.url)) timed out")
        } catch {
            throw SyncFailure(.unavailable, "\(request.method) \(Self.redacted(request.url)) failed: \((error as NSError).localizedDescription)")
        }
        guard let http = response as? HTTPURLResponse else {
            throw SyncFailure(.malformed, "\(request.method) \(Self.redacted(request.url)) got no HTTP response")
        }
        guard data.count <= maxBodyBytes else {
            throw SyncFailure(.malformed, "\(request.method) \(Self.redacted(request.url)) answered with \(data.count) bytes, more than the \(maxBodyBytes) allowed")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return HTTPResponse(status: http.statusCode, headers: headers, body: data)
    }

    /// The URL without its query, which may carry paging cookies.
    static func redacted(_ url: URL) -> String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.query = nil
        return components?.string ?? url.path
    }
}
