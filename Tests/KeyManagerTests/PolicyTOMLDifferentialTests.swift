import Foundation
@testable import KeyManager
import XCTest

/// The policy's TOML layer (`PolicyTOML`: TOMLKit, toml++ 3.4) against Python's `tomllib`, a second complete TOML 1.0
/// parser (issue 34). Over documents generated from a fixed seed (headers, comments, basic and literal strings with
/// every escape, multi-line strings, arrays over several lines with trailing commas, integers, booleans, inline
/// tables, dotted keys, CRLF) and their mistakes (an unclosed `[`, a missing comma, a bad escape, a control
/// character, a key twice), and hand-written ones: both accept or both refuse, and an accepted document has the
/// same tables, keys and values. The deliberate differences: a leading byte order mark is skipped (TOML has none),
/// and a NUL or `\u0000` is refused (TOMLKit's strings are C strings). On every accepted document the line index
/// gives each rule's header line.
final class PolicyTOMLDifferentialTests: XCTestCase {
    /// A small deterministic generator (SplitMix64): the same documents on every run and machine.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
        mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
        mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    }

    /// A basic string's body: plain text, unicode, and every escape TOML's basic strings have (and, rarely, a
    /// mistake: an unknown escape, a short \u, a raw control character, a surrogate).
    static func stringBody(_ random: inout Generator, mistakes: Bool) -> String {
        var out = ""
        for _ in 0..<random.below(6) {
            var pieces = ["user:alice", "group:keymgr-admins", "*", "sign", "pin change", "é", "日本", "a b", "#not a comment",
                          "=", "[", "]", ",", "'", "\\\"", "\\\\", "\\n", "\\t", "\\b", "\\f", "\\r", "\\u00e9", "\\U0001F600",
                          "\\u0041", "\\/"]
            if mistakes { pieces += ["\\x", "\\u12", "\u{01}", "\\uD800", "\\U00110000", "\\ "] }
            out += random.pick(pieces)
        }
        return out
    }

    /// A literal string's body: no escapes, no `'`.
    static func literalBody(_ random: inout Generator, mistakes: Bool) -> String {
        var out = ""
        for _ in 0..<random.below(5) {
            var pieces = ["user:alice", "*", "pin change", "C:\\path", "\\n", "\"q\"", "é", "#x", "[", "]"]
            if mistakes { pieces += ["'", "\u{01}"] }
            out += random.pick(pieces)
        }
        return out
    }

    /// One scalar value of any kind the generator writes.
    static func scalar(_ random: inout Generator, mistakes: Bool) -> String {
        switch random.below(10) {
        case 0: return "'" + literalBody(&random, mistakes: mistakes) + "'"
        case 1: return "\"\"\"" + random.pick(["", "\n", "\r\n"]) + stringBody(&random, mistakes: mistakes)
            + random.pick(["", "\n", "\\\n  ", "\"", "\"\""]) + stringBody(&random, mistakes: mistakes) + "\"\"\""
        case 2: return "'''" + random.pick(["", "\n"]) + literalBody(&random, mistakes: mistakes) + "\n" + literalBody(&random, mistakes: false) + "'''"
        case 3: return random.pick(["0", "42", "-17", "+3", "1_000", "0x1F", "0o17", "0b101", "true", "false"]
            + (mistakes ? ["01", "1__0", "0x", "True", "9223372036854775808"] : []))
        case 4: return "{ " + random.pick(["", "a = \"b\"", "a = 1, b.c = 'd'", "\"k\" = [\"x\"]"] + (mistakes ? ["a = 1,", "a = 1, a = 2"] : [])) + " }"
        default: return "\"" + stringBody(&random, mistakes: mistakes) + "\""
        }
    }

    static func value(_ random: inout Generator, mistakes: Bool) -> String {
        let string = { (random: inout Generator) in
            random.chance(30) ? scalar(&random, mistakes: mistakes) : "\"" + stringBody(&random, mistakes: mistakes) + "\""
        }
        if random.chance(25) { return string(&random) }
        var items: [String] = []
        for _ in 0..<random.below(4) { items.append(string(&random)) }
        let multiline = random.chance(30)
        let separator = multiline ? random.pick([",\n  ", ", # note\n  ", ",\n\n  "]) : random.pick([", ", ",", " , "])
        var body = items.joined(separator: separator)
        if !items.isEmpty, random.chance(30) { body += "," }  // a trailing comma
        if mistakes, items.count > 1, random.chance(20) { body = items.joined(separator: " ") }  // a comma missing
        let open = multiline ? "[\n  " : random.pick(["[", "[ "])
        let close = multiline ? "\n]" : random.pick(["]", " ]"])
        if mistakes, random.chance(10) { return open + body }  // never closed
        return open + body + close
    }

    /// One document of `tables` tables (each `[[rule]]`, and at most one `[self]`), with comments and blank lines.
    static func document(_ random: inout Generator, mistakes: Bool) -> String {
        var lines: [String] = []
        if random.chance(30) { lines.append("# a policy") }
        var hadSelf = false
        for _ in 0..<(1 + random.below(3)) {
            if !hadSelf, random.chance(20) {
                hadSelf = true
                lines.append(random.pick(["[self]", "[ self ]", "[self] # the links"]))
            } else {
                lines.append(random.pick(["[[rule]]", "[[ rule ]]", "[[rule]] # who may"]))
            }
            var keys = ["who", "may", "for", "authTypes", "note_1", "x-y", "\"quoted key\"", "'lit'", "dotted.key", "a . b"]
            for _ in 0..<random.below(4) {
                let key = mistakes && random.chance(5) ? "who" : keys.remove(at: random.below(keys.count))
                let space = random.pick([" = ", "=", "  =  ", "\t= "])
                let comment = random.chance(20) ? random.pick([" # why", "\t#", " #" + stringBody(&random, mistakes: false)]) : ""
                lines.append(key + space + value(&random, mistakes: mistakes) + comment)
                if random.chance(15) { lines.append("") }
            }
        }
        let end = random.chance(20) ? "\r\n" : "\n"
        return lines.joined(separator: end) + (random.chance(80) ? end : "")
    }

    /// The documents `tomllib` reads, by file: `{"ok": true, "value": …}` or `{"ok": false}`.
    static func tomllib(_ files: [URL]) throws -> [[String: Any]] {
        let script = """
            import json, sys, tomllib
            for path in sys.argv[1:]:
                try:
                    with open(path, "rb") as f:
                        print(json.dumps({"ok": True, "value": tomllib.load(f)}))
                except (tomllib.TOMLDecodeError, UnicodeDecodeError):
                    print(json.dumps({"ok": False}))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script] + files.map(\.path)
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        return try output.split(separator: UInt8(ascii: "\n")).map {
            try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any])
        }
    }

    /// What `PolicyTOML` (TOMLKit) reads from `text`, in tomllib's JSON shape, or nil when it refuses.
    static func ours(_ text: String) -> Any? {
        guard let document = try? PolicyTOML.parse(text, file: "policy.toml") else { return nil }
        return json(.table(document.root))
    }

    static func json(_ value: PolicyTOML.Value) -> Any {
        switch value {
        case .string(let string): string
        case .integer(let integer): integer
        case .float(let float): float
        case .boolean(let boolean): boolean
        case .dateTime(let text): text
        case .array(let elements): elements.map(json)
        case .table(let entries): Dictionary(uniqueKeysWithValues: entries.map { ($0.key, json($0.value)) })
        }
    }

    static func canonical(_ value: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed]), as: UTF8.self)
    }

    func compare(_ documents: [String], file: StaticString = #filePath, line: UInt = #line) throws -> (accepted: Int, refused: Int) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("policy-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var files: [URL] = []
        for (index, text) in documents.enumerated() {
            let url = directory.appendingPathComponent("\(index).toml")
            // A deliberate difference: PolicyTOML skips a leading byte order mark some editors write, which TOML
            // (and tomllib) refuse.
            try Data((text.hasPrefix("\u{FEFF}") ? String(text.dropFirst()) : text).utf8).write(to: url)
            files.append(url)
        }
        let answers = try Self.tomllib(files)
        XCTAssertEqual(answers.count, documents.count, file: file, line: line)
        var counts = (accepted: 0, refused: 0)
        for (text, answer) in zip(documents, answers) {
            let ours = Self.ours(text)
            if PolicyTOML.nulLine(text) != nil {
                // The other deliberate difference: a NUL or \u0000 is refused, whatever tomllib says.
                XCTAssertNil(ours, "a NUL accepted:\n\(text)", file: file, line: line)
                counts.refused += 1
                continue
            }
            let theirs = (answer["ok"] as? Bool) == true ? answer["value"] : nil
            XCTAssertEqual(ours != nil, theirs != nil, "accepted by \(ours != nil ? "PolicyTOML" : "tomllib") only:\n\(text)",
                           file: file, line: line)
            if let ours, let theirs {
                XCTAssertEqual(try Self.canonical(ours), try Self.canonical(theirs), "different values:\n\(text)", file: file, line: line)
                // The line index agrees with the document on where each [[rule]] is.
                let lines = PolicyTOMLLines(text)
                // By bytes: a String splits "\r\n" as one Character, not at its "\n".
                let headers = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated()
                    .filter { [Array("[[rule]]".utf8), Array("[[ rule ]]".utf8)].contains(where: $0.element.starts) }.map { $0.offset + 1 }
                let rules = ((theirs as? [String: Any])?["rule"] as? [Any])?.count ?? 0
                if headers.count == rules {
                    XCTAssertEqual((0..<rules).map { lines.line(of: ["rule", String($0)]) }, headers, "rule lines:\n\(text)",
                                   file: file, line: line)
                }
                counts.accepted += 1
            } else if ours == nil, theirs == nil {
                counts.refused += 1
            }
        }
        return counts
    }

    func testGeneratedDocumentsAgreeWithTomllib() throws {
        var random = Generator(state: 0x6B65_796D_6772)
        var documents: [String] = []
        for index in 0..<1500 { documents.append(Self.document(&random, mistakes: index % 3 == 2)) }
        let counts = try compare(documents)
        // Both sides of the comparison are exercised: the generator makes valid documents and mistakes.
        XCTAssertGreaterThan(counts.accepted, 300, "\(counts)")
        XCTAssertGreaterThan(counts.refused, 100, "\(counts)")
    }

    func testHandWrittenDocumentsAgreeWithTomllib() throws {
        let template = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("contrib/policy.toml"), encoding: .utf8)
        let documents = [
            template,
            "",
            "# only a comment\n",
            "\u{FEFF}[[rule]]\nwho = [\"*\"]\n",
            "[[rule]]\nwho = [\"*\"\nmay = [\"sign\"]\n",              // an unclosed [ (issue 32, finding 7)
            "[[rule]]\nwho = [\"*\" \"user:a\"]\n",                     // a comma missing
            "[[rule]]\nwho = [\"*\",]\n",                               // a trailing comma
            "[[rule]]\nwho = [\n  \"*\", # anyone\n  \"user:a\",\n]\nmay = [\"sign\"]\n",
            "[[rule]]\r\nwho = [\"*\"]\r\nmay = [\"sign\"]\r\n",
            "[[rule]]\nwho = [\"\\u00e9\\U0001F600\\t\\\"\"]\n",
            "[[rule]]\nwho = [\"\\x\"]\n",
            "[[rule]]\nwho = [\"a\u{01}\"]\n",
            "[[rule]]\nwho = [\"*\"]\nwho = [\"*\"]\n",                 // a key twice
            "[[rule\n",
            "[[rule]]\nwho = [\"*\"] may = [\"sign\"]\n",
            "[self]\nalice = [\"id=alice,ou=user\"]\n[[rule]]\nwho = [\"*\"]\n",
            "[[rule]]\nwho = [\"*\"]\n[[rule]]\nwho = [\"group:g\"]\nfor = \"self\"\n",
            "[[rule]]\nwho = ['*', 'user:a']\nmay = \"\"\"\nsign\"\"\"\n",         // literal and multi-line strings
            "[[rule]]\nwho = \"\"\"\n[[rule]]\n\"\"\"\nmay = ['sign']\n",         // a header inside a string is text
            "rule = [{ who = [\"*\"], may = [\"sign\"] }]\n",                  // an array of inline tables
            "[[rule]]\nwho.x = 1\n[rule.sub]\na = 1\n",                         // dotted keys, a sub-table
            "[self]\n[self]\n",                                                // a table twice
            "[[rule]]\nwho = [1, \"a\"]\nn = 9223372036854775807\nf = 1.5\nb = true\n",
            "[[rule]]\nwho = [\n  \"*\",\n  \"a\"\n  \"b\",\n]\n",                 // a comma missing inside a long array
            "[[rule]]\r\nwho = [\"*\"\r\nmay = [\"sign\"]\r\n",
            "a = \"\\\\u0000\"\n",                                              // an escaped backslash, then u0000
        ]
        let counts = try compare(documents)
        XCTAssertEqual(counts.accepted + counts.refused, documents.count)
    }
}
