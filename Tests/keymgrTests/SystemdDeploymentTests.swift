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
    private var started = false
    /// Every command run inside and what it printed, for the test log.
    private(set) var transcript = ""

    init(in sandbox: Sandbox) throws {
        self.sandbox = sandbox
        state = sandbox.root.appendingPathComponent("container")
        try FileManager.default.createDirectory(at: upper, withIntermediateDirectories: true)
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

    /// Runs `arguments` inside the container as root.
    @discardableResult
    func run(_ arguments: [String], stdin: String = "", timeout: TimeInterval = 300) throws -> Outcome {
        let outcome = try sandbox.run(Self.script, ["exec", state.path] + arguments, stdin: stdin, timeout: timeout)
        log("$ \(arguments.joined(separator: " "))\n\(outcome.stdout)\(outcome.stderr)→ \(outcome.status)\n")
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
        return try run(prefix + ["env", "-C", home] + variables + ["sh", "-c", line], stdin: stdin, timeout: timeout)
    }

    /// Polls `line` (as root) until it prints `expected`, for at most `seconds`; returns what it printed last.
    func wait(for line: String, toPrint expected: String, seconds: Int) throws -> String {
        var last = ""
        for _ in 0..<(seconds * 5) {
            let outcome = try sandbox.run(Self.script, ["exec", state.path, "sh", "-c", line])
            last = outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            if last == expected { break }
            usleep(200_000)
        }
        log("$ \(line)   (polled)\n\(last)\n")
        return last
    }
}

/// The README's "Deploying on a shared device" on a real systemd: `make install` into a booted Debian container,
/// the section's setup block run as root as written, its people's block as two people, then what the section
/// promises: the audit names each person, the agent exits when idle and the next command starts it again, the
/// timer's service and the cron line's command sync with the reference server (on this machine's loopback, which
/// the container shares). The whole transcript is printed.
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
        container?.stop()
        container = nil
        server?.stop()
        server = nil
        sandbox = nil
        super.tearDown()
    }

    /// The challenge the people's block signs (its `$CHALLENGE`).
    private let challenge = "n0nce-\(UUID().uuidString.prefix(8))"

    func testTheDeploymentSectionOnARealSystemd() throws {
        let section = try DeploymentSection()
        container = try BootedContainer(in: sandbox)
        server = try RefServerProcess(in: sandbox, users: ["alice", "bob"])

        // keymgr as `make install` installs it (PREFIX=/usr/local, the README's), staged into the container's tree.
        let install = try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"),
                                      ["-C", packageRoot.path, "make", "--no-print-directory", "install",
                                       "DESTDIR=\(container.upper.path)"], timeout: 3600)
        XCTAssertEqual(install.status, 0, install.summary)
        // The admin token where the setup block expects it: root's working directory.
        let token = container.upper.appendingPathComponent("root/admin-token.txt")
        try FileManager.default.createDirectory(at: token.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: server.tokenFile, to: token)
        try container.start()

        // The setup block, line by line as root, as written; only the server's URL is this test's.
        let exampleURL = "https://am.example.com/am"
        XCTAssertTrue(section.setup.last?.contains(exampleURL) == true, "\(section.setup)")
        for line in section.setup {
            let outcome = try container.shell(line.replacingOccurrences(of: exampleURL, with: server.baseURL.absoluteString))
            XCTAssertEqual(outcome.status, 0, "README: \(line)\n\(outcome.summary)")
        }
        try container.run(["systemctl", "is-active", "keymgr.socket", "keymgr-sync.timer"])
        XCTAssertFalse(try container.run(["test", "-e", "/var/lib/keymgr/master.key"]).status == 0,
                       "the master key is never on the disk in clear")
        XCTAssertNotEqual(try container.run(["test", "-e", "/root/admin-token.txt"]).status, 0, "shred -u removed it")

        // Two people with accounts of their own; alice's identity registered by root through the agent.
        for person in ["alice", "bob"] {
            XCTAssertEqual(try container.run(["useradd", "--create-home", person]).status, 0)
        }
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

        try morePeopleAnAdministratorAndAKiosk()
        try journalCopyOfTheAudit()
        try policyTypoThenFix()
        try idleExitAndRestart()
        try cronLineSyncs(section: section)
        try timerServiceSyncs(kid: kid)

        try stolenDeviceRevokeWithASecondKey()
        let verify = try container.shell("keymgr audit verify")
        XCTAssertEqual(verify.status, 0, verify.summary)
        try container.run(["systemctl", "--failed", "--no-pager"])
    }

    /// Four people, an administrator in `keymgr-admins` and a shared kiosk account, under the shipped policy
    /// (issue 32): carol binds and signs her own key; dave does not find it; erin, an administrator, sees every user;
    /// the kiosk binds and signs PIN keys only.
    private func morePeopleAnAdministratorAndAKiosk() throws {
        for person in ["carol", "dave", "kiosk"] {
            XCTAssertEqual(try container.run(["useradd", "--create-home", person]).status, 0)
        }
        XCTAssertEqual(try container.run(["useradd", "--create-home", "--groups", "keymgr-admins", "erin"]).status, 0)

        let bound = try container.shell("keymgr bind --user carol --json", as: "carol")
        XCTAssertEqual(bound.status, 0, "people bind their own keys\n\(bound.summary)")
        XCTAssertEqual(try container.shell("keymgr sign --user carol --challenge \"$CHALLENGE\"", as: "carol",
                                           environment: ["CHALLENGE": challenge]).status, 0)
        let unseen = try container.shell("keymgr sign --user carol --challenge \"$CHALLENGE\"", as: "dave",
                                         environment: ["CHALLENGE": challenge])
        XCTAssertEqual(unseen.status, 66, "dave finds no carol\n\(unseen.summary)")
        XCTAssertFalse(unseen.stderr.contains(try XCTUnwrap(try bound.object()["kid"] as? String)), unseen.summary)

        let users = try container.shell("keymgr users --json", as: "erin")
        XCTAssertEqual(users.status, 0, users.summary)
        let ids = Set(try users.array().compactMap { $0["userId"] as? String })
        XCTAssertTrue(ids.isSuperset(of: ["carol", "id=alice,ou=user,ou=am-config"]), "the administrator sees everyone: \(ids)")

        let pinned = try container.shell("keymgr bind --user patient-7 --auth-type app-pin --pin-stdin", as: "kiosk",
                                         stdin: "482915\n")
        XCTAssertEqual(pinned.status, 0, pinned.summary)
        XCTAssertEqual(try container.shell("keymgr sign --user patient-7 --pin-stdin", as: "kiosk", stdin: "482915\n").status, 0)
        let none = try container.shell("keymgr bind --user patient-8", as: "kiosk")
        XCTAssertEqual(none.status, 77, "the kiosk binds PIN keys only\n\(none.summary)")
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
    }

    /// The stolen-device revoke with a second key present (issue 32, finding 1): bob bound a key here, then through a
    /// journey; `admin revoke --device-id THIS-DEVICE` revokes at once exactly the key whose server binding it
    /// deleted, and never the one that was never on the server.
    private func stolenDeviceRevokeWithASecondKey() throws {
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
        try container.run(["journalctl", "-u", "keymgr.service", "--no-pager", "-o", "short-monotonic"])
    }

    /// keymgr-sync.service, as the timer starts it: an administrator removed alice's binding on the server, and
    /// the sync revokes her key here.
    private func timerServiceSyncs(kid: String) throws {
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
}
