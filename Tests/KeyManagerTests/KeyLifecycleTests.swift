import Foundation
import GRDB
@testable import KeyManager
@testable import Storage
import XCTest

final class KeyLifecycleTests: KeyManagerTestCase {
    func testBindingJWSVerifiesIndependentlyWithTheDocumentedShape() throws {
        let result = try bind("id=alice,ou=user,o=alpha", challenge: "c2VydmVyLWNoYWxsZW5nZQ==")
        let jws = try XCTUnwrap(result.jws)
        let verified = try IndependentVerifier.verify(jws, publicJWK: result.jwk)
        XCTAssertEqual(verified.header["typ"]?.stringValue, "JWS")
        XCTAssertEqual(verified.header["alg"]?.stringValue, "ES256")
        XCTAssertEqual(verified.header["kid"]?.stringValue, result.key.kid)
        let headerJWK = try XCTUnwrap(verified.header["jwk"]?.objectValue)
        XCTAssertEqual(headerJWK["kty"]?.stringValue, "EC")
        XCTAssertEqual(headerJWK["crv"]?.stringValue, "P-256")
        XCTAssertEqual(headerJWK["use"]?.stringValue, "sig")
        XCTAssertEqual(headerJWK["alg"]?.stringValue, "ES256")
        XCTAssertEqual(headerJWK["kid"]?.stringValue, result.key.kid)
        XCTAssertEqual(verified.claims["sub"]?.stringValue, "id=alice,ou=user,o=alpha")
        XCTAssertEqual(verified.claims["challenge"]?.stringValue, "c2VydmVyLWNoYWxsZW5nZQ==")
        XCTAssertEqual(verified.claims["iss"]?.stringValue, "keymgr")
        XCTAssertEqual(verified.claims["platform"]?.stringValue, "linux")
        let iat = try XCTUnwrap(verified.claims["iat"]?.intValue)
        XCTAssertEqual(verified.claims["nbf"]?.intValue, iat)
        XCTAssertEqual(verified.claims["exp"]?.intValue, iat + 60)
        XCTAssertEqual(UUID(uuidString: result.key.kid)?.uuidString, result.key.kid, "kid is a UUID, as the Ping SDK makes it")
    }

    func testSigningJWSVerifiesIndependentlyWithCustomClaims() throws {
        let bound = try bind("bob")
        let signed = try sign("bob", claims: ["amount": .int(42), "purpose": "door"])
        XCTAssertEqual(signed.kid, bound.key.kid)
        let verified = try IndependentVerifier.verify(signed.jws, publicJWK: bound.jwk)
        XCTAssertEqual(Set(verified.header.keys), ["alg", "kid", "typ"])
        XCTAssertEqual(verified.header["kid"]?.stringValue, bound.key.kid)
        XCTAssertEqual(verified.claims["sub"]?.stringValue, "bob")
        XCTAssertEqual(verified.claims["challenge"]?.stringValue, "challenge-for-bob")
        XCTAssertEqual(verified.claims["amount"]?.intValue, 42)
        XCTAssertEqual(verified.claims["purpose"]?.stringValue, "door")
        for name in ["iat", "nbf", "exp", "iss"] { XCTAssertNotNil(verified.claims[name], name) }
        XCTAssertNotNil(try manager.keys(userId: "bob", statuses: [.active]).first?.lastUsedAt)
    }

    func testReservedCustomClaimsAreRefused() throws {
        try bind("carol")
        for name in JOSEClaims.reserved.sorted() {
            assertCode(.invalidCustomClaims) { _ = try self.sign("carol", claims: [name: "x"]) }
        }
    }

    func testBindSupersedesThePreviousKeyForTheSameIssuerOnly() throws {
        let first = try bind("dave")
        let other = try bind("dave", issuer: "other-app")
        let second = try bind("dave")
        let all = try manager.keys(userId: "dave", statuses: Set(KeyStatus.allCases))
        XCTAssertEqual(all.first { $0.kid == first.key.kid }?.status, .superseded)
        XCTAssertEqual(all.first { $0.kid == other.key.kid }?.status, .active)
        XCTAssertEqual(all.first { $0.kid == second.key.kid }?.status, .active)
        let material = try manager.store.read { try $0.key(kid: first.key.kid)?.wrappedPrivateKey }
        XCTAssertNil(material, "a superseded key's material is destroyed")
        // Two usable keys now: signing by user asks for a kid and names the candidates.
        XCTAssertThrowsError(try sign("dave")) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .usage)
            XCTAssertTrue("\(error)".contains(other.key.kid) && "\(error)".contains(second.key.kid))
        }
    }

    func testRegisteredKeyIsQueuedForServerDeletionWhenRetired() throws {
        let first = try bind("erin")
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { writer in
            var key = try XCTUnwrap(try writer.key(kid: first.key.kid))
            key.serverState = .registered
            try writer.update(key)
        }
        _ = try manager.rebind(userId: "erin", kid: nil, authType: .applicationPIN, newPIN: pin("482916"))
        XCTAssertEqual(try manager.store.read { try $0.key(kid: first.key.kid)?.serverState }, .pendingDeletion)
    }

    func testRevokeDestroysMaterialTokensAndRegistrationButKeepsATombstone() throws {
        let bound = try bind("frank")
        let now = Date()
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { writer in
            try writer.save(ServerRecord(dialect: "curity", baseUrl: "http://127.0.0.1:1", updatedAt: now))
            try writer.save(TokenRecord(userId: "frank", serverName: "default", clientId: "c", tokenType: "DPoP",
                                        sealedAccessToken: Data([1]), sealedRefreshToken: nil, sealedIdToken: nil, scope: nil,
                                        expiresAt: nil, jkt: nil, sealedDpopKey: Data([2]), updatedAt: now))
            try writer.save(RegistrationRecord(userId: "frank", serverName: "default", clientId: "c", sealedClientSecret: Data([3]),
                                               sealedRegistrationAccessToken: nil, registrationClientUri: nil, clientIdIssuedAt: nil,
                                               clientSecretExpiresAt: nil, tokenEndpointAuthMethod: nil, grantTypes: nil,
                                               scope: nil, softwareId: nil, createdAt: now, updatedAt: now))
        }
        let revoked = try manager.revoke(userId: "frank", kid: nil, reason: "lost badge")
        XCTAssertEqual(revoked.map(\.kid), [bound.key.kid])
        XCTAssertEqual(revoked.first?.status, .revoked)
        XCTAssertEqual(revoked.first?.revokeReason, "lost badge")
        try manager.store.read { reader in
            XCTAssertNil(try reader.key(kid: bound.key.kid)?.wrappedPrivateKey)
            XCTAssertNotNil(try reader.key(kid: bound.key.kid), "tombstone kept")
            XCTAssertTrue(try reader.tokenSets(userId: "frank").isEmpty)
            XCTAssertTrue(try reader.registrations(userId: "frank").isEmpty)
        }
        assertCode(.clientNotRegistered) { _ = try self.sign("frank") }
        assertCode(.clientNotRegistered) { _ = try self.manager.revoke(userId: "frank", kid: nil, reason: nil) }
    }

    func testEveryChangeIsAuditedAndTheChainHolds() throws {
        try bind("gina", .applicationPIN, pin: "482916")
        _ = try sign("gina", pin: "482916")
        _ = try manager.changePIN(userId: "gina", kid: nil, oldPIN: pin("482916"), newPIN: pin("730519"))
        _ = try manager.revoke(userId: "gina", kid: nil, reason: nil)
        let events = try manager.auditEntries().map(\.event)
        XCTAssertEqual(events, ["store.initialized", "key.bound", "key.signed", "pin.changed", "key.revoked"])
        XCTAssertTrue(try manager.verifyAudit().isIntact)
        XCTAssertEqual(try manager.auditEntries().last?.actor, KeyManager.osUserName())
    }

    func testMasterKeyRotationKeepsEveryKeyUsable() throws {
        try bind("hana", .applicationPIN, pin: "482916")
        try bind("ivan")
        let oldKey = try Data(contentsOf: home.url.appendingPathComponent("master.key"))
        let rotation = try manager.rotateMasterKey()
        XCTAssertEqual(rotation.secretsRewrapped, 4, "master check, two private keys, one PIN verifier")
        XCTAssertNotEqual(try Data(contentsOf: home.url.appendingPathComponent("master.key")), oldKey)
        manager = try reopen()
        _ = try sign("hana", pin: "482916")
        _ = try sign("ivan")
        // The old key no longer opens the store.
        let legacy = scratch.appendingPathComponent("old.key")
        try oldKey.write(to: legacy)
        assertCode(.config) { _ = try KeyManager.openEmbedded(home: self.home, environment: ["KEYMGR_MASTER_KEY_FILE": legacy.path]) }
    }

    /// A manager that still holds the master key another process rotated away signs with both kinds of key: the
    /// selected row is read again under the new key before its sealed material is opened (no stale key is used).
    func testSigningAfterAnotherProcessRotatedTheMasterKey() throws {
        try bind("jana", .applicationPIN, pin: "482916")
        try bind("karl")
        _ = try reopen().rotateMasterKey()
        _ = try sign("karl")
        _ = try sign("jana", pin: "482916")
        let events = try manager.auditEntries().map(\.event)
        XCTAssertEqual(Array(events.suffix(3)), ["master.rotated", "key.signed", "key.signed"])
        XCTAssertTrue(try manager.verifyAudit().isIntact)
    }

    func testMasterKeyMissingOrWrongIsAConfigurationError() throws {
        let keyFile = home.url.appendingPathComponent("master.key")
        let wrong = scratch.appendingPathComponent("wrong.key")
        try Data(repeating: 7, count: 32).write(to: wrong)
        assertCode(.config) { _ = try KeyManager.openEmbedded(home: self.home, environment: ["KEYMGR_MASTER_KEY_FILE": wrong.path]) }
        try FileManager.default.removeItem(at: keyFile)
        XCTAssertThrowsError(try reopen()) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .config)
            XCTAssertTrue("\(error)".contains("missing"), "\(error)")
        }
    }

    func testMasterKeyFromSystemdCredentialsDirectoryComesFirst() throws {
        let credentials = scratch.appendingPathComponent("credentials")
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: home.url.appendingPathComponent("master.key"),
                                         to: credentials.appendingPathComponent("keymgr.master"))
        try FileManager.default.removeItem(at: home.url.appendingPathComponent("master.key"))
        let opened = try KeyManager.openEmbedded(home: home, environment: ["CREDENTIALS_DIRECTORY": credentials.path])
        XCTAssertNoThrow(try opened.status())
    }

    func testStatusCountsUsersAndUsableKeys() throws {
        try bind("a")
        try bind("b")
        _ = try manager.revoke(userId: "b", kid: nil, reason: nil)
        let status = try manager.status()
        XCTAssertEqual(status.users, 2)
        XCTAssertEqual(status.keys, 1)
        XCTAssertEqual(status.schemaVersion, EmbeddedMigration.latestVersion)
        XCTAssertEqual(try manager.users().map(\.activeKeys), [1, 0])
    }
}

/// Issue 9: a store made before the integrity MACs (schema 1) is upgraded, not bricked, and "no MAC yet" is no bypass.
final class IntegrityUpgradeTests: KeyManagerTestCase {
    func testAStoreMadeBeforeTheMACsIsStampedOnceThenAMissingMACIsTampering() throws {
        let plain = try makeLegacyStore()
        try checkStampedOnFirstOpen(readOnly: false)
        manager = nil
        manager = try KeyManager.openEmbedded(home: home, environment: [:])
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "store.integrityStamped")).count, 1, "stamped once")
        // From now on a missing MAC is tampering, never "not stamped yet".
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE user_keys SET row_mac = NULL WHERE kid = ?", arguments: [plain.key.kid])
        }
        manager = nil
        manager = try KeyManager.openEmbedded(home: home, environment: [:])
        assertCode(.tampered) { _ = try self.sign("ada") }
        _ = try sign("bea", pin: "482916")
    }

    /// A read-only open (`keymgr status`, `list`) of an old store still migrates and stamps it: the writer opens then.
    func testAReadOnlyOpenOfAStoreMadeBeforeTheMACsStampsIt() throws {
        _ = try makeLegacyStore()
        manager = try KeyManager.openEmbedded(home: home, readOnly: true, environment: [:])
        XCTAssertEqual(try manager.status().keys, 2)
        try checkStampedOnFirstOpen(readOnly: true)
    }

    /// A store made before the row MACs (schema 2, check version 2) is stamped once, on the first open; from then on
    /// a missing row MAC is tampering, and the old check value put back buys no second stamping.
    func testAStoreMadeBeforeTheRowMACsIsStampedOnceThenAMissingRowMACIsTampering() throws {
        let plain = try makeLegacyStore(schema: 2)
        let oldCheck = try rawConnection().read { db in try Data.fetchOne(db, sql: "SELECT master_key_check FROM device") }
        try checkStampedOnFirstOpen(readOnly: false)
        XCTAssertEqual(try manager.verifyAudit().rowIssues, [])
        XCTAssertGreaterThan(try manager.verifyAudit().rowsChecked, 4)
        try assertFieldMACsGone()
        manager = nil
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE users SET row_mac = NULL WHERE user_id = 'ada'")
        }
        manager = try KeyManager.openEmbedded(home: home, environment: [:])
        assertCode(.tampered) { _ = try self.sign("ada") }
        _ = try sign("bea", pin: "482916")
        manager = nil
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE device SET master_key_check = ?", arguments: [oldCheck])
        }
        // Either the open refuses (the check says "re-stamp" but the rows are stamped) or the device row does.
        do {
            manager = try KeyManager.openEmbedded(home: home, environment: [:])
            assertCode(.tampered) { _ = try self.manager.status() }
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .tampered, "\(error)")
        }
        XCTAssertEqual(try rawConnection().read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM audit_events WHERE event = 'store.integrityStamped'")
        }, 1, "no second stamping")
        _ = plain
    }

    /// Issue 34: field MACs are checked once, while a store made before row MACs (schema 2) is upgraded. An edit
    /// made while it lay unused (here a PIN record's retry limit raised) shows: the open refuses and stamps nothing.
    func testAnEditedFieldOfAStoreMadeBeforeTheRowMACsIsRefusedAndNothingIsStamped() throws {
        let plain = try makeLegacyStore(schema: 2)
        let (deviceRetry, pinRetry) = try rawConnection().read { db in
            (try Int.fetchOne(db, sql: "SELECT pin_retry FROM device") ?? 0, try Int.fetchOne(db, sql: "SELECT pin_retry FROM app_pins") ?? 0)
        }
        // A PIN record's retry limit, a device setting, a key's status: each edit alone, then undone.
        let edits = [
            ("UPDATE app_pins SET pin_retry = \(pinRetry % 10 + 1)", "UPDATE app_pins SET pin_retry = \(pinRetry)"),
            ("UPDATE device SET pin_retry = \(deviceRetry % 10 + 1)", "UPDATE device SET pin_retry = \(deviceRetry)"),
            ("UPDATE user_keys SET status = 'locked' WHERE kid = '\(plain.key.kid)'",
             "UPDATE user_keys SET status = 'active' WHERE kid = '\(plain.key.kid)'"),
        ]
        for (edit, undo) in edits {
            try rawConnection().write { db in try db.execute(sql: edit) }
            assertCode(.tampered) { self.manager = try KeyManager.openEmbedded(home: self.home, environment: [:]) }
            try rawConnection().read { db in
                XCTAssertNil(try String.fetchOne(db, sql: "SELECT row_sets FROM device"), "no row was stamped: \(edit)")
                XCTAssertEqual(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM audit_events WHERE event = 'store.integrityStamped'"), 0)
                XCTAssertGreaterThan(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dropped_columns") ?? 0, 0, "kept for the next try")
            }
            try rawConnection().write { db in try db.execute(sql: undo) }
        }
        // Undone, the store upgrades.
        try checkStampedOnFirstOpen(readOnly: false)
        try assertFieldMACsGone()
    }

    /// A store stamped with row MACs while the field MAC columns were there (schema 11): migration 0012 drops them,
    /// every row is checked under the columns it was stamped with (the dropped values put back), then stamped anew.
    func testAStoreStampedWithFieldMACColumnsIsCheckedThenRestampedWithoutThem() throws {
        _ = try makeSchema11Store()
        manager = try KeyManager.openEmbedded(home: home, environment: [:])
        _ = try sign("ada")
        _ = try sign("bea", pin: "482916")
        let audit = try manager.verifyAudit()
        XCTAssertTrue(audit.isIntact)
        XCTAssertEqual(audit.rowIssues, [])
        try assertFieldMACsGone()
    }

    /// The dropped values are under the old row MACs: one edited before the migration shows at the first open.
    func testAFieldMACEditedBeforeMigration12IsTampering() throws {
        let plain = try makeSchema11Store()
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE user_keys SET integrity_mac = x'00' WHERE kid = ?", arguments: [plain.key.kid])
        }
        assertCode(.tampered) { self.manager = try KeyManager.openEmbedded(home: self.home, environment: [:]) }
    }

    private func assertFieldMACsGone(file: StaticString = #filePath, line: UInt = #line) throws {
        try rawConnection().read { db in
            for table in ["device", "user_keys", "app_pins", "servers"] {
                XCTAssertEqual(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM pragma_table_info('\(table)') WHERE name = 'integrity_mac'"),
                               0, table, file: file, line: line)
            }
            XCTAssertEqual(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dropped_columns"), 0, file: file, line: line)
        }
    }

    /// What keymgr of schema 11 left: the field MAC columns filled, and every row stamped over them.
    private func makeSchema11Store() throws -> BindResult {
        let plain = try bind("ada")
        try bind("bea", .applicationPIN, pin: "482916")
        _ = try sign("ada")
        let keys = manager.integrity.rowKeys
        let macs = try fieldMACs()
        manager = nil
        try rawConnection().writeWithoutTransaction { db in
            try db.execute(sql: undoingMigrations(after: 11))
            try fill(db, macs)
        }
        // Stamped over the columns as they are now (a fresh connection: no statement prepared before the change).
        let store = try Store.open(home: home.home, create: false, access: .readWrite, digest: SHA256.hash)
        try store.write { try $0.stampAllRows(keys: keys) }
        try rawConnection().writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA user_version = 11")
            let text = try XCTUnwrap(try String.fetchOne(db, sql: "SELECT row_sets FROM device WHERE id = 1"))
            let lines = text.split(separator: "\n").map { line in
                line.hasPrefix("keymgr-row-sets-v1 ") ? "keymgr-row-sets-v1 schema=11" : String(line)
            }
            try db.execute(sql: "UPDATE device SET row_sets = ? WHERE id = 1", arguments: [lines.joined(separator: "\n") + "\n"])
            let row = try XCTUnwrap(try Row.fetchOne(db, sql: "SELECT * FROM device WHERE id = 1"))
            let (columns, values) = RowIntegrity.columnsAndValues(of: row)
            let mac = try keys.mac(RowIntegrity.encoding(table: "device", columns: columns, values: values))
            try db.execute(sql: "UPDATE device SET row_mac = ? WHERE id = 1", arguments: [Data(mac)])
        }
        return plain
    }

    /// The field MACs keymgr before migration 0012 kept, by table and row key, for the rows the store holds now.
    private func fieldMACs() throws -> [(table: String, key: String, column: String, mac: Data)] {
        let legacy = try LegacyFieldMACs(hierarchy: manager.hierarchy)
        return try manager.store.read { reader in
            var found: [(String, String, String, Data)] = []
            let device = try XCTUnwrap(try reader.device())
            found.append(("device", "1", "id", try legacy.mac(device)))
            for key in try reader.keys(statuses: Set(UserKeyRecord.Status.allCases)) {
                found.append(("user_keys", key.kid, "kid", try legacy.mac(key)))
            }
            for pin in try reader.appPINs() { found.append(("app_pins", pin.kid, "kid", try legacy.mac(pin))) }
            for server in try reader.servers() { found.append(("servers", server.name, "name", try legacy.mac(server))) }
            return found
        }
    }

    private func fill(_ db: Database, _ macs: [(table: String, key: String, column: String, mac: Data)]) throws {
        for entry in macs {
            try db.execute(sql: "UPDATE \(entry.table) SET integrity_mac = ? WHERE CAST(\(entry.column) AS TEXT) = ?",
                           arguments: [entry.mac, entry.key])
        }
    }

    /// What keymgr before migration 0002 (schema 1, no MAC columns, the version 1 master key check) or before
    /// migration 0003 (schema 2, no row MACs, the version 2 check, no key backends) left.
    private func makeLegacyStore(schema: Int = 1) throws -> BindResult {
        let plain = try bind("ada")
        try bind("bea", .applicationPIN, pin: "482916")
        _ = try sign("ada")
        let deviceId = try XCTUnwrap(try manager.store.read { try $0.device() }).deviceId
        let legacyCheck = try manager.hierarchy.seal(schema == 1 ? KeyHierarchy.legacyMasterCheckPlaintext : KeyHierarchy.v2MasterCheckPlaintext,
                                                     in: .masterCheck(deviceId: deviceId))
        let macs = try fieldMACs()
        manager = nil
        try rawConnection().writeWithoutTransaction { db in
            // The migrations after 0006 (0012's field MAC columns back, filled as keymgr of schema 2 filled them),
            // 0004's key-backend columns, then 0003's row MACs.
            try db.execute(sql: undoingMigrations(after: 6))
            try fill(db, macs)
            try db.execute(sql: """
                ALTER TABLE device DROP COLUMN key_backend;
                ALTER TABLE device DROP COLUMN key_backend_reason;
                ALTER TABLE device DROP COLUMN tpm_tcti;
                ALTER TABLE device DROP COLUMN tpm_secrets;
                ALTER TABLE device DROP COLUMN tpm_counter_index;
                ALTER TABLE device DROP COLUMN rollback_counter;
                ALTER TABLE user_keys DROP COLUMN key_backend;
                ALTER TABLE device DROP COLUMN row_sets;
                ALTER TABLE device DROP COLUMN row_mac;
                ALTER TABLE users DROP COLUMN row_mac;
                ALTER TABLE user_keys DROP COLUMN row_mac;
                ALTER TABLE app_pins DROP COLUMN row_mac;
                ALTER TABLE servers DROP COLUMN row_mac;
                ALTER TABLE registrations DROP COLUMN row_mac;
                ALTER TABLE tokens DROP COLUMN row_mac;
                ALTER TABLE sync_state DROP COLUMN row_mac;
                PRAGMA user_version = 2;
                """)
            try db.execute(sql: "UPDATE device SET master_key_check = ?", arguments: [legacyCheck])
            guard schema == 1 else { return }
            try db.execute(sql: """
                DROP TRIGGER audit_events_append_only_update;
                CREATE TRIGGER audit_events_append_only_update BEFORE UPDATE ON audit_events
                BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
                ALTER TABLE device DROP COLUMN integrity_mac;
                ALTER TABLE device DROP COLUMN audit_anchor_seq;
                ALTER TABLE device DROP COLUMN audit_anchor_mac;
                ALTER TABLE user_keys DROP COLUMN integrity_mac;
                ALTER TABLE app_pins DROP COLUMN integrity_mac;
                ALTER TABLE servers DROP COLUMN allow_insecure_http;
                ALTER TABLE servers DROP COLUMN integrity_mac;
                ALTER TABLE audit_events DROP COLUMN mac;
                PRAGMA user_version = 1;
                """)
        }
        return plain
    }

    private func checkStampedOnFirstOpen(readOnly: Bool) throws {
        if manager == nil { manager = try KeyManager.openEmbedded(home: home, readOnly: readOnly, environment: [:]) }
        _ = try sign("ada")
        _ = try sign("bea", pin: "482916")
        XCTAssertTrue(try manager.verifyAudit().isIntact)
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "store.integrityStamped")).count, 1)
    }
}
