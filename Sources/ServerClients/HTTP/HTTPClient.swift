import Foundation

/// An HTTP request as the server clients build it.
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
    /// Sends `request`; throws `TransportError` when the server cannot be reached or does not answer in time.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}

extension HTTPRequest {
    /// The URL without its query, which may carry paging cookies or codes: the form used in messages.
    public var redactedURL: String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        components?.query = nil
        components?.fragment = nil
        return components?.string ?? url.path
    }
}
