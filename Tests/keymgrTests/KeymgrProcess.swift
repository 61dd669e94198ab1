import Foundation
import XCTest

/// What one run of the built `keymgr` binary did.
struct Outcome {
    let status: Int32
    let stdout: String
    let stderr: String
    let arguments: [String]

    /// stdout parsed as one JSON document (fails the test if it is anything else).
    func json(file: StaticString = #filePath, line: UInt = #line) throws -> Any {
        let data = Data(stdout.utf8)
        do {
            return try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            XCTFail("stdout of `keymgr \(arguments.joined(separator: " "))` is not one JSON document: \(stdout)",
                    file: file, line: line)
            throw error
        }
    }

    func object(file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try XCTUnwrap(try json(file: file, line: line) as? [String: Any], "expected a JSON object: \(stdout)",
                      file: file, line: line)
    }

    func array(file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        try XCTUnwrap(try json(file: file, line: line) as? [[String: Any]], "expected a JSON array of objects: \(stdout)",
                      file: file, line: line)
    }

    var summary: String { "keymgr \(arguments.joined(separator: " ")) -> \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

/// A temporary directory with a keymgr home in it, and the means to run keymgr against that home: the built binary
/// as a process, or (`CLIRun.inProcess`) the same entry point in the test process (InProcessKeymgr.swift).
///
/// Every run has stdin that is never a terminal (a pipe, or a file in process), a clean environment (no `KEYMGR_*`,
/// no `CREDENTIALS_DIRECTORY`, `HOME` inside the sandbox); a process also has a time limit.
final class Sandbox {
    let root: URL
    var home: URL { root.appendingPathComponent("home") }
    var database: URL { home.appendingPathComponent("keymgr.db") }
    private var runCount = 0
    /// How `keymgr(_:)` (and so `succeed`, `bind`, `initialise`) runs keymgr. `run(Sandbox.binary, …)` is always the
    /// process.
    let cli: CLIRun

    /// Small Argon2 parameters: the CLI is under test here, not the KDF's cost.
    static let fastInit = ["--argon2-memory", "64", "--argon2-iterations", "1", "--argon2-parallelism", "1"]

    /// How keymgr's command lines run: as the built binary, or in the test process through `KeymgrMain.run`.
    enum CLIRun {
        /// The built `keymgr` as a process: for what the process boundary decides (exit codes, the lean client,
        /// terminals, descriptors, signals, the agent).
        case process
        /// `KeymgrMain.run` in the test process, with a context of its own (docs/testing.md): for a command's
        /// logic and output.
        case inProcess
    }

    /// `KEYMGR_TEST_CLI=process` in the test runner's environment runs every class's command lines as processes,
    /// the in-process classes' too (docs/testing.md).
    static let forcedCLI: CLIRun? = ProcessInfo.processInfo.environment["KEYMGR_TEST_CLI"] == "process" ? .process : nil

    init(cli: CLIRun = .process) throws {
        self.cli = Self.forcedCLI ?? cli
        root = FileManager.default.temporaryDirectory
            .appendingPathComponent("keymgr-cli-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        signal(SIGPIPE, SIG_IGN)  // a child that exits before reading its stdin must not kill the test runner
    }

    deinit { try? FileManager.default.removeItem(at: root) }

    /// The `keymgr` executable next to the test bundle in the build products directory (or `$KEYMGR_BIN`): the lean
    /// client, which runs `keymgr-core` beside it in embedded mode (every test that gives `--home`), so the tests
    /// run the command line a person types.
    static let binary: URL = {
        if let explicit = ProcessInfo.processInfo.environment["KEYMGR_BIN"] { return URL(fileURLWithPath: explicit) }
        var directories = [Bundle.main.bundleURL, Bundle.main.bundleURL.deletingLastPathComponent()]
        for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
            directories.append(bundle.bundleURL.deletingLastPathComponent())
        }
        for directory in directories {
            let candidate = directory.appendingPathComponent("keymgr")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return Bundle.main.bundleURL.appendingPathComponent("keymgr")
    }()

    /// The full program, `keymgr-core`, beside the client (or `$KEYMGR_CORE_BIN`).
    static let coreBinary: URL = {
        if let explicit = ProcessInfo.processInfo.environment["KEYMGR_CORE_BIN"] { return URL(fileURLWithPath: explicit) }
        return binary.deletingLastPathComponent().appendingPathComponent("keymgr-core")
    }()

    /// The environment every run gets: nothing that could point keymgr at another store or master key, and no
    /// `COLUMNS` from the shell that runs the tests (tables fit 80 columns unless a test says otherwise).
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { name, _ in
            !name.hasPrefix("KEYMGR_") && name != "CREDENTIALS_DIRECTORY" && name != "XDG_DATA_HOME" && name != "COLUMNS"
        }
        environment["HOME"] = root.appendingPathComponent("user-home").path
        return environment
    }

    /// Runs `keymgr --home <home> <arguments>` with `stdin` on a pipe, or in this process (`cli`) when `binary` is
    /// keymgr's own.
    @discardableResult
    func keymgr(_ arguments: [String], stdin: String = "", home: URL? = nil, binary: URL = Sandbox.binary,
                extraEnvironment: [String: String] = [:], timeout: TimeInterval = 60) throws -> Outcome {
        // `keymgr agent` serves until stopped, forks and installs signal handlers: always a process of its own.
        if cli == .inProcess && binary == Sandbox.binary && !arguments.contains("agent") {
            return try keymgrInProcess(arguments, stdin: stdin, home: home, extraEnvironment: extraEnvironment)
        }
        return try run(binary, ["--home", (home ?? self.home).path] + arguments, stdin: stdin,
                extraEnvironment: extraEnvironment, timeout: timeout)
    }

    /// Runs any executable with `stdin` on a pipe, stdout and stderr captured through files (no pipe deadlock).
    func run(_ executable: URL, _ arguments: [String], stdin: String = "", extraEnvironment: [String: String] = [:],
             timeout: TimeInterval = 60) throws -> Outcome {
        runCount += 1
        let stdoutURL = root.appendingPathComponent("run-\(runCount).out")
        let stderrURL = root.appendingPathComponent("run-\(runCount).err")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdoutHandle = try FileHandle(forWritingTo: stdoutURL)
        let stderrHandle = try FileHandle(forWritingTo: stderrURL)
        defer {
            try? stdoutHandle.close()
            try? stderrHandle.close()
            try? FileManager.default.removeItem(at: stdoutURL)
            try? FileManager.default.removeItem(at: stderrURL)
        }
        let input = Pipe()
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = environment.merging(extraEnvironment) { _, extra in extra }
        process.standardInput = input
        process.standardOutput = stdoutHandle
        process.standardError = stderrHandle
        let profile = RunProfile.start()
        try process.run()
        try? input.fileHandleForWriting.write(contentsOf: Data(stdin.utf8))
        try? input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            XCTFail("`\(executable.lastPathComponent) \(arguments.joined(separator: " "))` ran longer than \(timeout) s")
        }
        process.waitUntilExit()
        profile?.record(executable, arguments)
        return Outcome(status: process.terminationStatus,
                       stdout: String(decoding: try Data(contentsOf: stdoutURL), as: UTF8.self),
                       stderr: String(decoding: try Data(contentsOf: stderrURL), as: UTF8.self),
                       arguments: arguments)
    }

    /// `keymgr init` with fast Argon2 parameters; fails the test unless it succeeds.
    @discardableResult
    func initialise(_ extra: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        let outcome = try keymgr(["init", "--device-name", "test kiosk"] + Sandbox.fastInit + extra)
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return outcome
    }

    /// Runs keymgr and fails the test unless it exits 0.
    @discardableResult
    func succeed(_ arguments: [String], stdin: String = "", file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        let outcome = try keymgr(arguments, stdin: stdin)
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return outcome
    }

    /// Binds `user` (auth type NONE unless told) and returns its key object.
    @discardableResult
    func bind(_ user: String, _ extra: [String] = [], stdin: String = "",
              file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try succeed(["bind", "--user", user, "--json"] + extra, stdin: stdin, file: file, line: line).object(file: file, line: line)
    }
}

/// With `KEYMGR_TEST_PROFILE=FILE` in the test runner's environment, every run of `Sandbox.run` appends a line to
/// FILE: the wall seconds, the CPU seconds (user + system) of the children reaped meanwhile, the test, and the
/// command line without its paths (`scripts/test-profile.py` sums them per test and per command; docs/testing.md).
/// Costs nothing when unset.
struct RunProfile {
    static let file = ProcessInfo.processInfo.environment["KEYMGR_TEST_PROFILE"]
    let started: Date
    let childCPU: Double

    /// The test this process runs (`swift test --parallel` runs each in an `xctest -XCTest Class/test` of its own).
    static let test: String = {
        let arguments = CommandLine.arguments
        if let flag = arguments.firstIndex(of: "-XCTest"), flag + 1 < arguments.count { return arguments[flag + 1] }
        return "pid \(getpid())"
    }()

    static func start() -> RunProfile? {
        guard file != nil else { return nil }
        return RunProfile(started: Date(), childCPU: childrenCPUSeconds())
    }

    static func childrenCPUSeconds() -> Double {
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage) == 0 else { return 0 }
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// The CPU seconds process `pid` used so far (/proc/PID/stat), when profiling.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard file != nil, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        // After the name: state is field 3, utime and stime are fields 14 and 15.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Appends the line; `cpu` when the process is not a reaped child (a server still running).
    func record(_ executable: URL, _ arguments: [String], cpu given: Double? = nil) {
        guard let file = Self.file else { return }
        let wall = Date().timeIntervalSince(started)
        let cpu = given ?? (Self.childrenCPUSeconds() - childCPU)
        let command = ([executable.lastPathComponent] + arguments.filter { !$0.hasPrefix("/") }.prefix(4).map { String($0.prefix(40)) })
            .joined(separator: " ").replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "\t", with: " ")
        let line = String(format: "%.3f\t%.3f\t", wall, cpu) + Self.test + "\t" + command + "\n"
        let descriptor = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return }
        _ = line.withCString { write(descriptor, $0, strlen($0)) }
        close(descriptor)
    }
}

// MARK: - Assertions

/// The members of the key object (docs/cli.md, JSON).
let keyObjectFields: Set<String> = ["kid", "userId", "username", "owner", "authType", "status", "serverState", "createdAt",
                                    "lastUsedAt", "deviceName"]

/// keymgr's timestamp text: ISO 8601 UTC with milliseconds.
func assertTimestamp(_ value: Any?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    guard let text = value as? String else {
        XCTFail("\(what) is not a string: \(String(describing: value))", file: file, line: line)
        return
    }
    XCTAssertNotNil(text.range(of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#, options: .regularExpression),
                    "\(what) is not ISO 8601 UTC: \(text)", file: file, line: line)
}

func assertNull(_ value: Any?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertTrue(value is NSNull, "\(what) should be null, is \(String(describing: value))", file: file, line: line)
}

/// Checks a key object field by field.
func assertKeyObject(_ key: [String: Any], userId: String, username: String?, authType: String, status: String,
                     extraFields: Set<String> = [], file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertEqual(Set(key.keys), keyObjectFields.union(extraFields), file: file, line: line)
    let kid = key["kid"] as? String ?? ""
    XCTAssertFalse(kid.isEmpty, "kid", file: file, line: line)
    XCTAssertEqual(key["userId"] as? String, userId, file: file, line: line)
    if let username {
        XCTAssertEqual(key["username"] as? String, username, file: file, line: line)
    } else {
        assertNull(key["username"], "username", file: file, line: line)
    }
    XCTAssertEqual(key["authType"] as? String, authType, file: file, line: line)
    XCTAssertEqual(key["status"] as? String, status, file: file, line: line)
    XCTAssertTrue(["unregistered", "registered", "pendingDeletion", "deleted"].contains(key["serverState"] as? String ?? ""),
                  "serverState \(String(describing: key["serverState"]))", file: file, line: line)
    assertTimestamp(key["createdAt"], "createdAt", file: file, line: line)
    if !(key["lastUsedAt"] is NSNull) { assertTimestamp(key["lastUsedAt"], "lastUsedAt", file: file, line: line) }
    XCTAssertTrue(key["deviceName"] is NSNull || key["deviceName"] is String, "deviceName", file: file, line: line)
}

/// Checks that a failed run printed `{"error":{"code","message"}}` on stdout and `keymgr: …` on stderr.
func assertJSONError(_ outcome: Outcome, status: Int32, code: String, file: StaticString = #filePath, line: UInt = #line) throws {
    XCTAssertEqual(outcome.status, status, outcome.summary, file: file, line: line)
    let object = try outcome.object(file: file, line: line)
    XCTAssertEqual(Set(object.keys), ["error"], file: file, line: line)
    let error = try XCTUnwrap(object["error"] as? [String: Any], file: file, line: line)
    XCTAssertEqual(Set(error.keys), ["code", "message"], file: file, line: line)
    XCTAssertEqual(error["code"] as? String, code, outcome.summary, file: file, line: line)
    XCTAssertFalse((error["message"] as? String ?? "").isEmpty, file: file, line: line)
    XCTAssertTrue(outcome.stderr.hasPrefix("keymgr: "), "stderr: \(outcome.stderr)", file: file, line: line)
}

/// The decoded header and payload of a compact JWS.
func jwsParts(_ jws: String, file: StaticString = #filePath, line: UInt = #line) throws -> (header: [String: Any], payload: [String: Any]) {
    let parts = jws.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".", omittingEmptySubsequences: false)
    XCTAssertEqual(parts.count, 3, "a compact JWS has three parts: \(jws)", file: file, line: line)
    func decode(_ part: Substring) throws -> [String: Any] {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        let data = try XCTUnwrap(Data(base64Encoded: text), "not base64url: \(part)", file: file, line: line)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any], file: file, line: line)
    }
    guard parts.count == 3 else { throw XCTSkip("malformed JWS") }
    let signature = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    XCTAssertEqual(signature.count, 86, "an ES256 signature is 64 bytes (r||s), 86 base64url characters", file: file, line: line)
    return (try decode(parts[0]), try decode(parts[1]))
}

/// Asserts that every line's columns start at the same offsets as the header's.
func assertAlignedTable(_ text: String, headers: [String], file: StaticString = #filePath, line: UInt = #line) {
    let lines = text.split(separator: "\n").map(String.init)
    guard let header = lines.first else { return XCTFail("empty table", file: file, line: line) }
    var offsets: [Int] = []
    for name in headers {
        guard let range = header.range(of: name) else { return XCTFail("no column \(name) in \(header)", file: file, line: line) }
        offsets.append(header.distance(from: header.startIndex, to: range.lowerBound))
    }
    for row in lines.dropFirst() {
        let characters = Array(row)
        for offset in offsets.dropFirst() {
            XCTAssertTrue(offset < characters.count && characters[offset] != " " && characters[offset - 1] == " "
                          && characters[offset - 2] == " ",
                          "column at \(offset) not aligned in row: \(row)", file: file, line: line)
        }
    }
}

/// A command's stdout with the one thing that says who served it taken out (`status`'s `agent` line, or its `agent`
/// member set to null), so that a run through the agent compares byte for byte with a direct one.
func servedAlike(_ stdout: String) -> String {
    if let object = try? JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any], object["agent"] != nil {
        var alike = object
        alike["agent"] = NSNull()
        let data = (try? JSONSerialization.data(withJSONObject: alike, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
    return stdout.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("agent ") }
        .joined(separator: "\n")
}
