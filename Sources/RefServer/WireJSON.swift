import Foundation

/// A JSON value as it travels on the wire: what the server reads from request bodies and writes in
/// callbacks and error bodies.
///
/// The server keeps its own small JSON type (rather than `[String: Any]`) so request handling stays
/// `Sendable` and every field read is explicit about its type.
indirect enum WireJSON: Sendable, Equatable, Codable {
    case string(String)
    case number(Double)
    case integer(Int64)
    case bool(Bool)
    case null
    case array([WireJSON])
    case object([String: WireJSON])

    /// Decodes JSON text; throws on malformed input.
    static func parse(_ bytes: some Collection<UInt8>) throws -> WireJSON {
        try JSONDecoder().decode(WireJSON.self, from: Data(bytes))
    }

    /// Encodes the value as compact JSON with sorted object keys (stable output for tests and diffs).
    func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a WireJSON cannot fail: every case maps to a JSON value.
        return (try? encoder.encode(self)) ?? Data("null".utf8)
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([WireJSON].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: WireJSON].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member `key` of an object, or nil.
    subscript(key: String) -> WireJSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The string, or nil for any other case.
    var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number as a whole number when it is one, or nil.
    var integerValue: Int64? {
        switch self {
        case .integer(let value): return value
        case .number(let value) where value.rounded() == value && abs(value) < 9.0e15: return Int64(value)
        default: return nil
        }
    }

    /// The elements of an array, or nil.
    var arrayValue: [WireJSON]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members of an object, or nil.
    var objectValue: [String: WireJSON]? {
        if case .object(let value) = self { return value }
        return nil
    }
}
