import Foundation
import GRDB

/// The OAuth tokens of one user at one server, and the DPoP key they are bound to. Secrets are sealed.
public struct TokenRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "tokens"

    public var userId: String
    public var serverName: String
    public var clientId: String
    /// `DPoP` or `Bearer`.
    public var tokenType: String
    public var sealedAccessToken: Data?
    public var sealedRefreshToken: Data?
    public var sealedIdToken: Data?
    public var scope: String?
    public var expiresAt: Date?
    /// RFC 7638 thumbprint of the DPoP key the tokens are bound to.
    public var jkt: String?
    public var sealedDpopKey: Data?
    public var updatedAt: Date

    public init(userId: String, serverName: String, clientId: String, tokenType: String, sealedAccessToken: Data?,
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
