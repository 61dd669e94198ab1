import Foundation
import XCTest

/// Issue 32, "A person can see the device": `--user <TAB>` and `--kid <TAB>` work through the agent, limited to what
/// the person may see under the shipped policy.
extension PolicyProcessTests {
    /// What the shell would offer `login` for `keymgr <command> <option> <word>` through the agent.
    func agentCompletes(_ login: String, _ command: String, _ option: String, _ word: String) throws -> [String] {
        let outcome = try run(login, ["---completion", command, "--", option, "3", "\(word.count)", "keymgr", command, option, word])
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        XCTAssertEqual(outcome.stderr, "", outcome.summary)
        return outcome.stdout.split(separator: "\n").map(String.init).filter { !$0.isEmpty }.sorted()
    }

    func testCompletionsThroughTheAgentOfferThePersonsOwnUsersAndKidsOnly() throws {
        let kids = { (user: String) in
            try self.sandbox.succeed(["list", "--user", user, "--json"]).array().compactMap { $0["kid"] as? String }.sorted()
        }
        let (aliceKids, bobKids) = (try kids("alice"), try kids("bob"))
        XCTAssertEqual(bobKids.count, 1)
        try startAgent(policy: try String(contentsOf: PolicyTemplateTests.template, encoding: .utf8))

        XCTAssertEqual(try agentCompletes("bob", "sign", "--user", ""), ["bob"])
        XCTAssertEqual(try agentCompletes("bob", "list", "--user", "b"), ["bob"])
        XCTAssertEqual(try agentCompletes("bob", "list", "--user", "a"), [], "none of alice's")
        XCTAssertEqual(try agentCompletes("bob", "sign", "--kid", ""), bobKids)
        XCTAssertEqual(try agentCompletes("bob", "sign", "--kid", String(aliceKids[0].prefix(4))).filter(aliceKids.contains), [],
                       "none of alice's kids")
        XCTAssertEqual(try agentCompletes("alice", "sign", "--kid", ""), aliceKids)
        XCTAssertEqual(try agentCompletes("alice", "sign", "--user", ""), ["alice"])
        // A person linked to nothing sees nothing.
        XCTAssertEqual(try agentCompletes("mallory", "sign", "--user", ""), [])
        XCTAssertEqual(try agentCompletes("mallory", "sign", "--kid", ""), [])
    }
}
