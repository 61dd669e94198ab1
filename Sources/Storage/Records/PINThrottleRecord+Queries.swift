import Foundation
import GRDB

// The queries of `PINThrottleRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The throttle state of `uid`, its MAC checked; nil when it never guessed another person's PIN wrong.
    package func pinThrottle(uid: Int64) throws -> PINThrottleRecord? {
        try checkedOne(PINThrottleRecord.self, "pin_throttle", sql: "SELECT * FROM pin_throttle WHERE uid = ?", arguments: [uid])
    }

    /// Every uid's throttle state, each MAC checked (`status` of the whole device).
    package func pinThrottles() throws -> [PINThrottleRecord] {
        try checkedAll(PINThrottleRecord.self, "pin_throttle", sql: "SELECT * FROM pin_throttle ORDER BY uid")
    }
}

extension StoreWriter {
    package func save(_ throttle: PINThrottleRecord) throws { try throttle.save(db) }
}
