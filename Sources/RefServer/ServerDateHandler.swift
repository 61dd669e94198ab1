import Foundation
import NIOCore  // built with Hummingbird (its dependency): the channel handler protocols
import NIOHTTPTypes  // built with Hummingbird: the response parts its HTTP/1 pipeline carries

/// Sets each answer's `Date` header from the server's clock (`ReferenceServerConfiguration.clock`). Hummingbird
/// writes the machine's time there; a server run with `--clock-offset` must say the time it keeps, as a server
/// whose clock differs from the client's does, so that clients that learn the server's time from `Date` can.
final class ServerDateHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let clock: @Sendable () -> Date

    init(clock: @escaping @Sendable () -> Date) {
        self.clock = clock
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var part = unwrapOutboundIn(data)
        if case .head(var head) = part {
            head.headerFields[.date] = Self.imfFixdate(clock())
            part = .head(head)
        }
        context.write(wrapOutboundOut(part), promise: promise)
    }

    /// RFC 9110 §5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func imfFixdate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
