import Foundation
import XCTest

/// PINs: read from stdin or a descriptor, never from argv or the environment, never written anywhere.
final class PINTests: XCTestCase {

    func testPINOnStdinOrDescriptorWorks() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let key = try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(key["authType"] as? String, "APPLICATION_PIN")
        let signed = try sandbox.succeed(["sign", "--user", "carol", "--challenge", "c", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(try jwsParts(signed.stdout).payload["sub"] as? String, "carol")
        try sandbox.succeed(["sign", "--user", "carol", "--pin-fd", "0"], stdin: "482916\n")
        try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin"], stdin: "482916\r\n")
        try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin"], stdin: "482916")
    }

    func testWithoutTerminalOrPINSourceFailsAtOnceWithAbort() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        let started = Date()
        // The PIN sits on stdin, but without --pin-stdin keymgr must not read it, nor wait for a terminal.
        for arguments in [["bind", "--user", "dave", "--auth-type", "app-pin"], ["sign", "--user", "carol"],
                          ["pin", "change", "--user", "carol"]] {
            let outcome = try sandbox.keymgr(arguments + ["--json"], stdin: "482916\n", timeout: 10)
            try assertJSONError(outcome, status: 77, code: "abort")
            XCTAssertTrue(outcome.stderr.contains("--pin-stdin"), "says how to give a PIN: \(outcome.stderr)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "no hanging")
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).array().count, 1, "nothing was bound")
        // Keys that need no PIN never ask.
        try sandbox.succeed(["bind", "--user", "erin"])
        try sandbox.succeed(["sign", "--user", "erin"])
    }

    func testNoArgumentOrEnvironmentVariableTakesAPIN() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        for flag in ["--pin", "--pin-code", "--password"] {
            XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol", flag, "482916"]).status, 64, flag)
        }
        for name in ["KEYMGR_PIN", "PIN", "KEYMGR_PASSWORD"] {
            let outcome = try sandbox.keymgr(["sign", "--user", "carol", "--json"], extraEnvironment: [name: "482916"])
            try assertJSONError(outcome, status: 77, code: "abort")
        }
        let help = try sandbox.succeed(["sign", "--help"]).stdout
        XCTAssertFalse(help.contains("--pin <"), "no option takes a PIN value: \(help)")
    }

    func testAPINNeverAppearsInOutputTheAuditLogOrTheDatabase() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let pin = "482916", newPIN = "591037"
        var outcomes: [Outcome] = []
        outcomes.append(try sandbox.succeed(["bind", "--user", "carol", "--auth-type", "app-pin", "--pin-stdin", "--json",
                                             "--challenge", "c1"], stdin: "\(pin)\n"))
        outcomes.append(try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin", "--json", "--verbose"], stdin: "\(pin)\n"))
        outcomes.append(try sandbox.keymgr(["sign", "--user", "carol", "--pin-stdin", "--verbose"], stdin: "\(newPIN)\n"))
        outcomes.append(try sandbox.succeed(["pin", "change", "--user", "carol", "--pin-stdin", "--verbose"],
                                            stdin: "\(pin)\n\(newPIN)\n"))
        outcomes.append(try sandbox.succeed(["sign", "--user", "carol", "--pin-stdin"], stdin: "\(newPIN)\n"))
        outcomes.append(try sandbox.keymgr(["pin", "change", "--user", "carol", "--pin-stdin", "--json"], stdin: "\(pin)\n12\n"))
        outcomes.append(try sandbox.succeed(["list", "--status", "all", "--json"]))
        outcomes.append(try sandbox.succeed(["audit", "--json"]))
        outcomes.append(try sandbox.succeed(["audit", "--format", "csv"]))
        outcomes.append(try sandbox.succeed(["audit"]))
        outcomes.append(try sandbox.succeed(["master", "rotate", "--json"]))

        for outcome in outcomes {
            for secret in [pin, newPIN] {
                XCTAssertFalse(outcome.arguments.contains { $0.contains(secret) }, "argv of \(outcome.arguments)")
                XCTAssertFalse(outcome.stdout.contains(secret), "stdout of \(outcome.summary)")
                XCTAssertFalse(outcome.stderr.contains(secret), "stderr of \(outcome.summary)")
            }
        }
        // Every file of the store: the database, its WAL and shared memory, the master key.
        let files = try FileManager.default.contentsOfDirectory(at: sandbox.home, includingPropertiesForKeys: nil)
        XCTAssertTrue(files.contains { $0.lastPathComponent == "keymgr.db" })
        for file in files {
            let bytes = try Data(contentsOf: file)
            for secret in [pin, newPIN] {
                XCTAssertNil(bytes.range(of: Data(secret.utf8)), "\(secret) found in \(file.lastPathComponent)")
                XCTAssertNil(bytes.range(of: Data(secret.utf16.flatMap { [UInt8($0 & 0xff), UInt8($0 >> 8)] })),
                             "\(secret) (UTF-16) found in \(file.lastPathComponent)")
            }
        }
    }

    func testNewPINPolicyIsTheLibrarysAndStillNeverEchoed() throws {
        let sandbox = try Sandbox(cli: .inProcess)
        try sandbox.initialise()
        let short = try sandbox.keymgr(["bind", "--user", "carol", "--auth-type", "app-pin", "--pin-stdin", "--json"],
                                       stdin: "4829\n")
        XCTAssertEqual(short.status, 65, short.summary)
        XCTAssertFalse(short.stdout.contains("4829") || short.stderr.contains("4829"))
    }
}
