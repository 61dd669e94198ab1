import Foundation
@testable import KeyManager
import ServerClients
@testable import Sync
import Logging
import RefServer
import XCTest

/// The administrator's service against the reference server in-process: plans, revocations and stale listings.
final class AdminServiceTests: SyncTestCase {
    func admin() throws -> AdminService {
        AdminService(manager: manager, connection: try connection(timeout: 5), home: home, logger: Logger(label: "keymgr.admin.test"))
    }

    func testRevokingThisDeviceByAShortUuidRevokesHereAndRecordsTheKeyAsGoneFromTheServer() async throws {
        let key = try await register("alice")
        let service = try admin()
        let plan = try await service.planRevocation(userId: key.userId, selector: .binding(String(key.kid.prefix(8))), reason: .left)
        XCTAssertTrue(plan.thisDevice)
        XCTAssertEqual(plan.localKids, [key.kid])
        XCTAssertEqual(plan.bindings.map(\.uuid), [key.kid])
        XCTAssertFalse(plan.isEmpty)

        let report = try await service.revoke(plan)
        XCTAssertEqual(report.deletedOnServer, [key.kid])
        XCTAssertEqual(report.local.revokedHere, [key.kid])
        XCTAssertTrue(report.changedSomething)
        let revoked = try XCTUnwrap(try self.key(key.kid))
        XCTAssertEqual(revoked.status, .revoked)
        XCTAssertEqual(revoked.serverState, .deleted, "deleted there by this revocation: sync has nothing left to do")
        let settled = try await sync()
        XCTAssertEqual(settled.writes, 0)

        let entry = try XCTUnwrap(try manager.auditEntries(AuditFilter(event: "admin.deviceRevoked")).last)
        XCTAssertEqual(entry.actor, manager.actor)
        XCTAssertEqual(entry.details["reason"]?.stringValue, "left")
        XCTAssertEqual(entry.details["changed"], .bool(true))

        // Gone from the server and revoked here: the same revocation again plans nothing and changes nothing.
        let again = try await service.planRevocation(userId: key.userId, selector: .binding(key.kid), reason: .left)
        XCTAssertTrue(again.isEmpty)
        let repeated = try await service.revoke(again)
        XCTAssertFalse(repeated.changedSomething)
    }

    func testStaleCountsDaysFromTheServersLastAccess() async throws {
        let key = try await register("alice")
        let service = try admin()
        let now = try await service.stale(days: 1)
        XCTAssertEqual(now.bindings.count, 0, "used just now")
        let later = try await service.stale(days: 1, now: Date().addingTimeInterval(2 * 86_400))
        XCTAssertEqual(later.bindings.map(\.kid), [key.kid], "two days later it is stale")
        XCTAssertEqual(later.bindings.first?.thisDevice, true)
        let longer = try await service.stale(days: 3, now: Date().addingTimeInterval(2 * 86_400))
        XCTAssertEqual(longer.bindings.count, 0)
    }

    func testAnAmbiguousUuidPrefixIsAUsageError() async throws {
        let key = try await register("alice")
        // A second binding of alice whose uuid starts like the first one's.
        let twin = String(key.kid.prefix(8)) + "-twin"
        try await server.addDevice(BoundDevice(uuid: twin, realmPath: "/realms/root", user: "alice", deviceId: "another-device",
                                               deviceName: "phone", createdDate: 0, lastAccessDate: 0, key: ["kid": twin]))
        do {
            _ = try await admin().planRevocation(userId: key.userId, selector: .binding(String(key.kid.prefix(8))), reason: .lost)
            XCTFail("an ambiguous prefix must not choose")
        } catch let error as any KeymgrFailure {
            XCTAssertEqual(error.code, .usage)
            XCTAssertTrue(error.message.contains(twin), error.message)
        }
    }
}
