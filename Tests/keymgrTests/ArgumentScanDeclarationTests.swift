import AgentWire
import Foundation
import XCTest

/// AgentWire's `ArgumentScan` knows, without the argument parser, which options take a value and which name a file:
/// its tables must be exactly what the built binary's own description of its interface declares, so the client, the
/// worker and the parser never read one command line differently, and no option that names a file is missed (a
/// file the client did not open for the caller is never read for them).
final class ArgumentScanDeclarationTests: XCTestCase {
    /// Every option of every command: (command path, `--name` or `-n`, takes a value, value name).
    private func declaredOptions() throws -> [(path: String, name: String, takesValue: Bool, valueName: String?)] {
        let sandbox = try Sandbox()
        let dump = try sandbox.keymgr(["--experimental-dump-help"])
        XCTAssertEqual(dump.status, 0, dump.summary)
        let root = try XCTUnwrap(try dump.object()["command"] as? [String: Any])
        var found: [(String, String, Bool, String?)] = []
        func walk(_ command: [String: Any], path: [String]) {
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                let kind = argument["kind"] as? String
                guard kind == "option" || kind == "flag" else { continue }
                for name in argument["names"] as? [[String: Any]] ?? [] {
                    guard let text = name["name"] as? String else { continue }
                    let spelled = (name["kind"] as? String)?.hasPrefix("short") == true ? "-" + text : "--" + text
                    found.append((path.joined(separator: " "), spelled, kind == "option", argument["valueName"] as? String))
                }
            }
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                walk(sub, path: path + [sub["commandName"] as? String ?? "?"])
            }
        }
        walk(root, path: [])
        return found
    }

    func testTheScannersValueOptionsAreTheOptionsThatTakeAValue() throws {
        let declared = try declaredOptions()
        let options = Set(declared.filter(\.takesValue).map(\.name))
        let flags = Set(declared.filter { !$0.takesValue }.map(\.name))
        XCTAssertEqual(options.intersection(flags), [], "a name that is a flag in one command and takes a value in another")
        XCTAssertEqual(ArgumentScan.valueOptions.subtracting(options), [], "known to the scanner, declared by no command")
        XCTAssertEqual(options.subtracting(ArgumentScan.valueOptions), [], "declared, unknown to the scanner")
        XCTAssertTrue(ArgumentScan.globalOptions.isSubset(of: options.union(flags)))
    }

    func testTheScannersFileOptionsAreEveryOptionThatNamesAFile() throws {
        let declared = try declaredOptions().filter { $0.valueName == "file" }
        var files: [String: Set<String>] = [:]
        // `agent --policy` is the agent's own file: `agent` is never served through an agent.
        for option in declared where !option.path.isEmpty && option.path != "agent" {
            files[option.path, default: []].insert(option.name)
        }
        XCTAssertFalse(files.isEmpty)
        XCTAssertEqual(files, ArgumentScan.fileOptions.mapValues { Set($0.keys) })
        XCTAssertEqual(ArgumentScan.fileOptions["audit archive"]?["--output"], .create)
    }
}
