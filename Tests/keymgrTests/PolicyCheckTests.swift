import Foundation
import XCTest

/// A policy that is safe to edit (issue 32, finding 7): `keymgr agent --check-policy` as `visudo -c`, the agent's
/// READY=1 to systemd (`Type=notify`), and an agent started by socket activation with a policy that does not load,
/// which answers every request 78 instead of dropping it.
final class PolicyCheckTests: XCTestCase {
    /// A policy whose `[` on line 2 is never closed: the mistake is line 2, not line 3 where it shows.
    static let unclosed = "[[rule]]\nwho = [\"*\"\nmay = [\"*\"]\n"

    func testCheckPolicyNamesTheFileAndLineOfTheFirstMistake() throws {
        let harness = try AgentHarness(initialise: false)
        let sandbox = harness.sandbox
        let path = harness.policy.path
        XCTAssertEqual(chmod(path, 0o644), 0)
        let good = try sandbox.keymgr(["agent", "--check-policy", path])
        XCTAssertEqual(good.status, 0, good.summary)
        XCTAssertEqual(good.stdout, "\(path): parsed OK (1 rule)\n", good.summary)

        try Self.unclosed.write(to: harness.policy, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, 0o644), 0)
        for arguments in [["agent", "--check-policy", path], ["agent", "--check-policy", "--policy", path]] {
            let bad = try sandbox.keymgr(arguments)
            XCTAssertEqual(bad.status, 78, bad.summary)
            XCTAssertTrue(bad.stderr.contains("\(path):2: the array of who is not closed"), bad.summary)
            XCTAssertEqual(bad.stdout, "", bad.summary)
        }

        try AgentHarness.policy(allowing: ["root"]).write(to: harness.policy, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, 0o666), 0)
        let unsafe = try sandbox.keymgr(["agent", "--check-policy", path])
        XCTAssertEqual(unsafe.status, 78, unsafe.summary)
        XCTAssertTrue(unsafe.stderr.contains("writable by its group or by others"), unsafe.summary)

        let missing = try sandbox.keymgr(["agent", "--check-policy", path + ".missing"])
        XCTAssertEqual(missing.status, 78, missing.summary)
        XCTAssertTrue(missing.stderr.contains("cannot read the agent's policy \(path).missing"), missing.summary)

        let stray = try sandbox.keymgr(["agent", path])
        XCTAssertEqual(stray.status, 64, stray.summary)
    }

    /// The agent started for a waiting connection, as keymgr.socket starts it: with a policy that
    /// does not load, each request gets 78 naming the policy's file and line, and the agent stays (no dropped
    /// connection, no restart loop into systemd's start limit). It told systemd it was ready.
    func testUnderSocketActivationABrokenPolicyAnswersEveryRequest78() throws {
        let harness = try AgentHarness()
        try Self.unclosed.write(to: harness.policy, atomically: true, encoding: .utf8)
        let notify = try NotifySocket(path: harness.sandbox.root.appendingPathComponent("notify").path)
        // As systemd does on a person's connection: the socket passed at descriptor 3 (LISTEN_FDS=1, LISTEN_PID), a
        // connection already waiting on it when the agent starts.
        let activate = harness.sandbox.root.appendingPathComponent("activate-waiting.py")
        try """
            import os, socket, sys
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(sys.argv[1])
            listener.listen(16)
            waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            waiting.connect(sys.argv[1])
            if listener.fileno() != 3:
                os.dup2(listener.fileno(), 3)
            os.set_inheritable(3, True)
            os.environ["LISTEN_FDS"] = "1"
            os.environ["LISTEN_PID"] = str(os.getpid())
            os.execv(sys.argv[2], sys.argv[2:])

            """.write(to: activate, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [activate.path, harness.socket.path, AgentHarness.coreBinary.path, "agent", "--home",
                             harness.sandbox.home.path, "--policy", harness.policy.path, "--idle-exit", "60"]
        var environment = harness.agentEnvironment
        environment["NOTIFY_SOCKET"] = notify.path
        process.environment = environment
        let log = harness.sandbox.root.appendingPathComponent("activated.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let output = try FileHandle(forWritingTo: log)
        process.standardOutput = output
        process.standardError = output
        try process.run()
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }
        XCTAssertTrue(notify.messages(until: { $0.contains("READY=1") }).contains { $0.contains("READY=1") },
                      "READY=1 once it serves")
        let agentSaid = { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

        for arguments in [["status"], ["list", "--json"], ["users"]] {
            let answered = try harness.request(arguments)
            XCTAssertEqual(answered.status, 78, answered.summary + "\nagent: " + agentSaid())
            XCTAssertTrue(answered.stderr.contains("\(harness.policy.path):2: the array of who is not closed"), answered.summary)
            XCTAssertTrue(answered.stderr.contains("ask the device's administrator"), answered.summary)
            XCTAssertFalse(answered.stderr.contains("without an answer"), answered.summary)
        }
        XCTAssertTrue(process.isRunning, "the agent stays to answer the next request")
    }

    /// Started without a waiting connection (`systemctl start` or `restart`), the agent with a policy that does not
    /// load exits 78 before READY=1, so the start fails; with a good policy it says READY=1 once it listens.
    func testAStartWithABrokenPolicyFailsAndAGoodOneSaysReady() throws {
        let harness = try AgentHarness()
        let notify = try NotifySocket(path: harness.sandbox.root.appendingPathComponent("notify").path)
        let activate = harness.sandbox.root.appendingPathComponent("activate.py")
        // As systemd passes a socket: bound and listening at descriptor 3, LISTEN_FDS=1 and LISTEN_PID set.
        try """
            import os, socket, sys
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(sys.argv[1])
            listener.listen(16)
            if listener.fileno() != 3:
                os.dup2(listener.fileno(), 3)
            os.set_inheritable(3, True)
            os.environ["LISTEN_FDS"] = "1"
            os.environ["LISTEN_PID"] = str(os.getpid())
            os.execv(sys.argv[2], sys.argv[2:])

            """.write(to: activate, atomically: true, encoding: .utf8)
        var environment = harness.agentEnvironment
        environment["NOTIFY_SOCKET"] = notify.path
        let arguments = [activate.path, harness.socket.path, AgentHarness.coreBinary.path, "agent", "--home",
                         harness.sandbox.home.path, "--policy", harness.policy.path]

        try Self.unclosed.write(to: harness.policy, atomically: true, encoding: .utf8)
        let failed = try harness.sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), arguments,
                                             extraEnvironment: environment)
        XCTAssertEqual(failed.status, 78, failed.summary)
        XCTAssertTrue(failed.stderr.contains("\(harness.policy.path):2: the array of who is not closed"), failed.summary)
        XCTAssertEqual(notify.messages(until: { _ in false }, seconds: 0), [], "no READY=1 from an agent that did not start")

        try FileManager.default.removeItem(at: harness.socket)
        try AgentHarness.policy(allowing: ["root"]).write(to: harness.policy, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }
        XCTAssertTrue(notify.messages(until: { $0.contains("READY=1") }).contains { $0.contains("READY=1") },
                      "READY=1 once the agent listens")
        let served = try harness.request(["status", "--json"])
        XCTAssertEqual(served.status, 0, served.summary)
    }
}

/// `status` through the agent shows the agent: its socket, its policy file and whether that file loads as it is now
/// (an edit that would fail the next restart shows here first), and the keys by state (issue 32, finding 10).
final class StatusThroughTheAgentTests: XCTestCase {
    func testStatusShowsTheAgentItsPolicyAndTheKeysByState() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("alice")
        try harness.sandbox.bind("bob")
        try harness.sandbox.succeed(["revoke", "--user", "bob", "--yes"])
        try harness.start()
        let served = try harness.request(["status", "--json"])
        XCTAssertEqual(served.status, 0, served.summary)
        let status = try served.object()
        let agent = try XCTUnwrap(status["agent"] as? [String: Any], "\(status)")
        XCTAssertEqual(agent["socket"] as? String, harness.socket.path)
        XCTAssertEqual(agent["policy"] as? String, harness.policy.path)
        XCTAssertEqual(agent["policyChecks"] as? Bool, true, "\(agent)")
        XCTAssertEqual(status["keysByState"] as? [String: Int], ["active": 1, "locked": 0, "revoked": 1, "superseded": 0])

        // An edit that would not load: the running agent still serves, and status says what the restart would meet.
        try PolicyCheckTests.unclosed.write(to: harness.policy, atomically: true, encoding: .utf8)
        let edited = try harness.request(["status", "--json"])
        XCTAssertEqual(edited.status, 0, edited.summary)
        let after = try XCTUnwrap(try edited.object()["agent"] as? [String: Any])
        XCTAssertEqual(after["policyChecks"] as? Bool, false, "\(after)")
        XCTAssertTrue((after["policyProblem"] as? String)?.contains("\(harness.policy.path):2: the array of who is not closed") == true,
                      "\(after)")
        let human = try harness.request(["status"])
        XCTAssertTrue(human.stdout.contains("policy \(harness.policy.path) (does not load: "), human.stdout)
    }
}

/// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
final class NotifySocket {
    let path: String
    private let descriptor: Int32

    init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw XCTSkip("no datagram socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes + [0])
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw XCTSkip("cannot bind \(path): \(errno)") }
    }

    deinit { close(descriptor) }

    /// The datagrams received until one satisfies `done` or `seconds` pass (0: only those already waiting).
    func messages(until done: (String) -> Bool, seconds: Double = 30) -> [String] {
        var received: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let wait = max(0, Int32(deadline.timeIntervalSinceNow * 1000))
            guard poll(&entry, 1, wait) > 0 else { return received }
            let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            guard count > 0 else { continue }
            let message = String(decoding: buffer[0..<count], as: UTF8.self)
            received.append(message)
            if done(message) { return received }
        }
    }
}
