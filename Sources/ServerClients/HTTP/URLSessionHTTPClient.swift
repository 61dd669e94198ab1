import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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
        configuration.httpShouldSetCookies = false
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
            throw TransportError(.timeout, "\(request.method) \(request.redactedURL) timed out")
        } catch {
            throw TransportError(.unavailable, "\(request.method) \(request.redactedURL) failed: \((error as NSError).localizedDescription)")
        }
        guard let http = response as? HTTPURLResponse else {
            throw TransportError(.malformed, "\(request.method) \(request.redactedURL) got no HTTP response")
        }
        guard data.count <= maxBodyBytes else {
            throw TransportError(.malformed, "\(request.method) \(request.redactedURL) answered with \(data.count) bytes, more than the \(maxBodyBytes) allowed")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        return HTTPResponse(status: http.statusCode, headers: headers, body: data)
    }
}
