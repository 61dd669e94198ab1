import Foundation
import XCTest

/// Clients that are slow, die, lie about sizes or flood the agent, and an agent that is killed: each only ever
/// costs its own worker, and the store stays whole.
final class AgentRobustnessTests: XCTestCase {
    func testASilentClientDoesNotStallAnotherAndIsAnsweredAtTheDeadline() throws {
        let harness = try AgentHarness()
        try harness.start()
        let mark = harness.sandbox.root.appendingPathComponent("connected")
        let silent = try harness.launch(["--idle", harness.socket.path, mark.path])
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: mark.path) })

        let served = try harness.request(["status", "--json"])
        XCTAssertEqual(served.status, 0, served.summary)
        XCTAssertTrue(silent.isRunning, "the silent client is still waiting while another was served")

        // At the request deadline the silent client gets an answer of its own and its worker ends.
        XCTAssertTrue(AgentHarness.eventually(30) { !silent.isRunning }, "answered within the deadline")
        XCTAssertTrue(AgentHarness.eventually { harness.workers.isEmpty }, "its worker is gone")
    }

    func testTheWorkerOfAClientThatHangsUpIsKilled() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try harness.start()
        let mark = harness.sandbox.root.appendingPathComponent("sent")
        // The worker waits for a PIN on descriptor 3, a pipe the client never writes.
        let client = try harness.launch([harness.socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                        environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": mark.path])
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: mark.path) && harness.workers.count == 1 })
        let worker = try XCTUnwrap(harness.workers.first)
        kill(client.processIdentifier, SIGKILL)
        client.waitUntilExit()
        XCTAssertTrue(AgentHarness.eventually { kill(worker, 0) != 0 && harness.workers.isEmpty },
                      "the worker of a client that hung up is killed and reaped")
        XCTAssertEqual(try harness.request(["status"]).status, 0)
        XCTAssertEqual(try harness.sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    func testMalformedOversizedAndUnknownVersionRequestsAreAnsweredAndClosed() throws {
        let harness = try AgentHarness()
        try harness.start()
        func frame(_ body: String) -> [UInt8] {
            let bytes = Array(body.utf8)
            let length = UInt32(bytes.count)
            return [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + bytes
        }
        let cases: [(String, [UInt8])] = [
            ("oversized", [0x00, 0x01, 0x00, 0x01] + Array(repeating: 0x20, count: 64)),
            ("empty", [0, 0, 0, 0]),
            ("not JSON", frame("{\"version\":1,")),
            ("not an object", frame("[1,2]")),
            ("no version", frame("{\"arguments\":[\"status\"]}")),
            ("version 2", frame("{\"version\":2,\"arguments\":[\"status\"]}")),
            ("arguments not strings", frame("{\"version\":1,\"arguments\":[1]}")),
            ("descriptors not passed", frame("{\"version\":1,\"arguments\":[\"status\"],\"fds\":[0,1,2]}")),
            ("fd out of range", frame("{\"version\":1,\"arguments\":[\"status\"],\"fds\":[0,1,2,256]}")),
            ("no stdio", frame("{\"version\":1,\"arguments\":[\"status\"],\"fds\":[]}")),
        ]
        for (what, bytes) in cases {
            let (answer, closed) = try harness.raw(bytes)
            XCTAssertEqual(answer["status"] as? Int, 64, "\(what): \(answer)")
            XCTAssertEqual((answer["error"] as? [String: Any])?["code"] as? String, "usage", what)
            XCTAssertTrue(closed, "\(what): the agent closes the connection")
        }
        // After all that, the agent serves as before.
        XCTAssertEqual(try harness.request(["status"]).status, 0)
    }

    func testAConnectionThatSaysNothingIsAnsweredSoonerThanOneSendingSlowly() throws {
        let harness = try AgentHarness()
        try harness.start()
        // Nothing sent: answered at the first-byte deadline.
        let (silent, silentClosed) = try harness.raw([])
        XCTAssertEqual(silent["status"] as? Int, 64, "\(silent)")
        XCTAssertEqual((silent["error"] as? [String: Any])?["message"] as? String, "the request did not start within 2 seconds")
        XCTAssertTrue(silentClosed)
        // Half a header sent: the whole request's deadline applies.
        let (slow, slowClosed) = try harness.raw([0, 0])
        XCTAssertEqual(slow["status"] as? Int, 64, "\(slow)")
        XCTAssertEqual((slow["error"] as? [String: Any])?["message"] as? String, "the request did not arrive within 10 seconds")
        XCTAssertTrue(slowClosed)
    }

    func testRequestsBeyondTheLimitsAreAnsweredBusy() throws {
        let harness = try AgentHarness()
        try harness.start(["--max-workers-per-user", "1"])
        let held = try harness.launchHeldRequest()
        defer { kill(held.processIdentifier, SIGKILL) }
        XCTAssertTrue(AgentHarness.eventually { harness.workers.count == 1 })
        let refused = try harness.request(["status", "--json"])
        try assertJSONError(refused, status: 75, code: "busy")
    }

    func testRequestsOneAfterAnotherAreNeverBusyForTheOneBefore() throws {
        for warm in ["0", "2"] {
            let harness = try AgentHarness()
            try harness.start(["--max-workers", "1", "--warm-workers", warm])
            // Each request starts once the one before has its answer: its worker is done, if not yet reaped.
            for index in 0..<20 {
                let served = try harness.request(["status", "--json"])
                XCTAssertEqual(served.status, 0, "request \(index) with \(warm) warm workers: \(served.summary)")
            }
        }
    }

    func testTheAgentExitsWhenIdle() throws {
        let harness = try AgentHarness()
        let agent = try harness.start(["--idle-exit", "1"])
        XCTAssertEqual(harness.keepers.count, 1, "the store's keeper")
        XCTAssertEqual(try harness.request(["status"]).status, 0)
        XCTAssertTrue(AgentHarness.eventually(30) { !agent.isRunning }, "the agent exits after a second with nothing to do")
        XCTAssertEqual(agent.terminationStatus, 0, harness.agentOutput)
        XCTAssertFalse(FileManager.default.fileExists(atPath: harness.socket.path), "the socket it bound is removed")
        XCTAssertTrue(AgentHarness.eventually { harness.keepers.allSatisfy { !AgentHarness.isRunning($0) } },
                      "the store's keeper ends with the agent")
    }

    func testASocketPassedBySocketActivationIsServedAndLeftInPlace() throws {
        let harness = try AgentHarness()
        // systemd-socket-activate binds the socket, then on the first connection execs the agent with LISTEN_FDS=1
        // and LISTEN_PID set, as systemd does: no --socket (the default path under /run is not touched).
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/systemd-socket-activate")
        process.arguments = ["-l", harness.socket.path, AgentHarness.coreBinary.path, "agent", "--home", harness.sandbox.home.path,
                             "--policy", harness.policy.path, "--idle-exit", "1"]
        process.environment = harness.agentEnvironment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: harness.socket.path) })
        let served = try harness.request(["status", "--json"])
        XCTAssertEqual(served.status, 0, served.summary)
        XCTAssertTrue(AgentHarness.eventually(30) { !process.isRunning }, "idle exit")
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: harness.socket.path), "systemd's socket is systemd's to remove")
    }

    func testSIGTERMLetsTheRunningWorkerFinish() throws {
        let harness = try AgentHarness()
        let agent = try harness.start()
        let held = try harness.launchHeldRequest()
        XCTAssertTrue(AgentHarness.eventually { harness.workers.count == 1 })
        agent.terminate()
        usleep(300_000)
        XCTAssertTrue(agent.isRunning, "the agent waits for its worker")
        XCTAssertFalse(AgentHarness.connects(harness.socket.path), "it accepts no new connection")
        kill(held.processIdentifier, SIGKILL)  // its client goes: the worker ends, and then the agent
        XCTAssertTrue(AgentHarness.eventually(30) { !held.isRunning && !agent.isRunning })
        XCTAssertEqual(agent.terminationStatus, 0, harness.agentOutput)
    }

    func testSIGKILLOfTheAgentMidRequestLosesNothing() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("alice")
        let agent = try harness.start()
        // Several binds and signs in flight when the agent is killed.
        var clients: [Process] = []
        for index in 0..<6 {
            let command = index % 2 == 0 ? ["bind", "--user", "user-\(index)"] : ["sign", "--user", "alice"]
            clients.append(try harness.launch([harness.socket.path] + command))
        }
        XCTAssertTrue(AgentHarness.eventually { !harness.workers.isEmpty || clients.allSatisfy { !$0.isRunning } })
        kill(agent.processIdentifier, SIGKILL)
        agent.waitUntilExit()
        for client in clients { client.waitUntilExit() }
        // Orphaned workers finish or die on their own; then the store is whole.
        let verified = try harness.sandbox.keymgr(["audit", "verify"])
        XCTAssertEqual(verified.status, 0, verified.summary)
        let listed = try harness.sandbox.keymgr(["list", "--json"])
        XCTAssertEqual(listed.status, 0, listed.summary)

        // The next agent takes over the socket path the killed one left behind and serves.
        try harness.start()
        let status = try harness.request(["status", "--json"])
        XCTAssertEqual(status.status, 0, status.summary)
        XCTAssertEqual(try harness.request(["audit", "verify"]).status, 0)
    }
}
