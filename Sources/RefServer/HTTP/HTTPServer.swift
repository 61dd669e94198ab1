import Foundation
import KeymgrCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The reference server's own HTTP/1.1 server (RFC 9112) on 127.0.0.1: one thread accepts connections, one thread
/// per connection reads its requests and writes their answers, and each request is answered by the async responder
/// in a task of its own that the connection's thread waits for (no thread of Swift's cooperative pool ever blocks).
///
/// Small on purpose: it serves tests on loopback, and a general-purpose server (Hummingbird on SwiftNIO) was half of
/// the test build's compile time.
final class HTTPServer: Sendable {
    /// What the server needs beside its port and responder.
    struct Settings: Sendable {
        /// The largest request body accepted.
        var maxRequestBodySize: Int
        /// The answer to a request whose body is larger; the connection closes after it.
        var bodyTooLarge: Response
        /// The time the `Date` header says.
        var clock: @Sendable () -> Date
    }

    /// Answers one request.
    typealias Responder = @Sendable (Request) async -> Response

    /// The port bound on 127.0.0.1.
    let port: Int
    private let listener: Int32
    private let settings: Settings
    private let responder: Responder
    private let state = Mutex(State())

    private struct State {
        var stopping = false
        /// Threads running: the accepting one and one per open connection.
        var threads = 0
        /// The open connections' descriptors.
        var connections: Set<Int32> = []
        /// The tasks answering a request, by the descriptor of its connection.
        var answering: [Int32: Task<Void, Never>] = [:]
        /// `stop()` calls waiting for the last thread to end.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private init(port: Int, listener: Int32, settings: Settings, responder: @escaping Responder) {
        self.port = port
        self.listener = listener
        self.settings = settings
        self.responder = responder
    }

    /// Binds 127.0.0.1 on `port` (0: any free port) and starts accepting connections.
    static func start(port: Int, settings: Settings, responder: @escaping Responder) throws -> HTTPServer {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw ReferenceServerError("cannot create a socket: \(errorText())") }
        var reuse: Int32 = 1
        _ = setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(clamping: port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, SOMAXCONN) == 0
                    && getsockname(listener, $0, &length) == 0
            }
        }
        guard listening else {
            let reason = errorText()
            close(listener)
            throw ReferenceServerError("cannot listen on 127.0.0.1:\(port): \(reason)")
        }
        let server = HTTPServer(
            port: Int(UInt16(bigEndian: address.sin_port)), listener: listener, settings: settings, responder: responder)
        server.state.withLock { $0.threads += 1 }
        OwnThreads.start { server.acceptConnections() }
        return server
    }

    /// Stops accepting, closes every connection (cancelling the requests in progress) and returns once every thread
    /// of the server has ended. A second call waits the same way.
    func stop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if !state.stopping {
                    state.stopping = true
                    // Wakes the accepting thread (accept fails with EINVAL); that thread closes the listener.
                    shutdown(listener, Int32(SHUT_RDWR))
                    for descriptor in state.connections { shutdown(descriptor, Int32(SHUT_RDWR)) }
                    for task in state.answering.values { task.cancel() }
                }
                if state.threads == 0 { return true }
                state.stopWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    // MARK: threads

    private func acceptConnections() {
        while true {
            // accept4 is not in Swift's Glibc module: FD_CLOEXEC follows at once.
            let descriptor = accept(listener, nil, nil)
            if descriptor >= 0 { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            let failure = descriptor < 0 ? errno : 0
            let admitted = state.withLock { state -> Bool? in
                if state.stopping {
                    if descriptor >= 0 { close(descriptor) }
                    close(listener)
                    return nil
                }
                guard descriptor >= 0 else { return false }
                state.connections.insert(descriptor)
                state.threads += 1
                return true
            }
            switch admitted {
            case nil:
                threadEnded()
                return
            case true?:
                var noDelay: Int32 = 1
                _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
                OwnThreads.start { self.serve(ConnectionSocket(descriptor: descriptor)) }
            case false?:
                // EMFILE and the like: wait for a descriptor to be freed rather than spin.
                if failure != EINTR, failure != ECONNABORTED { usleep(10_000) }
            }
        }
    }

    private func threadEnded() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.threads -= 1
            guard state.threads == 0, state.stopping else { return [] }
            defer { state.stopWaiters = [] }
            return state.stopWaiters
        }
        waiters.forEach { $0.resume() }
    }

    /// Reads and answers the connection's requests until it closes, breaks, asks to close, or the server stops.
    private func serve(_ socket: ConnectionSocket) {
        var reader = RequestReader(socket: socket, maxBodySize: settings.maxRequestBodySize)
        var ending = Ending.inOrder
        defer {
            _ = state.withLock { $0.connections.remove(socket.descriptor) }
            switch ending {
            case .inOrder: socket.closeInOrder()
            case .reset: socket.reset()
            }
            threadEnded()
        }
        while true {
            let received: ReceivedRequest
            do {
                received = try reader.next()
            } catch {
                switch error {
                case .closed: break
                case .malformed: write(Response(status: .badRequest), version: "HTTP/1.1", closing: true, to: socket)
                case .bodyTooLarge: write(settings.bodyTooLarge, version: "HTTP/1.1", closing: true, to: socket)
                }
                return
            }
            guard let response = answer(received.request, on: socket) else { return }
            switch response.delivery {
            case .reset:
                ending = .reset
                return
            case .truncated:
                // The orderly close that follows sends its FIN after the half, never in place of it.
                let half = response.body.prefix(response.body.count / 2)
                socket.send(head(of: response, version: received.version, closing: false) + half)
                return
            case .whole, .trickled:
                let sent = write(
                    response, version: received.version, closing: !received.keepAlive, to: socket,
                    omittingBody: received.request.method == .head)
                guard sent, received.keepAlive else { return }
            }
        }
    }

    private enum Ending { case inOrder, reset }

    /// Runs the responder in a task of its own and waits for its answer; nil when the server stopped first.
    private func answer(_ request: Request, on socket: ConnectionSocket) -> Response? {
        let answer = PendingAnswer()
        let responder = self.responder
        let started = state.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.answering[socket.descriptor] = Task {
                answer.deliver(await responder(request))
            }
            return true
        }
        guard started else { return nil }
        let response = answer.wait()
        let stopping = state.withLock { state -> Bool in
            state.answering[socket.descriptor] = nil
            return state.stopping
        }
        return stopping ? nil : response
    }

    // MARK: writing

    /// Writes `response` whole, or its body in pieces for `.trickled`; false when the connection broke.
    @discardableResult
    private func write(
        _ response: Response, version: String, closing: Bool, to socket: ConnectionSocket, omittingBody: Bool = false
    ) -> Bool {
        let head = head(of: response, version: version, closing: closing)
        let body = omittingBody || response.status.forbidsBody ? [] : response.body
        guard case .trickled(let seconds) = response.delivery, !body.isEmpty else { return socket.send(head + body) }
        guard socket.send(head) else { return false }
        let pieces = max(1, min(20, body.count))
        let size = (body.count + pieces - 1) / pieces
        let pause = useconds_t(min(max(0, seconds / Double(pieces) * 1_000_000), 60_000_000))
        for start in stride(from: 0, to: body.count, by: size) {
            usleep(pause)
            guard socket.send(Array(body[start..<min(start + size, body.count)])) else { return false }
        }
        return true
    }

    /// The headers the server writes itself, whatever the response has.
    private static let headersOfTheServer: [HTTPHeaderName] = [.contentLength, .date, .connection, .transferEncoding]

    /// The status line and headers: the response's own, then `Content-Length`, `Date` and, when the connection
    /// closes after this answer, `Connection: close`.
    private func head(of response: Response, version: String, closing: Bool) -> [UInt8] {
        var text = "\(version) \(response.status.code) \(response.status.reasonPhrase)\r\n"
        for field in response.headers where !Self.headersOfTheServer.contains(field.name) {
            text += "\(field.name.rawName): \(field.value)\r\n"
        }
        if !response.status.forbidsBody { text += "Content-Length: \(response.body.count)\r\n" }
        text += "Date: \(HTTPDate.imfFixdate(settings.clock()))\r\n"
        if closing { text += "Connection: close\r\n" }
        return Array((text + "\r\n").utf8)
    }
}

/// One request's answer, handed from the task that makes it to the connection thread that waits for it.
private final class PendingAnswer: Sendable {
    private let response = Mutex<Response?>(nil)
    /// A futex: the waiting connection thread is one of the server's own, never one of the cooperative pool.
    private let ready = DispatchSemaphore(value: 0)

    func deliver(_ answer: Response) {
        response.withLock { $0 = answer }
        ready.signal()
    }

    func wait() -> Response {
        ready.wait()
        return response.withLock { $0 } ?? Response(status: .internalServerError)
    }
}

/// The text of the current `errno`.
private func errorText() -> String {
    String(cString: strerror(errno))
}
