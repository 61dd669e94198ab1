// A minimal, strict JSON reader and writer for the agent protocol's two shapes (RFC 8259). Strict where a lenient
// reader would let two programs read one frame differently: duplicate member names, invalid UTF-8, unpaired
// surrogate escapes, trailing bytes, leading zeros and nesting deeper than the protocol needs are all refused.

/// A JSON value as the protocol reads it: integers apart from other numbers (only integers are ever used).
enum JSONValue: Equatable {
    case null
    case boolean(Bool)
    case integer(Int64)
    /// A number with a fraction or exponent, or out of Int64's range: kept only to be ignored.
    case otherNumber
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

enum JSONReader {
    /// The deepest nesting accepted: the protocol's documents are 2 deep; an unknown member may add a little.
    static let maximumDepth = 8

    /// `bytes` as one JSON object (and nothing else but whitespace around it).
    static func object(_ bytes: [UInt8]) throws(AgentWireError) -> [String: JSONValue] {
        guard UTF8Check.isValid(bytes) else { throw AgentWireError("the frame is not valid UTF-8") }
        var parser = Parser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 1)
        parser.skipWhitespace()
        guard parser.position == bytes.count else {
            throw AgentWireError("the frame has bytes after its JSON document (at byte \(parser.position))")
        }
        guard case .object(let members) = value else { throw AgentWireError("the frame is not a JSON object") }
        return members
    }

    private struct Parser {
        let bytes: [UInt8]
        var position = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        private func fault(_ what: String) -> AgentWireError {
            AgentWireError("the frame is not valid JSON: \(what) at byte \(position)")
        }

        mutating func skipWhitespace() {
            while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
        }

        private var next: UInt8? { position < bytes.count ? bytes[position] : nil }

        private mutating func expect(_ literal: String, _ value: JSONValue) throws(AgentWireError) -> JSONValue {
            let utf8 = Array(literal.utf8)
            guard position + utf8.count <= bytes.count, Array(bytes[position..<position + utf8.count]) == utf8 else {
                throw fault("unexpected character")
            }
            position += utf8.count
            return value
        }

        mutating func value(depth: Int) throws(AgentWireError) -> JSONValue {
            guard let byte = next else { throw fault("unexpected end") }
            switch byte {
            case UInt8(ascii: "{"):
                guard depth <= JSONReader.maximumDepth else { throw fault("nesting deeper than \(JSONReader.maximumDepth)") }
                return try object(depth: depth)
            case UInt8(ascii: "["):
                guard depth <= JSONReader.maximumDepth else { throw fault("nesting deeper than \(JSONReader.maximumDepth)") }
                return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): return try expect("true", .boolean(true))
            case UInt8(ascii: "f"): return try expect("false", .boolean(false))
            case UInt8(ascii: "n"): return try expect("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw fault("unexpected character")
            }
        }

        private mutating func object(depth: Int) throws(AgentWireError) -> JSONValue {
            position += 1
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if next == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard next == UInt8(ascii: "\"") else { throw fault("expected a member name") }
                let name = try string()
                skipWhitespace()
                guard next == UInt8(ascii: ":") else { throw fault("expected ':'") }
                position += 1
                skipWhitespace()
                let member = try value(depth: depth + 1)
                guard members.updateValue(member, forKey: name) == nil else {
                    throw AgentWireError("the frame names member \"\(JSONWriter.printable(name))\" twice")
                }
                skipWhitespace()
                switch next {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "}"):
                    position += 1
                    return .object(members)
                default: throw fault("expected ',' or '}'")
                }
            }
        }

        private mutating func array(depth: Int) throws(AgentWireError) -> JSONValue {
            position += 1
            var items: [JSONValue] = []
            skipWhitespace()
            if next == UInt8(ascii: "]") {
                position += 1
                return .array(items)
            }
            while true {
                skipWhitespace()
                items.append(try value(depth: depth + 1))
                skipWhitespace()
                switch next {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "]"):
                    position += 1
                    return .array(items)
                default: throw fault("expected ',' or ']'")
                }
            }
        }

        private mutating func number() throws(AgentWireError) -> JSONValue {
            var negative = false
            if next == UInt8(ascii: "-") {
                negative = true
                position += 1
            }
            guard let first = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
                throw fault("a number without digits")
            }
            var magnitude: UInt64 = 0
            var overflow = false
            if first == UInt8(ascii: "0") {
                position += 1
                if let digit = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) {
                    throw fault("a number with a leading zero")
                }
            } else {
                while let digit = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) {
                    let (times, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times.addingReportingOverflow(UInt64(digit - UInt8(ascii: "0")))
                    overflow = overflow || o1 || o2
                    magnitude = sum
                    position += 1
                }
            }
            var integral = true
            if next == UInt8(ascii: ".") {
                integral = false
                position += 1
                guard try digits() > 0 else { throw fault("a fraction without digits") }
            }
            if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
                integral = false
                position += 1
                if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { position += 1 }
                guard try digits() > 0 else { throw fault("an exponent without digits") }
            }
            guard integral, !overflow else { return .otherNumber }
            if negative {
                guard magnitude <= UInt64(Int64.max) + 1 else { return .otherNumber }
                return .integer(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
            }
            guard magnitude <= UInt64(Int64.max) else { return .otherNumber }
            return .integer(Int64(magnitude))
        }

        private mutating func digits() throws(AgentWireError) -> Int {
            var count = 0
            while let digit = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) {
                position += 1
                count += 1
            }
            return count
        }

        private mutating func string() throws(AgentWireError) -> String {
            position += 1  // the opening quote
            var scalars = String.UnicodeScalarView()
            var run = position  // start of the current stretch of plain bytes
            func flush(_ end: Int) {
                // The whole frame was checked as UTF-8, and a stretch never splits a character.
                scalars.append(contentsOf: String(decoding: bytes[run..<end], as: UTF8.self).unicodeScalars)
            }
            while true {
                guard let byte = next else { throw fault("an unterminated string") }
                switch byte {
                case UInt8(ascii: "\""):
                    flush(position)
                    position += 1
                    return String(scalars)
                case UInt8(ascii: "\\"):
                    flush(position)
                    position += 1
                    scalars.append(try escape())
                    run = position
                case 0x00..<0x20:
                    throw fault("a control character inside a string")
                default:
                    position += 1
                }
            }
        }

        private mutating func escape() throws(AgentWireError) -> Unicode.Scalar {
            guard let byte = next else { throw fault("an unterminated escape") }
            position += 1
            switch byte {
            case UInt8(ascii: "\""): return "\""
            case UInt8(ascii: "\\"): return "\\"
            case UInt8(ascii: "/"): return "/"
            case UInt8(ascii: "b"): return "\u{08}"
            case UInt8(ascii: "f"): return "\u{0C}"
            case UInt8(ascii: "n"): return "\n"
            case UInt8(ascii: "r"): return "\r"
            case UInt8(ascii: "t"): return "\t"
            case UInt8(ascii: "u"):
                let unit = try hex4()
                if (0xD800...0xDBFF).contains(unit) {
                    guard next == UInt8(ascii: "\\"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "u")
                    else { throw fault("an unpaired surrogate escape") }
                    position += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fault("an unpaired surrogate escape") }
                    let value = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    guard let scalar = Unicode.Scalar(value) else { throw fault("an invalid escape") }
                    return scalar
                }
                guard let scalar = Unicode.Scalar(unit) else { throw fault("an unpaired surrogate escape") }
                return scalar
            default: throw fault("an invalid escape")
            }
        }

        private mutating func hex4() throws(AgentWireError) -> UInt32 {
            guard position + 4 <= bytes.count else { throw fault("a short \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw fault("a \\u escape with a non-hex digit")
                }
                value = value << 4 | UInt32(digit)
                position += 1
            }
            return value
        }
    }
}

/// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
public enum UTF8Check {
    public static func isValid(_ bytes: some Collection<UInt8>) -> Bool {
        var iterator = bytes.makeIterator()
        while let lead = iterator.next() {
            if lead < 0x80 { continue }
            let count: Int
            let minimum: UInt32
            var value: UInt32
            switch lead {
            case 0xC2...0xDF: count = 1; minimum = 0x80; value = UInt32(lead & 0x1F)
            case 0xE0...0xEF: count = 2; minimum = 0x800; value = UInt32(lead & 0x0F)
            case 0xF0...0xF4: count = 3; minimum = 0x10000; value = UInt32(lead & 0x07)
            default: return false
            }
            for _ in 0..<count {
                guard let byte = iterator.next(), byte & 0xC0 == 0x80 else { return false }
                value = value << 6 | UInt32(byte & 0x3F)
            }
            if value < minimum || value > 0x10FFFF || (0xD800...0xDFFF).contains(value) { return false }
        }
        return true
    }
}
