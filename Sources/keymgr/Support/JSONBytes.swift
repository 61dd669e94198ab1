import AgentWire
import Foundation
import KeyManager

/// keymgr's JSON output built straight into bytes, for documents with many rows (`list --json` over thousands of
/// keys): no `Encodable` tree, no `JSONEncoder`, no second pass for invisible characters.
///
/// It writes exactly what `Console.encoded` writes for the same shape: members in sorted order (the caller writes
/// them so), no whitespace, strings through AgentWire's `JSONWriter` with `escapingInvisibles` (`"` `\` and C0
/// controls as `JSONEncoder` escapes them, DEL, C1 and bidi controls as `\uxxxx`, as `Console.escapingInvisibles`).
/// ListingTests compare it with the `Encodable` path byte for byte.
struct JSONBytes {
    private(set) var bytes: [UInt8] = []
    /// Where `flush` writes: the request's stdout.
    let output: StandardStream?

    init(capacity: Int = 0, output: StandardStream? = nil) {
        self.output = output
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

    /// A JSON string, or `null`: escaped by keymgr's one JSON writer (AgentWire's), invisibles included.
    mutating func string(_ value: String?) {
        guard let value else { return raw("null") }
        JSONWriter.appendString(value, to: &bytes, escapingInvisibles: true)
    }

    /// Text appended as its UTF-8 bytes, unescaped (a table line, a CSV record).
    mutating func text(_ value: String) {
        bytes.append(contentsOf: value.utf8)
    }

    /// Writes what is built so far to `output` (the request's stdout) once it holds `threshold` bytes or more, and starts again empty: a long
    /// document streams out in flat memory (`audit` over a million entries).
    mutating func flush(over threshold: Int = 1 << 16) {
        guard bytes.count >= threshold, !bytes.isEmpty, let output else { return }
        output.write(bytes: bytes)
        bytes.removeAll(keepingCapacity: true)
    }

    /// A timestamp as keymgr writes them (`ISOTime`), or `null`.
    mutating func time(_ date: Date?) {
        string(date.map { ISOTime.string(from: $0) })
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
