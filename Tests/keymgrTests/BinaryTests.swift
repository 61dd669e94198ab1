import Foundation
import XCTest

/// The executable as it is installed: alone, with help and completions.
final class BinaryTests: XCTestCase {

    /// The two executables copied alone into the installed layout (`bin/keymgr`, `libexec/keymgr/keymgr-core`):
    /// the client finds keymgr-core there, and says where it looked when it is missing.
    func testTheBinariesCopiedAloneRunStatus() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let prefix = sandbox.root.appendingPathComponent("prefix-alone", isDirectory: true)
        let bin = prefix.appendingPathComponent("bin", isDirectory: true)
        let libexec = prefix.appendingPathComponent("libexec/keymgr", isDirectory: true)
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let copy = bin.appendingPathComponent("keymgr")
        try FileManager.default.copyItem(at: Sandbox.binary, to: copy)

        let missing = try sandbox.keymgr(["status", "--json"], binary: copy)
        XCTAssertEqual(missing.status, 1, missing.summary)
        XCTAssertTrue(missing.stderr.contains("cannot run keymgr-core (looked for \(bin.path)/keymgr-core and "
            + "\(bin.path)/../libexec/keymgr/keymgr-core)"), missing.stderr)

        try FileManager.default.createDirectory(at: libexec, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: Sandbox.coreBinary, to: libexec.appendingPathComponent("keymgr-core"))
        let outcome = try sandbox.keymgr(["status", "--json"], binary: copy)
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        XCTAssertEqual(try outcome.object()["deviceName"] as? String, "test kiosk")
    }

    func testEveryCommandHasHelpWithAnExample() throws {
        let sandbox = try Sandbox()
        let commands: [[String]] = [
            [], ["init"], ["status"], ["users"], ["list"], ["bind"], ["sign"], ["rebind"], ["revoke"], ["pin"],
            ["pin", "change"], ["audit"], ["audit", "list"], ["audit", "verify"], ["master"], ["master", "rotate"],
        ]
        for command in commands {
            let help = try sandbox.keymgr(command + ["--help"])
            XCTAssertEqual(help.status, 0, help.summary)
            XCTAssertTrue(help.stdout.contains("USAGE: keymgr"), help.summary)
            XCTAssertTrue(help.stdout.contains("Example:"), "no example in `keymgr \(command.joined(separator: " ")) --help`")
            XCTAssertTrue(help.stdout.contains("--home"), "global options are listed")
        }
        let root = try sandbox.keymgr(["--help"]).stdout
        for subcommand in ["init", "status", "users", "list", "bind", "sign", "rebind", "revoke", "pin", "audit", "master"] {
            XCTAssertTrue(root.contains("  \(subcommand) "), "root help lists \(subcommand)")
        }
        XCTAssertTrue(try sandbox.keymgr(["help", "sign"]).stdout.contains("json:"), "sign's help explains json: claims")
    }

    func testShellCompletionScripts() throws {
        let sandbox = try Sandbox()
        for shell in ["bash", "zsh", "fish"] {
            let script = try sandbox.keymgr(["--generate-completion-script", shell])
            XCTAssertEqual(script.status, 0, script.summary)
            XCTAssertTrue(script.stdout.contains("keymgr"), shell)
            XCTAssertTrue(script.stdout.contains("rebind"), "\(shell) completes subcommands")
            XCTAssertTrue(script.stdout.contains("app-pin"), "\(shell) completes auth types")
        }
    }

    func testGlobalOptionsGoBeforeOrAfterTheSubcommand() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let after = try sandbox.run(Sandbox.binary, ["status", "--json", "--home", sandbox.home.path])
        XCTAssertEqual(after.status, 0, after.summary)
        let environment = try sandbox.run(Sandbox.binary, ["--json", "status"], extraEnvironment: ["KEYMGR_HOME": sandbox.home.path])
        XCTAssertEqual(environment.status, 0, environment.summary)
        XCTAssertEqual(try after.object()["deviceId"] as? String, try environment.object()["deviceId"] as? String)
        let nested = try sandbox.run(Sandbox.binary, ["audit", "--home", sandbox.home.path, "verify", "--json"])
        XCTAssertEqual(nested.status, 0, nested.summary)
    }
}
