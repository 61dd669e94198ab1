import Foundation

/// A request target split the way PingAM reads it: the path into segments BEFORE percent-decoding
/// each one (so `a%2Fb` stays one segment, user `a/b`), and the query into decoded name/value pairs.
struct RawTarget: Sendable, Equatable {
    /// The decoded path segments, without the empty segment before the leading `/`.
    var segments: [String]
    /// The decoded query parameters in order; a name without `=` has an empty value.
    var query: [(name: String, value: String)]

    static func == (lhs: RawTarget, rhs: RawTarget) -> Bool {
        lhs.segments == rhs.segments && lhs.query.map(\.name) == rhs.query.map(\.name)
            && lhs.query.map(\.value) == rhs.query.map(\.value)
    }

    /// Parses a raw (still percent-encoded) request target such as `/json/users/a%2Fb/devices?x=1`.
    /// Returns nil when a segment or parameter is not valid percent-encoded UTF-8.
    init?(_ raw: String) {
        let withoutFragment = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let parts = withoutFragment.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let rawPath = parts.first.map(String.init) ?? ""
        var rawSegments = rawPath.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if rawSegments.first == "" { rawSegments.removeFirst() }
        if rawSegments.last == "", rawSegments.count > 0 { rawSegments.removeLast() }
        var segments: [String] = []
        for rawSegment in rawSegments {
            guard let decoded = RawTarget.percentDecode(rawSegment, plusIsSpace: false) else { return nil }
            segments.append(decoded)
        }
        var query: [(name: String, value: String)] = []
        if parts.count > 1 {
            for pair in parts[1].split(separator: "&") where !pair.isEmpty {
                let nameValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard let name = RawTarget.percentDecode(String(nameValue[0]), plusIsSpace: true),
                    let value = RawTarget.percentDecode(
                        nameValue.count > 1 ? String(nameValue[1]) : "", plusIsSpace: true)
                else { return nil }
                query.append((name, value))
            }
        }
        self.segments = segments
        self.query = query
    }

    /// The first value of the query parameter `name`, or nil.
    func parameter(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }

    /// Decodes `%XX` escapes (and, in query strings, `+` as a space, as servlet containers do).
    static func percentDecode(_ text: String, plusIsSpace: Bool) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue)
                else { return nil }
                bytes.append(high << 4 | low)
            case UInt8(ascii: "+") where plusIsSpace:
                bytes.append(UInt8(ascii: " "))
            default:
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Percent-encoding for building paths in the server's own outputs and tests' expectations.
enum PathEncoding {
    /// RFC 3986 unreserved characters: everything else in a segment is percent-encoded.
    static let unreserved: CharacterSet = {
        var set = CharacterSet()
        set.insert(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return set
    }()

    /// `segment` encoded as one path segment.
    static func segment(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: unreserved) ?? segment
    }
}
