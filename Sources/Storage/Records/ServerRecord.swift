import Foundation
import GRDB

/// A configured identity server profile: settings only, never a secret.
package struct ServerRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "servers"

    /// The profile's name; `default` is the one `keymgr server set` writes.
    package var name: String
    /// Whether tokens are bound to a DPoP key.
    package enum TokenBinding: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case bound, unbound
    }

    /// Which wire formats the server speaks, as the dialect spells itself in this table (`pingam`, `curity` for the
    /// OAuth dialect: the first schema's name for it). Storage keeps it as text; KeyManager knows the dialects.
    package var dialect: String
    package var baseUrl: String
    package var realmPath: String
    /// Where the admin credential is read from; nil means `$CREDENTIALS_DIRECTORY/keymgr.admin`.
    package var credentialFile: String?
    /// `Authorization` (sent as a Bearer token) or a header name such as `iPlanetDirectoryPro`.
    package var credentialHeader: String
    package var tokenEndpoint: String?
    package var registrationEndpoint: String?
    package var revocationEndpoint: String?
    package var deviceAuthorizationEndpoint: String?
    package var tokenBinding: TokenBinding
    package var updatedAt: Date
    /// Whether plain `http://` to a host other than loopback was allowed (`server set --allow-insecure-http`).
    package var allowInsecureHttp: Bool = false
    /// Seconds the server's clock is ahead of this device's (negative: behind), from its answers' `Date` header;
    /// nil or 0 when no skew is known.
    package var clockOffsetSeconds: Int64?

    package init(name: String = "default", dialect: String, baseUrl: String, realmPath: String = "/realms/root",
                credentialFile: String? = nil, credentialHeader: String = "Authorization",
                tokenEndpoint: String? = nil, registrationEndpoint: String? = nil, revocationEndpoint: String? = nil,
                deviceAuthorizationEndpoint: String? = nil, tokenBinding: TokenBinding = .bound, updatedAt: Date) {
        self.name = name
        self.dialect = dialect
        self.baseUrl = baseUrl
        self.realmPath = realmPath
        self.credentialFile = credentialFile
        self.credentialHeader = credentialHeader
        self.tokenEndpoint = tokenEndpoint
        self.registrationEndpoint = registrationEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.tokenBinding = tokenBinding
        self.updatedAt = updatedAt
    }
}
