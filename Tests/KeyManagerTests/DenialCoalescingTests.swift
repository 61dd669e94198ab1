import Foundation
@testable import KeyManager
import Synchronization
import XCTest

/// W7: an agent caller's repeated denials within a minute are one audit entry with a count, written at most once a
/// minute; the counts waiting are written when the uid is next denied after the minute, or when the log is read.
final class DenialCoalescingTests: KeyManagerTestCase {
    /// The time the managers below read, set by the test.
    private final class Clock: Sendable {
        let now = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
    }

    private let clock = Clock()

    private func manager(at seconds: Double) throws -> KeyManager {
        clock.now.withLock { $0 = Date(timeIntervalSince1970: 1_800_000_000 + seconds) }
        let clock = self.clock
        return try KeyManager.openEmbedded(home: home, environment: [:], now: { clock.now.withLock { $0 } })
    }

    private func deny(_ manager: KeyManager, uid: UInt32, target: String = "carol") throws {
        try manager.recordCoalescedDenial(uid: uid, operation: "sign", reason: "no rule lets uid \(uid) sign",
                                          target: target)
    }

    /// The `agent.denied` entries as the store holds them (read without writing the waiting counts).
    private func denialRows() throws -> [(actor: String, count: Int64, target: String?)] {
        try manager.read { reader in
            try reader.auditEvents(.init(event: "agent.denied")).map { record in
                let details = JSONValue.parseCommon(record.details)
                guard case .object(let members)? = details, case .int(let count)? = members["count"] else {
                    return (record.actor, -1, nil)
                }
                if case .string(let target)? = members["target"] { return (record.actor, count, target) }
                return (record.actor, count, nil)
            }
        }
    }

    func testRepeatsWithinAMinuteAreCountedAndWrittenOnceTheMinuteIsOver() throws {
        let early = try manager(at: 0)
        for _ in 0..<25 { try deny(early, uid: 4343) }
        try deny(early, uid: 4242)  // another uid has its own minute
        XCTAssertEqual(try denialRows().map(\.count), [1, 1], "the first denial of each uid is written, the rest counted")

        let late = try manager(at: 59)
        try deny(late, uid: 4343, target: "dave")
        XCTAssertEqual(try denialRows().count, 2, "still within the minute")

        let next = try manager(at: 61)
        try deny(next, uid: 4343, target: "erin")
        let rows = try denialRows()
        XCTAssertEqual(rows.map(\.count), [1, 1, 26], "the 24 counted, the one at 59 s and this one")
        XCTAssertEqual(rows.last?.target, "erin", "the entry names the newest denial")

        // Counted again from the entry just written; reading the log writes what waits, whatever its age.
        try deny(next, uid: 4343)
        try deny(next, uid: 4343)
        XCTAssertEqual(try denialRows().count, 3)
        let read = try next.auditEntries(AuditFilter(event: "agent.denied"))
        XCTAssertEqual(read.count, 4)
        XCTAssertEqual(try denialRows().map(\.count), [1, 1, 26, 2])
        XCTAssertTrue(try next.verifyAudit().isIntact)
    }
}
