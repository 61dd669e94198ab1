import Foundation
import XCTest

/// docs/cli.md: a server profile that does not exist is 66 (`clientNotRegistered`), whichever command names it.
final class MissingProfileTests: XCTestCase {
    /// A value for each required option a command may have, so that only the profile is missing.
    static let values: [String: [String]] = [
        "user": ["alice"], "htm": ["GET"], "htu": ["https://api.example.com/orders"],
        "software-id": ["keymgr-template"], "kid": ["00000000-0000-0000-0000-000000000000"],
        "challenge": ["c"], "username": ["alice"], "reason": ["stolen"], "days": ["30"],
    ]

    /// What a command's own validation needs besides its required options (one of two options, say).
    static let extras: [String: [String]] = [
        "admin devices": ["--user", "alice"], "admin revoke": ["--device-id", "00000000"],
        "dcr register": ["--software-id", "keymgr-template"],
    ]

    /// Commands whose job is to make a profile: a missing one is not an error there.
    static let makeProfiles: Set<String> = ["server set"]

    /// Every command of the built binary's command tree that takes `--profile`, each run with `--profile NOSUCH`
    /// (and with `--journey` where it has one, as `--profile` is for its journey): 66, and the message names it.
    func testEveryCommandTakingProfileExits66ForAMissingOne() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("alice")
        let dump = try sandbox.keymgr(["--experimental-dump-help"])
        XCTAssertEqual(dump.status, 0, dump.summary)
        let root = try XCTUnwrap(try dump.object()["command"] as? [String: Any])

        var commands: [(path: [String], arguments: [[String: Any]])] = []
        func walk(_ node: [String: Any], _ path: [String]) {
            let subcommands = node["subcommands"] as? [[String: Any]] ?? []
            for child in subcommands {
                guard let name = child["commandName"] as? String, name != "help" else { continue }
                walk(child, path + [name])
            }
            let arguments = node["arguments"] as? [[String: Any]] ?? []
            if subcommands.isEmpty, arguments.contains(where: { Self.names($0).contains("profile") }) {
                commands.append((path, arguments))
            }
        }
        walk(root, [])
        XCTAssertGreaterThanOrEqual(commands.count, 10, "the tree has the OAuth and server commands: \(commands.map(\.path))")

        for (path, arguments) in commands where !Self.makeProfiles.contains(path.joined(separator: " ")) {
            var line = path + ["--profile", "NOSUCH"]
            for argument in arguments where !(argument["isOptional"] as? Bool ?? true) {
                let name = Self.names(argument).first ?? "?"
                guard name != "profile" else { continue }
                guard let value = Self.values[name] else {
                    XCTFail("\(path.joined(separator: " ")): no value for its required --\(name); add one to `values`")
                    continue
                }
                line += ["--\(name)"] + value
            }
            line += Self.extras[path.joined(separator: " ")] ?? []
            if arguments.contains(where: { Self.names($0).contains("journey") }) { line += ["--journey", "SignIn"] }
            let outcome = try sandbox.keymgr(line + ["--json"])
            XCTAssertEqual(outcome.status, 66, outcome.summary)
            XCTAssertTrue(outcome.stderr.contains("NOSUCH"), "the message names the profile: \(outcome.summary)")
            XCTAssertTrue(outcome.stdout.contains(#""code":"clientNotRegistered""#), outcome.summary)
        }
    }

    static func names(_ argument: [String: Any]) -> [String] {
        (argument["names"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
    }
}
