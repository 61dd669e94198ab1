import Foundation
@testable import KeyManager
import Storage
import XCTest

/// The agent's policy enforced in the facade: with the store opened for a request context that
/// carries a scope, as the agent's worker opens it, an
/// identity user out of scope is one that does not exist (66, the same words), a refused auth type or another person's
/// PIN key without its PIN is `denied` (and audited as `agent.denied`), and listings show only the users in scope.
/// Who owns an identity user is its person link, never a name. Nil (embedded mode) changes nothing.
final class AccessScopeTests: KeyManagerTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        // alice: NONE, linked to alice (uid 1001); bob: APPLICATION_PIN (username bobby), linked to bob (uid 1002);
        // carol: NONE, nobody's.
        try bind("alice")
        var request = BindRequest(userId: "bob")
        request.username = "bobby"
        request.authType = .applicationPIN
        _ = try manager.bind(request, newPIN: pin("482916"))
        try bind("carol")
        try manager.link(userId: "alice", uid: 1001, login: "alice")
        try manager.link(userId: "bob", uid: 1002, login: "bob")
    }

    override func tearDownWithError() throws {
        try super.tearDownWithError()
    }

    /// A person's scope: `for = "self"`, any auth type, another person's PIN key needs its PIN.
    func selfScope(_ login: String = "alice", uid: UInt32 = 1001, operation: RequestOperation = .keySign) -> AccessScope {
        AccessScope(operation: operation, caller: "\(login) (uid \(uid))", callerUid: uid, callerLogin: login,
                    users: .limited(includesSelf: true, ids: []), authTypes: nil, othersPINKeysNeedPIN: true,
                    rule: "rule 2 (policy.toml:5)", usersReason: "for = [\"self\"]")
    }

    /// A rule for every identity user (`for = "*"`).
    func everyoneScope(_ login: String, uid: UInt32, operation: RequestOperation, authTypes: Set<AuthType>? = nil,
                       othersPINKeysNeedPIN: Bool = true) -> AccessScope {
        AccessScope(operation: operation, caller: "\(login) (uid \(uid))", callerUid: uid, callerLogin: login, users: .all,
                    authTypes: authTypes, othersPINKeysNeedPIN: othersPINKeysNeedPIN, rule: "rule 3 (policy.toml:9)")
    }

    /// The policy's decision for the requests the test makes next: `manager` is opened afresh with a request
    /// context that carries it (as the agent's worker opens its store), nil for embedded.
    var scope: AccessScope? {
        didSet { manager = try! KeyManager.open(home: home, context: RequestContext(scope: scope), environment: [:]) }
    }

    func unscoped<T>(_ body: () throws -> T) rethrows -> T {
        let before = scope
        scope = nil
        defer { scope = before }
        return try body()
    }

    func denials() throws -> [AuditEntry] {
        try unscoped { try manager.auditEntries(AuditFilter(event: "agent.denied")) }
    }

    func assertDenied(_ target: String, operation: RequestOperation = .keySign, file: StaticString = #filePath, line: UInt = #line,
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
            XCTAssertEqual(details["operation"], .string(operation.commandPath), file: file, line: line)
        }
    }

    /// What `body` throws, as (code, message).
    func failure(_ body: () throws -> Void) -> (KeyManagerError.Code?, String) {
        do {
            try body()
            return (nil, "")
        } catch let error as KeyManagerError {
            return (error.code, error.message)
        } catch {
            return (nil, "\(error)")
        }
    }

    /// Another person's `name` and a name nobody has get the same exit and the same words (the name aside).
    func assertLooksAbsent(_ name: String, as absent: String, file: StaticString = #filePath, line: UInt = #line,
                           _ body: (String) throws -> Void) {
        let theirs = failure { try body(name) }
        let nobodys = failure { try body(absent) }
        XCTAssertEqual(theirs.0, .clientNotRegistered, theirs.1, file: file, line: line)
        XCTAssertEqual(theirs.0, nobodys.0, file: file, line: line)
        XCTAssertEqual(theirs.1.replacingOccurrences(of: name, with: "NAME"), nobodys.1.replacingOccurrences(of: absent, with: "NAME"),
                       file: file, line: line)
    }

    func kid(of userId: String) throws -> String {
        try XCTUnwrap(unscoped { try manager.keys(userId: userId, statuses: KeyStatus.usable).first?.kid })
    }

    func testWithoutAScopeNothingChanges() throws {
        XCTAssertEqual(try manager.users().map(\.userId).sorted(), ["alice", "bob", "carol"])
        _ = try sign("carol")
        XCTAssertEqual(try denials().count, 0)
    }

    /// Issue 34: the caller and the decision travel with the request (the manager it opened), not in process state:
    /// two managers of two requests open at once in one process each see their own, and the audit actor is each one's.
    func testEachRequestsContextStaysWithItsManager() throws {
        let alice = AgentCaller(uid: 1001, gid: 1001, pid: 1, groups: [], login: "alice")
        let aliceRequest = RequestContext(caller: alice, scope: selfScope())
        let asAlice = try KeyManager.open(home: home, context: aliceRequest, environment: [:])
        let embedded = try KeyManager.openEmbedded(home: home, environment: [:])
        let asCarol = try KeyManager.open(home: home, context: RequestContext(scope: selfScope("carol", uid: 1003)), environment: [:])
        XCTAssertEqual(try asAlice.users().map(\.userId), ["alice"])
        XCTAssertEqual(try embedded.users().map(\.userId).sorted(), ["alice", "bob", "carol"])
        XCTAssertEqual(try asCarol.users().map(\.userId), [])
        XCTAssertEqual(try asAlice.users().map(\.userId), ["alice"], "opening another request's manager changed nothing")
        XCTAssertEqual(asAlice.actor, "alice (uid 1001)")
        XCTAssertNotEqual(embedded.actor, asAlice.actor)
        XCTAssertEqual(RequestContext.embedded.scope, nil)
        XCTAssertFalse(RequestContext.embedded.isServed)
        XCTAssertEqual(aliceRequest.deciding(nil).caller, alice)
    }

    func testAnotherPersonsIdentityIsIndistinguishableFromNone() throws {
        scope = selfScope()
        XCTAssertEqual(try sign("alice").kid.isEmpty, false)
        for name in ["carol", "bob"] {
            assertLooksAbsent(name, as: "zed") { _ = try self.sign($0, pin: "482916") }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.keys(userId: $0, statuses: KeyStatus.usable) }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.revocationTargets(userId: $0, kid: nil) }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.tokenSet(userId: $0, serverName: "default") }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.registration(userId: $0, serverName: "default") }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.login(forUser: $0) }
            assertLooksAbsent(name, as: "zed") { _ = try self.manager.auditEntries(AuditFilter(userId: $0)) }
        }
        // By kid and by kid prefix too: the key's owner decides, whatever the command named.
        let carolKid = try kid(of: "carol")
        let nobodysKid = UUID().uuidString
        assertLooksAbsent(carolKid, as: nobodysKid) { _ = try self.manager.sign(SignRequest(userId: nil, kid: $0), pin: self.noPIN) }
        assertLooksAbsent(carolKid, as: nobodysKid) { _ = try self.manager.exportPublicKey(userId: nil, kid: $0) }
        assertLooksAbsent(carolKid, as: nobodysKid) { _ = try self.manager.revoke(userId: nil, kid: $0, reason: nil) }
        let prefix = String(carolKid.prefix(8))
        assertLooksAbsent(prefix, as: "ZZZZZZZZ") { _ = try self.manager.sign(SignRequest(userId: nil, kid: $0), pin: self.noPIN) }
        XCTAssertFalse(failure { _ = try self.sign("carol") }.1.contains(carolKid), "no kid of another person is named")
        XCTAssertEqual(try denials().count, 0, "nothing looked like a denial")
        // Nothing of carol's changed.
        scope = nil
        XCTAssertEqual(try manager.keys(userId: "carol", statuses: KeyStatus.usable).count, 1)
    }

    /// Finding 3: a name grants nothing. carol's login equals the identity user id "carol", but nobody linked it to
    /// her; a username given by a bind is display text.
    func testANameGrantsNothingAndABindNeverRelabelsAnotherPersonsIdentity() throws {
        scope = selfScope("carol", uid: 1003)
        XCTAssertEqual(try manager.users().map(\.userId), [])
        assertCode(.clientNotRegistered) { _ = try self.sign("carol") }
        // A shared kiosk account binds a PIN key for alice, calling her mallory.
        scope = everyoneScope("kiosk", uid: 1004, operation: .keyBind, authTypes: [.applicationPIN])
        var relabel = BindRequest(userId: "alice")
        relabel.username = "mallory"
        relabel.authType = .applicationPIN
        _ = try manager.bind(relabel, newPIN: pin("135790"))
        scope = nil
        XCTAssertNil(try manager.users().first { $0.userId == "alice" }?.username, "alice's identity keeps its username")
        XCTAssertEqual(try manager.users().first { $0.userId == "alice" }?.owner, "alice", "and its owner")
        // mallory (a login of her own) sees none of it.
        scope = selfScope("mallory", uid: 1005)
        XCTAssertEqual(try manager.users().map(\.userId), [])
        XCTAssertEqual(try manager.resolveUser("mallory"), "mallory")
        assertCode(.clientNotRegistered) { _ = try self.sign("mallory", pin: "135790") }
        assertCode(.clientNotRegistered) { _ = try self.sign("alice", pin: "135790") }
    }

    func testAPersonsBindOfANewIdentityLinksItToThemAndNothingElseDoes() throws {
        scope = selfScope("dave", uid: 1006, operation: .keyBind)
        XCTAssertEqual(try bind("dave").key.owner, "dave")
        // Someone else's identity user, or one nobody owns, is not theirs to bind.
        assertDenied("alice", operation: .keyBind) { try self.bind("alice") }
        assertDenied("carol", operation: .keyBind) { try self.bind("carol") }
        scope = selfScope("dave", uid: 1006)
        XCTAssertEqual(try manager.users().map(\.userId), ["dave"])
        XCTAssertEqual(try sign("dave").kid.isEmpty, false)
        // A shared account's bind links nothing.
        scope = everyoneScope("kiosk", uid: 1004, operation: .keyBind, authTypes: [.applicationPIN])
        XCTAssertNil(try bind("erin", .applicationPIN, pin: "730519").key.owner)
        scope = nil
        let links = try manager.personLinks()
        XCTAssertEqual(links.map(\.userId), ["alice", "bob", "dave"])
        XCTAssertEqual(links.first { $0.userId == "dave" }?.linkedBy, "bind")
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "person.linked")).compactMap(\.userId), ["alice", "bob", "dave"])
    }

    func testALinkIsNeverMovedAndUnlinkBreaksIt() throws {
        XCTAssertThrowsError(try manager.link(userId: "alice", uid: 1005, login: "mallory")) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .usage)
            XCTAssertTrue("\(error)".contains("person unlink alice alice"), "\(error)")
        }
        XCTAssertEqual(try manager.link(userId: "alice", uid: 1001, login: "alice").login, "alice", "linking again changes nothing")
        assertCode(.clientNotRegistered) { try self.manager.unlinkPerson(login: "mallory", userId: "alice") }
        try manager.unlinkPerson(login: "alice", userId: "alice")
        scope = selfScope()
        XCTAssertEqual(try manager.users().map(\.userId), [])
        scope = nil
        XCTAssertEqual(try manager.link(userId: "alice", uid: 1005, login: "mallory").login, "mallory")
        assertCode(.clientNotRegistered) { _ = try self.manager.link(userId: "nobody-here", uid: 1005, login: "mallory") }
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "person.unlinked")).compactMap(\.userId), ["alice"])
    }

    func testThePolicysSelfTableAndAListCount() throws {
        scope = AccessScope(operation: .keySign, caller: "hank (uid 1007)", callerUid: 1007, callerLogin: "hank",
                                          selfIds: ["carol"], users: .limited(includesSelf: true, ids: []), authTypes: nil,
                                          othersPINKeysNeedPIN: true, rule: "rule 2 (policy.toml:5)")
        XCTAssertEqual(try manager.users().map(\.userId), ["carol"])
        scope = AccessScope(operation: .keySign, caller: "hank (uid 1007)", callerUid: 1007, callerLogin: "hank",
                                          users: .limited(includesSelf: false, ids: ["bob"]), authTypes: nil,
                                          othersPINKeysNeedPIN: true, rule: "rule 2 (policy.toml:5)")
        XCTAssertEqual(try manager.users().map(\.userId), ["bob"])
        XCTAssertEqual(try manager.resolveUser("bobby"), "bob")
    }

    func testListingsShowOnlyUsersInScopeWithTheirOwner() throws {
        scope = selfScope()
        XCTAssertEqual(try manager.users().map(\.userId), ["alice"])
        XCTAssertEqual(try manager.users().map(\.owner), ["alice"])
        XCTAssertEqual(Set(try manager.keys(userId: nil, statuses: Set(KeyStatus.allCases)).map(\.userId)), ["alice"])
        XCTAssertEqual(Set(try manager.keys(userId: nil, statuses: Set(KeyStatus.allCases)).map(\.owner)), ["alice"])
        XCTAssertEqual(Set(try manager.allKeys().map(\.userId)), ["alice"])
        let audit = try manager.auditEntries()
        XCTAssertFalse(audit.isEmpty)
        XCTAssertEqual(Set(audit.compactMap(\.userId)), ["alice"])
        XCTAssertEqual(Set(audit.compactMap(\.owner)), ["alice"])
        XCTAssertTrue(audit.allSatisfy { $0.userId == "alice" }, "entries about no user (the store's settings) are not shown")
        // bob's own user, found by its username too.
        scope = selfScope("bob", uid: 1002)
        XCTAssertEqual(try manager.users().map(\.userId), ["bob"])
        XCTAssertEqual(try manager.resolveUser("bobby"), "bob")
        // A user out of scope is not resolved to, nor listed in an ambiguity.
        scope = selfScope("dave", uid: 1006)
        XCTAssertEqual(try manager.users().map(\.userId), [])
        XCTAssertEqual(try manager.resolveUser("bobby"), "bobby")
    }

    func testCompletionsOfferOnlyWhatTheScopeCovers() throws {
        XCTAssertEqual(Set(KeyManager.completions(of: .users, prefix: "", home: home, context: RequestContext(scope: scope))), ["alice", "bob", "bobby", "carol"])
        let alicesKids = try manager.keys(userId: "alice", statuses: KeyStatus.usable).map(\.kid).sorted()
        XCTAssertFalse(alicesKids.isEmpty)
        scope = selfScope()
        XCTAssertEqual(KeyManager.completions(of: .users, prefix: "", home: home, context: RequestContext(scope: scope)), ["alice"])
        // In a limited scope, the kids of the users it covers (issue 32), and no one else's.
        XCTAssertEqual(KeyManager.completions(of: .kids, prefix: "", home: home, context: RequestContext(scope: scope)), alicesKids)
        scope = selfScope("carol", uid: 1003)
        XCTAssertEqual(KeyManager.completions(of: .users, prefix: "", home: home, context: RequestContext(scope: scope)), [], "a name that matches is not a link")
        scope = everyoneScope("root", uid: 0, operation: .keyList, othersPINKeysNeedPIN: false)
        XCTAssertEqual(KeyManager.completions(of: .kids, prefix: "", home: home, context: RequestContext(scope: scope)).count, 3)
    }

    func testExportIsNotAUseOfTheKey() throws {
        scope = everyoneScope("kiosk", uid: 1004, operation: .keyExport, authTypes: [.applicationPIN])
        XCTAssertEqual(try manager.exportPublicKey(userId: "alice", kid: nil).userId, "alice")
    }

    func testAnotherPersonsPINKeyNeedsItsPINToBeRevoked() throws {
        // A helpdesk rule for everyone, not may = ["*"].
        scope = everyoneScope("hank", uid: 1007, operation: .keyRevoke)
        XCTAssertTrue(try manager.revocationNeedsPIN(userId: "bob", kid: nil))
        XCTAssertFalse(try manager.revocationNeedsPIN(userId: "carol", kid: nil), "a NONE key needs no PIN")
        assertDenied("bob", operation: .keyRevoke) { _ = try self.manager.revoke(userId: "bob", kid: nil, reason: nil) }
        assertCode(.unAuthorize) { _ = try self.manager.revoke(userId: "bob", kid: nil, reason: nil, pin: self.pin("000111")) }
        XCTAssertEqual(try manager.keys(userId: "bob", statuses: [.active]).count, 1)
        XCTAssertEqual(try manager.revoke(userId: "bob", kid: nil, reason: nil, pin: pin("482916")).map(\.userId), ["bob"])
        XCTAssertEqual(try manager.revoke(userId: "carol", kid: nil, reason: nil).map(\.userId), ["carol"])
    }

    func testAnotherPersonsPINKeyNeedsItsPINToBeRebound() throws {
        scope = everyoneScope("hank", uid: 1007, operation: .keyRebind)
        XCTAssertTrue(try manager.rebindNeedsCurrentPIN(userId: "bob", kid: nil))
        assertDenied("bob", operation: .keyRebind) {
            _ = try self.manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: self.noPIN)
        }
        assertCode(.unAuthorize) {
            _ = try self.manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: self.noPIN, currentPIN: self.pin("000111"))
        }
        XCTAssertEqual(try manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: noPIN,
                                          currentPIN: pin("482916")).key.authType, .none)
        // Nor may a bind supersede another person's PIN key.
        scope = nil
        _ = try manager.rebind(userId: "bob", kid: nil, authType: .applicationPIN, newPIN: pin("730519"))
        scope = everyoneScope("hank", uid: 1007, operation: .keyBind)
        assertDenied("bob", operation: .keyBind) { try self.bind("bob") }
        // The owner (by link, whatever the username) rebinds their own PIN key without being asked for it again.
        scope = selfScope("bob", uid: 1002, operation: .keyRebind)
        XCTAssertFalse(try manager.rebindNeedsCurrentPIN(userId: "bob", kid: nil))
        XCTAssertEqual(try manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: noPIN).key.userId, "bob")
    }

    func testAllowEverythingNeedsNoPIN() throws {
        scope = everyoneScope("root", uid: 0, operation: .keyRevoke, othersPINKeysNeedPIN: false)
        XCTAssertFalse(try manager.revocationNeedsPIN(userId: "bob", kid: nil))
        XCTAssertEqual(try manager.revoke(userId: "bob", kid: nil, reason: nil).map(\.userId), ["bob"])
        XCTAssertEqual(try denials().count, 0)
    }

    func testAuthTypesLimitUseAndBinding() throws {
        scope = everyoneScope("kiosk", uid: 1004, operation: .keySign, authTypes: [.applicationPIN])
        XCTAssertEqual(try sign("bob", pin: "482916").kid.isEmpty, false)
        assertDenied("alice") { _ = try self.sign("alice") }
        scope = everyoneScope("kiosk", uid: 1004, operation: .keyBind, authTypes: [.applicationPIN])
        assertDenied("dave", operation: .keyBind) { try self.bind("dave", .none) }
        XCTAssertEqual(try bind("dave", .applicationPIN, pin: "730519").key.authType, .applicationPIN)
    }
}
