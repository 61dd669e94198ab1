import Foundation
import GRDB
@testable import KeyManager
@testable import Storage
import XCTest

/// Migration 0007 (person links) on a store made before it: the first open with the master key links each identity
/// user whose user id, universalId `id=` value or username (in that order) is an existing login, once, audited as
/// `person.linked` with reason `migrated`; the new table is covered by the row MACs from then on.
final class PersonLinkMigrationTests: KeyManagerTestCase {
    func bind(_ userId: String, username: String?) throws {
        var request = BindRequest(userId: userId)
        request.username = username
        _ = try manager.bind(request, newPIN: noPIN)
    }

    func testAStoreMadeBeforeLinksLinksEachIdentityNamedAfterALoginOnce() throws {
        // Logins every Debian system has: root (0), daemon (1), bin (2), nobody (65534).
        try bind("root", username: nil)
        try bind("id=daemon,ou=user,ou=am-config", username: nil)
        try bind("u-65534", username: "nobody")
        try bind("bin", username: "daemon")  // its user id is a login: that one decides
        try bind("no-such-login-zz", username: "nor-this-one-zz")
        try makeSchema6Store()

        manager = try reopen()
        XCTAssertEqual(try manager.status().schemaVersion, EmbeddedMigration.latestVersion)
        let links = try manager.personLinks()
        XCTAssertEqual(links.map { "\($0.userId) -> \($0.login) (uid \($0.uid))" }, [
            "bin -> bin (uid 2)", "id=daemon,ou=user,ou=am-config -> daemon (uid 1)", "u-65534 -> nobody (uid 65534)",
            "root -> root (uid 0)",
        ])
        XCTAssertEqual(Set(links.map(\.linkedBy)), ["migrated"])
        let audited = try manager.auditEntries(AuditFilter(event: "person.linked"))
        XCTAssertEqual(audited.compactMap(\.userId).sorted(), ["bin", "id=daemon,ou=user,ou=am-config", "root", "u-65534"])
        for entry in audited {
            guard case .object(let details) = entry.details else { return XCTFail("\(entry)") }
            XCTAssertEqual(details["reason"], .string("migrated"))
        }
        XCTAssertEqual(try manager.users().first { $0.userId == "root" }?.owner, "root", "users shows the owner")
        let verified = try manager.verifyAudit()
        XCTAssertTrue(verified.isIntact)
        XCTAssertEqual(verified.rowIssues, [])

        // Once: an administrator's unlink is not undone by the next open.
        try manager.unlinkPerson(login: "root", userId: "root")
        manager = try reopen()
        XCTAssertEqual(try manager.personLinks().count, 3)
        XCTAssertEqual(try manager.auditEntries(AuditFilter(event: "person.linked")).count, 4)

        // The links are covered by the row MACs like every other table.
        manager = nil
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE person_links SET uid = 1001 WHERE user_id = 'bin'")
        }
        manager = try reopen()
        assertCode(.tampered) { _ = try self.manager.personLinks() }
    }

    /// What keymgr of schema 6 left: none of the later migrations' tables and columns, and the row sets committed under
    /// schema 6.
    private func makeSchema6Store() throws {
        let keys = manager.integrity.rowKeys
        manager = nil
        try rawConnection().writeWithoutTransaction { db in
            try db.execute(sql: undoingMigrations(after: 6) + "PRAGMA user_version = 6;")
            let text = try XCTUnwrap(try String.fetchOne(db, sql: "SELECT row_sets FROM device WHERE id = 1"))
            let later = ["person_links ", "pin_throttle "]  // tables of migrations after 0006
            let lines = text.split(separator: "\n").filter { line in !later.contains { line.hasPrefix($0) } }.map { line in
                line.hasPrefix("keymgr-row-sets-v1 ") ? "keymgr-row-sets-v1 schema=6" : String(line)
            }
            try db.execute(sql: "UPDATE device SET row_sets = ? WHERE id = 1", arguments: [lines.joined(separator: "\n") + "\n"])
            let row = try XCTUnwrap(try Row.fetchOne(db, sql: "SELECT * FROM device WHERE id = 1"))
            let (columns, values) = RowIntegrity.columnsAndValues(of: row)
            let mac = try keys.mac(RowIntegrity.encoding(table: "device", columns: columns, values: values))
            try db.execute(sql: "UPDATE device SET row_mac = ? WHERE id = 1", arguments: [Data(mac)])
        }
    }
}
