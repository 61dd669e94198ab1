import Foundation

/// A request method as sent (`GET`, `POST`…: case-sensitive, RFC 9110 §9.1).
struct HTTPMethod: RawRepresentable, Hashable, Sendable {
    var rawValue: String

    init(rawValue: String) { self.rawValue = rawValue }

    static let get = HTTPMethod(rawValue: "GET")
    static let head = HTTPMethod(rawValue: "HEAD")
    static let post = HTTPMethod(rawValue: "POST")
    static let put = HTTPMethod(rawValue: "PUT")
    static let patch = HTTPMethod(rawValue: "PATCH")
    static let delete = HTTPMethod(rawValue: "DELETE")
}

/// A response status: its code and the reason phrase the status line carries.
struct HTTPStatus: Hashable, Sendable {
    var code: Int

    init(code: Int) { self.code = code }

    static let ok = HTTPStatus(code: 200)
    static let noContent = HTTPStatus(code: 204)
    static let badRequest = HTTPStatus(code: 400)
    static let contentTooLarge = HTTPStatus(code: 413)
    static let internalServerError = HTTPStatus(code: 500)

    /// RFC 9110's phrase for the codes the server answers with; empty for others (the phrase is optional).
    var reasonPhrase: String {
        switch code {
        case 100: return "Continue"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 304: return "Not Modified"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 409: return "Conflict"
        case 412: return "Precondition Failed"
        case 413: return "Content Too Large"
        case 415: return "Unsupported Media Type"
        case 428: return "Precondition Required"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        default: return ""
        }
    }

    /// Whether a response with this status has no body (and so no `Content-Length`), RFC 9110 §6.4.1.
    var forbidsBody: Bool { (100..<200).contains(code) || code == 204 || code == 304 }
}

/// A header field name: written as given, compared case-insensitively.
struct HTTPHeaderName: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The name as written, e.g. `Content-Type`.
    let rawName: String
    /// The lower-cased name that comparisons use, e.g. `content-type`.
    let canonicalName: String

    init(_ name: String) {
        rawName = name
        canonicalName = name.lowercased()
    }

    init(stringLiteral name: String) { self.init(name) }

    var description: String { rawName }

    static func == (lhs: HTTPHeaderName, rhs: HTTPHeaderName) -> Bool { lhs.canonicalName == rhs.canonicalName }

    func hash(into hasher: inout Hasher) { hasher.combine(canonicalName) }

    static let authorization: HTTPHeaderName = "Authorization"
    static let cacheControl: HTTPHeaderName = "Cache-Control"
    static let connection: HTTPHeaderName = "Connection"
    static let contentLength: HTTPHeaderName = "Content-Length"
    static let contentType: HTTPHeaderName = "Content-Type"
    static let cookie: HTTPHeaderName = "Cookie"
    static let date: HTTPHeaderName = "Date"
    static let eTag: HTTPHeaderName = "ETag"
    static let expect: HTTPHeaderName = "Expect"
    static let ifMatch: HTTPHeaderName = "If-Match"
    static let ifNoneMatch: HTTPHeaderName = "If-None-Match"
    static let retryAfter: HTTPHeaderName = "Retry-After"
    static let setCookie: HTTPHeaderName = "Set-Cookie"
    static let transferEncoding: HTTPHeaderName = "Transfer-Encoding"
    static let wwwAuthenticate: HTTPHeaderName = "WWW-Authenticate"
}

/// Header fields in the order they were sent or added; a name may repeat.
struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral {
    /// One `name: value` line.
    struct Field: Sendable, Equatable {
        var name: HTTPHeaderName
        var value: String
    }

    private(set) var fields: [Field] = []

    init() {}

    init(dictionaryLiteral elements: (HTTPHeaderName, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// The values of `name` joined as one (RFC 9110 §5.3: `, `; `; ` for `Cookie`, RFC 6265 §5.4); nil when absent.
    /// Setting replaces every field of that name with one, where the first was; nil removes them.
    subscript(name: HTTPHeaderName) -> String? {
        get {
            let values = self[values: name]
            return values.isEmpty ? nil : values.joined(separator: name == .cookie ? "; " : ", ")
        }
        set {
            let first = fields.firstIndex { $0.name == name }
            fields.removeAll { $0.name == name }
            guard let newValue else { return }
            fields.insert(Field(name: name, value: newValue), at: Swift.min(first ?? fields.count, fields.count))
        }
    }

    /// Every value of `name`, in order, unjoined.
    subscript(values name: HTTPHeaderName) -> [String] {
        fields.filter { $0.name == name }.map(\.value)
    }

    /// Adds a field after the others, keeping any of the same name.
    mutating func append(_ name: HTTPHeaderName, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    mutating func append(contentsOf other: HTTPHeaders) {
        fields.append(contentsOf: other.fields)
    }

    /// The values of the header `name` (case-insensitive), joined with ", " when repeated.
    func value(named name: String) -> String? {
        let values = self.values(named: name)
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    /// Every value of the header `name` (case-insensitive), unjoined.
    func values(named name: String) -> [String] {
        self[values: HTTPHeaderName(name)]
    }

    /// Sets the header `name` to `value`.
    mutating func set(_ name: String, _ value: String) {
        self[HTTPHeaderName(name)] = value
    }
}

/// A request as the server read it: the body in full.
struct Request: Sendable {
    var method: HTTPMethod
    /// The request target as sent, still percent-encoded, with its query (`/json/users/a%2Fb/devices?x=1`).
    var target: String
    var headers: HTTPHeaders
    var body: [UInt8]
}

/// An answer: status, headers and body, and how the connection delivers it. The server adds `Content-Length` and
/// `Date`.
struct Response: Sendable {
    /// How the answer travels: whole, or broken the ways `ConnectionFaults` makes it.
    enum Delivery: Sendable, Equatable {
        /// The head and the body, at once.
        case whole
        /// No byte at all: the connection is reset (TCP RST) instead.
        case reset
        /// The head with the full `Content-Length` and the first half of the body; then the connection closes.
        case truncated
        /// The head at once, the body in pieces spread over `seconds`.
        case trickled(seconds: Double)
    }

    var status: HTTPStatus
    var headers: HTTPHeaders
    var body: [UInt8]
    var delivery: Delivery

    init(status: HTTPStatus, headers: HTTPHeaders = [:], body: [UInt8] = [], delivery: Delivery = .whole) {
        self.status = status
        self.headers = headers
        self.body = body
        self.delivery = delivery
    }
}

/// The `Date` header's format.
enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// RFC 9110 §5.6.7's IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func imfFixdate(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func twoDigits(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekdays[Int(parts.tm_wday)]), \(twoDigits(parts.tm_mday)) \(months[Int(parts.tm_mon)]) "
            + "\(parts.tm_year + 1900) \(twoDigits(parts.tm_hour)):\(twoDigits(parts.tm_min)):\(twoDigits(parts.tm_sec)) GMT"
    }
}
