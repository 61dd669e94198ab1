import Foundation

/// One schema migration, embedded into the binary at build time from `migrations/NNNN_name.sql`.
public struct EmbeddedMigration: Sendable {
    /// The migration's number, `NNNN` in its file name.
    public let version: Int
    /// The rest of its file name, without the `.sql` extension.
    public let name: String
    let base64SQL: String

    /// The migration's SQL text.
    public var sql: String {
        guard let data = Data(base64Encoded: base64SQL) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }
}

extension EmbeddedMigration {
    /// Every migration this binary knows, in version order.
    public static var all: [EmbeddedMigration] { embeddedMigrations.sorted { $0.version < $1.version } }
    /// The schema version this binary writes.
    public static var latestVersion: Int { all.last?.version ?? 0 }
}
