import Foundation
import XCTest

/// Issue 32, finding 10: under the agent's unit (User=keymgr, no capabilities) the journal had "Failed to set thread
/// priority for worker thread … errno=13" on every request that touched the network. Each thread of libdispatch's
/// pool sets the nice value of its queue's QoS with setpriority(2) as it starts; the pool's first worker starts the
/// pool's monitor, whose thread is the user-interactive queue's (nice -4), which an unprivileged process may not
/// take. A request's network work ran on that pool (the command's tasks, libcurl's blocking transfer); it now runs
/// on threads of keymgr's own (`OwnThreads`), so an agent's worker never starts the pool at all.
final class ThreadPriorityTests: XCTestCase {
    func testARequestThatGoesToTheNetworkStartsNoLibdispatchPoolInTheAgent() throws {
        let harness = try AgentHarness()
        let sandbox = harness.sandbox
        let token = sandbox.root.appendingPathComponent("admin-token")
        try "not-a-real-token\n".write(to: token, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(token.path, 0o600), 0)
        try sandbox.bind("alice")
        // Port 1 on the loopback: nothing listens, so the request fails at once, after it went to the network.
        try sandbox.succeed(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:1",
                             "--credential-file", token.path])

        // The agent under strace: every setpriority call of it and of its workers.
        let trace = sandbox.root.appendingPathComponent("setpriority.trace")
        let agent = Process()
        agent.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
        agent.arguments = ["-f", "-qq", "-e", "trace=setpriority", "-e", "signal=none", "-o", trace.path,
                           AgentHarness.coreBinary.path, "agent", "--home", sandbox.home.path, "--socket", harness.socket.path,
                           "--policy", harness.policy.path, "--warm-workers", "0"]
        agent.environment = harness.agentEnvironment
        agent.standardOutput = FileHandle.nullDevice
        agent.standardError = FileHandle.nullDevice
        try agent.run()
        // strace keeps tracing through a SIGTERM of its own: the agent (its child) is the one stopped.
        func stopAgent() {
            let children = (try? String(contentsOfFile: "/proc/\(agent.processIdentifier)/task/\(agent.processIdentifier)/children",
                                        encoding: .utf8)) ?? ""
            for child in children.split(separator: " ").compactMap({ Int32($0) }) { kill(child, SIGTERM) }
            agent.waitUntilExit()
        }
        defer { if agent.isRunning { stopAgent() } }
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: harness.socket.path) })

        let synced = try harness.request(["sync", "--json", "--timeout", "2"])
        XCTAssertEqual(synced.status, 69, "the server is unreachable: \(synced.summary)")
        XCTAssertTrue(synced.stderr.contains("Couldn't connect to server"), "the request reached the network: \(synced.summary)")
        stopAgent()
        let calls = try String(contentsOf: trace, encoding: .utf8).split(separator: "\n").filter { $0.contains("setpriority(") }
        XCTAssertEqual(calls, [], "a libdispatch pool thread started in the agent (each sets its priority as it starts)")
    }
}
