import Foundation
import Synchronization

/// The server's clock as its answers tell it: the offset of the `Date` header (RFC 9110 §6.6.1) from this device's
/// clock, so that DPoP proofs' `iat` and token expiry follow the server's time on a device whose clock is wrong (a
/// kiosk after a power cut). Offsets under `threshold` are taken as none: `Date` has whole seconds, and a second or
/// two is network delay, not skew.
public final class ServerClock: Sendable {
    /// The smallest offset, in seconds, that counts as skew.
    public static let threshold: TimeInterval = 5

    private let state: Mutex<TimeInterval>

    /// A clock starting from `offset` (seconds the server is ahead of this device; negative when behind), as an
    /// earlier process learned it.
    public init(offset: TimeInterval = 0) {
        state = Mutex(abs(offset) < Self.threshold ? 0 : offset.rounded())
    }

    /// Seconds the server's clock is ahead of this device's (negative: behind); 0 when no skew is known.
    public var offset: TimeInterval { state.withLock { $0 } }

    /// The server's time now, as far as this device can tell.
    public func now() -> Date { Date().addingTimeInterval(offset) }

    /// Learns the offset from `response`'s `Date` header, if it has a valid one. Returns true when the offset moved by
    /// `threshold` or more (a proof made before it was learned may have been refused for its `iat`).
    @discardableResult
    public func learn(from response: HTTPResponse, receivedAt: Date = Date()) -> Bool {
        guard let text = response.headers["date"], let date = Self.httpDate(text) else { return false }
        var measured = date.timeIntervalSince(receivedAt).rounded()
        if abs(measured) < Self.threshold { measured = 0 }
        return state.withLock { offset in
            let moved = abs(measured - offset) >= Self.threshold
            if moved { offset = measured }
            return moved
        }
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only form RFC 9110 §5.6.7 lets a server send.
    public static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text.trimmingCharacters(in: .whitespaces))
    }
}
