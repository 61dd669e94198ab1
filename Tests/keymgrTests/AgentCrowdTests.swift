import Foundation
import XCTest

/// The agent under a crowd (issue 37): nothing a request starts outlives it, the processes say what they are, and
/// people share the agent fairly.
final class AgentCrowdTests: XCTestCase {
    /// A harness whose store has a biometric verifier that verifies at once until `slow` exists, and from then on
    /// waits (it becomes the program at `sleeper`, a copy of sleep(1) no other process runs), and carol bound with a
    /// biometric-only key.
    private func slowVerifierHarness() throws -> (harness: AgentHarness, slow: URL, sleeper: String) {
        let harness = try AgentHarness(initialise: false)
        let root = harness.sandbox.root
        let sleeper = root.appendingPathComponent("verifier-sleep").path
        try FileManager.default.copyItem(atPath: "/bin/sleep", toPath: sleeper)
        let slow = root.appendingPathComponent("slow")
        let verifier = root.appendingPathComponent("verify-finger")
        try "#!/bin/sh\nif [ -e \(slow.path) ]; then exec \(sleeper) 300; fi\nexit 0\n"
            .write(to: verifier, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: verifier.path)
        try harness.sandbox.initialise(["--biometric-verifier", verifier.path])
        try harness.sandbox.bind("carol", ["--auth-type", "biometric-only"])
        _ = FileManager.default.createFile(atPath: slow.path, contents: nil)
        return (harness, slow, sleeper)
    }

    /// The live processes (not zombies) running the program at `path`.
    private static func processes(running path: String) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"),
                  let first = data.split(separator: 0, omittingEmptySubsequences: false).first else { return false }
            return String(decoding: first, as: UTF8.self) == path && AgentHarness.isRunning(pid)
        }
    }

    func testClientsThatHangUpMidVerificationLeaveNoVerifierBehind() throws {
        let (harness, _, sleeper) = try slowVerifierHarness()
        let limit = 4
        try harness.start(["--max-workers-per-user", String(limit)])
        var most = 0
        var seen = Set<Int32>()
        for round in 0..<30 {
            let client = try harness.launch([harness.socket.path, "sign", "--user", "carol"])
            // Its verifier runs (a new one), or the client had its answer (busy).
            let started = AgentHarness.eventually {
                let now = Self.processes(running: sleeper)
                most = max(most, now.count)
                return !Set(now).isSubset(of: seen) || !client.isRunning
            }
            XCTAssertTrue(started, "round \(round): a verifier started")
            seen.formUnion(Self.processes(running: sleeper))
            kill(client.processIdentifier, SIGKILL)  // hangs up mid-verification
            client.waitUntilExit()
            most = max(most, Self.processes(running: sleeper).count)
        }
        XCTAssertGreaterThanOrEqual(seen.count, 2, "the rounds did start verifiers")
        XCTAssertLessThanOrEqual(most, limit, "never more verifiers than one person's limit")
        XCTAssertTrue(AgentHarness.eventually { Self.processes(running: sleeper).isEmpty },
                      "no verifier remains: \(Self.processes(running: sleeper))")
        XCTAssertTrue(AgentHarness.eventually { harness.workers.isEmpty }, "no worker remains")
        XCTAssertEqual(try harness.request(["status"]).status, 0, harness.agentOutput)
    }

    func testAVerifierEndsWithItsWorkerKilledAlone() throws {
        let (harness, _, sleeper) = try slowVerifierHarness()
        try harness.start(["--warm-workers", "0"])
        let client = try harness.launch([harness.socket.path, "sign", "--user", "carol"])
        defer { kill(client.processIdentifier, SIGKILL) }
        XCTAssertTrue(AgentHarness.eventually { Self.processes(running: sleeper).count == 1 })
        let worker = try XCTUnwrap(harness.workers.first)
        kill(worker, SIGKILL)  // the worker alone, not its group: as the OOM killer would
        XCTAssertTrue(AgentHarness.eventually { Self.processes(running: sleeper).isEmpty },
                      "the verifier does not outlive its worker, nor wait for its --timeout")
        XCTAssertTrue(AgentHarness.eventually { harness.workers.isEmpty })
    }

    func testTheAgentAndItsProcessesAreNamedEvenWhenNotRunAsRoot() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        let person = AgentHarness.people[0].uid
        // The agent runs as an ordinary user, the store's and the socket's directory its own, as in a deployment.
        let chown = try harness.sandbox.run(URL(fileURLWithPath: "/bin/chown"), ["-R", "\(person):\(person)", harness.sandbox.root.path])
        XCTAssertEqual(chown.status, 0, chown.summary)
        let agent = try harness.start(["--warm-workers", "1"], as: person)
        XCTAssertEqual(AgentHarness.processName(agent.processIdentifier), "keymgr-agent")
        XCTAssertEqual(harness.keepers.map(AgentHarness.processName), ["keymgr-keeper"])
        XCTAssertTrue(AgentHarness.eventually { harness.warmWorkers.count == 1 }, "a warm worker is named keymgr-warm")

        // A request whose worker waits for a PIN on a pipe the client never writes.
        let mark = harness.sandbox.root.appendingPathComponent("sent")
        let held = try harness.launch([harness.socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                      environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": mark.path])
        defer { kill(held.processIdentifier, SIGKILL) }
        XCTAssertTrue(AgentHarness.eventually {
            FileManager.default.fileExists(atPath: mark.path)
                && harness.workers.contains { AgentHarness.processName($0) == "keymgr-worker" }
        }, "the worker serving it is keymgr-worker: \(harness.workers.map(AgentHarness.processName))")
    }
}

/// The directories above what the agent trusts (its store's home, the master key, the policy, the socket) are
/// checked as OpenSSH's `safe_path` does before the agent serves: each refusal exits 78 naming the directory and
/// its owner or mode.
final class AgentSafePathTests: XCTestCase {
    /// `keymgr agent` with these paths, which is expected to refuse to start.
    private func startRefused(_ harness: AgentHarness, socket: URL? = nil, policy: URL? = nil,
                              environment: [String: String] = [:]) throws -> Outcome {
        let outcome = try harness.sandbox.run(AgentHarness.coreBinary, [
            "agent", "--home", harness.sandbox.home.path, "--socket", (socket ?? harness.socket).path,
            "--policy", (policy ?? harness.policy).path, "--idle-exit", "1",
        ], extraEnvironment: environment.merging(["LD_PRELOAD": "libnss_wrapper.so", "NSS_WRAPPER_PASSWD": harness.passwd.path,
                                                  "NSS_WRAPPER_GROUP": harness.group.path]) { mine, _ in mine })
        XCTAssertEqual(outcome.status, 78, outcome.summary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: (socket ?? harness.socket).path), "it never listened")
        return outcome
    }

    private func directory(_ harness: AgentHarness, _ name: String, mode: Int) throws -> URL {
        let url = harness.sandbox.root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: url.path)
        return url
    }

    func testAHomeInADirectoryOthersCanWriteOrOwnIsRefused() throws {
        let harness = try AgentHarness()
        let root = harness.sandbox.root.path
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: root)
        var refused = try startRefused(harness)
        XCTAssertTrue(refused.stderr.contains("the directory \(root), above the store's home \(harness.sandbox.home.path), "
            + "can be written by other OS users (mode 777)"), refused.summary)
        XCTAssertTrue(refused.stderr.contains("chmod go-w \(root)"), refused.summary)

        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: root)
        XCTAssertEqual(chown(root, 4343, 4343), 0)
        refused = try startRefused(harness)
        XCTAssertTrue(refused.stderr.contains("the directory \(root), above the store's home \(harness.sandbox.home.path), "
            + "is owned by uid 4343"), refused.summary)
    }

    func testAMasterKeyInADirectoryOthersCanWriteIsRefused() throws {
        let harness = try AgentHarness()
        let keys = try directory(harness, "keys", mode: 0o777)
        let key = keys.appendingPathComponent("master.key")
        try FileManager.default.moveItem(at: harness.sandbox.home.appendingPathComponent("master.key"), to: key)
        let refused = try startRefused(harness, environment: ["KEYMGR_MASTER_KEY_FILE": key.path])
        XCTAssertTrue(refused.stderr.contains("the directory \(keys.path), above the master key \(key.path), can be "
            + "written by other OS users (mode 777)"), refused.summary)
    }

    func testAPolicyThroughASymbolicLinkOrInADirectoryOthersCanWriteIsRefused() throws {
        let harness = try AgentHarness()
        let link = harness.sandbox.root.appendingPathComponent("linked.toml")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: harness.policy)
        var refused = try startRefused(harness, policy: link)
        XCTAssertTrue(refused.stderr.contains("the agent's policy \(link.path) is a symbolic link, which is not followed"),
                      refused.summary)

        let real = try directory(harness, "real", mode: 0o755)
        let linkedDirectory = harness.sandbox.root.appendingPathComponent("policies")
        try FileManager.default.createSymbolicLink(at: linkedDirectory, withDestinationURL: real)
        try FileManager.default.copyItem(at: harness.policy, to: real.appendingPathComponent("policy.toml"))
        refused = try startRefused(harness, policy: linkedDirectory.appendingPathComponent("policy.toml"))
        XCTAssertTrue(refused.stderr.contains("\(linkedDirectory.path), above the agent's policy "
            + "\(linkedDirectory.path)/policy.toml, is a symbolic link, which is not followed"), refused.summary)

        let shared = try directory(harness, "shared", mode: 0o775)
        let policy = shared.appendingPathComponent("policy.toml")
        try FileManager.default.copyItem(at: harness.policy, to: policy)
        refused = try startRefused(harness, policy: policy)
        XCTAssertTrue(refused.stderr.contains("the directory \(shared.path), above the agent's policy \(policy.path), "
            + "can be written by other OS users (mode 775)"), refused.summary)
    }

    func testASocketInADirectoryOthersCanWriteIsRefusedAndASharedStickyOneIsNot() throws {
        let harness = try AgentHarness()
        let run = try directory(harness, "run", mode: 0o777)
        let socket = run.appendingPathComponent("agent.sock")
        let refused = try startRefused(harness, socket: socket)
        XCTAssertTrue(refused.stderr.contains("the directory \(run.path), above the agent's socket \(socket.path), can be "
            + "written by other OS users (mode 777)"), refused.summary)

        // Owned by root with the sticky bit, as /tmp: others may add names there, not replace ours.
        try FileManager.default.setAttributes([.posixPermissions: 0o1777], ofItemAtPath: run.path)
        let agent = Process()
        agent.executableURL = AgentHarness.coreBinary
        agent.arguments = ["agent", "--home", harness.sandbox.home.path, "--socket", socket.path, "--policy",
                           harness.policy.path, "--idle-exit", "1"]
        agent.environment = harness.agentEnvironment
        agent.standardError = FileHandle.nullDevice
        try agent.run()
        XCTAssertTrue(AgentHarness.eventually { AgentHarness.connects(socket.path) || !agent.isRunning },
                      "the agent serves on a socket in a sticky directory of root's")
        XCTAssertTrue(AgentHarness.connects(socket.path))
        XCTAssertTrue(AgentHarness.eventually(30) { !agent.isRunning })
        XCTAssertEqual(agent.terminationStatus, 0)
    }
}

/// People share the agent: uids no user has share one place, and when the agent is full a person under their share
/// is served before the one holding the most.
final class AgentFairShareTests: XCTestCase {
    /// A directory anyone may write, for the marks of clients run as other uids.
    private func marks(_ harness: AgentHarness) throws -> URL {
        let url = harness.sandbox.root.appendingPathComponent("marks")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: url.path)
        return url
    }

    func testUIDsWithNoUserShareOnePlace() throws {
        let harness = try AgentHarness(policy: "[[rule]]\nwho = [\"*\"]\nmay = [\"*\"]\n")
        try harness.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try harness.start(["--max-workers-per-user", "1"])
        // uid 100000 (a subordinate uid, say) holds a worker: its request waits for a PIN that never comes.
        let mark = try marks(harness).appendingPathComponent("sent")
        let held = try harness.launch([harness.socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                      environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": mark.path], as: 100_000)
        defer { kill(held.processIdentifier, SIGKILL) }
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: mark.path) && harness.workers.count == 1 })

        // Another uid no user has is in the same share, which is full.
        let refused = try harness.request(["status", "--json"], as: 100_001)
        try assertJSONError(refused, status: 75, code: "busy")
        XCTAssertTrue(refused.stderr.contains("the uids with no user on this device already have 1 requests running"),
                      refused.summary)
        // A person with a user is not.
        let served = try harness.request(["status", "--json"], as: AgentHarness.people[0].uid)
        XCTAssertEqual(served.status, 0, served.summary + harness.agentOutput)
    }

    func testWhenTheAgentIsFullAPersonUnderTheirShareIsServedFirst() throws {
        let harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice", "mallory"]))
        try harness.sandbox.bind("open")
        try harness.start(["--max-workers", "2", "--max-workers-per-user", "2"])
        // root and mallory hold every place, one each.
        let marks = try marks(harness)
        let rootHeld = try harness.launchHeldRequest()
        let malloryMark = marks.appendingPathComponent("mallory")
        let malloryHeld = try harness.launch([harness.socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                             environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": malloryMark.path],
                                             as: AgentHarness.people[1].uid)
        defer { for held in [rootHeld, malloryHeld] { kill(held.processIdentifier, SIGKILL) } }
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: malloryMark.path) && harness.workers.count == 2 },
                      "mallory's request sent: \(FileManager.default.fileExists(atPath: malloryMark.path)), running: "
                      + "\(malloryHeld.isRunning), workers: \(harness.workers.count)")

        // root asks again (under its share of 2), then alice: both wait for a place.
        let rootMark = marks.appendingPathComponent("root")
        let rootSign = try harness.launch([harness.socket.path, "sign", "--user", "open"],
                                          environment: ["AGENT_SENT_MARK": rootMark.path])
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: rootMark.path) })
        let aliceMark = marks.appendingPathComponent("alice")
        let aliceSign = try harness.launch([harness.socket.path, "sign", "--user", "open"],
                                           environment: ["AGENT_SENT_MARK": aliceMark.path], as: AgentHarness.people[0].uid)
        XCTAssertTrue(AgentHarness.eventually { FileManager.default.fileExists(atPath: aliceMark.path) })
        XCTAssertTrue(rootSign.isRunning && aliceSign.isRunning, "both wait for a place, neither is refused")

        // mallory's place frees: alice (holding none) is served before root (holding one), then root.
        kill(malloryHeld.processIdentifier, SIGKILL)
        XCTAssertTrue(AgentHarness.eventually(30) { !rootSign.isRunning && !aliceSign.isRunning })
        XCTAssertEqual(aliceSign.terminationStatus, 0, harness.agentOutput)
        XCTAssertEqual(rootSign.terminationStatus, 0, harness.agentOutput)
        let signed = try harness.sandbox.keymgr(["audit", "--json", "--event", "key.signed"]).array()
        XCTAssertEqual(signed.compactMap { $0["actor"] as? String }, ["alice (uid 4242)", "root (uid 0)"])
    }

    /// A process's nice value (/proc/PID/stat, field 19).
    private static func nice(_ pid: Int32) -> Int? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 16 ? Int(fields[16]) : nil
    }

    func testTheWorkersOfAShareHoldingMoreYieldTheProcessorToAPersonHoldingFewer() throws {
        let harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice"]))
        try harness.start()
        // root alone, with two requests: nothing yields.
        let held = [try harness.launchHeldRequest(), try harness.launchHeldRequest()]
        defer { for client in held { kill(client.processIdentifier, SIGKILL) } }
        // (Named: not a warm worker the agent has just forked and that has not named itself yet.)
        func serving() -> [Int32] { harness.workers.filter { AgentHarness.processName($0) == "keymgr-worker" } }
        XCTAssertTrue(AgentHarness.eventually { serving().count == 2 })
        let roots = serving()
        XCTAssertEqual(roots.map(Self.nice), [0, 0])

        // alice asks: root's workers yield to hers.
        let mark = try marks(harness).appendingPathComponent("alice")
        let alice = try harness.launch([harness.socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                       environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": mark.path],
                                       as: AgentHarness.people[0].uid)
        defer { kill(alice.processIdentifier, SIGKILL) }
        XCTAssertTrue(AgentHarness.eventually { roots.map(Self.nice) == [10, 10] },
                      "root's workers yield: \(roots.map(Self.nice))")
        // Hers (a worker serving, not a warm worker the agent just forked and has not named yet) does not.
        XCTAssertTrue(AgentHarness.eventually {
            Set(serving()).subtracting(roots).contains { Self.nice($0) == 0 }
        }, "alice's worker runs at nice 0")
    }
}
