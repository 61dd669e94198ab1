/// An OAuth error code a server answers with (`error` in a JSON body, RFC 6749 §5.2, or in a `WWW-Authenticate`
/// challenge, RFC 6750 §3.1): the codes keymgr acts on by name, and `unknown` for any other, kept as sent.
public enum OAuthErrorCode: Sendable, Hashable, CustomStringConvertible {
    case invalidRequest
    case invalidClient
    case invalidGrant
    case unauthorizedClient
    case unsupportedGrantType
    case invalidScope
    /// RFC 6750: a resource server refusing the access token.
    case invalidToken
    case insufficientScope
    /// RFC 9449: the DPoP proof was refused, or the server wants a fresh nonce in it.
    case invalidDPoPProof
    case useDPoPNonce
    /// RFC 8628: the device grant's answers while the person has not approved yet, or after they stopped.
    case authorizationPending
    case slowDown
    case accessDenied
    case expiredToken
    /// RFC 7591: the registration's metadata was refused.
    case invalidClientMetadata
    case invalidRedirectURI
    /// Any other code, as the server spelled it.
    case unknown(String)

    private static let known: [(OAuthErrorCode, String)] = [
        (.invalidRequest, "invalid_request"), (.invalidClient, "invalid_client"), (.invalidGrant, "invalid_grant"),
        (.unauthorizedClient, "unauthorized_client"), (.unsupportedGrantType, "unsupported_grant_type"),
        (.invalidScope, "invalid_scope"), (.invalidToken, "invalid_token"), (.insufficientScope, "insufficient_scope"),
        (.invalidDPoPProof, "invalid_dpop_proof"), (.useDPoPNonce, "use_dpop_nonce"),
        (.authorizationPending, "authorization_pending"), (.slowDown, "slow_down"), (.accessDenied, "access_denied"),
        (.expiredToken, "expired_token"), (.invalidClientMetadata, "invalid_client_metadata"),
        (.invalidRedirectURI, "invalid_redirect_uri"),
    ]

    /// The code a server sent (codes are case-sensitive: `Invalid_Grant` is another, unknown, code).
    public init(_ text: String) {
        self = Self.known.first(where: { $0.1 == text })?.0 ?? .unknown(text)
    }

    /// The code as it goes on the wire.
    public var rawValue: String {
        if case .unknown(let text) = self { return text }
        return Self.known.first(where: { $0.0 == self })?.1 ?? ""
    }

    public var description: String { rawValue }
}
