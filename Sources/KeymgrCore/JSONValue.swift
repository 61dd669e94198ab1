import AgentWire
import Foundation

/// A JSON value, for JWS headers and claims and for audit details.
///
/// `canonicalJSON()` gives one deterministic text per value: object keys sorted by Unicode code point,
/// no whitespace, `/` not escaped, so hashes and signatures over it are reproducible.
public indirect enum JSONValue: Sendable, Equatable, Codable {
    /// A string.
    case string(String)
    /// An integer (JSON numbers without fraction or exponent that fit 64 bits).
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// `null`.
    case null
    /// An array.
    case array([JSONValue])
    /// An object.
    case object([String: JSONValue])

    /// Decodes any JSON value; integers that fit `Int64` become `.int`, other numbers `.double`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Encodes the value as the JSON it represents.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The canonical text: object keys sorted by Unicode code point (as RFC 7638 and Python's `sort_keys`),
    /// no whitespace, `"`, `\` and control characters escaped, `/` and non-ASCII written as is (UTF-8),
    /// non-finite doubles written as `null`.
    public func canonicalJSON() -> String {
        var out = JSONWriter()
        write(into: &out)
        return String(decoding: out.bytes, as: UTF8.self)
    }

    /// Strings through keymgr's one JSON writer (AgentWire's), without `escapingInvisibles`: C0 controls only.
    private func write(into out: inout JSONWriter) {
        switch self {
        case .string(let value):
            out.string(value)
        case .int(let value):
            out.raw(String(value))
        case .double(let value):
            out.raw(value.isFinite ? value.description : "null")
        case .bool(let value):
            out.raw(value ? "true" : "false")
        case .null:
            out.raw("null")
        case .array(let values):
            out.raw("[")
            for (index, value) in values.enumerated() {
                if index > 0 { out.raw(",") }
                value.write(into: &out)
            }
            out.raw("]")
        case .object(let members):
            out.raw("{")
            let keys = members.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
            for (index, key) in keys.enumerated() {
                if index > 0 { out.raw(",") }
                out.string(key)
                out.raw(":")
                members[key]?.write(into: &out)
            }
            out.raw("}")
        }
    }

    /// Parses UTF-8 JSON text whose top level is an object; nil if it is not valid JSON or not an object.
    package static func parseObject(_ text: [UInt8]) -> [String: JSONValue]? {
        try? JSONDecoder().decode([String: JSONValue].self, from: Data(text))
    }

    /// The string, if this is `.string`.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, if this is `.int`.
    public var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The number as a `Double`, if this is `.double` or `.int`.
    public var doubleValue: Double? {
        switch self {
        case .double(let value): return value
        case .int(let value): return Double(value)
        default: return nil
        }
    }

    /// The Boolean, if this is `.bool`.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The elements, if this is `.array`.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members, if this is `.object`.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// Whether this is `.null`.
    public var isNull: Bool { self == .null }

    /// The member named `key`, if this is an object that has it.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    /// `.string(value)`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `.int(value)`.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// `.double(value)`.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// `.bool(value)`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `.array(elements)`.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// `.object(elements)`; a repeated key keeps its last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue {
    /// Parses the JSON keymgr writes in audit details (objects, arrays, strings without escapes, integers, booleans,
    /// null) without `JSONDecoder`, which costs more than reading the row when `audit` prints a million entries.
    /// Returns nil for anything else (an escape, a fraction or exponent, invalid text): the caller then decodes the
    /// text with `JSONDecoder`, so both paths give the same value.
    package static func parseCommon(_ text: String) -> JSONValue? {
        var parser = CommonJSONParser(bytes: Array(text.utf8))
        guard let value = parser.value(depth: 0) else { return nil }
        parser.skipBlanks()
        return parser.index == parser.bytes.count ? value : nil
    }
}

/// The parser of `JSONValue.parseCommon`.
private struct CommonJSONParser {
    let bytes: [UInt8]
    var index = 0

    mutating func skipBlanks() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x0A || bytes[index] == 0x0D {
            index += 1
        }
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        skipBlanks()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    mutating func value(depth: Int) -> JSONValue? {
        skipBlanks()
        guard depth < 32, index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var members: [String: JSONValue] = [:]
            if take(UInt8(ascii: "}")) { return .object(members) }
            repeat {
                skipBlanks()
                guard let name = string(), take(UInt8(ascii: ":")), let member = value(depth: depth + 1),
                      members[name] == nil else { return nil }
                members[name] = member
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? .object(members) : nil
        case UInt8(ascii: "["):
            index += 1
            var elements: [JSONValue] = []
            if take(UInt8(ascii: "]")) { return .array(elements) }
            repeat {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? .array(elements) : nil
        case UInt8(ascii: "\""):
            return string().map(JSONValue.string)
        case UInt8(ascii: "t"):
            return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"):
            return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"):
            return literal("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return integer()
        default:
            return nil
        }
    }

    /// A string with no escape and no control character.
    private mutating func string() -> String? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
        let start = index + 1
        var end = start
        while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
            if bytes[end] == UInt8(ascii: "\\") || bytes[end] < 0x20 { return nil }
            end += 1
        }
        guard end < bytes.count else { return nil }
        index = end + 1
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    private mutating func literal(_ word: String) -> Bool {
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count, bytes[index..<(index + expected.count)].elementsEqual(expected) else {
            return false
        }
        index += expected.count
        return true
    }

    /// An integer that fits 64 bits, with no leading zero; nil for a fraction or an exponent.
    private mutating func integer() -> JSONValue? {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digits = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        guard index > digits, !(bytes[digits] == UInt8(ascii: "0") && index - digits > 1) else { return nil }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            return nil
        }
        return Int64(String(decoding: bytes[start..<index], as: UTF8.self)).map(JSONValue.int)
    }
}
