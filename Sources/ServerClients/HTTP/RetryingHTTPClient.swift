import Foundation
import KeymgrCore

/// An `HTTPClient` that sends again when the server says it is busy (429 or 503), waiting as its `Retry-After`
/// (seconds) advises, or backing off (0.5 s, 1 s, …) when it gives none; an advice longer than `maxRetryAfter` is not
/// waited for, and the busy answer is returned as it is. The one retry rule of every wire client.
public struct RetryingHTTPClient: HTTPClient {
    let base: any HTTPClient
    /// Sends in all, the first included.
    let maxAttempts: Int
    let maxRetryAfter: TimeInterval

    public init(_ base: any HTTPClient, maxAttempts: Int = 3, maxRetryAfter: TimeInterval = 30) {
        self.base = base
        self.maxAttempts = maxAttempts
        self.maxRetryAfter = maxRetryAfter
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var attempt = 1
        while true {
            let response = try await base.send(request)
            guard response.status == 429 || response.status == 503, attempt < maxAttempts else { return response }
            let advised = response.headers["retry-after"].flatMap(TimeInterval.init) ?? 0.25 * Double(1 << attempt)
            guard advised <= maxRetryAfter else { return response }
            try await OwnThreads.sleep(seconds: max(0, advised))
            attempt += 1
        }
    }
}
