import Foundation
import GRDB

/// What every keymgr record shares: snake_case columns and keymgr's timestamp format.
public protocol KeymgrRecord: Codable, Sendable, FetchableRecord, PersistableRecord {}

extension KeymgrRecord {
    public static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }
    public static var databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy { .convertToSnakeCase }
    public static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy {
        .custom { Timestamp.string(from: $0) }
    }
    public static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .custom { value in String.fromDatabaseValue(value).flatMap(Timestamp.date(from:)) }
    }
}
