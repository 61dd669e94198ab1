/// Tokens a server issued, to be stored.
public struct IssuedTokens: Sendable, Equatable {
    public var accessToken: String
    /// `DPoP` or `Bearer`.
    public var tokenType: String
    public var expiresIn: Int64?
    public var refreshToken: String?
    public var idToken: String?
    public var scope: String?

    public init(accessToken: String, tokenType: String, expiresIn: Int64?, refreshToken: String?, idToken: String?, scope: String?) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
        self.idToken = idToken
        self.scope = scope
    }
}
