import Foundation
import XCTest

/// Files named by options reach the agent as descriptors keymgr's client opened with the caller's own rights (issue
/// 32, "Files with the caller's rights"): the agent reads and writes through them and never opens the names for the
/// caller, so the kernel decides (ACLs included), and an error says whose rights failed. The agent runs as an
/// ordinary user of its own here (uid 4343, as `keymgr` does in a deployment); the people are root and alice (4242).
final class FilesByDescriptorTests: XCTestCase {
    var harness: AgentHarness!
    var sandbox: Sandbox { harness.sandbox }
    /// The agent's user.
    let agentUID: UInt32 = 4343
    let alice: UInt32 = 4242
    /// An audit archive (written before the agent started), root's own, mode 0600.
    var archive: URL { sandbox.root.appendingPathComponent("archive.jsonl") }
    /// A directory of root's (0755) for the test's files.
    var files: URL { sandbox.root.appendingPathComponent("files") }

    override func setUpWithError() throws {
        harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice"]))
        try sandbox.bind("alice")
        try sandbox.succeed(["sign", "--user", "alice"])
        try sandbox.succeed(["audit", "archive", "--before", "2999-01-01", "--output", archive.path])
        // The agent's store and socket directory are its user's, as in a deployment; the files below are not.
        let chown = try sandbox.run(URL(fileURLWithPath: "/bin/chown"), ["-R", "\(agentUID):\(agentUID)", sandbox.root.path])
        XCTAssertEqual(chown.status, 0, chown.summary)
        XCTAssertEqual(Glibc.chown(archive.path, 0, 0), 0)
        XCTAssertEqual(chmod(archive.path, 0o600), 0)
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: false)
        XCTAssertEqual(chmod(files.path, 0o755), 0)
        try harness.start(as: agentUID)
    }

    override func tearDownWithError() throws {
        harness.stop()
        harness = nil
    }

    /// A file at `name` in `files` with `text`, owned by `owner`, with `mode`.
    private func file(_ name: String, _ text: String, owner: UInt32, mode: mode_t) throws -> URL {
        let url = files.appendingPathComponent(name)
        try text.write(to: url, atomically: false, encoding: .utf8)
        XCTAssertEqual(Glibc.chown(url.path, owner, owner), 0)
        XCTAssertEqual(chmod(url.path, mode), 0)
        return url
    }

    private func setfacl(_ arguments: [String]) throws {
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/setfacl"), arguments)
        XCTAssertEqual(outcome.status, 0, outcome.summary)
    }

    /// Finding 8: root names a file only root can read; the agent, whose user cannot read it, reads it through the
    /// descriptor root's client opened.
    func testAFileOnlyRootCanReadNamedByRootThroughTheAgentIsRead() throws {
        let verified = try harness.request(["audit", "verify", "--input", archive.path])
        XCTAssertEqual(verified.status, 0, verified.summary + harness.agentOutput)
        let metadata = try file("metadata.json", "{\"client_name\":\"kiosk\"}", owner: 0, mode: 0o600)
        let registered = try harness.request(["dcr", "register", "--user", "alice", "--metadata", metadata.path, "--json"])
        XCTAssertFalse(registered.stderr.contains("cannot read"), registered.summary)
        XCTAssertEqual(registered.status, 78, "past the file, on to the server, which is not configured: " + registered.summary)
    }

    /// The credential file `server set` names is kept as a path and read by the agent's user at each sync: root's
    /// own file is refused saying so, and accepted once that user may read it (here by an ACL).
    func testACredentialFileTheAgentsUserCannotReadIsRefusedNamingThatUser() throws {
        let token = try file("admin.token", "secret-admin-token\n", owner: 0, mode: 0o600)
        let set = ["server", "set", "--dialect", "pingam", "--base-url", "https://am.example.com/am",
                   "--credential-file", token.path, "--json"]
        let refused = try harness.request(set)
        try assertJSONError(refused, status: 65, code: "badInput")
        XCTAssertTrue(refused.stderr.contains("you may read \(token.path), but sync reads it later as the agent's user "
            + "mallory (uid \(agentUID)), who cannot (Permission denied)"), refused.summary)
        try setfacl(["-m", "u:\(agentUID):r", token.path])
        let saved = try harness.request(set)
        XCTAssertEqual(saved.status, 0, saved.summary + harness.agentOutput)
        XCTAssertEqual(try saved.object()["credentialFile"] as? String, token.path)
        XCTAssertFalse(saved.stdout.contains("secret-admin-token"))
    }

    /// The attack: a file the agent's user may read and the caller may not is refused, naming the caller's rights; the
    /// agent never reads for a person what that person could not.
    func testAFileTheAgentsUserMayReadButTheCallerMayNotIsRefusedNamingTheCaller() throws {
        let agents = try file("agents.json", "{\"client_name\":\"x\"}", owner: agentUID, mode: 0o600)
        let denied = "you (uid \(alice)) cannot read \(agents.path): Permission denied"
        for command in [["audit", "verify", "--input", agents.path, "--json"],
                        ["audit", "verify", "--journal", agents.path, "--json"],
                        ["dcr", "register", "--user", "alice", "--metadata", agents.path, "--json"],
                        ["dcr", "register", "--user", "alice", "--software-id", "t", "--initial-access-token-file",
                         agents.path, "--json"],
                        ["server", "set", "--dialect", "pingam", "--base-url", "https://am.example.com/am",
                         "--credential-file", agents.path, "--json"]] {
            let refused = try harness.request(command, as: alice)
            try assertJSONError(refused, status: 65, code: "badInput")
            XCTAssertTrue(refused.stderr.contains(denied), "\(command): \(refused.summary)")
        }
    }

    /// An ACL that lets the caller read a file its mode bits do not is honoured: the kernel decides, not a check of
    /// the mode bits.
    func testAnACLGrantingTheCallerReadIsHonoured() throws {
        try setfacl(["-m", "u:\(alice):r", archive.path])
        let verified = try harness.request(["audit", "verify", "--input", archive.path], as: alice)
        XCTAssertEqual(verified.status, 0, verified.summary + harness.agentOutput)
        // And one that takes it away from a file the mode bits open to everyone.
        let open = try file("open.jsonl", try String(contentsOf: archive, encoding: .utf8), owner: 0, mode: 0o644)
        try setfacl(["-m", "u:\(alice):-", open.path])
        let refused = try harness.request(["audit", "verify", "--input", open.path], as: alice)
        XCTAssertEqual(refused.status, 65, refused.summary)
        XCTAssertTrue(refused.stderr.contains("you (uid \(alice)) cannot read \(open.path): Permission denied"), refused.summary)
    }

    /// `audit archive --output` through the agent: the client creates the file, so it is the caller's, in a directory
    /// only the caller may write; nothing to archive, or a refusal, leaves no file behind; an existing file is 64.
    func testAnArchiveThroughTheAgentIsCreatedByTheCaller() throws {
        let own = files.appendingPathComponent("alice")
        try FileManager.default.createDirectory(at: own, withIntermediateDirectories: false)
        XCTAssertEqual(Glibc.chown(own.path, alice, alice), 0)
        XCTAssertEqual(chmod(own.path, 0o700), 0)
        XCTAssertEqual(try harness.request(["sign", "--user", "alice"], as: alice).status, 0)
        let output = own.appendingPathComponent("audit.jsonl")
        let archived = try harness.request(["audit", "archive", "--before", "2999-01-01", "--output", output.path, "--json"],
                                           as: alice)
        XCTAssertEqual(archived.status, 0, archived.summary + harness.agentOutput)
        XCTAssertGreaterThan(try archived.object()["entries"] as? Int ?? 0, 0, archived.summary)
        let attributes = try FileManager.default.attributesOfItem(atPath: output.path)
        XCTAssertEqual((attributes[.ownerAccountID] as? NSNumber)?.uint32Value, alice)
        XCTAssertEqual(attributes[.posixPermissions] as? Int, 0o600)
        XCTAssertEqual(try harness.request(["audit", "verify", "--input", output.path], as: alice).status, 0)

        let existing = try harness.request(["audit", "archive", "--before", "2999-01-01", "--output", output.path], as: alice)
        XCTAssertEqual(existing.status, 64, existing.summary)
        XCTAssertTrue(existing.stderr.contains("you (uid \(alice)) cannot create \(output.path): File exists"), existing.summary)

        let nothing = own.appendingPathComponent("nothing.jsonl")
        let empty = try harness.request(["audit", "archive", "--before", "2000-01-01", "--output", nothing.path], as: alice)
        XCTAssertEqual(empty.status, 0, empty.summary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: nothing.path), "nothing archived: no file left")
        // uid 4343 (not in the policy) may create the file in its own directory; the agent refuses the archive.
        let refusedOutput = sandbox.root.appendingPathComponent("refused.jsonl")
        let denied = try harness.request(["audit", "archive", "--before", "2999-01-01", "--output", refusedOutput.path],
                                         as: agentUID)
        XCTAssertEqual(denied.status, 77, denied.summary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: refusedOutput.path), "refused: no file left")
    }
}
