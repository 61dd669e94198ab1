import AgentWire
import XCTest

/// `ArgumentScan`, the one scanner of keymgr's command line the lean client, the agent's worker, the hot path and the
/// shell completions share: values, `--`, global options, words, and the files options name. (That its tables match
/// the argument parser's declarations is checked in keymgrTests, `ArgumentScanDeclarationTests`.)
final class ArgumentScanTests: XCTestCase {
    func testOptionsTakeTheirValuesAsTheArgumentParserDoes() {
        let scan = ArgumentScan(["--home", "/h", "sign", "--user=alice", "--json", "--kid", "K1", "--pin-fd", "3", "extra"])
        XCTAssertEqual(scan.elements, [
            .option(name: "--home", value: "/h", inline: false), .word("sign"),
            .option(name: "--user", value: "alice", inline: true), .option(name: "--json", value: nil, inline: false),
            .option(name: "--kid", value: "K1", inline: false), .option(name: "--pin-fd", value: "3", inline: false),
            .word("extra"),
        ])
        XCTAssertEqual(scan.words, ["sign", "extra"])
        XCTAssertEqual(scan.subcommand, "sign")
        XCTAssertEqual(scan.value(of: "--home"), "/h")
        XCTAssertTrue(scan.has("--json"))
        XCTAssertFalse(scan.has("--quiet"))
        XCTAssertFalse(scan.hasTerminator)
    }

    func testAValueThatLooksLikeAnOptionIsNotTaken() {
        // `--user --json`: the argument parser reads --json as the flag and --user as missing its value.
        let scan = ArgumentScan(["list", "--user", "--json", "--kid", "-", "--user", "-x"])
        XCTAssertEqual(scan.elements, [
            .word("list"), .option(name: "--user", value: nil, inline: false), .option(name: "--json", value: nil, inline: false),
            .option(name: "--kid", value: "-", inline: false), .option(name: "--user", value: nil, inline: false),
            .option(name: "-x", value: nil, inline: false),
        ])
        XCTAssertTrue(scan.has("--json"))
        XCTAssertNil(scan.value(of: "--user"))
        // A flag never takes the next word; `--flag=value` is kept for the caller to judge.
        let flags = ArgumentScan(["--json", "status", "--quiet=yes"])
        XCTAssertEqual(flags.words, ["status"])
        XCTAssertEqual(flags.elements.last, .option(name: "--quiet", value: "yes", inline: true))
        // The short option with a value.
        XCTAssertEqual(ArgumentScan(["audit", "-n", "5"]).words, ["audit"])
    }

    func testTheTerminatorEndsTheOptions() {
        let scan = ArgumentScan(["sign", "--user", "a", "--", "--json", "--home", "/h"])
        XCTAssertTrue(scan.hasTerminator)
        XCTAssertEqual(scan.operands, ["--json", "--home", "/h"])
        XCTAssertFalse(scan.has("--json"))
        XCTAssertNil(scan.value(of: "--home"))
        XCTAssertEqual(ArgumentScan(["--user", "--"]).elements, [.option(name: "--user", value: nil, inline: false)])
    }

    func testRepeatedOptionsKeepEveryValueAndTheLastWins() {
        let scan = ArgumentScan(["sign", "--claim", "a=1", "--claim=b=2", "--home", "/1", "--home", "/2"])
        XCTAssertEqual(scan.values(of: "--claim"), ["a=1", "b=2"])
        XCTAssertEqual(scan.value(of: "--home"), "/2")
    }

    func testTheFilesACommandsOptionsName() {
        XCTAssertEqual(ArgumentScan(["dcr", "register", "--user", "alice", "--metadata", "m.json",
                                     "--initial-access-token-file=/t"]).namedFiles, [
            NamedFileArgument(option: "--metadata", path: "m.json", access: .read),
            NamedFileArgument(option: "--initial-access-token-file", path: "/t", access: .read),
        ])
        XCTAssertEqual(ArgumentScan(["--json", "audit", "archive", "--before", "2026-01-01", "--output", "/a", "--output", "/b"])
            .namedFiles, [NamedFileArgument(option: "--output", path: "/b", access: .create)])
        XCTAssertEqual(ArgumentScan(["server", "set", "--credential-file", "/etc/keymgr/admin.token"]).namedFiles,
                       [NamedFileArgument(option: "--credential-file", path: "/etc/keymgr/admin.token", access: .read)])
        XCTAssertEqual(ArgumentScan(["audit", "verify", "--input", "/i"]).namedFiles.map(\.option), ["--input"])
        // The same option name in a command that reads no file, a missing value, and what follows `--`: nothing.
        XCTAssertEqual(ArgumentScan(["dcr", "show", "--metadata", "m.json"]).namedFiles, [])
        XCTAssertEqual(ArgumentScan(["dcr", "register", "--metadata"]).namedFiles, [])
        XCTAssertEqual(ArgumentScan(["dcr", "register", "--", "--metadata", "m.json"]).namedFiles, [])
        XCTAssertEqual(ArgumentScan(["server", "--credential-file", "/x"]).namedFiles, [])
    }

    func testCompletionWordsPutBashsSplitBackTogether() {
        let scan = ArgumentScan(completionWords: ["keymgr", "--home", "=", "/srv/k", "pin", "change", "--user", "al"])
        XCTAssertEqual(scan.value(of: "--home"), "/srv/k")
        XCTAssertEqual(scan.words, ["pin", "change"])
        XCTAssertEqual(ArgumentScan(completionWords: ["keymgr", "--home=/h", "list"]).value(of: "--home"), "/h")
        XCTAssertEqual(ArgumentScan(completionWords: ["keymgr", "--home", "/h"]).value(of: "--home"), "/h")
        XCTAssertEqual(ArgumentScan(completionWords: []).elements, [])
    }

    func testARequestCarriesItsNamedFilesAndChecksThem() throws {
        let request = AgentRequest(arguments: ["dcr", "register", "--metadata", "m \"x\".json"], terminal: true,
                                   files: [NamedFileArgument(option: "--metadata", path: "m \"x\".json", access: .read),
                                           NamedFileArgument(option: "--output", path: "/o", access: .create)])
        XCTAssertEqual(try AgentRequest.decode(request.encoded()), request)
        XCTAssertEqual(request.descriptorCount, 6)
        XCTAssertFalse(String(decoding: AgentRequest(arguments: ["status"]).encoded(), as: UTF8.self).contains("files"),
                       "a request without files says nothing of them (as version 1 always did)")
        let base = #"{"version":1,"arguments":[],"fds":[0,1,2],"files":"#
        for (files, fragment) in [
            (#""x""#, "is not an array"),
            (#"[{"option":"--m","path":"/p"}]"#, "holds something other than"),
            (#"[{"option":"--m","path":"/p","access":"write"}]"#, "holds something other than"),
            (#"[{"option":"m","path":"/p","access":"read"}]"#, "no --option"),
            (#"[{"option":"--m","path":"","access":"read"}]"#, "no --option"),
            (#"[{"option":"--m","path":"/p","access":"read"},{"option":"--m","path":"/q","access":"read"}]"#, "names --m twice"),
            ("[" + Array(repeating: #"{"option":"--m","path":"/p","access":"read"}"#, count: 5).joined(separator: ",") + "]",
             "at most 4"),
        ] {
            do {
                let decoded = try AgentRequest.decode(Array((base + files + "}").utf8))
                XCTFail("accepted \(files) as \(decoded)")
            } catch {
                XCTAssertTrue(error.message.contains(fragment), "\(files): \(error.message)")
            }
        }
    }

    func testRefusalsSayWhoseRightsFailed() {
        XCTAssertEqual(NamedFileArgument.refusal(path: "/etc/x", access: .read, uid: 1001, reason: "Permission denied"),
                       "you (uid 1001) cannot read /etc/x: Permission denied")
        XCTAssertEqual(NamedFileArgument.refusal(path: "a", access: .create, uid: 0, reason: "File exists"),
                       "you (uid 0) cannot create a: File exists")
    }
}
