import Foundation
import KeyManager

/// keymgr's JSON output built straight into bytes, for documents with many rows (`list --json` over thousands of
/// keys): no `Encodable` tree, no `JSONEncoder`, no second pass for invisible characters.
///
/// It writes exactly what `Console.encoded` writes for the same shape: members in sorted order (the caller writes
/// them so), no whitespace, `/` as is, `"` `\` and C0 controls escaped as `JSONEncoder` does (`\b \t \n \f \r`,
/// else `\u00xx`), DEL, C1 and bidi controls as `\uxxxx` (`Console.escapingInvisibles`). ListingTests compare it
/// with the `Encodable` path byte for byte.
struct JSONBytes {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    /// Punctuation or a member name written as is (the caller's constant, already valid JSON).
    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// `"name":` for a member name that needs no escaping.
    mutating func member(_ name: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// A JSON string, or `null`.
    mutating func string(_ value: String?) {
        guard let value else { return raw("null") }
        bytes.append(UInt8(ascii: "\""))
        var text = value
        text.withUTF8 { utf8 in
            var index = 0
            while index < utf8.count {
                let byte = utf8[index]
                switch byte {
                case UInt8(ascii: "\""): raw("\\\"")
                case UInt8(ascii: "\\"): raw("\\\\")
                case 0x08: raw("\\b")
                case 0x09: raw("\\t")
                case 0x0A: raw("\\n")
                case 0x0C: raw("\\f")
                case 0x0D: raw("\\r")
                case 0x00..<0x20, 0x7F: escaped(UInt32(byte))
                case 0xC2 where index + 1 < utf8.count && (0x80...0x9F).contains(utf8[index + 1]):
                    escaped(UInt32(utf8[index + 1]))  // C1 controls: U+0080 to U+009F, two bytes
                    index += 1
                case 0xD8, 0xE2:
                    // The bidi controls: U+061C (D8 9C), U+200E/F, U+202A–E, U+2066–9 (E2 80 xx, E2 81 xx).
                    let scalar = Self.scalar(utf8, at: index)
                    if let scalar, TextRules.bidiControls.contains(scalar.value) {
                        escaped(scalar.value)
                        index += byte == 0xD8 ? 1 : 2
                    } else {
                        bytes.append(byte)
                    }
                default: bytes.append(byte)
                }
                index += 1
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Text appended as its UTF-8 bytes, unescaped (a table line, a CSV record).
    mutating func text(_ value: String) {
        bytes.append(contentsOf: value.utf8)
    }

    /// Writes what is built so far to stdout once it holds `threshold` bytes or more, and starts again empty: a long
    /// document streams out in flat memory (`audit` over a million entries).
    mutating func flush(over threshold: Int = 1 << 16) {
        guard bytes.count >= threshold, !bytes.isEmpty else { return }
        StandardStream.output.write(bytes: bytes)
        bytes.removeAll(keepingCapacity: true)
    }

    /// A timestamp as keymgr writes them (`ISOTime`), or `null`.
    mutating func time(_ date: Date?) {
        string(date.map { ISOTime.string(from: $0) })
    }

    private mutating func escaped(_ value: UInt32) {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        raw("\\u")
        for shift in stride(from: 12, through: 0, by: -4) {
            bytes.append(hex[Int((value >> UInt32(shift)) & 0xF)])
        }
    }

    /// The scalar of a two- or three-byte UTF-8 sequence starting at `index` (valid UTF-8: a Swift string's).
    private static func scalar(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int) -> Unicode.Scalar? {
        let lead = utf8[index]
        if lead & 0xE0 == 0xC0, index + 1 < utf8.count {
            return Unicode.Scalar((UInt32(lead & 0x1F) << 6) | UInt32(utf8[index + 1] & 0x3F))
        }
        if lead & 0xF0 == 0xE0, index + 2 < utf8.count {
            return Unicode.Scalar((UInt32(lead & 0x0F) << 12) | (UInt32(utf8[index + 1] & 0x3F) << 6)
                                  | UInt32(utf8[index + 2] & 0x3F))
        }
        return nil
    }
}

extension JSONBytes {
    /// One key as `KeyJSON` encodes it without `jwk` and `jws`:
    /// `{"authType","createdAt","deviceName","kid","lastUsedAt","owner","serverState","status","userId","username"}`.
    mutating func key(_ key: UserKey) {
        raw("{")
        member("authType"); string(key.authType.rawValue); raw(",")
        member("createdAt"); time(key.createdAt); raw(",")
        member("deviceName"); string(key.deviceName); raw(",")
        member("kid"); string(key.kid); raw(",")
        member("lastUsedAt"); time(key.lastUsedAt); raw(",")
        member("owner"); string(key.owner); raw(",")
        if let left = key.pinAttemptsLeft { member("pinAttemptsLeft"); text(String(left)); raw(",") }
        member("serverState"); string(key.serverState.rawValue); raw(",")
        member("status"); string(key.status.rawValue); raw(",")
        member("userId"); string(key.userId); raw(",")
        member("username"); string(key.username)
        raw("}")
    }
}

extension JSONBytes {
    /// Any JSON value as `Console.encoded` writes it: object members sorted, numbers as the encoder writes them.
    mutating func value(_ value: JSONValue) {
        switch value {
        case .string(let text): string(text)
        case .int(let number): text(String(number))
        case .double: text(Console.encoded(value))
        case .bool(let flag): text(flag ? "true" : "false")
        case .null: raw("null")
        case .array(let values):
            raw("[")
            for (index, element) in values.enumerated() {
                if index > 0 { raw(",") }
                self.value(element)
            }
            raw("]")
        case .object(let members):
            raw("{")
            for (index, name) in members.keys.sorted().enumerated() {
                if index > 0 { raw(",") }
                string(name)
                raw(":")
                if let member = members[name] { self.value(member) }
            }
            raw("}")
        }
    }

    /// One audit entry as `AuditEntryJSON` encodes it:
    /// `{"actor","at","details","event","hash","kid","prevHash","seq","userId"}`.
    mutating func auditEntry(_ entry: AuditEntry) {
        raw("{")
        member("actor"); string(entry.actor); raw(",")
        member("at"); string(entry.at); raw(",")
        member("details"); value(entry.details); raw(",")
        member("event"); string(entry.event); raw(",")
        member("hash"); string(entry.hash); raw(",")
        member("kid"); string(entry.kid); raw(",")
        member("owner"); string(entry.owner); raw(",")
        member("prevHash"); string(entry.prevHash); raw(",")
        member("seq"); text(String(entry.seq)); raw(",")
        member("userId"); string(entry.userId)
        raw("}")
    }
}
