import Foundation
import KeyManager
import ServerClients
@testable import Sync
import XCTest

/// The reconciler as a pure function: one test per rule, no store and no server.
final class ReconcilerTests: XCTestCase {
    private let deviceId = "this-device"

    private func key(_ kid: String, _ status: KeyStatus = .active, _ serverState: KeyServerState = .registered,
                     deviceName: String? = nil) -> UserKey {
        UserKey(kid: kid, userId: "u", username: nil, authType: .none, status: status, serverState: serverState,
                createdAt: Date(timeIntervalSince1970: 0), lastUsedAt: nil, deviceName: deviceName,
                serverLastAccessAt: nil, issuer: "keymgr", revokedAt: nil, revokeReason: nil)
    }

    private func device(_ kid: String, deviceId: String? = "this-device", name: String? = nil) -> ServerDevice {
        ServerDevice(uuid: kid, kid: kid, deviceId: deviceId, deviceName: name, createdAt: nil, lastAccessAt: nil)
    }

    private func plan(_ keys: [UserKey], _ listing: [ServerDevice]) -> UserSyncPlan {
        Reconciler.plan(userId: "u", localKeys: keys, listing: .success(listing), deviceId: deviceId,
                        knownKids: Set(keys.map(\.kid)))
    }

    func testRule1ListedKeyIsRegisteredAndMirrored() {
        let fresh = plan([key("k1", .active, .unregistered)], [device("k1", name: "kiosk 7")])
        XCTAssertEqual(fresh.changes.listed, [.init(kid: "k1", deviceName: "kiosk 7", lastAccessAt: nil)])
        let settled = plan([key("k1", deviceName: "kiosk 7")], [device("k1", name: "kiosk 7")])
        XCTAssertTrue(settled.isEmpty)
        XCTAssertEqual(settled.inSync, 1)
    }

    func testRule2RegisteredKeyMissingFromACompleteListingIsRevoked() {
        XCTAssertEqual(plan([key("k1"), key("k2")], [device("k2")]).changes.revokedByServer, ["k1"])
        XCTAssertTrue(plan([key("k1", .active, .unregistered)], []).isEmpty, "never registered: nothing to revoke")
    }

    func testRule3RetiredKeyStillListedIsDeletedOnTheServer() {
        let result = plan([key("k1", .superseded, .pendingDeletion), key("k2", .revoked, .pendingDeletion)],
                          [device("k1")])
        XCTAssertEqual(result.deleteOnServer.map(\.kid), ["k1"])
        XCTAssertEqual(result.changes.deletedOnServer, ["k2"], "already gone from the server: confirmed by absence")
    }

    func testRule4UnknownKidOfThisDeviceIsAnOrphan() {
        let result = plan([key("k1")], [device("k1"), device("stray"), device("elsewhere", deviceId: "other-device")])
        XCTAssertEqual(result.orphans.map(\.kid), ["stray"])
    }

    func testRule4TheUsersOwnKeyIsNoOrphanEvenWhenBoundAfterTheKnownKidsWereRead() {
        // Sync reads every kid first and each user's keys later, when the listing arrives: a key bound in between
        // (by a journey, so the server lists it) is the user's own, and pruning must never delete it.
        let result = Reconciler.plan(userId: "u", localKeys: [key("k1"), key("fresh", .active, .unregistered)],
                                     listing: .success([device("k1"), device("fresh")]), deviceId: deviceId,
                                     knownKids: ["k1"])
        XCTAssertEqual(result.orphans, [])
        XCTAssertEqual(result.changes.listed.map(\.kid), ["fresh"])
    }

    func testRule6AFailedListingChangesNothing() {
        let result = Reconciler.plan(userId: "u", localKeys: [key("k1")], listing: .failure(TransportError(.unavailable, "500")),
                                     deviceId: deviceId, knownKids: ["k1"])
        XCTAssertTrue(result.isEmpty)
        XCTAssertEqual(result.error?.kind, .unavailable)
    }

    func testRule7RevocationLimitIsAShareOfActiveKeysAndAtLeastOne() {
        XCTAssertEqual(Reconciler.revocationLimit(activeKeys: 100, percent: 20), 20)
        XCTAssertEqual(Reconciler.revocationLimit(activeKeys: 3, percent: 20), 1)
        XCTAssertEqual(Reconciler.revocationLimit(activeKeys: 0, percent: 20), 1)
    }

    func testUsersWorthAsking() {
        var other = key("k9", .revoked, .deleted)
        other.userId = "gone"
        XCTAssertTrue(Reconciler.isWorthReconciling(key("k1")))
        XCTAssertTrue(Reconciler.isWorthReconciling(key("k2", .superseded, .pendingDeletion)), "the server may still hold it")
        XCTAssertFalse(Reconciler.isWorthReconciling(other))
    }
}
