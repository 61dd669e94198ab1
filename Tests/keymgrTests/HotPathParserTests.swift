import ArgumentParser
import Foundation
import XCTest
@testable import keymgr

/// `HotPathParser` parses `status` and `sign` without the argument parser: it must know exactly the options the
/// argument parser declares, build the same values for every command line it takes, and leave the rest alone.
final class HotPathParserTests: XCTestCase {
    /// Each option of `status` and `sign` in the built binary's own description of its interface (besides the
    /// argument parser's `--help` and `--version`, which the hot path leaves to it) is one it knows, with the same
    /// kind and repetition, and it knows no other. An option added to either command fails here until it is added.
    func testItKnowsExactlyTheOptionsTheArgumentParserDeclares() throws {
        let sandbox = try Sandbox()
        let dump = try sandbox.keymgr(["--experimental-dump-help"])
        XCTAssertEqual(dump.status, 0, dump.summary)
        let tool = try dump.object()
        let root = try XCTUnwrap(tool["command"] as? [String: Any])
        let subcommands = try XCTUnwrap(root["subcommands"] as? [[String: Any]])
        for name in ["status", "sign"] {
            let command = try XCTUnwrap(subcommands.first { $0["commandName"] as? String == name })
            var declared: [HotPathParser.Spec] = []
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                let names = (argument["names"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
                guard !names.contains("help"), !names.contains("version") else { continue }
                XCTAssertEqual(names.count, 1, "\(name): \(names) has a short name the hot path does not take")
                let kind = argument["kind"] as? String
                XCTAssertTrue(kind == "option" || kind == "flag", "\(name): \(names) is a \(kind ?? "?")")
                declared.append(HotPathParser.Spec(name: names[0], takesValue: kind == "option",
                                                   repeatable: argument["isRepeating"] as? Bool ?? false))
            }
            let known = HotPathParser.globalOptions + (HotPathParser.commandOptions[name] ?? [])
            XCTAssertEqual(Set(known.map(\.name)), Set(declared.map(\.name)), name)
            for spec in declared {
                XCTAssertEqual(known.first { $0.name == spec.name }, spec, "\(name) --\(spec.name)")
            }
        }
    }

    /// The command lines a kiosk, a hook or an operator types.
    func testItTakesThePlainShapesOfStatusAndSign() throws {
        let lines = [
            ["status"], ["status", "--json"], ["--home", "/var/lib/keymgr", "status"], ["--json", "status"],
            ["--home=/h", "--verbose", "status"],
            ["sign", "--user", "alice", "--challenge", "c"], ["--home", "/h", "sign", "--kid", "K1", "--json"],
            ["sign", "--user", "alice", "--challenge", "c", "--claim", "txn=4711", "--claim", "amount=json:42",
             "--pin-stdin", "--expires-in", "30", "--timeout=2.5", "--issuer", "kiosk"],
            ["sign", "--user", "bob", "--pin-fd", "3", "--quiet"],
            ["sign", "--journey", "SignIn", "--user", "alice", "--password-fd", "4"],
        ]
        for line in lines {
            XCTAssertNotNil(HotPathParser.command(for: line), line.joined(separator: " "))
            try assertSameValuesBothWays(line)
        }
    }

    /// Help, the version, short options, unknown or repeated options, other commands, values that look like options
    /// or that their type refuses, and what a validate() refuses are all the argument parser's.
    func testItLeavesEverythingElseToTheArgumentParser() {
        let lines = [
            [], ["--help"], ["status", "--help"], ["sign", "-h"], ["help", "sign"], ["--version"], ["status", "--version"],
            ["list"], ["users", "--json"], ["status", "extra"], ["status", "status"], ["sign", "status"],
            ["status", "--user", "alice"], ["status", "-q"], ["status", "--json", "--json"],
            ["status", "--json=true"], ["status", "--home"], ["status", "--home", ""], ["status", "--home", "--json"],
            ["status", "--home=-x"], ["status", "--quiet", "--verbose"], ["status", "--home", "  "],
            ["status", "--"], ["--generate-completion-script", "bash"], ["--experimental-dump-help"],
            ["sign"], ["sign", "--user", "a", "--user", "b"], ["sign", "--user", "a", "--claim", "noequals"],
            ["sign", "--user", "a", "--claim", "x=1", "--claim", "x=2"], ["sign", "--user", "a", "--expires-in", "0"],
            ["sign", "--user", "a", "--expires-in", "soon"], ["sign", "--user", "a", "--timeout", "-1"],
            ["sign", "--user", "a", "--pin-stdin", "--pin-fd", "3"], ["sign", "--user", "a", "--pin-fd", "x"],
            ["sign", "--user", "a", "--pin-fd", "99999999999"], ["sign", "--user", "a", "--password-fd", "3"],
            ["sign", "--journey", "J", "--challenge", "c"], ["sign", "--user", "a", "--claim"],
        ]
        for line in lines {
            XCTAssertNil(HotPathParser.command(for: line), line.joined(separator: " "))
        }
    }

    /// Six hundred command lines put together from the options' pieces, in every order and both spellings,
    /// including ones either parser refuses: whatever the hot path takes, the argument parser takes too and parses
    /// to the same values; and the hot path takes most of the ones the argument parser takes.
    func testEveryCommandLineItTakesParsesToTheSameValuesBothWays() throws {
        let globalPieces = [["--home", "/srv/keymgr"], ["--json"], ["--quiet"], ["--verbose"], ["--home", " "]]
        let signPieces = [
            ["--user", "alice"], ["--user", "id=dave,ou=user"], ["--kid", "4F1C"], ["--claim", "txn=4711"],
            ["--claim", "ctx=json:{\"a\":1}"], ["--claim", "n="], ["--claim", "=v"], ["--challenge", "aGVsbG8"],
            ["--issuer", "kiosk 7"], ["--expires-in", "30"], ["--expires-in", "0"], ["--expires-in", "x"],
            ["--timeout", "2.5"], ["--timeout", "nan"], ["--timeout", "1e3"], ["--pin-stdin"], ["--pin-fd", "3"],
            ["--pin-fd", "-1"], ["--journey", "SignIn"], ["--password-fd", "4"], ["--user"],
        ]
        var generator = SplitMix(seed: 0x6b65_796d_6772)
        var taken = 0
        var parsedByTheArgumentParser = 0
        for round in 0..<600 {
            let command = round % 4 == 0 ? "status" : "sign"
            let pieces = globalPieces + (command == "sign" ? signPieces : [])
            // Mostly distinct pieces (a repeated option is the argument parser's), every eighth line any.
            var remaining = pieces
            var chosen = (0..<Int(generator.next() % 6)).map { _ in
                round % 8 == 1 ? pieces[Int(generator.next() % UInt64(pieces.count))]
                    : remaining.remove(at: Int(generator.next() % UInt64(remaining.count)))
            }
            chosen = chosen.map { piece in
                // Half the values attached with `=`.
                piece.count == 2 && generator.next() % 2 == 0 ? ["\(piece[0])=\(piece[1])"] : piece
            }
            let before = Int(generator.next() % UInt64(chosen.count + 1))
            let line = chosen[..<before].flatMap { $0 } + [command] + chosen[before...].flatMap { $0 }
            if try assertSameValuesBothWays(line) { taken += 1 }
            if (try? Keymgr.parseAsRoot(line)) != nil { parsedByTheArgumentParser += 1 }
        }
        XCTAssertGreaterThan(taken, parsedByTheArgumentParser * 3 / 4,
                             "the hot path takes \(taken) of the \(parsedByTheArgumentParser) lines the argument parser takes")
    }

    /// `--home` made of spaces and tabs alone is refused, exactly where Foundation's `.whitespaces` would trim it away
    /// (`GlobalOptions.validate` checks it without Foundation, which costs every command at start-up).
    func testABlankHomeIsRefusedExactlyWhereWhitespaceTrimmingEmptiesIt() {
        // Every scalar .whitespaces holds is a tab, a space separator (Zs) or U+200B; the near misses are not.
        for home in ["", " ", "\t", "  \t ", "\u{3000}", "\u{00A0}", "\u{2009}x", "\n", " \r ", "a", " /h ", "\u{200B}", "\u{200C}"] {
            var globals = GlobalOptions()
            globals.home = home
            globals.json = false
            globals.quiet = false
            globals.verbose = false
            let refused = (try? globals.validate()) == nil
            XCTAssertEqual(refused, home.trimmingCharacters(in: .whitespaces).isEmpty, home.debugDescription)
        }
    }

    /// When the hot path takes `line`, the argument parser takes it too and the two commands hold the same values.
    @discardableResult
    private func assertSameValuesBothWays(_ line: [String], file: StaticString = #filePath, line number: UInt = #line)
        throws -> Bool
    {
        guard let hot = HotPathParser.command(for: line) else { return false }
        let described = line.joined(separator: " ")
        let parsed: ParsableCommand
        do {
            parsed = try Keymgr.parseAsRoot(line)
        } catch {
            XCTFail("the hot path takes `\(described)`, the argument parser refuses it: \(error)", file: file, line: number)
            return true
        }
        let (hotValues, parsedValues) = (Self.values(of: hot), Self.values(of: parsed))
        if hotValues != parsedValues {
            let differing = zip(hotValues.split(separator: "\n"), parsedValues.split(separator: "\n"))
                .filter { $0 != $1 }.map { "hot path \($0) | argument parser \($1)" }
            XCTFail("`\(described)` parses to other values:\n\(differing.joined(separator: "\n"))", file: file, line: number)
        }
        return true
    }

    /// Every stored value of a command, its option groups' included, as `dump` writes them; without the option
    /// groups' help titles, which the argument parser leaves empty in the groups it decodes (they only head help).
    private static func values(of command: ParsableCommand) -> String {
        var text = ""
        dump(command, to: &text)
        return text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("- title: ") }
            .joined(separator: "\n")
    }
}

/// A small seeded generator, so a failing command line is the same on every run.
private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
