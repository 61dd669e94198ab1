import Foundation
import Synchronization
import XCTest

/// The writers' queue seen from the command line (docs/operations.md, "Lock files"): many keymgr processes writing
/// one store at once all succeed, and a writer that cannot get the queue in time exits 75 (busy) saying so.
final class WriterQueueCommandTests: XCTestCase {
    static let streams = 4
    static let runsPerStream = 25

    func testManyConcurrentWritersAllSucceedAndTheAuditChainHolds() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        for stream in 0..<Self.streams { try sandbox.bind("signer\(stream)") }
        let (binary, home, environment) = (Sandbox.binary, sandbox.home.path, sandbox.environment)
        let failures = Mutex<[String]>([])
        // Four streams of 25 processes each, all writing at once: a stream signs with its user's key (lastUsedAt and
        // an audit entry) and binds a new user in turn.
        DispatchQueue.concurrentPerform(iterations: Self.streams) { stream in
            for run in 0..<Self.runsPerStream {
                let arguments = run % 2 == 0
                    ? ["--home", home, "sign", "--user", "signer\(stream)", "--challenge", "c\(stream)-\(run)"]
                    : ["--home", home, "bind", "--user", "writer\(stream)-\(run)"]
                let (status, stderr) = Self.run(binary, arguments, environment: environment)
                if status != 0 {
                    failures.withLock { $0.append("\(arguments.dropFirst(2).joined(separator: " ")) -> \(status): \(stderr)") }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [], "every concurrent writer succeeded")
        let verify = try sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(verify.status, 0, verify.summary)
        let users = try sandbox.succeed(["list", "--json"]).array().compactMap { $0["userId"] as? String }
        XCTAssertEqual(Set(users).count, Self.streams + Self.streams * (Self.runsPerStream / 2), "every bind kept: \(users)")
    }

    func testWriterExits75WhenTheQueueIsHeldAndReadersStillRead() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        let lockPath = sandbox.home.appendingPathComponent("keymgr.db-lock").path
        let held = open(lockPath, O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(held, 0, "the first write made \(lockPath)")
        defer { close(held) }
        XCTAssertEqual(flock(held, LOCK_EX | LOCK_NB), 0)

        let list = try sandbox.keymgr(["list", "--json"])
        XCTAssertEqual(list.status, 0, "a reader does not wait for the writers' queue: \(list.summary)")
        let busy = try sandbox.keymgr(["revoke", "--user", "alice", "--json"], timeout: 30)
        try assertJSONError(busy, status: 75, code: "busy")
        XCTAssertTrue(busy.stdout.contains("keymgr.db-lock"), "names the lock it waited for: \(busy.stdout)")
        XCTAssertTrue(busy.stderr.contains("try again"), busy.stderr)

        XCTAssertEqual(flock(held, LOCK_UN), 0)
        XCTAssertEqual(try sandbox.keymgr(["revoke", "--user", "alice"]).status, 0, "works once the queue is free")
    }

    /// Runs one keymgr process; its exit status and stderr (stdout discarded).
    static func run(_ binary: URL, _ arguments: [String], environment: [String: String]) -> (Int32, String) {
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.environment = environment
        let errors = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        do { try process.run() } catch { return (-1, "\(error)") }
        let said = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: said, as: UTF8.self))
    }
}
