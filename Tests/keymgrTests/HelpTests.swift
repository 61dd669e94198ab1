import Foundation
import XCTest

/// `--help` as a person reads it on an 80-column terminal: nothing wider, examples whole commands that paste and
/// parse, and no option text that belongs to another command.
final class HelpTests: XCTestCase {
    static let commands: [[String]] = [
        [], ["init"], ["status"], ["users"], ["list"], ["bind"], ["sign"], ["rebind"], ["revoke"], ["pin"],
        ["pin", "change"], ["audit"], ["audit", "list"], ["audit", "verify"], ["master"], ["master", "rotate"],
        ["server"], ["server", "set"], ["server", "show"], ["sync"],
        ["admin"], ["admin", "devices"], ["admin", "revoke"], ["admin", "stale"],
    ]

    /// The example commands of a help text: the indented lines after `Example:`, `\` continuations joined.
    static func examples(in help: String) -> [String] {
        var examples: [String] = []
        var inExamples = false
        var pending = ""
        for line in help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("Example") { inExamples = true; continue }
            guard inExamples else { continue }
            if line.trimmingCharacters(in: .whitespaces).isEmpty { inExamples = false; continue }
            let text = line.trimmingCharacters(in: .whitespaces)
            if text.hasSuffix("\\") {
                pending += String(text.dropLast()) + " "
            } else {
                examples.append(pending + text)
                pending = ""
            }
        }
        return examples
    }

    /// Shell words, as `sh` splits them: single and double quotes, backslash escapes outside single quotes.
    static func words(_ command: String) -> [String] {
        var words: [String] = []
        var current = ""
        var inWord = false
        var quote: Character?
        var escaped = false
        for character in command {
            if escaped { current.append(character); escaped = false; continue }
            if let open = quote {
                if character == open { quote = nil } else if character == "\\" && open == "\"" { escaped = true } else { current.append(character) }
                continue
            }
            switch character {
            case "'", "\"": quote = character; inWord = true
            case "\\": escaped = true; inWord = true
            case " ":
                if inWord { words.append(current) }
                current = ""; inWord = false
            default: current.append(character); inWord = true
            }
        }
        if inWord { words.append(current) }
        return words
    }

    func testHelpFits80ColumnsAndEveryExampleParses() throws {
        let sandbox = try Sandbox()
        let scratchHome = sandbox.root.appendingPathComponent("example-home").path
        var parsed = 0
        for command in Self.commands {
            let help = try sandbox.run(Sandbox.binary, command + ["--help"], extraEnvironment: ["COLUMNS": "80"])
            XCTAssertEqual(help.status, 0, help.summary)
            let name = "keymgr \(command.joined(separator: " "))"
            for line in help.stdout.split(separator: "\n") {
                XCTAssertLessThanOrEqual(line.count, 80, "`\(name) --help` has a line wider than 80 columns: \(line)")
            }
            let examples = Self.examples(in: help.stdout)
            XCTAssertFalse(examples.isEmpty, "`\(name) --help` has no example")
            for example in examples {
                // The keymgr part of a pipeline, without redirections; $VARIABLES stand for any value.
                let words = Self.words(example)
                guard let start = words.firstIndex(of: "keymgr") else {
                    XCTFail("`\(name) --help`: an example that does not run keymgr: \(example)")
                    continue
                }
                var arguments = Array(words[(start + 1)...].prefix { $0 != "|" })
                arguments.removeAll { $0.range(of: #"^[0-9]*[<>]"#, options: .regularExpression) != nil }
                arguments = arguments.map { $0.hasPrefix("$") ? "value" : $0 }
                if let home = arguments.firstIndex(of: "--home"), home + 1 < arguments.count { arguments.removeSubrange(home...(home + 1)) }
                let outcome = try sandbox.run(Sandbox.binary, arguments + ["--home", scratchHome])
                XCTAssertNotEqual(outcome.status, 64, "`\(name) --help`'s example does not parse: \(example)\n\(outcome.summary)")
                parsed += 1
            }
        }
        XCTAssertGreaterThan(parsed, Self.commands.count)
    }

    func testOptionHelpDoesNotLeakBetweenCommands() throws {
        let sandbox = try Sandbox()
        for command in [["bind"], ["sign"], ["rebind"]] {
            let help = try sandbox.keymgr(command + ["--help"]).stdout
            XCTAssertFalse(help.contains("pin change"), "`keymgr \(command[0]) --help` describes `pin change`: \(help)")
        }
        let change = try sandbox.keymgr(["pin", "change", "--help"]).stdout
        XCTAssertTrue(change.contains("old") && change.contains("new"), "`pin change` says how the two PINs are read")
    }
}
