import Foundation
import Synchronization
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The test's own tenant of a `keymgr-refserver` on 127.0.0.1 (port chosen by the OS): `baseURL` is
/// `http://127.0.0.1:PORT/t/<id>`, with users, devices, clients, tokens, faults and a journal nobody else sees.
///
/// The server is the run's (`scripts/run-tests.sh` starts one and names it in `KEYMGR_TEST_REFSERVER_URL` and
/// `KEYMGR_TEST_REFSERVER_TOKEN_FILE`), or one of the test's own: when those are not set (a plain `swift test`), when
/// the test asks (`ownServer: true`: it stops the server, or needs a host of its own) or when `extra` sets a
/// process-wide option (`--clock-offset`, `--port`, …). A server of its own stops when told (`stop()`, called by the
/// tests' tearDown), when the test runner dies (`--parent-pid`) or after two idle minutes (`--idle-exit`), so a failed
/// test never leaves it behind.
final class RefServerProcess {
    /// The server the test started, nil on the run's server.
    let process: Process?
    /// The tenant's base URL, `http://127.0.0.1:PORT/t/<id>`: what keymgr is configured with.
    let baseURL: URL
    /// The server's own URL, `http://127.0.0.1:PORT`.
    let serverURL: URL
    /// The tenant's id.
    let tenant: String
    /// The admin token's file (mode 0600) in the test's sandbox: what `keymgr server set --credential-file` names.
    let tokenFile: URL
    let token: String
    /// The password every user added at start gets.
    static let password = "correct horse battery staple"

    /// The options only a server's process takes (a tenant may not set them).
    static let processWideOptions: Set<String> = ["--db", "--port", "--admin-token-file", "--idle-exit", "--parent-pid",
                                                  "--clock-offset"]

    /// The run's server (`scripts/run-tests.sh`), when there is one.
    static let runServer: (url: URL, token: String)? = {
        let environment = ProcessInfo.processInfo.environment
        guard let text = environment["KEYMGR_TEST_REFSERVER_URL"], let url = URL(string: text),
              let tokenPath = environment["KEYMGR_TEST_REFSERVER_TOKEN_FILE"],
              let data = FileManager.default.contents(atPath: tokenPath) else { return nil }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : (url, token)
    }()

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

    /// A tenant holding `users` (password `RefServerProcess.password`) and set up by `extra` (the server's options),
    /// on the run's server unless `ownServer` (or a process-wide option in `extra`) asks for a server of its own.
    init(in sandbox: Sandbox, users: [String] = [], extra: [String] = [], ownServer: Bool = false) throws {
        let directory = sandbox.root.appendingPathComponent("refserver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        tokenFile = directory.appendingPathComponent("admin.token")
        tenant = UUID().uuidString.lowercased()
        let userArguments = users.flatMap { ["--add-user", "\($0):\(Self.password)"] }
        let processWide = extra.contains { Self.processWideOptions.contains(String($0.split(separator: "=").first ?? "")) }
        if !ownServer, !processWide, let run = Self.runServer,
           let created = try Self.createTenant(tenant, on: run.url, token: run.token, arguments: userArguments + extra) {
            process = nil
            serverURL = run.url
            token = run.token
            baseURL = created
            _ = FileManager.default.createFile(atPath: tokenFile.path, contents: Data((token + "\n").utf8),
                                               attributes: [.posixPermissions: 0o600])
            return
        }
        guard FileManager.default.isExecutableFile(atPath: Self.binary.path) else {
            throw XCTSkip("keymgr-refserver is not built next to keymgr: \(Self.binary.path)")
        }
        token = "admin-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: tokenFile.path, contents: Data((token + "\n").utf8),
                                           attributes: [.posixPermissions: 0o600])
        let arguments = ["--db", directory.appendingPathComponent("refserver.db").path, "--port", "0",
                         "--admin-token-file", tokenFile.path, "--parent-pid", String(getpid()), "--idle-exit", "120"]
        let process = Process()
        process.executableURL = Self.binary
        // The users and options are the process's; its tenants (this test's) start with them.
        process.arguments = arguments + userArguments + extra
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
        self.process = process
        serverURL = url
        profile?.record(Self.binary, ["(until listening)"], cpu: RunProfile.cpuSeconds(of: process.processIdentifier))
        // Created now rather than on first use, so that the tenant's journal starts with keymgr's requests.
        guard let created = try Self.createTenant(tenant, on: url, token: token, arguments: []) else {
            process.terminate()
            throw XCTSkip("keymgr-refserver at \(url.absoluteString) does not answer")
        }
        baseURL = created
    }

    deinit { stop() }

    /// Stops the test's own server (the run's server stays: the test's tenant is simply no longer used).
    func stop() {
        guard let process, process.isRunning else { return }
        if let cpu = RunProfile.cpuSeconds(of: process.processIdentifier) {
            RunProfile(started: Date(), childCPU: 0).record(Self.binary, ["(its whole life, CPU only)"], cpu: cpu)
        }
        process.terminate()
        process.waitUntilExit()
    }

    /// Creates `tenant` on the server at `url` (`PUT /__refserver/tenants/<id>`) and returns its base URL; nil when
    /// nothing answers there (the run's server gone); throws when the server refuses it.
    static func createTenant(_ tenant: String, on url: URL, token: String, arguments: [String]) throws -> URL? {
        guard let target = URL(string: url.absoluteString + "/__refserver/tenants/" + tenant) else { return nil }
        let (status, json) = try send("PUT", target, token: token, body: ["arguments": arguments])
        if status == 0 { return nil }
        guard status == 201, let base = (json as? [String: Any])?["baseURL"] as? String, let baseURL = URL(string: base) else {
            throw RefServerTenantError(message: "tenant \(tenant) with \(arguments): HTTP \(status) \(json ?? "")")
        }
        return baseURL
    }

    /// Sends a request with the admin token and returns the status (0: no answer) and the JSON body (nil when empty).
    static func send(_ method: String, _ url: URL, token: String, body: Any? = nil, headers: [String: String] = [:])
        throws -> (status: Int, json: Any?) {
        var request = URLRequest(url: url, timeoutInterval: 30)
        request.httpMethod = method
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let answer = Mutex<(Int, Data)>((0, Data()))
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, _ in
            answer.withLock { $0 = ((response as? HTTPURLResponse)?.statusCode ?? 0, data ?? Data()) }
            done.signal()
        }.resume()
        done.wait()
        let (status, data) = answer.withLock { $0 }
        let json = data.isEmpty ? nil : try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        return (status, json)
    }

    /// `keymgr server set` arguments for this server.
    var serverSetArguments: [String] {
        ["server", "set", "--dialect", "pingam", "--base-url", baseURL.absoluteString, "--credential-file", tokenFile.path]
    }

    // MARK: the admin surface (/__refserver/) and PingAM's device REST, as an administrator uses them

    /// Sends a request to the tenant with the admin token and returns the status and the JSON body (nil when empty).
    @discardableResult
    func request(_ method: String, _ path: String, body: Any? = nil, headers: [String: String] = [:],
                 file: StaticString = #filePath, line: UInt = #line) throws -> (status: Int, json: Any?) {
        let url = try XCTUnwrap(URL(string: baseURL.absoluteString + path), file: file, line: line)
        let answer = try Self.send(method, url, token: token, body: body, headers: headers)
        XCTAssertNotEqual(answer.status, 0, "no answer to \(method) \(path)", file: file, line: line)
        return answer
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

/// The run's reference server refused a tenant.
struct RefServerTenantError: Error, CustomStringConvertible {
    let message: String
    var description: String { "keymgr-refserver refused a tenant: \(message)" }
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

    /// A store, and a tenant of the run's reference server for `users`; `ownServer`: on a server of the test's own,
    /// for a test that stops it or needs a host of its own (docs/testing.md).
    func start(users: [String], serverArguments: [String] = [], initArguments: [String] = [], ownServer: Bool = false) throws {
        sandbox = try Sandbox(cli: cli)
        try sandbox.initialise(initArguments)
        server = try RefServerProcess(in: sandbox, users: users, extra: serverArguments, ownServer: ownServer)
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
