import Foundation
import GRDB
import KeymgrCore

/// The `oauth_clients` table: one dynamically registered client.
struct OAuthClientRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "oauth_clients"
    var clientId: String
    /// nil for a public client (`token_endpoint_auth_method` `none`).
    var clientSecret: String?
    var registrationToken: String
    var registrationTokenExpiresAt: Double
    /// The client metadata (RFC 7591), extension members included, as a JSON object.
    var metadataJSON: String
    /// The template it was made from (`software_id`), if any.
    var template: String?
    var issuedAt: Double
    /// `active` or `revoked` (Curity's `dynamically_registered_clients.status`).
    var status: String

    var metadata: [String: JSONValue] {
        JSONValue.parseObjectText(metadataJSON) ?? [:]
    }

    var authMethod: String {
        metadata["token_endpoint_auth_method"]?.stringValue ?? ClientAuthMethod.basic
    }

    var grantTypes: [String] {
        metadata["grant_types"]?.arrayValue?.compactMap(\.stringValue) ?? [GrantType.authorizationCode]
    }
}

/// The `oauth_tokens` table: every access and refresh token issued.
struct OAuthTokenRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "oauth_tokens"
    var token: String
    /// `access` or `refresh`.
    var kind: String
    var clientId: String
    var subject: String
    var scope: String
    /// The RFC 7638 thumbprint of the DPoP key the token is bound to (`cnf.jkt`), nil = Bearer.
    var jkt: String?
    /// Every token of one grant (the first token set and all its refreshes) shares it.
    var grantId: String
    var issuedAt: Double
    var expiresAt: Double
    /// `active`, `used` (a refresh token spent by a refresh) or `revoked`.
    var status: String
    /// How many times the token was presented (refresh tokens at the token endpoint, access tokens at the resource).
    var presentations: Int
}

/// The `oauth_device_codes` table: RFC 8628 device authorization requests.
struct OAuthDeviceCodeRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "oauth_device_codes"
    var deviceCode: String
    /// Normalized: upper case, no separator (`BCDFGHJK`); shown as `BCDF-GHJK`.
    var userCode: String
    var clientId: String
    var scope: String
    var expiresAt: Double
    var interval: Int
    var lastPoll: Double?
    /// `pending`, `approved`, `denied` or `redeemed`.
    var status: String
    var subject: String?
    /// The DPoP key thumbprint of the device authorization request, if it carried a proof.
    var jkt: String?
}

extension JSONValue {
    static func parseObjectText(_ text: String) -> [String: JSONValue]? {
        (try? JSONValue.parse(Array(text.utf8)))?.objectValue
    }
}

/// The authorization server's tables, in the reference server's SQLite file.
struct OAuthStore: Sendable {
    let database: DatabaseQueue

    init(database: DatabaseQueue) throws {
        self.database = database
        try database.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS oauth_clients (
                        clientId TEXT PRIMARY KEY,
                        clientSecret TEXT,
                        registrationToken TEXT NOT NULL,
                        registrationTokenExpiresAt REAL NOT NULL,
                        metadataJSON TEXT NOT NULL,
                        template TEXT,
                        issuedAt REAL NOT NULL,
                        status TEXT NOT NULL
                    );
                    CREATE TABLE IF NOT EXISTS oauth_tokens (
                        token TEXT PRIMARY KEY,
                        kind TEXT NOT NULL,
                        clientId TEXT NOT NULL,
                        subject TEXT NOT NULL,
                        scope TEXT NOT NULL,
                        jkt TEXT,
                        grantId TEXT NOT NULL,
                        issuedAt REAL NOT NULL,
                        expiresAt REAL NOT NULL,
                        status TEXT NOT NULL,
                        presentations INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX IF NOT EXISTS oauth_tokens_by_grant ON oauth_tokens (grantId);
                    CREATE TABLE IF NOT EXISTS oauth_device_codes (
                        deviceCode TEXT PRIMARY KEY,
                        userCode TEXT NOT NULL UNIQUE,
                        clientId TEXT NOT NULL,
                        scope TEXT NOT NULL,
                        expiresAt REAL NOT NULL,
                        interval INTEGER NOT NULL,
                        lastPoll REAL,
                        status TEXT NOT NULL,
                        subject TEXT,
                        jkt TEXT
                    );
                    """)
        }
    }

    // MARK: clients

    func insert(_ client: OAuthClientRow) async throws {
        try await database.write { db in try client.insert(db) }
    }

    func client(_ clientId: String) async throws -> OAuthClientRow? {
        try await database.read { db in try OAuthClientRow.fetchOne(db, key: clientId) }
    }

    func save(_ client: OAuthClientRow) async throws {
        try await database.write { db in try client.save(db) }
    }

    func clients() async throws -> [OAuthClientRow] {
        try await database.read { db in try OAuthClientRow.order(Column("issuedAt")).fetchAll(db) }
    }

    /// Deletes the client and revokes its tokens; returns false when there was no such client.
    func deleteClient(_ clientId: String) async throws -> Bool {
        try await database.write { db in
            guard try OAuthClientRow.deleteOne(db, key: clientId) else { return false }
            try db.execute(
                sql: "UPDATE oauth_tokens SET status = 'revoked' WHERE clientId = ? AND status = 'active'",
                arguments: [clientId])
            return true
        }
    }

    /// Marks the client revoked (an administrator's action) and revokes its tokens.
    func revokeClient(_ clientId: String) async throws -> Bool {
        try await database.write { db in
            guard var client = try OAuthClientRow.fetchOne(db, key: clientId) else { return false }
            client.status = "revoked"
            try client.update(db)
            try db.execute(
                sql: "UPDATE oauth_tokens SET status = 'revoked' WHERE clientId = ? AND status = 'active'",
                arguments: [clientId])
            return true
        }
    }

    // MARK: tokens

    func insert(_ tokens: [OAuthTokenRow]) async throws {
        try await database.write { db in for token in tokens { try token.insert(db) } }
    }

    func token(_ token: String) async throws -> OAuthTokenRow? {
        try await database.read { db in try OAuthTokenRow.fetchOne(db, key: token) }
    }

    func tokens() async throws -> [OAuthTokenRow] {
        try await database.read { db in try OAuthTokenRow.order(Column("issuedAt"), Column("kind")).fetchAll(db) }
    }

    /// Counts one presentation of `token` (when the server knows it).
    func countPresentation(of token: String) async throws {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE oauth_tokens SET presentations = presentations + 1 WHERE token = ?", arguments: [token])
        }
    }

    /// Runs `body` in one write transaction, so a refresh's check, spend and issue are one step.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await database.write(body)
    }

    /// Revokes the token; a refresh token takes its whole grant (the access tokens issued with it) along.
    func revoke(_ row: OAuthTokenRow) async throws {
        try await database.write { db in
            if row.kind == "refresh" {
                try db.execute(
                    sql: "UPDATE oauth_tokens SET status = 'revoked' WHERE grantId = ? AND status != 'used'",
                    arguments: [row.grantId])
            } else {
                try db.execute(sql: "UPDATE oauth_tokens SET status = 'revoked' WHERE token = ?", arguments: [row.token])
            }
        }
    }

    // MARK: device codes

    func insert(_ code: OAuthDeviceCodeRow) async throws {
        try await database.write { db in try code.insert(db) }
    }

    func deviceCodes() async throws -> [OAuthDeviceCodeRow] {
        try await database.read { db in try OAuthDeviceCodeRow.fetchAll(db) }
    }

    /// Applies `change` to the device code found by its user code; nil when there is none.
    func updateDeviceCode(
        userCode: String, _ change: @escaping @Sendable (inout OAuthDeviceCodeRow) -> Void
    ) async throws -> OAuthDeviceCodeRow? {
        try await database.write { db in
            guard var row = try OAuthDeviceCodeRow.filter(Column("userCode") == userCode).fetchOne(db) else {
                return nil
            }
            change(&row)
            try row.update(db)
            return row
        }
    }
}
