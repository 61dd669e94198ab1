import Foundation
import XCTest

/// The CLI stays thin: it sees the library facades only, never the store's records or a wire client of its own.
final class LayoutTests: XCTestCase {
    private static let cliSources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/keymgr")

    private func cliFiles() throws -> [(name: String, text: String)] {
        let enumerator = FileManager.default.enumerator(at: Self.cliSources, includingPropertiesForKeys: nil)
        var files: [(String, String)] = []
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            files.append((url.lastPathComponent, try String(contentsOf: url, encoding: .utf8)))
        }
        return files
    }

    func testTheCLIImportsNeitherStorageNorTheWireClients() throws {
        let files = try cliFiles()
        XCTAssertGreaterThan(files.count, 10, "found the CLI's sources at \(Self.cliSources.path)")
        for (name, text) in files {
            for forbidden in ["import Storage", "import GRDB", "import ServerClients", "@_exported"] {
                XCTAssertFalse(text.contains(forbidden), "\(name) has `\(forbidden)`")
            }
            for client in ["CurlHTTPClient(", "PingAMDeviceClient(", "PingAMJourneyClient(", "Record("] {
                XCTAssertFalse(text.contains(client), "\(name) constructs \(client)…)")
            }
        }
    }

    /// Each module builds its own errors: the KeyManager facade `KeyManagerError`, the Sync services `SyncError`, the
    /// CLI and its agent `CommandFailure` (an option combination, an unreadable input file, a terminal it cannot ask
    /// on, the agent's socket). A failed lookup (no tokens, no registration, no such profile, no TPM) is the library's
    /// to report, from a facade method that throws; none of them is dressed up as another module's error.
    func testEachModuleBuildsItsOwnErrors() throws {
        let sources = Self.cliSources.deletingLastPathComponent()
        for (module, own) in [("keymgr", "CommandFailure"), ("Sync", "SyncError")] {
            let enumerator = FileManager.default.enumerator(at: sources.appendingPathComponent(module), includingPropertiesForKeys: nil)
            var checked = 0
            while let url = enumerator?.nextObject() as? URL {
                guard url.pathExtension == "swift" else { continue }
                checked += 1
                let text = try String(contentsOf: url, encoding: .utf8)
                XCTAssertFalse(text.contains("KeyManagerError("),
                               "\(module)/\(url.lastPathComponent) builds a KeyManagerError: throw a \(own) for the module's "
                                   + "own reason, or let a facade method throw the library's")
            }
            XCTAssertGreaterThan(checked, 10, "found \(module)'s sources in \(sources.path)")
        }
    }

    /// A command parses, calls one service or facade method, and renders: the rules (what a run's report means for the
    /// exit status, which tokens a refresh may spend, what a deletion acts on) live below the CLI, where the agent and
    /// a library user get them too. So a command's `run()` waits on at most one service call, a `run()` that does makes
    /// no call of its own into the store's facade (the service reads what it acts on), and no command reads a token
    /// revision or judges a report's errors.
    func testCommandsLeaveTheRulesToTheServices() throws {
        let commands = try cliFiles().filter { !$0.text.isEmpty && $0.text.contains("KeymgrCommand") }
        XCTAssertGreaterThan(commands.count, 10)
        var runs = 0
        for (name, text) in commands {
            for body in Self.runBodies(text) {
                runs += 1
                let waits = body.components(separatedBy: "AsyncBridge.wait").count - 1
                XCTAssertLessThanOrEqual(waits, 1, "a run() in \(name) waits on \(waits) service calls: make them one service method")
                if waits > 0 {
                    XCTAssertFalse(body.contains("manager."),
                                   "a run() in \(name) calls a service and reads the store itself: let the service read it")
                }
            }
            for judged in [".revision", "errors.isEmpty", "errors.first", "errors.allSatisfy"] {
                XCTAssertFalse(text.contains(judged), "\(name) has `\(judged)`: that rule belongs to the service")
            }
        }
        XCTAssertGreaterThan(runs, 30, "found the commands' run() bodies")
    }

    /// Every command prints its output as a `CommandOutput` value through `GlobalOptions.render(_:in:)`, the one branch
    /// on `--json`: no command reads `globals.json` or tests a `json` flag itself (the text and the JSON form of an
    /// output live together in its type).
    func testCommandsRenderOutputValues() throws {
        var renders = 0
        var files = 0
        for directory in ["Commands", "Agent"] {
            let url = Self.cliSources.appendingPathComponent(directory)
            for name in try FileManager.default.contentsOfDirectory(atPath: url.path) where name.hasSuffix(".swift") {
                let text = try String(contentsOf: url.appendingPathComponent(name), encoding: .utf8)
                files += 1
                XCTAssertFalse(text.contains("globals.json"), "\(directory)/\(name) reads --json itself: render a CommandOutput")
                let branch = try NSRegularExpression(pattern: #"\b(if|guard|switch|while)\b[^{\n]*(\bjson\s*[{,?]|\bjson$|!json\b)"#,
                                                     options: [.anchorsMatchLines])
                let lines = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
                for line in lines {
                    let line = String(line)
                    let found = branch.firstMatch(in: line, range: NSRange(line.startIndex..., in: line))
                    XCTAssertNil(found, "\(directory)/\(name) branches on json: \(line)")
                }
                renders += text.components(separatedBy: "globals.render(").count - 1
            }
        }
        XCTAssertGreaterThan(files, 20, "found the commands at \(Self.cliSources.path)")
        XCTAssertGreaterThanOrEqual(renders, 33, "the commands render their output values")
    }

    /// The bodies of the `func run(in context: CommandContext) throws { … }` in `text`, braces matched.
    static func runBodies(_ text: String) -> [Substring] {
        var bodies: [Substring] = []
        var rest = text[...]
        while let start = rest.range(of: "func run(in context: CommandContext) throws {") {
            var depth = 1
            var index = start.upperBound
            while depth > 0, index < rest.endIndex {
                if rest[index] == "{" { depth += 1 } else if rest[index] == "}" { depth -= 1 }
                index = rest.index(after: index)
            }
            bodies.append(rest[start.upperBound..<index])
            rest = rest[index...]
        }
        return bodies
    }

    /// libtss2 (like libcrypto) is reached only from Sources/KeyManager/Crypto: one place speaks to the TPM.
    func testOnlyTheCryptoLayerImportsLibtss2() throws {
        let sources = Self.cliSources.deletingLastPathComponent()
        let enumerator = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        var importers: [String] = []
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: url, encoding: .utf8)
            if text.contains("import CTSS2") { importers.append(url.path) }
        }
        XCTAssertFalse(importers.isEmpty, "found TPM.swift under \(sources.path)")
        for path in importers {
            XCTAssertTrue(path.contains("/Sources/KeyManager/Crypto/"), "\(path) imports CTSS2 outside the crypto layer")
        }
    }
}
