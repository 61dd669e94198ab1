import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `HTTPClient` over Foundation's URLSession (libcurl and the system OpenSSL).
public final class URLSessionHTTPClient: HTTPClient {
    private let session: URLSession
    private let challenges = ChallengeRefusal()
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
        session = URLSession(configuration: configuration, delegate: challenges, delegateQueue: nil)
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
            (data, response) = try await exchange(urlRequest)
        } catch let refused as RefusedChallenge {
            // A 401 with an HTTP authentication challenge (an OAuth server's `invalid_client` with
            // `WWW-Authenticate: Basic`): the status and headers, without the body Foundation keeps back.
            (data, response) = (Data(), refused.response)
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

    /// One data task. swift-corelibs-foundation waits forever for credentials when a server answers 401 with an
    /// HTTP authentication challenge; the session's delegate refuses every such challenge and the answer is
    /// reported as the 401 it was.
    private func exchange(_ request: URLRequest) async throws -> (Data, URLResponse) {
        let challenges = challenges
        return try await withCheckedThrowingContinuation { continuation in
            let once = ResumeOnce(continuation)
            let task = session.dataTask(with: request) { data, response, error in
                if let error {
                    once.resume(.failure(error))
                } else if let response {
                    once.resume(.success((data ?? Data(), response)))
                } else {
                    once.resume(.failure(URLError(.badServerResponse)))
                }
            }
            challenges.watch(task.taskIdentifier) { refused in once.resume(.failure(refused)) }
            task.resume()
        }
    }
}

/// Resumes a continuation at most once: a refused challenge and the cancelled task both report.
private final class ResumeOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<(Data, URLResponse), any Error>?

    init(_ continuation: CheckedContinuation<(Data, URLResponse), any Error>) {
        self.continuation = continuation
    }

    func resume(_ result: Result<(Data, URLResponse), any Error>) {
        let pending = lock.withLock { () -> CheckedContinuation<(Data, URLResponse), any Error>? in
            defer { continuation = nil }
            return continuation
        }
        pending?.resume(with: result)
    }
}

/// The 401 whose authentication challenge keymgr refused.
struct RefusedChallenge: Error {
    let response: HTTPURLResponse
}

/// Refuses HTTP authentication challenges (keymgr never answers one with stored credentials) and remembers the
/// 401 that carried each, so the task's caller can report it.
private final class ChallengeRefusal: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var waiting: [Int: @Sendable (RefusedChallenge) -> Void] = [:]

    func watch(_ task: Int, _ onRefusal: @escaping @Sendable (RefusedChallenge) -> Void) {
        lock.withLock { waiting[task] = onRefusal }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
                    completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        // Only a server's 401 carries a failure response (Linux delivers no server-trust challenges).
        guard let response = challenge.failureResponse as? HTTPURLResponse, response.statusCode == 401 else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        let onRefusal = lock.withLock { waiting.removeValue(forKey: task.taskIdentifier) }
        completionHandler(.cancelAuthenticationChallenge, nil)
        onRefusal?(RefusedChallenge(response: response))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        _ = lock.withLock { waiting.removeValue(forKey: task.taskIdentifier) }
    }
}
