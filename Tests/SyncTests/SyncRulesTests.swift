import Foundation
@testable import KeyManager
import RefServer
import ServerClients
import Storage
@testable import Sync
import XCTest

/// The sync rules of docs/sync.md against the reference server over loopback: one test per rule.
final class SyncRulesTests: SyncTestCase {
    func testJourneyRegistersTheKeyEndToEnd() async throws {
        let key = try await register("alice")
        XCTAssertEqual(key.serverState, .registered)
        XCTAssertEqual(key.userId, server.universalId(of: "alice"))
        let stored = try XCTUnwrap(try self.key(key.kid))
        XCTAssertEqual(stored.serverState, .registered)
        XCTAssertEqual(stored.deviceName, "test kiosk")
        let onServer = try await server.devices(user: "alice")
        XCTAssertEqual(onServer.map(\.uuid), [key.kid])
        XCTAssertEqual(onServer.first?.deviceId, try manager.deviceIdentity().deviceId)
    }

    func testSigningJourneyAnswersTheServersChallenge() async throws {
        try await register("alice")
        let signed = try await journeys().sign(journey: "SignIn", username: "alice", password: { SecretBytes(utf8: "") },
                                                claims: ["purpose": "door"], pin: { throw KeyManagerError(.abort, "no PIN") })
        XCTAssertNotNil(try self.key(signed.kid)?.lastUsedAt)
    }

    func testAJourneyAskingForAnAbsurdJWSLifetimeIsAServerErrorNotAUsageError() async throws {
        let odd = try await ReferenceServer.start(configuration: ReferenceServerConfiguration(
            databasePath: scratch.appendingPathComponent("odd.db").path, adminToken: adminToken, callbackTimeout: 7200))
        defer { Task { await odd.stop() } }
        try await odd.addUser("alice", password: password)
        var settings = try connection().settings
        settings.baseURL = odd.baseURL
        let journeys = try journeys(ServerConnection(settings: settings, http: CurlHTTPClient(timeout: 5), environment: [:]))
        let password = password
        do {
            _ = try await journeys.bind(journey: "RegisterDevice", username: "alice", userId: "alice", password: { SecretBytes(utf8: password) },
                                        requestedAuthType: nil, newPIN: { throw KeyManagerError(.abort, "no PIN") })
            XCTFail("a 7200 s JWS lifetime was accepted")
        } catch let error as any KeymgrFailure {
            XCTAssertEqual(error.code, .serverRejected, "\(error)")
            XCTAssertTrue(error.message.contains("7200"), error.message)
        }
        XCTAssertTrue(try manager.allKeys().isEmpty, "no key is bound for a callback keymgr refuses")
    }

    func testRule1ListedKeysAreRegisteredAndMirroredThenASecondRunWritesNothing() async throws {
        // A key bound locally and registered on the server by other means is first seen by this sync.
        var request = BindRequest(userId: "bob")
        request.challenge = "c"
        let bound = try manager.bind(request, newPIN: { throw KeyManagerError(.abort, "") })
        try await server.addDevice(BoundDevice(uuid: bound.key.kid, realmPath: "/realms/root", user: "bob",
                                               deviceId: try manager.deviceIdentity().deviceId, deviceName: "front desk",
                                               createdDate: 1_795_000_000_000, lastAccessDate: 1_795_000_100_000,
                                               key: ["kid": bound.key.kid, "kty": "EC"]))
        let first = try await sync()
        XCTAssertEqual(first.registered, [bound.key.kid])
        XCTAssertTrue(first.errors.isEmpty, "\(first.errors)")
        let mirrored = try XCTUnwrap(try key(bound.key.kid))
        XCTAssertEqual(mirrored.serverState, .registered)
        XCTAssertEqual(mirrored.deviceName, "front desk")
        XCTAssertEqual(mirrored.serverLastAccessAt, Date(timeIntervalSince1970: 1_795_000_100))

        let auditBefore = try auditCount()
        let second = try await sync()
        XCTAssertEqual(second.writes, 0)
        XCTAssertEqual(second.inSync, 1)
        XCTAssertTrue(second.registered.isEmpty)
        XCTAssertEqual(try auditCount(), auditBefore)
    }

    /// Local changes commit a batch of users at a time: more users than one batch, none lost or applied twice, and
    /// a second run (across the same batch boundaries) writes nothing.
    func testBatchesOfUsersLoseAndDoubleNothing() async throws {
        let names = ["ann", "ben", "cat", "dan", "eve"]
        var kids: [String] = []
        for name in names {
            var request = BindRequest(userId: name)
            request.challenge = "c"
            let bound = try manager.bind(request, newPIN: { throw KeyManagerError(.abort, "") })
            kids.append(bound.key.kid)
            try await server.addDevice(BoundDevice(uuid: bound.key.kid, realmPath: "/realms/root", user: name,
                                                   deviceId: try manager.deviceIdentity().deviceId, deviceName: "desk \(name)",
                                                   createdDate: 1_795_000_000_000, lastAccessDate: 1_795_000_100_000,
                                                   key: ["kid": bound.key.kid, "kty": "EC"]))
        }
        let first = try await sync { $0.batchSize = 2 }
        XCTAssertTrue(first.errors.isEmpty, "\(first.errors)")
        XCTAssertEqual(first.registered.sorted(), kids.sorted())
        XCTAssertEqual(first.writes, 2 * names.count, "one audit entry and one row per user")
        for (name, kid) in zip(names, kids) {
            let key = try XCTUnwrap(try key(kid))
            XCTAssertEqual(key.serverState, .registered)
            XCTAssertEqual(key.deviceName, "desk \(name)")
        }
        let registered = try manager.auditEntries(AuditFilter(event: "key.registered")).compactMap(\.kid)
        XCTAssertEqual(registered.sorted(), kids.sorted())
        XCTAssertTrue(try manager.verifyAudit().isIntact)

        let auditBefore = try auditCount()
        let second = try await sync { $0.batchSize = 2 }
        XCTAssertEqual(second.writes, 0)
        XCTAssertEqual(second.inSync, names.count)
        XCTAssertEqual(try auditCount(), auditBefore)
    }

    func testRule2AKeyRemovedOnTheServerIsRevokedHere() async throws {
        let settled = try await registerSettled(["alice", "bob", "carol", "dave", "erin"])
        let keys = ["alice", "bob", "carol", "dave", "erin"].compactMap { settled[$0] }
        _ = try await server.deleteDevice(uuid: keys[0].kid)
        let report = try await sync()
        XCTAssertEqual(report.revoked, [keys[0].kid])
        XCTAssertEqual(report.inSync, 4)
        let revoked = try XCTUnwrap(try key(keys[0].kid))
        XCTAssertEqual(revoked.status, .revoked)
        XCTAssertEqual(revoked.serverState, .deleted)
        XCTAssertNil(try manager.store.read { try $0.key(kid: keys[0].kid)?.wrappedPrivateKey })
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "key.revokedByServer")).map(\.kid), [keys[0].kid])
        let again = try await sync()
        XCTAssertEqual(again.writes, 0)
    }

    func testRule3ARetiredKeyIsDeletedOnTheServer() async throws {
        let old = try await register("alice")
        _ = try manager.rebind(userId: old.userId, kid: nil, authType: .none, newPIN: { throw KeyManagerError(.abort, "") })
        XCTAssertEqual(try key(old.kid)?.serverState, .pendingDeletion)
        let report = try await sync()
        XCTAssertEqual(report.serverDeleted, [old.kid])
        XCTAssertEqual(try key(old.kid)?.serverState, .deleted)
        let remaining = try await server.devices(user: "alice")
        XCTAssertTrue(remaining.isEmpty, "\(remaining)")
        let again = try await sync()
        XCTAssertEqual(again.writes, 0)
    }

    func testRule3AKeyAlreadyGoneFromTheServerIsConfirmedByItsAbsence() async throws {
        let old = try await register("alice")
        _ = try manager.revoke(userId: nil, kid: old.kid, reason: "lost")
        _ = try await server.deleteDevice(uuid: old.kid)
        let report = try await sync()
        XCTAssertEqual(report.serverDeleted, [old.kid])
        XCTAssertEqual(try key(old.kid)?.serverState, .deleted)
    }

    func testRule4OrphansAreReportedAndPrunedOnlyWhenAsked() async throws {
        try await register("alice")
        let orphan = UUID().uuidString
        try await server.addDevice(BoundDevice(uuid: orphan, realmPath: "/realms/root", user: "alice",
                                               deviceId: try manager.deviceIdentity().deviceId, deviceName: "test kiosk",
                                               createdDate: 0, lastAccessDate: 0, key: ["kid": orphan]))
        let foreign = UUID().uuidString
        try await server.addDevice(BoundDevice(uuid: foreign, realmPath: "/realms/root", user: "alice",
                                               deviceId: "another-device", deviceName: "phone",
                                               createdDate: 0, lastAccessDate: 0, key: ["kid": foreign]))
        let reported = try await sync()
        XCTAssertEqual(reported.orphans, [orphan])
        var onServer = try await server.devices(user: "alice").map(\.uuid)
        XCTAssertTrue(onServer.contains(orphan))
        let pruned = try await sync { $0.pruneOrphans = true }
        XCTAssertEqual(pruned.orphans, [orphan])
        onServer = try await server.devices(user: "alice").map(\.uuid)
        XCTAssertFalse(onServer.contains(orphan))
        XCTAssertTrue(onServer.contains(foreign), "another device's binding is never touched")
    }

    func testRule6OneUsersFaultChangesNothingForThatUserAndTheOthersGoOn() async throws {
        let faults: [(String, Fault)] = [("bob", .status500), ("carol", .delay(seconds: 5)), ("dave", .malformedJSON),
                                         ("erin", .endlessPaging), ("frank", .hugeBody)]
        let keys = try await registerSettled(["alice"] + faults.map(\.0) + ["gina", "hank", "ivan", "judy"])
        for (name, _) in faults + [("alice", .status500)] { _ = try await server.deleteDevice(uuid: keys[name]!.kid) }
        for (name, fault) in faults { await server.setFault(fault, forUser: name) }

        var options = SyncOptions()
        options.maxRevokePercent = 50
        let report = try await service(timeout: 1).run(options)
        XCTAssertEqual(Set(report.errors.map(\.userId)), Set(faults.map { keys[$0.0]!.userId }), "\(report.errors)")
        XCTAssertEqual(report.revoked, [keys["alice"]!.kid], "alice was reconciled; the faulted users were not")
        for (name, _) in faults { XCTAssertEqual(try key(keys[name]!.kid)?.status, .active, name) }
        XCTAssertEqual(report.inSync, 4)
        let codes = Dictionary(uniqueKeysWithValues: report.errors.map { ($0.userId, $0.code) })
        XCTAssertEqual(codes[keys["bob"]!.userId], .serverUnavailable)
        XCTAssertEqual(codes[keys["carol"]!.userId], .timeout)
    }

    func testRule7TheSafetyValveAppliesNothingUnlessForced() async throws {
        var keys: [UserKey] = []
        for name in ["alice", "bob", "carol", "dave", "erin"] { keys.append(try await register(name)) }
        for key in keys.prefix(4) { _ = try await server.deleteDevice(uuid: key.kid) }
        let auditBefore = try auditCount()
        let stopped = try await sync()
        XCTAssertTrue(stopped.safetyValveTripped)
        XCTAssertEqual(stopped.plannedRevocations, 4)
        XCTAssertEqual(stopped.revocationLimit, 1)
        XCTAssertEqual(Set(stopped.revoked), Set(keys.prefix(4).map(\.kid)), "the report lists what the valve held back")
        XCTAssertEqual(try auditCount(), auditBefore)
        XCTAssertEqual(try manager.keys(userId: nil, statuses: [.active]).count, 5)
        let forced = try await sync { $0.force = true }
        XCTAssertEqual(forced.revoked.count, 4)
    }

    func testDryRunPlansButWritesNothing() async throws {
        let old = try await register("alice")
        try await register("bob")
        _ = try manager.rebind(userId: old.userId, kid: nil, authType: .none, newPIN: { throw KeyManagerError(.abort, "") })
        let auditBefore = try auditCount()
        let planned = try await sync { $0.dryRun = true }
        XCTAssertTrue(planned.dryRun)
        XCTAssertEqual(planned.serverDeleted, [old.kid])
        XCTAssertEqual(try auditCount(), auditBefore)
        let onServer = try await server.devices(user: "alice").map(\.uuid)
        XCTAssertEqual(onServer, [old.kid], "nothing deleted on the server either")
    }

    func testOneSyncAtATime() throws {
        let lease = try SyncLease(home: home)
        XCTAssertThrowsError(try SyncLease(home: home)) { error in
            XCTAssertEqual((error as? any KeymgrFailure)?.code, .busy)
        }
        lease.release()
        XCTAssertNoThrow(try SyncLease(home: home))
    }

    func testTheLeaseRefusesAMissingOrUnsafeHomeWithoutTouchingIt() throws {
        let missing = StoreLocation(url: scratch.appendingPathComponent("nowhere"))
        XCTAssertThrowsError(try SyncLease(home: missing)) { error in
            XCTAssertEqual((error as? any KeymgrFailure)?.code, .config)
            XCTAssertTrue("\(error)".contains("keymgr init"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing.url.path))
        chmod(home.url.path, 0o777)
        defer { chmod(home.url.path, 0o700) }
        XCTAssertThrowsError(try SyncLease(home: home)) { error in
            XCTAssertEqual((error as? any KeymgrFailure)?.code, .config)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.url.appendingPathComponent("sync.lock").path))
    }

    func testHostileUserIdReachesTheServerAsOneEncodedSegment() async throws {
        let userId = "a/b ..?# c"
        var request = BindRequest(userId: userId)
        request.challenge = "c"
        let bound = try manager.bind(request, newPIN: { throw KeyManagerError(.abort, "") })
        try await server.addDevice(BoundDevice(uuid: bound.key.kid, realmPath: "/realms/root", user: userId,
                                               deviceId: try manager.deviceIdentity().deviceId, deviceName: "x",
                                               createdDate: 0, lastAccessDate: 0, key: ["kid": bound.key.kid]))
        await server.clearRecordedRequests()
        let report = try await sync()
        XCTAssertEqual(report.registered, [bound.key.kid], "\(report.errors)")
        let targets = await server.recordedRequests().map(\.target)
        XCTAssertTrue(targets.contains { $0.contains("/users/a%2Fb%20%2E%2E%3F%23%20c/devices/2fa/binding") }, "\(targets)")
    }

    func testRetryAfterOn503IsHonoured() async throws {
        let key = try await registerSettled(["alice"])["alice"]!
        await server.setFault(.status503(retryAfter: 1), forUser: "alice", count: 1)
        let report = try await sync()
        XCTAssertTrue(report.errors.isEmpty, "\(report.errors)")
        XCTAssertEqual(report.inSync, 1)
        XCTAssertEqual(try self.key(key.kid)?.status, .active)
    }
}
