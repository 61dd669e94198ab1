/// The part of TOML the agent's policy is written in (docs/agent-policy.md): comments, `[table]` and `[[table]]`
/// headers, and `key = value` lines whose value is a basic string or an array of basic strings (which may span
/// lines). Everything else TOML has (numbers, booleans, dates, inline tables, literal and multi-line strings,
/// dotted keys) is refused with the line it is on and what to write instead: a policy is small, and a parser that
/// takes only what the policy needs has no corner in which a rule could be read other than as written.
struct PolicyTOML {
    /// A value: a string, or an array of strings (each with its line).
    enum Value: Equatable {
        case string(String)
        case array([String])
    }

    /// `key = value`, with the line the key is on.
    struct Entry: Equatable {
        let key: String
        let value: Value
        let line: Int
    }

    /// A table header and the entries under it. `isArray`: `[[name]]`.
    struct Table: Equatable {
        let name: String
        let isArray: Bool
        let line: Int
        var entries: [Entry]
    }

    /// The tables of `text`, in order. Entries before the first header are refused (the policy has no top-level
    /// keys), as is a key given twice in one table.
    static func parse(_ text: String, file: String) throws -> [Table] {
        var parser = PolicyTOML(scalars: Array(text.unicodeScalars), file: file)
        return try parser.document()
    }

    private let scalars: [Unicode.Scalar]
    private let file: String
    private var index = 0
    private var line = 1

    private init(scalars: [Unicode.Scalar], file: String) {
        self.scalars = scalars
        self.file = file
        if scalars.first == "\u{FEFF}" { index = 1 }  // a byte order mark some editors write
    }

    private func error(_ message: String, line: Int? = nil) -> KeyManagerError {
        KeyManagerError(.config, "\(file):\(line ?? self.line): \(message)")
    }

    private var current: Unicode.Scalar? { index < scalars.count ? scalars[index] : nil }

    private mutating func document() throws -> [Table] {
        var tables: [Table] = []
        while true {
            skipBlanks()
            guard let scalar = current else { return tables }
            switch scalar {
            case "\n", "\r":
                try newline()
            case "#":
                try comment()
            case "[":
                tables.append(try header())
            default:
                let entry = try entry()
                guard !tables.isEmpty else {
                    throw error("`\(entry.key) = …` comes before any table: put it under a [[rule]] header (or [self])",
                                line: entry.line)
                }
                if let first = tables[tables.count - 1].entries.first(where: { $0.key == entry.key }) {
                    throw error("\(entry.key) is given twice in this table (first on line \(first.line)): keep one",
                                line: entry.line)
                }
                tables[tables.count - 1].entries.append(entry)
            }
        }
    }

    private mutating func skipBlanks() {
        while let scalar = current, scalar == " " || scalar == "\t" { index += 1 }
    }

    /// A line end: `\n` or `\r\n`.
    private mutating func newline() throws {
        if current == "\r" {
            index += 1
            guard current == "\n" else { throw error("a carriage return that does not end a line: save the file with \\n or \\r\\n line ends") }
        }
        index += 1
        line += 1
    }

    /// `# …` up to the line end (which is left for the caller).
    private mutating func comment() throws {
        while let scalar = current, scalar != "\n", scalar != "\r" {
            if Self.isControl(scalar) && scalar != "\t" {
                throw error("a control character (U+\(String(scalar.value, radix: 16, uppercase: true))) in a comment: remove it")
            }
            index += 1
        }
    }

    /// After a header or a value: blanks, an optional comment, then the line end (or the end of the file).
    private mutating func endOfLine(after what: String) throws {
        skipBlanks()
        if current == "#" { try comment() }
        guard let scalar = current else { return }
        guard scalar == "\n" || scalar == "\r" else {
            throw error("unexpected \(Self.describe(scalar)) after \(what): end the line there (one entry per line), then an optional # comment")
        }
        try newline()
    }

    private mutating func header() throws -> Table {
        let start = line
        index += 1
        let isArray = current == "["
        if isArray { index += 1 }
        skipBlanks()
        guard let name = try bareKey() else {
            throw error("a table header needs a name: write [[rule]] or [self]")
        }
        skipBlanks()
        if current == "." {
            throw error("dotted table names are not accepted here: write [[rule]] or [self]")
        }
        for _ in 0..<(isArray ? 2 : 1) {
            guard current == "]" else {
                throw error("the header [\(isArray ? "[" : "")\(name) is not closed: write \(isArray ? "[[\(name)]]" : "[\(name)]")")
            }
            index += 1
        }
        try endOfLine(after: "the table header")
        return Table(name: name, isArray: isArray, line: start, entries: [])
    }

    private mutating func bareKey() throws -> String? {
        var key = String.UnicodeScalarView()
        while let scalar = current, Self.isBareKeyScalar(scalar) {
            key.append(scalar)
            index += 1
        }
        return key.isEmpty ? nil : String(key)
    }

    private mutating func entry() throws -> Entry {
        let start = line
        let key: String
        if current == "\"" {
            key = try basicString()
            guard !key.isEmpty else { throw error("an empty key \"\": name the key") }
        } else if current == "'" {
            throw error("literal strings ('…') are not accepted: write the key as a bare name or in double quotes (\"…\")")
        } else if let bare = try bareKey() {
            key = bare
        } else {
            throw error("unexpected \(Self.describe(current)): expected `key = value`, a [[rule]] or [self] header, or a # comment")
        }
        skipBlanks()
        if current == "." { throw error("dotted keys (\(key).…) are not accepted: write one key per line in its table") }
        guard current == "=" else { throw error("`\(key)` needs `= value`: e.g. \(key) = [\"…\"]") }
        index += 1
        skipBlanks()
        let value = try value(for: key)
        try endOfLine(after: "the value of \(key)")
        return Entry(key: key, value: value, line: start)
    }

    private mutating func value(for key: String) throws -> Value {
        switch current {
        case "\"":
            return .string(try basicString())
        case "[":
            return .array(try array(for: key))
        case "'":
            throw error("literal strings ('…') are not accepted: write \(key) as a basic string in double quotes (\"…\")")
        case nil, "\n", "\r", "#":
            throw error("\(key) has no value: write \(key) = \"…\" or \(key) = [\"…\", \"…\"]")
        case "{":
            throw error("inline tables are not accepted: \(key) takes a string or an array of strings")
        default:
            throw error("\(key) must be a string in double quotes or an array of them (numbers, booleans and dates "
                + "are not accepted): e.g. \(key) = [\"…\"]")
        }
    }

    /// `[ "a", "b", ]`, across lines, with comments between elements.
    private mutating func array(for key: String) throws -> [String] {
        let start = line
        index += 1
        var elements: [String] = []
        var expectingElement = true
        var atLineStart = false
        while true {
            skipBlanks()
            // A later line that starts with anything but an element, a comma, `]` or a comment (a key, a header)
            // means the array was never closed: the mistake is on the line of its `[`, not on the line that shows it.
            if atLineStart, let scalar = current, !["\"", ",", "]", "#", "\n", "\r"].contains(scalar) {
                throw error("the array of \(key) is not closed: end it with ] (line \(line) starts with "
                    + "\(Self.describe(scalar)), which is not an element)", line: start)
            }
            atLineStart = false
            switch current {
            case nil:
                throw error("the array of \(key) is not closed: end it with ]", line: start)
            case "\n", "\r":
                try newline()
                atLineStart = true
            case "#":
                try comment()
            case "]":
                index += 1
                return elements
            case ",":
                guard !expectingElement else { throw error("a comma with no string before it in the array of \(key): remove it") }
                index += 1
                expectingElement = true
            case "\"":
                guard expectingElement else { throw error("a comma is missing between the strings of \(key)") }
                elements.append(try basicString())
                expectingElement = false
            case "[":
                throw error("nested arrays are not accepted: \(key) is one array of strings")
            case "'":
                throw error("literal strings ('…') are not accepted: write each element of \(key) in double quotes (\"…\")")
            default:
                throw error("the array of \(key) holds strings in double quotes only: unexpected \(Self.describe(current))")
            }
        }
    }

    /// `"…"` on one line, with TOML's escapes.
    private mutating func basicString() throws -> String {
        index += 1
        if current == "\"", index + 1 < scalars.count, scalars[index + 1] == "\"" {
            throw error("multi-line strings (\"\"\"…\"\"\") are not accepted: write the value on one line in \"…\"")
        }
        var text = String.UnicodeScalarView()
        while true {
            guard let scalar = current, scalar != "\n", scalar != "\r" else {
                throw error("a string is not closed on its line: end it with \"")
            }
            index += 1
            switch scalar {
            case "\"":
                return String(text)
            case "\\":
                text.append(try escape())
            default:
                if Self.isControl(scalar) && scalar != "\t" {
                    throw error("a control character (U+\(String(scalar.value, radix: 16, uppercase: true))) in a string: "
                        + "write it as an escape (\\uXXXX) or remove it")
                }
                text.append(scalar)
            }
        }
    }

    private mutating func escape() throws -> Unicode.Scalar {
        guard let scalar = current else { throw error("a string ends in \\: write \\\\ for a backslash") }
        index += 1
        switch scalar {
        case "b": return "\u{08}"
        case "t": return "\t"
        case "n": return "\n"
        case "f": return "\u{0C}"
        case "r": return "\r"
        case "\"": return "\""
        case "\\": return "\\"
        case "u", "U":
            let count = scalar == "u" ? 4 : 8
            var value: UInt32 = 0
            for _ in 0..<count {
                guard let digit = current, let nibble = Self.hexValue(digit) else {
                    throw error("\\\(scalar) needs \(count) hexadecimal digits")
                }
                value = value * 16 + nibble
                index += 1
            }
            guard let decoded = Unicode.Scalar(value) else {
                throw error("\\\(scalar)\(String(value, radix: 16, uppercase: true)) is not a Unicode scalar value")
            }
            return decoded
        default:
            throw error("unknown escape \\\(scalar): the escapes are \\\" \\\\ \\b \\t \\n \\f \\r \\uXXXX \\UXXXXXXXX")
        }
    }

    private static func hexValue(_ scalar: Unicode.Scalar) -> UInt32? {
        switch scalar {
        case "0"..."9": scalar.value - 0x30
        case "a"..."f": scalar.value - 0x61 + 10
        case "A"..."F": scalar.value - 0x41 + 10
        default: nil
        }
    }

    private static func isBareKeyScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "A"..."Z", "a"..."z", "0"..."9", "_", "-": true
        default: false
        }
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7F
    }

    private static func describe(_ scalar: Unicode.Scalar?) -> String {
        guard let scalar else { return "end of file" }
        if isControl(scalar) || scalar.value > 0x7E { return "character U+\(String(scalar.value, radix: 16, uppercase: true))" }
        return "`\(scalar)`"
    }
}
