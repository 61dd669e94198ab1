import Foundation
import SWTPMSupport
import XCTest

/// `doctor`'s server check (issue 36) against the reference server on 127.0.0.1: each thing broken on its own (the
/// credential, the clock, the server itself) is the line that fails, naming it and the one thing to do.
final class DoctorServerTests: ServerTestCase {
    /// `doctor --json`'s checks by name, and its exit status.
    private func doctor() throws -> (status: Int32, checks: [String: [String: Any]]) {
        let outcome = try sandbox.keymgr(["doctor", "--json", "--timeout", "5"])
        let checks = try XCTUnwrap(try outcome.object()["checks"] as? [[String: Any]], outcome.summary)
        return (outcome.status, Dictionary(uniqueKeysWithValues: checks.map { ($0["name"] as? String ?? "?", $0) }))
    }

    private func assertServerFails(_ message: String, fix: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let (status, checks) = try doctor()
        XCTAssertEqual(status, 1, "\(checks)", file: file, line: line)
        XCTAssertEqual(checks.filter { $0.value["ok"] as? Bool == false }.map(\.key), ["server"], "\(checks)", file: file, line: line)
        let check = try XCTUnwrap(checks["server"], file: file, line: line)
        XCTAssertTrue((check["message"] as? String ?? "").contains(message), "\(check)", file: file, line: line)
        XCTAssertTrue((check["fix"] as? String ?? "").contains(fix), "\(check)", file: file, line: line)
    }

    func testAServerThatAnswersAcceptsTheCredentialAndAgreesOnTheTimeIsOkAndEachBreakIsNamed() throws {
        try start(users: ["alice"], ownServer: true)
        try sandbox.succeed(["sync"])
        let (status, checks) = try doctor()
        XCTAssertEqual(status, 0, "\(checks)")
        let said = try XCTUnwrap(checks["server"]?["message"] as? String, "\(checks)")
        XCTAssertTrue(said.contains("accepts the admin credential") && said.contains("clocks agree"), said)
        // The probe names nobody: the listing asked about an identity nobody has.
        XCTAssertFalse(said.contains("alice"), said)

        // A credential the server refuses.
        let token = try String(contentsOf: server.tokenFile, encoding: .utf8)
        try "not-the-admin-token\n".write(to: server.tokenFile, atomically: false, encoding: .utf8)
        try assertServerFails("refused the admin credential (401)", fix: "--credential-file")
        try token.write(to: server.tokenFile, atomically: false, encoding: .utf8)
        XCTAssertEqual(try doctor().status, 0)

        // No server at the address.
        self.server.stop()
        try assertServerFails("cannot be reached", fix: "keymgr server show")
    }

    func testAServerWhoseClockIsTenMinutesAheadIsNamed() throws {
        try start(users: ["alice"], serverArguments: ["--clock-offset", "600"])
        try sandbox.succeed(["sync"])
        try assertServerFails("s behind the clock of the server", fix: "timedatectl")
        // The server's Date has whole seconds, so the offset read back is 600 give or take one.
        let message = try XCTUnwrap(try doctor().checks["server"]?["message"] as? String)
        let seconds = message.split(separator: " ").firstIndex(of: "behind").flatMap { Int(message.split(separator: " ")[$0 - 2]) }
        XCTAssertTrue((599...601).contains(seconds ?? 0), message)
    }
}

/// `doctor`'s agent check and its per-person view through the agent: an administrator sees everything, a person
/// what concerns them.
final class DoctorThroughTheAgentTests: XCTestCase {
    private var tpm: SoftwareTPM!
    private var replacement: SoftwareTPM?
    private var harness: AgentHarness!

    override func tearDownWithError() throws {
        harness?.stop()
        harness = nil
        replacement = nil
        tpm = nil
    }

    private func checks(_ outcome: Outcome) throws -> [String: [String: Any]] {
        let checks = try XCTUnwrap(try outcome.object()["checks"] as? [[String: Any]], outcome.summary)
        return Dictionary(uniqueKeysWithValues: checks.map { ($0["name"] as? String ?? "?", $0) })
    }

    func testAPolicyThatNoLongerLoadsIsNamedAndAPersonSeesOnlyTheirOwnKeys() throws {
        tpm = try SoftwareTPM()
        harness = try AgentHarness(policy: """
            [[rule]]
            who = ["user:root"]
            may = ["*"]

            [[rule]]
            who = ["user:alice"]
            may = ["doctor", "status", "sign"]
            for = "self"

            [self]
            alice = "alice"
            """, initialise: false)
        try harness.sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", tpm.tcti])
        let alice = try XCTUnwrap(try harness.sandbox.bind("alice")["kid"] as? String)
        let mallory = try XCTUnwrap(try harness.sandbox.bind("mallory")["kid"] as? String)
        try harness.start()
        let healthy = try checks(try harness.request(["doctor", "--json"]))
        XCTAssertEqual(healthy["agent"]?["ok"] as? Bool, true, "\(healthy)")
        XCTAssertTrue((healthy["agent"]?["message"] as? String ?? "").contains(harness.socket.path), "\(healthy)")

        // The TPM is replaced: the administrator sees both keys, alice only hers.
        tpm.stop()
        replacement = try SoftwareTPM(socket: tpm.socket)
        let administrator = try harness.request(["doctor", "--json"])
        XCTAssertEqual(administrator.status, 1, administrator.summary)
        let all = try XCTUnwrap(try checks(administrator)["tpm"]?["message"] as? String)
        XCTAssertTrue(all.contains(String(alice.prefix(8))) && all.contains(String(mallory.prefix(8))), all)
        let person = try harness.request(["doctor", "--json"], as: 4242)
        XCTAssertEqual(person.status, 1, person.summary)
        let own = try checks(person)
        let hers = try XCTUnwrap(own["tpm"]?["message"] as? String)
        XCTAssertTrue(hers.contains(String(alice.prefix(8))) && hers.contains("1 key is"), hers)
        XCTAssertFalse(person.stdout.contains(String(mallory.prefix(8))) || person.stdout.contains("mallory"), person.stdout)
        XCTAssertTrue((own["tpm"]?["fix"] as? String ?? "").contains("ask an administrator"), "\(own)")

        // An edit of the policy that would not load: the running agent serves; doctor says the restart would fail.
        try "[[rule]]\nwho = [\"user:root\"\nmay = [\"*\"]\n# user:mallory\n".write(to: harness.policy, atomically: true,
                                                                                    encoding: .utf8)
        let broken = try checks(try harness.request(["doctor", "--json"]))
        let agent = try XCTUnwrap(broken["agent"])
        XCTAssertEqual(agent["ok"] as? Bool, false, "\(agent)")
        XCTAssertTrue((agent["message"] as? String ?? "").contains("\(harness.policy.path):2")
                      && (agent["message"] as? String ?? "").contains("does not load"), "\(agent)")
        XCTAssertTrue((agent["fix"] as? String ?? "").contains("keymgr agent --check-policy \(harness.policy.path)"), "\(agent)")
        // A person is told where, not the line's words (a policy names people), and to ask the administrator.
        let told = try XCTUnwrap(try checks(try harness.request(["doctor", "--json"], as: 4242))["agent"])
        XCTAssertTrue((told["message"] as? String ?? "").contains("\(harness.policy.path):2"), "\(told)")
        XCTAssertFalse((told["message"] as? String ?? "").contains("user:root"), "\(told)")
        XCTAssertTrue((told["fix"] as? String ?? "").contains("administrator"), "\(told)")
    }
}
