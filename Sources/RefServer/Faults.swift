import Foundation
import KeymgrCore

/// A misbehaviour the reference server can be told to show on the device REST for one user id, so
/// tests can watch keymgr's sync survive a broken server (docs/sync.md, rules 6 and 10).
public enum Fault: Sendable, Equatable {
    /// Answer `500` with PingAM's JSON error body.
    case status500
    /// Answer `503` with `Retry-After: seconds` and PingAM's JSON error body.
    case status503(retryAfter: Int)
    /// Wait this many seconds, then answer normally.
    case delay(seconds: Double)
    /// Answer `200` with a JSON content type and a truncated, unparseable body.
    case malformedJSON
    /// Listing only: every page carries a new `pagedResultsCookie`, so paging never ends.
    case endlessPaging
    /// Answer with the normal body padded to 10 MiB (a well-formed listing plus a `_padding` member),
    /// so a client without a response size limit still reads the right records.
    case hugeBody
    /// Answer `200` with `Content-Type: text/html` and an HTML sign-in page, as a misrouted proxy or an SSO
    /// gateway in front of the server does.
    case wrongContentType
    /// Reset the connection (TCP RST) before any answer, as a crashed server or a load balancer does. Nothing is done.
    case connectionReset
    /// Do the work and answer, but close the connection after half of the body (its full `Content-Length` announced).
    case truncatedBody
    /// Do the work and answer, the body in small pieces spread over this many seconds.
    case slowBody(seconds: Double)

    /// The fault's name on the admin HTTP surface.
    public var name: String {
        switch self {
        case .status500: return "status500"
        case .status503: return "status503"
        case .delay: return "delay"
        case .malformedJSON: return "malformedJSON"
        case .endlessPaging: return "endlessPaging"
        case .hugeBody: return "hugeBody"
        case .wrongContentType: return "wrongContentType"
        case .connectionReset: return "connectionReset"
        case .truncatedBody: return "truncatedBody"
        case .slowBody: return "slowBody"
        }
    }

    /// The admin HTTP form: `{"fault":"delay","seconds":2}`.
    var json: JSONValue {
        switch self {
        case .status503(let retryAfter):
            return .object(["fault": .string(name), "retryAfter": .int(Int64(retryAfter))])
        case .delay(let seconds), .slowBody(let seconds):
            return .object(["fault": .string(name), "seconds": .double(seconds)])
        default:
            return .object(["fault": .string(name)])
        }
    }

    /// Parses the admin HTTP form.
    init?(json: JSONValue) {
        switch json["fault"]?.stringValue {
        case "status500": self = .status500
        case "status503":
            let retryAfter = json["retryAfter"]?.intValue ?? 1
            guard retryAfter >= 0, retryAfter <= 86_400 else { return nil }
            self = .status503(retryAfter: Int(retryAfter))
        case "delay", "slowBody":
            let seconds: Double
            switch json["seconds"] {
            case .int(let value): seconds = Double(value)
            case .double(let value): seconds = value
            default: return nil
            }
            guard seconds >= 0, seconds <= 3600 else { return nil }
            self = json["fault"]?.stringValue == "delay" ? .delay(seconds: seconds) : .slowBody(seconds: seconds)
        case "malformedJSON": self = .malformedJSON
        case "endlessPaging": self = .endlessPaging
        case "hugeBody": self = .hugeBody
        case "wrongContentType": self = .wrongContentType
        case "connectionReset": self = .connectionReset
        case "truncatedBody": self = .truncatedBody
        default: return nil
        }
    }

    /// Every fault's admin name, for error messages.
    static let names = "status500, status503 (retryAfter), delay (seconds), malformedJSON, endlessPaging, hugeBody, "
        + "wrongContentType, connectionReset, truncatedBody, slowBody (seconds)"
}

/// One request as the server received it, for tests that check what keymgr sent.
public struct RecordedRequest: Sendable, Equatable {
    /// The HTTP method, e.g. `GET`.
    public var method: String
    /// The raw (still percent-encoded) request target, with its query.
    public var target: String
    /// The request headers; credential values (`Authorization`, `iPlanetDirectoryPro`) are replaced by `[redacted]`.
    public var headers: [String: String]
    /// When it arrived and when its answer was ready (after any `delay` fault), on the machine's clock (not the
    /// `--clock-offset` one): a test measures a client's deadline against these, not against its own wall clock.
    public var received: Date
    public var answered: Date?

    var json: JSONValue {
        var fields: [String: JSONValue] = [
            "method": .string(method), "target": .string(target),
            "headers": .object(headers.mapValues { .string($0) }),
            "received": .double(received.timeIntervalSince1970),
        ]
        if let answered { fields["answered"] = .double(answered.timeIntervalSince1970) }
        return .object(fields)
    }
}
