internal import TOMLKit

/// The policy file's TOML (docs/agent-policy.md), read by TOMLKit (toml++ 3.4, TOML 1.0): TOMLKit alone decides
/// whether the text is TOML and what its values are. What it does not give, the line a table or key is on, comes
/// from `PolicyTOMLLines`, which reads the same text for lines only and never decides what the document says.
///
/// Refused before TOMLKit reads the text: a NUL character and the escapes `\u0000` and `\U00000000` (TOMLKit hands
/// strings over as C strings, which would end at the NUL where TOML's string goes on). Stricter than TOML, never
/// looser.
struct PolicyTOML {
    /// A TOML value as TOMLKit read it.
    indirect enum Value: Equatable {
        case string(String)
        case integer(Int)
        case float(Double)
        case boolean(Bool)
        /// A date, a time or a date-time (the policy has none).
        case dateTime(String)
        case array([Value])
        /// A table's entries in TOMLKit's order (sorted by key).
        case table([Entry])

        /// What the value is, for messages.
        var kind: String {
            switch self {
            case .string: "a string"
            case .integer, .float: "a number"
            case .boolean: "a boolean"
            case .dateTime: "a date"
            case .array: "an array"
            case .table: "a table"
            }
        }
    }

    /// One key of a table and its value.
    struct Entry: Equatable {
        let key: String
        let value: Value
    }

    /// The document's top-level entries and where its tables and keys are.
    let root: [Entry]
    let lines: PolicyTOMLLines

    /// Reads `text`. A refusal is `config` naming `file:line:`: TOMLKit's line for a syntax error, except that an
    /// array (or a multi-line string) never closed is reported on the line that opened it, not on the line where
    /// TOML noticed.
    static func parse(_ text: String, file: String) throws -> PolicyTOML {
        // A byte order mark some editors write: skipped (TOML has none), on line 1 either way.
        let body = text.unicodeScalars.first == "\u{FEFF}" ? String(text.unicodeScalars.dropFirst()) : text
        if let line = nulLine(body) {
            throw KeyManagerError(.config, "\(file):\(line): a NUL character (or the escape \\u0000) is not accepted "
                + "in a policy: remove it")
        }
        let lines = PolicyTOMLLines(body)
        // toml++ 3.4 asserts (and aborts: SwiftPM defines no NDEBUG, in release either) on a header whose name starts
        // with anything but a key character or a quote, and on an array element that starts with `}`: refused here
        // first, as TOML refuses them.
        if let line = lines.namelessHeader {
            throw KeyManagerError(.config, "\(file):\(line): a table header needs a name after its [: write [[rule]] or [self]")
        }
        if let line = lines.strayBrace {
            throw KeyManagerError(.config, "\(file):\(line): a } inside an array: remove it, or end the array with ]")
        }
        let table: TOMLTable
        do {
            table = try TOMLTable(string: body)
        } catch let error as TOMLParseError {
            throw syntaxError(error, text: body, file: file)
        }
        guard case .table(let root) = value(of: table) else {
            throw KeyManagerError(.config, "\(file):1: the policy is not a TOML table")
        }
        return PolicyTOML(root: root, lines: lines)
    }

    /// The first line with a NUL character or a `\u0000`/`\U00000000` escape (or such text in a comment or literal
    /// string, which is refused too: simpler than telling them apart, and no policy needs it).
    static func nulLine(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        var line = 1
        for (index, byte) in bytes.enumerated() {
            switch byte {
            case 0:
                return line
            case UInt8(ascii: "\n"):
                line += 1
            case UInt8(ascii: "\\"):
                let rest = bytes[(index + 1)...]
                if rest.starts(with: "u0000".utf8) || rest.starts(with: "U00000000".utf8) { return line }
            default:
                break
            }
        }
        return nil
    }

    private static func syntaxError(_ error: TOMLParseError, text: String, file: String) -> KeyManagerError {
        // Within the file's lines, whatever TOMLKit says of its end.
        let lineCount = 1 + text.utf8.count(where: { $0 == UInt8(ascii: "\n") })
        let reported = min(max(1, error.source.begin.line), lineCount)
        // At the end of the file TOMLKit may name the line where the unclosed value began, or its last line.
        let end = error.description.contains("end-of-file") ? PolicyTOMLLines.unclosed(text, errorLine: lineCount + 1) : nil
        if let unclosed = end ?? PolicyTOMLLines.unclosed(text, errorLine: reported) {
            return KeyManagerError(.config, "\(file):\(unclosed.line): \(unclosed.message)")
        }
        var description = error.description
        if description.hasSuffix(".") { description.removeLast() }
        return KeyManagerError(.config, "\(file):\(reported): \(description) (column \(error.source.begin.column)): "
            + "correct the TOML there")
    }

    private static func value(of node: any TOMLValueConvertible) -> Value {
        switch node.type {
        case .string: return .string(node.string ?? "")
        case .int: return .integer(node.int ?? 0)
        case .double: return .float(node.double ?? 0)
        case .bool: return .boolean(node.bool ?? false)
        case .date, .time, .dateTime: return .dateTime(node.tomlValue.debugDescription)
        case .array:
            guard let array = node.array else { return .array([]) }
            return .array(array.map { value(of: $0) })
        case .table:
            guard let table = (node as? TOMLTable) ?? node.table else { return .table([]) }
            return .table(zip(table.keys, table.values).map { Entry(key: $0, value: value(of: $1)) })
        }
    }
}

/// The line each table header and key of a policy file is on, by its path in the document: `["rule", "2", "who"]`
/// for the `who` of the third `[[rule]]`, array elements by their index. Read from the same text TOMLKit accepted,
/// for messages only: it never decides what the document says, and a path it does not know has the line of its
/// nearest known parent.
struct PolicyTOMLLines {
    private(set) var lines: [[String]: Int] = [:]
    /// The first header whose `[` or `[[` is followed by something that cannot start a name (not a key character, a
    /// quote, `]` or the end of the file).
    private(set) var namelessHeader: Int?
    /// The first array element that starts with `}`.
    private(set) var strayBrace: Int?

    init(_ text: String) {
        var lexer = Lexer(text)
        lexer.run()
        lines = lexer.lines
        namelessHeader = lexer.namelessHeader
        strayBrace = lexer.strayBrace
    }

    /// The line of `path`, or of its longest prefix that has one (1 when none has).
    func line(of path: [String]) -> Int {
        var path = path
        while !path.isEmpty {
            if let line = lines[path] { return line }
            path.removeLast()
        }
        return 1
    }

    /// The last line on which anything under `path` starts.
    func lastLine(under path: [String]) -> Int {
        lines.filter { $0.key.starts(with: path) }.values.max() ?? line(of: path)
    }

    /// When TOML refused `text` on `errorLine` inside an array or multi-line string opened on an earlier line, and
    /// that line reads as the start of the next entry (a header, a `key =`) or nothing but comments follow: the line
    /// where it was opened and what to do. The mistake is there, not where TOML noticed it.
    static func unclosed(_ text: String, errorLine: Int) -> (line: Int, message: String)? {
        let scalars = Array(text.unicodeScalars)
        var start = 0
        var line = 1
        while line < errorLine, start < scalars.count {
            if scalars[start] == "\n" { line += 1 }
            start += 1
        }
        var lexer = Lexer(String(String.UnicodeScalarView(scalars[0..<start])))
        lexer.run()
        guard let open = lexer.open.first, open.line < errorLine else { return nil }
        let rest = Array(scalars[start...])
        switch open.kind {
        case .array:
            guard Lexer.startsAnEntry(rest) || Lexer.onlyComments(rest) else { return nil }
            return (open.line, "the array of \(open.key) is not closed: end it with ]")
        case .string(let delimiter):
            guard !String(String.UnicodeScalarView(rest)).contains(delimiter) else { return nil }
            return (open.line, "the multi-line string of \(open.key) is not closed: end it with \(delimiter)")
        }
    }

    /// A reader of TOML's lexical structure: headers, keys, strings, arrays, inline tables, comments. It reads any
    /// text to its end without failing (what it cannot read it steps over), one scalar at least per step.
    fileprivate struct Lexer {
        enum Kind { case array, string(String) }

        let scalars: [Unicode.Scalar]
        var index = 0
        var line = 1
        var lines: [[String]: Int] = [:]
        /// Elements of each array of tables so far, by its path.
        var arrayCounts: [[String]: Int] = [:]
        /// The table the entries go to.
        var table: [String] = []
        /// Arrays and multi-line strings open where the text ends, outermost first.
        var open: [(kind: Kind, line: Int, key: String)] = []
        var depth = 0
        var namelessHeader: Int?
        var strayBrace: Int?

        init(_ text: String) {
            scalars = Array(text.unicodeScalars)
            if scalars.first == "\u{FEFF}" { index = 1 }
        }

        var current: Unicode.Scalar? { index < scalars.count ? scalars[index] : nil }

        func peek(_ offset: Int) -> Unicode.Scalar? { index + offset < scalars.count ? scalars[index + offset] : nil }

        mutating func advance() {
            if current == "\n" { line += 1 }
            index += 1
        }

        mutating func run() {
            while current != nil {
                let before = index
                statement()
                if index == before { advance() }
            }
        }

        mutating func skipBlanks() {
            while current == " " || current == "\t" { index += 1 }
        }

        mutating func skipComment() {
            guard current == "#" else { return }
            while let scalar = current, scalar != "\n" { index += 1 }
        }

        mutating func statement() {
            skipBlanks()
            switch current {
            case nil: return
            case "\n", "\r": advance()
            case "#": skipComment()
            case "[": header()
            default: keyValue()
            }
        }

        mutating func record(_ path: [String], _ line: Int) {
            for count in stride(from: 1, through: path.count, by: 1) where lines[Array(path.prefix(count))] == nil {
                lines[Array(path.prefix(count))] = line
            }
        }

        /// `path` with the last element's index after each array of tables on it, as TOML resolves a header.
        func resolved(_ path: [String]) -> [String] {
            var out: [String] = []
            for component in path {
                out.append(component)
                if let count = arrayCounts[out] { out.append(String(count - 1)) }
            }
            return out
        }

        mutating func header() {
            let start = line
            index += 1
            let isArray = current == "["
            if isArray { index += 1 }
            skipBlanks()
            if namelessHeader == nil, let scalar = current, !(Self.isBare(scalar) || scalar == "\"" || scalar == "'" || scalar == "]") {
                namelessHeader = start
            }
            let path = keyPath()
            skipBlanks()
            for _ in 0..<(isArray ? 2 : 1) where current == "]" { index += 1 }
            if isArray, let last = path.last {
                let base = resolved(Array(path.dropLast())) + [last]
                let count = arrayCounts[base, default: 0]
                arrayCounts[base] = count + 1
                table = base + [String(count)]
            } else {
                table = resolved(path)
            }
            record(table, start)
            skipBlanks()
            skipComment()
        }

        mutating func keyValue() {
            let start = line
            let path = keyPath()
            guard !path.isEmpty else { return }
            record(table + path, start)
            skipBlanks()
            guard current == "=" else { return }
            index += 1
            skipBlanks()
            value(table + path)
            skipBlanks()
            skipComment()
        }

        /// `a.b."c d".'e'`: the components, unescaped.
        mutating func keyPath() -> [String] {
            var parts: [String] = []
            while true {
                skipBlanks()
                switch current {
                case "\"": parts.append(singleLineString(escapes: true))
                case "'": parts.append(singleLineString(escapes: false))
                case let scalar? where Self.isBare(scalar):
                    var part = String.UnicodeScalarView()
                    while let scalar = current, Self.isBare(scalar) {
                        part.append(scalar)
                        index += 1
                    }
                    parts.append(String(part))
                default:
                    return parts
                }
                skipBlanks()
                guard current == "." else { return parts }
                index += 1
            }
        }

        mutating func value(_ path: [String]) {
            let key = path.last ?? ""
            switch current {
            case "\"", "'":
                let quote = current ?? "\""
                if peek(1) == quote, peek(2) == quote {
                    multiLineString(quote: quote, key: key)
                } else {
                    _ = singleLineString(escapes: quote == "\"")
                }
            case "[" where depth < 512:
                depth += 1
                defer { depth -= 1 }
                open.append((.array, line, key))
                index += 1
                var element = 0
                while let scalar = current {
                    let before = index
                    switch scalar {
                    case " ", "\t": skipBlanks()
                    case "\n", "\r": advance()
                    case "#": skipComment()
                    case ",": index += 1
                    case "]":
                        index += 1
                        open.removeLast()
                        return
                    case "}":
                        // toml++ asserts (and aborts) on an element that starts with `}`.
                        if namelessHeader == nil, strayBrace == nil { strayBrace = line }
                        index += 1
                    default:
                        record(path + [String(element)], line)
                        value(path + [String(element)])
                        element += 1
                    }
                    if index == before { advance() }
                }
            case "{" where depth < 512:
                depth += 1
                defer { depth -= 1 }
                index += 1
                while let scalar = current, scalar != "\n" {
                    let before = index
                    switch scalar {
                    case " ", "\t", ",": index += 1
                    case "}":
                        index += 1
                        return
                    default:
                        let start = line
                        let keys = keyPath()
                        if !keys.isEmpty { record(path + keys, start) }
                        skipBlanks()
                        if current == "=" {
                            index += 1
                            skipBlanks()
                            value(path + keys)
                        }
                    }
                    if index == before { advance() }
                }
            default:
                // A number, boolean or date: up to what ends a value.
                while let scalar = current, !" \t\r\n,]}#".unicodeScalars.contains(scalar) { index += 1 }
            }
        }

        /// `"…"` or `'…'` up to its quote or the line's end; the text, with basic strings' escapes decoded.
        mutating func singleLineString(escapes: Bool) -> String {
            let quote = current ?? "\""
            index += 1
            var text = String.UnicodeScalarView()
            while let scalar = current, scalar != "\n" {
                index += 1
                if scalar == quote { break }
                if escapes, scalar == "\\" {
                    text.append(escape())
                } else {
                    text.append(scalar)
                }
            }
            return String(text)
        }

        mutating func escape() -> Unicode.Scalar {
            guard let scalar = current, scalar != "\n" else { return "\\" }
            index += 1
            switch scalar {
            case "b": return "\u{08}"
            case "t": return "\t"
            case "n": return "\n"
            case "f": return "\u{0C}"
            case "r": return "\r"
            case "e": return "\u{1B}"
            case "u", "U":
                var value: UInt32 = 0
                for _ in 0..<(scalar == "u" ? 4 : 8) {
                    guard let digit = current, digit.isASCII, let nibble = UInt32(String(digit), radix: 16) else { break }
                    value = value &* 16 &+ nibble
                    index += 1
                }
                return Unicode.Scalar(value) ?? "\u{FFFD}"
            default: return scalar
            }
        }

        /// `"""…"""` or `'''…'''`, across lines; up to two more quotes may end it.
        mutating func multiLineString(quote: Unicode.Scalar, key: String) {
            let delimiter = String(repeating: String(quote), count: 3)
            open.append((.string(delimiter), line, key))
            index += 3
            while let scalar = current {
                if scalar == quote, peek(1) == quote, peek(2) == quote {
                    index += 3
                    for _ in 0..<2 where current == quote { index += 1 }
                    open.removeLast()
                    return
                }
                if quote == "\"", scalar == "\\" {
                    index += 1
                    if current == "\n" { advance() } else if current != nil { index += 1 }
                    continue
                }
                advance()
            }
        }

        static func isBare(_ scalar: Unicode.Scalar) -> Bool {
            switch scalar {
            case "A"..."Z", "a"..."z", "0"..."9", "_", "-": true
            default: false
            }
        }

        /// Whether `scalars` (a line and what follows) starts like a header or a `key =` line.
        static func startsAnEntry(_ scalars: [Unicode.Scalar]) -> Bool {
            var lexer = Lexer(String(String.UnicodeScalarView(scalars.prefix { $0 != "\n" })))
            lexer.skipBlanks()
            if lexer.current == "[" {
                lexer.index += 1
                if lexer.current == "[" { lexer.index += 1 }
                lexer.skipBlanks()
                guard let scalar = lexer.current, isBare(scalar) || scalar == "\"" || scalar == "'" else { return false }
                return !lexer.keyPath().isEmpty && lexer.current == "]"
            }
            guard !lexer.keyPath().isEmpty else { return false }
            lexer.skipBlanks()
            return lexer.current == "="
        }

        /// Whether `scalars` holds only blanks, line ends and comments.
        static func onlyComments(_ scalars: [Unicode.Scalar]) -> Bool {
            var lexer = Lexer(String(String.UnicodeScalarView(scalars)))
            while let scalar = lexer.current {
                switch scalar {
                case " ", "\t", "\r", "\n": lexer.index += 1
                case "#": lexer.skipComment()
                default: return false
                }
            }
            return true
        }
    }
}
