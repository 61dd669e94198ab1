import Foundation
import XCTest

/// Issue 34 (one place decides "may this caller do this to this identity"), issue 32's "privacy as promised": through
/// the agent, under a test policy that names operations by their stable ids (`key.sign`, `token.show`, …) and gives
/// everyone every scoped command for their own identity users, bob's commands on alice's identity users and keys print
/// what they print for a name or kid that exists nowhere (the name replaced), with the same exit status, and name none
/// of alice's kids, issuers, auth types or her as owner. One test per command family; alice holds two keys for two
/// issuers (the "choose one with --kid" listing once named them), and a second identity user linked to her.
extension PolicyProcessTests {
    /// Every scoped operation for the caller's own identity users, named by id (aliases are tested with the shipped
    /// policy elsewhere).
    static let everyOperationForSelf = """
        [[rule]]
        who = ["*"]
        may = ["device.status", "user.list", "key.list", "key.sign", "key.rebind", "key.revoke", "key.export",
               "pin.change", "token.import", "token.show", "token.print", "token.refresh", "token.revoke",
               "token.login", "dpop.proof", "dcr.register", "dcr.show", "dcr.delete", "dcr.forget", "audit.list",
               "admin.devices", "admin.revoke"]
        for = "self"
        """

    /// alice's second key (another issuer) and second identity user; returns alice's kids.
    func givePrivacyFixture() throws -> [String] {
        try sandbox.bind("alice", ["--issuer", "https://other.example"])
        try sandbox.bind("id=carol,ou=user,ou=am-config")
        XCTAssertEqual(try sandbox.keymgr(["person", "link", "alice", "id=carol,ou=user,ou=am-config"],
                                          extraEnvironment: nssEnvironment).status, 0)
        let kids = try sandbox.succeed(["list", "--user", "alice", "--json"]).array().compactMap { $0["kid"] as? String }
        XCTAssertEqual(kids.count, 2)
        return kids
    }

    /// Runs each template as `login` with NAME replaced by one of alice's names and by a name nobody has, and checks
    /// the two answers are the same once the names are swapped back, not a success, and name nothing of alice's.
    func assertIndistinguishable(_ templates: [[String]], names: [(theirs: String, nobodys: String)], kids: [String],
                                 as login: String = "bob", stdin: String = "000000\n111111\n",
                                 file: StaticString = #filePath, line: UInt = #line) throws {
        for (theirs, nobodys) in names {
            for template in templates {
                let seen = try run(login, template.map { $0 == "NAME" ? theirs : $0 }, stdin: stdin)
                let absent = try run(login, template.map { $0 == "NAME" ? nobodys : $0 }, stdin: stdin)
                let what = template.map { $0 == "NAME" ? theirs : $0 }.joined(separator: " ")
                XCTAssertEqual(seen.status, absent.status, "\(what): \(seen.summary) / \(absent.summary)", file: file, line: line)
                XCTAssertNotEqual(seen.status, 0, "\(what): \(seen.summary)", file: file, line: line)
                XCTAssertEqual(seen.stdout.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stdout.replacingOccurrences(of: nobodys, with: "NAME"), what, file: file, line: line)
                XCTAssertEqual(seen.stderr.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stderr.replacingOccurrences(of: nobodys, with: "NAME"), what, file: file, line: line)
                let secrets = kids.map { String($0.prefix(8)) } + ["other.example", "NONE", "alice (uid", "owner alice"]
                for secret in secrets where !theirs.hasPrefix(secret) {
                    XCTAssertFalse(seen.stdout.contains(secret) || seen.stderr.contains(secret),
                                   "\(what) names \(secret): \(seen.summary)", file: file, line: line)
                }
            }
        }
    }

    /// alice's user names (short, an id= value, a full user id) against names nobody has.
    var userNames: [(theirs: String, nobodys: String)] {
        [("alice", "zed"), ("carol", "zed"), ("id=carol,ou=user,ou=am-config", "id=zed,ou=user,ou=am-config")]
    }

    /// alice's kid and a kid prefix against ones nobody has.
    func kidNames(_ kids: [String]) -> [(theirs: String, nobodys: String)] {
        var prefix = String(UUID().uuidString.prefix(8))
        while kids.contains(where: { $0.hasPrefix(prefix) }) { prefix = String(UUID().uuidString.prefix(8)) }
        return [(kids[0], UUID().uuidString), (String(kids[0].prefix(8)), prefix)]
    }

    func testPrivacyOfKeysUnderPolicyOfOperationIds() throws {
        let kids = try givePrivacyFixture()
        try startAgent(policy: Self.everyOperationForSelf)
        try assertIndistinguishable([
            ["sign", "--user", "NAME"], ["sign", "--user", "NAME", "--challenge", "c"],
            ["rebind", "--user", "NAME", "--auth-type", "none"], ["revoke", "--user", "NAME", "--yes"],
            ["export", "--user", "NAME"], ["pin", "change", "--user", "NAME", "--pin-stdin"],
        ], names: userNames, kids: kids)
        try assertIndistinguishable([
            ["sign", "--kid", "NAME"], ["revoke", "--kid", "NAME", "--yes"], ["export", "--kid", "NAME"],
            ["rebind", "--user", "bob", "--kid", "NAME", "--auth-type", "none"],
            ["pin", "change", "--user", "bob", "--kid", "NAME", "--pin-stdin"],
        ], names: kidNames(kids), kids: kids)
        // bob's own key still signs under the same rule, and nothing of alice's changed.
        XCTAssertEqual(try run("bob", ["sign", "--user", "bob", "--pin-stdin"], stdin: "482916\n").status, 0)
        XCTAssertEqual(try sandbox.succeed(["list", "--user", "alice", "--json"]).array().count, 2)
    }

    func testPrivacyOfListingsUnderPolicyOfOperationIds() throws {
        let kids = try givePrivacyFixture()
        try startAgent(policy: Self.everyOperationForSelf)
        // A listing of a user out of scope is the listing of a user that does not exist (empty, or 66 for both).
        try assertIndistinguishableOrEmpty([["list", "--user", "NAME"], ["list", "--user", "NAME", "--json"],
                                            ["audit", "--user", "NAME"], ["audit", "--user", "NAME", "--json"]],
                                           names: userNames, kids: kids)
        let users = try run("bob", ["users", "--json"])
        XCTAssertEqual(users.status, 0, users.summary)
        XCTAssertEqual(try users.array().compactMap { $0["userId"] as? String }, ["bob"])
        let listed = try run("bob", ["list", "--json"])
        XCTAssertEqual(Set(try listed.array().compactMap { $0["userId"] as? String }), ["bob"])
        let status = try run("bob", ["status", "--json"])
        XCTAssertEqual(status.status, 0, status.summary)
        for secret in kids.map({ String($0.prefix(8)) }) + ["alice", "carol", "other.example"] {
            XCTAssertFalse(users.stdout.contains(secret) || listed.stdout.contains(secret) || status.stdout.contains(secret),
                           "bob's listings name \(secret)")
        }
    }

    /// A server profile (nothing listens at its address), so that the token and client-registration commands get as
    /// far as the store, and a token of alice's: what a leak would be about.
    func giveServerProfile() throws {
        try sandbox.succeed(["server", "set", "--dialect", "oauth", "--base-url", "http://127.0.0.1:9/am"])
        let token = #"{"access_token":"alice-token","token_type":"Bearer","expires_in":3600}"#
        _ = try sandbox.keymgr(["token", "import", "--user", "alice"], stdin: token + "\n")
    }

    /// The commands that only read the store answer 66 for both (not a server error that would hide a difference).
    func assertNoSuchUser(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        for name in ["alice", "zed"] {
            let outcome = try run("bob", arguments.map { $0 == "NAME" ? name : $0 })
            XCTAssertEqual(outcome.status, 66, outcome.summary, file: file, line: line)
        }
    }

    func testPrivacyOfTokensAndLoginUnderPolicyOfOperationIds() throws {
        let kids = try givePrivacyFixture()
        try giveServerProfile()
        try startAgent(policy: Self.everyOperationForSelf)
        try assertNoSuchUser(["token", "show", "--user", "NAME"])
        try assertNoSuchUser(["token", "print", "--user", "NAME"])
        try assertIndistinguishable([
            ["token", "show", "--user", "NAME"], ["token", "print", "--user", "NAME"],
            ["token", "refresh", "--user", "NAME"], ["token", "revoke", "--user", "NAME"],
            ["login", "--user", "NAME"], ["dpop", "proof", "--user", "NAME", "--method", "GET", "--url", "https://rs.example/x"],
        ], names: userNames, kids: kids)
        try assertIndistinguishable([["token", "import", "--user", "NAME"]], names: userNames, kids: kids,
                                    stdin: #"{"access_token":"a","token_type":"Bearer","expires_in":60}"# + "\n")
    }

    func testPrivacyOfClientRegistrationsUnderPolicyOfOperationIds() throws {
        let kids = try givePrivacyFixture()
        try giveServerProfile()
        try startAgent(policy: Self.everyOperationForSelf)
        try assertNoSuchUser(["dcr", "show", "--user", "NAME"])
        try assertIndistinguishable([
            ["dcr", "show", "--user", "NAME"], ["dcr", "delete", "--user", "NAME"], ["dcr", "forget", "--user", "NAME"],
            ["dcr", "register", "--user", "NAME"],
        ], names: userNames, kids: kids)
    }

    func testPrivacyOfAdministrationUnderPolicyOfOperationIds() throws {
        let kids = try givePrivacyFixture()
        try startAgent(policy: Self.everyOperationForSelf)
        try assertIndistinguishable([
            ["admin", "devices", "--user", "NAME"],
            ["admin", "revoke", "--user", "NAME", "--device-id", "0123456789", "--reason", "lost", "--yes"],
        ], names: userNames, kids: kids)
    }

    /// Like `assertIndistinguishable`, for listings, which may succeed: then both are empty.
    func assertIndistinguishableOrEmpty(_ templates: [[String]], names: [(theirs: String, nobodys: String)], kids: [String],
                                        file: StaticString = #filePath, line: UInt = #line) throws {
        for (theirs, nobodys) in names {
            for template in templates {
                let seen = try run("bob", template.map { $0 == "NAME" ? theirs : $0 })
                let absent = try run("bob", template.map { $0 == "NAME" ? nobodys : $0 })
                let what = template.map { $0 == "NAME" ? theirs : $0 }.joined(separator: " ")
                XCTAssertEqual(seen.status, absent.status, "\(what): \(seen.summary) / \(absent.summary)", file: file, line: line)
                XCTAssertEqual(seen.stdout.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stdout.replacingOccurrences(of: nobodys, with: "NAME"), what, file: file, line: line)
                XCTAssertEqual(seen.stderr.replacingOccurrences(of: theirs, with: "NAME"),
                               absent.stderr.replacingOccurrences(of: nobodys, with: "NAME"), what, file: file, line: line)
                for secret in kids.map({ String($0.prefix(8)) }) + ["other.example"] {
                    XCTAssertFalse(seen.stdout.contains(secret) || seen.stderr.contains(secret),
                                   "\(what) names \(secret): \(seen.summary)", file: file, line: line)
                }
            }
        }
    }
}
