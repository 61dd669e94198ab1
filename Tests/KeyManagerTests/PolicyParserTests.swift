import Foundation
@testable import KeyManager
import XCTest

/// The agent's policy file: its TOML (read by TOMLKit), what is refused (with the line of the first mistake and what
/// to write instead), and the checks on the file itself.
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

    func testAcceptsAPolicy() throws {
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
        // TOMLKit's refusals, on the line it names.
        assertRefused("[[rule]]\nwho = [\"*\" ~\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [\"*\" \"user:a\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [\"*]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [\"\\x\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [\"\\u12\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho =\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho [\"*\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [\"*\"] may = [\"sign\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule\n", line: 1, "correct the TOML there")
        // toml++ asserts on these (a debug build aborted): refused before it reads them.
        for nameless in ["[,a\"b", "[ .", "[[\n]]", "[#", "[é]", "[[ #]]", "[\r\n"] {
            assertRefused("[[rule]]\nwho = \"*\"\nmay = \"list\"\n" + nameless + "\n", line: 4, "a table header needs a name")
        }
        for stray in ["[}]", "[1, }]", "[ }"] {
            assertRefused("[[rule]]\nwho = \"*\"\nmay = " + stray + "\n", line: 3, "a } inside an array")
        }
        assertRefused("[[rule]]\nwho = \"*\"\nmay = [\n}\n]\n", line: 4, "a } inside an array")
        assertRefused("[[rule]]\nwho = [\"a\tb\u{01}\"]\n", line: 2, "correct the TOML there")
        assertRefused("[[rule]]\nwho = [,]\n", line: 2, "correct the TOML there")
        // A comma missing inside a long array is the mistake of its own line.
        assertRefused("[[rule]]\nwho = [\n  \"*\",\n  \"a\"\n  \"b\",\n]\n", line: 5, "correct the TOML there")
        // An unclosed `[` is the mistake of its own line, not of the line after it (issue 32, finding 7), where TOML
        // notices it.
        assertRefused("[[rule]]\nwho = [\"*\"\nmay = [\"sign\"]\n", line: 2, "the array of who is not closed: end it with ]")
        assertRefused("[[rule]]\r\nwho = [\"*\"\r\nmay = [\"sign\"]\r\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\n  \"*\", # anyone\n  \"user:a\"\nmay = [\"sign\"]\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\"*\", \n[[rule]]\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\"*\",\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = [\"*\",\n# the end\n\n", line: 2, "the array of who is not closed")
        assertRefused("[[rule]]\nwho = \"\"\"user:a\n\nmay = [\"sign\"]\n", line: 2,
                      "the multi-line string of who is not closed: end it with \"\"\"")
        // Stricter than TOML: a NUL (TOMLKit's strings end there).
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\\u0000\"]\n", line: 3, "NUL")
        assertRefused("[[rule]]\nwho = [\"*\"]\n\nmay = [\"sign\u{0}\"]\n", line: 4, "NUL")
        // Values TOML has and the policy does not take.
        assertRefused("[[rule]]\nwho = 1\n", line: 2, "numbers, booleans and dates")
        assertRefused("[[rule]]\nwho = true\n", line: 2, "numbers, booleans and dates")
        assertRefused("[[rule]]\nwho = 1979-05-27\n", line: 2, "numbers, booleans and dates")
        assertRefused("[[rule]]\nwho = { a = \"b\" }\n", line: 2, "inline tables")
        assertRefused("[[rule]]\nmay = [\"sign\"]\nwho.a = \"b\"\n", line: 3, "dotted keys")
        assertRefused("[[rule]]\nwho = [[\"*\"]]\n", line: 2, "nested arrays")
        assertRefused("[[rule]]\nwho = [\"*\", 2]\n", line: 2, "holds strings only, not a number")
        assertRefused("[[rule]]\nrule.who = [\"*\"]\n", line: 2, "unknown key rule in a [[rule]]")
        assertRefused("\n\nwho = [\"*\"]\n", line: 3, "comes before any table")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\n[rules.x]\n", line: 4, "unknown table [rules]")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\n[rule.x]\n", line: 4, "unknown key x in a [[rule]]")
    }

    /// What TOML has beyond the hand-written subset the policy was read with before reads as TOML reads it
    /// (PolicyTOMLDifferentialTests checks that against tomllib): literal and multi-line strings, an array of inline
    /// tables for the rules.
    func testTOMLReadsAsTOML() throws {
        let policy = try parse("""
            [[rule]]
            who = ['user:root', "group:wheel"]
            may = \"\"\"
            sign\"\"\"
            [self]
            'j.doe' = '''x\\y'''
            """)
        XCTAssertEqual(policy.rules.first?.who, [.user("root"), .group("wheel")])
        XCTAssertEqual(policy.rules.first?.may, ["sign"])
        XCTAssertEqual(policy.selfMap, ["j.doe": ["x\\y"]])
        let inline = try parse("rule = [{ who = \"*\", may = [\"list\"] }, { who = \"uid:0\", may = \"*\" }]\n")
        XCTAssertEqual(inline.rules.map(\.who), [[.anyone], [.uid(0)]])
        XCTAssertEqual(inline.rules.map(\.line), [1, 1])
    }

    /// TOMLKit hands tables over sorted by key; the mistake reported is still the first in the file.
    func testTheFirstMistakeInTheFileIsReported() {
        // authTypes sorts before may, but may is wrong first.
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"nope\"]\nauthTypes = [\"x\"]\n", line: 3, "may names \"nope\"")
        // rule sorts before self.
        assertRefused("[self]\nx = []\n[[rule]]\nwho = [\"bad\"]\nmay = [\"sign\"]\n", line: 2, "[self] maps x to nothing")
        // A rule without may (its header) comes after its own lines, before the next rule's.
        assertRefused("[[rule]]\nwho = [\"*\"]\n[[rule]]\nwho = [\"bad\"]\nmay = [\"sign\"]\n", line: 1, "has no may")
        assertRefused("[[rule]]\nwho = [\"bad\"]\n[[rule]]\nmay = [\"sign\"]\n", line: 2, "is not a subject")
        // A header inside a multi-line string is text: the second rule is on line 6.
        assertRefused("[self]\nx = \"\"\"\n[[rule]]\n\"\"\"\n\n[[rule]]\nwho = [\"*\"]\nmay = [\"nope\"]\n", line: 8, "may names \"nope\"")
    }

    func testRuleLinesAreTheirHeaders() throws {
        let policy = try parse("[self]\nx = \"\"\"\n[[rule]]\n\"\"\"\n\n[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\n\n[[ rule ]] # b\nwho = \"*\"\nmay = \"list\"\n")
        XCTAssertEqual(policy.rules.map(\.line), [6, 10])
    }

    func testStructureErrors() {
        assertRefused("[rule]\nwho = [\"*\"]\nmay = [\"sign\"]\n", line: 1, "write [[rule]]")
        assertRefused("[[self]]\n", line: 1, "write [self]")
        assertRefused("[self]\n[self]\n", line: 2, "correct the TOML there")
        assertRefused("[[rules]]\n", line: 1, "unknown table [[rules]]")
        assertRefused("[[rule]]\nwho = [\"*\"]\nmay = [\"sign\"]\nwho = [\"user:a\"]\n", line: 4, "correct the TOML there")
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
