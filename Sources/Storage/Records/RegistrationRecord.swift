import Foundation
import GRDB

/// A Dynamic Client Registration (RFC 7591/7592) of one user at one server. Secrets are sealed.
public struct RegistrationRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "registrations"

    public var userId: String
    public var serverName: String
    public var clientId: String
    public var sealedClientSecret: Data?
    public var sealedRegistrationAccessToken: Data?
    public var registrationClientUri: String?
    public var clientIdIssuedAt: Int64?
    public var clientSecretExpiresAt: Int64?
    public var tokenEndpointAuthMethod: String?
    /// JSON array of grant types.
    public var grantTypes: String?
    public var scope: String?
    public var softwareId: String?
    /// Every other non-secret field of the server's response, as JSON.
    public var metadata: String
    /// `active` or `revoked`.
    public var status: String
    public var createdAt: Date
    public var updatedAt: Date

    public init(userId: String, serverName: String, clientId: String, sealedClientSecret: Data?,
                sealedRegistrationAccessToken: Data?, registrationClientUri: String?, clientIdIssuedAt: Int64?,
                clientSecretExpiresAt: Int64?, tokenEndpointAuthMethod: String?, grantTypes: String?, scope: String?,
                softwareId: String?, metadata: String = "{}", status: String = "active", createdAt: Date, updatedAt: Date) {
        self.userId = userId
        self.serverName = serverName
        self.clientId = clientId
        self.sealedClientSecret = sealedClientSecret
        self.sealedRegistrationAccessToken = sealedRegistrationAccessToken
        self.registrationClientUri = registrationClientUri
        self.clientIdIssuedAt = clientIdIssuedAt
        self.clientSecretExpiresAt = clientSecretExpiresAt
        self.tokenEndpointAuthMethod = tokenEndpointAuthMethod
        self.grantTypes = grantTypes
        self.scope = scope
        self.softwareId = softwareId
        self.metadata = metadata
        self.status = status
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
