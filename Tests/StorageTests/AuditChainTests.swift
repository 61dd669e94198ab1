import Foundation
import GRDB
@testable import Storage
import XCTest

final class AuditChainTests: StorageTestCase {
    /// A store with five chained entries, and a raw connection with the append-only triggers dropped,
    /// as someone editing the file directly would have.
    private func storeWithFiveEntries() throws -> (Store, DatabaseQueue) {
        let store = try openStore()
        for index in 1...5 {
            try store.write { writer in
                try writer.appendAudit(NewAuditEvent(at: Date(timeIntervalSince1970: 1_795_000_000 + Double(index)),
                                                     event: "test.event\(index)", userId: "user\(index)", kid: nil,
                                                     actor: "tester", details: "{\"n\":\(index)}"))
            }
        }
        let raw = try rawConnection()
        try raw.write { db in
            try db.execute(sql: "DROP TRIGGER audit_events_append_only_update")
            try db.execute(sql: "DROP TRIGGER audit_events_append_only_delete")
        }
        return (store, raw)
    }

    func testIntactChainVerifies() throws {
        let (store, _) = try storeWithFiveEntries()
        let report = try store.read { try $0.verifyAuditChain() }
        XCTAssertTrue(report.isIntact)
        XCTAssertEqual(report.checked, 5)
        let entries = try store.read { try $0.auditEvents() }
        XCTAssertEqual(entries.first?.prevHash, String(repeating: "0", count: 64))
        XCTAssertEqual(entries.dropFirst().map(\.prevHash), entries.dropLast().map(\.hash))
    }

    func testTheLogRefusesUpdatesAndDeletesThroughSQLite() throws {
        let store = try openStore()
        try store.write { try $0.appendAudit(NewAuditEvent(at: Date(), event: "x", actor: "t")) }
        XCTAssertThrowsError(try rawConnection().write { try $0.execute(sql: "UPDATE audit_events SET event = 'y'") })
        XCTAssertThrowsError(try rawConnection().write { try $0.execute(sql: "DELETE FROM audit_events") })
    }

    func testEditedEntryIsFoundWhereItWasEdited() throws {
        let (store, raw) = try storeWithFiveEntries()
        try raw.write { try $0.execute(sql: "UPDATE audit_events SET details = '{\"n\":99}' WHERE seq = 3") }
        let report = try store.read { try $0.verifyAuditChain() }
        XCTAssertEqual(report.firstBad?.seq, 3)
        XCTAssertEqual(report.checked, 2)
    }

    func testDeletedEntryIsFoundAtTheEntryAfterIt() throws {
        let (store, raw) = try storeWithFiveEntries()
        try raw.write { try $0.execute(sql: "DELETE FROM audit_events WHERE seq = 3") }
        XCTAssertEqual(try store.read { try $0.verifyAuditChain() }.firstBad?.seq, 4)
    }

    func testSwappedEntriesAreFoundAtTheFirstOfThem() throws {
        let (store, raw) = try storeWithFiveEntries()
        try raw.write { db in
            try db.execute(sql: "UPDATE audit_events SET seq = -2 WHERE seq = 2")
            try db.execute(sql: "UPDATE audit_events SET seq = 2 WHERE seq = 4")
            try db.execute(sql: "UPDATE audit_events SET seq = 4 WHERE seq = -2")
        }
        XCTAssertEqual(try store.read { try $0.verifyAuditChain() }.firstBad?.seq, 2)
    }

    func testRehashedEditIsStillCaughtByTheNextEntry() throws {
        let (store, raw) = try storeWithFiveEntries()
        // Someone who edits an entry and recomputes its own hash still breaks the link to the next one.
        var edited = try store.read { try $0.auditEvents() }[2]
        edited.details = "{\"n\":42}"
        let newHash = AuditChain.hash(of: edited, digest: store.digest)
        try raw.write { try $0.execute(sql: "UPDATE audit_events SET details = ?, hash = ? WHERE seq = 3",
                                       arguments: [edited.details, newHash]) }
        XCTAssertEqual(try store.read { try $0.verifyAuditChain() }.firstBad?.seq, 4)
    }
}
