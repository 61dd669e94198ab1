import Foundation
import ServerClients
import Synchronization

/// An `HTTPClient` that answers from a script and records what it was sent: the wire clients' tests need no server.
final class StubHTTPClient: HTTPClient {
    typealias Responder = @Sendable (HTTPRequest) throws -> HTTPResponse

    private let responder: Responder
    private let sent = Mutex<[HTTPRequest]>([])

    init(_ responder: @escaping Responder) {
        self.responder = responder
    }

    /// The requests sent so far, in order.
    var requests: [HTTPRequest] { sent.withLock { $0 } }

    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        sent.withLock { $0.append(request) }
        return try responder(request)
    }

    /// A JSON response.
    static func json(_ status: Int, _ text: String, headers: [String: String] = [:]) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers.merging(["content-type": "application/json"]) { a, _ in a },
                     body: Data(text.utf8))
    }
}
