import Foundation
import Hummingbird
import NIOCore  // built with Hummingbird (its dependency); only `SocketOptionProvider` for SO_LINGER is used

/// Faults below HTTP, shared by the device REST (`Fault`) and the authorization server (`OAuthFault`): the
/// connection reset before any answer, the answer cut off halfway, the answer dribbled out slowly. Test-only: they
/// exist so the fault suite can show what keymgr does when the network, not the server, misbehaves.
enum ConnectionFaults {
    /// Resets the connection `request` arrived on before a byte of the answer is sent, as a crashed process or a
    /// load balancer dropping the connection does. The response returned is never delivered (writing it fails on
    /// the closed channel). The reset travels with the request, not in a task-local value: `TaskLocal.withValue`
    /// crashes (`swift_task_localValuePush`) in a build with the static Swift standard library.
    static func reset(_ request: IncomingRequest) async -> Response {
        if let resetConnection = request.resetConnection { await resetConnection() }
        return Response(status: .internalServerError)
    }

    /// The bytes of a response's body (the reference server's bodies are in memory; this reads them back).
    static func bodyBytes(of response: Response) async -> ByteBuffer {
        let collector = Collector()
        try? await response.body.write(collector)
        return collector.value
    }

    /// `response` with its full `Content-Length` announced but only the first half of the body sent; then the
    /// connection is closed, as when the network breaks while the answer is on its way. The server did the work.
    static func truncated(_ response: Response) async -> Response {
        let body = await bodyBytes(of: response)
        let half = body.getSlice(at: body.readerIndex, length: body.readableBytes / 2) ?? ByteBuffer()
        return Response(
            status: response.status, headers: response.headers,
            body: ResponseBody(contentLength: body.readableBytes) { writer in
                try await writer.write(half)
                // Let the half reach the client before the connection goes (throwing makes the server close it).
                try await Task.sleep(nanoseconds: 50_000_000)
                throw CancellationError()
            })
    }

    /// `response` with its head sent at once and its body in small pieces spread over `seconds`, as a congested
    /// link or an overloaded proxy delivers it. The server did the work.
    static func trickled(_ response: Response, over seconds: Double) async -> Response {
        let body = await bodyBytes(of: response)
        let pieces = max(1, min(20, body.readableBytes))
        let size = max(1, (body.readableBytes + pieces - 1) / pieces)
        let pause = UInt64(seconds / Double(pieces) * 1_000_000_000)
        return Response(
            status: response.status, headers: response.headers,
            body: ResponseBody(contentLength: body.readableBytes) { writer in
                var rest = body
                while rest.readableBytes > 0, let piece = rest.readSlice(length: min(size, rest.readableBytes)) {
                    try await Task.sleep(nanoseconds: pause)
                    try await writer.write(piece)
                }
                try await writer.finish(nil)
            })
    }

    /// A body writer that keeps what it is given.
    private final class Collector: ResponseBodyWriter, @unchecked Sendable {
        var value = ByteBuffer()

        func write(_ buffer: ByteBuffer) async throws {
            var buffer = buffer
            value.writeBuffer(&buffer)
        }

        func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}

/// The request context of the reference server: Hummingbird's basic context plus the means to reset the
/// connection, for `ConnectionFaults.reset(_:)`.
struct RefServerRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// Closes the request's connection with a TCP reset (SO_LINGER 0) instead of an orderly shutdown.
    let resetConnection: @Sendable () async -> Void

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        let channel = source.channel
        resetConnection = {
            _ = try? await (channel as? any SocketOptionProvider)?.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            _ = try? await channel.close().get()
        }
    }
}
