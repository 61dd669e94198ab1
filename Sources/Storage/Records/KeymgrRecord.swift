import Foundation
import GRDB
import KeymgrCore

/// What every keymgr record shares: snake_case columns and keymgr's timestamp format.
package protocol KeymgrRecord: Codable, Sendable, FetchableRecord, PersistableRecord {}

extension KeymgrRecord {
    package static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }
    package static var databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy { .convertToSnakeCase }
    package static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy {
        .custom { Timestamp.string(from: $0) }
    }
    package static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .custom { value in String.fromDatabaseValue(value).flatMap(Timestamp.date(from:)) }
    }
}
