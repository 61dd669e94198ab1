import Foundation

/// One schema migration, embedded into the binary at build time from `migrations/NNNN_name.sql`.
package struct EmbeddedMigration: Sendable {
    /// The migration's number, `NNNN` in its file name.
    package let version: Int
    /// The rest of its file name, without the `.sql` extension.
    package let name: String
    let base64SQL: String

    /// The migration's SQL text.
    package var sql: String {
        guard let data = Data(base64Encoded: base64SQL) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }
}

extension EmbeddedMigration {
    /// Every migration this binary knows, in version order.
    package static var all: [EmbeddedMigration] { embeddedMigrations.sorted { $0.version < $1.version } }
    /// The schema version this binary writes.
    package static var latestVersion: Int { all.last?.version ?? 0 }
}
