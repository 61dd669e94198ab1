@testable import KeyManager
import XCTest

/// How the policy decides: each form of `who`, `may`, `for` and `authTypes` both ways, rule order, `[self]`.
final class PolicyDecisionTests: XCTestCase {
    let policy = try! AgentPolicy(parsing: """
        [[rule]]
        who = ["user:root", "group:keymgr-admins"]
        may = ["*"]

        [[rule]]
        who = ["uid:999"]
        may = ["sync"]
        for = "*"

        [[rule]]
        who = ["user:kiosk"]
        may = ["list", "bind", "sign"]
        for = "*"
        authTypes = ["APPLICATION_PIN"]

        [[rule]]
        who = ["group:helpdesk"]
        may = ["revoke"]
        for = ["alice", "bob"]

        [[rule]]
        who = ["*"]
        may = ["status", "sign", "pin change"]
        for = "self"

        [self]
        jdoe = ["john.doe", "id=jd,ou=user"]
        """, file: "/etc/keymgr/policy.toml", commandPaths: PolicyParserTests.paths)

    /// Groups as the test's group database has them.
    func groupId(_ name: String) -> UInt32? { ["keymgr-admins": 990, "helpdesk": 991][name] }

    func caller(_ login: String, uid: UInt32 = 1000, gid: UInt32 = 1000, groups: [UInt32] = []) -> AgentCaller {
        AgentCaller(uid: uid, gid: gid, pid: 4242, groups: groups, login: login)
    }

    func decide(_ caller: AgentCaller, _ operation: String, authType: AuthType? = nil) -> AgentPolicy.Decision {
        policy.decide(caller: caller, operation: operation, authType: authType, groupId: groupId)
    }

    func scope(_ caller: AgentCaller, _ operation: String, authType: AuthType? = nil,
               file: StaticString = #filePath, line: UInt = #line) -> AccessScope? {
        guard case .allowed(let scope) = decide(caller, operation, authType: authType) else {
            XCTFail("\(operation) was denied to \(caller.login)", file: file, line: line)
            return nil
        }
        return scope
    }

    func reason(_ caller: AgentCaller, _ operation: String, authType: AuthType? = nil,
                file: StaticString = #filePath, line: UInt = #line) -> String {
        guard case .denied(let reason) = decide(caller, operation, authType: authType) else {
            XCTFail("\(operation) was allowed to \(caller.login)", file: file, line: line)
            return ""
        }
        return reason
    }

    func testUserSubject() throws {
        let root = try XCTUnwrap(scope(caller("root", uid: 0, gid: 0), "master rotate"))
        XCTAssertEqual(root.users, .all)
        XCTAssertNil(root.authTypes)
        XCTAssertFalse(root.othersPINKeysNeedPIN, "may = [\"*\"] rebinds and revokes without the owner's PIN")
        XCTAssertEqual(root.rule, "rule 1 (/etc/keymgr/policy.toml:1)")
        // Another login with uid 0 is not user:root.
        XCTAssertTrue(reason(caller("toor", uid: 0, gid: 0), "master rotate").contains("no rule of /etc/keymgr/policy.toml lets toor (uid 0) run `keymgr master rotate`"))
    }

    func testGroupSubjectByPrimaryOrSupplementaryGroup() {
        XCTAssertNotNil(scope(caller("erin", groups: [100, 990]), "admin revoke"))
        XCTAssertNotNil(scope(caller("erin", gid: 990), "admin revoke"))
        _ = reason(caller("erin", groups: [100]), "admin revoke")
        // A group the system does not know matches no one.
        let unknown = try! AgentPolicy(parsing: "[[rule]]\nwho = [\"group:nosuch\"]\nmay = [\"*\"]\n", file: "p",
                                       commandPaths: PolicyParserTests.paths)
        XCTAssertEqual(unknown.decide(caller: caller("erin", groups: [990]), operation: "status", groupId: groupId),
                       .denied(reason: "no rule of p lets erin (uid 1000) run `keymgr status`: ask the device's administrator if you need it"))
    }

    func testUidSubject() {
        XCTAssertEqual(scope(caller("keymgr", uid: 999), "sync")?.users, .all)
        _ = reason(caller("keymgr", uid: 998), "sync")
    }

    func testMayAndFirstMatchingRuleDecides() throws {
        // The kiosk rule does not hold `status`: the later rule for everyone decides it (for = "self").
        let status = try XCTUnwrap(scope(caller("kiosk"), "status"))
        XCTAssertEqual(status.rule, "rule 5 (/etc/keymgr/policy.toml:21)")
        XCTAssertEqual(status.users, .limited(includesSelf: true, ids: []))
        // `sign` is held by the kiosk rule, which comes first.
        XCTAssertEqual(scope(caller("kiosk"), "sign")?.rule, "rule 3 (/etc/keymgr/policy.toml:10)")
        // No rule holds `revoke` for an ordinary person.
        XCTAssertEqual(reason(caller("alice"), "revoke"),
                       "no rule of /etc/keymgr/policy.toml lets alice (uid 1000) run `keymgr revoke`: ask the device's administrator if you need it")
    }

    func testForSelfAndSelfTable() throws {
        // "self" is the caller's linked identity users (the facade reads the links): the login name maps nothing.
        let alice = try XCTUnwrap(scope(caller("alice"), "sign"))
        XCTAssertEqual(alice.users, .limited(includesSelf: true, ids: []))
        XCTAssertEqual(alice.callerUid, 1000)
        XCTAssertEqual(alice.callerLogin, "alice")
        XCTAssertFalse(alice.mapsToSelf("alice"), "a user id equal to the login is not a link")
        XCTAssertFalse(alice.mapsToSelf("id=alice,ou=user,o=alpha"))
        XCTAssertTrue(alice.othersPINKeysNeedPIN)
        XCTAssertEqual(alice.usersReason, "for = [\"self\"]")
        XCTAssertFalse(alice.bindLinksToCaller, "only a bind links")
        // [self] maps jdoe to more identity users: an administrator's links, by user id or id= value.
        let jdoe = try XCTUnwrap(scope(caller("jdoe"), "sign"))
        XCTAssertTrue(jdoe.mapsToSelf("john.doe"))
        XCTAssertTrue(jdoe.mapsToSelf("id=jd,ou=user"))
        XCTAssertFalse(jdoe.mapsToSelf("jdoe"))
        XCTAssertFalse(jdoe.mapsToSelf("alice"))
    }

    func testForList() throws {
        let helpdesk = try XCTUnwrap(scope(caller("hank", groups: [991]), "revoke"))
        XCTAssertTrue(helpdesk.lists("alice"))
        XCTAssertTrue(helpdesk.lists("id=bob,ou=user"))
        XCTAssertFalse(helpdesk.lists("u-2"), "a list names user ids, never usernames")
        XCTAssertFalse(helpdesk.lists("carol"))
        XCTAssertFalse(helpdesk.includesSelf, "a list without \"self\" does not include the caller")
        XCTAssertEqual(helpdesk.usersReason, "for = [\"alice\", \"bob\"]")
    }

    func testAuthTypes() throws {
        let kiosk = try XCTUnwrap(scope(caller("kiosk"), "bind", authType: .applicationPIN))
        XCTAssertEqual(kiosk.authTypes, [.applicationPIN])
        XCTAssertTrue(kiosk.allows(.applicationPIN))
        XCTAssertFalse(kiosk.allows(AuthType.none))
        XCTAssertEqual(reason(caller("kiosk"), "bind", authType: AuthType.none),
                       "rule 3 (/etc/keymgr/policy.toml:10) lets kiosk (uid 1000) use only keys of APPLICATION_PIN, not NONE: choose one of those")
        // A rule without authTypes allows any.
        XCTAssertTrue(try XCTUnwrap(scope(caller("alice"), "sign")).allows(AuthType.none))
    }
}
