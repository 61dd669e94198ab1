import Foundation
import GRDB
import KeymgrCore
@testable import Storage
import XCTest

final class StoreOpeningTests: StorageTestCase {
    func testFreshHomeIsCreatedPrivate() throws {
        let store = try openStore()
        try store.write { try $0.upsertUser(userId: "alice", username: nil, at: Date()) }
        XCTAssertEqual(mode(home.url.path), 0o700)
        XCTAssertEqual(mode(home.databaseURL.path), 0o600)
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: home.databaseURL.path + suffix) {
            XCTAssertEqual(mode(home.databaseURL.path + suffix), 0o600, suffix)
        }
    }

    func testWorldWritableHomeIsRefused() throws {
        _ = try openStore()
        chmod(home.url.path, 0o777)
        XCTAssertThrowsError(try openStore(create: false)) { error in
            XCTAssertEqual((error as? StorageError)?.code, .insecureHome)
            XCTAssertTrue("\(error)".contains("chmod 700"), "\(error)")
        }
    }

    func testGroupWritableDatabaseIsRefused() throws {
        _ = try openStore()
        chmod(home.databaseURL.path, 0o660)
        XCTAssertThrowsError(try openStore(create: false)) { error in
            XCTAssertEqual((error as? StorageError)?.code, .insecureHome)
        }
    }

    func testHomeOwnedByAnotherUserIsRefused() throws {
        try XCTSkipUnless(geteuid() == 0, "only root can give a directory to another user")
        _ = try openStore()
        XCTAssertEqual(chown(home.url.path, 65534, 65534), 0)
        XCTAssertThrowsError(try openStore(create: false)) { error in
            XCTAssertEqual((error as? StorageError)?.code, .insecureHome)
        }
    }

    func testMissingStoreIsNotCreatedUnlessAsked() throws {
        XCTAssertThrowsError(try openStore(create: false)) { error in
            XCTAssertEqual((error as? StorageError)?.code, .notInitialized)
            XCTAssertTrue("\(error)".contains("keymgr init"))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.url.path))
    }

    func testEveryMigrationAppliesFromEmpty() throws {
        let store = try openStore()
        XCTAssertGreaterThan(EmbeddedMigration.latestVersion, 0)
        XCTAssertEqual(try store.schemaVersion(), EmbeddedMigration.latestVersion)
        let tables = try store.read { reader in
            try String.fetchAll(reader.db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        for table in ["device", "users", "user_keys", "app_pins", "servers", "registrations", "tokens",
                      "audit_events", "sync_state"] {
            XCTAssertTrue(tables.contains(table), "missing table \(table)")
        }
        // Reopening applies nothing twice.
        XCTAssertEqual(try openStore(create: false).schemaVersion(), EmbeddedMigration.latestVersion)
    }

    /// Migration 0006 rebuilds `servers` without the dialect's CHECK constraint: a store made before it keeps every
    /// server row (rowid and MAC columns too) and the registrations and tokens that reference them, and afterwards
    /// the table takes a dialect name the constraint would have refused (the dialect is checked in code).
    func testTheDialectConstraintIsDroppedAndEveryRowKept() throws {
        // A store of version 5 made from migrations 0001 to 0004 alone: the open below applies every later one.
        try FileManager.default.createDirectory(at: home.url, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try rawConnection().write { db in
            for migration in EmbeddedMigration.all where migration.version <= 5 { try db.execute(sql: migration.sql) }
        }
        chmod(home.databaseURL.path, 0o600)
        let before = "SELECT rowid, name, dialect, base_url, hex(row_mac) FROM servers ORDER BY name"
        try rawConnection().write { db in
            // The schema of version 5 as migrations 0001 to 0004 leave it: the dialect constrained, as 0001 to 0003 made it.
            try db.execute(sql: """
                PRAGMA foreign_keys = OFF;
                DROP TABLE servers;
                CREATE TABLE servers (
                    name TEXT PRIMARY KEY NOT NULL,
                    dialect TEXT NOT NULL CHECK (dialect IN ('pingam', 'curity')),
                    base_url TEXT NOT NULL, realm_path TEXT NOT NULL DEFAULT '/realms/root', credential_file TEXT,
                    credential_header TEXT NOT NULL DEFAULT 'Authorization', token_endpoint TEXT,
                    registration_endpoint TEXT, revocation_endpoint TEXT, device_authorization_endpoint TEXT,
                    token_binding TEXT NOT NULL DEFAULT 'bound' CHECK (token_binding IN ('bound', 'unbound')),
                    updated_at TEXT NOT NULL,
                    allow_insecure_http INTEGER NOT NULL DEFAULT 0 CHECK (allow_insecure_http IN (0, 1)),
                    integrity_mac BLOB, row_mac BLOB);
                INSERT INTO servers (rowid, name, dialect, base_url, updated_at, row_mac)
                    VALUES (7, 'default', 'pingam', 'https://am.example.com/am', 't', x'0102'),
                           (9, 'curity', 'curity', 'https://as.example.com', 't', x'0304');
                INSERT INTO users (user_id, created_at, updated_at) VALUES ('alice', 't', 't');
                INSERT INTO registrations (user_id, server_name, client_id, created_at, updated_at)
                    VALUES ('alice', 'curity', 'c1', 't', 't');
                PRAGMA user_version = 5;
                """)
            XCTAssertThrowsError(try db.execute(sql: "INSERT INTO servers (name, dialect, base_url, updated_at) VALUES ('x', 'future', 'u', 't')"))
        }
        let rows = try rawConnection().read { try Row.fetchAll($0, sql: before).map { $0.description } }
        let store = try openStore(create: false)
        XCTAssertEqual(try store.schemaVersion(), EmbeddedMigration.latestVersion)
        try store.read { reader in
            XCTAssertEqual(try Row.fetchAll(reader.db, sql: before).map { $0.description }, rows)
            XCTAssertEqual(try String.fetchAll(reader.db, sql: "SELECT client_id FROM registrations"), ["c1"])
            XCTAssertEqual(try Row.fetchAll(reader.db, sql: "SELECT * FROM pragma_foreign_key_check"), [])
        }
        try rawConnection().write { db in
            try db.execute(sql: "INSERT INTO servers (name, dialect, base_url, updated_at) VALUES ('x', 'future', 'u', 't')")
        }
        let foreignKeys = try store.pool.write { try Int.fetchOne($0, sql: "PRAGMA foreign_keys") }
        XCTAssertEqual(foreignKeys, 1, "the migration turns foreign keys back on")
    }

    func testDatabaseFromANewerKeymgrIsRefused() throws {
        _ = try openStore()
        let future = EmbeddedMigration.latestVersion + 1
        try rawConnection().write { try $0.execute(sql: "PRAGMA user_version = \(future)") }
        XCTAssertThrowsError(try openStore(create: false)) { error in
            XCTAssertEqual((error as? StorageError)?.code, .newerSchema)
            let message = "\(error)"
            XCTAssertTrue(message.contains("\(future)") && message.contains("\(EmbeddedMigration.latestVersion)"), message)
        }
    }

    func testWriterIsDurableWAL() throws {
        let store = try openStore()
        let (synchronous, journal, foreignKeys, secureDelete) = try store.pool.write { db in
            (try Int.fetchOne(db, sql: "PRAGMA synchronous"), try String.fetchOne(db, sql: "PRAGMA journal_mode"),
             try Int.fetchOne(db, sql: "PRAGMA foreign_keys"), try Int.fetchOne(db, sql: "PRAGMA secure_delete"))
        }
        XCTAssertEqual(synchronous, 2, "synchronous must be FULL")
        XCTAssertEqual(journal, "wal")
        XCTAssertEqual(foreignKeys, 1)
        XCTAssertEqual(secureDelete, 1)
    }

    func testBusyStoreReportsBusy() throws {
        let store = try openStore()
        let blocker = try rawConnection()
        try blocker.writeWithoutTransaction { db in
            try db.execute(sql: "BEGIN EXCLUSIVE")
            defer { try? db.execute(sql: "ROLLBACK") }
            XCTAssertThrowsError(try store.write { try $0.upsertUser(userId: "bob", username: nil, at: Date()) }) { error in
                XCTAssertEqual((error as? StorageError)?.code, .busy)
            }
        }
    }

    func testTimestampsRoundTripAndSortAsText() {
        let dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_795_000_000.123),
                     Date(timeIntervalSince1970: 4_102_444_800.999)]
        for date in dates {
            let text = Timestamp.string(from: date)
            XCTAssertEqual(text.count, 24, text)
            XCTAssertEqual(Timestamp.date(from: text)?.timeIntervalSince1970 ?? -1, date.timeIntervalSince1970, accuracy: 0.001)
        }
        XCTAssertEqual(Timestamp.string(from: Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(dates.map(Timestamp.string(from:)), dates.map(Timestamp.string(from:)).sorted())
        XCTAssertNil(Timestamp.date(from: "2026-13-01"))
        XCTAssertNotNil(Timestamp.date(from: "2026-11-23"))
        XCTAssertNotNil(Timestamp.date(from: "2026-11-23T10:00:00Z"))
    }
}

final class TimestampLimitsTests: XCTestCase {
    func testDatesOutsideYears1To9999AreClampedNotFatal() {
        XCTAssertEqual(Timestamp.string(from: Date(timeIntervalSince1970: 1e15)), "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(Timestamp.string(from: Date(timeIntervalSince1970: -1e15)), "0001-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamp.string(from: .distantFuture), "4001-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamp.string(from: .distantPast), "0001-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamp.milliseconds(Date(timeIntervalSince1970: 1e300)), Timestamp.milliseconds(Date(timeIntervalSince1970: 1e15)))
        XCTAssertEqual(Timestamp.milliseconds(Date(timeIntervalSince1970: 1.2345)), 1235)
    }
}
