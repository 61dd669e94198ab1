import Foundation
import Synchronization
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The built `keymgr-refserver` run as a process on 127.0.0.1 (port chosen by the OS), as `make demo` runs it.
///
/// It stops when told (`stop()`, called by the tests' tearDown), when the test runner dies (`--parent-pid`)
/// or after two idle minutes (`--idle-exit`), so a failed test never leaves it behind.
final class RefServerProcess {
    let process: Process
    let baseURL: URL
    /// The admin token's file (mode 0600): what `keymgr server set --credential-file` names.
    let tokenFile: URL
    let token: String
    /// The password every user added at start gets.
    static let password = "correct horse battery staple"

    /// The executable next to `keymgr` (or `$KEYMGR_REFSERVER_BIN`); when `keymgr` is another build's (`$KEYMGR_BIN`,
    /// e.g. the release build, which has no reference server), the one beside the test bundle.
    static let binary: URL = {
        if let explicit = ProcessInfo.processInfo.environment["KEYMGR_REFSERVER_BIN"] { return URL(fileURLWithPath: explicit) }
        let beside = Sandbox.binary.deletingLastPathComponent().appendingPathComponent("keymgr-refserver")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        var directories = [Bundle.main.bundleURL, Bundle.main.bundleURL.deletingLastPathComponent()]
        for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
            directories.append(bundle.bundleURL.deletingLastPathComponent())
        }
        for directory in directories {
            let candidate = directory.appendingPathComponent("keymgr-refserver")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return beside
    }()

    /// Starts a server whose state lives in `sandbox`, with `users` (password `RefServerProcess.password`).
    init(in sandbox: Sandbox, users: [String] = [], extra: [String] = []) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary.path) else {
            throw XCTSkip("keymgr-refserver is not built next to keymgr: \(Self.binary.path)")
        }
        let directory = sandbox.root.appendingPathComponent("refserver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        tokenFile = directory.appendingPathComponent("admin.token")
        token = "admin-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: tokenFile.path, contents: Data((token + "\n").utf8),
                                           attributes: [.posixPermissions: 0o600])
        var arguments = ["--db", directory.appendingPathComponent("refserver.db").path, "--port", "0",
                         "--admin-token-file", tokenFile.path, "--parent-pid", String(getpid()), "--idle-exit", "120"]
        for user in users { arguments += ["--add-user", "\(user):\(Self.password)"] }
        process = Process()
        process.executableURL = Self.binary
        process.arguments = arguments + extra
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let profile = RunProfile.start()
        try process.run()
        // A server that never says where it listens must not hang the suite.
        let watchdog = DispatchWorkItem { [process] in if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line.append(byte)
        }
        watchdog.cancel()
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("listening on http://127.0.0.1:"),
              let url = URL(string: String(text.dropFirst("listening on ".count))) else {
            process.terminate()
            throw XCTSkip("keymgr-refserver did not start: \(text)")
        }
        baseURL = url
        profile?.record(Self.binary, ["(until listening)"], cpu: RunProfile.cpuSeconds(of: process.processIdentifier))
    }

    deinit { stop() }

    func stop() {
        guard process.isRunning else { return }
        if let cpu = RunProfile.cpuSeconds(of: process.processIdentifier) {
            RunProfile(started: Date(), childCPU: 0).record(Self.binary, ["(its whole life, CPU only)"], cpu: cpu)
        }
        process.terminate()
        process.waitUntilExit()
    }

    /// `keymgr server set` arguments for this server.
    var serverSetArguments: [String] {
        ["server", "set", "--dialect", "pingam", "--base-url", baseURL.absoluteString, "--credential-file", tokenFile.path]
    }

    // MARK: the admin surface (/__refserver/) and PingAM's device REST, as an administrator uses them

    /// Sends a request with the admin token and returns the status and the JSON body (nil when empty).
    @discardableResult
    func request(_ method: String, _ path: String, body: Any? = nil, headers: [String: String] = [:],
                 file: StaticString = #filePath, line: UInt = #line) throws -> (status: Int, json: Any?) {
        let url = try XCTUnwrap(URL(string: baseURL.absoluteString + path), file: file, line: line)
        var request = URLRequest(url: url, timeoutInterval: 30)
        request.httpMethod = method
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let answer = Mutex<(Int, Data)?>(nil)
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, _ in
            answer.withLock { $0 = ((response as? HTTPURLResponse)?.statusCode ?? 0, data ?? Data()) }
            done.signal()
        }.resume()
        done.wait()
        let (status, data) = try XCTUnwrap(answer.withLock { $0 }, file: file, line: line)
        let json = data.isEmpty ? nil : try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        return (status, json)
    }

    /// Every device record on the server (the admin listing: PingAM's fields plus `user` and `realm`).
    func devices(file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        let answer = try request("GET", "/__refserver/devices", file: file, line: line)
        XCTAssertEqual(answer.status, 200, file: file, line: line)
        return try XCTUnwrap((answer.json as? [String: Any])?["result"] as? [[String: Any]], file: file, line: line)
    }

    /// Deletes a binding the way a PingAM administrator does: the device REST's DELETE.
    func deleteBinding(user: String, uuid: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let answer = try request("DELETE", "/json/realms/root/users/\(user)/devices/2fa/binding/\(uuid)",
                                 headers: ["Accept-API-Version": "resource=1.0"], file: file, line: line)
        XCTAssertEqual(answer.status, 200, "DELETE binding \(uuid) of \(user)", file: file, line: line)
    }

    /// Arms a fault on the device REST for `user` (`{"fault":"delay","seconds":3}`, …).
    func setFault(user: String, _ fault: [String: Any], file: StaticString = #filePath, line: UInt = #line) throws {
        let answer = try request("PUT", "/__refserver/faults/\(user)", body: fault, file: file, line: line)
        XCTAssertEqual(answer.status, 200, "fault \(fault) for \(user)", file: file, line: line)
    }

    /// The `clientError` values device callbacks were answered with, oldest first.
    func clientErrors(file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        let answer = try request("GET", "/__refserver/client-errors", file: file, line: line)
        let result = try XCTUnwrap((answer.json as? [String: Any])?["result"] as? [[String: Any]], file: file, line: line)
        return result.compactMap { $0["clientError"] as? String }
    }

    /// How many sessions successful journeys left open.
    func openSessions(file: StaticString = #filePath, line: UInt = #line) throws -> Int {
        let answer = try request("GET", "/__refserver/sessions", file: file, line: line)
        return try XCTUnwrap((answer.json as? [String: Any])?["open"] as? Int, file: file, line: line)
    }

    /// The requests the server received (targets still percent-encoded), oldest first.
    func recordedRequests(file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        let answer = try request("GET", "/__refserver/requests", file: file, line: line)
        return try XCTUnwrap((answer.json as? [String: Any])?["result"] as? [[String: Any]], file: file, line: line)
    }
}

/// A `keymgr` process started in the background, for runs that overlap or are killed.
final class RunningKeymgr {
    let process: Process
    let arguments: [String]
    let startedAt = Date()
    private let stdoutURL: URL
    private let stderrURL: URL
    /// When the process really exited, stamped by its termination handler (not when `finish` got round to it).
    private let exit = ExitTime()

    private final class ExitTime: @unchecked Sendable {
        private let lock = NSLock()
        private var date: Date?

        func stamp() { lock.withLock { date = Date() } }

        var value: Date? { lock.withLock { date } }
    }

    init(_ sandbox: Sandbox, _ arguments: [String], directory: URL? = nil) throws {
        let name = UUID().uuidString
        stdoutURL = sandbox.root.appendingPathComponent("bg-\(name).out")
        stderrURL = sandbox.root.appendingPathComponent("bg-\(name).err")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        self.arguments = ["--home", sandbox.home.path] + arguments
        process = Process()
        process.executableURL = Sandbox.binary
        process.arguments = self.arguments
        process.environment = sandbox.environment
        if let directory { process.currentDirectoryURL = directory }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        let exit = exit
        process.terminationHandler = { _ in exit.stamp() }
        try process.run()
    }

    deinit {
        if process.isRunning { process.terminate() }
    }

    /// Waits for the process to end (killing it after `timeout`) and returns what it did, and when it ended.
    func finish(timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line) throws -> (Outcome, Date) {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            process.terminate()
            XCTFail("`keymgr \(arguments.joined(separator: " "))` ran longer than \(timeout) s", file: file, line: line)
        }
        process.waitUntilExit()
        let ended = exit.value ?? Date()
        let outcome = Outcome(status: process.terminationStatus,
                              stdout: String(decoding: try Data(contentsOf: stdoutURL), as: UTF8.self),
                              stderr: String(decoding: try Data(contentsOf: stderrURL), as: UTF8.self),
                              arguments: arguments)
        return (outcome, ended)
    }
}

/// A sandbox with an initialised store, a reference server holding `users`, and the server configured.
class ServerTestCase: XCTestCase {
    var sandbox: Sandbox!
    var server: RefServerProcess!

    /// How this class's sandbox runs keymgr (`Sandbox.CLIRun`): a class whose subject is the commands' logic and
    /// output runs them in process.
    var cli: Sandbox.CLIRun { .process }

    func start(users: [String], serverArguments: [String] = [], initArguments: [String] = []) throws {
        sandbox = try Sandbox(cli: cli)
        try sandbox.initialise(initArguments)
        server = try RefServerProcess(in: sandbox, users: users, extra: serverArguments)
        try sandbox.succeed(server.serverSetArguments)
    }

    override func tearDown() {
        server?.stop()
        server = nil
        sandbox = nil
        super.tearDown()
    }

    /// The universal id the reference server gives a user of the root realm.
    func universalId(_ username: String) -> String { "id=\(username),ou=user,ou=am-config" }

    /// Registers `username` through the binding journey (password on stdin as fd 0); returns the key object.
    @discardableResult
    func register(_ username: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let outcome = try sandbox.keymgr(["bind", "--journey", "RegisterDevice", "--user", username, "--password-fd", "0", "--json"],
                                         stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return try outcome.object(file: file, line: line)
    }

    /// Registers users, then runs one sync so that the store mirrors the server; returns each user's kid.
    @discardableResult
    func registerSettled(_ usernames: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [String: String] {
        var kids: [String: String] = [:]
        for name in usernames { kids[name] = try register(name, file: file, line: line)["kid"] as? String }
        let settle = try sandbox.keymgr(["sync", "--json"])
        XCTAssertEqual(settle.status, 0, settle.summary, file: file, line: line)
        return kids
    }

    /// `sync --json` with `arguments`, expecting `status`; returns the report.
    @discardableResult
    func sync(_ arguments: [String] = [], status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let outcome = try sandbox.keymgr(["sync", "--json"] + arguments)
        XCTAssertEqual(outcome.status, status, outcome.summary, file: file, line: line)
        return try outcome.object(file: file, line: line)
    }

    /// Every key on the device, by kid (`list --status all --json`).
    func keys(file: StaticString = #filePath, line: UInt = #line) throws -> [String: [String: Any]] {
        let list = try sandbox.succeed(["list", "--status", "all", "--json"], file: file, line: line).array(file: file, line: line)
        return Dictionary(list.map { ($0["kid"] as? String ?? "", $0) }, uniquingKeysWith: { first, _ in first })
    }
}
