import Foundation
import XCTest

/// The agent's policy end to end: `keymgr agent` as root with the policy, people as other OS users (`setpriv`), each
/// a client of the socket. The agent resolves the callers' uids and groups through Debian's libnss-wrapper, from
/// passwd and group files this test writes (so no account is added to the machine).
final class PolicyProcessTests: XCTestCase {
    var sandbox: Sandbox!
    var agent: Process?
    var agentLog: URL { sandbox.root.appendingPathComponent("agent.log") }
    var socket: String { sandbox.root.appendingPathComponent("keymgr.sock").path }
    var client: String { sandbox.root.appendingPathComponent("client.py").path }

    /// The people of the test's user database: login, uid, supplementary groups.
    static let people: [(login: String, uid: UInt32, groups: [UInt32])] = [
        ("alice", 2001, []), ("bob", 2002, []), ("erin", 2003, [2900]), ("kiosk", 2004, []), ("mallory", 2005, []),
        ("hank", 2006, [2950]), ("keymgr", 999, []),
    ]

    override func setUpWithError() throws {
        sandbox = try Sandbox()
        // Other users reach the socket and the client script through the sandbox.
        XCTAssertEqual(chmod(sandbox.root.path, 0o755), 0)
        var passwd = "root:x:0:0:root:/root:/bin/sh\n"
        var group = "root:x:0:\nkeymgr-admins:x:2900:erin\nhelpdesk:x:2950:hank\n"
        for person in Self.people {
            passwd += "\(person.login):x:\(person.uid):\(person.uid):\(person.login):/nonexistent:/bin/sh\n"
            group += "\(person.login):x:\(person.uid):\n"
        }
        try passwd.write(to: sandbox.root.appendingPathComponent("passwd"), atomically: true, encoding: .utf8)
        try group.write(to: sandbox.root.appendingPathComponent("group"), atomically: true, encoding: .utf8)
        try Self.clientScript.write(toFile: client, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(client, 0o644), 0)

        try sandbox.initialise()
        try sandbox.bind("alice")
        try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        // The administrator links each person to their identity user (a name that matches is no link).
        for login in ["alice", "bob"] {
            let linked = try sandbox.keymgr(["person", "link", login, login], extraEnvironment: nssEnvironment)
            XCTAssertEqual(linked.status, 0, linked.summary)
        }
    }

    /// The user database of the test's people, through libnss-wrapper.
    var nssEnvironment: [String: String] {
        ["LD_PRELOAD": "libnss_wrapper.so", "NSS_WRAPPER_PASSWD": sandbox.root.appendingPathComponent("passwd").path,
         "NSS_WRAPPER_GROUP": sandbox.root.appendingPathComponent("group").path]
    }

    override func tearDownWithError() throws {
        stopAgent()
        sandbox = nil
    }

    // MARK: The shipped template

    func testTheShippedTemplateThroughTheAgent() throws {
        try startAgent(policy: try String(contentsOf: PolicyTemplateTests.template, encoding: .utf8))

        // A person with an account: their own identity user.
        let signed = try run("alice", ["sign", "--user", "alice", "--challenge", "c-1"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(signed.stdout.split(separator: ".").count, 3, signed.summary)
        let users = try run("alice", ["users", "--json"])
        XCTAssertEqual(users.status, 0, users.summary)
        XCTAssertEqual(try users.array().compactMap { $0["userId"] as? String }, ["alice"])
        let listed = try run("alice", ["list", "--json"])
        XCTAssertEqual(Set(try listed.array().compactMap { $0["userId"] as? String }), ["alice"])
        // ... and no one else's: bob's identity is, to alice, one that does not exist.
        let other = try run("alice", ["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n")
        let nobody = try run("alice", ["sign", "--user", "zed", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(other.status, 66, other.summary)
        XCTAssertEqual(other.stderr.replacingOccurrences(of: "bob", with: "NAME"), nobody.stderr.replacingOccurrences(of: "zed", with: "NAME"))
        let noRule = try run("alice", ["server", "show"])
        assertDenied(noRule, "no rule of \(policyPath) lets alice (uid 2001) run `keymgr server show`")
        // Finding 4: people bind their own NONE and PIN keys; a new identity user becomes theirs.
        let ownBind = try run("alice", ["bind", "--user", "alice", "--auth-type", "app-pin", "--pin-stdin", "--json"], stdin: "246810\n")
        XCTAssertEqual(ownBind.status, 0, ownBind.summary)
        XCTAssertEqual(try ownBind.object()["owner"] as? String, "alice")
        let newIdentity = try run("mallory", ["bind", "--user", "mallory-2", "--json"])
        XCTAssertEqual(newIdentity.status, 0, newIdentity.summary)
        XCTAssertEqual(try newIdentity.object()["owner"] as? String, "mallory")
        assertDenied(try run("mallory", ["bind", "--user", "alice"]), "bind keys only for its own identity users or new ones")
        XCTAssertEqual(try run("mallory", ["sign", "--user", "alice", "--pin-stdin"], stdin: "246810\n").status, 66)
        let bobSigns = try run("bob", ["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(bobSigns.status, 0, bobSigns.summary)
        // Someone who is no identity user here sees no one.
        let erin = try run("erin", ["list", "--json", "--user", "alice"])
        XCTAssertEqual(erin.status, 0, "an administrator sees alice: \(erin.summary)")
        let hank = try run("hank", ["list", "--json"])
        XCTAssertEqual(hank.status, 0, hank.summary)
        XCTAssertEqual(try hank.array().count, 0)

        // The kiosk account: anyone's PIN key, nothing else.
        let kioskPIN = try run("kiosk", ["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(kioskPIN.status, 0, kioskPIN.summary)
        assertDenied(try run("kiosk", ["sign", "--user", "mallory-2"]),
                     "lets kiosk (uid 2004) use only keys of APPLICATION_PIN; key")
        assertDenied(try run("kiosk", ["bind", "--user", "newbie", "--auth-type", "none"]),
                     "lets kiosk (uid 2004) use only keys of APPLICATION_PIN, not NONE")
        let kioskBind = try run("kiosk", ["bind", "--user", "newbie", "--auth-type", "app-pin", "--pin-stdin", "--json"], stdin: "135790\n")
        XCTAssertEqual(kioskBind.status, 0, kioskBind.summary)
        XCTAssertTrue(try kioskBind.object()["owner"] is NSNull, "a shared account's bind links nothing")
        assertDenied(try run("kiosk", ["bind", "--user", "bob", "--auth-type", "app-pin", "--pin-stdin"], stdin: "135790\n"),
                     "would supersede key")
        // The kiosk's own identity users: none, so bob's is none of its to revoke.
        XCTAssertEqual(try run("kiosk", ["revoke", "--user", "bob", "--yes"]).status, 66)

        // An administrator (group keymgr-admins): everything, another person's PIN key without its PIN.
        let revoked = try run("erin", ["revoke", "--user", "bob", "--yes"])
        XCTAssertEqual(revoked.status, 0, revoked.summary)
        assertDenied(try run("alice", ["master", "rotate", "--yes"]), "no rule of")

        // The sync timer's user may sync (here it gets as far as the missing server: 78, not a denial); no one else.
        let sync = try run("keymgr", ["sync"])
        XCTAssertEqual(sync.status, 78, sync.summary)
        XCTAssertTrue(sync.stderr.contains("server"), sync.summary)
        assertDenied(try run("alice", ["sync"]), "no rule of")

        // Every denial is in the audit log, with the person as actor.
        // Repeats from one uid within a minute are one entry with their count (W7); reading the log writes the rest.
        let audit = try sandbox.succeed(["audit", "--event", "agent.denied", "--json"]).array()
        XCTAssertEqual(audit.map { (($0["details"] as? [String: Any])?["count"] as? Int) ?? 0 }.reduce(0, +), 7, "\(audit)")
        let first = try XCTUnwrap(audit.first)
        XCTAssertEqual(first["actor"] as? String, "alice (uid 2001)")
        let details = try XCTUnwrap(first["details"] as? [String: Any])
        XCTAssertEqual(details["operation"] as? String, "server show")
        XCTAssertEqual(Set(audit.compactMap { $0["actor"] as? String }), ["alice (uid 2001)", "kiosk (uid 2004)", "mallory (uid 2005)"])
    }

    // MARK: Privacy: another person's identity is one that does not exist

    /// Finding 5 of the person issue: through the agent, under the shipped policy, bob's commands on alice's identity
    /// users (by name, id= value, full user id), keys (by kid and kid prefix) print byte for byte what they print for
    /// names and kids that exist nowhere (once the name is replaced), exit 66, and name no kid, issuer or owner.
    /// alice holds two keys (the "choose one with --kid" listing once leaked them).
    func testAnotherPersonsIdentityLooksLikeNoneThroughTheAgent() throws {
        try sandbox.bind("alice", ["--issuer", "https://other.example"])
        try sandbox.bind("id=carol,ou=user,ou=am-config")
        XCTAssertEqual(try sandbox.keymgr(["person", "link", "alice", "id=carol,ou=user,ou=am-config"],
                                          extraEnvironment: nssEnvironment).status, 0)
        let aliceKids = try sandbox.succeed(["list", "--user", "alice", "--json"]).array().compactMap { $0["kid"] as? String }
        XCTAssertEqual(aliceKids.count, 2)
        let aliceKid = aliceKids[0]
        let absentKid = UUID().uuidString
        var absentPrefix = String(UUID().uuidString.prefix(8))
        while aliceKids.contains(where: { $0.hasPrefix(absentPrefix) }) { absentPrefix = String(UUID().uuidString.prefix(8)) }
        try startAgent(policy: try String(contentsOf: PolicyTemplateTests.template, encoding: .utf8))

        let commands: [[String]] = [
            ["sign", "--user", "NAME"], ["sign", "--user", "NAME", "--challenge", "c"], ["list", "--user", "NAME"],
            ["list", "--user", "NAME", "--json"], ["revoke", "--user", "NAME", "--yes"], ["export", "--user", "NAME"],
            ["rebind", "--user", "NAME", "--auth-type", "none"], ["pin", "change", "--user", "NAME", "--pin-stdin"],
            ["token", "show", "--user", "NAME"], ["audit", "--user", "NAME"],
        ]
        let kidCommands: [[String]] = [
            ["sign", "--kid", "NAME"], ["revoke", "--kid", "NAME", "--yes"], ["export", "--kid", "NAME"],
            ["rebind", "--user", "bob", "--kid", "NAME", "--auth-type", "none"],
        ]
        let pairs: [(String, String, [[String]])] = [
            ("alice", "zed", commands), ("carol", "zed", commands),
            ("id=carol,ou=user,ou=am-config", "id=zed,ou=user,ou=am-config", commands),
            (aliceKid, absentKid, kidCommands), (String(aliceKid.prefix(8)), absentPrefix, kidCommands),
        ]
        for (theirs, nobodys, templates) in pairs {
            for template in templates {
                let seen = try run("bob", template.map { $0 == "NAME" ? theirs : $0 }, stdin: "000000\n111111\n")
                let absent = try run("bob", template.map { $0 == "NAME" ? nobodys : $0 }, stdin: "000000\n111111\n")
                let what = template.joined(separator: " ")
                XCTAssertEqual(seen.status, absent.status, "\(what): \(seen.summary) / \(absent.summary)")
                XCTAssertNotEqual(seen.status, 0, "\(what) with \(theirs): \(seen.summary)")
                XCTAssertEqual(seen.stdout.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stdout.replacingOccurrences(of: nobodys, with: "NAME"), what)
                XCTAssertEqual(seen.stderr.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stderr.replacingOccurrences(of: nobodys, with: "NAME"), what)
                for secret in aliceKids.map({ String($0.prefix(8)) }) + ["other.example", "NONE", "alice (uid"] where secret != theirs.prefix(8) {
                    XCTAssertFalse(seen.stderr.contains(secret), "\(what) names \(secret): \(seen.summary)")
                }
            }
        }
        // Nothing of alice's changed.
        XCTAssertEqual(try sandbox.succeed(["list", "--user", "alice", "--json"]).array().count, 2)
    }

    /// Finding 3: the kiosk account relabels alice's identity as mallory by binding a PIN key for it with --username;
    /// mallory (a login of her own) still cannot reach alice's NONE key, and alice's identity keeps its name.
    func testABindsUsernameNeverMovesAnIdentityIntoAnotherPersonsScope() throws {
        try startAgent(policy: try String(contentsOf: PolicyTemplateTests.template, encoding: .utf8))
        let relabel = try run("kiosk", ["bind", "--user", "alice", "--username", "mallory", "--auth-type", "app-pin",
                                        "--pin-stdin", "--issuer", "https://kiosk.example"], stdin: "135790\n")
        XCTAssertEqual(relabel.status, 0, relabel.summary)
        let users = try sandbox.succeed(["users", "--json"]).array()
        let alice = try XCTUnwrap(users.first { $0["userId"] as? String == "alice" })
        XCTAssertTrue(alice["username"] is NSNull, "alice's identity keeps its username: \(alice)")
        XCTAssertEqual(alice["owner"] as? String, "alice")
        for name in ["alice", "mallory"] {
            let attempt = try run("mallory", ["sign", "--user", name])
            XCTAssertEqual(attempt.status, 66, attempt.summary)
        }
        XCTAssertEqual(try run("mallory", ["users", "--json"]).array().count, 0)
    }

    /// Every hint in a refusal names a command the caller may run: each `keymgr …` a refusal under the shipped policy
    /// suggests is run as the same person, and the policy lets it run (no 77).
    func testEveryHintNamesACommandTheCallerMayRun() throws {
        try startAgent(policy: try String(contentsOf: PolicyTemplateTests.template, encoding: .utf8))
        let refusals: [(String, [String])] = [
            ("bob", ["list", "--user", "zed"]), ("bob", ["sign", "--user", "zed"]), ("bob", ["sign", "--user", "alice"]),
            ("bob", ["sign", "--kid", UUID().uuidString]), ("bob", ["revoke", "--kid", UUID().uuidString, "--yes"]),
            ("mallory", ["sign", "--user", "mallory"]), ("kiosk", ["sign", "--user", "nobody-here"]),
        ]
        var hints = 0
        for (login, arguments) in refusals {
            let refused = try run(login, arguments)
            XCTAssertNotEqual(refused.status, 0, refused.summary)
            for hint in refused.stderr.components(separatedBy: "`keymgr ").dropFirst() {
                guard let end = hint.firstIndex(of: "`") else { continue }
                let suggested = hint[..<end].split(separator: " ").map(String.init)
                guard !suggested.contains(where: { $0.contains("…") || $0 == "NAME" }) else { continue }
                hints += 1
                let bind = suggested.first == "bind"
                let tried = try run(login, suggested + (bind ? ["--auth-type", "app-pin", "--pin-stdin"] : []), stdin: "246813\n")
                XCTAssertNotEqual(tried.status, 77, "\(login) was told to run `keymgr \(suggested.joined(separator: " "))`: \(tried.summary)")
            }
        }
        XCTAssertGreaterThan(hints, 2)
    }

    // MARK: Another person's PIN key

    func testAnotherPersonsPINKeyNeedsItsPINUnlessTheRuleAllowsEverything() throws {
        try startAgent(policy: """
            [[rule]]
            who = ["group:helpdesk"]
            may = ["revoke", "rebind", "list"]
            for = "*"
            """)
        assertDenied(try run("hank", ["revoke", "--user", "bob", "--yes"]), "another person's PIN key")
        let wrong = try run("hank", ["revoke", "--user", "bob", "--yes", "--pin-stdin"], stdin: "000111\n")
        XCTAssertEqual(wrong.status, 77, wrong.summary)
        XCTAssertTrue(wrong.stderr.contains("wrong PIN") || wrong.stderr.contains("attempt"), wrong.summary)
        // Rebind asks for the key's PIN first, then (for a PIN key) the new one.
        let rebound = try run("hank", ["rebind", "--user", "bob", "--auth-type", "none", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(rebound.status, 0, rebound.summary)
        // A NONE key needs no PIN.
        let revoked = try run("hank", ["revoke", "--user", "bob", "--yes"])
        XCTAssertEqual(revoked.status, 0, revoked.summary)
        // Not in the group: no rule.
        assertDenied(try run("alice", ["list"]), "no rule of")
    }

    // MARK: Wrong PINs from a shared account (issue 32, finding 6)

    /// The kiosk's wrong PINs are counted across everyone's keys: after 3 within 10 minutes its next PIN attempt is
    /// 75 with the time to retry, and spends nothing (not even with the right PIN). bob's own attempts on his own key
    /// are not held back. `list --json` and `status` show the attempts left and the throttle.
    func testASharedAccountCannotBurnOtherPeoplesPINs() throws {
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "735184\n")
        try startAgent(policy: """
            [[rule]]
            who = ["group:keymgr-admins"]
            may = ["*"]

            [[rule]]
            who = ["user:kiosk"]
            may = ["list", "sign", "status"]
            for = "*"
            authTypes = ["APPLICATION_PIN"]

            [[rule]]
            who = ["*"]
            may = ["sign", "list", "status"]
            for = "self"
            """)
        func sign(_ login: String, _ user: String, _ pin: String) throws -> Outcome {
            try run(login, ["sign", "--user", user, "--challenge", "c", "--pin-stdin"], stdin: pin + "\n")
        }
        func attemptsLeft(_ user: String) throws -> Int? {
            let keys = try run("erin", ["list", "--json", "--user", user])
            XCTAssertEqual(keys.status, 0, keys.summary)
            return try keys.array().first?["pinAttemptsLeft"] as? Int
        }
        XCTAssertEqual(try attemptsLeft("bob"), 5)
        XCTAssertNil(try run("erin", ["list", "--json", "--user", "alice"]).array().first?["pinAttemptsLeft"], "a NONE key has none")

        for (user, pin) in [("bob", "111111"), ("carol", "222222"), ("bob", "333333")] {
            let wrong = try sign("kiosk", user, pin)
            XCTAssertEqual(wrong.status, 77, wrong.summary)
            XCTAssertTrue(wrong.stderr.contains("wrong PIN"), wrong.summary)
        }
        XCTAssertEqual(try attemptsLeft("bob"), 3)
        XCTAssertEqual(try attemptsLeft("carol"), 4)
        // The fourth attempt waits, whoever's key and even with the right PIN: nothing is tried or spent.
        for (user, pin) in [("carol", "735184"), ("bob", "444444")] {
            let held = try sign("kiosk", user, pin)
            XCTAssertEqual(held.status, 75, held.summary)
            XCTAssertTrue(held.stderr.contains("kiosk (uid 2004) gave 3 wrong PINs") && held.stderr.contains("try again after"),
                          held.summary)
            XCTAssertTrue(held.stderr.contains("nothing was tried"), held.summary)
        }
        XCTAssertEqual(try attemptsLeft("bob"), 3)
        XCTAssertEqual(try attemptsLeft("carol"), 4)

        // bob, as himself, on his own key: the key's own rule only.
        let own = try sign("bob", "bob", "482916")
        XCTAssertEqual(own.status, 0, own.summary)
        XCTAssertEqual(try attemptsLeft("bob"), 5, "a right PIN resets the key's counter")
        let ownWrong = try sign("bob", "bob", "999999")
        XCTAssertEqual(ownWrong.status, 77, ownWrong.summary)
        XCTAssertEqual(try sign("bob", "bob", "482916").status, 0)

        // status: the kiosk sees its own throttle; an administrator (erin) sees every PIN key's attempts left.
        let kioskStatus = try run("kiosk", ["status", "--json"])
        XCTAssertEqual(kioskStatus.status, 0, kioskStatus.summary)
        let throttle = try XCTUnwrap(try kioskStatus.object()["pinThrottle"] as? [[String: Any]])
        XCTAssertEqual(throttle.count, 1, "\(throttle)")
        XCTAssertEqual(throttle.first?["login"] as? String, "kiosk")
        XCTAssertNotNil(throttle.first?["blockedUntil"] as? String, "\(throttle)")
        let bobStatus = try XCTUnwrap(try run("bob", ["status", "--json"]).object())
        XCTAssertEqual((bobStatus["pinThrottle"] as? [Any])?.count, 0, "bob is not held back: \(bobStatus)")
        let rootStatus = try run("erin", ["status", "--json"])
        let pinKeys = try XCTUnwrap(try rootStatus.object()["pinKeys"] as? [[String: Any]])
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: pinKeys.compactMap { key in
            (key["userId"] as? String).map { ($0, key["attemptsLeft"] as? Int ?? -1) } }), ["bob": 5, "carol": 4])
        let human = try run("erin", ["status"])
        XCTAssertTrue(human.stdout.contains("4 wrong PINs left"), human.stdout)
        let audit = try run("erin", ["audit", "--event", "pin.throttled", "--json"])
        XCTAssertEqual(try audit.array().count, 1, audit.summary)
    }

    // MARK: uid:, a list of users, [self]

    func testUidSubjectUserListAndSelfTable() throws {
        try startAgent(policy: """
            [[rule]]
            who = "uid:2005"
            may = ["sign", "list"]
            for = ["alice"]

            [[rule]]
            who = ["user:bob"]
            may = ["list"]
            for = "self"

            [self]
            bob = "alice"
            """)
        let signed = try run("mallory", ["sign", "--user", "alice"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try run("mallory", ["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n").status, 66,
                       "a user the rule does not list is one that does not exist")
        XCTAssertEqual(try run("mallory", ["list", "--json"]).array().compactMap { $0["userId"] as? String }, ["alice"])
        assertDenied(try run("alice", ["sign", "--user", "alice"]), "no rule of")
        // bob's own user, and the one [self] maps his login to.
        let bobs = try run("bob", ["list", "--json"])
        XCTAssertEqual(bobs.status, 0, bobs.summary)
        XCTAssertEqual(Set(try bobs.array().compactMap { $0["userId"] as? String }), ["alice", "bob"])
        let users = try run("bob", ["users", "--json"])
        XCTAssertEqual(users.status, 77, "users is not in bob's may: \(users.summary)")
    }

    // MARK: The agent's start

    func testTheAgentRefusesAnUnsafeOrInvalidPolicy() throws {
        let path = sandbox.root.appendingPathComponent("bad.toml").path
        try "[[rule]]\nwho = [\"*\"]\nmay = [\"sing\"]\n".write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, 0o644), 0)
        let invalid = try sandbox.keymgr(["agent", "--socket", socket, "--policy", path])
        XCTAssertEqual(invalid.status, 78, invalid.summary)
        XCTAssertTrue(invalid.stderr.contains("\(path):3: may names \"sing\", which is not a keymgr command"), invalid.summary)

        try "[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\n".write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, 0o666), 0)
        let unsafe = try sandbox.keymgr(["agent", "--socket", socket, "--policy", path])
        XCTAssertEqual(unsafe.status, 78, unsafe.summary)
        XCTAssertTrue(unsafe.stderr.contains("writable by its group or by others"), unsafe.summary)

        let missing = try sandbox.keymgr(["agent", "--socket", socket, "--policy", path + ".missing"])
        XCTAssertEqual(missing.status, 78, missing.summary)
    }

    // MARK: Support

    var policyPath: String { sandbox.root.appendingPathComponent("policy.toml").path }

    func assertDenied(_ outcome: Outcome, _ expected: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(outcome.status, 77, outcome.summary, file: file, line: line)
        XCTAssertTrue(outcome.stderr.contains(expected), outcome.summary, file: file, line: line)
        XCTAssertTrue(outcome.stderr.hasPrefix("keymgr: "), outcome.summary, file: file, line: line)
    }

    func startAgent(policy: String) throws {
        try policy.write(toFile: policyPath, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(policyPath, 0o644), 0)
        _ = FileManager.default.createFile(atPath: agentLog.path, contents: nil)
        let log = try FileHandle(forWritingTo: agentLog)
        let process = Process()
        process.executableURL = Sandbox.binary
        process.arguments = ["agent", "--home", sandbox.home.path, "--socket", socket, "--policy", policyPath]
        var environment = sandbox.environment
        environment["LD_PRELOAD"] = "libnss_wrapper.so"
        environment["NSS_WRAPPER_PASSWD"] = sandbox.root.appendingPathComponent("passwd").path
        environment["NSS_WRAPPER_GROUP"] = sandbox.root.appendingPathComponent("group").path
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        agent = process
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: socket) && process.isRunning && Date() < deadline { usleep(10_000) }
        guard FileManager.default.fileExists(atPath: socket) else {
            XCTFail("the agent did not start: \(String(decoding: (try? Data(contentsOf: agentLog)) ?? Data(), as: UTF8.self))")
            throw XCTSkip("no agent")
        }
    }

    func stopAgent() {
        guard let agent, agent.isRunning else { return }
        agent.terminate()
        agent.waitUntilExit()
    }

    /// `keymgr ARGUMENTS` through the agent, as `login` (their uid, gid and groups).
    func run(_ login: String, _ arguments: [String], stdin: String = "") throws -> Outcome {
        let person = try XCTUnwrap(Self.people.first { $0.login == login })
        let groups = ([person.uid] + person.groups).map(String.init).joined(separator: ",")
        return try sandbox.run(URL(fileURLWithPath: "/usr/bin/setpriv"),
                               ["--reuid", "\(person.uid)", "--regid", "\(person.uid)", "--groups", groups,
                                "/usr/bin/python3", client, socket] + arguments, stdin: stdin)
    }

    /// A minimal client of the agent's protocol (version 1): one request frame with stdin, stdout and stderr passed,
    /// one response frame; the agent's own error goes to stderr as the CLI prints it.
    static let clientScript = """
        import json, socket, struct, sys
        path, arguments = sys.argv[1], sys.argv[2:]
        body = json.dumps({"version": 1, "arguments": arguments, "fds": [0, 1, 2], "terminal": False}).encode()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(path)
        socket.send_fds(connection, [struct.pack(">I", len(body)) + body], [0, 1, 2])
        def exactly(count):
            data = b""
            while len(data) < count:
                chunk = connection.recv(count - len(data))
                if not chunk:
                    sys.exit("the agent closed the connection without an answer")
                data += chunk
            return data
        (length,) = struct.unpack(">I", exactly(4))
        response = json.loads(exactly(length))
        if response.get("error"):
            sys.stderr.write("keymgr: " + response["error"]["message"] + "\\n")
        sys.exit(response["status"])

        """
}
