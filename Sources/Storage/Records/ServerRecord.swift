import Foundation
import GRDB

/// A configured identity server profile: settings only, never a secret.
public struct ServerRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "servers"

    /// The profile's name; `default` is the one `keymgr server set` writes.
    public var name: String
    /// Whether tokens are bound to a DPoP key.
    public enum TokenBinding: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case bound, unbound
    }

    /// Which wire formats the server speaks, as the dialect spells itself in this table (`pingam`, `curity` for the
    /// OAuth dialect: the first schema's name for it). Storage keeps it as text; KeyManager knows the dialects.
    public var dialect: String
    public var baseUrl: String
    public var realmPath: String
    /// Where the admin credential is read from; nil means `$CREDENTIALS_DIRECTORY/keymgr.admin`.
    public var credentialFile: String?
    /// `Authorization` (sent as a Bearer token) or a header name such as `iPlanetDirectoryPro`.
    public var credentialHeader: String
    public var tokenEndpoint: String?
    public var registrationEndpoint: String?
    public var revocationEndpoint: String?
    public var deviceAuthorizationEndpoint: String?
    public var tokenBinding: TokenBinding
    public var updatedAt: Date
    /// Whether plain `http://` to a host other than loopback was allowed (`server set --allow-insecure-http`).
    public var allowInsecureHttp: Bool = false
    /// HMAC under a master-derived key over the fields that gate access (nil only before a legacy store is stamped).
    public var integrityMac: Data?

    public init(name: String = "default", dialect: String, baseUrl: String, realmPath: String = "/realms/root",
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
