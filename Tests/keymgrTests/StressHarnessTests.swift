import Foundation
import XCTest

/// The short form of `make stress` (proof/stress.py --short): at least 30 SIGKILLs of keymgr during bind, rebind,
/// revoke, pin change, sync, master rotate, dcr register, login, token refresh and token import, each followed by
/// read-only checks of the store, then a 20-second soak of four processes. The harness does the checking; this
/// test asserts its verdict.
final class StressHarnessTests: XCTestCase {
    func testShortCrashAndSoakRunFindsNoFailure() throws {
        let sandbox = try Sandbox()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("proof/stress.py")
        XCTAssertTrue(FileManager.default.fileExists(atPath: script.path), script.path)
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                                      ["python3", script.path, "--short", "--bin-dir",
                                       Sandbox.binary.deletingLastPathComponent().path, "--refserver", RefServerProcess.binary.path],
                                      timeout: 300)
        XCTAssertEqual(outcome.status, 0, "stress harness failed (replay with the seed it printed):\n\(outcome.stdout)\n\(outcome.stderr)")
        let verdict = outcome.stdout.split(separator: "\n").last { $0.hasSuffix(" failures") }.map(String.init) ?? ""
        let numbers = verdict.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        XCTAssertNotNil(verdict.range(of: #"^\d+ kills, \d+ checks, 0 failures$"#, options: .regularExpression),
                        "verdict line: \(verdict)\n\(outcome.stdout)")
        XCTAssertGreaterThanOrEqual(numbers.first ?? 0, 30, "kills: \(verdict)")
        XCTAssertGreaterThan(numbers.dropFirst().first ?? 0, numbers.first ?? 0, "checks: \(verdict)")
    }
}
