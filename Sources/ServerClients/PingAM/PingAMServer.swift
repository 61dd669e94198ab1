import Foundation

/// Where a PingAM deployment answers: its base URL and realm, as the wire clients need them.
public struct PingAMServer: Sendable, Equatable {
    public var baseURL: URL
    /// The realm path as PingAM writes it: `/realms/root`, `/realms/root/realms/alpha`, ….
    public var realmPath: String

    public init(baseURL: URL, realmPath: String = "/realms/root") {
        self.baseURL = baseURL
        self.realmPath = realmPath
    }

    /// `{base}/json{realmPath}` with no doubled slashes.
    public var jsonBase: String {
        var base = baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        var realm = realmPath.hasPrefix("/") ? realmPath : "/" + realmPath
        while realm.hasSuffix("/") && realm.count > 1 { realm.removeLast() }
        return base + "/json" + (realm == "/" ? "" : realm)
    }

    /// Percent-encodes everything but ALPHA, DIGIT, `-`, `_` and `~`: `/`, `?`, `#`, `.` and spaces
    /// can never change the path's shape.
    public static func percentEncodedSegment(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let digits = Array("0123456789ABCDEF".unicodeScalars)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(digits[Int(byte >> 4)])
                out.unicodeScalars.append(digits[Int(byte & 0x0f)])
            }
        }
        return out
    }

    /// A URL under `jsonBase`; `pathAndQuery` starts with `/`.
    func url(_ pathAndQuery: String) throws -> URL {
        guard let url = URL(string: jsonBase + pathAndQuery) else {
            throw TransportError(.malformed, "cannot build a request URL from base \(baseURL.absoluteString)")
        }
        return url
    }
}
