import Foundation
import GRDB
import KeymgrCore
@testable import Storage
import XCTest

final class StoreRecordsTests: StorageTestCase {
    private func key(_ kid: String, user: String, issuer: String = "keymgr", status: UserKeyRecord.Status = .active) -> UserKeyRecord {
        UserKeyRecord(kid: kid, userId: user, issuer: issuer, authType: .none, publicJwk: "{}",
                      wrappedPrivateKey: status == .active || status == .locked ? Data([1, 2, 3]) : nil,
                      status: status, serverState: .unregistered, createdAt: Date())
    }

    func testKeysRoundTripWithUsernames() throws {
        let store = try openStore()
        let now = Date(timeIntervalSince1970: 1_795_000_000.5)
        var stored = key("k1", user: "ana lópez \"/\"")
        stored.createdAt = now
        try store.write { writer in
            try writer.upsertUser(userId: "ana lópez \"/\"", username: "ana", at: now)
            try writer.insert(stored)
        }
        let listings = try store.read { try $0.keyListings(statuses: [.active]) }
        XCTAssertEqual(listings, [KeyListing(key: stored, username: "ana")])
        XCTAssertEqual(try store.read { try $0.counts() }.usableKeys, 1)
    }

    func testOneUsableKeyPerUserAndIssuer() throws {
        let store = try openStore()
        try store.write { writer in
            try writer.upsertUser(userId: "bob", username: nil, at: Date())
            try writer.insert(key("k1", user: "bob"))
            try writer.insert(key("k2", user: "bob", issuer: "other"))
        }
        XCTAssertThrowsError(try store.write { try $0.insert(self.key("k3", user: "bob")) }) { error in
            XCTAssertEqual((error as? StorageError)?.code, .conflict)
        }
        XCTAssertEqual(try store.read { try $0.keys(userId: "bob", statuses: [.active]) }.map(\.kid), ["k1", "k2"])
    }

    func testFailedTransactionLeavesNothingBehind() throws {
        let store = try openStore()
        struct Stop: Error {}
        XCTAssertThrowsError(try store.write { writer in
            try writer.upsertUser(userId: "carol", username: nil, at: Date())
            try writer.appendAudit(NewAuditEvent(at: Date(), event: "test", actor: "t"))
            throw Stop()
        })
        XCTAssertNil(try store.read { try $0.user(id: "carol") })
        XCTAssertEqual(try store.read { try $0.auditEvents() }.count, 0)
    }

    func testPINFailureCounterIsSetOnlyForTheRecordCheckedAndCommitted() throws {
        let store = try openStore()
        try store.write { writer in
            try writer.upsertUser(userId: "dan", username: nil, at: Date())
            try writer.insert(key("k1", user: "dan"))
            try writer.save(AppPINRecord(kid: "k1", argon2MemoryKib: 64, argon2Iterations: 1, argon2Parallelism: 1,
                                         salt: Data(count: 16), verifier: Data(count: 32), pinRetry: 5, updatedAt: Date()))
        }
        XCTAssertEqual(try store.write { try $0.setPINFailures(kid: "k1", salt: Data(count: 16), count: 1, at: Date()) }, true)
        XCTAssertEqual(try store.read { try $0.appPIN(kid: "k1") }?.failedAttempts, 1)
        XCTAssertEqual(try store.write { try $0.setPINFailures(kid: "k1", salt: Data([9]), count: 5, at: Date()) }, false)
        XCTAssertEqual(try openStore(create: false).read { try $0.appPIN(kid: "k1") }?.failedAttempts, 1)
        XCTAssertEqual(try store.write { try $0.setPINFailures(kid: "nope", salt: Data(count: 16), count: 1, at: Date()) }, false)
    }

    func testServersRegistrationsTokensAndSyncState() throws {
        let store = try openStore()
        let now = Date()
        try store.write { writer in
            try writer.upsertUser(userId: "erin", username: nil, at: now)
            try writer.save(ServerRecord(dialect: "pingam", baseUrl: "http://127.0.0.1:1", updatedAt: now))
            try writer.save(RegistrationRecord(userId: "erin", serverName: "default", clientId: "c1", sealedClientSecret: Data([9]),
                                               sealedRegistrationAccessToken: nil, registrationClientUri: nil, clientIdIssuedAt: 1,
                                               clientSecretExpiresAt: 0, tokenEndpointAuthMethod: "client_secret_basic",
                                               grantTypes: "[\"refresh_token\"]", scope: "openid", softwareId: nil,
                                               createdAt: now, updatedAt: now))
            try writer.save(TokenRecord(userId: "erin", serverName: "default", clientId: "c1", tokenType: "DPoP",
                                        sealedAccessToken: Data([7]), sealedRefreshToken: nil, sealedIdToken: nil, scope: nil,
                                        expiresAt: now, jkt: "abc", sealedDpopKey: Data([8]), updatedAt: now))
            try writer.save(SyncStateRecord(serverName: "default", startedAt: now, finishedAt: now, users: 3))
        }
        try store.read { reader in
            XCTAssertEqual(try reader.server()?.dialect, "pingam")
            XCTAssertEqual(try reader.registration(userId: "erin", serverName: "default")?.clientId, "c1")
            XCTAssertEqual(try reader.tokenSet(userId: "erin", serverName: "default")?.jkt, "abc")
            XCTAssertEqual(try reader.lastSync()?.users, 3)
        }
        try store.write { writer in
            XCTAssertEqual(try writer.deleteTokenSets(userId: "erin"), 1)
            XCTAssertEqual(try writer.deleteRegistrations(userId: "erin"), 1)
        }
        XCTAssertTrue(try store.read { try $0.tokenSets() }.isEmpty)
    }
}

final class StoredTimestampTests: StorageTestCase {
    func testRecordDatesAreStoredAsKeymgrTimestamps() throws {
        let store = try openStore()
        let at = Date(timeIntervalSince1970: 1_795_000_000.123)
        try store.write { writer in
            try writer.upsertUser(userId: "alice", username: nil, at: at)
            try writer.insert(UserKeyRecord(kid: "k1", userId: "alice", issuer: "keymgr", authType: .none, publicJwk: "{}",
                                            wrappedPrivateKey: Data([1]), status: .active, serverState: .unregistered,
                                            createdAt: at, lastUsedAt: at))
        }
        let raw = try store.read { reader in
            try Row.fetchOne(reader.db, sql: "SELECT k.created_at, k.last_used_at, u.created_at AS user_created FROM user_keys k JOIN users u USING (user_id)")
        }
        let text = Timestamp.string(from: at)
        XCTAssertEqual(text, "2026-11-18T11:06:40.123Z")
        XCTAssertEqual(raw?["created_at"], text)
        XCTAssertEqual(raw?["last_used_at"], text)
        XCTAssertEqual(raw?["user_created"], text)
        XCTAssertEqual(try store.read { try $0.key(kid: "k1") }?.createdAt, Timestamp.date(from: text))
    }

    func testAnUnknownStoredEnumValueIsAnErrorNotAFallback() throws {
        let store = try openStore()
        let at = Date()
        try store.write { writer in
            try writer.upsertUser(userId: "alice", username: nil, at: at)
            try writer.insert(UserKeyRecord(kid: "k1", userId: "alice", issuer: "keymgr", authType: .biometricOnly,
                                            publicJwk: "{}", wrappedPrivateKey: Data([1]), status: .active,
                                            serverState: .unregistered, createdAt: at))
        }
        // What a writer with the sqlite3 tool can do: switch CHECK constraints off and store any text.
        try rawConnection().writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA ignore_check_constraints = ON")
            try db.execute(sql: "UPDATE user_keys SET auth_type = 'SUPERUSER' WHERE kid = 'k1'")
        }
        XCTAssertThrowsError(try store.read { try $0.key(kid: "k1") }, "an unknown auth type must not read as some other one")
    }

    /// Key rows are read by column name without `Decodable` (`UserKeyRecord.init(row:)`): a key with every field set
    /// to a value of its own reads back whole through each query that returns keys.
    func testAKeyWithEveryFieldSetReadsBackWholeThroughEachKeyQuery() throws {
        let store = try openStore()
        let at = { (seconds: Double) in Date(timeIntervalSince1970: 1_795_000_000 + seconds) }
        let stored = UserKeyRecord(kid: "K-every", userId: "erin", issuer: "https://issuer.example", authType: .biometricAllowFallback,
                                   publicJwk: #"{"kty":"EC"}"#, wrappedPrivateKey: Data([9, 8, 7]), status: .locked,
                                   serverState: .pendingDeletion, deviceName: "kiosk 7", serverLastAccessAt: at(1.001),
                                   createdAt: at(2.002), lastUsedAt: at(3.003), revokedAt: at(4.004), revokeReason: "lost")
        try store.write { writer in
            try writer.upsertUser(userId: "erin", username: "Erin", at: at(0))
            try writer.insert(stored)
        }
        try store.read { reader in
            XCTAssertEqual(try reader.key(kid: "K-every"), stored)
            XCTAssertEqual(try reader.keys(userId: "erin", statuses: [.locked]), [stored])
            XCTAssertEqual(try reader.keys(serverState: .pendingDeletion), [stored])
            XCTAssertEqual(try reader.keys(kidPrefix: "k-ev", limit: 5), [stored])
            XCTAssertEqual(try reader.keyListings(statuses: [.locked]), [KeyListing(key: stored, username: "Erin")])
        }
    }

    /// A key row's time edited into text keymgr never writes is reported as tampering, not read as some time.
    func testAKeyRowWithAnEditedTimeIsTampered() throws {
        let store = try openStore()
        try store.write { writer in
            try writer.upsertUser(userId: "alice", username: nil, at: Date())
            try writer.insert(UserKeyRecord(kid: "k1", userId: "alice", issuer: "keymgr", authType: .none, publicJwk: "{}",
                                            wrappedPrivateKey: Data([1]), status: .active, serverState: .unregistered,
                                            createdAt: Date()))
        }
        try rawConnection().writeWithoutTransaction { db in
            try db.execute(sql: "UPDATE user_keys SET last_used_at = 'yesterday' WHERE kid = 'k1'")
        }
        XCTAssertThrowsError(try store.read { try $0.key(kid: "k1") }) { error in
            XCTAssertEqual((error as? StorageError)?.code, .tampered, "\(error)")
        }
    }
}
