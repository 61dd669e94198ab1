import Foundation
import GRDB

/// A configured identity server profile: settings only, never a secret.
public struct ServerRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "servers"

    /// The profile's name; `default` is the one `keymgr server set` writes.
    public var name: String
    /// `pingam` or `curity`.
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
    /// `bound` (DPoP) or `unbound`.
    public var tokenBinding: String
    public var updatedAt: Date

    public init(name: String = "default", dialect: String, baseUrl: String, realmPath: String = "/realms/root",
                credentialFile: String? = nil, credentialHeader: String = "Authorization",
                tokenEndpoint: String? = nil, registrationEndpoint: String? = nil, revocationEndpoint: String? = nil,
                deviceAuthorizationEndpoint: String? = nil, tokenBinding: String = "bound", updatedAt: Date) {
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
