import Foundation
import KeymgrCore

/// The authorization server's Swift surface for tests (the same operations as `/__refserver/oauth/…`).
extension ReferenceServer {
    /// The issuer: the base URL plus the configured issuer path.
    public var oauthIssuer: URL {
        URL(string: baseURL.absoluteString + configuration.oauth.issuerPath) ?? baseURL
    }

    /// `{base}/oauth/v2/oauth-token`.
    public var oauthTokenEndpoint: URL { oauthURL(OAuthPath.token) }
    /// `{base}/oauth/v2/oauth-dynamic-client-registration`.
    public var oauthRegistrationEndpoint: URL { oauthURL(OAuthPath.registration) }
    /// `{base}/oauth/v2/oauth-revoke`.
    public var oauthRevocationEndpoint: URL { oauthURL(OAuthPath.revocation) }
    /// `{base}/oauth/v2/oauth-device-authorization`.
    public var oauthDeviceAuthorizationEndpoint: URL { oauthURL(OAuthPath.deviceAuthorization) }
    /// `{base}/oauth/v2/oauth-introspect` (RFC 7662).
    public var oauthIntrospectionEndpoint: URL { oauthURL(OAuthPath.introspection) }
    /// `{base}/oauth/v2/oauth-userinfo`: the DPoP-protected resource.
    public var oauthUserinfoEndpoint: URL { oauthURL(OAuthPath.userinfo) }

    private func oauthURL(_ segments: [String]) -> URL {
        URL(string: baseURL.absoluteString + OAuthPath.string(segments)) ?? baseURL
    }

    /// Every registered client, oldest first.
    public func oauthClients() async throws -> [OAuthClientInfo] {
        try await OAuthAdministration(handler: handler).clients()
    }

    /// Every issued token.
    public func oauthTokens() async throws -> [OAuthTokenInfo] {
        try await OAuthAdministration(handler: handler).tokens()
    }

    /// How many times `token` was presented (0 for a token the server never issued).
    public func presentations(ofToken token: String) async throws -> Int {
        try await handler.oauth.store.token(token)?.presentations ?? 0
    }

    /// Issues a token set as if `subject` had logged in with the client; bound to `jkt` when given.
    /// Returns the token response as the token endpoint would send it.
    public func mintOAuthTokens(
        clientId: String, subject: String, scope: String? = nil, jkt: String? = nil
    ) async throws -> JSONValue {
        try await OAuthAdministration(handler: handler).mintTokens(
            clientId: clientId, subject: subject, scope: scope, jkt: jkt)
    }

    /// Approves the device authorization request with `userCode` as `subject`; its status, nil when unknown.
    @discardableResult
    public func approveDevice(userCode: String, subject: String) async throws -> String? {
        try await OAuthAdministration(handler: handler).decide(userCode: userCode, .approve(subject: subject))
    }

    /// Denies the device authorization request with `userCode`.
    @discardableResult
    public func denyDevice(userCode: String) async throws -> String? {
        try await OAuthAdministration(handler: handler).decide(userCode: userCode, .deny)
    }

    /// Makes the device authorization request with `userCode` expire now.
    @discardableResult
    public func expireDevice(userCode: String) async throws -> String? {
        try await OAuthAdministration(handler: handler).decide(userCode: userCode, .expire)
    }

    /// Issues new DPoP nonces (the previous ones stay valid until the next rotation).
    public func rotateDPoPNonces() async throws {
        let now = configuration.clock()
        try await handler.oauth.state.rotateNonce(.authorizationServer, now: now)
        try await handler.oauth.state.rotateNonce(.resourceServer, now: now)
    }

    /// Arms a fault on an OAuth endpoint for the next `count` requests (nil: until cleared). Outages
    /// replace each other; quirks add up.
    public func setOAuthFault(_ fault: OAuthFault, on endpoint: OAuthEndpoint, count: Int? = nil) async {
        await handler.oauth.state.setFault(fault, endpoint: endpoint, count: count.map { max(1, $0) })
    }

    /// Clears the faults of `endpoint`, or of every endpoint.
    public func clearOAuthFaults(on endpoint: OAuthEndpoint? = nil) async {
        await handler.oauth.state.clearFaults(endpoint: endpoint)
    }
}
