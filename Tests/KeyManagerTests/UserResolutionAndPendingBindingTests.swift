import Foundation
@testable import KeyManager
import XCTest

/// `--user` resolution (userId, then the universalId's `id=` value, then username) and bindings that commit only
/// once the server accepted them.
final class UserResolutionTests: KeyManagerTestCase {
    func bind(_ userId: String, username: String?) throws {
        var request = BindRequest(userId: userId)
        request.username = username
        _ = try manager.bind(request, newPIN: noPIN)
    }

    func testAUserIsFoundByUserIdThenIdValueThenUsername() throws {
        try bind("id=dave,ou=user,ou=am-config", username: "dave")
        try bind("id=a\\,b,ou=user,o=alpha,ou=services,ou=am-config", username: "ab")
        try bind("u-17", username: "erin")
        XCTAssertEqual(try manager.resolveUser("id=dave,ou=user,ou=am-config"), "id=dave,ou=user,ou=am-config")
        XCTAssertEqual(try manager.resolveUser("dave"), "id=dave,ou=user,ou=am-config")
        XCTAssertEqual(try manager.resolveUser("a,b"), "id=a\\,b,ou=user,o=alpha,ou=services,ou=am-config", "DN escapes undone")
        XCTAssertEqual(try manager.resolveUser("erin"), "u-17")
        XCTAssertEqual(try manager.resolveUser("u-17"), "u-17")
        XCTAssertEqual(try manager.resolveUser("nobody"), "nobody", "an unknown name is passed on as a user id")
        XCTAssertNil(try manager.resolveUser(nil as String?))
    }

    /// Finding 5 of the person issue: a username is anyone's to set, so a name that is one identity's user id (or id=
    /// value) and another's username is ambiguous (64, naming both), never a silent pick.
    func testANameMatchingOneUsersIdAndAnothersUsernameIsAmbiguous() throws {
        try bind("dave", username: "someone")
        try bind("u-2", username: "dave")
        try bind("id=erin,ou=user,ou=am-config", username: nil)
        try bind("u-3", username: "erin")
        for (name, both) in [("dave", ["dave", "u-2"]), ("erin", ["id=erin,ou=user,ou=am-config", "u-3"])] {
            XCTAssertThrowsError(try manager.resolveUser(name)) { error in
                let failure = error as? KeyManagerError
                XCTAssertEqual(failure?.code, .usage)
                for userId in both { XCTAssertTrue(failure?.message.contains(userId) == true, failure?.message ?? "") }
            }
        }
        // The full user id is never ambiguous.
        XCTAssertEqual(try manager.resolveUser("u-2"), "u-2")
        XCTAssertEqual(try manager.resolveUser("id=erin,ou=user,ou=am-config"), "id=erin,ou=user,ou=am-config")
    }

    func testSeveralMatchesAtOneStageAreAUsageErrorListingThem() throws {
        try bind("id=sam,ou=user,ou=am-config", username: nil)
        try bind("id=sam,ou=user,o=alpha,ou=services,ou=am-config", username: nil)
        try bind("u-1", username: "kim")
        try bind("u-2", username: "kim")
        for name in ["sam", "kim"] {
            XCTAssertThrowsError(try manager.resolveUser(name)) { error in
                let failure = error as? KeyManagerError
                XCTAssertEqual(failure?.code, .usage)
                XCTAssertTrue(failure?.message.contains("2 users") == true, failure?.message ?? "")
            }
        }
        XCTAssertTrue((try? manager.resolveUser("kim")) == nil)
        do {
            _ = try manager.resolveUser("kim")
        } catch let error as KeyManagerError {
            XCTAssertTrue(error.message.contains("u-1") && error.message.contains("u-2"), error.message)
        }
    }

    func testChooseKeyTakesTheOnlyKeyOrAsksForAChoice() throws {
        assertCode(.clientNotRegistered) { _ = try self.manager.chooseKey(userId: nil, kid: nil) }
        let alice = try bind("alice").key
        XCTAssertEqual(try manager.chooseKey(userId: nil, kid: nil).kid, alice.kid)
        let bob = try bind("bob").key
        assertCode(.usage) { _ = try self.manager.chooseKey(userId: nil, kid: nil) }
        XCTAssertEqual(try manager.chooseKey(userId: "bob", kid: nil).kid, bob.kid)
        XCTAssertEqual(try manager.chooseKey(userId: nil, kid: alice.kid).kid, alice.kid)
        // One user with two keys (another issuer): the same choice.
        let other = try bind("bob", issuer: "other-app").key
        assertCode(.usage) { _ = try self.manager.chooseKey(userId: "bob", kid: nil) }
        XCTAssertEqual(try manager.chooseKey(userId: "bob", kid: other.kid).kid, other.kid)
    }
}

final class PendingBindingTests: KeyManagerTestCase {
    func pending(_ userId: String, pin text: String? = nil) throws -> PendingBinding {
        var request = BindRequest(userId: userId)
        request.challenge = "server-challenge"
        if text != nil { request.authType = .applicationPIN }
        return try manager.prepareBinding(request, newPIN: text.map(pin) ?? noPIN)
    }

    func testAPreparedBindingStoresNothingAndTheCurrentKeyStaysActive() throws {
        let old = try bind("alice").key
        let auditBefore = try manager.auditEntries().count
        let pending = try pending("alice", pin: "482916")
        XCTAssertNotNil(pending.jws)
        XCTAssertEqual(try manager.keys(userId: "alice", statuses: Set(KeyStatus.allCases)).map(\.kid), [old.kid])
        XCTAssertEqual(try manager.auditEntries().count, auditBefore)
        XCTAssertEqual(try sign("alice").kid, old.kid, "the old key still signs while the server decides")
    }

    func testACommittedBindingIsRegisteredAndSupersedesTheOldKeyInOneGo() throws {
        let old = try bind("alice").key
        let pending = try pending("alice", pin: "482916")
        let result = try manager.commitBinding(pending, deviceName: "front desk")
        XCTAssertEqual(result.key.kid, pending.kid)
        XCTAssertEqual(result.key.serverState, .registered)
        XCTAssertEqual(result.key.deviceName, "front desk")
        let keys = Dictionary(uniqueKeysWithValues: try manager.allKeys().map { ($0.kid, $0) })
        XCTAssertEqual(keys[old.kid]?.status, .superseded)
        XCTAssertEqual(keys[pending.kid]?.status, .active)
        XCTAssertEqual(try sign("alice", pin: "482916").kid, pending.kid, "the PIN set while pending protects the key")
        let events = try manager.auditEntries().map(\.event)
        XCTAssertTrue(events.contains("key.registered"))
    }

    func testADiscardedBindingLeavesTheOldKeyAsItWasAndIsAudited() throws {
        let old = try bind("alice").key
        let pending = try pending("alice")
        try manager.discardBinding(pending, reason: "the server refused")
        let keys = try manager.allKeys()
        XCTAssertEqual(keys.map(\.kid), [old.kid])
        XCTAssertEqual(keys.first?.status, .active)
        XCTAssertEqual(keys.first?.serverState, old.serverState)
        XCTAssertNil(keys.first?.revokedAt)
        let last = try XCTUnwrap(try manager.auditEntries().last)
        XCTAssertEqual(last.event, "key.bindingRefused")
        XCTAssertEqual(last.kid, pending.kid)
        XCTAssertTrue(try manager.verifyAudit().isIntact)
    }
}
