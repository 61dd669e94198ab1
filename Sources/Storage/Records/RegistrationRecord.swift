import Foundation
import GRDB

/// A Dynamic Client Registration (RFC 7591/7592) of one user at one server. Secrets are sealed.
package struct RegistrationRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "registrations"

    package var userId: String
    package var serverName: String
    package var clientId: String
    package var sealedClientSecret: Data?
    package var sealedRegistrationAccessToken: Data?
    package var registrationClientUri: String?
    package var clientIdIssuedAt: Int64?
    package var clientSecretExpiresAt: Int64?
    package var tokenEndpointAuthMethod: String?
    /// JSON array of grant types.
    package var grantTypes: String?
    package var scope: String?
    package var softwareId: String?
    /// Every other non-secret field of the server's response, as JSON.
    package var metadata: String
    /// `active` or `revoked`.
    package var status: String
    package var createdAt: Date
    package var updatedAt: Date

    package init(userId: String, serverName: String, clientId: String, sealedClientSecret: Data?,
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
