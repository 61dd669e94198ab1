/// keymgr's one JSON writer, straight into bytes and Foundation-free (the lean client links it): the agent protocol's
/// frames, the client's error document, keymgr-core's streamed `--json` documents (`JSONBytes`) and the canonical JSON
/// keymgr signs and hashes (`JSONValue.canonicalJSON`, KeymgrCore) all escape their strings here.
///
/// Strings: `"` and `\` escaped, `\b \t \n \f \r` for those C0 controls and `\u00xx` for the others, `/` and
/// everything else written as is (UTF-8), as `JSONEncoder` does. With `escapingInvisibles`, DEL, the C1 controls and
/// the bidirectional controls (`PrintableText.bidiControls`) are written as `\uxxxx` too: the same value for a JSON
/// reader, but nothing a server sent can move a terminal's cursor or reorder text. Canonical JSON never escapes them,
/// so its bytes (and every signature and hash over them) stay what they were.
public struct JSONWriter {
    /// What is written so far.
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    /// Text appended as its UTF-8 bytes, unescaped: punctuation, numbers, member names that need no escaping.
    public mutating func raw(_ text: String) { bytes.append(contentsOf: text.utf8) }

    /// Bytes appended as they are.
    public mutating func raw(bytes more: some Sequence<UInt8>) { bytes.append(contentsOf: more) }

    /// `text` as a JSON string.
    public mutating func string(_ text: String, escapingInvisibles: Bool = false) {
        Self.appendString(text, to: &bytes, escapingInvisibles: escapingInvisibles)
    }

    /// Forgets what is written (after it was sent), keeping the capacity.
    public mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

    /// `text` as a JSON string appended to `out`, for writers that keep their own buffer.
    public static func appendString(_ text: String, to out: inout [UInt8], escapingInvisibles: Bool = false) {
        out.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var index = 0
            while index < utf8.count {
                let byte = utf8[index]
                switch byte {
                case UInt8(ascii: "\""): append("\\\"", to: &out)
                case UInt8(ascii: "\\"): append("\\\\", to: &out)
                case 0x08: append("\\b", to: &out)
                case 0x09: append("\\t", to: &out)
                case 0x0A: append("\\n", to: &out)
                case 0x0C: append("\\f", to: &out)
                case 0x0D: append("\\r", to: &out)
                case 0x00..<0x20: escaped(UInt32(byte), to: &out)
                case 0x7F where escapingInvisibles: escaped(UInt32(byte), to: &out)
                case 0xC2 where escapingInvisibles && index + 1 < utf8.count && (0x80...0x9F).contains(utf8[index + 1]):
                    escaped(UInt32(utf8[index + 1]), to: &out)  // C1 controls: U+0080 to U+009F, two bytes
                    index += 1
                case 0xD8 where escapingInvisibles, 0xE2 where escapingInvisibles:
                    // The bidi controls: U+061C (D8 9C), U+200E/F, U+202A–E, U+2066–9 (E2 80 xx, E2 81 xx).
                    if let scalar = scalar(utf8, at: index), PrintableText.bidiControls.contains(scalar) {
                        escaped(scalar, to: &out)
                        index += byte == 0xD8 ? 1 : 2
                    } else {
                        out.append(byte)
                    }
                default: out.append(byte)
                }
                index += 1
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// A member name from a frame, cut short and made printable, for an error message.
    static func printable(_ name: String) -> String {
        PrintableText.stripped(String(String.UnicodeScalarView(name.unicodeScalars.prefix(40))), keepingLineBreaks: false)
    }

    private static func append(_ text: StaticString, to out: inout [UInt8]) {
        text.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    private static func escaped(_ value: UInt32, to out: inout [UInt8]) {
        let hex: StaticString = "0123456789abcdef"
        append("\\u", to: &out)
        hex.withUTF8Buffer { digits in
            for shift in stride(from: 12, through: 0, by: -4) {
                out.append(digits[Int((value >> UInt32(shift)) & 0xF)])
            }
        }
    }

    /// The scalar value of a two- or three-byte UTF-8 sequence starting at `index` (valid UTF-8: a Swift string's).
    private static func scalar(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int) -> UInt32? {
        let lead = utf8[index]
        if lead & 0xE0 == 0xC0, index + 1 < utf8.count {
            return (UInt32(lead & 0x1F) << 6) | UInt32(utf8[index + 1] & 0x3F)
        }
        if lead & 0xF0 == 0xE0, index + 2 < utf8.count {
            return (UInt32(lead & 0x0F) << 12) | (UInt32(utf8[index + 1] & 0x3F) << 6) | UInt32(utf8[index + 2] & 0x3F)
        }
        return nil
    }
}

/// keymgr's one printable-text filter, for text from elsewhere (a server's error description, a device name it lists)
/// before it reaches a terminal: the lean client and keymgr-core keep off it the same characters.
public enum PrintableText {
    /// The Unicode bidirectional formatting characters: embeddings, overrides, isolates and marks (U+061C, U+200E,
    /// U+200F, U+202A–U+202E, U+2066–U+2069). The one list: what keymgr refuses to store (`TextRules`), keeps off the
    /// terminal and escapes in its JSON.
    public static let bidiControls: Set<UInt32> = [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                                                   0x2066, 0x2067, 0x2068, 0x2069]

    /// Whether `value` is a character that could rewrite a terminal or make text display other than it is: a C0 or
    /// C1 control, DEL, or a bidirectional control.
    public static func isInvisible(_ value: UInt32) -> Bool {
        value < 0x20 || (0x7F...0x9F).contains(value) || bidiControls.contains(value)
    }

    /// `text` without those characters; tab and line feed stay unless `keepingLineBreaks` is false.
    public static func stripped(_ text: String, keepingLineBreaks: Bool = true) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if (keepingLineBreaks && (value == 0x09 || value == 0x0A)) || !isInvisible(value) {
                scalars.append(scalar)
            }
        }
        return String(scalars)
    }
}
