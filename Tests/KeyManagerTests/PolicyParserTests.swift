import Foundation
@testable import KeyManager
import XCTest

/// The agent's policy file: the TOML subset it is written in, what is refused (with the line and what to write
/// instead), and the checks on the file itself.
final class PolicyParserTests: XCTestCase {
    static let paths: Set<String> = ["status", "users", "list", "bind", "rebind", "sign", "revoke", "pin change",
                                     "admin revoke", "sync", "token show", "audit"]

    func parse(_ text: String) throws -> AgentPolicy {
        try AgentPolicy(parsing: text, file: "policy.toml", commandPaths: Self.paths)
    }

    /// The error for `text` names `line` and says `expected`.
    func assertRefused(_ text: String, line: Int, _ expected: String, file: StaticString = #filePath, fileLine: UInt = #line) {
        XCTAssertThrowsError(try parse(text), file: file, line: fileLine) { error in
            let failure = error as? KeyManagerError
            XCTAssertEqual(failure?.code, .config, "\(error)", file: file, line: fileLine)
            XCTAssertTrue(failure?.message.hasPrefix("policy.toml:\(line): ") ?? false, "\(error)", file: file, line: fileLine)
            XCTAssertTrue(failure?.message.contains(expected) ?? false, "\(error)", file: file, line: fileLine)
        }
    }

    func testAcceptsTheSubset() throws {
        let policy = try parse("""
            \u{FEFF}# a comment
            [[rule]]   # administrators
            who = ["user:root", "group:keymgr-admins", "uid:0"]
            may = ["*"]

            [[rule]]
            who = "*"
            may = [
              "sign",      # comments inside arrays
              "pin change",
            ]
            for = "self"
            authTypes = ["APPLICATION_PIN", "BIOMETRIC_ONLY"]

            [[rule]]
            who = ["user:kiosk"]
            may = ["list"]
            for = ["alice", "self", "b\\u00e9a \\"q\\""]

            [self]
            jdoe = "john.doe@example.com"
            "odd.login" = ["id=x,ou=user", "y"]
            """)
        XCTAssertEqual(policy.rules.count, 3)
        XCTAssertEqual(policy.rules[0].who, [.user("root"), .group("keymgr-admins"), .uid(0)])
        XCTAssertEqual(policy.rules[0].users, .all)
        XCTAssertEqual(policy.rules[0].line, 2)
        XCTAssertEqual(policy.rules[1].who, [.anyone])
        XCTAssertEqual(policy.rules[1].may, ["sign", "pin change"])
        XCTAssertEqual(policy.rules[1].users, .named(includesSelf: true, names: []))
        XCTAssertEqual(policy.rules[1].authTypes, [.applicationPIN, .biometricOnly])
        XCTAssertEqual(policy.rules[1].line, 6)
        XCTAssertEqual(policy.rules[2].users, .named(includesSelf: true, names: ["alice", "béa \"q\""]))
        XCTAssertEqual(policy.selfMap, ["jdoe": ["john.doe@example.com"], "odd.login": ["id=x,ou=user", "y"]])
    }

    func testCRLFLineEndsCountLines() throws {
        assertRefused("[[rule]]\r\nwho = [\"*\"]\r\nmay = [\"sing\"]\r\n", line: 3, "not a keymgr command")
    }

    func testSyntaxErrorsNameTheLine() {
        assertRefused("[[rule]]\nwho = ['*']\n", line: 2, "literal strings")
        assertRefused("[[rule]]\nwho = \"\"\"*\"\"\"\n", line: 2, "multi-line strings")
        // An unclosed `[` is the mistake of its own line, not of the line after it (issue 32, finding 7).
        assertRefused("[[rule]]\nwho = [\"*\"\nmay = [\"sign\"]\n", line: 2, "the array of who is not closed: end it with ]")
        assertRefused("[[rule]]\nwho = [\n  \"*\", # anyone\n  \"user:a\"\nmay = [\"sign\"]\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\"*\", \n[[rule]]\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\"*\" ~\n", line: 2, "holds strings in double quotes only: unexpected `~`")
        assertRefused("[[rule]]\nwho = [\"*\" \"user:a\"]\n", line: 2, "a comma is missing")
        assertRefused("[[rule]]\nwho = [\"*\",\n", line: 2, "is not closed")
        assertRefused("[[rule]]\nwho = [\"*]\n", line: 2, "not closed on its line")
        assertRefused("[[rule]]\nwho = [\"\\x\"]\n", line: 2, "unknown escape \\x")
        assertRefused("[[rule]]\nwho = [\"\\u12\"]\n", line: 2, "needs 4 hexadecimal digits")
        assertRefused("[[rule]]\nwho = 1\n", line: 2, "numbers, booleans and dates")
        assertRefused("[[rule]]\nwho = true\n", line: 2, "numbers, booleans and dates")
        assertRefused("[[rule]]\nwho = { a = \"b\" }\n", line: 2, "inline tables")
        assertRefused("[[rule]]\nwho = [[\"*\"]]\n", line: 2, "nested arrays")
        assertRefused("[[rule]]\nwho =\n", line: 2, "has no value")
        assertRefused("[[rule]]\nwho [\"*\"]\n", line: 2, "needs `= value`")
        assertRefused("[[rule]]\nrule.who = [\"*\"]\n", line: 2, "dotted keys")
        assertRefused("[[rule]]\nwho = [\"*\"] may = [\"sign\"]\n", line: 2, "unexpected `m` after the value of who: end the line there (one entry per line), then an optional # comment")
        assertRefused("\n\nwho = [\"*\"]\n", line: 3, "comes before any table")
        assertRefused("[[rule\n", line: 1, "is not closed: write [[rule]]")
        assertRefused("[[rule]]\nwho = [\"a\tb\u{01}\"]\n", line: 2, "control character")
        assertRefused("[[rule]]\n[rules.x]\n", line: 2, "dotted table names")
        assertRefused("[[rule]]\nwho = [,]\n", line: 2, "a comma with no string before it")
    }

    func testStructureErrors() {
        assertRefused("[rule]\nwho = [\"*\"]\nmay = [\"sign\"]\n", line: 1, "write [[rule]]")
        assertRefused("[[self]]\n", line: 1, "write [self]")
        assertRefused("[self]\n[self]\n", line: 2, "a second [self] table: put every login name in the one on line 1")
        assertRefused("[[rules]]\n", line: 1, "unknown table [[rules]]")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\nwho = [\"user:a\"]\n", line: 4,
                      "who is given twice in this table (first on line 2)")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\nfor = \"self\"\nauth_types = [\"NONE\"]\n", line: 5,
                      "unknown key auth_types in a [[rule]]: did you mean authTypes?")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\nreason = \"x\"\n", line: 4,
                      "a rule's keys are who, may, for and authTypes")
        assertRefused("# admins\n[[rule]]\nmay = [\"*\"]\n", line: 2, "this [[rule]] has no who")
        assertRefused("[[rule]]\nwho = [\"*\"]\n", line: 1, "this [[rule]] has no may")
        assertRefused("[self]\nalice = []\n", line: 2, "[self] maps alice to nothing")
    }

    func testValueErrors() {
        let rule = "[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\n"
        assertRefused("[[rule]]\nwho = []\nmay = [\"sign\"]\n", line: 2, "who is empty")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = []\n", line: 3, "may is empty")
        for bad in ["user:", "uid:abc", "uid:-1", "uid:99999999999", "group:a b", "root", "users:root", "gid:0"] {
            assertRefused("[[rule]]\nwho = [\"*\", \"\(bad)\"]\nmay = [\"sign\"]\n", line: 2,
                          "who = \"\(bad)\" is not a subject: write \"*\", \"user:NAME\", \"uid:N\" or \"group:NAME\"")
        }
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\", \"pin\"]\n", line: 3,
                      "may names \"pin\", which is not a keymgr command: write \"*\" or command paths")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"pin  change\"]\n", line: 3, "\"pin change\"")
        assertRefused(rule + "for = []\n", line: 4, "for is empty")
        assertRefused(rule + "for = [\"*\", \"alice\"]\n", line: 4, "write for = \"*\" alone")
        assertRefused(rule + "for = [\"\"]\n", line: 4, "not an identity user")
        assertRefused(rule + "authTypes = [\"app-pin\"]\n", line: 4,
                      "authTypes names \"app-pin\": write one or more of \"NONE\", \"APPLICATION_PIN\"")
        assertRefused(rule + "authTypes = []\n", line: 4, "authTypes is empty")
    }

    func testEmptyPolicyDeniesEverything() throws {
        let policy = try parse("# nothing yet\n")
        XCTAssertEqual(policy.decide(caller: AgentCaller(uid: 0, gid: 0, pid: 1, groups: [], login: "root"), operation: "status"),
                       .denied(reason: "no rule of policy.toml lets root (uid 0) run `keymgr status`: ask the device's administrator if you need it"))
    }

    // MARK: The file

    var scratch: URL!

    override func setUpWithError() throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-policy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    func write(_ text: String, mode: mode_t = 0o644, owner: uid_t? = nil) throws -> String {
        let path = scratch.appendingPathComponent("policy.toml").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(chmod(path, mode), 0)
        if let owner { XCTAssertEqual(chown(path, owner, getegid()), 0, "the test needs to run as root to chown") }
        return path
    }

    let valid = "[[rule]]\nwho = [\"*\"]\nmay = [\"status\"]\n"

    func testLoadChecksTheFile() throws {
        let me = geteuid()
        let path = try write(valid)
        XCTAssertEqual(try AgentPolicy.load(path: path, agentUID: me, commandPaths: Self.paths).rules.count, 1)
        XCTAssertEqual(try AgentPolicy.load(path: path, agentUID: me, commandPaths: Self.paths).file, path)

        for mode: mode_t in [0o664, 0o646, 0o666] {
            _ = try write(valid, mode: mode)
            assertLoadRefused(path, agentUID: me, "writable by its group or by others")
        }
        // Owned by another user who is neither root nor the agent's.
        _ = try write(valid, owner: 4242)
        assertLoadRefused(path, agentUID: 4343, "is owned by uid 4242: only root or the agent's user (uid 4343)")
        XCTAssertNoThrow(try AgentPolicy.load(path: path, agentUID: 4242, commandPaths: Self.paths))
        // Root owns it: any agent.
        _ = try write(valid, owner: 0)
        XCTAssertNoThrow(try AgentPolicy.load(path: path, agentUID: 4343, commandPaths: Self.paths))

        assertLoadRefused(scratch.path, agentUID: me, "is not a regular file")
        assertLoadRefused(scratch.appendingPathComponent("missing.toml").path, agentUID: me, "cannot read the agent's policy")
        // An error inside the file names the file's path and line.
        let bad = try write("[[rule]]\nwho = [\"*\"]\nmay = [\"nope\"]\n")
        assertLoadRefused(bad, agentUID: me, "\(bad):3: may names \"nope\"")
        // Not UTF-8.
        let path2 = scratch.appendingPathComponent("latin1.toml").path
        try Data([0x23, 0xE9, 0x0A]).write(to: URL(fileURLWithPath: path2))
        assertLoadRefused(path2, agentUID: me, "not valid UTF-8")
    }

    func assertLoadRefused(_ path: String, agentUID: UInt32, _ expected: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try AgentPolicy.load(path: path, agentUID: agentUID, commandPaths: Self.paths), file: file, line: line) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .config, file: file, line: line)
            XCTAssertTrue("\(error)".contains(expected), "\(error)", file: file, line: line)
        }
    }
}
