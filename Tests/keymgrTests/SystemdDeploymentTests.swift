import Foundation
import XCTest

/// Debian bookworm with systemd as PID 1, booted in systemd-nspawn by `scripts/container.sh` from the root file
/// system `scripts/container-rootfs.sh` builds once into `.build-container/rootfs`. Files put in `upper` before
/// `start` are in the container; it is stopped (and its overlay gone) by `stop`, by its lifetime, or when the test
/// runner dies.
final class BootedContainer {
    struct BootFailed: Error, CustomStringConvertible {
        let summary: String
        var description: String { "the container did not boot: \(summary)" }
    }

    static let rootfs = packageRoot.appendingPathComponent(".build-container/rootfs")
    static let script = packageRoot.appendingPathComponent("scripts/container.sh")
    let sandbox: Sandbox
    let state: URL
    var upper: URL { state.appendingPathComponent("upper") }
    /// The readable transcript: each step's title, then each command as typed, the first lines of what it printed
    /// and its exit status. Written as the test goes (so a failed run leaves it too).
    let transcriptFile: URL
    private var started = false
    /// Every command run inside and all it printed, for the test log.
    private(set) var transcript = ""
    /// Lines of output the readable transcript keeps per command.
    static let linesPerCommand = 4

    init(in sandbox: Sandbox) throws {
        self.sandbox = sandbox
        state = sandbox.root.appendingPathComponent("container")
        transcriptFile = sandbox.root.appendingPathComponent("day-transcript.txt")
        try FileManager.default.createDirectory(at: upper, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: transcriptFile.path, contents: nil)
        let built = try sandbox.run(packageRoot.appendingPathComponent("scripts/container-rootfs.sh"), [Self.rootfs.path],
                                    timeout: 1800)
        XCTAssertEqual(built.status, 0, built.summary)
    }

    deinit { stop() }

    func start() throws {
        let boot = try sandbox.run(Self.script, ["start", Self.rootfs.path, state.path, "1200"],
                                   extraEnvironment: ["KEYMGR_CONTAINER_WATCH_PID": String(getpid())], timeout: 300)
        guard boot.status == 0 else { throw BootFailed(summary: boot.summary) }
        started = true
        log("# systemd in the container: pid \(boot.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) here\n")
        note("# booted: systemd is running")
    }

    /// `systemctl reboot` inside; returns once the same tree has booted again. Its stdout names nspawn's exit status
    /// (`nspawn exited 133`) and the new systemd.
    func reboot() throws -> Outcome {
        let outcome = try sandbox.run(Self.script, ["reboot", state.path], timeout: 300)
        log("$ systemctl reboot   (container.sh reboot)\n\(outcome.stdout)\(outcome.stderr)→ \(outcome.status)\n")
        note("[root] $ systemctl reboot", outcome)
        return outcome
    }

    func stop() {
        guard started else { return }
        started = false
        _ = try? sandbox.run(Self.script, ["stop", state.path], timeout: 120)
    }

    func log(_ text: String) {
        transcript += text
        print(text, terminator: "")
    }

    /// A line (or a command and what it printed, abridged) in the readable transcript.
    func note(_ line: String, _ outcome: Outcome? = nil) {
        var text = line + "\n"
        if let outcome {
            // The first lines and, of a longer output, the last two (where apt-get ends and a script's notice is).
            // As a terminal shows it: "\r\n" (one Character to Swift) ends a line, and a progress line's "\r" rewinds it.
            let lines = (outcome.stdout + outcome.stderr).replacingOccurrences(of: "\r\n", with: "\n")
                .split(separator: "\n", omittingEmptySubsequences: true)
                .compactMap { $0.split(separator: "\r").last.map(String.init) }
            let long = lines.count > Self.linesPerCommand + 2
            let shown = long ? Array(lines.prefix(Self.linesPerCommand)) + ["… (\(lines.count - Self.linesPerCommand - 2) more lines)"]
                + lines.suffix(2) : lines
            for line in shown { text += "    " + (line.count > 150 ? line.prefix(150) + "…" : line) + "\n" }
            text += "    → \(outcome.status)\n"
        }
        if let handle = try? FileHandle(forWritingTo: transcriptFile) {
            _ = try? handle.seekToEnd()
            try? handle.write(contentsOf: Data(text.utf8))
            try? handle.close()
        }
    }

    /// The start of a step of the day, in the readable transcript and the log.
    func step(_ title: String) {
        log("\n## \(title)\n")
        note("\n## \(title)")
    }

    /// Runs `arguments` inside the container as root.
    @discardableResult
    func run(_ arguments: [String], stdin: String = "", timeout: TimeInterval = 300, shown: String? = nil) throws -> Outcome {
        let outcome = try sandbox.run(Self.script, ["exec", state.path] + arguments, stdin: stdin, timeout: timeout)
        log("$ \(arguments.joined(separator: " "))\n\(outcome.stdout)\(outcome.stderr)→ \(outcome.status)\n")
        note(shown ?? "[root] $ \(arguments.joined(separator: " "))", outcome)
        return Outcome(status: outcome.status, stdout: outcome.stdout, stderr: outcome.stderr, arguments: arguments)
    }

    /// Runs a shell command line inside the container as `user` (root when nil), from that user's home.
    @discardableResult
    func shell(_ line: String, as user: String? = nil, environment: [String: String] = [:], stdin: String = "",
               timeout: TimeInterval = 300) throws -> Outcome {
        let variables = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        let prefix = user.map { ["runuser", "-u", $0, "--"] } ?? []
        let home = user.map { $0 == "keymgr" ? "/var/lib/keymgr" : "/home/\($0)" } ?? "/root"
        log(user.map { "[\($0)] " } ?? "[root] ")
        return try run(prefix + ["env", "-C", home] + variables + ["sh", "-c", line], stdin: stdin, timeout: timeout,
                       shown: "[\(user ?? "root")] $ \(line)")
    }

    /// Polls `line` (as root) until it prints `expected`, for at most `seconds`; returns what it printed last.
    func wait(for line: String, toPrint expected: String, seconds: TimeInterval) throws -> String {
        var last = ""
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            let outcome = try sandbox.run(Self.script, ["exec", state.path, "sh", "-c", line])
            last = outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            if last == expected { break }
            usleep(200_000)
        } while Date() < deadline
        log("$ \(line)   (polled)\n\(last)\n")
        note("[root] $ \(line)   (polled until it printed \(expected))\n    \(last)")
        return last
    }
}

/// An administrator's first day with keymgr on a real systemd (issue 32, "Prove it end to end"), in a booted Debian
/// container, in this order: (1) the Debian package `make deb` built, installed with the README's own line; (2) the
/// rest of the README's setup block as written, read from README.md; (3) four people, an administrator in
/// `keymgr-admins` and a shared `kiosk` account; (4) binds and signs through the agent; (5) a journey bind against
/// the reference server (on this machine's loopback, which the container shares), with the README's people's block
/// and the audit; (6) the sync timer, and the cron line's command; (7) a revocation on the server side; (8) the
/// stolen-device revoke with a second key present; (9) a policy typo, then its fix; (10) a reboot; (11) `apt-get
/// remove`, then `purge`, with nothing left running. A readable transcript of every step is written to the test's
/// directory, and copied to `$KEYMGR_DAY_TRANSCRIPT` when that is set.
final class SystemdDeploymentTests: XCTestCase {
    private var sandbox: Sandbox!
    private var container: BootedContainer!
    private var server: RefServerProcess!

    override func setUpWithError() throws {
        guard geteuid() == 0 else {
            throw XCTSkip("booting a container needs root (systemd-nspawn, the overlay mount); the suite runs as root")
        }
        sandbox = try Sandbox()
    }

    override func tearDown() {
        if let container, let copy = ProcessInfo.processInfo.environment["KEYMGR_DAY_TRANSCRIPT"], !copy.isEmpty {
            let target = URL(fileURLWithPath: copy)
            try? FileManager.default.removeItem(at: target)
            try? FileManager.default.copyItem(at: container.transcriptFile, to: target)
        }
        container?.stop()
        container = nil
        server?.stop()
        server = nil
        sandbox = nil
        super.tearDown()
    }

    /// The challenge the people's block signs (its `$CHALLENGE`).
    private let challenge = "n0nce-\(UUID().uuidString.prefix(8))"
    private let units = ["keymgr.socket", "keymgr.service", "keymgr-sync.timer", "keymgr-sync.service"]

    func testAnAdministratorsFirstDayOnARealSystemd() throws {
        let section = try DeploymentSection()
        let (deb, built) = try DebianPackage.built(in: sandbox)
        XCTAssertEqual(built.status, 0, built.summary)
        container = try BootedContainer(in: sandbox)
        server = try RefServerProcess(in: sandbox, users: ["alice", "bob"])

        // Root's directory holds what the setup block names: the package and the admin token.
        let root = container.upper.appendingPathComponent("root")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: deb, to: root.appendingPathComponent(deb.lastPathComponent))
        try FileManager.default.copyItem(at: server.tokenFile, to: root.appendingPathComponent("admin-token.txt"))
        try container.start()

        try theSetupBlock(section)
        try peopleAnAdministratorAndAKiosk()
        try bindsAndSignsThroughTheAgent()
        let kid = try aJourneyBind(section)
        try theSyncTimer(section)
        try aRevocationOnTheServer(kid: kid)
        try stolenDeviceRevokeWithASecondKey()
        try policyTypoThenFix()
        try aReboot()
        try removeThenPurge()
    }

    /// Steps 1 and 2: the README's setup block, line by line as root, as written; only the server's URL is this
    /// test's. Its first line installs the package: the units are known to systemd at once, and nothing is enabled
    /// or started before the credentials and the store exist.
    private func theSetupBlock(_ section: DeploymentSection) throws {
        container.step("1-2. the package, then the README's setup block as written")
        let exampleURL = "https://am.example.com/am"
        XCTAssertTrue(section.setup.first?.hasPrefix("apt-get install ./keymgr_") == true, "\(section.setup)")
        XCTAssertTrue(section.setup.last?.contains(exampleURL) == true, "\(section.setup)")
        for (index, line) in section.setup.enumerated() {
            let outcome = try container.shell(line.replacingOccurrences(of: exampleURL, with: server.baseURL.absoluteString))
            XCTAssertEqual(outcome.status, 0, "README: \(line)\n\(outcome.summary)")
            guard index == 0 else { continue }
            let loaded = try container.run(["systemctl", "show", "-P", "LoadState"] + units)
            XCTAssertEqual(loaded.stdout.split(separator: "\n"), ["loaded", "loaded", "loaded", "loaded"], loaded.summary)
            XCTAssertEqual(try container.run(["systemctl", "is-active"] + units).stdout, String(repeating: "inactive\n", count: 4))
            XCTAssertEqual(try container.run(["systemctl", "is-enabled", "keymgr.socket", "keymgr-sync.timer"]).stdout,
                           "disabled\ndisabled\n", "nothing is enabled before the store exists")
            XCTAssertEqual(try container.run(["stat", "-c", "%U %a", "/var/lib/keymgr"]).stdout, "keymgr 700\n")
        }
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.socket", "keymgr-sync.timer"]).stdout,
                       "active\nactive\n")
        XCTAssertFalse(try container.run(["test", "-e", "/var/lib/keymgr/master.key"]).status == 0,
                       "the master key is never on the disk in clear")
        XCTAssertNotEqual(try container.run(["test", "-e", "/root/admin-token.txt"]).status, 0, "shred -u removed it")
    }

    /// Step 3: four people with accounts of their own, an administrator in `keymgr-admins`, a shared kiosk account.
    private func peopleAnAdministratorAndAKiosk() throws {
        container.step("3. four people, an administrator in keymgr-admins, a shared kiosk account")
        for person in ["alice", "bob", "carol", "dave", "kiosk"] {
            XCTAssertEqual(try container.run(["useradd", "--create-home", person]).status, 0)
        }
        XCTAssertEqual(try container.run(["useradd", "--create-home", "--groups", "keymgr-admins", "erin"]).status, 0)
    }

    /// Step 5: a journey bind against the reference server: alice's identity registered by root through the agent
    /// and linked to her; then the README's people's block as alice, bob refused alice's key, and the audit.
    private func aJourneyBind(_ section: DeploymentSection) throws -> String {
        container.step("5. a journey bind against the reference server; the README's people's block")
        let registered = try container.shell("keymgr bind --journey RegisterDevice --user alice --password-fd 0 --json",
                                             stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(registered.status, 0, registered.summary)
        let kid = try XCTUnwrap(try registered.object()["kid"] as? String, registered.stdout)
        // root's bind (a rule for everyone) links the identity to nobody: the administrator links it to alice, as the
        // README's deployment section says.
        let linked = try container.shell("keymgr person link alice id=alice,ou=user,ou=am-config")
        XCTAssertEqual(linked.status, 0, linked.summary)

        // The people's block: alice runs every line; bob is refused alice's key.
        for line in section.people {
            let outcome = try container.shell(line, as: "alice", environment: ["CHALLENGE": challenge])
            XCTAssertEqual(outcome.status, 0, "README, as alice: \(line)\n\(outcome.summary)")
            if line.hasPrefix("keymgr sign ") {
                XCTAssertEqual(try jwsParts(outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).payload["challenge"]
                               as? String, challenge, outcome.stdout)
            }
        }
        // bob types the same line: among the users he may see there is no alice (a name never finds, nor lists,
        // another person's identity). Naming alice's key itself finds nothing either: to bob it does not exist.
        let signLine = try XCTUnwrap(section.people.first { $0.hasPrefix("keymgr sign ") })
        let unseen = try container.shell(signLine + " --json", as: "bob", environment: ["CHALLENGE": challenge])
        XCTAssertEqual(unseen.status, 66, "bob sees no alice\n\(unseen.summary)")
        let refused = try container.shell("keymgr sign --kid \(kid) --challenge \"$CHALLENGE\" --json", as: "bob",
                                          environment: ["CHALLENGE": challenge])
        XCTAssertEqual(refused.status, 66, "the policy: bob acts on his own identity only\n\(refused.summary)")
        XCTAssertEqual((try? refused.object()["error"] as? [String: Any])?["code"] as? String, "clientNotRegistered",
                       refused.summary)
        // What his rule does not allow at all is refused, and audited as his.
        let denied = try container.shell("keymgr sync --json", as: "bob")
        XCTAssertEqual(denied.status, 77, denied.summary)
        XCTAssertEqual((try? denied.object()["error"] as? [String: Any])?["code"] as? String, "denied", denied.summary)
        XCTAssertEqual(try container.shell("keymgr status", as: "bob").status, 0)

        // The audit names each person, from the kernel's account of the caller.
        let uids = try ["alice", "bob"].map { try container.run(["id", "-u", $0]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) }
        let audit = try container.shell("keymgr audit --json")
        XCTAssertEqual(audit.status, 0, audit.summary)
        let entries = try audit.array()
        XCTAssertTrue(entries.contains { $0["actor"] as? String == "alice (uid \(uids[0]))" && $0["event"] as? String == "key.signed" },
                      "alice's signature is alice's: \(audit.stdout)")
        XCTAssertTrue(entries.contains { $0["actor"] as? String == "bob (uid \(uids[1]))" && $0["event"] as? String == "agent.denied" },
                      "bob's refusal is audited as his: \(audit.stdout)")
        XCTAssertTrue(entries.contains { ($0["actor"] as? String ?? "").hasPrefix("root (uid 0)") }, audit.stdout)
        try journalCopyOfTheAudit()
        return kid
    }

    /// Step 4: binds and signs through the agent under the shipped policy (issue 32): carol binds and signs her own
    /// key; dave does not find it; the kiosk binds and signs PIN keys only; erin, an administrator, sees every user;
    /// the agent exits when idle and the socket starts it again.
    private func bindsAndSignsThroughTheAgent() throws {
        container.step("4. binds and signs through the agent")
        let bound = try container.shell("keymgr bind --user carol --json", as: "carol")
        XCTAssertEqual(bound.status, 0, "people bind their own keys\n\(bound.summary)")
        XCTAssertEqual(try container.shell("keymgr sign --user carol --challenge \"$CHALLENGE\"", as: "carol",
                                           environment: ["CHALLENGE": challenge]).status, 0)
        let unseen = try container.shell("keymgr sign --user carol --challenge \"$CHALLENGE\"", as: "dave",
                                         environment: ["CHALLENGE": challenge])
        XCTAssertEqual(unseen.status, 66, "dave finds no carol\n\(unseen.summary)")
        XCTAssertFalse(unseen.stderr.contains(try XCTUnwrap(try bound.object()["kid"] as? String)), unseen.summary)

        let pinned = try container.shell("keymgr bind --user patient-7 --auth-type app-pin --pin-stdin", as: "kiosk",
                                         stdin: "482915\n")
        XCTAssertEqual(pinned.status, 0, pinned.summary)
        XCTAssertEqual(try container.shell("keymgr sign --user patient-7 --pin-stdin", as: "kiosk", stdin: "482915\n").status, 0)
        let none = try container.shell("keymgr bind --user patient-8", as: "kiosk")
        XCTAssertEqual(none.status, 77, "the kiosk binds PIN keys only\n\(none.summary)")

        let users = try container.shell("keymgr users --json", as: "erin")
        XCTAssertEqual(users.status, 0, users.summary)
        let ids = Set(try users.array().compactMap { $0["userId"] as? String })
        XCTAssertTrue(ids.isSuperset(of: ["carol", "patient-7"]), "the administrator sees everyone: \(ids)")
        try idleExitAndRestart()
    }

    /// The audit log's copy in the journal (issue 36): alice's `sign` is there with its fields, the whole journal
    /// exported with `journalctl -o json` verifies offline, and the same export without one entry names it.
    private func journalCopyOfTheAudit() throws {
        let signed = try container.run(["journalctl", "-o", "json", "--no-pager", "KEYMGR_EVENT=key.signed",
                                        "KEYMGR_USER=id=alice,ou=user,ou=am-config"])
        let line = try XCTUnwrap(signed.stdout.split(separator: "\n").last, signed.summary)
        let fields = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], String(line))
        for name in ["MESSAGE", "MESSAGE_ID", "KEYMGR_SEQ", "KEYMGR_EVENT", "KEYMGR_ACTOR", "KEYMGR_ACTOR_UID", "KEYMGR_USER",
                     "KEYMGR_KID", "KEYMGR_HASH", "KEYMGR_PREV_HASH"] {
            XCTAssertNotNil(fields[name], "the journal entry of a sign has \(name): \(line)")
        }
        XCTAssertEqual(fields["KEYMGR_USER"] as? String, "id=alice,ou=user,ou=am-config", String(line))
        let aliceUid = try container.run(["id", "-u", "alice"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(fields["KEYMGR_ACTOR_UID"] as? String, aliceUid, String(line))

        // Checked as a central log server would: offline, with no store (`--home` of none: the client runs it itself).
        try container.shell("journalctl -o json --no-pager > /root/journal.json")
        let whole = try container.shell("keymgr --home /var/empty audit verify --journal /root/journal.json")
        XCTAssertEqual(whole.status, 0, whole.summary)
        XCTAssertTrue(whole.stdout.contains("intact"), whole.summary)
        let seq = try XCTUnwrap(fields["KEYMGR_SEQ"] as? String, String(line))
        try container.shell("grep -v '\"KEYMGR_SEQ\":\"\(seq)\"' /root/journal.json > /root/journal-cut.json")
        let cut = try container.shell("keymgr --home /var/empty audit verify --journal /root/journal-cut.json")
        XCTAssertEqual(cut.status, 1, cut.summary)
        XCTAssertTrue(cut.stderr.contains("entry \(seq) is missing"), cut.summary)
    }

    /// A policy typo, then its fix (issue 32): the restart fails, people get 78 saying to ask the administrator,
    /// `doctor` run directly names the failed unit (issue 36), and the fixed policy brings the agent back.
    private func policyTypoThenFix() throws {
        container.step("9. a policy typo, then its fix")
        let policy = "/etc/keymgr/policy.toml"
        try container.run(["cp", "-p", policy, "/root/policy.good"])
        try container.shell("printf '\\n[[rule]]\\nwho = [\"user:alice\"\\nmay = [\"status\"]\\n' >> \(policy)")
        let check = try container.shell("keymgr agent --check-policy \(policy)")
        XCTAssertEqual(check.status, 78, check.summary)
        XCTAssertTrue(check.stderr.contains("\(policy):"), check.summary)
        let restart = try container.run(["systemctl", "restart", "keymgr.service"])
        XCTAssertNotEqual(restart.status, 0, "a restart with a policy that does not load fails\n\(restart.summary)")
        let doctor = try container.shell("keymgr --home /var/lib/keymgr doctor --json")
        let checks = try XCTUnwrap(try doctor.object()["checks"] as? [[String: Any]], doctor.summary)
        let agent = try XCTUnwrap(checks.first { $0["name"] as? String == "agent" }, doctor.stdout)
        XCTAssertEqual(agent["ok"] as? Bool, false, "\(agent)")
        XCTAssertTrue((agent["message"] as? String ?? "").contains("keymgr.service"), "\(agent)")
        XCTAssertTrue((agent["fix"] as? String ?? "").contains("--check-policy"), "\(agent)")
        let person = try container.shell("keymgr status", as: "alice")
        XCTAssertEqual(person.status, 78, "the socket answers: the policy does not load\n\(person.summary)")
        XCTAssertTrue(person.stderr.contains("administrator"), person.summary)

        try container.run(["cp", "-p", "/root/policy.good", policy])
        try container.run(["systemctl", "reset-failed", "keymgr.service", "keymgr.socket"])
        let fixed = try container.run(["systemctl", "restart", "keymgr.service"])
        XCTAssertEqual(fixed.status, 0, fixed.summary)
        XCTAssertEqual(try container.shell("keymgr status", as: "alice").status, 0)

        // doctor run directly by root on the agent's store: the store owned by the agent's account is right, and the
        // master key it cannot open (only keymgr.service has the credential) is checked where the unit loads it from.
        let direct = try container.shell("keymgr --home /var/lib/keymgr doctor --json")
        let directChecks = try XCTUnwrap(try direct.object()["checks"] as? [[String: Any]], direct.summary)
        func doctorCheck(_ name: String, in checks: [[String: Any]]) throws -> (ok: Bool, message: String) {
            let found = try XCTUnwrap(checks.first { $0["name"] as? String == name }, "no \(name) in \(checks)")
            return (found["ok"] as? Bool ?? false, found["message"] as? String ?? "")
        }
        let files = try doctorCheck("store.files", in: directChecks)
        XCTAssertTrue(files.ok && files.message.contains("the agent's user's (keymgr, uid"), files.message)
        XCTAssertTrue(try doctorCheck("store.schema", in: directChecks).ok, direct.stdout)
        let masterKey = try doctorCheck("masterKey", in: directChecks)
        XCTAssertTrue(masterKey.ok, masterKey.message)
        XCTAssertTrue(masterKey.message.contains("/etc/credstore.encrypted/keymgr.master")
                      && masterKey.message.contains("LoadCredentialEncrypted=")
                      && masterKey.message.contains("through the agent as an administrator"), masterKey.message)
        XCTAssertFalse(masterKey.message.contains("missing"), masterKey.message)
        // Through the agent, an administrator's doctor runs inside keymgr.service, where the credential opens the store.
        let served = try container.shell("keymgr doctor --json", as: "erin")
        let servedKey = try doctorCheck("masterKey", in: try XCTUnwrap(try served.object()["checks"] as? [[String: Any]],
                                                                 served.summary))
        XCTAssertTrue(servedKey.ok && servedKey.message.contains("systemd-credential")
                      && servedKey.message.contains("opens this store"), servedKey.message)
    }

    /// The stolen-device revoke with a second key present (issue 32, finding 1): bob bound a key here, then through a
    /// journey; `admin revoke --device-id THIS-DEVICE` revokes at once exactly the key whose server binding it
    /// deleted, and never the one that was never on the server.
    private func stolenDeviceRevokeWithASecondKey() throws {
        container.step("8. the stolen-device revoke, with a second key present")
        let local = try container.shell("keymgr bind --user bob --json")
        XCTAssertEqual(local.status, 0, local.summary)
        let localKid = try XCTUnwrap(try local.object()["kid"] as? String, local.stdout)
        let journey = try container.shell("keymgr bind --journey RegisterDevice --user bob --password-fd 0 --json",
                                          stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(journey.status, 0, journey.summary)
        let serverKid = try XCTUnwrap(try journey.object()["kid"] as? String, journey.stdout)
        let before = Dictionary(uniqueKeysWithValues: try container.shell("keymgr list --status all --json").array()
            .compactMap { key in (key["kid"] as? String).map { ($0, key["status"] as? String ?? "?") } })
        let deviceId = try XCTUnwrap(try container.shell("keymgr status --json").object()["deviceId"] as? String)
        let revoked = try container.shell("keymgr admin revoke --user bob --device-id \(deviceId) --reason stolen --yes")
        XCTAssertEqual(revoked.status, 0, revoked.summary)
        let after = Dictionary(uniqueKeysWithValues: try container.shell("keymgr list --status all --json").array()
            .compactMap { key in (key["kid"] as? String).map { ($0, key["status"] as? String ?? "?") } })
        XCTAssertEqual(after[serverKid], "revoked", "the stolen binding's key is revoked at once")
        XCTAssertEqual(after[localKid], before[localKid], "the key that was never on the server is left as it was")
        XCTAssertEqual(try container.shell("keymgr sign --kid \(serverKid)").status, 66)
    }

    /// With a short `--idle-exit` (a drop-in), the agent exits by itself and the socket starts it on the next command.
    private func idleExitAndRestart() throws {
        let execStart = try container.run(["systemctl", "show", "-P", "ExecStart", "keymgr.service"]).stdout
        let agent = try XCTUnwrap(execStart.split(separator: " ").first { $0.hasPrefix("path=") }).dropFirst("path=".count)
        let dropIn = "[Service]\nExecStart=\nExecStart=\(agent) agent --home /var/lib/keymgr --idle-exit 2\n"
        try container.run(["mkdir", "-p", "/etc/systemd/system/keymgr.service.d"])
        try container.run(["sh", "-c", "cat > /etc/systemd/system/keymgr.service.d/idle.conf"], stdin: dropIn)
        try container.run(["systemctl", "daemon-reload"])
        try container.run(["systemctl", "stop", "keymgr.service"])

        XCTAssertEqual(try container.shell("keymgr status", as: "alice").status, 0)
        let first = try container.run(["systemctl", "show", "-P", "InvocationID", "keymgr.service"]).stdout
        XCTAssertEqual(try container.wait(for: "systemctl is-active keymgr.service", toPrint: "inactive", seconds: 60), "inactive",
                       "the agent did not exit when idle")
        XCTAssertEqual(try container.run(["systemctl", "show", "-P", "Result", "keymgr.service"]).stdout, "success\n",
                       "an idle exit is a clean one")
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.socket"]).stdout, "active\n")
        let again = try container.shell("keymgr status --json", as: "alice")
        XCTAssertEqual(again.status, 0, again.summary)
        XCTAssertEqual(try again.object()["deviceName"] as? String, "kiosk 7", again.stdout)
        let second = try container.run(["systemctl", "show", "-P", "InvocationID", "keymgr.service"]).stdout
        XCTAssertNotEqual(first, second, "the socket started the agent again")
        // The shipped unit again: the rest of the day runs the agent as installed.
        try container.run(["rm", "-r", "/etc/systemd/system/keymgr.service.d"])
        try container.run(["systemctl", "daemon-reload"])
        XCTAssertEqual(try container.run(["systemctl", "restart", "keymgr.service"]).status, 0)
    }

    /// Step 6: the sync timer is enabled and active and starts keymgr-sync.service (its next run is scheduled);
    /// the cron line's command, the README's other way, syncs through the agent too.
    private func theSyncTimer(_ section: DeploymentSection) throws {
        container.step("6. the sync timer (and the cron line's command)")
        XCTAssertEqual(try container.run(["systemctl", "is-enabled", "keymgr-sync.timer"]).stdout, "enabled\n")
        XCTAssertEqual(try container.run(["systemctl", "show", "-P", "Triggers", "keymgr-sync.timer"]).stdout,
                       "keymgr-sync.service\n")
        let timers = try container.run(["systemctl", "list-timers", "--no-pager", "keymgr-sync.timer"])
        XCTAssertTrue(timers.stdout.contains("keymgr-sync.timer") && timers.stdout.contains("keymgr-sync.service"),
                      timers.summary)
        XCTAssertNotEqual(try container.run(["systemctl", "show", "-P", "NextElapseUSecRealtime", "keymgr-sync.timer"])
                            .stdout.trimmingCharacters(in: .whitespacesAndNewlines), "", "the timer has a next run")
        try cronLineSyncs(section: section)
    }

    /// Step 7: keymgr-sync.service, as the timer starts it: an administrator removed alice's binding on the server,
    /// and the sync revokes her key here.
    private func aRevocationOnTheServer(kid: String) throws {
        container.step("7. a revocation on the server side; the timer's service syncs it")
        try server.deleteBinding(user: "alice", uuid: kid)
        let run = try container.run(["systemctl", "start", "keymgr-sync.service"])
        XCTAssertEqual(run.status, 0, run.summary)
        // The report of this run: the last one under the identifier the unit gives (the cron line's came before).
        let journal = try container.run(["journalctl", "-t", "keymgr-sync", "-o", "cat", "--no-pager"])
        let report = try XCTUnwrap(journal.stdout.split(separator: "\n").last { $0.hasPrefix("{") }, journal.stdout)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(report.utf8)) as? [String: Any])
        XCTAssertEqual(object["revoked"] as? [String], [kid], String(report))
        XCTAssertEqual(try container.run(["systemctl", "show", "-P", "Result", "keymgr-sync.service"]).stdout, "success\n")
        let keys = try container.shell("keymgr list --status all --json").array()
        XCTAssertEqual(keys.first { $0["kid"] as? String == kid }?["status"] as? String, "revoked", "\(keys)")
        let audit = try container.shell("keymgr audit --json").array()
        let keymgrUid = try container.run(["id", "-u", "keymgr"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(audit.contains { $0["actor"] as? String == "keymgr (uid \(keymgrUid))" }, "the sync runs as keymgr")
    }

    /// The cron line's command, run as the user it names: a binding of this device the store never held is
    /// reported as an orphan, and the report is in the journal under the tag the line gives logger.
    private func cronLineSyncs(section: DeploymentSection) throws {
        let deviceId = try XCTUnwrap(try container.shell("keymgr status --json").object()["deviceId"] as? String)
        let orphan = UUID().uuidString
        let added = try server.request("POST", "/__refserver/devices", body: [
            "user": "alice", "deviceId": deviceId, "deviceName": "kiosk 7", "key": ["kid": orphan, "kty": "EC"],
        ])
        XCTAssertEqual(added.status, 201)
        let cron = section.cron
        let run = try container.shell(cron.command, as: cron.user)
        XCTAssertEqual(run.status, 0, run.summary)
        let tag = try XCTUnwrap(cron.command.split(separator: " ").last.map(String.init))
        let logged = try container.wait(for: "journalctl -t \(tag) -o cat --no-pager | grep -c '\"orphans\":\\[\"\(orphan)\"\\]'",
                                        toPrint: "1", seconds: 30)
        XCTAssertEqual(logged, "1", "the cron line's report names the orphan")
    }

    /// Step 10: a reboot (the container's systemd reboots; systemd-nspawn exits 133 and the same tree boots again,
    /// as systemd-nspawn@.service does): the socket and the timer come back, nothing has started the agent, a person's
    /// first command starts it through the socket and signs; the store and the links survive.
    private func aReboot() throws {
        container.step("10. a reboot")
        let keysBefore = try keyStates()
        let linksBefore = try links()
        XCTAssertFalse(linksBefore.isEmpty)
        let rebooted = try container.reboot()
        XCTAssertEqual(rebooted.status, 0, rebooted.summary)
        XCTAssertTrue(rebooted.stdout.contains("nspawn exited 133\n"), "a reboot inside ends systemd-nspawn with 133\n\(rebooted.summary)")
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.socket", "keymgr-sync.timer"]).stdout, "active\nactive\n",
                       "the enabled socket and timer come back with the boot")
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.service"]).stdout, "inactive\n",
                       "nothing has asked for the agent yet")
        // carol's key (alice's was revoked on the server in step 7).
        let signed = try container.shell("keymgr sign --user carol --challenge \"$CHALLENGE\"", as: "carol",
                                         environment: ["CHALLENGE": challenge])
        XCTAssertEqual(signed.status, 0, "carol signs after the reboot\n\(signed.summary)")
        XCTAssertEqual(try jwsParts(signed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).payload["challenge"] as? String,
                       challenge, signed.stdout)
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.service"]).stdout, "active\n",
                       "the socket started the agent for her command")
        XCTAssertEqual(try keyStates(), keysBefore, "the store survives the reboot")
        XCTAssertEqual(try links(), linksBefore, "the links survive the reboot")
        let verify = try container.shell("keymgr audit verify")
        XCTAssertEqual(verify.status, 0, verify.summary)
        let failed = try container.run(["systemctl", "--failed", "--no-legend", "--no-pager"])
        XCTAssertEqual(failed.stdout, "", "no failed unit after the boot")
    }

    /// Step 11: `apt-get remove` stops the socket, the agent and the timer before their files go, and nothing of
    /// keymgr runs after it; a reinstall brings back what the administrator had enabled, at once; `purge` then stops
    /// it all again, removes the enablement links, the masks and the untouched policy, and says what data it keeps
    /// (the store, the credentials) and how to remove it (issue 32, finding 9).
    private func removeThenPurge() throws {
        container.step("11. apt-get remove, then purge: nothing left running")
        XCTAssertFalse(try keymgrProcesses().isEmpty, "the agent runs before the remove (alice's sign started it)")
        let removed = try container.shell("apt-get remove -y keymgr")
        XCTAssertEqual(removed.status, 0, removed.summary)
        XCTAssertEqual(try keymgrProcesses(), [], "no keymgr process after apt-get remove")
        XCTAssertEqual(try container.run(["systemctl", "is-active"] + units).stdout, String(repeating: "inactive\n", count: 4))
        let listed = try container.run(["systemctl", "list-units", "--all", "--no-legend", "--no-pager", "keymgr*"])
        for line in listed.stdout.split(separator: "\n") {
            XCTAssertFalse(line.contains(" active ") || line.contains(" failed ") || line.contains(" running "),
                           "a keymgr unit is left active after remove: \(line)")
        }
        for state in try container.run(["systemctl", "is-enabled", "keymgr.socket", "keymgr-sync.timer"]).stdout.split(separator: "\n") {
            XCTAssertNotEqual(state, "enabled", "a removed package's unit cannot start again")
        }
        XCTAssertNotEqual(try container.run(["test", "-e", "/usr/bin/keymgr"]).status, 0)
        XCTAssertEqual(try container.run(["test", "-e", "/var/lib/keymgr/keymgr.db"]).status, 0, "remove keeps the store")
        XCTAssertEqual(try container.run(["test", "-e", "/etc/keymgr/policy.toml"]).status, 0, "remove keeps the conffile")

        // Installed again (finding 9: the units were `not-found` until a manual daemon-reload): systemd knows them at
        // once, the administrator's enablement is back, and the enabled socket and timer run again; then removed.
        let reinstalled = try container.shell("apt-get install ./keymgr_*_amd64.deb")
        XCTAssertEqual(reinstalled.status, 0, reinstalled.summary)
        let loaded = try container.run(["systemctl", "show", "-P", "LoadState"] + units)
        XCTAssertEqual(loaded.stdout.split(separator: "\n"), ["loaded", "loaded", "loaded", "loaded"], loaded.summary)
        XCTAssertEqual(try container.run(["systemctl", "is-enabled", "keymgr.socket", "keymgr-sync.timer"]).stdout,
                       "enabled\nenabled\n", "a reinstall keeps the administrator's enablement")
        XCTAssertEqual(try container.run(["systemctl", "is-active", "keymgr.socket", "keymgr-sync.timer"]).stdout,
                       "active\nactive\n", "a reinstall starts what the administrator had enabled")
        let status = try container.shell("keymgr status", as: "carol")
        XCTAssertEqual(status.status, 0, "the reinstalled agent serves the store it left\n\(status.summary)")

        // Purged from installed: dpkg runs the remove scripts, then the purge ones.
        XCTAssertFalse(try keymgrProcesses().isEmpty, "carol's status started the agent")
        let purged = try container.shell("apt-get purge -y keymgr")
        XCTAssertEqual(purged.status, 0, purged.summary)
        let said = purged.stdout + purged.stderr
        XCTAssertTrue(said.contains("/var/lib/keymgr") && said.contains("/etc/credstore.encrypted/keymgr.master")
                      && said.contains("rm -rf"), "purge names the data it keeps and how to remove it\n\(purged.summary)")
        XCTAssertEqual(try container.run(["find", "/etc/systemd", "-name", "keymgr*"]).stdout, "",
                       "no enablement link or mask of keymgr is left")
        XCTAssertNotEqual(try container.run(["test", "-e", "/etc/keymgr"]).status, 0, "the untouched policy is purged")
        XCTAssertEqual(try container.run(["systemctl", "list-units", "--all", "--no-legend", "--no-pager", "keymgr*"]).stdout, "",
                       "systemd knows no keymgr unit after purge")
        XCTAssertEqual(try container.run(["systemctl", "--failed", "--no-legend", "--no-pager"]).stdout, "")
        XCTAssertEqual(try keymgrProcesses(), [], "no keymgr process after apt-get purge")
        XCTAssertEqual(try container.run(["test", "-e", "/var/lib/keymgr/keymgr.db"]).status, 0, "the data stays, as said")
        XCTAssertNotEqual(try container.run(["dpkg-query", "-W", "-f", "${Status}", "keymgr"]).stdout, "install ok installed")
    }

    /// Every process in the container whose name says keymgr, as `PID NAME EXECUTABLE` (a deleted program's
    /// executable ends in " (deleted)"). The container has no procps: this reads /proc as pgrep does.
    private func keymgrProcesses() throws -> [String] {
        let scan = "for d in /proc/[0-9]*; do read -r c < \"$d/comm\" 2>/dev/null || continue; case $c in *keymgr*) " +
            "echo \"${d#/proc/} $c $(readlink \"$d/exe\")\";; esac; done"
        let outcome = try container.run(["sh", "-c", scan], shown: "[root] $ pgrep -a keymgr   (the same, read from /proc)")
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        return outcome.stdout.split(separator: "\n").map(String.init)
    }

    /// Each key's status by kid, as root sees them through the agent.
    private func keyStates() throws -> [String: String] {
        let listed = try container.shell("keymgr list --status all --json")
        XCTAssertEqual(listed.status, 0, listed.summary)
        return Dictionary(uniqueKeysWithValues: try listed.array().compactMap { key in
            (key["kid"] as? String).map { ($0, key["status"] as? String ?? "?") }
        })
    }

    /// Every person's link, as `login userId` lines.
    private func links() throws -> [String] {
        let listed = try container.shell("keymgr person list --json")
        XCTAssertEqual(listed.status, 0, listed.summary)
        return try listed.array().map { "\($0["login"] as? String ?? "?") \($0["userId"] as? String ?? "?")" }.sorted()
    }
}
