import Foundation
import XCTest

/// Warm workers (`keymgr agent --warm-workers N`): forked ahead with the store opened and checked, each serves one
/// request as the caller the kernel reported, exactly as a cold worker would, and a store that changed since it was
/// prepared is opened afresh.
final class AgentWarmWorkerTests: XCTestCase {
    /// What a warm worker's command logs with --verbose when it used the store prepared ahead.
    static let preparedMark = "opened the store prepared ahead"

    /// Waits until `count` warm workers have prepared the store and wait.
    private func waitForWarm(_ harness: AgentHarness, _ count: Int = 2, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(AgentHarness.eventually { harness.warmWorkers.count == count },
                      "\(count) warm workers wait: \(harness.agentChildren.map(AgentHarness.processName))", file: file, line: line)
    }

    func testAWarmWorkerAnswersAsAColdWorkerAndRunDirectlyDo() throws {
        let warm = try AgentHarness()
        try warm.sandbox.bind("alice")
        try warm.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try warm.start(["--warm-workers", "2"])
        waitForWarm(warm)

        let commands: [[String]] = [
            ["status"], ["status", "--json"], ["list"], ["list", "--json"], ["users", "--json"], ["list", "--bogus"],
            ["sign", "--user", "nobody", "--json"], ["audit", "verify"], ["--version"],
        ]
        for command in commands {
            let before = Set(warm.warmWorkers)
            let direct = try warm.sandbox.keymgr(command)
            let served = try warm.request(command)
            XCTAssertEqual(served.status, direct.status, "\(command)\n\(served.summary)\n\(direct.summary)")
            XCTAssertEqual(servedAlike(served.stdout), servedAlike(direct.stdout), "stdout of \(command)")
            XCTAssertEqual(served.stderr, direct.stderr, "stderr of \(command)")
            // One of the warm workers served it and is gone; another took its place.
            XCTAssertTrue(AgentHarness.eventually { before.contains { !AgentHarness.isRunning($0) } },
                          "a warm worker served \(command)")
            waitForWarm(warm)
        }
        // The prepared store is the one used, and a command that writes works on it.
        let status = try warm.request(["--verbose", "status"])
        XCTAssertEqual(status.status, 0, status.summary)
        XCTAssertTrue(status.stderr.contains(Self.preparedMark), status.summary)
        let signed = try warm.request(["--verbose", "sign", "--user", "pinny", "--challenge", "c-1", "--pin-stdin"],
                                      stdin: "482916\n")
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertTrue(signed.stderr.contains(Self.preparedMark), signed.summary)
        XCTAssertEqual(signed.stdout.trimmingCharacters(in: .newlines).split(separator: ".").count, 3, signed.summary)
        let bound = try warm.request(["bind", "--user", "bob", "--json"])
        XCTAssertEqual(bound.status, 0, bound.summary)
        XCTAssertEqual(try warm.sandbox.keymgr(["list", "--user", "bob", "--json"]).array().count, 1)
        XCTAssertEqual(try warm.sandbox.keymgr(["audit", "verify"]).status, 0)

        // The same answers from an agent without warm workers.
        let cold = try AgentHarness()
        try cold.sandbox.bind("alice")
        try cold.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try cold.start(["--warm-workers", "0"])
        for command in commands where command != ["audit", "verify"] {
            let direct = try cold.sandbox.keymgr(command)
            let served = try cold.request(command)
            XCTAssertEqual(served.status, direct.status, "\(command)\n\(served.summary)")
            XCTAssertEqual(servedAlike(served.stdout), servedAlike(direct.stdout), "stdout of \(command)")
            XCTAssertEqual(served.stderr, direct.stderr, "stderr of \(command)")
        }
        XCTAssertTrue(AgentHarness.eventually { cold.agentChildren.map(AgentHarness.processName) == ["keymgr-keeper"] },
                      "no warm worker: \(cold.agentChildren.map(AgentHarness.processName))")
        let coldStatus = try cold.request(["--verbose", "status"])
        XCTAssertEqual(coldStatus.status, 0, coldStatus.summary)
        XCTAssertFalse(coldStatus.stderr.contains(Self.preparedMark), coldStatus.summary)
    }

    func testEachRequestRunsAsTheCallerTheKernelReported() throws {
        let harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice"]), initialise: false)
        let sandbox = harness.sandbox
        let seen = try harness.initialiseWithAVerifierThatRecordsItsOSUser(appending: true)
        try harness.start(["--warm-workers", "2"])
        waitForWarm(harness)

        // Alternating callers, each served by a warm worker prepared before anyone asked.
        let callers: [(uid: UInt32?, login: String, actor: String)] = [
            (4242, "alice", "alice (uid 4242)"), (nil, "root", "root (uid 0)"), (4242, "alice", "alice (uid 4242)"),
            (nil, "root", "root (uid 0)"),
        ]
        for caller in callers {
            let served = try harness.request(["--verbose", "sign", "--user", "carol"], as: caller.uid)
            XCTAssertEqual(served.status, 0, served.summary + harness.agentOutput)
            XCTAssertTrue(served.stderr.contains(Self.preparedMark), served.summary)
            let lines = try String(contentsOf: seen, encoding: .utf8).split(separator: "\n")
            XCTAssertEqual(lines.last.map(String.init), caller.login, "{osUser} is the caller's login")
            let entries = try sandbox.keymgr(["audit", "--json"]).array()
            XCTAssertEqual(entries.last?["event"] as? String, "key.signed")
            XCTAssertEqual(entries.last?["actor"] as? String, caller.actor)
        }
        // A caller the policy does not name is denied by a warm worker too, and the denial names them.
        let denied = try harness.request(["sign", "--user", "carol", "--json"], as: 4343)
        XCTAssertEqual(denied.status, 77, denied.summary)
        let entries = try sandbox.keymgr(["audit", "--json"]).array()
        XCTAssertEqual(entries.last?["event"] as? String, "agent.denied")
        XCTAssertEqual(entries.last?["actor"] as? String, "mallory (uid 4343)")
    }

    func testAStoreThatChangedSinceItWasPreparedIsOpenedAfresh() throws {
        let harness = try AgentHarness()
        let sandbox = harness.sandbox
        try sandbox.bind("alice")
        try harness.start(["--warm-workers", "2"])

        /// After `change`, a request is served on a store opened afresh, with the answer keymgr gives run directly.
        func assertOpenedAfresh(_ what: String, _ command: [String] = ["status", "--json"], change: () throws -> Void) throws {
            // Warm workers prepared while the store was broken by the step before serve cold: one request after
            // another until one is served on a store prepared ahead, so all those waiting now were prepared since.
            XCTAssertTrue(AgentHarness.eventually {
                (try? harness.request(["--verbose"] + command).stderr.contains(Self.preparedMark)) == true
            }, "\(what): before the change, a warm worker serves on its prepared store")
            waitForWarm(harness)
            try change()
            let served = try harness.request(["--verbose"] + command)
            XCTAssertFalse(served.stderr.contains(Self.preparedMark), "\(what)\n\(served.summary)")
            let direct = try sandbox.keymgr(command)
            let again = try harness.request(command)
            XCTAssertEqual(served.status, direct.status, "\(what)\n\(served.summary)\n\(direct.summary)")
            XCTAssertEqual(again.status, direct.status, "\(what)\n\(again.summary)")
            XCTAssertEqual(servedAlike(again.stdout), servedAlike(direct.stdout), what)
            XCTAssertEqual(again.stderr, direct.stderr, what)
        }

        // The master key rotated: a new key file, a new device row.
        try assertOpenedAfresh("master key rotated") {
            try sandbox.succeed(["master", "rotate"])
        }
        XCTAssertEqual(try harness.request(["sign", "--user", "alice"]).status, 0)

        // The device row changed (its settings).
        try assertOpenedAfresh("device row changed") {
            try sandbox.succeed(["config", "set", "pin-min-length", "8"])
        }

        // The database file replaced by a copy of itself (a restore from a backup): another file.
        try assertOpenedAfresh("database file replaced") {
            let checkpoint = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                             [sandbox.database.path, "PRAGMA wal_checkpoint(TRUNCATE);"])
            XCTAssertEqual(checkpoint.status, 0, checkpoint.summary)
            let copy = sandbox.home.appendingPathComponent("keymgr.db.restored")
            try FileManager.default.copyItem(at: sandbox.database, to: copy)
            XCTAssertEqual(rename(copy.path, sandbox.database.path), 0)
        }

        // The master key file made readable by others: refused as a fresh open refuses it.
        let key = sandbox.home.appendingPathComponent("master.key")
        try assertOpenedAfresh("master key file unsafe") {
            XCTAssertEqual(chmod(key.path, 0o644), 0)
        }
        XCTAssertNotEqual(try harness.request(["status"]).status, 0)
        XCTAssertEqual(chmod(key.path, 0o600), 0)

        // The schema version changed under it (a newer keymgr migrated the store): refused as a fresh open does.
        let version = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path, "PRAGMA user_version;"])
        let current = try XCTUnwrap(Int(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), version.summary)
        try assertOpenedAfresh("schema version changed") {
            let set = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"),
                                      [sandbox.database.path, "PRAGMA user_version = \(current + 1);"])
            XCTAssertEqual(set.status, 0, set.summary)
        }
        XCTAssertNotEqual(try harness.request(["status"]).status, 0)
        _ = try sandbox.run(URL(fileURLWithPath: "/usr/bin/sqlite3"), [sandbox.database.path, "PRAGMA user_version = \(current);"])

        // Once the store is whole again, warm workers prepared since serve from their prepared store again.
        XCTAssertTrue(AgentHarness.eventually {
            (try? harness.request(["--verbose", "status"]).stderr.contains(Self.preparedMark)) == true
        })
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    /// A warm worker whose preparation failed half-way (the store's files opened, then the master key refused) serves
    /// its request as a cold worker: the files SQLite opened stay open under it (closing them made SQLite's next
    /// open of the same file fail its locks, and retry until "locking protocol" after seconds).
    func testAWarmWorkerWhosePreparationFailedServesOnceTheStoreIsWhole() throws {
        let harness = try AgentHarness()
        let sandbox = harness.sandbox
        try sandbox.bind("alice")
        try harness.start(["--warm-workers", "2"])
        waitForWarm(harness)
        let key = sandbox.home.appendingPathComponent("master.key")
        XCTAssertEqual(chmod(key.path, 0o644), 0)
        // The two warm workers prepared before are used up (each refuses, as a fresh open does); the two forked in
        // their place prepare on the refused key.
        for _ in 0..<2 {
            let refused = try harness.request(["status"])
            XCTAssertEqual(refused.status, 78, refused.summary)
        }
        waitForWarm(harness)
        XCTAssertEqual(chmod(key.path, 0o600), 0)
        let direct = try sandbox.keymgr(["status", "--json"])
        for _ in 0..<2 {
            let served = try harness.request(["status", "--json"])
            XCTAssertEqual(served.status, 0, served.summary)
            XCTAssertEqual(served.status, direct.status, served.summary)
            XCTAssertEqual(servedAlike(served.stdout), servedAlike(direct.stdout), served.summary)
        }
    }

    /// Before its first fork the agent rehearses a request on a scratch store in the temporary directory, so that
    /// every worker inherits the first-use work. It leaves nothing there, and the agent stays one thread (a process
    /// that forks must: releasing the scratch store's connections would have libdispatch start one), through
    /// requests too. Without a usable temporary directory there is no rehearsal, and requests are served the same.
    func testTheRehearsalLeavesNothingBehindAndTheAgentOneThread() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("alice")
        let scratch = harness.sandbox.root.appendingPathComponent("tmp", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let agent = try harness.start(["--warm-workers", "2", "--verbose"], environment: ["TMPDIR": scratch.path])
        waitForWarm(harness)
        XCTAssertTrue(harness.agentOutput.contains("rehearsed a request on a scratch store"), harness.agentOutput)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: scratch.path), [])
        let threads = { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(agent.processIdentifier)/task").count) ?? 0 }
        XCTAssertEqual(threads(), 1, "the agent's threads after its rehearsal")
        for command in [["status"], ["sign", "--user", "alice", "--challenge", "c-1"], ["list", "--json"]] {
            let served = try harness.request(command)
            XCTAssertEqual(served.status, 0, "\(command): \(served.summary)")
        }
        waitForWarm(harness)
        XCTAssertEqual(threads(), 1, "the agent's threads after requests")
        // The rehearsal's store was its own: the device's store holds alice alone, and its audit chain holds.
        XCTAssertEqual(try harness.sandbox.keymgr(["users", "--json"]).array().count, 1)
        XCTAssertEqual(try harness.sandbox.keymgr(["audit", "verify"]).status, 0)
        harness.stop()

        let bare = try AgentHarness()
        try bare.sandbox.bind("alice")
        let missing = bare.sandbox.root.appendingPathComponent("no-such-directory").path
        try bare.start(["--warm-workers", "2", "--verbose"], environment: ["TMPDIR": missing])
        waitForWarm(bare)
        XCTAssertTrue(bare.agentOutput.contains("no rehearsal"), bare.agentOutput)
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing))
        let served = try bare.request(["sign", "--user", "alice", "--challenge", "c-2"])
        XCTAssertEqual(served.status, 0, served.summary)
    }

    func testAKilledWarmWorkerIsReplaced() throws {
        let harness = try AgentHarness()
        try harness.start(["--warm-workers", "2"])
        waitForWarm(harness)
        let victim = try XCTUnwrap(harness.warmWorkers.first)
        kill(victim, SIGKILL)
        XCTAssertTrue(AgentHarness.eventually { !AgentHarness.isRunning(victim) && !harness.agentChildren.contains(victim) },
                      "the killed warm worker is reaped")
        waitForWarm(harness)
        XCTAssertFalse(harness.warmWorkers.contains(victim))
        let served = try harness.request(["--verbose", "status"])
        XCTAssertEqual(served.status, 0, served.summary)
        XCTAssertTrue(served.stderr.contains(Self.preparedMark), served.summary)
    }

    func testWithoutWarmWorkersEachRequestForksAWorker() throws {
        let harness = try AgentHarness()
        try harness.start(["--warm-workers", "0"])
        for _ in 0..<3 {
            let served = try harness.request(["--verbose", "status"])
            XCTAssertEqual(served.status, 0, served.summary)
            XCTAssertFalse(served.stderr.contains(Self.preparedMark), served.summary)
        }
        XCTAssertTrue(AgentHarness.eventually { harness.agentChildren.map(AgentHarness.processName) == ["keymgr-keeper"] },
                      "no warm worker: \(harness.agentChildren.map(AgentHarness.processName))")
    }

    func testWarmWorkersOutOfRangeAreAUsageError() throws {
        let harness = try AgentHarness()
        for value in ["-1", "17", "many"] {
            let outcome = try harness.sandbox.run(AgentHarness.coreBinary, [
                "agent", "--home", harness.sandbox.home.path, "--socket", harness.socket.path,
                "--policy", harness.policy.path, "--warm-workers", value,
            ])
            XCTAssertEqual(outcome.status, 64, "\(value): \(outcome.summary)")
            XCTAssertTrue(outcome.stderr.contains("--warm-workers"), outcome.summary)
            XCTAssertFalse(FileManager.default.fileExists(atPath: harness.socket.path))
        }
    }

    func testStoppingOrIdleExitEndsTheWarmWorkers() throws {
        for stop in ["SIGTERM", "idle exit"] {
            let harness = try AgentHarness()
            let agent = try harness.start(stop == "SIGTERM" ? ["--warm-workers", "3"] : ["--warm-workers", "3", "--idle-exit", "3"])
            waitForWarm(harness, 3)
            let warm = harness.warmWorkers
            XCTAssertEqual(try harness.request(["status"]).status, 0)
            waitForWarm(harness, 3)
            let all = Set(warm + harness.warmWorkers)
            if stop == "SIGTERM" { agent.terminate() }
            XCTAssertTrue(AgentHarness.eventually(30) { !agent.isRunning }, stop)
            XCTAssertEqual(agent.terminationStatus, 0, harness.agentOutput)
            XCTAssertTrue(AgentHarness.eventually { all.allSatisfy { !AgentHarness.isRunning($0) } },
                          "\(stop): no warm worker outlives the agent")
        }
    }

    func testLowDescriptorNumbersTheClientPassesReachTheCommand() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try harness.start(["--warm-workers", "2"])
        for number in 3...10 {
            waitForWarm(harness)
            // The PIN on descriptor `number` of the client, a here-string: the command must read it, not a file of the
            // store's, and the store must still work after the descriptor was placed.
            let script = "exec \(number)<<<482916; exec \"$0\" --socket \"$1\" --verbose sign --user pinny --pin-fd \(number)"
            let outcome = try harness.sandbox.run(URL(fileURLWithPath: "/bin/bash"),
                                                  ["-c", script, Sandbox.binary.path, harness.socket.path])
            XCTAssertEqual(outcome.status, 0, "--pin-fd \(number): \(outcome.summary)")
            XCTAssertTrue(outcome.stderr.contains(Self.preparedMark), outcome.summary)
            XCTAssertEqual(outcome.stdout.trimmingCharacters(in: .newlines).split(separator: ".").count, 3, outcome.summary)
        }
        let wrong = try harness.sandbox.run(URL(fileURLWithPath: "/bin/bash"), [
            "-c", "exec 3<<<000000; exec \"$0\" --socket \"$1\" sign --user pinny --pin-fd 3", Sandbox.binary.path,
            harness.socket.path,
        ])
        XCTAssertEqual(wrong.status, 77, wrong.summary)
        XCTAssertEqual(try harness.sandbox.keymgr(["audit", "verify"]).status, 0)
    }
}
