import Foundation
@testable import KeyManager
import Storage
import XCTest

/// The agent's policy enforced in the facade: with `AccessScope.current` set as the agent's worker sets it, every
/// operation on a user or key outside the scope is `denied` (and audited as `agent.denied`), and listings show only
/// the users in scope. Nil (embedded mode) changes nothing.
final class AccessScopeTests: KeyManagerTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        // alice: NONE; bob: APPLICATION_PIN (username bobby); carol: NONE.
        try bind("alice")
        var request = BindRequest(userId: "bob")
        request.username = "bobby"
        request.authType = .applicationPIN
        _ = try manager.bind(request, newPIN: pin("482916"))
        try bind("carol")
    }

    override func tearDownWithError() throws {
        AccessScope.current = nil
        try super.tearDownWithError()
    }

    /// alice's scope: `for = "self"`, any auth type, another person's PIN key needs its PIN.
    func selfScope(_ login: String = "alice", operation: String = "sign") -> AccessScope {
        AccessScope(operation: operation, caller: "\(login) (uid 1001)", selfNames: [login], users: .named([login]),
                    authTypes: nil, othersPINKeysNeedPIN: true, rule: "rule 2 (policy.toml:5)", usersReason: "for = [\"self\"]")
    }

    func denials() throws -> [AuditEntry] {
        let scope = AccessScope.current
        AccessScope.current = nil
        defer { AccessScope.current = scope }
        return try manager.auditEntries(AuditFilter(event: "agent.denied"))
    }

    func assertDenied(_ target: String, operation: String = "sign", file: StaticString = #filePath, line: UInt = #line,
                      _ body: () throws -> Void) {
        let before = (try? denials().count) ?? 0
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            let failure = error as? KeyManagerError
            XCTAssertEqual(failure?.code, .denied, "\(error)", file: file, line: line)
            XCTAssertTrue(failure?.message.contains("rule") ?? false, "names the rule: \(error)", file: file, line: line)
        }
        let entries = (try? denials()) ?? []
        XCTAssertEqual(entries.count, before + 1, "the denial is audited", file: file, line: line)
        if let last = entries.last, case .object(let details) = last.details {
            XCTAssertEqual(details["target"], .string(target), file: file, line: line)
            XCTAssertEqual(details["operation"], .string(operation), file: file, line: line)
            XCTAssertNotNil(details["reason"], file: file, line: line)
        }
    }

    func testWithoutAScopeNothingChanges() throws {
        XCTAssertEqual(try manager.users().map(\.userId).sorted(), ["alice", "bob", "carol"])
        _ = try sign("carol")
        XCTAssertEqual(try denials().count, 0)
    }

    func testSelfScopeActsOnlyOnTheCallersUser() throws {
        AccessScope.current = selfScope()
        XCTAssertEqual(try sign("alice").kid.isEmpty, false)
        assertDenied("carol") { _ = try self.sign("carol") }
        assertDenied("bob") { _ = try self.sign("bob", pin: "482916") }
        let carolKid = try XCTUnwrap({ AccessScope.current = nil; defer { AccessScope.current = selfScope() }
            return try manager.keys(userId: "carol", statuses: KeyStatus.usable).first?.kid }())
        // By kid too: the key's owner decides, whatever the command named.
        assertDenied("carol") { _ = try self.manager.sign(SignRequest(userId: nil, kid: carolKid), pin: self.noPIN) }
        assertDenied("carol") { _ = try self.manager.exportPublicKey(userId: nil, kid: carolKid) }
        assertDenied("carol") { _ = try self.manager.keys(userId: "carol", statuses: KeyStatus.usable) }
        assertDenied("carol") { _ = try self.manager.revocationTargets(userId: "carol", kid: nil) }
        assertDenied("carol") { _ = try self.manager.revoke(userId: nil, kid: carolKid, reason: nil) }
        assertDenied("carol") { _ = try self.manager.tokenSet(userId: "carol", serverName: "default") }
        assertDenied("carol") { _ = try self.manager.registration(userId: "carol", serverName: "default") }
        assertDenied("carol") { _ = try self.manager.login(forUser: "carol") }
        assertDenied("carol") { _ = try self.manager.auditEntries(AuditFilter(userId: "carol")) }
        // Binding a new user is judged by its id, never by the username the bind gives it.
        var request = BindRequest(userId: "mallory")
        request.username = "alice"
        assertDenied("mallory") { _ = try self.manager.bind(request, newPIN: self.noPIN) }
        // Nothing of carol's changed.
        AccessScope.current = nil
        XCTAssertEqual(try manager.keys(userId: "carol", statuses: KeyStatus.usable).count, 1)
    }

    func testListingsShowOnlyUsersInScope() throws {
        AccessScope.current = selfScope()
        XCTAssertEqual(try manager.users().map(\.userId), ["alice"])
        XCTAssertEqual(Set(try manager.keys(userId: nil, statuses: Set(KeyStatus.allCases)).map(\.userId)), ["alice"])
        XCTAssertEqual(Set(try manager.allKeys().map(\.userId)), ["alice"])
        let audit = try manager.auditEntries()
        XCTAssertFalse(audit.isEmpty)
        XCTAssertEqual(Set(audit.compactMap(\.userId)), ["alice"])
        XCTAssertTrue(audit.allSatisfy { $0.userId == "alice" }, "entries about no user (the store's settings) are not shown")
        // The caller's user found by username.
        AccessScope.current = selfScope("bobby")
        XCTAssertEqual(try manager.users().map(\.userId), ["bob"])
        XCTAssertEqual(try manager.resolveUser("bobby"), "bob")
        // A user out of scope is not resolved to, nor listed in an ambiguity.
        AccessScope.current = selfScope("dave")
        XCTAssertEqual(try manager.users().map(\.userId), [])
        XCTAssertEqual(try manager.resolveUser("bobby"), "bobby")
    }

    func testAnotherPersonsPINKeyNeedsItsPINToBeRevoked() throws {
        // A helpdesk rule for everyone, not may = ["*"].
        AccessScope.current = AccessScope(operation: "revoke", caller: "hank (uid 1002)", selfNames: ["hank"], users: .all,
                                          authTypes: nil, othersPINKeysNeedPIN: true, rule: "rule 3 (policy.toml:9)")
        XCTAssertTrue(try manager.revocationNeedsPIN(userId: "bob", kid: nil))
        XCTAssertFalse(try manager.revocationNeedsPIN(userId: "carol", kid: nil), "a NONE key needs no PIN")
        assertDenied("bob", operation: "revoke") { _ = try self.manager.revoke(userId: "bob", kid: nil, reason: nil) }
        assertCode(.unAuthorize) { _ = try self.manager.revoke(userId: "bob", kid: nil, reason: nil, pin: self.pin("000111")) }
        XCTAssertEqual(try manager.keys(userId: "bob", statuses: [.active]).count, 1)
        XCTAssertEqual(try manager.revoke(userId: "bob", kid: nil, reason: nil, pin: pin("482916")).map(\.userId), ["bob"])
        XCTAssertEqual(try manager.revoke(userId: "carol", kid: nil, reason: nil).map(\.userId), ["carol"])
    }

    func testAnotherPersonsPINKeyNeedsItsPINToBeRebound() throws {
        AccessScope.current = AccessScope(operation: "rebind", caller: "hank (uid 1002)", selfNames: ["hank"], users: .all,
                                          authTypes: nil, othersPINKeysNeedPIN: true, rule: "rule 3 (policy.toml:9)")
        XCTAssertTrue(try manager.rebindNeedsCurrentPIN(userId: "bob", kid: nil))
        assertDenied("bob", operation: "rebind") {
            _ = try self.manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: self.noPIN)
        }
        assertCode(.unAuthorize) {
            _ = try self.manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: self.noPIN, currentPIN: self.pin("000111"))
        }
        XCTAssertEqual(try manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: noPIN,
                                          currentPIN: pin("482916")).key.authType, .none)
        // Nor may a bind supersede another person's PIN key.
        AccessScope.current = nil
        _ = try manager.rebind(userId: "bob", kid: nil, authType: .applicationPIN, newPIN: pin("730519"))
        AccessScope.current = AccessScope(operation: "bind", caller: "hank (uid 1002)", selfNames: ["hank"], users: .all,
                                          authTypes: nil, othersPINKeysNeedPIN: true, rule: "rule 3 (policy.toml:9)")
        assertDenied("bob", operation: "bind") { try self.bind("bob") }
        // The owner rebinds their own PIN key without being asked for it again.
        AccessScope.current = selfScope("bob", operation: "rebind")
        XCTAssertFalse(try manager.rebindNeedsCurrentPIN(userId: "bob", kid: nil))
        XCTAssertEqual(try manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: noPIN).key.userId, "bob")
    }

    func testAllowEverythingNeedsNoPIN() throws {
        AccessScope.current = AccessScope(operation: "revoke", caller: "root (uid 0)", selfNames: ["root"], users: .all,
                                          authTypes: nil, othersPINKeysNeedPIN: false, rule: "rule 1 (policy.toml:1)")
        XCTAssertFalse(try manager.revocationNeedsPIN(userId: "bob", kid: nil))
        XCTAssertEqual(try manager.revoke(userId: "bob", kid: nil, reason: nil).map(\.userId), ["bob"])
        XCTAssertEqual(try denials().count, 0)
    }

    func testAuthTypesLimitUseAndBinding() throws {
        AccessScope.current = AccessScope(operation: "sign", caller: "kiosk (uid 1003)", selfNames: ["kiosk"], users: .all,
                                          authTypes: [.applicationPIN], othersPINKeysNeedPIN: true, rule: "rule 3 (policy.toml:9)")
        XCTAssertEqual(try sign("bob", pin: "482916").kid.isEmpty, false)
        assertDenied("alice") { _ = try self.sign("alice") }
        assertDenied("dave") { try self.bind("dave", .none) }
        XCTAssertEqual(try bind("dave", .applicationPIN, pin: "730519").key.authType, .applicationPIN)
    }
}
