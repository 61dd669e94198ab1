import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Runs the built `keymgr-refserver` as a process, as the demo and other test suites do.
final class ExecutableTests: XCTestCase {
    /// The executable next to the test bundle (SwiftPM puts products in one directory), or
    /// `$KEYMGR_REFSERVER_BIN`.
    func executableURL() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["KEYMGR_REFSERVER_BIN"] {
            return URL(fileURLWithPath: path)
        }
        var candidates = [Bundle.main.bundleURL.appendingPathComponent("keymgr-refserver")]
        if let executable = Bundle.main.executableURL {
            candidates.append(executable.deletingLastPathComponent().appendingPathComponent("keymgr-refserver"))
        }
        for bundle in Bundle.allBundles {
            candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent("keymgr-refserver"))
        }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else {
            throw XCTSkip("keymgr-refserver not built next to the tests: \(candidates.map(\.path))")
        }
        return found
    }

    /// Starts the server and returns it with its first stdout line.
    func launch(_ arguments: [String]) throws -> (Process, Pipe, String) {
        let process = Process()
        process.executableURL = try executableURL()
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // A server that never prints must not hang the suite.
        let watchdog = DispatchWorkItem { [weak process] in if process?.isRunning == true { process?.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        var line = Data()
        while true {
            let chunk = try output.fileHandleForReading.read(upToCount: 1) ?? Data()
            if chunk.isEmpty || chunk == Data("\n".utf8) { break }
            line.append(chunk)
        }
        watchdog.cancel()
        return (process, output, String(decoding: line, as: UTF8.self))
    }

    func testPrintsListeningLineServesAndStopsOnSIGTERM() async throws {
        let databasePath = try temporaryDatabasePath()
        let tokenPath = databasePath + ".token"
        try "process-token\n".write(toFile: tokenPath, atomically: true, encoding: .utf8)
        let (process, output, line) = try launch([
            "--db", databasePath, "--port", "0", "--admin-token-file", tokenPath, "--add-user", "demo:pw",
            "--parent-pid", String(getpid()), "--idle-exit", "120",
        ])
        defer { if process.isRunning { process.terminate() } }
        let match = try XCTUnwrap(line.wholeMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/), line)
        let port = try XCTUnwrap(Int(match.1))
        XCTAssertGreaterThan(port, 0)

        let base = try XCTUnwrap(URL(string: "http://127.0.0.1:\(port)"))
        let users = try await send(
            "GET", base.appendingPathComponent("__refserver/users"), headers: ["Authorization": "Bearer process-token"])
        XCTAssertEqual(users.status, 200)
        XCTAssertEqual((try users.object()["result"] as? [[String: Any]])?.first?["username"] as? String, "demo")

        process.terminate()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .exit)
        XCTAssertEqual(process.terminationStatus, 0)
        let rest = try output.fileHandleForReading.readToEnd() ?? Data()
        XCTAssertTrue(rest.isEmpty, "stdout holds exactly one line")
    }

    func testIdleExitStopsTheServer() throws {
        let databasePath = try temporaryDatabasePath()
        let (process, _, line) = try launch(["--db", databasePath, "--idle-exit", "1"])
        defer { if process.isRunning { process.terminate() } }
        XCTAssertTrue(line.hasPrefix("listening on http://127.0.0.1:"))
        let deadline = Date().addingTimeInterval(15)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        XCTAssertFalse(process.isRunning)
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: databasePath + ".admin-token"))
    }

    /// A tenant of the executable takes the server's options and its own (`--add-user`, `--auth-type`, …), but not
    /// the process's (`--port`, `--clock-offset`, …), and another tenant sees none of them.
    func testATenantTakesOptionsOfItsOwnButNotTheProcesssOnes() async throws {
        let databasePath = try temporaryDatabasePath()
        let tokenPath = databasePath + ".token"
        try "process-token\n".write(toFile: tokenPath, atomically: true, encoding: .utf8)
        let (process, _, line) = try launch([
            "--db", databasePath, "--admin-token-file", tokenPath, "--add-user", "demo:pw", "--parent-pid", String(getpid()),
            "--idle-exit", "120",
        ])
        defer { if process.isRunning { process.terminate() } }
        let base = String(line.dropFirst("listening on ".count))
        let admin = ["Authorization": "Bearer process-token"]
        func put(_ id: String, _ arguments: [String]) async throws -> HTTPResult {
            try await send("PUT", try XCTUnwrap(URL(string: base + "/__refserver/tenants/" + id)), headers: admin,
                           json: ["arguments": arguments])
        }
        func users(_ id: String) async throws -> [String] {
            let answer = try await send("GET", try XCTUnwrap(URL(string: base + "/t/\(id)/__refserver/users")), headers: admin)
            XCTAssertEqual(answer.status, 200)
            return (try answer.object()["result"] as? [[String: Any]] ?? []).compactMap { $0["username"] as? String }.sorted()
        }
        let made = try await put("one", ["--add-user", "erin:pw", "--usernameless-journey", "Quick"]).status
        XCTAssertEqual(made, 201)
        let usersInOne = try await users("one")
        XCTAssertEqual(usersInOne, ["demo", "erin"])
        let usersInTwo = try await users("two")
        XCTAssertEqual(usersInTwo, ["demo"], "made on first use with the server's own options")
        // The tenant's own journey: a usernameless tree answers its first step in one, and is unknown in the other.
        let journey = "/json/realms/root/authenticate?authIndexType=service&authIndexValue=Quick"
        let inOne = try await send("POST", try XCTUnwrap(URL(string: base + "/t/one" + journey)), json: [String: Any]())
        let inTwo = try await send("POST", try XCTUnwrap(URL(string: base + "/t/two" + journey)), json: [String: Any]())
        XCTAssertEqual(inOne.status, 200, String(decoding: inOne.body, as: UTF8.self))
        XCTAssertNotEqual(inTwo.status, 200)
        for refused in [["--port", "0"], ["--clock-offset=60"], ["--db", databasePath], ["--no-such-option"],
                        ["--auth-type", "NOPE"]] {
            let answer = try await put("bad", refused)
            XCTAssertEqual(answer.status, 400, "\(refused)")
        }
    }

    /// `--parent-pid`: the server stops by itself once that process is gone (what leaves no server behind when
    /// `scripts/run-tests.sh`, which names itself, is killed outright).
    func testTheServerStopsWhenItsParentIsGone() throws {
        let parent = Process()
        parent.executableURL = URL(fileURLWithPath: "/bin/sleep")
        parent.arguments = ["300"]
        try parent.run()
        defer { if parent.isRunning { parent.terminate() } }
        let databasePath = try temporaryDatabasePath()
        let (process, _, line) = try launch(["--db", databasePath, "--parent-pid", String(parent.processIdentifier)])
        defer { if process.isRunning { process.terminate() } }
        XCTAssertTrue(line.hasPrefix("listening on http://127.0.0.1:"), line)
        XCTAssertTrue(process.isRunning)
        kill(parent.processIdentifier, SIGKILL)
        parent.waitUntilExit()
        let deadline = Date().addingTimeInterval(15)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertFalse(process.isRunning, "the server outlived the process it named")
        XCTAssertEqual(process.terminationStatus, 0)
    }
}
