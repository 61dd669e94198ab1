import Foundation
import GRDB

/// The OAuth tokens of one user at one server, and the DPoP key they are bound to. Secrets are sealed.
package struct TokenRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "tokens"

    package var userId: String
    package var serverName: String
    package var clientId: String
    /// `DPoP` or `Bearer`.
    package var tokenType: String
    package var sealedAccessToken: Data?
    package var sealedRefreshToken: Data?
    package var sealedIdToken: Data?
    package var scope: String?
    package var expiresAt: Date?
    /// RFC 7638 thumbprint of the DPoP key the tokens are bound to.
    package var jkt: String?
    package var sealedDpopKey: Data?
    package var updatedAt: Date

    package init(userId: String, serverName: String, clientId: String, tokenType: String, sealedAccessToken: Data?,
                sealedRefreshToken: Data?, sealedIdToken: Data?, scope: String?, expiresAt: Date?, jkt: String?,
                sealedDpopKey: Data?, updatedAt: Date) {
        self.userId = userId
        self.serverName = serverName
        self.clientId = clientId
        self.tokenType = tokenType
        self.sealedAccessToken = sealedAccessToken
        self.sealedRefreshToken = sealedRefreshToken
        self.sealedIdToken = sealedIdToken
        self.scope = scope
        self.expiresAt = expiresAt
        self.jkt = jkt
        self.sealedDpopKey = sealedDpopKey
        self.updatedAt = updatedAt
    }
}
