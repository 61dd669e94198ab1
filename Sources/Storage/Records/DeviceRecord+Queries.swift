import Foundation
import GRDB

// The queries of `DeviceRecord`: reads for any snapshot, changes inside a write transaction.

extension StoreReader {
    /// The device row, or nil before `init`.
    public func device() throws -> DeviceRecord? { try DeviceRecord.fetchOne(db, key: 1) }
}

extension StoreWriter {
    /// Inserts or replaces the device row.
    public func save(_ device: DeviceRecord) throws { try device.save(db) }
}
